"""Parametric periodic unit cells: six signed-distance-function (SDF) families.

A design is (family, u) with u in [0, 1]^6; each family maps u to its geometric
parameters (widths, radii, angles) by affine maps `lo + u (hi - lo)`. The solid set is
{sdf < 0} in the unit cell [0, 1]^2, made periodic by taking the SDF's minimum over the
3 x 3 periodic images, and turned into a density field on the n x n element centres by
a smoothed Heaviside of width `eps` (half an element by default):

    rho(x) = sigmoid(-sdf(x) / eps).

Every step is a jnp expression, so `density` works under `jit`, `vmap` (the family is a
traced integer, dispatched with `lax.switch`) and `grad` (with respect to u).

The families, our reading of the paper's structure classes:
  rods       straight bars through the cell centre (horizontal, vertical, two
             diagonals) and a node disc; the horizontal bar may wave.
  reentrant  a bow-tie (re-entrant hexagon) honeycomb: vertical walls joined by V-shaped
             walls that point into the cell when the dip D > 0 (auxetic) and out of it
             when D < 0 (a conventional hexagon).
  chiral     a tetrachiral cell: a ring with four ligaments through the edge midpoints,
             tilted towards tangency by the chirality parameter.
  plates     thick lamellae normal to x, to y and along the diagonal, with a wave.
  shell      an elliptical ring (rotated) joined to its neighbours by bars.
  inclusion  a solid matrix with a rotated super-elliptical hole and a corner hole.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NUM_PARAMS = 6


class Family(NamedTuple):
  """One cell family: its name, the parameter names and their physical ranges."""
  name: str
  params: tuple[str, ...]
  lower: tuple[float, ...]
  upper: tuple[float, ...]


FAMILIES: tuple[Family, ...] = (
    Family("rods", ("t_horizontal", "t_vertical", "t_diagonal", "t_antidiagonal",
                    "node_radius", "wave"),
           (0.0, 0.0, 0.0, 0.0, 0.0, 0.0), (0.25, 0.25, 0.15, 0.15, 0.2, 0.15)),
    Family("reentrant", ("half_height", "dip", "t_inclined", "t_vertical",
                         "t_connector", "node_radius"),
           (0.12, 0.0, 0.02, 0.02, 0.02, 0.0), (0.4, 1.0, 0.1, 0.12, 0.12, 0.06)),
    Family("chiral", ("ring_radius", "t_ring", "t_ligament_x", "t_ligament_y",
                      "chirality", "core"),
           (0.06, 0.02, 0.02, 0.02, 0.0, 0.0), (0.3, 0.1, 0.1, 0.1, 1.0, 1.0)),
    Family("plates", ("t_x", "t_y", "t_diagonal", "wave", "offset", "fillet"),
           (0.0, 0.0, 0.0, 0.0, 0.0, 0.0), (0.45, 0.45, 0.3, 0.15, 0.5, 0.1)),
    Family("shell", ("radius_x", "radius_y", "t_shell", "angle", "t_connector_x",
                     "t_connector_y"),
           (0.12, 0.12, 0.02, 0.0, 0.0, 0.0), (0.42, 0.42, 0.12, np.pi, 0.12, 0.12)),
    Family("inclusion", ("semi_a", "semi_b", "angle", "exponent", "corner_radius",
                         "corner_exponent"),
           (0.05, 0.05, 0.0, 2.0, 0.0, 2.0), (0.47, 0.47, np.pi, 8.0, 0.35, 8.0)),
)
FAMILY_NAMES = tuple(f.name for f in FAMILIES)


def family_index(name: str) -> int:
  """The index of a family by name; a one-line ValueError names the known ones."""
  if name not in FAMILY_NAMES:
    raise ValueError(f"unknown cell family {name!r}; expected one of {FAMILY_NAMES}")
  return FAMILY_NAMES.index(name)


def physical(family: int, u: jax.Array) -> jax.Array:
  """Maps u in [0, 1]^6 to the family's physical parameters (static family)."""
  f = FAMILIES[family]
  lo, hi = jnp.asarray(f.lower), jnp.asarray(f.upper)
  return lo + jnp.clip(u, 0.0, 1.0) * (hi - lo)


def _segment(p: jax.Array, a, b, half_width) -> jax.Array:
  """SDF of a segment a-b thickened to `half_width` (a capsule)."""
  a, b = jnp.asarray(a, p.dtype), jnp.asarray(b, p.dtype)
  pa, ba = p - a, b - a
  h = jnp.clip(jnp.sum(pa * ba, -1) / jnp.maximum(jnp.sum(ba * ba), 1e-12), 0.0, 1.0)
  return jnp.linalg.norm(pa - h[..., None] * ba + 1e-30, axis=-1) - half_width


def _disc(p: jax.Array, centre, radius) -> jax.Array:
  return jnp.linalg.norm(p - jnp.asarray(centre, p.dtype) + 1e-30, axis=-1) - radius


def _rotate(p: jax.Array, centre, angle) -> jax.Array:
  q = p - jnp.asarray(centre, p.dtype)
  c, s = jnp.cos(angle), jnp.sin(angle)
  return jnp.stack([c * q[..., 0] + s * q[..., 1], -s * q[..., 0] + c * q[..., 1]], -1)


def _superellipse(q: jax.Array, a, b, n) -> jax.Array:
  """Approximate SDF of |x/a|^n + |y/b|^n <= 1 (exact sign, distance-like scale)."""
  r = (jnp.abs(q[..., 0] / a) + 1e-12) ** n + (jnp.abs(q[..., 1] / b) + 1e-12) ** n
  return (r ** (1.0 / n) - 1.0) * jnp.minimum(a, b)


def _union(*sdfs: jax.Array) -> jax.Array:
  return jnp.min(jnp.stack(sdfs), axis=0)


def _periodic(f: Callable, ps: list[jax.Array], *args) -> jax.Array:
  """The union of f's shape over the 3 x 3 periodic images (`ps`: shifted grids)."""
  return _union(*(f(p, *args) for p in ps))


def _rods(ps, v):
  return _periodic(_rods_image, ps, v)


def _rods_image(p, v):
  th, tv, td, ta, r, wave = v
  y_bar = 0.5 + wave * jnp.sin(2 * jnp.pi * p[..., 0])
  return _union(jnp.abs(p[..., 1] - y_bar) - th / 2, jnp.abs(p[..., 0] - 0.5) - tv / 2,
                _segment(p, (0.0, 0.0), (1.0, 1.0), td / 2),
                _segment(p, (0.0, 1.0), (1.0, 0.0), ta / 2), _disc(p, (0.5, 0.5), r))


def _reentrant(ps, v):
  return _periodic(_reentrant_image, ps, v)


def _reentrant_image(p, v):
  height, dip_u, ti, tv, tc, r = v
  dip = -0.12 + dip_u * (0.9 * height + 0.12)  # re-entrant for dip > 0, apexes never meet
  top, bottom = 0.5 + height, 0.5 - height
  apex_top, apex_bottom = top - dip, bottom + dip
  parts = [_segment(p, (0.0, bottom), (0.0, top), tv / 2),
           _segment(p, (1.0, bottom), (1.0, top), tv / 2),
           _segment(p, (0.5, apex_top), (0.5, apex_bottom + 1.0), tc / 2),
           _segment(p, (0.5, apex_top - 1.0), (0.5, apex_bottom), tc / 2)]
  for x_end in (0.0, 1.0):
    parts += [_segment(p, (x_end, top), (0.5, apex_top), ti / 2),
              _segment(p, (x_end, bottom), (0.5, apex_bottom), ti / 2)]
  nodes = [_disc(p, c, r + ti / 2) for c in ((0.5, apex_top), (0.5, apex_bottom))]
  return _union(*parts, *nodes)


def _chiral(ps, v):
  return _periodic(_chiral_image, ps, v)


def _chiral_image(p, v):
  radius, t_ring, tlx, tly, chirality, core = v
  ring = jnp.abs(_disc(p, (0.5, 0.5), radius)) - t_ring / 2
  filled = _disc(p, (0.5, 0.5), core * radius)
  tilt = chirality * jnp.arcsin(jnp.clip(radius / 0.5, 0.0, 0.99))
  half = jnp.sqrt(jnp.maximum(0.25 - (chirality * radius) ** 2, 1e-4))
  d = jnp.stack([jnp.cos(tilt), jnp.sin(tilt)]) * half
  lig_x = _segment(p, jnp.array([1.0, 0.5]) - d, jnp.array([1.0, 0.5]) + d, tlx / 2)
  dy = jnp.stack([-d[1], d[0]])
  lig_y = _segment(p, jnp.array([0.5, 1.0]) - dy, jnp.array([0.5, 1.0]) + dy, tly / 2)
  return _union(ring, filled, lig_x, lig_y)


def _plates(ps, v):
  return _periodic(_plates_image, ps, v)


def _plates_image(p, v):
  tx, ty, td, wave, offset, fillet = v
  x_plate = 0.5 + wave * jnp.sin(2 * jnp.pi * p[..., 1])
  plate_x = jnp.abs(p[..., 0] - x_plate) - tx / 2
  plate_y = jnp.abs(p[..., 1] - 0.5) - ty / 2
  diagonal = _segment(p, (offset - 1.0, 0.0), (offset + 1.0, 2.0), td / 2)
  return _union(plate_x - fillet * (tx > 0), plate_y - fillet * (ty > 0), diagonal)


def _shell(ps, v):
  rx, ry, t, angle, tcx, tcy = v
  ellipse = lambda p: _superellipse(_rotate(p, (0.5, 0.5), angle), rx, ry, 2.0)
  ring = _periodic(lambda p: jnp.abs(ellipse(p)) - t / 2, ps)
  p = ps[len(ps) // 2]  # the unshifted grid; the bars are whole periodic lines
  bars = _union(jnp.abs(p[..., 1] - 0.5) - tcx / 2, jnp.abs(p[..., 0] - 0.5) - tcy / 2)
  outside = -_periodic(ellipse, ps)  # the SDF of the region outside every ellipse
  return _union(ring, jnp.maximum(bars, outside))


def _inclusion(ps, v):
  """A solid matrix around the periodic holes."""
  return -_periodic(_holes, ps, v)


def _holes(p, v):
  a, b, angle, n, rc, nc = v
  hole = _superellipse(_rotate(p, (0.5, 0.5), angle), a, b, n)
  corner = _superellipse(p, rc + 1e-3, rc + 1e-3, nc)
  return _union(hole, corner)


_SDFS: tuple[Callable, ...] = (_rods, _reentrant, _chiral, _plates, _shell, _inclusion)


def _grid(n: int, dtype) -> jax.Array:
  c = (jnp.arange(n, dtype=dtype) + 0.5) / n
  return jnp.stack(jnp.meshgrid(c, c, indexing="ij"), -1)  # [i, j] = (x_i, y_j)


def sdf(family: int | jax.Array, u: jax.Array, n: int) -> jax.Array:
  """The periodic SDF on the n x n element centres (index [i, j] is x_i, y_j)."""
  u = jnp.asarray(u)
  dtype = u.dtype if jnp.issubdtype(u.dtype, jnp.floating) else jnp.result_type(float)
  p = _grid(n, dtype)
  shifts = [(sx, sy) for sx in (-1.0, 0.0, 1.0) for sy in (-1.0, 0.0, 1.0)]

  def branch(k):
    def f(u):
      return _SDFS[k]([p + jnp.asarray(s, dtype) for s in shifts], physical(k, u))
    return f

  if isinstance(family, (int, np.integer)):  # a static family: no dispatch
    return branch(int(family))(u)
  return jax.lax.switch(jnp.asarray(family, jnp.int32), [branch(k) for k in
                                                          range(len(FAMILIES))], u)


def density(family: int | jax.Array, u: jax.Array, n: int, eps: float | None = None
            ) -> jax.Array:
  """The design's density field rho = sigmoid(-sdf / eps), shape (n, n), in (0, 1).

  Args:
    family: the family index (an int, or a traced int under `vmap`).
    u: (6,) parameters in [0, 1] (clipped).
    n: elements per side.
    eps: the smoothing width; half an element (0.5 / n) by default.

  Returns:
    (n, n) densities, index [i, j] the element at (x_i, y_j).

  Example:
    >>> rho = density(family_index("reentrant"), jnp.full(6, 0.5), 32)
  """
  eps = 0.5 / n if eps is None else eps
  return jax.nn.sigmoid(-sdf(family, u, n) / eps)
