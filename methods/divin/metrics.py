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
* ``class_mode_metrics`` / ``class_density_metrics``: the above per class of a
  class-conditional sample (C, n, ...), averaged over classes (host-side floats).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from common import checks

Array = jax.Array


def _flat(x: Array) -> Array:
  return x.reshape(x.shape[0], -1)


def _sqdist(x: Array, y: Array) -> Array:
  return jnp.maximum(jnp.sum(x * x, 1)[:, None] + jnp.sum(y * y, 1)[None, :]
                     - 2 * x @ y.T, 0.0)


def vendi_score(x: Array, lengthscale: float = 1.0) -> Array:
  """Vendi score exp(-sum_i lambda_i log lambda_i), lambda the eigenvalues of K / n,
  K_ij = exp(-|x_i - x_j|^2 / (2 ell^2)).

  Args:
    x: samples (n, ...) (flattened per row).
    lengthscale: ell.

  Returns:
    The scalar score in [1, n].

  Example:
    >>> vendi_score(jnp.zeros((5, 2)))   # 1: all samples equal
    >>> vendi_score(100.0 * jnp.eye(5))  # 5: all far apart
  """
  checks.scalar("lengthscale", lengthscale)
  x = _flat(x)
  k = jnp.exp(-_sqdist(x, x) / (2 * lengthscale ** 2))
  lam = jnp.clip(jnp.linalg.eigvalsh(k / x.shape[0]), 0.0, None)
  ent = -jnp.sum(jnp.where(lam > 0, lam * jnp.log(jnp.where(lam > 0, lam, 1.0)), 0.0))
  return jnp.exp(ent)


def mode_assignment(x: Array, means: Array, scales: Array, radius: float = 3.0) -> Array:
  """a(x) = argmin_k |x - mu_k| / s_k if that distance is <= radius, else -1.

  Modes are isotropic: scales (K,) are their standard deviations.

  Args:
    x: samples (n, d).
    means: (K, d) mode means.
    scales: (K,) mode standard deviations.
    radius: the largest Mahalanobis distance that counts as inside a mode.

  Returns:
    Integer assignments (n,) in {-1, 0, ..., K-1}.

  Example:
    >>> mode_assignment(jnp.array([[0.1, 0.0], [9.0, 9.0]]), jnp.zeros((1, 2)), jnp.ones(1))
    >>> # [0, -1]
  """
  if (jnp.ndim(x) != 2 or jnp.ndim(means) != 2 or jnp.shape(x)[1] != jnp.shape(means)[1]
      or jnp.shape(scales) != jnp.shape(means)[:1]):
    raise ValueError(f"mode_assignment takes x (n, d), means (K, d) and scales (K,), got "
                     f"{jnp.shape(x)}, {jnp.shape(means)} and {jnp.shape(scales)}")
  checks.scalar("scales", scales)
  checks.scalar("radius", radius, strict=False)
  dist = jnp.sqrt(_sqdist(x, means)) / scales[None, :]
  nearest = jnp.argmin(dist, axis=1)
  inside = jnp.min(dist, axis=1) <= radius
  return jnp.where(inside, nearest, -1)


def mode_counts(x: Array, means: Array, scales: Array, radius: float = 3.0) -> Array:
  """n_k = #{i: a(x_i) = k}, the number of samples assigned to each mode.

  Args:
    x, means, scales, radius: as in ``mode_assignment``.

  Returns:
    Counts (K,).

  Example:
    >>> mode_counts(x, means, scales)   # e.g. [210, 120, 50, 20]
  """
  a = mode_assignment(x, means, scales, radius)
  return jnp.sum(a[:, None] == jnp.arange(means.shape[0])[None, :], axis=0)


def mode_coverage(x: Array, means: Array, scales: Array, radius: float = 3.0,
                  min_count: int = 1) -> Array:
  """Coverage (1/K) sum_k 1[n_k >= min_count], the fraction of modes that were hit.

  Args:
    x, means, scales, radius: as in ``mode_assignment``.
    min_count: how many samples make a mode covered.

  Returns:
    The scalar coverage in [0, 1].

  Example:
    >>> mode_coverage(x, means, jnp.full((K,), 0.3))
  """
  return jnp.mean(mode_counts(x, means, scales, radius) >= min_count)


def precision(x: Array, means: Array, scales: Array, radius: float = 3.0) -> Array:
  """Precision (1/n) sum_i 1[a(x_i) >= 0], the share of samples inside some mode.

  Args:
    x, means, scales, radius: as in ``mode_assignment``.

  Returns:
    The scalar precision in [0, 1].

  Example:
    >>> precision(x, means, jnp.full((K,), 0.3), radius=3.0)
  """
  return jnp.mean(mode_assignment(x, means, scales, radius) >= 0)


def per_mode_precision(x: Array, means: Array, scales: Array, weights: Array,
                       radius: float = 3.0) -> Array:
  """(n_k / n) / w_k, the share of samples in mode k over its weight (1: a fair share).

  Args:
    x, means, scales, radius: as in ``mode_assignment``.
    weights: (K,) the modes' weights.

  Returns:
    (K,) ratios.

  Example:
    >>> per_mode_precision(x, means, scales, weights)   # < 1 on starved modes
  """
  if jnp.shape(weights) != jnp.shape(means)[:1]:
    raise ValueError(f"weights must have shape ({jnp.shape(means)[0]},) like means, got "
                     f"{jnp.shape(weights)}")
  checks.scalar("weights", weights)
  return mode_counts(x, means, scales, radius) / x.shape[0] / weights


def mean_pairwise_distance(x: Array) -> Array:
  """(1 / (n (n - 1))) sum_{i != j} |x_i - x_j|.

  Args:
    x: samples (n, ...) (flattened per row).

  Returns:
    The scalar mean distance.

  Example:
    >>> mean_pairwise_distance(jnp.array([[0.0], [1.0]]))   # 1
  """
  if jnp.ndim(x) < 1 or jnp.shape(x)[0] < 2:
    raise ValueError(f"mean_pairwise_distance needs x (n, ...) with n >= 2, got shape "
                     f"{jnp.shape(x)}")
  x = _flat(x)
  n = x.shape[0]
  d = jnp.sqrt(_sqdist(x, x) + 1e-30) * (1 - jnp.eye(n, dtype=x.dtype))
  return jnp.sum(d) / (n * (n - 1))


def density_coverage(real: Array, fake: Array, k: int = 5) -> tuple[Array, Array]:
  """k-NN density and coverage (Naeem et al. 2020) of ``fake`` against ``real``:

      density  = 1/(k M) sum_j sum_i 1[|Y_j - X_i| <= r_i],
      coverage = 1/N sum_i 1[exists j: |Y_j - X_i| <= r_i],

  with r_i the distance from X_i to its k-th nearest other real point.

  Args:
    real: N real samples (N, ...).
    fake: M generated samples (M, ...).
    k: the neighbour defining the balls.

  Returns:
    ``(density, coverage)`` scalars.

  Example:
    >>> density, coverage = density_coverage(real_images, generated, k=5)
  """
  real, fake = _flat(real), _flat(fake)
  if real.shape[1] != fake.shape[1]:
    raise ValueError(f"real and fake must have the same sample shape, got "
                     f"{jnp.shape(real)} and {jnp.shape(fake)}")
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < real.shape[0]:
    # jnp indexing clamps an out-of-range k: every radius would be the largest distance.
    raise ValueError(f"k must be an int in [1, N - 1] = [1, {real.shape[0] - 1}] for "
                     f"N = {real.shape[0]} real samples, got {k!r}")
  d_rr = _sqdist(real, real)
  radii = jnp.sort(d_rr, axis=1)[:, k]        # index 0 is the point itself
  inside = _sqdist(fake, real) <= radii[None, :]   # (M, N)
  density = jnp.sum(inside) / (k * fake.shape[0])
  coverage = jnp.mean(jnp.any(inside, axis=0))
  return density, coverage


def pareto_mask(points) -> Array:
  """Non-dominated rows: p_i is kept unless some p_j >= p_i everywhere and > somewhere.

  Args:
    points: (n, 2), both coordinates to be maximised.

  Returns:
    A boolean mask (n,).

  Example:
    >>> pareto_mask(jnp.array([[1.0, 0.0], [0.5, 0.5], [0.4, 0.4]]))   # [T, T, F]
  """
  p = jnp.asarray(points)
  if p.ndim != 2 or p.shape[1] != 2:
    raise ValueError(f"points must have shape (n, 2), got {p.shape}")
  ge = jnp.all(p[None, :, :] >= p[:, None, :], axis=-1)   # j weakly dominates i
  gt = jnp.any(p[None, :, :] > p[:, None, :], axis=-1)
  return ~jnp.any(ge & gt, axis=1)


def hypervolume_2d(points, reference=(0.0, 0.0)) -> float:
  """The area of the union of boxes [ref, p_i] over points p_i (both maximised).

  Host-side (a sort and a sweep).

  Args:
    points: (n, 2).
    reference: the lower-left corner; points not above it in both coordinates count 0.

  Returns:
    The hypervolume (a Python float).

  Example:
    >>> hypervolume_2d([[1.0, 2.0], [2.0, 1.0]])   # 3.0
  """
  p, ref = np.asarray(points, float), np.asarray(reference, float)
  if p.ndim != 2 or p.shape[1] != 2 or ref.shape != (2,):
    raise ValueError(f"points must have shape (n, 2) and reference (2,), got {p.shape} and "
                     f"{ref.shape}")
  if not (np.isfinite(p).all() and np.isfinite(ref).all()):
    raise ValueError("points and reference must be finite")
  p = p - ref[None, :]
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


def class_mode_metrics(samples: Array, means: Array, std: float, radius: float = 3.0,
                       lengthscale: float = 1.0) -> dict[str, float]:
  """Mixture metrics of each class's samples against that class's modes, averaged over classes.

      m = (1/C) sum_c metric(samples[c]; modes of class c),

  for precision, mode coverage, Vendi score and mean pairwise distance.

  Args:
    samples: (C, n, d) samples per class.
    means: (C, K, d) the mode means of each class.
    std: the modes' (isotropic) standard deviation.
    radius: Mahalanobis radius of a mode.
    lengthscale: the Vendi score's RBF lengthscale.

  Returns:
    ``{"precision", "coverage", "vendi", "pairwise"}`` as floats.

  Example:
    >>> class_mode_metrics(samples, means, 0.3)["coverage"]
  """
  if (jnp.ndim(samples) != 3 or jnp.ndim(means) != 3
      or jnp.shape(samples)[0] != jnp.shape(means)[0]
      or jnp.shape(samples)[2] != jnp.shape(means)[2]):
    raise ValueError(f"class_mode_metrics takes samples (C, n, d) and means (C, K, d), got "
                     f"{jnp.shape(samples)} and {jnp.shape(means)}")
  rows = []
  for c in range(samples.shape[0]):
    x = samples[c]
    scales = jnp.full((means.shape[1],), std)
    rows.append({"precision": precision(x, means[c], scales, radius),
                 "coverage": mode_coverage(x, means[c], scales, radius),
                 **_diversity(x, lengthscale)})
  return _mean_over_classes(rows)


def class_density_metrics(samples: Array, real: Sequence[Array], k: int = 5,
                          lengthscale: float = 1.0) -> dict[str, float]:
  """k-NN density/coverage of each class's samples against that class's real data,
  Vendi score and mean pairwise distance, averaged over classes.

  Args:
    samples: (C, n, ...) samples per class.
    real: C arrays of real samples, one per class.
    k: the k-NN ball's neighbour (``density_coverage``).
    lengthscale: the Vendi score's RBF lengthscale.

  Returns:
    ``{"density", "coverage", "vendi", "pairwise"}`` as floats.

  Example:
    >>> class_density_metrics(samples, [images[labels == c] for c in range(10)])
  """
  if len(real) != jnp.shape(samples)[0]:
    raise ValueError(f"real must hold one array per class: {jnp.shape(samples)[0]} for "
                     f"samples {jnp.shape(samples)}, got {len(real)}")
  rows = []
  for c, reference in enumerate(real):
    density, coverage = density_coverage(reference, samples[c], k)
    rows.append({"density": density, "coverage": coverage,
                 **_diversity(samples[c], lengthscale)})
  return _mean_over_classes(rows)


def _diversity(x: Array, lengthscale: float) -> dict:
  return {"vendi": vendi_score(x, lengthscale), "pairwise": mean_pairwise_distance(x)}


def _mean_over_classes(rows: list[dict]) -> dict[str, float]:
  return {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}
