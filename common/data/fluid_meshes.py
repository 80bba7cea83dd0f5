"""Irregular-mesh fluid data: lattice-Boltzmann channel flows sampled on a mesh.

The flows come from ``common.data.lbm`` (D2Q9, channel with a cylinder or an
ellipse, Re = U D / nu). They are sampled onto an irregular triangle mesh that is
dense near the obstacle and in its wake and sparse far away, the kind of mesh a
graph flow-matching model (CGFM) learns on.

Mesh
- Coordinates are in units of the obstacle's cross-stream size D, with the origin at
  the obstacle centre: pos = ((x - cx) / D, (y - cy) / D) for lattice position (x, y).
  The domain is the fluid channel: x from the inlet column to the outlet column, y
  between the half-way walls (y = 1/2 and y = ny - 3/2 in lattice units).
- Target point density rho(x, y) = 1 + 8 exp(-d / 0.5) + 4 exp(-x / 8)
  exp(-(y / (0.6 + 0.1 x))^2) [x > 0], d the distance to the obstacle outline; the
  local spacing is h = c / sqrt(rho), c fixed by ``num_points``. Boundary points are
  placed along the obstacle outline, the walls, the inlet and the outlet with that
  spacing; interior points by rejection sampling from rho with a minimum distance of
  0.6 h to every accepted point (dart throwing). Then ``scipy.spatial.Delaunay``;
  triangles whose centroid lies inside the obstacle are removed.
- Node types: NORMAL=0, WALL=1 (channel walls, corners included), OBSTACLE=2 (the
  obstacle's outline), INLET=3, OUTLET=4.

Sampling (``sample_fields``): bilinear interpolation of grid snapshots (..., nx, ny,
C) with channels (u, v, p). Velocity channels treat solid grid nodes as 0 (no-slip);
the pressure channel uses only the fluid corners of the cell (weights renormalised;
the nearest fluid node if none). Velocity on WALL and OBSTACLE mesh nodes is exactly 0.

File format (``save_npz``/``load_npz``, also for your own CFD data; ``to_arrays`` /
``from_arrays`` are the same format as a dict of arrays in memory): ``pos`` (N, 2)
float, ``senders``/``receivers`` (E,) int or ``triangles`` (T, 3) int (edges are
derived from the triangles when absent), ``node_type`` (N,) int (optional, default all
NORMAL), ``states`` (M, N, C) float, ``cond`` (M, P) or (M,) float, ``window`` (M,) int
(optional, default all 0: one trajectory) and ``time`` (M,) float (optional, default
0, 1, 2, ...).

Good sizes (``generate_cylinder_flow`` arguments; U = 0.1, regularized collision):
- ``tiny`` (tests): nx=80, ny=24, diameter=6, num_points=150, spinup_steps=1500,
  windows=2, window_length=4, record_every=10, Re in 20..100 (tau >= 0.518 needs
  Re <= 100 here). Generates 2 conditions in ~2 s. Shedding at Re = 100 is fully
  developed by ~2000 steps (St ~ 0.30).
- ``quick``: nx=180, ny=44, diameter=10, num_points=700, spinup_steps=5000,
  windows=8, window_length=10, record_every=20, window_gap=100, Re in 60..150.
  Twelve conditions (Re = 60..150) give 960 snapshots on 700 nodes in ~35 s on 2
  CPU cores (one compiled, vmapped run of 7400 steps). Shedding is saturated before
  5000 steps for Re >= 60 (Re <= 40 is steady); St = f D / U = 0.27 (Re 60), 0.29
  (Re 100), 0.30 (Re 150), U the mean inlet velocity (x 1.5 for the peak velocity:
  0.18-0.20); blockage D / H = 0.24. Re <= 166 is accepted with D = 10.
"""

from __future__ import annotations

import io
import zipfile
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import scipy.spatial

from common import trials
from common.data import lbm

Array = jax.Array

NORMAL, WALL, OBSTACLE, INLET, OUTLET = 0, 1, 2, 3, 4
NUM_NODE_TYPES = 5


class FlowMesh(NamedTuple):
  """An irregular triangle mesh of the fluid domain.

  Attributes:
    pos: (N, 2) float32 positions in units of D, origin at the obstacle centre.
    triangles: (T, 3) int32 node indices.
    senders: (E,) int32; every undirected edge appears in both directions.
    receivers: (E,) int32.
    node_type: (N,) int32 in {NORMAL, WALL, OBSTACLE, INLET, OUTLET}.
  """
  pos: np.ndarray
  triangles: np.ndarray
  senders: np.ndarray
  receivers: np.ndarray
  node_type: np.ndarray


class FlowDataset(NamedTuple):
  """Snapshots of flows on one mesh.

  Attributes:
    mesh: the ``FlowMesh``.
    states: (M, N, 3) float32 (u / U, v / U, p / U^2) on the nodes.
    cond: (M, P) float32 conditions (here P = 1: the Reynolds number).
    window: (M,) int32 globally unique id of the trajectory window of each snapshot.
    time: (M,) float32 time in convective units t U / D.
  """
  mesh: FlowMesh
  states: np.ndarray
  cond: np.ndarray
  window: np.ndarray
  time: np.ndarray


# ---------------------------------------------------------------------------
# Mesh.


def edges_from_triangles(triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Every undirected triangle edge in both directions, unique, sorted."""
  tri = np.asarray(triangles, np.int64).reshape(-1, 3)
  e = np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [2, 0]]])
  e = np.concatenate([e, e[:, ::-1]])
  e = e[e[:, 0] != e[:, 1]]
  e = np.unique(e, axis=0)
  return e[:, 0].astype(np.int32), e[:, 1].astype(np.int32)


def _domain(geometry: lbm.Geometry) -> tuple[float, float, float, float]:
  g, d = geometry, geometry.diameter
  return ((0.0 - g.cx) / d, (g.nx - 1 - g.cx) / d,
          (0.5 - g.cy) / d, (g.ny - 1.5 - g.cy) / d)


def _level(geometry: lbm.Geometry, p: np.ndarray) -> np.ndarray:
  """Obstacle implicit function at mesh positions p (..., 2) (units of D)."""
  g, d = geometry, geometry.diameter
  return lbm.obstacle_level(g, g.cx + d * p[..., 0], g.cy + d * p[..., 1])


def _outline(geometry: lbm.Geometry, spacing_fn, scale: float) -> np.ndarray:
  """Points on the obstacle outline, spaced by the local target spacing."""
  g, d = geometry, geometry.diameter
  theta = np.linspace(0, 2 * np.pi, 2049)
  cos, sin = math.cos(g.angle), math.sin(g.angle)
  ex, ey = g.a * np.cos(theta), g.b * np.sin(theta)
  pts = np.stack([cos * ex - sin * ey, sin * ex + cos * ey], -1) / d
  seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
  h = spacing_fn(pts[:-1], scale)
  steps = np.concatenate([[0.0], np.cumsum(seg / h)])
  n = max(12, int(round(steps[-1])))
  targets = np.arange(n) * steps[-1] / n
  th = np.interp(targets, steps, theta)
  ex, ey = g.a * np.cos(th), g.b * np.sin(th)
  return np.stack([cos * ex - sin * ey, sin * ex + cos * ey], -1) / d


def _line(p0: np.ndarray, p1: np.ndarray, spacing_fn, scale: float) -> np.ndarray:
  """Points from p0 to p1 (both included) spaced by the local target spacing."""
  s = np.linspace(0, 1, 1025)
  pts = p0[None] + s[:, None] * (p1 - p0)[None]
  length = float(np.linalg.norm(p1 - p0))
  h = spacing_fn(pts, scale)
  steps = np.concatenate([[0.0], np.cumsum(np.diff(s) * length / h[:-1])])
  n = max(1, int(round(steps[-1])))
  ss = np.interp(np.arange(n + 1) * steps[-1] / n, steps, s)
  return p0[None] + ss[:, None] * (p1 - p0)[None]


def make_mesh(geometry: lbm.Geometry, num_points: int, *, seed: int) -> FlowMesh:
  """Builds an irregular Delaunay mesh of the channel around the obstacle.

  Args:
    geometry: the channel and obstacle (``lbm.make_geometry``).
    num_points: target number of nodes (>= 40); the result has at most this many.
    seed: numpy seed of the rejection sampling.

  Returns:
    A connected ``FlowMesh``.
  """
  lbm.validate_geometry(geometry)
  if int(num_points) != num_points or num_points < 40:
    raise ValueError(f"num_points must be an integer >= 40, got {num_points}")
  rng = np.random.default_rng(seed)
  x0, x1, y0, y1 = _domain(geometry)

  def density(p):
    lev = np.maximum(_level(geometry, p), 0.0)
    dist = np.maximum(np.sqrt(lev) - 1.0, 0.0) * 0.5      # ~ distance in units of D
    x, y = p[..., 0], p[..., 1]
    wake = np.where(x > 0, np.exp(-np.maximum(x, 0) / 8.0)
                    * np.exp(-(y / (0.6 + 0.1 * np.maximum(x, 0)))**2), 0.0)
    return 1.0 + 8.0 * np.exp(-dist / 0.5) + 4.0 * wake

  def spacing(p, scale):
    return scale / np.sqrt(density(p))

  # Scale c: the dart-throwing packing (min distance 0.6 h) fills the domain with
  # about area / (0.9 h^2) points; aim a little above num_points.
  gx, gy = np.meshgrid(np.linspace(x0, x1, 200), np.linspace(y0, y1, 60))
  grid = np.stack([gx, gy], -1)
  outside = _level(geometry, grid) > 1
  area = (x1 - x0) * (y1 - y0)
  mass = float(np.mean(density(grid) * outside)) * area
  scale = math.sqrt(mass / (0.9 * num_points))

  corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
  bottom = _line(corners[0], corners[1], spacing, scale)
  top = _line(corners[3], corners[2], spacing, scale)
  inlet = _line(corners[0], corners[3], spacing, scale)[1:-1]
  outlet = _line(corners[1], corners[2], spacing, scale)[1:-1]
  obstacle = _outline(geometry, spacing, scale)
  boundary = [(bottom, WALL), (top, WALL), (inlet, INLET), (outlet, OUTLET),
              (obstacle, OBSTACLE)]
  pts = np.concatenate([b for b, _ in boundary])
  types = np.concatenate([np.full(len(b), t, np.int32) for b, t in boundary])
  if len(pts) >= num_points:
    raise ValueError(f"num_points={num_points} is too small: the boundary alone "
                     f"needs {len(pts)} points")

  # Dart throwing from the density, with a minimum distance 0.6 h(x).
  accepted = list(pts)
  rho_max = 13.0
  budget = num_points - len(pts)
  new = []
  for _ in range(60):
    cand = rng.uniform([x0, y0], [x1, y1], size=(4 * num_points, 2))
    keep = rng.uniform(size=len(cand)) * rho_max < density(cand)
    cand = cand[keep & (_level(geometry, cand) > 1.0)]
    h = spacing(cand, scale)
    # Away from the straight boundaries too.
    margin = np.minimum.reduce([cand[:, 0] - x0, x1 - cand[:, 0],
                                cand[:, 1] - y0, y1 - cand[:, 1]])
    cand, h = cand[margin > 0.5 * h], h[margin > 0.5 * h]
    arr = np.asarray(accepted)
    for p, hp in zip(cand, h):
      if np.min(np.sum((arr - p)**2, axis=1)) >= (0.6 * hp)**2:
        accepted.append(p)
        new.append(p)
        arr = np.concatenate([arr, p[None]])
        if len(new) >= budget:
          break
    if len(new) >= budget:
      break
  pts = np.concatenate([pts, np.asarray(new).reshape(-1, 2)])
  types = np.concatenate([types, np.full(len(new), NORMAL, np.int32)])

  tri = scipy.spatial.Delaunay(pts).simplices
  centroid = pts[tri].mean(axis=1)
  v = pts[tri]
  area2 = np.abs((v[:, 1, 0] - v[:, 0, 0]) * (v[:, 2, 1] - v[:, 0, 1])
                 - (v[:, 2, 0] - v[:, 0, 0]) * (v[:, 1, 1] - v[:, 0, 1]))
  tri = tri[(_level(geometry, centroid) > 1.0) & (area2 > 1e-10)]
  # Drop nodes no triangle uses (none expected) and re-index.
  used = np.zeros(len(pts), bool)
  used[tri.ravel()] = True
  remap = np.cumsum(used) - 1
  pts, types, tri = pts[used], types[used], remap[tri]
  senders, receivers = edges_from_triangles(tri)
  n_comp, _ = scipy.sparse.csgraph.connected_components(
      scipy.sparse.coo_matrix((np.ones(len(senders)), (senders, receivers)),
                              shape=(len(pts),) * 2))
  if n_comp != 1:
    raise RuntimeError(f"mesh has {n_comp} connected components, expected 1")
  return FlowMesh(pts.astype(np.float32), tri.astype(np.int32), senders, receivers,
                  types.astype(np.int32))


# ---------------------------------------------------------------------------
# Grid -> mesh sampling.


class _Stencil(NamedTuple):
  index: np.ndarray      # (N, 4) flat grid indices
  w_vel: np.ndarray      # (N, 4) velocity weights (solid corners 0)
  w_p: np.ndarray        # (N, 4) pressure weights (fluid corners, renormalised)
  no_slip: np.ndarray    # (N,) bool: velocity forced to 0


def _stencil(geometry: lbm.Geometry, mesh: FlowMesh) -> _Stencil:
  g, d = geometry, geometry.diameter
  pos = np.asarray(mesh.pos, np.float64)
  x = np.clip(g.cx + d * pos[:, 0], 0, g.nx - 1)
  y = np.clip(g.cy + d * pos[:, 1], 0, g.ny - 1)
  i0 = np.clip(np.floor(x).astype(np.int64), 0, g.nx - 2)
  j0 = np.clip(np.floor(y).astype(np.int64), 0, g.ny - 2)
  fx, fy = x - i0, y - j0
  ii = np.stack([i0, i0 + 1, i0, i0 + 1], 1)
  jj = np.stack([j0, j0, j0 + 1, j0 + 1], 1)
  w = np.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], 1)
  solid = lbm.solid_mask(g)
  fluid = ~solid[ii, jj]
  w_vel = w * fluid
  w_p = w * fluid
  tot = w_p.sum(1, keepdims=True)
  index = ii * g.ny + jj
  lonely = tot[:, 0] <= 1e-12
  w_p = np.where(lonely[:, None], 0.0, w_p / np.where(tot > 1e-12, tot, 1.0))
  if np.any(lonely):                       # nearest fluid node
    fi, fj = np.nonzero(~solid)
    tree = scipy.spatial.cKDTree(np.stack([fi, fj], 1))
    _, k = tree.query(np.stack([x[lonely], y[lonely]], 1))
    index[lonely, 0] = fi[k] * g.ny + fj[k]
    w_p[lonely, 0] = 1.0
  no_slip = np.isin(mesh.node_type, (WALL, OBSTACLE))
  return _Stencil(index, w_vel.astype(np.float32), w_p.astype(np.float32), no_slip)


def sample_fields(grid_fields: Array, geometry: lbm.Geometry, mesh: FlowMesh) -> Array:
  """Bilinear interpolation of grid snapshots onto the mesh nodes.

  Args:
    grid_fields: (..., nx, ny, C) grid values; the first two channels are
      velocities (0 on solid nodes, no-slip), channel 2 (if any) pressure.
    geometry: the grid's ``Geometry``.
    mesh: the ``FlowMesh`` built on it.

  Returns:
    (..., N, C) values on the mesh nodes; velocity 0 on WALL and OBSTACLE nodes.
  """
  grid_fields = jnp.asarray(grid_fields)
  if grid_fields.ndim < 3 or grid_fields.shape[-3:-1] != (geometry.nx, geometry.ny):
    raise ValueError(f"grid_fields must have shape (..., {geometry.nx}, "
                     f"{geometry.ny}, C), got {grid_fields.shape}")
  st = _stencil(geometry, mesh)
  c = grid_fields.shape[-1]
  flat = grid_fields.reshape(grid_fields.shape[:-3] + (-1, c))
  gathered = flat[..., jnp.asarray(st.index), :]                # (..., N, 4, C)
  is_vel = (jnp.arange(c) < 2)
  w = jnp.where(is_vel, jnp.asarray(st.w_vel)[..., None],
                jnp.asarray(st.w_p)[..., None])                 # (N, 4, C)
  out = jnp.sum(gathered * w, axis=-2)
  zero = jnp.asarray(st.no_slip)[:, None] & is_vel[None, :]
  return jnp.where(zero, 0.0, out)


# ---------------------------------------------------------------------------
# Dataset.


def generate_cylinder_flow(reynolds: Sequence[float], *, nx: int = 180, ny: int = 44,
                           diameter: float = 10.0, kind: str = "cylinder",
                           axes: tuple[float, float] | None = None,
                           angle: float = 0.0, num_points: int = 700,
                           windows: int = 8, window_length: int = 10,
                           record_every: int = 20, window_gap: int = 100,
                           spinup_steps: int = 5000, inlet_velocity: float = 0.1,
                           collision: str = "regularized",
                           seed: int) -> FlowDataset:
  """Simulates all Reynolds numbers in one vmapped run and samples them on a mesh.

  Args:
    reynolds: (K,) Reynolds numbers.
    nx, ny, diameter, kind, axes, angle: the geometry (``lbm.make_geometry``).
    num_points: mesh nodes (target).
    windows, window_length, record_every, window_gap, spinup_steps: the recording
      schedule (``lbm.simulate_channel_flow``).
    inlet_velocity: lattice mean inlet velocity U.
    collision: the collision operator (``lbm.COLLISIONS``).
    seed: mesh seed.

  Returns:
    A ``FlowDataset`` with M = K * windows * window_length snapshots, ordered by
    condition, window, time; window ids are k * windows + w.
  """
  geometry = lbm.make_geometry(nx, ny, kind, diameter=diameter, axes=axes,
                               angle=angle)
  re = np.atleast_1d(np.asarray(reynolds, np.float32))
  lbm.reynolds_to_tau(re, geometry, inlet_velocity)    # validate before meshing
  mesh = make_mesh(geometry, num_points, seed=seed)
  flow = lbm.simulate_channel_flow(
      geometry, re, spinup_steps=spinup_steps, windows=windows,
      window_length=window_length, record_every=record_every, window_gap=window_gap,
      inlet_velocity=inlet_velocity, collision=collision)
  states = np.asarray(sample_fields(flow.fields, geometry, mesh), np.float32)
  k, r = states.shape[:2]
  states = states.reshape((k * r,) + states.shape[2:])
  cond = np.repeat(re, r)[:, None].astype(np.float32)
  window = (np.arange(k, dtype=np.int32)[:, None] * windows
            + flow.window[None, :]).reshape(-1).astype(np.int32)
  time = np.tile(flow.time, k).astype(np.float32)
  if not np.all(np.isfinite(states)):
    raise FloatingPointError("simulation diverged (non-finite fields); lower Re or "
                             "refine the grid")
  return FlowDataset(mesh, states, cond, window, time)


def to_arrays(dataset: FlowDataset) -> dict[str, np.ndarray]:
  """The dataset as the flat dict of arrays of the ``.npz`` format (see module doc).

  Example:
    >>> arrays = to_arrays(data)          # pos, triangles, senders, ..., time
    >>> back = from_arrays(arrays)        # the same dataset
  """
  m = dataset.mesh
  arrays = dict(pos=m.pos, triangles=m.triangles, senders=m.senders,
                receivers=m.receivers, node_type=m.node_type, states=dataset.states,
                cond=dataset.cond, window=dataset.window, time=dataset.time)
  return {k: np.asarray(v) for k, v in arrays.items()}


def save_npz(path: str, dataset: FlowDataset) -> None:
  """Writes the dataset to ``path`` atomically (temp file + os.replace)."""
  buffer = io.BytesIO()
  np.savez(buffer, **to_arrays(dataset))
  trials.atomic_write_bytes(path, buffer.getvalue())


def _get(data, key: str, ndim: int, kind: str, shape_text: str) -> np.ndarray:
  arr = np.asarray(data[key])
  if arr.ndim != ndim:
    raise ValueError(f"npz key {key!r} must have shape {shape_text}, got {arr.shape}")
  ok = (np.issubdtype(arr.dtype, np.integer) if kind == "int"
        else np.issubdtype(arr.dtype, np.number) and not np.iscomplexobj(arr))
  if not ok:
    raise ValueError(f"npz key {key!r} must be {'integer' if kind == 'int' else 'real'}"
                     f" with shape {shape_text}, got dtype {arr.dtype}")
  return arr


def _check_keys(keys: set, source: str) -> bool:
  """Whether explicit edges are given; raises for a missing required key."""
  for key in ("pos", "states", "cond"):
    if key not in keys:
      raise ValueError(f"{source} lacks the key {key!r} (has {sorted(keys)})")
  has_edges = "senders" in keys or "receivers" in keys
  if has_edges and not ("senders" in keys and "receivers" in keys):
    raise ValueError(f"{source} needs both 'senders' and 'receivers' (has {sorted(keys)})")
  if not has_edges and "triangles" not in keys:
    raise ValueError(f"{source} needs 'senders'/'receivers' or 'triangles'"
                     f" (has {sorted(keys)})")
  return has_edges


def _mesh_arrays(data, n: int, has_edges: bool):
  """(triangles, senders, receivers, node_type), checked against N = n nodes."""
  if "triangles" in data:
    tri = _get(data, "triangles", 2, "int", "(T, 3)")
    if tri.shape[1] != 3 or (tri.size and (tri.min() < 0 or tri.max() >= n)):
      raise ValueError(f"npz key 'triangles' must be (T, 3) indices in [0, {n}), "
                       f"got shape {tri.shape}")
  else:
    tri = np.zeros((0, 3), np.int32)
  if has_edges:
    senders = _get(data, "senders", 1, "int", "(E,)")
    receivers = _get(data, "receivers", 1, "int", "(E,)")
    if senders.shape != receivers.shape:
      raise ValueError(f"npz keys 'senders' and 'receivers' must have the same "
                       f"shape (E,), got {senders.shape} and {receivers.shape}")
    for key, e in (("senders", senders), ("receivers", receivers)):
      if e.size and (e.min() < 0 or e.max() >= n):
        raise ValueError(f"npz key {key!r} must hold node indices in [0, {n}), "
                         f"got range [{e.min()}, {e.max()}]")
  else:
    senders, receivers = edges_from_triangles(tri)
  if "node_type" in data:
    node_type = _get(data, "node_type", 1, "int", f"({n},)")
    if node_type.shape != (n,) or (n and (node_type.min() < 0
                                          or node_type.max() >= NUM_NODE_TYPES)):
      raise ValueError(f"npz key 'node_type' must be ({n},) ints in [0, "
                       f"{NUM_NODE_TYPES}), got shape {node_type.shape}")
  else:
    node_type = np.full(n, NORMAL, np.int32)
  return tri, senders, receivers, node_type


def _snapshot_arrays(data, m: int):
  """(window, time) of the M = m snapshots, defaults filled in."""
  if "window" in data:
    window = _get(data, "window", 1, "int", f"({m},)")
    if window.shape != (m,):
      raise ValueError(f"npz key 'window' must have shape ({m},), got {window.shape}")
  else:
    window = np.zeros(m, np.int32)
  if "time" in data:
    time = _get(data, "time", 1, "real", f"({m},)")
    if time.shape != (m,):
      raise ValueError(f"npz key 'time' must have shape ({m},), got {time.shape}")
  else:
    time = np.arange(m, dtype=np.float32)
  return window, time


def from_arrays(data, source: str = "npz data") -> FlowDataset:
  """A ``FlowDataset`` from the arrays of the ``.npz`` format, checked and completed.

  Args:
    data: a mapping of key -> array with ``pos``, ``states``, ``cond`` and either
      ``senders``/``receivers`` or ``triangles``; ``node_type``, ``window`` and
      ``time`` are optional (see the module doc for shapes and defaults).
    source: how errors name the data (e.g. "npz file /path/flow.npz").

  Returns:
    The dataset with float32 / int32 arrays; edges derived from the triangles when
    absent.

  Raises:
    ValueError: naming the missing or malformed key.
  """
  has_edges = _check_keys(set(data.keys()), source)
  try:
    return _from_checked_keys(data, has_edges)
  except ValueError as e:
    raise ValueError(f"{source}: {e}") from None


def _finite(key: str, arr: np.ndarray) -> np.ndarray:
  """Rejects NaN/inf, which would flow silently into the standardizer and the loss."""
  bad = np.argwhere(~np.isfinite(arr))
  if bad.size:
    raise ValueError(f"npz key {key!r} holds {arr[tuple(bad[0])]} at index "
                     f"{tuple(int(i) for i in bad[0])}; expected finite values")
  return arr


def _from_checked_keys(data, has_edges: bool) -> FlowDataset:
  pos = _get(data, "pos", 2, "real", "(N, 2)")
  n = pos.shape[0]
  if pos.shape[1] != 2 or n < 1:
    raise ValueError(f"npz key 'pos' must have shape (N, 2), got {pos.shape}")
  states = _get(data, "states", 3, "real", f"(M, {n}, C)")
  if states.shape[1] != n:
    raise ValueError(f"npz key 'states' must have shape (M, {n}, C) (N from 'pos'),"
                     f" got {states.shape}")
  m = states.shape[0]
  if m < 1 or states.shape[2] < 1:
    raise ValueError(f"npz key 'states' must have shape (M, {n}, C) with M, C >= 1, got "
                     f"{states.shape}")
  _finite("pos", pos)
  _finite("states", states)
  cond = np.asarray(data["cond"])
  if cond.ndim == 1:
    cond = cond[:, None]
  if cond.ndim != 2 or cond.shape[0] != m or not np.issubdtype(cond.dtype, np.number):
    raise ValueError(f"npz key 'cond' must be real with shape ({m}, P) or ({m},),"
                     f" got {np.asarray(data['cond']).shape} {cond.dtype}")
  _finite("cond", cond)
  tri, senders, receivers, node_type = _mesh_arrays(data, n, has_edges)
  window, time = _snapshot_arrays(data, m)
  _finite("time", time)
  mesh = FlowMesh(pos.astype(np.float32), tri.astype(np.int32),
                  senders.astype(np.int32), receivers.astype(np.int32),
                  node_type.astype(np.int32))
  return FlowDataset(mesh, states.astype(np.float32), cond.astype(np.float32),
                     window.astype(np.int32), time.astype(np.float32))


def load_npz(path: str) -> FlowDataset:
  """Reads a dataset written by ``save_npz`` or by your own CFD (see module doc)."""
  source = f"npz file {path}"
  try:
    loaded = np.load(path, allow_pickle=False)
  except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
    if isinstance(e, FileNotFoundError):
      raise FileNotFoundError(f"{source} does not exist") from None
    raise ValueError(f"{source} is not a readable .npz archive ({e}); expected the "
                     f"arrays written by save_npz or np.savez") from None
  if not isinstance(loaded, np.lib.npyio.NpzFile):
    raise ValueError(f"{source} holds a single array, not an .npz archive of named arrays "
                     f"(pos, states, cond, ...)")
  with loaded as data:
    try:
      arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
      raise ValueError(f"{source} has an unreadable array ({e}); expected the arrays "
                       f"written by save_npz or np.savez") from None
  return from_arrays(arrays, source=source)
