"""Synthetic regression batches that are a pure function of (seed, step).

    x ~ N(0, I_dim),   y = tanh(x W_1) W_2 + noise * eps,   eps ~ N(0, 1)

with a fixed random teacher W_1 (dim, 16) ~ N(0, 1/dim), W_2 (16, 1) ~ N(0, 1/16)
that depends only on `dim` (the same task for every seed), so a small MLP can fit
it. Batch `step` of run `seed` is drawn on the host by NumPy from the seed sequence
(seed, step), so a resumed run sees exactly the batches an uninterrupted one
would, and no device work or compilation is spent on data.

Example:
    >>> batch = regression_batch(seed=0, step=3, batch_size=32, dim=4)
    >>> batch["x"].shape, batch["y"].shape
    ((32, 4), (32, 1))
"""

from __future__ import annotations

import numbers

import numpy as np

TEACHER_WIDTH = 16
_TEACHER_SEED = 20260101


def teacher_weights(dim: int) -> tuple[np.ndarray, np.ndarray]:
  """Returns the fixed teacher's (W_1 (dim, 16), W_2 (16, 1)), float32, for inputs of size `dim`."""
  rng = np.random.default_rng((_TEACHER_SEED, dim))
  w1 = rng.standard_normal((dim, TEACHER_WIDTH), dtype=np.float32) / np.sqrt(dim)
  w2 = rng.standard_normal((TEACHER_WIDTH, 1), dtype=np.float32) / np.sqrt(TEACHER_WIDTH)
  return w1.astype(np.float32), w2.astype(np.float32)


def teacher(x) -> np.ndarray:
  """The noiseless target y = tanh(x W_1) W_2, for inputs (..., dim) -> (..., 1)."""
  x = np.asarray(x, dtype=np.float32)
  w1, w2 = teacher_weights(x.shape[-1])
  return np.tanh(x @ w1) @ w2


def regression_batch(seed: int, step: int, batch_size: int, dim: int,
                     noise: float = 0.0) -> dict[str, np.ndarray]:
  """Returns batch `step` of the synthetic regression stream of run `seed`.

  Args:
    seed: the run's seed (an int >= 0).
    step: the batch index (an int >= 0).
    batch_size: number of examples (>= 1).
    dim: input dimension (>= 1).
    noise: standard deviation of the Gaussian label noise (>= 0).

  Returns:
    dict(x=float32 (batch_size, dim), y=float32 (batch_size, 1)), NumPy arrays
    (place them with `common.sharding.shard_batch`, or `jnp.asarray`).

  Raises:
    ValueError: naming the argument if one is out of range.
  """
  for name, value, low in (("seed", seed, 0), ("step", step, 0),
                           ("batch_size", batch_size, 1), ("dim", dim, 1)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
      raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
  if not 0 <= noise < np.inf:
    raise ValueError(f"noise must be finite and >= 0, got {noise!r}")
  rng = np.random.default_rng((int(seed), int(step)))
  x = rng.standard_normal((batch_size, dim), dtype=np.float32)
  y = teacher(x)
  if noise:
    y = y + np.float32(noise) * rng.standard_normal((batch_size, 1), dtype=np.float32)
  return {"x": x, "y": y.astype(np.float32)}
