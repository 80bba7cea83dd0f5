"""CIFAR-10 / CIFAR-100 and CIFAR-10-C / CIFAR-100-C from local files, as numpy arrays.

Nothing downloads: every loader reads a folder the user gives and returns
`ImageSet(images (N, 32, 32, 3) uint8 NHWC, labels (N,) int32)`; `to_float` turns the
images into floats in [0, 1] (the layout `common.data.corruptions` and the models take).

Layouts (those of the official releases, unpacked):

    CIFAR-10    <root>/data_batch_1 .. data_batch_5, <root>/test_batch
                (the python-pickle batches of cifar-10-python.tar.gz; <root> may also
                be the folder above, holding cifar-10-batches-py/)
    CIFAR-100   <root>/train, <root>/test (cifar-100-python.tar.gz; or the folder
                above, holding cifar-100-python/); the 100 fine labels
    CIFAR-C     <root>/<corruption>.npy: (5 n, 32, 32, 3) uint8, severities 1..5
                stacked in order, n = 10000 test images each; <root>/labels.npy:
                (5 n,) labels (Hendrycks & Dietterich, ICLR 2019; CIFAR-10-C and
                CIFAR-100-C share the layout)

Each pickle batch is a dict with b"data", a (n, 3072) uint8 array whose rows are the
red, green and blue 32x32 planes one after the other (channels first), and b"labels"
(CIFAR-10) or b"fine_labels" (CIFAR-100). The CIFAR-C arrays are memory-mapped, so
reading one severity of one corruption touches a fifth of its file.

Example:
    >>> train, test = load_cifar10("/data/cifar-10-batches-py")   # doctest: +SKIP
    >>> shifted = load_cifar_c("/data/CIFAR-10-C", "gaussian_noise", severity=3)  # +SKIP
    >>> x = to_float(shifted.images)                               # (10000, 32, 32, 3)
"""

from __future__ import annotations

import os
import pickle
from typing import NamedTuple

import numpy as np

# The 15 benchmark corruptions of the CIFAR-C release, then its 4 extra ones.
CIFAR_C_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur",
                       "glass_blur", "motion_blur", "zoom_blur", "snow", "frost", "fog",
                       "brightness", "contrast", "elastic_transform", "pixelate",
                       "jpeg_compression")
CIFAR_C_EXTRA = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
IMAGE_SHAPE = (32, 32, 3)


class ImageSet(NamedTuple):
  images: np.ndarray  # (n, 32, 32, 3) uint8, NHWC
  labels: np.ndarray  # (n,) int32


def to_float(images: np.ndarray) -> np.ndarray:
  """uint8 images as float32 in [0, 1]."""
  if images.dtype != np.uint8:
    raise TypeError(f"images have dtype {images.dtype}; expected uint8 (0..255)")
  return np.asarray(images, np.float32) / 255.0


def _need_dir(root: str | os.PathLike, what: str) -> str:
  root = os.fspath(root)
  if not os.path.isdir(root):
    raise FileNotFoundError(f"{what} folder {root!r} does not exist; expected a local "
                            "folder (nothing is downloaded)")
  return root


def _need_file(path: str, what: str) -> str:
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{what}: {path!r} is missing")
  return path


def _read_batch(path: str, label_key: bytes) -> ImageSet:
  """One python-pickle batch of the official release as NHWC uint8 + int32 labels."""
  with open(_need_file(path, "CIFAR batch"), "rb") as f:
    try:
      batch = pickle.load(f, encoding="bytes")
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
      raise ValueError(f"{path!r} is not a CIFAR python-pickle batch ({e})") from e
  if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
    keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
    raise ValueError(f"{path!r} holds {keys}; expected a dict with b'data' and "
                     f"{label_key!r}")
  data = np.asarray(batch[b"data"])
  labels = np.asarray(batch[label_key])
  if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
    raise ValueError(f"{path!r}: data has shape {data.shape} and dtype {data.dtype}; "
                     "expected (n, 3072) uint8 rows (three 32x32 planes)")
  if labels.shape != (data.shape[0],):
    raise ValueError(f"{path!r}: {labels.shape[0] if labels.ndim else 0} labels for "
                     f"{data.shape[0]} images; expected one label per image")
  images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return ImageSet(np.ascontiguousarray(images), labels.astype(np.int32))


def _concat(sets: list[ImageSet]) -> ImageSet:
  return ImageSet(np.concatenate([s.images for s in sets]),
                  np.concatenate([s.labels for s in sets]))


def _find_release(root: str, inner: str, marker: str) -> str:
  """`root` itself when it holds `marker`, else `root/inner` when that does."""
  if os.path.isfile(os.path.join(root, marker)):
    return root
  nested = os.path.join(root, inner)
  if os.path.isfile(os.path.join(nested, marker)):
    return nested
  raise FileNotFoundError(f"no {marker!r} in {root!r} or {nested!r}; expected the "
                          f"unpacked python release ({inner}/)")


def load_cifar10(root: str | os.PathLike) -> tuple[ImageSet, ImageSet]:
  """(train 50000, test 10000) from the python-pickle batches in `root`.

  Args:
    root: the folder holding data_batch_1..5 and test_batch (cifar-10-batches-py), or
      the folder above it.

  Returns:
    (train, test) `ImageSet`s, NHWC uint8 images and int32 labels 0..9.

  Raises:
    FileNotFoundError: the folder or a batch file is missing.
    ValueError: a file is not a CIFAR batch or has the wrong shape.
  """
  root = _find_release(_need_dir(root, "CIFAR-10"), "cifar-10-batches-py", "test_batch")
  train = _concat([_read_batch(os.path.join(root, f"data_batch_{i}"), b"labels")
                   for i in range(1, 6)])
  return train, _read_batch(os.path.join(root, "test_batch"), b"labels")


def load_cifar100(root: str | os.PathLike) -> tuple[ImageSet, ImageSet]:
  """(train 50000, test 10000) of CIFAR-100 with the 100 fine labels.

  Args:
    root: the folder holding `train` and `test` (cifar-100-python), or the one above.
  """
  root = _find_release(_need_dir(root, "CIFAR-100"), "cifar-100-python", "test")
  return (_read_batch(os.path.join(root, "train"), b"fine_labels"),
          _read_batch(os.path.join(root, "test"), b"fine_labels"))


def list_cifar_c(root: str | os.PathLike) -> tuple[str, ...]:
  """The corruptions present in a CIFAR-C folder (`<name>.npy` files besides labels)."""
  root = _need_dir(root, "CIFAR-C")
  return tuple(sorted(f[:-4] for f in os.listdir(root)
                      if f.endswith(".npy") and f != "labels.npy"))


def load_cifar_c(root: str | os.PathLike, corruption: str,
                 severity: int | None = None) -> ImageSet:
  """One corruption of CIFAR-10-C or CIFAR-100-C, at one severity or all five.

  Args:
    root: the release folder, holding `<corruption>.npy` and `labels.npy`.
    corruption: a file name without `.npy`, e.g. "gaussian_noise" (`CIFAR_C_CORRUPTIONS`
      and `CIFAR_C_EXTRA` list the release's).
    severity: 1..5 for the n images of that severity (rows (s - 1) n .. s n - 1), or
      None for all 5 n rows (severity-major).

  Returns:
    `ImageSet` with images (n or 5 n, 32, 32, 3) uint8 (memory-mapped) and int32
    labels.

  Raises:
    FileNotFoundError: missing folder or file (names the path and what was expected).
    ValueError: severity outside 1..5, or arrays of the wrong shape or length.
  """
  if severity is not None and (isinstance(severity, bool) or
                               not isinstance(severity, (int, np.integer)) or
                               not 1 <= severity <= 5):
    raise ValueError(f"severity={severity!r}; expected an int in 1..5 or None (all five)")
  root = _need_dir(root, "CIFAR-C")
  data_path = os.path.join(root, f"{corruption}.npy")
  if not os.path.isfile(data_path):
    present = list_cifar_c(root)
    raise FileNotFoundError(f"CIFAR-C corruption {corruption!r}: {data_path!r} is missing; "
                            f"the folder has {', '.join(present) if present else 'none'}")
  labels_path = _need_file(os.path.join(root, "labels.npy"), "CIFAR-C labels")
  data = np.load(data_path, mmap_mode="r")
  labels = np.load(labels_path, mmap_mode="r")
  if data.ndim != 4 or tuple(data.shape[1:]) != IMAGE_SHAPE or data.dtype != np.uint8 or \
      data.shape[0] % 5:
    raise ValueError(f"{data_path!r} has shape {data.shape} and dtype {data.dtype}; "
                     "expected (5 n, 32, 32, 3) uint8 (5 severities stacked)")
  if labels.shape != (data.shape[0],):
    raise ValueError(f"{labels_path!r} has shape {labels.shape}; expected "
                     f"({data.shape[0]},), one label per row of {corruption}.npy")
  if severity is None:
    return ImageSet(data, np.asarray(labels, np.int32))
  n = data.shape[0] // 5
  rows = slice((severity - 1) * n, severity * n)
  return ImageSet(data[rows], np.asarray(labels[rows], np.int32))
