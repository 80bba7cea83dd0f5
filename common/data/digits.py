"""scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes), no download.

Pixels are rescaled from the dataset's 0..16 integers to [0, 1]. `load_digits` gives
the whole set; `split_digits` a deterministic, class-stratified train/test split;
`pair_tasks` the classic "split digits" continual-learning tasks {0,1}, {2,3}, ...,
{8,9}, each a two-class problem.

Example:
    >>> data = load_digits()
    >>> data.images.shape, data.labels.shape
    ((1797, 8, 8), (1797,))
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

NUM_CLASSES = 10
IMAGE_SHAPE = (8, 8)


class Digits(NamedTuple):
  images: np.ndarray  # (n, 8, 8) float32 in [0, 1]
  labels: np.ndarray  # (n,) int32 in 0..9

  @property
  def flat(self) -> np.ndarray:
    """Images as (n, 64) rows."""
    return self.images.reshape(len(self.images), -1)


def load_digits() -> Digits:
  """The full bundled set, in the file's order, pixels scaled to [0, 1]."""
  from sklearn import datasets  # Lazy: only experiments that use digits pay the import.

  raw = datasets.load_digits()
  images = (raw.images / 16.0).astype(np.float32)
  return Digits(images=images, labels=raw.target.astype(np.int32))


def split_digits(test_fraction: float = 0.25, seed: int = 0) -> tuple[Digits, Digits]:
  """A class-stratified (train, test) split; the same for the same (test_fraction, seed)."""
  if not 0.0 < test_fraction < 1.0:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}.")
  data = load_digits()
  rng = np.random.default_rng(seed)
  test_mask = np.zeros(len(data.labels), dtype=bool)
  for c in range(NUM_CLASSES):
    idx = np.flatnonzero(data.labels == c)
    rng.shuffle(idx)
    test_mask[idx[: int(round(test_fraction * len(idx)))]] = True
  take = lambda m: Digits(images=data.images[m], labels=data.labels[m])
  return take(~test_mask), take(test_mask)


def pair_tasks(data: Digits, pairs=((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))) -> list[Digits]:
  """Split-digits tasks: task t holds the images of classes `pairs[t]`, labels kept 0..9."""
  tasks = []
  for pair in pairs:
    bad = [c for c in pair if not 0 <= c < NUM_CLASSES]
    if bad:
      raise ValueError(f"pair {pair!r} names classes {bad}; expected classes in 0..9.")
    mask = np.isin(data.labels, pair)
    tasks.append(Digits(images=data.images[mask], labels=data.labels[mask]))
  return tasks
