"""The CIFAR-C-style corruption suite and the CIFAR / CIFAR-C loaders (FGR's data)."""

import io
import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.data import cifar
from common.data import corruptions as C
from common.data import digits

RANDOM = ("gaussian_noise", "shot_noise", "impulse_noise", "elastic_transform")


@pytest.fixture(scope="module")
def images():
  """Two real 8x8 digits (1 channel) and two smooth 32x32 RGB scenes with an edge (batches
  of 2 throughout, so each corruption compiles once per image size)."""
  small = jnp.asarray(digits.load_digits().images[:2, :, :, None])
  t = np.linspace(0.0, 1.0, 32)
  yy, xx = np.meshgrid(t, t, indexing="ij")
  scene = np.stack([0.2 + 0.6 * xx, 0.5 + 0.3 * np.sin(6 * yy), (xx + yy > 1.0) * 0.8 + 0.1],
                   axis=-1)
  large = jnp.asarray(np.stack([scene, scene[::-1]]), jnp.float32)
  return small, large


@pytest.mark.parametrize("name", C.CORRUPTIONS)
def test_corruption_keeps_shape_dtype_range_and_is_deterministic(images, name):
  key = jax.random.PRNGKey(3)
  for x in images:
    change = []
    for severity in C.SEVERITIES:
      y = C.corrupt(key, x, name, severity)
      assert y.shape == x.shape and y.dtype == x.dtype
      assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0
      np.testing.assert_array_equal(np.asarray(C.corrupt(key, x, name, severity)),
                                    np.asarray(y))
      change.append(float(jnp.abs(y - x).mean()))
    assert change[0] > 0.0
    if x.shape[1] == 8:  # the small-image table grows monotonically in strength
      assert change[-1] > change[0], change
    if name in RANDOM:
      other = C.corrupt(jax.random.PRNGKey(4), x, name, 3)
      assert float(jnp.abs(other - C.corrupt(key, x, name, 3)).max()) > 0.0
      # Each image of the batch gets its own draw.
      twin = C.corrupt(key, jnp.stack([x[0], x[0]]), name, 3)
      assert float(jnp.abs(twin[0] - twin[1]).max()) > 0.0


def test_corruptions_run_under_jit_and_match_eager(images):
  small, _ = images
  key = jax.random.PRNGKey(0)
  for name in ("elastic_transform", "jpeg_compression", "pixelate"):
    jitted = jax.jit(lambda k, x, n=name: C.corrupt(k, x, n, 4))(key, small)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(C.corrupt(key, small, name, 4)),
                               atol=1e-5)


def test_corruptions_against_closed_forms():
  key = jax.random.PRNGKey(0)
  x = jax.random.uniform(key, (2, 8, 8, 1))
  # pixelate at severity 4 (fraction 0.5): images constant on 2x2 blocks are unchanged.
  blocky = jnp.repeat(jnp.repeat(x[:, :4, :4], 2, axis=1), 2, axis=2)
  np.testing.assert_allclose(np.asarray(C.corrupt(key, blocky, "pixelate", 4)),
                             np.asarray(blocky), atol=1e-6)
  # Blurs keep constants; contrast keeps each image's mean; grayscale brightness adds.
  flat = jnp.full((1, 8, 8, 1), 0.3)
  for name in ("gaussian_blur", "defocus_blur"):
    np.testing.assert_allclose(np.asarray(C.corrupt(key, flat, name, 5)), 0.3, atol=1e-6)
  np.testing.assert_allclose(np.asarray(C.corrupt(key, x, "contrast", 3).mean(axis=(1, 2))),
                             np.asarray(x.mean(axis=(1, 2))), atol=1e-6)
  np.testing.assert_allclose(np.asarray(C.corrupt(key, x, "brightness", 2)),
                             np.minimum(np.asarray(x) + 0.16, 1.0), atol=1e-6)
  # Color brightness keeps hue and saturation: the channel ratios of unclipped pixels.
  rgb = jnp.asarray([[[[0.2, 0.4, 0.1]]]])
  out = np.asarray(C.corrupt(key, rgb, "brightness", 1))[0, 0, 0]
  np.testing.assert_allclose(out, np.array([0.2, 0.4, 0.1]) * (0.48 / 0.4), atol=1e-6)


def test_jpeg_round_trip_is_close_to_a_real_codec():
  from PIL import Image
  from sklearn.datasets import load_sample_image  # bundled with scikit-learn

  img = load_sample_image("china.jpg")[100:164, 200:264]
  for quality in (25, 15):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    pil = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")) / 255.0
    x = img.astype(np.float32) / 255.0
    ours = np.asarray(C.jpeg_round_trip(jnp.asarray(x[None]), quality))[0]
    # Ours differs from the codec far less than the codec differs from the input.
    assert np.abs(ours - pil).mean() < 0.2 * np.abs(x - pil).mean()


# --- Loaders --------------------------------------------------------------------------

def _write_batch(path, data, labels, label_key=b"labels"):
  with open(path, "wb") as f:
    pickle.dump({b"data": data, label_key: list(labels)}, f)


def _planes(n, seed):
  return np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)


def test_load_cifar10_reads_pickle_batches_as_nhwc(tmp_path):
  folder = tmp_path / "cifar-10-batches-py"
  folder.mkdir()
  batches = [_planes(2, i) for i in range(6)]
  for i in range(5):
    _write_batch(folder / f"data_batch_{i + 1}", batches[i], [i, i + 1])
  _write_batch(folder / "test_batch", batches[5], [7, 9])
  for root in (folder, tmp_path):  # the batches folder itself, or the folder above
    train, test = cifar.load_cifar10(root)
    assert train.images.shape == (10, 32, 32, 3) and train.images.dtype == np.uint8
    assert test.images.shape == (2, 32, 32, 3)
    np.testing.assert_array_equal(train.labels, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5])
    # Rows hold the red, green, blue planes: pixel (r, c) of channel k is at k*1024 + 32 r + c.
    np.testing.assert_array_equal(test.images[1, 2, 5], batches[5][1, [69, 1024 + 69,
                                                                       2048 + 69]])
  assert cifar.to_float(test.images).dtype == np.float32
  os.remove(folder / "data_batch_3")
  with pytest.raises(FileNotFoundError, match="data_batch_3"):
    cifar.load_cifar10(folder)


def test_load_cifar100_reads_fine_labels(tmp_path):
  _write_batch(tmp_path / "train", _planes(3, 0), [5, 50, 99], b"fine_labels")
  _write_batch(tmp_path / "test", _planes(1, 1), [42], b"fine_labels")
  train, test = cifar.load_cifar100(tmp_path)
  assert train.images.shape == (3, 32, 32, 3) and test.labels.tolist() == [42]


def test_load_cifar_c_slices_severities_and_checks_files(tmp_path):
  n = 4
  data = np.zeros((5 * n, 32, 32, 3), np.uint8)
  data[:, 0, 0, 0] = np.repeat(np.arange(1, 6), n)  # severity s rows carry the value s
  np.save(tmp_path / "fog.npy", data)
  np.save(tmp_path / "labels.npy", np.tile(np.arange(n), 5).astype(np.uint8))
  for s in range(1, 6):
    part = cifar.load_cifar_c(tmp_path, "fog", s)
    assert part.images.shape == (n, 32, 32, 3)
    assert set(part.images[:, 0, 0, 0].tolist()) == {s}
    assert part.labels.dtype == np.int32 and part.labels.tolist() == list(range(n))
  assert cifar.load_cifar_c(tmp_path, "fog").images.shape == (5 * n, 32, 32, 3)
  assert cifar.list_cifar_c(tmp_path) == ("fog",)
  with pytest.raises(FileNotFoundError, match=r"'snow'.*snow.npy.*is missing; the folder "
                     r"has fog"):
    cifar.load_cifar_c(tmp_path, "snow", 1)
  np.save(tmp_path / "frost.npy", np.zeros((7, 32, 32, 3), np.uint8))
  with pytest.raises(ValueError, match=r"shape \(7, 32, 32, 3\).*expected \(5 n, 32, 32, 3\)"):
    cifar.load_cifar_c(tmp_path, "frost", 1)
  os.remove(tmp_path / "labels.npy")
  with pytest.raises(FileNotFoundError, match="labels.npy"):
    cifar.load_cifar_c(tmp_path, "fog", 1)
