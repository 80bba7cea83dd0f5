"""Image fusion data: bundled photos, crops, task simulators, dataset folders."""

import os
import socket

import numpy as np
import pytest
from PIL import Image

from common.data import fusion_images as fi


@pytest.fixture(scope="module")
def crops():
  return fi.random_crops(fi.load_photos(fi.TEST_PHOTOS), 0, num=6, size=48)


def test_photos_load_from_wheel_files_without_network(monkeypatch):
  def no_network(*args, **kwargs):
    raise AssertionError("network access")
  monkeypatch.setattr(socket, "socket", no_network)
  monkeypatch.setattr(socket, "create_connection", no_network)
  fi._load_photo.cache_clear()
  photos = fi.load_photos()
  assert tuple(photos) == fi.PHOTOS
  import skimage
  import sklearn
  roots = (os.path.dirname(skimage.__file__), os.path.dirname(sklearn.__file__))
  for name, x in photos.items():
    path = fi.photo_path(name)
    assert os.path.isfile(path) and path.startswith(roots), path
    assert x.ndim == 2 and x.dtype == np.float32 and min(x.shape) >= 300, name
    assert 0.0 <= x.min() and x.max() <= 1.0 and x.std() > 0.02, name
  with pytest.raises(ValueError, match="unknown photo 'horse'"):
    fi.load_photos(["horse"])


def test_train_test_split():
  assert not set(fi.TRAIN_PHOTOS) & set(fi.TEST_PHOTOS)
  assert set(fi.TRAIN_PHOTOS) | set(fi.TEST_PHOTOS) == set(fi.PHOTOS)
  assert 3 <= len(fi.TEST_PHOTOS) <= 4


def test_crops_deterministic_and_shaped(crops):
  photos = fi.load_photos(fi.TEST_PHOTOS)
  assert crops.shape == (6, 48, 48) and crops.dtype == np.float32
  np.testing.assert_array_equal(crops, fi.random_crops(photos, 0, num=6, size=48))
  assert not np.array_equal(crops, fi.random_crops(photos, 1, num=6, size=48))
  import jax
  k = jax.random.key(3)
  np.testing.assert_array_equal(fi.random_crops(photos, k, 2, 16, scale=None),
                                fi.random_crops(photos, k, 2, 16, scale=None))
  assert 0.0 <= crops.min() and crops.max() <= 1.0
  prepared = fi.prepare_photos(photos, 48)
  assert tuple(prepared) == fi.TEST_PHOTOS and min(prepared["camera"].shape) == 144
  np.testing.assert_array_equal(fi.random_crops(prepared, 0, 6, 48, scale=None), crops)


@pytest.mark.parametrize("task", list(fi.TASKS))
def test_simulators_shapes_ranges_determinism(crops, task):
  p = fi.make_pairs(task, crops, seed=5)
  q = fi.make_pairs(task, crops, seed=5)
  assert p.task == task
  for x, y in ((p.a, q.a), (p.b, q.b)):
    assert x.shape == crops.shape and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_array_equal(x, y)
  assert not np.array_equal(p.a, fi.make_pairs(task, crops, seed=6).a)
  if task == "infrared_visible":
    assert p.ground_truth is None
  else:
    np.testing.assert_array_equal(p.ground_truth, crops)


def test_multi_exposure_orders_brightness(crops):
  p = fi.multi_exposure(crops, seed=0)
  mean = lambda x: x.mean(axis=(1, 2))
  assert np.all(mean(p.a) < mean(crops)) and np.all(mean(crops) < mean(p.b))
  assert np.mean(p.b == 1.0) > 0.05  # highlights saturate


def test_multi_focus_masks_are_complementary(crops):
  p = fi.multi_focus(crops, seed=0)
  m = p.mask
  assert m.shape == crops.shape and 0.0 <= m.min() and m.max() <= 1.0
  sharp_a, sharp_b = m < 0.01, m > 0.99
  assert sharp_a.mean() > 0.2 and sharp_b.mean() > 0.2
  assert np.abs(p.a - crops)[sharp_a].max() < 0.01
  assert np.abs(p.b - crops)[sharp_b].max() < 0.01
  # Each source is blurred where the other is sharp: the pair averages back to blur + x.
  assert np.abs(p.b - crops)[sharp_a].mean() > 0.01
  assert np.abs(p.a - crops)[sharp_b].mean() > 0.01


def test_infrared_targets_are_hot(crops):
  p = fi.infrared_visible(crops, seed=0)
  for ir, t in zip(p.a, p.mask):
    assert (t > 0.9).any()
    assert ir[t > 0.9].mean() > ir[t < 0.05].mean() + 0.2
  assert p.b.mean() < crops.mean()  # low light


def test_unknown_task_and_bad_images():
  with pytest.raises(ValueError, match="unknown fusion task 'fog'"):
    fi.make_pairs("fog", np.zeros((1, 8, 8), np.float32), 0)
  with pytest.raises(ValueError, match=r"\(n, H, W\)"):
    fi.multi_focus(np.zeros((8, 8), np.float32), 0)
  with pytest.raises(ValueError, match=r"in \[0, 1\]"):
    fi.multi_exposure(np.full((1, 8, 8), 2.0, np.float32), 0)


def test_check_pair():
  fi.check_pair(np.zeros((4, 4)), np.zeros((4, 4)))
  with pytest.raises(ValueError, match=r"\(4, 4\) and \(4, 5\)"):
    fi.check_pair(np.zeros((4, 4)), np.zeros((4, 5)))


# ------------------------------------------------------------------- dataset folders


def _pair(n=3, h=16, w=24):
  rng = np.random.default_rng(0)
  return rng.random((n, h, w)).astype(np.float32), rng.random((n, h, w)).astype(np.float32)


def test_folder_round_trip(tmp_path):
  a, b = _pair()
  names = ["00001", "00002", "night_3"]
  fi.write_fusion_folder(str(tmp_path), a, b, names)
  pair = fi.load_fusion_folder(str(tmp_path))
  assert pair.names == tuple(names) and pair.task == "infrared_visible"
  assert pair.a.dtype == np.float32 and pair.a.shape == a.shape
  np.testing.assert_allclose(pair.a, a, atol=0.5 / 255 + 1e-6)
  np.testing.assert_allclose(pair.b, b, atol=0.5 / 255 + 1e-6)
  assert fi.load_fusion_folder(str(tmp_path), max_images=2).names == tuple(names[:2])
  sized = fi.load_fusion_folder(str(tmp_path), size=8)
  assert sized.a.shape == (3, 8, 8)
  assert fi.load_fusion_folder(str(tmp_path), multiple=16).a.shape == (3, 16, 16)


def test_m3fd_names_and_rgb_visible(tmp_path):
  a, b = _pair(n=2)
  os.makedirs(tmp_path / "Ir")
  os.makedirs(tmp_path / "Vis")
  for i in range(2):
    Image.fromarray((a[i] * 255).round().astype(np.uint8)).save(tmp_path / "Ir" / f"{i}.png")
    rgb = np.repeat((b[i] * 255).round().astype(np.uint8)[..., None], 3, axis=-1)
    Image.fromarray(rgb).save(tmp_path / "Vis" / f"{i}.bmp")
  (tmp_path / "Vis" / ".DS_Store").write_bytes(b"\0")
  pair = fi.load_fusion_folder(str(tmp_path))
  assert pair.names == ("0", "1")
  np.testing.assert_allclose(pair.b, b, atol=0.5 / 255 + 1e-4)


def _written(tmp_path, n=2):
  a, b = _pair(n=n)
  fi.write_fusion_folder(str(tmp_path), a, b, [f"p{i}" for i in range(n)])
  return tmp_path


def test_missing_modality_folder(tmp_path):
  root = _written(tmp_path)
  os.rename(root / "vi", root / "rgb")
  with pytest.raises(ValueError, match="no visible folder.*vis/"):
    fi.load_fusion_folder(str(root))


def test_unpaired_file(tmp_path):
  root = _written(tmp_path)
  os.remove(root / "vi" / "p1.png")
  with pytest.raises(ValueError, match=r"ir/p1\.png: no file with stem 'p1'"):
    fi.load_fusion_folder(str(root))


def test_non_image_file(tmp_path):
  root = _written(tmp_path)
  (root / "ir" / "notes.txt").write_text("hello")
  with pytest.raises(ValueError, match=r"notes\.txt: not an image file"):
    fi.load_fusion_folder(str(root))


def test_pair_of_different_sizes(tmp_path):
  root = _written(tmp_path)
  Image.fromarray(np.zeros((17, 24), np.uint8)).save(root / "vi" / "p0.png")
  with pytest.raises(ValueError, match=r"ir/p0\.png is 16x24 but .*vi/p0\.png is 17x24"):
    fi.load_fusion_folder(str(root))


def test_empty_folder(tmp_path):
  os.makedirs(tmp_path / "ir")
  os.makedirs(tmp_path / "vi")
  with pytest.raises(ValueError, match=r"ir: empty"):
    fi.load_fusion_folder(str(tmp_path))


def test_pairs_of_different_sizes_need_size(tmp_path):
  root = _written(tmp_path)
  img = Image.fromarray(np.zeros((20, 20), np.uint8))
  img.save(root / "ir" / "p9.png")
  img.save(root / "vi" / "p9.png")
  with pytest.raises(ValueError, match="pairs differ in size.*size="):
    fi.load_fusion_folder(str(root))
  assert fi.load_fusion_folder(str(root), size=(8, 12)).a.shape == (3, 8, 12)
  assert [p[1].shape for p in fi.read_fusion_pairs(str(root))] == [(16, 24)] * 2 + [(20, 20)]
