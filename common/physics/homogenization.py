"""Computational homogenisation of 2-D periodic unit cells: elasticity, heat, expansion.

The unit cell Y = [0, 1]^2 is an n x n grid of square bilinear (Q4) elements of size
h = 1 / n, periodic in x and y: there are n x n nodes and node (i, j) sits at
(x, y) = (i h, j h), indices wrapping. A design is the element density field
``rho[i, j]`` in [0, 1] of shape (n, n), element (i, j) covering
[i h, (i + 1) h] x [j h, (j + 1) h] (index [i, j] is x_i, y_j, as ``meshgrid(...,
indexing="ij")``). Its local nodes k = 0..3 are (i, j), (i + 1, j), (i + 1, j + 1),
(i, j + 1).

Two phases, interpolated per element (SIMP for the moduli, linear for expansion):

    E(rho)     = E_void + rho^p (E_solid - E_void)
    kappa(rho) = kappa_void + rho^p (kappa_solid - kappa_void)
    alpha(rho) = alpha_void + rho (alpha_solid - alpha_void)

with one Poisson ratio nu and plane stress, in Voigt notation with engineering shear
(order xx, yy, xy): C(rho) = E(rho) D, D = [[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu)
/ 2]] / (1 - nu^2), and m = (1, 1, 0).

Every cell problem has the same form. A macroscopic load eps0 (a unit strain, a unit
temperature gradient, or the element field -alpha_e m) drives a periodic fluctuation u
with total field eps = eps0 + B u, which minimises the energy, i.e. solves

    K u = -sum_e w_e int_e B^T D eps0_e,      K = sum_e w_e int_e B^T D B,

(w_e = E_e or kappa_e; D = I for heat). With z = (eps0, u) the effective tensors are
Gram matrices of the energy form a(z, z') = <(eps0 + B u)^T w D (eps0' + B u')>:

    C^H_ij     = a(z_i, z_j)             (3 unit strains)
    kappa^H_ij = a(z_i, z_j)             (2 unit temperature gradients)
    beta^H_i   = -a(z_i, z_a)            (z_a = (-alpha m, u_a): unit heating, zero
                                          macro strain; beta^H = <C (alpha m - B u_a)>)
    alpha^H    = (C^H)^-1 beta^H,

so that the macroscopic law is Sigma = C^H (E - alpha^H dT). Each form is stationary
at the exact u, so its error is quadratic in the solver's error. Element integrals use
2 x 2 Gauss points (exact for Q4), in the dtype of ``rho``.

Solver: the operator is matrix free (the 4 nodes of every element gathered with
``jnp.roll``, multiplied by the w-scaled element matrix, scattered back with
``jnp.roll``), solved by conjugate gradients with one of two preconditioners:

- ``"multigrid"`` (default): one V-cycle of geometric multigrid. Levels halve n
  while it is even and above 8; coarse operators are Galerkin, A_c = P^T A P with
  bilinear P, stored as per-element matrices (4 c x 4 c) summed from the 4 children;
  damped Jacobi before and after the coarse correction (omega = 1.7 / a Gershgorin
  bound on lambda_max(D^-1 A), so the cycle is SPD); the coarsest level is solved
  exactly with a dense pseudo-inverse. Iterations barely depend on n or on the
  contrast (n = 64 lattice cells, tol 1e-7: ~20-45 at contrast 1e-3, ~100 at 1e-6).
  It needs n = m 2^k with m <= 16; other n use the FFT preconditioner.
- ``"fft"``: the exact inverse of the homogeneous (w = 1) operator, a periodic
  convolution inverted per frequency by FFT. The preconditioned spectrum lies in
  [min w, max w], so iterations grow as sqrt(contrast): ~300 at 1e-3.

Both project out the zero mode (the rigid translations): solutions have zero mean.
The preconditioner runs in float32 when the solve is float64 (CG, the operator and
residuals stay float64). The solve is wrapped in ``lax.custom_linear_solve(symmetric=
True)``: gradients take one adjoint solve instead of unrolling the iterations. All
right-hand sides of a physics are solved together (vmapped), so a vmapped batch runs
as many iterations as its slowest right-hand side.

Example:
  rho = jnp.ones((32, 32)).at[:16].set(0.0)     # layers normal to x
  props = homogenize(rho)
  props.C, props.kappa, props.alpha
  engineering_constants(props.C).E1
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from common import checks

Array = jax.Array

# Local node k of element (i, j) is node (i + di, j + dj).
_OFFSETS = ((0, 0), (1, 0), (1, 1), (0, 1))
# 2-point Gauss rule on [0, 1] (weights 1/2 each).
_GAUSS = (0.5 - 0.5 / math.sqrt(3.0), 0.5 + 0.5 / math.sqrt(3.0))
_M = (1.0, 1.0, 0.0)
# The residual tolerance when `tol` is None, by itemsize: in float64 the tensors agree
# with a direct sparse solve to ~1e-12 relative at contrast 1e-3 (the energy forms'
# error is quadratic in the residual); float32 stops near its rounding level.
_DEFAULT_TOL = {8: 1e-7, 4: 1e-5}
# Multigrid: levels halve while even and above _COARSEST; the coarsest level is solved
# densely if it has at most _MAX_DENSE nodes per side (else the FFT preconditioner is
# used); Jacobi damping omega = _THETA / (a bound on lambda_max(D^-1 K)), _THETA < 2.
_COARSEST = 8
_MAX_DENSE = 16
_THETA = 1.7
PRECONDITIONERS = ("multigrid", "fft")


class Material(NamedTuple):
  """The two phases (a pytree of floats, so it can be traced, vmapped, differentiated).

  Attributes:
    E_solid: Young's modulus at rho = 1.
    E_void: Young's modulus at rho = 0 (the void or filler; > 0 keeps K definite).
    nu: Poisson's ratio of both phases, in (-1, 0.5).
    kappa_solid: thermal conductivity at rho = 1.
    kappa_void: thermal conductivity at rho = 0.
    alpha_solid: thermal expansion coefficient at rho = 1.
    alpha_void: thermal expansion coefficient at rho = 0.
    penal: the SIMP exponent p of E(rho) and kappa(rho) (alpha is linear in rho).
  """
  E_solid: float = 1.0
  E_void: float = 1e-3
  nu: float = 0.3
  kappa_solid: float = 1.0
  kappa_void: float = 1e-3
  alpha_solid: float = 1.0
  alpha_void: float = 1.0
  penal: float = 3.0


class Properties(NamedTuple):
  """Effective properties of one cell (a leading batch axis under ``vmap``).

  Attributes:
    C: (3, 3) stiffness C^H (Voigt, engineering shear, order xx, yy, xy).
    kappa: (2, 2) conductivity kappa^H.
    alpha: (3,) thermal expansion alpha^H (strain per unit temperature, Voigt).
    volume_fraction: mean(rho).
    iterations: the largest CG iteration count over all right-hand sides.
    residual: the largest final relative residual ||f - K u|| / ||f||.
  """
  C: Array
  kappa: Array
  alpha: Array
  volume_fraction: Array
  iterations: Array
  residual: Array


class EngineeringConstants(NamedTuple):
  """In-plane engineering constants from the compliance S = C^-1 (see
  ``engineering_constants``)."""
  E1: Array
  E2: Array
  G12: Array
  nu12: Array
  nu21: Array


class _Physics(NamedTuple):
  """One cell problem: the generalised element matrix M = h^2 int [I | B]^T D [I | B]
  over (q load components + 4 c nodal dofs), the unit material matrix D (q, q), the
  Gauss-point operators [I | B_g] (4, q, q + 4 c), and c, the dofs per node."""
  matrix: Array
  d: Array
  gauss: Array
  q: int
  c: int


# --- Interpolation and element matrices.

def interpolate(rho: Array, material: Material = Material()) -> tuple[Array, Array, Array]:
  """The element fields (E, kappa, alpha) of a density field.

      E = E_void + rho^p (E_solid - E_void), kappa likewise,
      alpha = alpha_void + rho (alpha_solid - alpha_void).

  Args:
    rho: densities in [0, 1], any shape.
    material: the two phases and the SIMP exponent p.

  Returns:
    (E, kappa, alpha), each of the shape and dtype of ``rho``.

  Example:
    >>> E, kappa, alpha = interpolate(jnp.full((4, 4), 0.5))
  """
  m = jax.tree.map(lambda v: jnp.asarray(v, rho.dtype), material)
  simp = rho ** m.penal
  E = m.E_void + simp * (m.E_solid - m.E_void)
  kappa = m.kappa_void + simp * (m.kappa_solid - m.kappa_void)
  alpha = m.alpha_void + rho * (m.alpha_solid - m.alpha_void)
  return E, kappa, alpha


def plane_stress(nu: Array) -> Array:
  """The unit-modulus plane-stress matrix D, C = E D (Voigt, engineering shear):

      D = [[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu) / 2]] / (1 - nu^2).

  Example:
    >>> plane_stress(jnp.float32(0.3)).shape
    (3, 3)
  """
  nu = jnp.asarray(nu)
  z = jnp.zeros_like(nu)
  one = jnp.ones_like(nu)
  rows = [[one, nu, z], [nu, one, z], [z, z, (1 - nu) / 2]]
  return jnp.stack([jnp.stack(r) for r in rows]) / (1 - nu ** 2)


def _gradient_matrix(s: float, t: float, h: float, c: int) -> np.ndarray:
  """B at local point (s, t) in [0, 1]^2: (3, 8) strains for c = 2, (2, 4) gradients
  for c = 1; nodal dofs ordered (node, component)."""
  dn_ds = np.array([-(1 - t), 1 - t, t, -t]) / h
  dn_dt = np.array([-(1 - s), -s, s, 1 - s]) / h
  if c == 1:
    return np.stack([dn_ds, dn_dt])
  b = np.zeros((3, 8))
  b[0, 0::2], b[1, 1::2] = dn_ds, dn_dt
  b[2, 0::2], b[2, 1::2] = dn_dt, dn_ds
  return b


def element_matrix(d: Array, n: int, c: int) -> Array:
  """The generalised element matrix of a unit-weight element of size h = 1 / n:

      M = h^2 int_[0,1]^2 [I_q | B]^T D [I_q | B] ds dt       (2 x 2 Gauss points),

  so that the element energy of z_e = (eps0_e, u_e) is z_e^T M z_e (blocks: the
  macroscopic term h^2 D, the coupling h^2 D <B> and the stiffness K_e).

  Args:
    d: (q, q) unit material matrix (``plane_stress(nu)`` with c = 2, I_2 with c = 1).
    n: elements per side.
    c: dofs per node (2 elasticity, 1 heat).

  Returns:
    (q + 4 c, q + 4 c) symmetric matrix in the dtype of ``d``.

  Example:
    >>> element_matrix(jnp.eye(2), 8, 1).shape
    (6, 6)
  """
  h = 1.0 / n
  q = d.shape[0]
  total = jnp.zeros((q + 4 * c, q + 4 * c), d.dtype)
  for s in _GAUSS:
    for t in _GAUSS:
      a = jnp.asarray(_gauss_operator(s, t, n, q, c), d.dtype)
      total = total + 0.25 * h * h * a.T @ d @ a
  return total


def _gauss_operator(s: float, t: float, n: int, q: int, c: int) -> np.ndarray:
  """[I_q | B(s, t)]: the total field eps0 + B u at local point (s, t)."""
  return np.concatenate([np.eye(q), _gradient_matrix(s, t, 1.0 / n, c)], axis=1)


def _physics(d: Array, n: int, c: int) -> _Physics:
  q = d.shape[0]
  gauss = np.stack([_gauss_operator(s, t, n, q, c) for s in _GAUSS for t in _GAUSS])
  return _Physics(element_matrix(d, n, c), d, jnp.asarray(gauss, d.dtype), q, c)


def _small_inverse(a: Array) -> Array:
  """Inverse of (..., k, k) matrices, k <= 3, by the adjugate, A^-1 = adj(A) / det(A)
  (no LAPACK call: see ``_spd_inverse``)."""
  k = a.shape[-1]
  if k == 1:
    return 1.0 / a
  if k == 2:
    adj = jnp.stack([jnp.stack([a[..., 1, 1], -a[..., 0, 1]], -1),
                     jnp.stack([-a[..., 1, 0], a[..., 0, 0]], -1)], -2)
  else:
    cof = lambda i, j: (a[..., (i + 1) % 3, (j + 1) % 3] * a[..., (i + 2) % 3, (j + 2) % 3]
                        - a[..., (i + 1) % 3, (j + 2) % 3] * a[..., (i + 2) % 3, (j + 1) % 3])
    adj = jnp.stack([jnp.stack([cof(j, i) for j in range(3)], -1) for i in range(3)], -2)
  det = jnp.sum(a[..., 0, :] * adj[..., :, 0], axis=-1)
  return adj / det[..., None, None]


# --- The matrix-free periodic operator on nodal fields (c, n, n).

def _gather(u: Array) -> list[Array]:
  """Nodal field (c, n, n) -> the 4 c element dof planes (n, n), ordered (node, comp)."""
  return [jnp.roll(u[a], (-di, -dj), axis=(0, 1)) for di, dj in _OFFSETS
          for a in range(u.shape[0])]


def _scatter(fe: list[Array], c: int) -> Array:
  """Element dof planes (4 c of (n, n)) -> nodal sums (c, n, n): gather's transpose."""
  return jnp.stack([sum(jnp.roll(fe[k * c + a], (di, dj), axis=(0, 1))
                        for k, (di, dj) in enumerate(_OFFSETS)) for a in range(c)])


def _products(a: Array, g: list[Array]) -> list[Array]:
  """fe_i = sum_j a[i, j] g_j for scalars or planes a[i, j], written out so that XLA
  fuses it into one loop (on CPU 4x faster than a (4 c, 4 c) x (4 c, n^2) dot, and
  6x faster than a broadcast product and sum over j inside the V-cycle)."""
  return [sum(a[i, j] * g[j] for j in range(len(g))) for i in range(len(g))]


def _apply_fine(phys: _Physics, w: Array, u: Array) -> Array:
  """K u = sum_e w_e K_e u_e."""
  ke = phys.matrix[phys.q:, phys.q:]
  return _scatter([w * f for f in _products(ke, _gather(u))], phys.c)


def _apply_coarse(matrices: Array, u: Array) -> Array:
  """K u = sum_e A_e u_e with per-element matrices A (4 c, 4 c, m, m)."""
  return _scatter(_products(matrices, _gather(u)), u.shape[0])


def _load(phys: _Physics, w: Array, eps0: Array) -> Array:
  """f = -sum_e w_e M_ue eps0_e for an element load field eps0 (q, n, n)."""
  coupling = phys.matrix[:phys.q, phys.q:]
  fe = [-w * sum(coupling[k, i] * eps0[k] for k in range(phys.q))
        for i in range(coupling.shape[1])]
  return _scatter(fe, phys.c)


def _gram(phys: _Physics, w: Array, eps0: Array, u: Array) -> Array:
  """G_kl = a(z_k, z_l) = sum_e w_e z_ke^T M z_le for z_k = (eps0_k, u_k), with
  eps0 (r, q, n, n) and u (r, c, n, n); returns (r, r), symmetrised.

  Summed as sum_e w_e (h^2 / 4) sum_g eps_gk^T D eps_gl over the Gauss-point fields
  eps_g = eps0 + B_g u, not as z^T M z: no cancellation between the blocks of M
  (which cost float32 4 digits)."""
  z = jnp.concatenate([eps0, jax.vmap(lambda v: jnp.stack(_gather(v)))(u)], axis=1)
  fields = jnp.einsum("gij,rjxy->grixy", phys.gauss, z)
  weight = w / (4 * w.shape[0] ** 2)
  g = jnp.einsum("grixy,ij,gsjxy,xy->rs", fields, phys.d, fields, weight)
  return 0.5 * (g + g.T)


# --- Preconditioners: geometric multigrid (Galerkin) and the FFT reference inverse.

def _prolong(uc: Array) -> Array:
  """Bilinear interpolation of a coarse nodal field (c, m, m) to (c, 2 m, 2 m)."""
  c, m, _ = uc.shape
  x1, y1 = jnp.roll(uc, -1, axis=1), jnp.roll(uc, -1, axis=2)
  xy = jnp.roll(x1, -1, axis=2)
  even_x = jnp.stack([uc, 0.5 * (uc + y1)], -1)                  # (c, m, m, 2): [.., b]
  odd_x = jnp.stack([0.5 * (uc + x1), 0.25 * (uc + x1 + y1 + xy)], -1)
  return jnp.stack([even_x, odd_x], 2).reshape(c, 2 * m, 2 * m)  # [c, I, a, J, b]


def _restrict(f: Array) -> Array:
  """The transpose of ``_prolong``: (c, 2 m, 2 m) -> (c, m, m)."""
  c, n, _ = f.shape
  f = f.reshape(c, n // 2, 2, n // 2, 2)
  ee, oe, eo, oo = f[:, :, 0, :, 0], f[:, :, 1, :, 0], f[:, :, 0, :, 1], f[:, :, 1, :, 1]
  rx = lambda v: jnp.roll(v, 1, axis=1)
  ry = lambda v: jnp.roll(v, 1, axis=2)
  return (ee + 0.5 * (oe + rx(oe) + eo + ry(eo))
          + 0.25 * (oo + rx(oo) + ry(oo) + rx(ry(oo))))


def _child_prolongations(c: int) -> np.ndarray:
  """P (4, 4 c, 4 c): coarse element dofs -> dofs of its child (a, b) = (x, y) offset,
  children ordered (0, 0), (0, 1), (1, 0), (1, 1)."""
  p = np.zeros((4, 4 * c, 4 * c))
  for child, (a, b) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
    for k, (di, dj) in enumerate(_OFFSETS):
      s, t = (a + di) / 2, (b + dj) / 2
      shape = ((1 - s) * (1 - t), s * (1 - t), s * t, (1 - s) * t)
      for node in range(4):
        for comp in range(c):
          p[child, k * c + comp, node * c + comp] = shape[node]
  return p


def _children(x: Array) -> Array:
  """Element field (m2, m2, ...) -> (m, m, 4, ...), children of each coarse element."""
  m = x.shape[0] // 2
  x = x.reshape(m, 2, m, 2, *x.shape[2:])
  return jnp.moveaxis(x, 2, 1).reshape(m, m, 4, *x.shape[4:])


def _coarse_matrices(ke: Array, w: Array, c: int, levels: int) -> list[Array]:
  """Galerkin element matrices A_E = sum_children P^T A_child P of the next ``levels``
  levels, each (m, m, 4 c, 4 c) (the fine A_e = w_e K_e)."""
  if levels == 0:
    return []
  p = jnp.asarray(_child_prolongations(c), ke.dtype)
  first = jnp.einsum("cki,kl,clj->cij", p, ke, p)              # (4, 4c, 4c)
  a = jnp.einsum("xyc,cij->xyij", _children(w), first)
  out = [a]
  for _ in range(levels - 1):
    a = jnp.einsum("cki,xyckj->xyij", p, _children(a) @ p)
    out.append(a)
  return out


class _Multigrid(NamedTuple):
  """A V-cycle's data: per level the Jacobi diagonal (c, m, m) and damping omega, the
  Galerkin element matrices of the coarse levels (4 c, 4 c, m, m), and the pseudo-
  inverse of the coarsest operator (N, N)."""
  diagonals: tuple[Array, ...]
  omegas: tuple[Array, ...]
  matrices: tuple[Array, ...]
  coarse_inverse: Array


def _level_sizes(n: int) -> list[int]:
  """n, n / 2, ... while the size is even and above the coarsest size."""
  sizes = [n]
  while sizes[-1] % 2 == 0 and sizes[-1] > _COARSEST:
    sizes.append(sizes[-1] // 2)
  return sizes


def _jacobi_bound(matrices: Array | None, w: Array, diagonal: Array, phys: _Physics
                  ) -> Array:
  """An upper bound on lambda_max(D^-1 K) (Gershgorin): max_p sum_e sum_q |A_e,pq| /
  D_p, for element matrices (4 c, 4 c, m, m), or w_e K_e on the fine level (None)."""
  if matrices is None:
    ke = phys.matrix[phys.q:, phys.q:]
    rows = [w * r for r in jnp.abs(ke).sum(axis=1)]
  else:
    rows = list(jnp.abs(matrices).sum(axis=1))
  return (_scatter(rows, phys.c) / diagonal).max()


def _spd_inverse(a: Array) -> Array:
  """A^-1 of a symmetric positive definite (N, N) matrix by N symmetric sweeps
  (Gauss-Jordan without pivoting; sweeping every pivot turns A into -A^-1).

  Written with elementwise ops only: batched LAPACK calls from XLA:CPU can deadlock
  when two of them run at once on a 2-thread pool (seen with jaxlib 0.10.2)."""
  size = a.shape[0]
  index = jnp.arange(size)

  def sweep(k, a):
    column, pivot = a[:, k], a[k, k]
    out = a - jnp.outer(column, column) / pivot
    on_k = index == k
    out = jnp.where(on_k[:, None] | on_k[None, :], (column / pivot)[:, None] * on_k[None]
                    + (column / pivot)[None, :] * on_k[:, None], out)
    return out.at[k, k].set(-1.0 / pivot)

  return -lax.fori_loop(0, size, sweep, a)


def _pseudo_inverse(dense: Array, c: int) -> Array:
  """K^+ of a periodic operator whose null space is the c translations Z, as
  (K + s Z Z^T)^-1 (exact on zero-mean vectors)."""
  size = dense.shape[0]
  z = jnp.kron(jnp.eye(c, dtype=dense.dtype), jnp.ones((1, size // c), dense.dtype))
  scale = jnp.trace(dense) / size
  return _spd_inverse(dense + scale * (c / size) * z.T @ z)


def _multigrid(phys: _Physics, w: Array) -> _Multigrid:
  """Galerkin hierarchy for K(w), with Jacobi damping omega = theta / (a Gershgorin
  bound on lambda_max(D^-1 K)) per level (theta < 2 makes the V-cycle SPD)."""
  c, ke = phys.c, phys.matrix[phys.q:, phys.q:]
  sizes = _level_sizes(w.shape[0])
  diagonals = [_scatter([w * ke[i, i] for i in range(4 * c)], c)]
  omegas = [_THETA / _jacobi_bound(None, w, diagonals[0], phys)]
  matrices = [jnp.moveaxis(a, (2, 3), (0, 1))
              for a in _coarse_matrices(ke, w, c, len(sizes) - 1)]
  for a in matrices:
    diagonals.append(_scatter([a[i, i] for i in range(4 * c)], c))
    omegas.append(_THETA / _jacobi_bound(a, w, diagonals[-1], phys))
  m = sizes[-1]
  basis = jnp.eye(c * m * m, dtype=w.dtype).reshape(-1, c, m, m)
  coarsest = ((lambda u: _apply_coarse(matrices[-1], u)) if matrices
              else (lambda u: _apply_fine(phys, w, u)))
  dense = jax.vmap(coarsest)(basis).reshape(c * m * m, c * m * m)
  return _Multigrid(tuple(diagonals), tuple(omegas), tuple(matrices),
                    _pseudo_inverse(0.5 * (dense + dense.T), c))


def _vcycle(phys: _Physics, w: Array, mg: _Multigrid, r: Array, level: int = 0) -> Array:
  """One V-cycle for K z = r: damped Jacobi before and after the coarse correction
  (symmetric, so an SPD preconditioner), the coarsest level solved exactly."""
  if level == len(mg.diagonals) - 1:
    return (mg.coarse_inverse @ r.reshape(-1)).reshape(r.shape)
  apply = ((lambda u: _apply_fine(phys, w, u)) if level == 0
           else (lambda u: _apply_coarse(mg.matrices[level - 1], u)))
  step = mg.omegas[level] / mg.diagonals[level]
  z = step * r
  z = z + _prolong(_vcycle(phys, w, mg, _restrict(r - apply(z)), level + 1))
  return z + step * (r - apply(z))


def _inverse_symbol(phys: _Physics, n: int) -> Array:
  """Per-frequency inverse of the homogeneous (w = 1) operator, (n, n // 2 + 1, c, c).

  K_ref is a periodic convolution: its symbol is the FFT of its response to unit
  impulses at node (0, 0). The zero frequency (rigid translations) gets 0.
  """
  c, dtype = phys.c, phys.matrix.dtype
  ones = jnp.ones((n, n), dtype)
  impulses = jnp.zeros((c, c, n, n), dtype).at[jnp.arange(c), jnp.arange(c), 0, 0].set(1)
  columns = jax.vmap(lambda u: _apply_fine(phys, ones, u))(impulses)   # [b, a, x, y]
  symbol = jnp.fft.rfft2(columns).real.transpose(2, 3, 1, 0)          # [x, y, a, b]
  symbol = symbol.at[0, 0].set(jnp.eye(c, dtype=dtype))
  return _small_inverse(symbol).at[0, 0].set(0.0)


def _fft_precondition(inverse: Array, r: Array) -> Array:
  """z = K_ref^+ r by FFT (zero mean)."""
  r_hat = jnp.fft.rfft2(r)
  inverse = inverse.astype(r_hat.dtype)
  z_hat = jnp.stack([sum(inverse[..., a, b] * r_hat[b] for b in range(r.shape[0]))
                     for a in range(r.shape[0])])
  return jnp.fft.irfft2(z_hat, s=r.shape[1:]).astype(r.dtype)


def _zero_mean(r: Array) -> Array:
  return r - r.mean(axis=(-2, -1), keepdims=True)


def _preconditioner(phys: _Physics, w: Array, kind: str) -> Callable[[Array], Array]:
  """The preconditioner z = B r, built once per cell; no derivatives flow through it
  (it changes how fast CG converges, not the solution).

  It runs in float32 even when the solve is in float64 (CG, the operator and the
  residuals stay float64): the same iteration counts and results at tol 1e-7 and
  1e-12 on lattice cells, 20% less time."""
  low = jnp.float32 if w.dtype == jnp.float64 else w.dtype
  phys = phys._replace(matrix=lax.stop_gradient(phys.matrix).astype(low))
  w = lax.stop_gradient(w).astype(low)
  if kind == "multigrid" and _level_sizes(w.shape[0])[-1] <= _MAX_DENSE:
    mg = _multigrid(phys, w)
    apply = lambda r: _zero_mean(_vcycle(phys, w, mg, _zero_mean(r)))
  else:
    inverse = _inverse_symbol(phys, w.shape[0])
    apply = lambda r: _fft_precondition(inverse, r)
  return lambda r: apply(r.astype(low)).astype(r.dtype)


# --- Preconditioned conjugate gradients, differentiable through an adjoint solve.

def _pcg(matvec: Callable[[Array], Array], b: Array,
         precondition: Callable[[Array], Array], tol: Array, maxiter: Array
         ) -> tuple[Array, tuple[Array, Array]]:
  """Preconditioned CG for K x = b from x = 0, until ||r|| <= tol ||b|| or maxiter.

  Returns x and (iterations, final relative residual ||r|| / ||b||).
  """
  b_norm2 = jnp.vdot(b, b)
  threshold = tol ** 2 * b_norm2
  z = precondition(b)
  init = (jnp.zeros_like(b), b, z, jnp.vdot(b, z), b_norm2, jnp.zeros((), jnp.int32))

  def cond(state):
    *_, rr, k = state
    return (rr > threshold) & (k < maxiter)

  def body(state):
    x, r, p, rz, _, k = state
    ap = matvec(p)
    pap = jnp.vdot(p, ap)
    step = rz / jnp.where(pap > 0, pap, 1)
    x, r = x + step * p, r - step * ap
    z = precondition(r)
    rz_new = jnp.vdot(r, z)
    p = z + rz_new / jnp.where(rz > 0, rz, 1) * p
    return x, r, p, rz_new, jnp.vdot(r, r), k + 1

  x, _, _, _, rr, k = lax.while_loop(cond, body, init)
  residual = jnp.sqrt(rr / jnp.where(b_norm2 > 0, b_norm2, 1))
  return x, (k, residual)


def _solve(phys: _Physics, w: Array, b: Array, precondition: Callable[[Array], Array],
           tol: Array, maxiter: Array) -> tuple[Array, tuple[Array, Array]]:
  """u = K^+ b (zero mean) for one nodal load b (c, n, n), with aux (iterations,
  residual). Derivatives go through ``custom_linear_solve``: one more solve with K."""
  matvec = lambda u: _apply_fine(phys, w, u)

  def solve(operator, rhs):
    x, aux = _pcg(operator, _zero_mean(rhs), precondition, tol, maxiter)
    return _zero_mean(x), aux

  return lax.custom_linear_solve(matvec, b, solve, symmetric=True, has_aux=True)


def _cell_problem(phys: _Physics, w: Array, eps0: Array, tol: Array, maxiter: Array,
                  preconditioner: str) -> tuple[Array, Array, Array]:
  """Solves the r cell problems of the loads eps0 (r, q, n, n) together; returns the
  Gram matrix G_kl = a(z_k, z_l) (r, r), max iterations and max residual."""
  loads = jax.vmap(lambda e: _load(phys, w, e))(eps0)
  precondition = _preconditioner(phys, w, preconditioner)
  u, (iterations, residual) = jax.vmap(
      lambda f: _solve(phys, w, f, precondition, tol, maxiter))(loads)
  return _gram(phys, w, eps0, u), iterations.max(), residual.max()


def _unit_loads(q: int, n: int, dtype) -> Array:
  """The q unit macroscopic loads as element fields (q, q, n, n)."""
  return jnp.broadcast_to(jnp.eye(q, dtype=dtype)[:, :, None, None], (q, q, n, n))


def _elastic(rho: Array, material: Material, tol: Array, maxiter: Array,
             preconditioner: str, thermal: bool
             ) -> tuple[Array, Array | None, Array, Array]:
  """C^H and (with ``thermal``) alpha^H, from 3 unit strains (+ the unit heating)."""
  n, dtype = rho.shape[0], rho.dtype
  E, _, alpha = interpolate(rho, material)
  d = plane_stress(jnp.asarray(material.nu, dtype))
  phys = _physics(d, n, 2)
  eps0 = _unit_loads(3, n, dtype)
  if thermal:
    heating = -alpha * jnp.asarray(_M, dtype)[:, None, None]      # eps0 = -alpha m
    eps0 = jnp.concatenate([eps0, heating[None]])
  g, iterations, residual = _cell_problem(phys, E, eps0, tol, maxiter, preconditioner)
  C = g[:3, :3]
  alpha_h = _small_inverse(C) @ -g[:3, 3] if thermal else None
  return C, alpha_h, iterations, residual


def _conduction(rho: Array, material: Material, tol: Array, maxiter: Array,
                preconditioner: str) -> tuple[Array, Array, Array]:
  """kappa^H from the two unit temperature gradients."""
  n, dtype = rho.shape[0], rho.dtype
  _, kappa, _ = interpolate(rho, material)
  phys = _physics(jnp.eye(2, dtype=dtype), n, 1)
  return _cell_problem(phys, kappa, _unit_loads(2, n, dtype), tol, maxiter,
                       preconditioner)


@functools.partial(jax.jit, static_argnames="preconditioner")
def _homogenize(rho: Array, material: Material, tol: Array, maxiter: Array,
                preconditioner: str) -> Properties:
  C, alpha, it_el, res_el = _elastic(rho, material, tol, maxiter, preconditioner, True)
  kappa, it_th, res_th = _conduction(rho, material, tol, maxiter, preconditioner)
  return Properties(C, kappa, alpha, jnp.mean(rho), jnp.maximum(it_el, it_th),
                    jnp.maximum(res_el, res_th))


@functools.partial(jax.jit, static_argnames="preconditioner")
def _elastic_only(rho, material, tol, maxiter, preconditioner):
  return _elastic(rho, material, tol, maxiter, preconditioner, False)[0]


@functools.partial(jax.jit, static_argnames="preconditioner")
def _expansion_only(rho, material, tol, maxiter, preconditioner):
  return _elastic(rho, material, tol, maxiter, preconditioner, True)[1]


@functools.partial(jax.jit, static_argnames="preconditioner")
def _conduction_only(rho, material, tol, maxiter, preconditioner):
  return _conduction(rho, material, tol, maxiter, preconditioner)[0]


# --- Boundary checks.

def _check_rho(rho: Any) -> Array:
  """rho as a float (n, n) array; shape always checked, values when concrete."""
  rho = checks.as_float("rho", rho)
  if rho.ndim != 2 or rho.shape[0] != rho.shape[1] or rho.shape[0] < 4:
    raise ValueError(f"rho must be a square (n, n) grid of element densities with n >= 4 "
                     f"for the periodic Q4 mesh, got shape {rho.shape}")
  checks.check_finite("rho", rho)
  if checks.is_concrete(rho):
    values = np.asarray(rho)
    bad = (values < 0) | (values > 1)
    if bad.any():
      i, j = (int(k) for k in np.argwhere(bad)[0])
      raise ValueError(f"rho[{i}, {j}] = {values[i, j]} is outside [0, 1]; expected "
                       "densities in [0, 1]")
  return rho


def _check_material(material: Any) -> None:
  """Moduli and the SIMP exponent > 0, nu in (-1, 0.5), finite expansions."""
  if not isinstance(material, Material):
    raise TypeError(f"material must be a Material, got {type(material).__name__}")
  for name in ("E_solid", "E_void", "kappa_solid", "kappa_void", "penal"):
    checks.scalar(f"material.{name}", getattr(material, name))
  for name in ("alpha_solid", "alpha_void"):
    value = getattr(material, name)
    if checks.is_concrete(value) and not np.all(np.isfinite(np.asarray(value, float))):
      raise ValueError(f"material.{name} must be finite, got {value}")
  nu = material.nu
  if checks.is_concrete(nu) and not np.all((np.asarray(nu, float) > -1)
                                           & (np.asarray(nu, float) < 0.5)):
    raise ValueError(f"material.nu must be in (-1, 0.5), got {nu}")


def _arguments(rho, material, tol, maxiter, preconditioner) -> tuple:
  """Checks everything, resolves the dtype-dependent default tolerance."""
  if preconditioner not in PRECONDITIONERS:
    raise ValueError(f"preconditioner={preconditioner!r}; expected one of "
                     f"{PRECONDITIONERS}")
  rho = _check_rho(rho)
  _check_material(material)
  if tol is None:
    tol = _DEFAULT_TOL.get(jnp.dtype(rho.dtype).itemsize, 1e-5)
  checks.scalar("tol", tol)
  checks.positive_int("maxiter", maxiter)
  return (rho, material, jnp.asarray(tol, rho.dtype), jnp.asarray(maxiter, jnp.int32),
          preconditioner)


# --- Public API.

DEFAULT_MAXITER = 2000


def homogenize(rho: Array, material: Material = Material(), *, tol: float | None = None,
               maxiter: int = DEFAULT_MAXITER, preconditioner: str = "multigrid"
               ) -> Properties:
  """Effective stiffness, conductivity and thermal expansion of a periodic cell.

      C^H_ij = <(eps0_i + B u_i)^T C (eps0_j + B u_j)>,   K u_i = -f(eps0_i),
      kappa^H_ij likewise with unit temperature gradients,
      alpha^H = (C^H)^-1 beta^H,   beta^H = <C (alpha m - B u_a)>,

  u_a the periodic fluctuation under unit heating at zero macroscopic strain (see the
  module docstring). Works under ``jit``, ``vmap`` (over cells or materials) and
  ``grad`` (w.r.t. ``rho`` and ``material``; derivatives take adjoint solves). Value
  checks run on concrete inputs only (not on tracers).

  Args:
    rho: (n, n) element densities in [0, 1], n >= 4; index [i, j] is (x_i, y_j).
      Computations follow its dtype (integer and boolean arrays become float).
    material: the two phases (``Material``).
    tol: CG stops at ||f - K u|| <= tol ||f|| (None: 1e-7 in float64, which gives
      ~1e-12 relative accuracy at contrast 1e-3; 1e-5 in float32).
    maxiter: the CG iteration cap per right-hand side (check ``residual``).
    preconditioner: "multigrid" (default) or "fft" (see the module docstring).

  Returns:
    ``Properties`` (C (3, 3), kappa (2, 2), alpha (3,), volume_fraction, iterations,
    residual).

  Raises:
    ValueError: rho not square (n, n) with n >= 4, NaN or outside [0, 1]; a bad
      material (non-positive moduli, nu outside (-1, 0.5)); tol <= 0; maxiter < 1;
      an unknown preconditioner.

  Example:
    >>> props = homogenize(jnp.ones((8, 8)))
    >>> props.C[0, 0]  # E / (1 - nu^2) = 1.0989...
  """
  return _homogenize(*_arguments(rho, material, tol, maxiter, preconditioner))


def elastic_tensor(rho: Array, material: Material = Material(), *,
                   tol: float | None = None, maxiter: int = DEFAULT_MAXITER,
                   preconditioner: str = "multigrid") -> Array:
  """The effective plane-stress stiffness C^H (3, 3), Voigt with engineering shear:

      C^H_ij = <(eps0_i + B u_i)^T C(rho) (eps0_j + B u_j)>,  K u_i = -f(eps0_i).

  Args and Raises as ``homogenize`` (three solves instead of six).

  Example:
    >>> elastic_tensor(jnp.ones((8, 8)))[2, 2]  # E / (2 (1 + nu))
  """
  return _elastic_only(*_arguments(rho, material, tol, maxiter, preconditioner))


def conductivity_tensor(rho: Array, material: Material = Material(), *,
                        tol: float | None = None, maxiter: int = DEFAULT_MAXITER,
                        preconditioner: str = "multigrid") -> Array:
  """The effective conductivity kappa^H (2, 2):

      kappa^H_ij = <(e_i + grad T_i)^T kappa(rho) (e_j + grad T_j)>,
      T_i periodic with K T_i = -f(e_i).

  Args and Raises as ``homogenize`` (two solves).

  Example:
    >>> conductivity_tensor(jnp.ones((8, 8)))  # kappa_solid I
  """
  return _conduction_only(*_arguments(rho, material, tol, maxiter, preconditioner))


def thermal_expansion(rho: Array, material: Material = Material(), *,
                      tol: float | None = None, maxiter: int = DEFAULT_MAXITER,
                      preconditioner: str = "multigrid") -> Array:
  """The effective thermal expansion alpha^H (3,) (Voigt strain per unit temperature):

      alpha^H = (C^H)^-1 beta^H,   beta^H = <C (alpha m - B u_a)>,   m = (1, 1, 0).

  Args and Raises as ``homogenize`` (four solves: the three of C^H and u_a).

  Example:
    >>> thermal_expansion(jnp.ones((8, 8)))  # alpha_solid m
  """
  return _expansion_only(*_arguments(rho, material, tol, maxiter, preconditioner))


def engineering_constants(C: Array) -> EngineeringConstants:
  """In-plane engineering constants of a (..., 3, 3) stiffness, from S = C^-1:

      E1 = 1 / S11, E2 = 1 / S22, G12 = 1 / S33, nu12 = -S12 / S11, nu21 = -S12 / S22.

  Example:
    >>> engineering_constants(homogenize(jnp.ones((8, 8))).C).nu12  # 0.3
  """
  S = _small_inverse(jnp.asarray(C))
  s11, s22, s33, s12 = S[..., 0, 0], S[..., 1, 1], S[..., 2, 2], S[..., 0, 1]
  return EngineeringConstants(E1=1 / s11, E2=1 / s22, G12=1 / s33, nu12=-s12 / s11,
                              nu21=-s12 / s22)
