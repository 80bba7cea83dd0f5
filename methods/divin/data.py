"""Class-conditional training data for DivIn's flows, as pure functions of (seed, step).

* ``ring_modes``: the 2-D toy law. Class c is the mixture

      p(x | c) = sum_k w_k N(x; mu_{c,k}, std^2 I),
      mu_{c,k} = R (cos theta_{c,k}, sin theta_{c,k}),  theta_{c,k} = 2 pi (k C + c) / (C K),

  so the C K modes are interleaved on a ring of radius R and every class has the same
  unequal weights w (the dominant modes that high guidance collapses onto).
* ``mixture_batch``: a class-balanced batch from those modes.
* ``dataset_batch``: a batch drawn with replacement from a labelled array (e.g. the
  8x8 digits).

Batches are ``{"x1": (B, ...), "cond": (B, C) one-hot}``, the layout of
``flow_matching.make_loss_fn``; NumPy, drawn on the host from
``np.random.default_rng([seed, step])`` so a resumed training run sees the same data.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def ring_modes(num_classes: int, mode_weights: Sequence[float], radius: float,
               ) -> tuple[np.ndarray, np.ndarray]:
  """The interleaved ring of modes: (means (C, K, 2) float32, weights (K,) float32).

  Args:
    num_classes: C.
    mode_weights: the K (unnormalised) weights shared by every class.
    radius: R, the ring's radius.

  Returns:
    ``(means, weights)`` with weights normalised to sum to 1.

  Example:
    >>> means, weights = ring_modes(3, (0.6, 0.25, 0.1, 0.05), 5.0)
    >>> means.shape   # (3, 4, 2)
  """
  w = np.asarray(mode_weights, float)
  if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) \
      or num_classes < 1:
    raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
  if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) \
      or not w.sum() > 0:
    raise ValueError(f"mode_weights must be a non-empty list of finite weights >= 0 with a "
                     f"positive sum, got {list(mode_weights)}")
  if not (np.isfinite(radius) and radius > 0):
    raise ValueError(f"radius must be finite and > 0, got {radius}")
  num_k = len(mode_weights)
  total = num_classes * num_k
  angles = 2 * np.pi * (np.arange(num_k)[None, :] * num_classes
                        + np.arange(num_classes)[:, None]) / total
  means = radius * np.stack([np.cos(angles), np.sin(angles)], -1)
  return means.astype(np.float32), (w / w.sum()).astype(np.float32)


def mixture_batch(seed: int, step: int, *, means: np.ndarray, weights: np.ndarray,
                  std: float, batch_size: int) -> dict:
  """A class-balanced batch: c ~ U{0..C-1}, k ~ w, x1 = mu_{c,k} + std eps.

  Args:
    seed, step: the batch is a pure function of them.
    means: (C, K, d) mode means.
    weights: (K,) mode weights (summing to 1).
    std: the modes' standard deviation.
    batch_size: B.

  Returns:
    ``{"x1": (B, d) float32, "cond": (B, C) float32 one-hot}``.

  Example:
    >>> means, weights = ring_modes(3, (0.6, 0.4), 5.0)
    >>> mixture_batch(0, 7, means=means, weights=weights, std=0.3, batch_size=64)
  """
  _check_batch_size(batch_size)
  if not (np.isfinite(std) and std >= 0):
    raise ValueError(f"std must be finite and >= 0, got {std}")
  if np.ndim(means) != 3 or np.shape(weights) != np.shape(means)[1:2]:
    raise ValueError(f"means must be (C, K, d) and weights (K,), got {np.shape(means)} and "
                     f"{np.shape(weights)}")
  rng = np.random.default_rng([seed, step])
  num_classes = means.shape[0]
  labels = rng.integers(0, num_classes, batch_size)
  modes = rng.choice(len(weights), batch_size, p=weights)
  x1 = means[labels, modes] + std * rng.standard_normal((batch_size, means.shape[-1]))
  cond = np.eye(num_classes, dtype=np.float32)[labels]
  return {"x1": x1.astype(np.float32), "cond": cond}


def _check_batch_size(batch_size) -> None:
  if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
      or batch_size < 1:
    raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")


def dataset_batch(seed: int, step: int, *, x: np.ndarray, labels: np.ndarray,
                  num_classes: int, batch_size: int) -> dict:
  """B rows of a labelled data set drawn uniformly with replacement.

  Args:
    seed, step: the batch is a pure function of them.
    x: the data (n, ...).
    labels: integer labels (n,) in [0, num_classes).
    num_classes: C, the width of the one-hot condition.
    batch_size: B.

  Returns:
    ``{"x1": x[idx], "cond": (B, C) float32 one-hot}``.

  Example:
    >>> dataset_batch(0, 3, x=images, labels=labels, num_classes=10, batch_size=64)
  """
  _check_batch_size(batch_size)
  if len(labels) != len(x) or len(labels) == 0:
    raise ValueError(f"x and labels must have the same non-zero length, got {len(x)} and "
                     f"{len(labels)}")
  rng = np.random.default_rng([seed, step])
  idx = rng.integers(0, len(labels), batch_size)
  picked = np.asarray(labels)[idx]
  if not np.issubdtype(picked.dtype, np.integer):
    raise TypeError(f"labels must be integers, got dtype {picked.dtype}")
  if picked.min() < 0 or picked.max() >= num_classes:
    # a negative label would silently wrap to the last class of the one-hot table.
    bad = int(picked[(picked < 0) | (picked >= num_classes)][0])
    raise ValueError(f"labels must lie in [0, num_classes) = [0, {num_classes}), got {bad}")
  return {"x1": x[idx], "cond": np.eye(num_classes, dtype=np.float32)[labels[idx]]}
