"""Diversity and quality metrics as pure functions of sample arrays (rows = samples).

* ``vendi_score`` (Friedman & Dieng 2023): exp(-sum_i lambda_i log lambda_i) over the
  eigenvalues of K / n, K_ij = exp(-|x_i - x_j|^2 / (2 ell^2)) (K_ii = 1); the
  effective number of distinct samples, 1 (all equal) to n (all far apart).
* Mixture modes: a sample belongs to mode k when its Mahalanobis distance to mode k
  is at most ``radius`` (nearest such mode); ``mode_counts`` counts them,
  ``mode_coverage`` is the fraction of modes with at least ``min_count`` samples,
  ``precision`` the fraction of samples inside some mode, and ``per_mode_precision``
  the share of all samples that land in each mode divided by that mode's weight
  (1 = the mode gets its fair share).
* ``mean_pairwise_distance``: mean |x_i - x_j| over i != j.
* ``pareto_mask`` / ``hypervolume_2d``: the non-dominated points of a (quality,
  diversity) cloud and the area they dominate above a reference point.
* ``density_coverage`` (Naeem et al. 2020): with real points X_i and their k-NN
  radii r_i (distance to the k-th nearest other real point) and generated points Y_j,
      density  = 1/(k M) sum_j sum_i 1[|Y_j - X_i| <= r_i],
      coverage = 1/N sum_i 1[exists j: |Y_j - X_i| <= r_i].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def _flat(x: Array) -> Array:
  return x.reshape(x.shape[0], -1)


def _sqdist(x: Array, y: Array) -> Array:
  return jnp.maximum(jnp.sum(x * x, 1)[:, None] + jnp.sum(y * y, 1)[None, :]
                     - 2 * x @ y.T, 0.0)


def vendi_score(x: Array, lengthscale: float = 1.0) -> Array:
  """Vendi score with an RBF similarity of the given lengthscale."""
  x = _flat(x)
  k = jnp.exp(-_sqdist(x, x) / (2 * lengthscale ** 2))
  lam = jnp.clip(jnp.linalg.eigvalsh(k / x.shape[0]), 0.0, None)
  ent = -jnp.sum(jnp.where(lam > 0, lam * jnp.log(jnp.where(lam > 0, lam, 1.0)), 0.0))
  return jnp.exp(ent)


def mode_assignment(x: Array, means: Array, scales: Array, radius: float = 3.0) -> Array:
  """Index of the nearest mode within ``radius`` Mahalanobis units, else -1.

  Modes are isotropic: scales (K,) are their standard deviations.
  """
  dist = jnp.sqrt(_sqdist(x, means)) / scales[None, :]
  nearest = jnp.argmin(dist, axis=1)
  inside = jnp.min(dist, axis=1) <= radius
  return jnp.where(inside, nearest, -1)


def mode_counts(x: Array, means: Array, scales: Array, radius: float = 3.0) -> Array:
  """Number of samples assigned to each mode, (K,)."""
  a = mode_assignment(x, means, scales, radius)
  return jnp.sum(a[:, None] == jnp.arange(means.shape[0])[None, :], axis=0)


def mode_coverage(x: Array, means: Array, scales: Array, radius: float = 3.0,
                  min_count: int = 1) -> Array:
  """Fraction of modes that received at least ``min_count`` samples."""
  return jnp.mean(mode_counts(x, means, scales, radius) >= min_count)


def precision(x: Array, means: Array, scales: Array, radius: float = 3.0) -> Array:
  """Fraction of samples within ``radius`` of some mode (sample quality)."""
  return jnp.mean(mode_assignment(x, means, scales, radius) >= 0)


def per_mode_precision(x: Array, means: Array, scales: Array, weights: Array,
                       radius: float = 3.0) -> Array:
  """(share of samples in mode k) / weight_k, (K,)."""
  return mode_counts(x, means, scales, radius) / x.shape[0] / weights


def mean_pairwise_distance(x: Array) -> Array:
  """Mean Euclidean distance over ordered pairs i != j."""
  x = _flat(x)
  n = x.shape[0]
  d = jnp.sqrt(_sqdist(x, x) + 1e-30) * (1 - jnp.eye(n, dtype=x.dtype))
  return jnp.sum(d) / (n * (n - 1))


def density_coverage(real: Array, fake: Array, k: int = 5) -> tuple[Array, Array]:
  """(density, coverage) of generated ``fake`` against ``real`` with k-NN balls."""
  real, fake = _flat(real), _flat(fake)
  d_rr = _sqdist(real, real)
  radii = jnp.sort(d_rr, axis=1)[:, k]        # index 0 is the point itself
  inside = _sqdist(fake, real) <= radii[None, :]   # (M, N)
  density = jnp.sum(inside) / (k * fake.shape[0])
  coverage = jnp.mean(jnp.any(inside, axis=0))
  return density, coverage


def pareto_mask(points) -> Array:
  """Non-dominated rows of points (n, 2), both coordinates to be maximised."""
  p = jnp.asarray(points)
  ge = jnp.all(p[None, :, :] >= p[:, None, :], axis=-1)   # j weakly dominates i
  gt = jnp.any(p[None, :, :] > p[:, None, :], axis=-1)
  return ~jnp.any(ge & gt, axis=1)


def hypervolume_2d(points, reference=(0.0, 0.0)) -> float:
  """Area dominated by points (n, 2) (both maximised) above the reference point."""
  import numpy as np  # host-side: a sort and a sweep
  p = np.asarray(points, float) - np.asarray(reference, float)[None, :]
  p = p[(p[:, 0] > 0) & (p[:, 1] > 0)]
  if p.size == 0:
    return 0.0
  p = p[np.argsort(-p[:, 0])]
  area, best_y = 0.0, 0.0
  for x, y in p:
    if y > best_y:
      area += x * (y - best_y)
      best_y = y
  return float(area)
