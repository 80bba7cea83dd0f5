"""Distribution metrics of generated vs simulated fields on a mesh.

For reference states X (M, N, C) and generated states Y (S, N, C) at one condition,
over a node subset R (all nodes, or the sharp-gradient region), with per-channel
scales sigma_c (the reference data's standard deviation, so channels weigh alike):

    mean error = ||mu_Y - mu_X||_R / ||mu_X - <mu_X>_R||_R
    std error  = ||s_Y - s_X||_R / ||s_X||_R
    W1         = mean_{i in R, c} W1(X_{., i, c} / sigma_c, Y_{., i, c} / sigma_c)

where mu and s are the per-node mean and standard deviation over states, norms are
Euclidean over the nodes in R and the channels after dividing channel c by sigma_c,
and <mu_X>_R is the per-channel average of mu_X over R (so a uniform free stream
does not inflate the denominator of the mean error). The per-node
1-D Wasserstein-1 distance between two empirical distributions is exact:
W1 = int_0^1 |F^-1(q) - G^-1(q)| dq, evaluated on the union of the two quantile
step grids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np


def wasserstein1_1d(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Exact W1 between empirical distributions along axis 0: x (M, ...), y (S, ...) -> (...).

  W1 = int_0^1 |F^-1(q) - G^-1(q)| dq over the union of the quantile steps
  {k / M} and {k / S}, on which both quantile functions are constant.

  Args:
    x: (M, ...) samples of the first distribution (one per leading index).
    y: (S, ...) samples of the second; trailing shapes must match x's.

  Returns:
    (...) float64 distances, one per trailing index.

  Example:
    >>> wasserstein1_1d(np.zeros((4, 1)), np.ones((8, 1)))   # array([1.])
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.ndim < 1 or y.ndim < 1 or x.shape[1:] != y.shape[1:] or not len(x) or not len(y):
    raise ValueError(f"wasserstein1_1d: x {x.shape} and y {y.shape}; expected (M, ...) and "
                     "(S, ...) with M, S >= 1 and equal trailing shapes")
  x, y = np.sort(x, 0), np.sort(y, 0)
  m, s = len(x), len(y)
  q = np.unique(np.concatenate([np.arange(1, m + 1) / m, np.arange(1, s + 1) / s]))
  widths = np.diff(np.concatenate([[0.0], q]))
  mid = q - widths / 2  # inside each step of both quantile functions
  ix = np.minimum(np.floor(mid * m).astype(int), m - 1)
  iy = np.minimum(np.floor(mid * s).astype(int), s - 1)
  w = widths.reshape((-1,) + (1,) * (x.ndim - 1))
  return np.sum(np.abs(x[ix] - y[iy]) * w, axis=0)


def _relative(a: np.ndarray, b: np.ndarray, reference: np.ndarray) -> float:
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(reference), 1e-12))


class FieldErrors(NamedTuple):
  """The errors `field_errors` returns (see the module doc for the formulas)."""
  mean_rel: float  # relative error of the per-node mean field
  std_rel: float   # relative error of the per-node standard-deviation field
  w1: float        # per-node W1 averaged over nodes and channels, in units of sigma_c


def field_errors(reference: np.ndarray, generated: np.ndarray, region: np.ndarray | None = None,
                 scale: np.ndarray | None = None) -> FieldErrors:
  """Errors of the generated distribution of fields against the reference one.

  Args:
    reference: (M, N, C) simulated states at one condition.
    generated: (S, N, C) generated states at that condition.
    region: optional (N,) bool node subset R (default: all nodes).
    scale: optional (C,) per-channel sigma_c (default: reference std over states and nodes).

  Returns:
    FieldErrors(mean_rel, std_rel, w1) as defined in the module doc.

  Example:
    >>> e = field_errors(simulated, generated, near_wake_region(pos))
    >>> e.w1   # mean per-node W1 in units of each channel's std
  """
  reference, generated = np.asarray(reference, np.float64), np.asarray(generated, np.float64)
  if reference.ndim != 3 or generated.ndim != 3 or reference.shape[1:] != generated.shape[1:]:
    raise ValueError(f"reference (M, N, C) and generated (S, N, C) must agree in N and C, "
                     f"got {reference.shape} and {generated.shape}")
  if region is None:
    region = np.ones(reference.shape[1], bool)
  region = np.asarray(region, bool)
  if region.shape != (reference.shape[1],) or not region.any():
    raise ValueError(f"region must be a non-empty (N={reference.shape[1]},) mask, "
                     f"got shape {region.shape} with {int(region.sum())} nodes")
  if scale is None:
    scale = reference.reshape(-1, reference.shape[-1]).std(0)
  scale = np.where(np.asarray(scale) > 0, scale, 1.0)
  x, y = reference[:, region] / scale, generated[:, region] / scale
  mx, my = x.mean(0), y.mean(0)
  sx, sy = x.std(0), y.std(0)
  return FieldErrors(mean_rel=_relative(my, mx, mx - mx.mean(0)),
                     std_rel=_relative(sy, sx, sx),
                     w1=float(np.mean(wasserstein1_1d(x, y))))


def region_errors(reference: np.ndarray, generated: np.ndarray,
                  regions: Mapping[str, np.ndarray | None],
                  scale: np.ndarray | None = None) -> dict[str, FieldErrors]:
  """`field_errors` over each named node subset R (None: all nodes).

  Args:
    reference: (M, N, C) simulated states at one condition.
    generated: (S, N, C) generated states at that condition.
    regions: {name: (N,) bool mask, or None for all nodes}.
    scale: optional (C,) per-channel sigma_c shared by every region.

  Returns:
    {name: FieldErrors}, in the order of `regions`.

  Example:
    >>> errs = region_errors(ref, gen, {"all": None, "wake": near_wake_region(pos)})
    >>> errs["wake"].w1
  """
  return {name: field_errors(reference, generated, region, scale=scale)
          for name, region in regions.items()}


def near_wake_region(pos: np.ndarray, *, x_min: float = -0.75, x_max: float = 5.0,
                     half_width: float = 1.25) -> np.ndarray:
  """(N,) mask of the near wake: the obstacle's surroundings and the region behind it.

  pos is in units of the obstacle size with the obstacle centred at the origin; the
  region is x in [x_min, x_max], |y| <= half_width, where the shear layers and the
  shed vortices give the sharpest gradients of the flow.

  Args:
    pos: (N, 2) node positions in units of the obstacle size.
    x_min, x_max, half_width: the box.

  Returns:
    (N,) bool.

  Example:
    >>> wake = near_wake_region(mesh.pos)   # the "wake" region of the experiment
  """
  pos = np.asarray(pos)
  return (pos[:, 0] >= x_min) & (pos[:, 0] <= x_max) & (np.abs(pos[:, 1]) <= half_width)
