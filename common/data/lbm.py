"""A D2Q9 lattice-Boltzmann solver in JAX: channel flow past a cylinder or an ellipse.

All quantities are in lattice units (grid spacing 1, time step 1). Populations
``f`` have shape (9, nx, ny); node (i, j) sits at position (x, y) = (i, j).

Equations
- Lattice: D2Q9 velocities c_i and weights w_i = 4/9 (rest), 1/9 (axis), 1/36
  (diagonals); sound speed c_s^2 = 1/3.
- Moments: rho = sum_i f_i, rho u = sum_i f_i c_i + F / 2 (Guo's half-force shift).
- Equilibrium: f_i^eq = w_i rho (1 + 3 c_i.u + 4.5 (c_i.u)^2 - 1.5 u.u).
- BGK collision: f_i <- f_i - (f_i - f_i^eq) / tau (+ the Guo force term
  (1 - 1/(2 tau)) w_i [3 (c_i - u).F + 9 (c_i.u)(c_i.F)]).
- TRT collision: the same, but the even part f^+ relaxes with tau and the odd part
  f^- with tau^- where (tau - 1/2)(tau^- - 1/2) = Lambda. Lambda = 3/16 puts the
  half-way bounce-back wall exactly half-way between nodes for Poiseuille flow (used
  by ``simulate_poiseuille``). With the Zou-He inlet it went unstable here even at
  tau = 0.54, so the channel flow does not use it by default.
- Regularized BGK (the channel-flow default; Latt & Chopard 2006): f^neq is projected
  on its stress moments before relaxing, f_i <- f_i^eq + (1 - 1/tau) w_i 4.5 Q_i :
  Pi^neq, Q_i = c_i c_i - I / 3, Pi^neq = sum_i (f_i - f_i^eq) c_i c_i. Plain BGK
  diverged at tau = 0.52 (Re = 150, D = 10, U = 0.1); the regularized one did not.
  With a force, f^neq + S^+ / 2 is projected, the even source gets (1 - 1/(2 tau))
  and the odd one 1/2 (the projection drops the first moment of f^neq, and rho u
  already carries F / 2), so the momentum gained per step is exactly F.
- Viscosity: nu = (tau - 1/2) / 3. Reynolds number Re = U D / nu, U the mean inlet
  velocity and D the obstacle's cross-stream size, so tau = 1/2 + 3 U D / Re.
- Streaming: f_i(x + c_i, t + 1) = f_i*(x, t) (post-collision f*).
- Half-way bounce-back on every solid node (channel walls, obstacle): a population
  that would stream into a solid node comes back to where it left, reversed:
  f_{opp(i)}(x, t + 1) = f_i*(x, t). The wall sits half-way between the last fluid
  node and the first solid one.
- Inlet (x = 0): Zou-He velocity boundary with a parabolic profile of mean U,
  u(s) = 6 U s (H - s) / H^2, s the distance from the lower wall. The density comes
  from the known populations, rho = (f0 + f2 + f4 + 2 (f3 + f6 + f7)) / (1 - u_x).
- Outlet (x = nx - 1): Guo's non-equilibrium extrapolation at fixed pressure,
  f_i = f_i^eq(1, u_{nx-2}) + (f_i - f_i^eq)_{nx-2}: a zero-gradient velocity outlet
  with rho = 1 that lets vortices leave without blowing up.
- Output fields: u / U, v / U and p / U^2 with p = (rho - mean_fluid rho) / 3, so the
  fields are O(1); solid nodes hold 0.

The channel has solid rows j = 0 and j = ny - 1 (walls at y = 1/2 and y = ny - 3/2,
height H = ny - 2). The obstacle's centre is placed slightly (by default 0.1 cells)
above the centreline and the initial state carries a small transverse kick behind it,
so vortex shedding starts within a few flow-through times.

Stability found (float32, regularized BGK, 180 x 44 grid, D = 10, U = 0.1): stable
at tau = 0.5176 (Re = 170), diverged at tau = 0.515 (Re = 200), and at tau = 0.518
with U = 0.12 (higher Mach). The simulator refuses tau below ``min_tau`` (default
0.518) as "Re too high for the grid": Re <= 3 U D / 0.018, i.e. Re <= 166 for D = 10
and Re <= 200 needs D >= 12. Shedding (blockage D / H = 0.24) is seen at Re = 80
(St = f D / U = 0.28), 150 (0.30) and 170 (0.31), with U the mean inlet velocity
(times 1.5 for the peak velocity: St ~ 0.19-0.2); Re = 20 gives a steady wake.

Example:
  geom = make_geometry(nx=180, ny=44, diameter=10.0)
  flow = simulate_channel_flow(geom, jnp.array([100.0, 150.0]), spinup_steps=6000,
                               windows=4, window_length=10, record_every=20)
  flow.fields.shape  # (2, 40, 180, 44, 3)
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

# D2Q9 lattice: velocities c_i, weights w_i and the opposite directions.
_C = np.array([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1],
               [1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.int32)
_W = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4, dtype=np.float32)
_OPP = np.array([0, 3, 4, 1, 2, 7, 8, 5, 6], dtype=np.int32)
for _a in (_C, _W, _OPP):
  _a.flags.writeable = False
del _a
VELOCITIES, WEIGHTS, OPPOSITE = _C, _W, _OPP

OBSTACLE_KINDS = ("cylinder", "ellipse")
COLLISIONS = ("regularized", "bgk", "trt")


class Geometry(NamedTuple):
  """A channel of nx x ny nodes with one obstacle.

  Attributes:
    nx: nodes along the channel (x, flow direction).
    ny: nodes across it, including the two solid wall rows.
    kind: ``"cylinder"`` or ``"ellipse"``.
    cx: obstacle centre, x (lattice units).
    cy: obstacle centre, y.
    a: semi-axis along the obstacle's own first axis (the radius for a cylinder).
    b: semi-axis along its second axis (equal to ``a`` for a cylinder).
    angle: angle of the first axis to the x axis, radians (counter-clockwise).
  """
  nx: int
  ny: int
  kind: str
  cx: float
  cy: float
  a: float
  b: float
  angle: float

  @property
  def diameter(self) -> float:
    """Cross-stream size D of the obstacle: its extent along y."""
    return 2.0 * _half_extent_y(self.a, self.b, self.angle)

  @property
  def height(self) -> float:
    """Channel height H = ny - 2 between the half-way walls."""
    return float(self.ny - 2)


def _half_extent_y(a: float, b: float, angle: float) -> float:
  return math.sqrt((a * math.sin(angle)) ** 2 + (b * math.cos(angle)) ** 2)


def _half_extent_x(a: float, b: float, angle: float) -> float:
  return math.sqrt((a * math.cos(angle)) ** 2 + (b * math.sin(angle)) ** 2)


def make_geometry(nx: int, ny: int, kind: str = "cylinder", *,
                  diameter: float = 8.0, axes: tuple[float, float] | None = None,
                  angle: float = 0.0, center: tuple[float, float] | None = None,
                  offset: float = 0.1) -> Geometry:
  """Builds and validates a channel geometry.

  Args:
    nx: nodes along the channel (>= 16).
    ny: nodes across the channel including the two wall rows (>= 8).
    kind: ``"cylinder"`` or ``"ellipse"``.
    diameter: the cylinder's diameter (cylinder only).
    axes: the ellipse's semi-axes (a, b) (ellipse only).
    angle: the ellipse's angle in radians (ellipse only).
    center: obstacle centre (cx, cy); default cx = 2.5 D + 1 from the inlet and
      cy = the centreline (ny - 1) / 2 plus ``offset``.
    offset: cross-stream shift of the default centre, cells (the small asymmetry that
      starts shedding early).

  Returns:
    The validated ``Geometry``.

  Raises:
    ValueError: unknown kind, non-positive sizes, or an obstacle that does not fit
      in the channel with at least two fluid cells around it.
  """
  for name, value in (("nx", nx), ("ny", ny)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
      raise TypeError(f"{name}={value!r}; expected an int number of grid nodes")
  for name, value in (("angle", angle), ("offset", offset)):
    if not math.isfinite(value):
      raise ValueError(f"{name}={value!r}; expected a finite number")
  nx, ny = int(nx), int(ny)
  if nx < 16 or ny < 8:
    raise ValueError(f"grid must be at least 16 x 8 nodes, got nx={nx}, ny={ny}")
  if kind == "cylinder":
    if not diameter > 0:
      raise ValueError(f"cylinder diameter must be > 0, got {diameter}")
    a = b = 0.5 * float(diameter)
    angle = 0.0
  elif kind == "ellipse":
    if axes is None or len(axes) != 2:
      raise ValueError(f"ellipse needs axes=(a, b), got {axes}")
    a, b = float(axes[0]), float(axes[1])
    if not (a > 0 and b > 0):
      raise ValueError(f"ellipse semi-axes must be > 0, got {axes}")
  else:
    raise ValueError(f"unknown obstacle kind {kind!r}, expected one of "
                     f"{OBSTACLE_KINDS}")
  d = 2.0 * _half_extent_y(a, b, angle)
  if center is None:
    center = (2.5 * d + 1.0, 0.5 * (ny - 1) + float(offset))
  geometry = Geometry(nx, ny, kind, float(center[0]), float(center[1]), a, b,
                      float(angle))
  validate_geometry(geometry)
  return geometry


def validate_geometry(geometry: Geometry) -> None:
  """Raises ValueError if the obstacle is not well inside the channel."""
  g = geometry
  if g.kind not in OBSTACLE_KINDS:
    raise ValueError(f"unknown obstacle kind {g.kind!r}, expected one of "
                     f"{OBSTACLE_KINDS}")
  # NaN fails every comparison below, so it would pass them: check finiteness first.
  for name in ("cx", "cy", "a", "b", "angle"):
    if not math.isfinite(getattr(g, name)):
      raise ValueError(f"geometry {name}={getattr(g, name)!r}; expected a finite number")
  ex, ey = _half_extent_x(g.a, g.b, g.angle), _half_extent_y(g.a, g.b, g.angle)
  # Fluid rows are 1 .. ny - 2; keep two fluid cells between obstacle and walls,
  # and between it and the inlet / outlet columns.
  if g.cy - ey < 3 or g.cy + ey > g.ny - 4:
    raise ValueError(
        f"obstacle spans y in [{g.cy - ey:.2f}, {g.cy + ey:.2f}], expected inside "
        f"[3, {g.ny - 4}] (the channel's fluid rows minus a 2-cell margin)")
  if g.cx - ex < 3 or g.cx + ex > g.nx - 6:
    raise ValueError(
        f"obstacle spans x in [{g.cx - ex:.2f}, {g.cx + ex:.2f}], expected inside "
        f"[3, {g.nx - 6}] (away from the inlet and the outlet)")


def obstacle_level(geometry: Geometry, x, y):
  """Implicit function of the obstacle: < 1 inside, 1 on the outline, > 1 outside.

  Works on numpy or jax arrays of positions in lattice units.
  """
  g = geometry
  dx, dy = x - g.cx, y - g.cy
  cos, sin = math.cos(g.angle), math.sin(g.angle)
  xr = cos * dx + sin * dy
  yr = -sin * dx + cos * dy
  return (xr / g.a) ** 2 + (yr / g.b) ** 2


def solid_mask(geometry: Geometry) -> np.ndarray:
  """Boolean (nx, ny) mask of solid nodes: the two wall rows and the obstacle."""
  x, y = np.meshgrid(np.arange(geometry.nx, dtype=np.float64),
                     np.arange(geometry.ny, dtype=np.float64), indexing="ij")
  solid = obstacle_level(geometry, x, y) <= 1.0
  solid[:, 0] = True
  solid[:, -1] = True
  return solid


def inlet_profile(ny: int, velocity: float) -> np.ndarray:
  """Parabolic inlet profile of mean ``velocity`` on the ny rows (0 on walls)."""
  h = ny - 2
  s = np.arange(ny, dtype=np.float64) - 0.5
  u = 6.0 * velocity * s * (h - s) / h**2
  u[0] = u[-1] = 0.0
  return u.astype(np.float32)


# ---------------------------------------------------------------------------
# Kernel: moments, equilibrium, collision, streaming.


def equilibrium(rho: Array, u: Array) -> Array:
  """f_i^eq = w_i rho (1 + 3 c.u + 4.5 (c.u)^2 - 1.5 u.u); rho (...), u (2, ...)."""
  c = jnp.asarray(_C, u.dtype)
  w = jnp.asarray(_W, u.dtype).reshape((9,) + (1,) * rho.ndim)
  cu = jnp.tensordot(c, u, axes=(1, 0))
  usq = jnp.sum(u * u, axis=0)
  return w * rho * (1 + 3 * cu + 4.5 * cu**2 - 1.5 * usq)


def macroscopic(f: Array, force: Array | None = None) -> tuple[Array, Array]:
  """rho = sum f_i and u = (sum f_i c_i + F / 2) / rho; f (9, ...)."""
  rho = jnp.sum(f, axis=0)
  mom = jnp.tensordot(jnp.asarray(_C, f.dtype).T, f, axes=(1, 0))
  if force is not None:
    mom = mom + 0.5 * force.reshape((2,) + (1,) * rho.ndim)
  return rho, mom / rho


def _regularize(fneq: Array) -> Array:
  """Projects f^neq on its second-order Hermite part w_i 4.5 Q_i : Pi^neq."""
  c = _C.astype(np.float32)
  q = np.stack([c[:, 0]**2 - 1 / 3, 2 * c[:, 0] * c[:, 1], c[:, 1]**2 - 1 / 3], 1)
  cc = np.stack([c[:, 0]**2, c[:, 0] * c[:, 1], c[:, 1]**2])   # (3, 9)
  pi = jnp.tensordot(jnp.asarray(cc), fneq, axes=(1, 0))        # (3, ...)
  proj = jnp.tensordot(jnp.asarray(4.5 * _W[:, None] * q), pi, axes=(1, 0))
  return proj


def collide(f: Array, omega_plus: Array, omega_minus: Array,
            force: Array | None = None, regularized: bool = False) -> Array:
  """TRT collision (BGK when omega_minus == omega_plus) with Guo forcing.

  With ``regularized`` the non-equilibrium part is first projected on its
  second-order (stress) moments, f^neq -> w_i 4.5 Q_i : Pi^neq, and relaxed with
  omega_plus alone (regularized BGK, Latt & Chopard 2006).
  """
  rho, u = macroscopic(f, force)
  feq = equilibrium(rho, u)
  s_plus = s_minus = 0.0
  if force is not None:
    c = jnp.asarray(_C, f.dtype)
    w = jnp.asarray(_W, f.dtype).reshape((9,) + (1,) * rho.ndim)
    force = force.reshape((2,) + (1,) * rho.ndim)
    cf = jnp.tensordot(c, force, axes=(1, 0))
    cu = jnp.tensordot(c, u, axes=(1, 0))
    uf = jnp.sum(u * force, axis=0)
    s_minus = 3 * w * cf
    s_plus = w * (9 * cu * cf - 3 * uf)
  if regularized:
    # The projection drops the first moment of f^neq, so only half of the odd
    # source is added (rho u already carries F / 2): the momentum gain is F.
    return (feq + (1 - omega_plus) * _regularize(f - feq + 0.5 * s_plus)
            + (1 - 0.5 * omega_plus) * s_plus + 0.5 * s_minus)
  opp = jnp.asarray(_OPP)
  f_plus, f_minus = 0.5 * (f + f[opp]), 0.5 * (f - f[opp])
  eq_plus, eq_minus = 0.5 * (feq + feq[opp]), 0.5 * (feq - feq[opp])
  out = f - omega_plus * (f_plus - eq_plus) - omega_minus * (f_minus - eq_minus)
  return out + (1 - 0.5 * omega_plus) * s_plus + (1 - 0.5 * omega_minus) * s_minus


def bounce_mask(solid: np.ndarray) -> np.ndarray:
  """(9, nx, ny) mask: population i at x arrives from a solid node x - c_i."""
  return np.stack([np.roll(solid, tuple(c), axis=(0, 1)) for c in _C])


def stream(f_post: Array, bounce: Array) -> Array:
  """Periodic streaming with half-way bounce-back where ``bounce`` is set."""
  streamed = jnp.stack([jnp.roll(f_post[i], tuple(_C[i]), axis=(0, 1))
                        for i in range(9)])
  return jnp.where(bounce, f_post[jnp.asarray(_OPP)], streamed)


def relaxation_rates(tau: Array, collision: str = "trt",
                     magic: float = 0.25) -> tuple[Array, Array]:
  """(omega_plus, omega_minus) for BGK or TRT with magic parameter Lambda."""
  tau = jnp.asarray(tau, jnp.float32)
  if collision in ("bgk", "regularized"):
    return 1.0 / tau, 1.0 / tau
  if collision == "trt":
    tau_minus = 0.5 + magic / (tau - 0.5)
    return 1.0 / tau, 1.0 / tau_minus
  raise ValueError(f"unknown collision {collision!r}, expected one of {COLLISIONS}")


def _zou_he_inlet(f: Array, u_in: Array) -> Array:
  """Zou-He velocity inlet on column 0 with profile u_in (ny,), v = 0."""
  col = f[:, 0]
  rho = (col[0] + col[2] + col[4] + 2 * (col[3] + col[6] + col[7])) / (1 - u_in)
  f1 = col[3] + (2 / 3) * rho * u_in
  f5 = col[7] - 0.5 * (col[2] - col[4]) + (1 / 6) * rho * u_in
  f8 = col[6] + 0.5 * (col[2] - col[4]) + (1 / 6) * rho * u_in
  col = col.at[1].set(f1).at[5].set(f5).at[8].set(f8)
  return f.at[:, 0].set(col)


def _pressure_outlet(f: Array) -> Array:
  """Non-equilibrium extrapolation outlet on column nx - 1 at rho = 1."""
  nb = f[:, -2]
  rho, u = macroscopic(nb)
  col = equilibrium(jnp.ones_like(rho), u) + nb - equilibrium(rho, u)
  return f.at[:, -1].set(col)


def _check_magic(collision: str, magic: float) -> None:
  """TRT's magic parameter sets the odd relaxation rate; NaN would give NaN fields."""
  if collision == "trt" and not (math.isfinite(magic) and magic > 0):
    raise ValueError(f"magic={magic!r}; expected a finite TRT magic parameter > 0")


def make_step(solid: np.ndarray, *, inlet_velocity: np.ndarray | None = None,
              force: tuple[float, float] | None = None,
              regularized: bool = False):
  """Returns step(f, omega_plus, omega_minus) -> f for one lattice update.

  Args:
    solid: (nx, ny) boolean solid mask (half-way bounce-back on it).
    inlet_velocity: (ny,) inlet profile; None means periodic in x.
    force: constant body force (F_x, F_y); None for none.
    regularized: regularized BGK collision instead of TRT/BGK.
  """
  solid = np.asarray(solid, bool)
  bounce = jnp.asarray(bounce_mask(solid))
  solid_j = jnp.asarray(solid)
  force_j = None if force is None else jnp.asarray(force, jnp.float32)
  u_in = None if inlet_velocity is None else jnp.asarray(inlet_velocity, jnp.float32)
  rest = jnp.asarray(_W).reshape(9, 1, 1)

  def step(f, omega_plus, omega_minus):
    f = collide(f, omega_plus, omega_minus, force_j, regularized)
    f = stream(f, bounce)
    if u_in is not None:
      f = _zou_he_inlet(f, u_in)
      f = _pressure_outlet(f)
    # Solid nodes hold rest equilibrium; they never feed the fluid.
    return jnp.where(solid_j, rest, f)

  return step


# ---------------------------------------------------------------------------
# Channel flow past an obstacle.


class ChannelFlow(NamedTuple):
  """Recorded snapshots of channel flows at K conditions.

  Attributes:
    fields: (K, R, nx, ny, 3) float32 (u / U, v / U, p / U^2), 0 on solid nodes.
    time: (R,) float32 snapshot times in convective units t U / D from the start.
    window: (R,) int32 index of the recording window each snapshot belongs to.
    solid: (nx, ny) bool solid mask.
    geometry: the ``Geometry``.
    tau: (K,) float32 relaxation time of each condition.
    inlet_velocity: the lattice mean inlet velocity U.
  """
  fields: Array
  time: np.ndarray
  window: np.ndarray
  solid: np.ndarray
  geometry: Geometry
  tau: np.ndarray
  inlet_velocity: float


def reynolds_to_tau(reynolds, geometry: Geometry, inlet_velocity: float,
                    min_tau: float = 0.518) -> np.ndarray:
  """tau = 1/2 + 3 U D / Re, checked against ``min_tau`` (stability)."""
  re = np.atleast_1d(np.asarray(reynolds, np.float64))
  if re.ndim != 1 or re.size == 0:
    raise ValueError(f"reynolds must be a non-empty 1-D array, got shape {re.shape}")
  if not np.all(np.isfinite(re)) or np.any(re <= 0):
    raise ValueError(f"reynolds must be finite and > 0, got {re.tolist()}")
  tau = 0.5 + 3.0 * inlet_velocity * geometry.diameter / re
  bad = tau < min_tau
  if np.any(bad):
    raise ValueError(
        f"Re={re[bad].tolist()} gives tau={np.round(tau[bad], 5).tolist()}, expected "
        f"tau >= {min_tau} (tau <= 1/2 is unstable): Re too high for this grid "
        f"(D={geometry.diameter:.2f} cells, U={inlet_velocity}); use a larger "
        f"obstacle or inlet velocity")
  return tau.astype(np.float32)


def initial_state(geometry: Geometry, inlet_velocity: float,
                  kick: float = 0.1) -> Array:
  """Equilibrium of the inlet profile everywhere, plus a transverse kick.

  The kick v = kick U exp(-|x - x_k|^2 / D^2), centred 1.5 D behind the obstacle,
  breaks the symmetry so that shedding starts early.
  """
  g = geometry
  solid = solid_mask(g)
  prof = inlet_profile(g.ny, inlet_velocity)
  x, y = np.meshgrid(np.arange(g.nx), np.arange(g.ny), indexing="ij")
  d = g.diameter
  v = kick * inlet_velocity * np.exp(-((x - g.cx - 1.5 * d)**2 + (y - g.cy)**2)
                                     / d**2)
  u = np.stack([np.broadcast_to(prof, (g.nx, g.ny)), v]).astype(np.float32)
  u = np.where(solid, 0.0, u)
  return equilibrium(jnp.ones((g.nx, g.ny), jnp.float32), jnp.asarray(u))


def simulate_channel_flow(geometry: Geometry, reynolds, *, spinup_steps: int,
                          window_length: int, record_every: int, windows: int = 1,
                          window_gap: int = 0, inlet_velocity: float = 0.1,
                          collision: str = "regularized", magic: float = 0.25,
                          min_tau: float = 0.518) -> ChannelFlow:
  """Simulates channel flow past the obstacle for every Reynolds number at once.

  The conditions share one compiled program (``jax.vmap`` over tau). After
  ``spinup_steps`` steps it records ``windows`` windows of ``window_length``
  snapshots, one every ``record_every`` steps, with ``window_gap`` extra steps
  between windows (a snapshot is taken after each ``record_every`` steps).

  Args:
    geometry: the channel and obstacle.
    reynolds: (K,) Reynolds numbers Re = U D / nu.
    spinup_steps: steps before the first window (>= 0).
    window_length: snapshots per window (>= 1).
    record_every: steps between snapshots (>= 1).
    windows: number of windows (>= 1).
    window_gap: extra steps between two windows (>= 0).
    inlet_velocity: lattice mean inlet velocity U (0 < U <= 0.2).
    collision: ``"regularized"`` (default), ``"bgk"`` or ``"trt"``.
    magic: TRT magic parameter Lambda (TRT only).
    min_tau: smallest relaxation time accepted.

  Returns:
    A ``ChannelFlow``; fields are (K, windows * window_length, nx, ny, 3).

  Raises:
    ValueError: bad counts, velocity, collision, or Re too high (tau < min_tau).
  """
  validate_geometry(geometry)
  for name, val, lo in (("spinup_steps", spinup_steps, 0),
                        ("window_length", window_length, 1),
                        ("record_every", record_every, 1), ("windows", windows, 1),
                        ("window_gap", window_gap, 0)):
    if int(val) != val or val < lo:
      raise ValueError(f"{name} must be an integer >= {lo}, got {val}")
  if not 0 < inlet_velocity <= 0.2:
    raise ValueError(f"inlet_velocity must be in (0, 0.2] (low Mach number), got "
                     f"{inlet_velocity}")
  if collision not in COLLISIONS:
    raise ValueError(f"unknown collision {collision!r}, expected one of {COLLISIONS}")
  _check_magic(collision, magic)
  if not min_tau > 0.5:
    raise ValueError(f"min_tau must be > 0.5, got {min_tau}")
  tau = reynolds_to_tau(reynolds, geometry, inlet_velocity, min_tau)
  omega_plus, omega_minus = relaxation_rates(tau, collision, magic)

  g = geometry
  solid = solid_mask(g)
  fluid = jnp.asarray(~solid)
  n_fluid = float((~solid).sum())
  step = make_step(solid, inlet_velocity=inlet_profile(g.ny, inlet_velocity),
                   regularized=collision == "regularized")
  f0 = initial_state(g, inlet_velocity)
  scale_u, scale_p = 1.0 / inlet_velocity, 1.0 / (3.0 * inlet_velocity**2)

  def advance(f, steps, wp, wm):
    return jax.lax.fori_loop(0, steps, lambda _, f: step(f, wp, wm), f)

  def observe(f):
    rho, u = macroscopic(f)
    mean_rho = jnp.sum(jnp.where(fluid, rho, 0.0)) / n_fluid
    out = jnp.stack([u[0] * scale_u, u[1] * scale_u, (rho - mean_rho) * scale_p],
                    axis=-1)
    return jnp.where(fluid[..., None], out, 0.0)

  def run_one(wp, wm):
    f = advance(f0, spinup_steps, wp, wm)

    def one_window(f, _):
      f = advance(f, window_gap, wp, wm)

      def one_record(f, _):
        f = advance(f, record_every, wp, wm)
        return f, observe(f)

      return jax.lax.scan(one_record, f, None, length=window_length)

    _, snaps = jax.lax.scan(one_window, f, None, length=windows)
    return snaps.reshape((windows * window_length,) + snaps.shape[2:])

  fields = jax.jit(jax.vmap(run_one))(omega_plus, omega_minus)

  w_idx = np.repeat(np.arange(windows, dtype=np.int32), window_length)
  r_idx = np.tile(np.arange(1, window_length + 1), windows)
  steps = (spinup_steps + w_idx * (window_gap + window_length * record_every)
           + window_gap + r_idx * record_every)
  time = (steps * inlet_velocity / g.diameter).astype(np.float32)
  return ChannelFlow(fields, time, w_idx, solid, g, tau, float(inlet_velocity))


# ---------------------------------------------------------------------------
# Periodic channel with a body force (Poiseuille flow).


class PoiseuilleFlow(NamedTuple):
  """Steady periodic-channel flow driven by a body force.

  Attributes:
    y: (ny,) node positions across the channel (rows 0 and ny - 1 are walls).
    u: (ny,) simulated streamwise velocity (column average).
    exact: (ny,) analytic profile F / (2 nu) s (H - s), s = y - 1/2, H = ny - 2.
    mass: (2,) total mass at the start and the end.
  """
  y: np.ndarray
  u: np.ndarray
  exact: np.ndarray
  mass: np.ndarray


def simulate_poiseuille(ny: int, tau: float, force: float, steps: int, *,
                        nx: int = 4, collision: str = "trt",
                        magic: float = 3 / 16) -> PoiseuilleFlow:
  """Force-driven flow in a channel periodic in x with bounce-back walls.

  Args:
    ny: nodes across (two of them solid wall rows), >= 5.
    tau: relaxation time (> 1/2).
    force: body force along x per unit volume.
    steps: number of steps (>= 1).
    nx: nodes along the periodic direction.
    collision: ``"trt"``, ``"bgk"`` or ``"regularized"``.
    magic: TRT magic parameter (3/16 makes the walls exactly half-way).

  Returns:
    A ``PoiseuilleFlow`` with the simulated and analytic profiles.
  """
  if not tau > 0.5:
    raise ValueError(f"tau must be > 0.5, got {tau}")
  if not math.isfinite(tau):
    raise ValueError(f"tau={tau!r}; expected a finite relaxation time")
  if not math.isfinite(force):
    raise ValueError(f"force={force!r}; expected a finite number")
  for name, value, low in (("ny", ny, 5), ("nx", nx, 1), ("steps", steps, 1)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
      raise ValueError(f"{name}={value!r}; expected an int >= {low}")
  if collision not in COLLISIONS:
    raise ValueError(f"unknown collision {collision!r}, expected one of {COLLISIONS}")
  _check_magic(collision, magic)
  solid = np.zeros((nx, ny), bool)
  solid[:, 0] = solid[:, -1] = True
  step = make_step(solid, force=(float(force), 0.0),
                   regularized=collision == "regularized")
  wp, wm = relaxation_rates(jnp.float32(tau), collision, magic)
  f0 = jnp.where(jnp.asarray(solid), jnp.asarray(_W).reshape(9, 1, 1),
                 equilibrium(jnp.ones((nx, ny)), jnp.zeros((2, nx, ny))))

  @jax.jit
  def run(f):
    return jax.lax.fori_loop(0, steps, lambda _, f: step(f, wp, wm), f)

  f = run(f0)
  fluid = ~solid
  _, u = macroscopic(f, jnp.asarray([force, 0.0], jnp.float32))
  u = np.where(fluid, np.asarray(u[0]), 0.0).mean(axis=0)
  y = np.arange(ny, dtype=np.float64)
  h, s = ny - 2, y - 0.5
  nu = (tau - 0.5) / 3
  exact = np.where(fluid[0], force / (2 * nu) * s * (h - s), 0.0)
  mass = np.array([float(jnp.sum(jnp.where(fluid, f0.sum(0), 0))),
                   float(jnp.sum(jnp.where(fluid, f.sum(0), 0)))])
  return PoiseuilleFlow(y, u, exact, mass)
