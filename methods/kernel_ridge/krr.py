"""Kernel ridge regression solvers: exact (Cholesky), matrix-free CG, and Nystrom.

KRR with kernel k and ridge lambda on n points minimises

    (1/n) sum_i (y_i - f(z_i))^2 + lambda ||f||_H^2,

whose solution is f(z) = sum_i alpha_i k(z, z_i) with (K + n lambda I) alpha = y.
The Nystrom variant restricts f to span{k(., c_l)} over m landmarks c_l:

    beta = (K_mn K_nm + n lambda K_mm)^{-1} K_mn y,   f(z) = sum_l beta_l k(z, c_l)

(Williams & Seeger 2001; Rudi, Camoriano & Rosasco 2015). Its memory is O(n m),
built here in row chunks so n = 10^5 and beyond fits.

Inputs ``z`` are pytrees of arrays whose leaves share a leading axis of size n (a
plain (n, d) array, or a tuple such as (t, x) for product kernels); the kernel is
a pytree callable ``k(z_a, z_b) -> (n_a, n_b)`` Gram matrix such as
``common.kernels.Kernel`` or ``ProductKernel``, whose lengthscales are traced leaves.
Every function is pure and traceable; ``fit`` is jit-compiled with the solver static.

Examples assume ``import jax, jax.numpy as jnp`` and ``from common import kernels``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common import checks

Array = jax.Array
Gram = Callable[[Any, Any], Array]

SOLVERS = ("cholesky", "cg", "nystrom", "auto")
# "auto" switches from the exact Cholesky solve to Nystrom at this many rows. Measured
# on the two-stage benchmark (docs/benchmarks.md, "Two-stage kernel ridge"): from
# n = 4000 on, Nystrom with ``landmark_rule(n)`` landmarks matches the exact solver's
# ISE to within 1% and runs well over 3x faster; below it an exact solve takes a
# second or two at most (0.35 s at n = 2000 on an idle 2-core machine), is
# deterministic and needs no PRNG key.
NYSTROM_MIN_N = 4000
# Compute cap of ``landmark_rule``: forming K_mn K_nm costs 2 n m^2 FLOPs, so m = 1000
# at n = 10^6 is 2e12 FLOPs per stage (45 s at the 44.5 GFLOP/s float64 GEMM rate
# measured on the 2-core benchmark machine; docs/benchmarks.md has the whole curve).
MAX_LANDMARKS = 1000


class KRRFit(NamedTuple):
  """A fitted expansion f(z) = sum_l weights_l k(z, centers_l) (see ``predict``)."""
  centers: Any    # pytree with leading axis m (training rows or landmarks)
  weights: Array  # (m,)




def num_rows(z: Any) -> int:
  """The shared leading size n of a pytree of arrays; raises if the leaves disagree.

  Args:
    z: a pytree of arrays, each with leading axis n.

  Returns:
    n.

  Example:
    >>> num_rows((jnp.zeros(5), jnp.zeros((5, 2))))
    5
  """
  sizes = {leaf.shape[0] for leaf in jax.tree_util.tree_leaves(z)}
  if len(sizes) != 1:
    raise ValueError(f"inputs must share their leading (row) axis, got sizes {sorted(sizes)}")
  return sizes.pop()


def take_rows(z: Any, idx: Array) -> Any:
  """z[idx] leaf by leaf: the rows ``idx`` of every leaf of ``z``.

  Args:
    z: a pytree of arrays with a shared leading axis.
    idx: integer row indices.

  Returns:
    A pytree like ``z`` whose leaves have leading size ``len(idx)``.

  Example:
    >>> take_rows((jnp.arange(4.0), jnp.eye(4)), jnp.array([0, 2]))[0]
    Array([0., 2.], dtype=float32)
  """
  return jax.tree_util.tree_map(lambda a: a[idx], z)


def row_blocks(z: Any, chunk_size: int) -> tuple[Any, int]:
  """Splits every leaf of ``z`` into (num_chunks, chunk_size, ...) blocks of rows.

  num_chunks = ceil(n / chunk_size); the last block is padded with copies of row 0.

  Args:
    z: a pytree of arrays with leading axis n.
    chunk_size: rows per block.

  Returns:
    (blocks, num_chunks).

  Example:
    >>> blocks, num_chunks = row_blocks(jnp.arange(5.0), 2)
    >>> blocks.shape, num_chunks
    ((3, 2), 3)
  """
  n = num_rows(z)
  num_chunks = -(-n // chunk_size)
  pad = num_chunks * chunk_size - n

  def block(a):
    a = jnp.concatenate([a, jnp.broadcast_to(a[:1], (pad,) + a.shape[1:])], axis=0)
    return a.reshape((num_chunks, chunk_size) + a.shape[1:])

  return jax.tree_util.tree_map(block, z), num_chunks


def chunked_rows(fn: Callable[[Any], Array], z: Any, chunk_size: int | None) -> Array:
  """fn(z) computed row-chunk by row-chunk: concat_b fn(z[rows of block b]).

  ``fn`` maps a pytree of rows to an array with the same leading size. With
  ``chunk_size=None`` (or >= n) it is a single call. Padding rows (copies of row 0)
  are dropped from the output, so any n works.

  Args:
    fn: ``rows -> (rows, ...)`` array, applied to each block under ``lax.map``.
    z: a pytree of arrays with leading axis n.
    chunk_size: rows per block, or None for one call.

  Returns:
    (n, ...) array equal to ``fn(z)``.

  Example:
    >>> chunked_rows(lambda r: 2.0 * r, jnp.arange(5.0), chunk_size=2)
    Array([0., 2., 4., 6., 8.], dtype=float32)
  """
  n = num_rows(z)
  if chunk_size is None or chunk_size >= n:
    return fn(z)
  blocks, num_chunks = row_blocks(z, chunk_size)
  out = jax.lax.map(fn, blocks)
  return out.reshape((num_chunks * chunk_size,) + out.shape[2:])[:n]


def check_chunk_size(chunk_size) -> None:
  """Raises a ValueError unless ``chunk_size`` is None or an int >= 1.

  Example:
    >>> check_chunk_size(2048)
  """
  if chunk_size is not None and (isinstance(chunk_size, bool) or
                                 not isinstance(chunk_size, (int, np.integer))
                                 or chunk_size < 1):
    raise ValueError(f"chunk_size must be None or an int >= 1, got {chunk_size!r}")


def landmark_rule(n: int, scale: float = 1.0, max_landmarks: int = MAX_LANDMARKS) -> int:
  """The default Nystrom rank m = min(n, max_landmarks, ceil(scale * sqrt(n) * log n)).

  Rudi, Camoriano & Rosasco (2015) show that m of order sqrt(n) log n uniformly
  sampled landmarks reach the exact KRR learning rate at lambda ~ n^{-1/2}; more
  generally m ~ d_eff(lambda) log n suffices, with d_eff the effective dimension. At
  a fixed lambda d_eff does not grow with n, which is what justifies the cap
  ``max_landmarks`` (a compute budget, since forming the normal equations costs
  2 n m^2 FLOPs); docs/benchmarks.md checks the resulting ISE against the exact solver.

  Args:
    n: number of training rows (>= 1).
    scale: the constant c in front of sqrt(n) log n.
    max_landmarks: the cap.

  Returns:
    m, an int in [1, n].

  Example:
    >>> landmark_rule(8000), landmark_rule(10 ** 6)
    (804, 1000)
  """
  if n < 1:
    raise ValueError(f"landmark_rule needs n >= 1 rows, got {n}")
  m = math.ceil(scale * math.sqrt(n) * math.log(max(n, 2)))
  return max(1, min(n, int(max_landmarks), m))


def resolve_solver(solver: str, n: int, num_landmarks: int | None) -> tuple[str, int]:
  """The concrete (solver, m) that ``solver`` means on n rows.

  "auto" is "cholesky" below ``NYSTROM_MIN_N`` rows and "nystrom" from there on;
  ``num_landmarks=None`` is ``landmark_rule(n)``.

  Args:
    solver: one of ``SOLVERS``.
    n: number of training rows.
    num_landmarks: the Nystrom rank m, or None for the rule.

  Returns:
    (one of "cholesky", "cg", "nystrom"; m, unused by the exact solvers).

  Example:
    >>> resolve_solver("auto", 500, None), resolve_solver("auto", 8000, None)
    (('cholesky', 139), ('nystrom', 804))
  """
  if solver not in SOLVERS:
    raise ValueError(f"unknown solver {solver!r}; expected one of {SOLVERS}")
  if num_landmarks is not None and (isinstance(num_landmarks, bool) or num_landmarks < 1):
    raise ValueError(f"num_landmarks must be None or >= 1, got {num_landmarks}")
  if solver == "auto":
    solver = "nystrom" if n >= NYSTROM_MIN_N else "cholesky"
  return solver, int(landmark_rule(n) if num_landmarks is None else num_landmarks)


def block_mask(n: int, chunk_size: int, dtype) -> Array:
  """(num_chunks, chunk_size) weights: 1 on the n real rows of ``row_blocks``, 0 on padding.

  Example:
    >>> block_mask(3, 2, jnp.float32)
    Array([[1., 1.],
           [1., 0.]], dtype=float32)
  """
  num_chunks = -(-n // chunk_size)
  mask = jnp.arange(num_chunks * chunk_size) < n
  return mask.astype(dtype).reshape(num_chunks, chunk_size)


def _check_fit_args(y: Array, n: int, lam) -> None:
  if y.ndim != 1 or y.shape[0] != n:
    raise ValueError(f"targets y must have shape ({n},), got {y.shape}")
  if not isinstance(lam, jax.core.Tracer) and not float(lam) > 0:
    raise ValueError(f"ridge lambda must be > 0, got {lam}")
  if not isinstance(lam, jax.core.Tracer) and not float(lam) < np.inf:
    raise ValueError(f"ridge lambda must be finite, got {lam}")


def solve_cholesky(gram: Array, y: Array, lam) -> Array:
  """alpha = (K + n lambda I)^{-1} y by a Cholesky factorisation.

  Args:
    gram: (n, n) Gram matrix K.
    y: (n,) targets.
    lam: ridge lambda > 0.

  Returns:
    (n,) dual coefficients alpha.

  Example:
    >>> x = jnp.linspace(0.0, 1.0, 8)
    >>> alpha = solve_cholesky(kernels.rbf(x, x, 0.3), jnp.sin(x), 1e-3)
  """
  n = gram.shape[0]
  reg = gram + n * lam * jnp.eye(n, dtype=gram.dtype)
  factor = jax.scipy.linalg.cho_factor(reg, lower=True)
  return jax.scipy.linalg.cho_solve(factor, y)


class SpectralPath(NamedTuple):
  """KRR solutions for a grid of lambdas from one eigendecomposition."""
  alphas: Array    # (L, n) dual coefficients, one row per lambda
  fitted: Array    # (L, n) in-sample predictions K alpha
  loo_mse: Array   # (L,) exact leave-one-out mean squared error


def spectral_path(gram: Array, y: Array, lams: Array) -> SpectralPath:
  """Solves KRR for every lambda in ``lams`` with one eigendecomposition of K.

  With K = U diag(s) U^T, alpha(lambda) = U diag(1 / (s + n lambda)) U^T y, and the
  hat matrix H = K (K + n lambda I)^{-1} = U diag(s / (s + n lambda)) U^T gives the
  closed-form leave-one-out residual (y_i - f_i) / (1 - H_ii).

  Args:
    gram: (n, n) Gram matrix K.
    y: (n,) targets.
    lams: (L,) ridges lambda.

  Returns:
    SpectralPath(alphas (L, n), fitted (L, n), loo_mse (L,)).

  Example:
    >>> x = jnp.linspace(0.0, 1.0, 20)
    >>> path = spectral_path(kernels.rbf(x, x, 0.3), jnp.sin(6 * x), jnp.array([1e-4, 1e-2]))
    >>> best_lam_index = int(jnp.argmin(path.loo_mse))
  """
  n = gram.shape[0]
  s, u = jnp.linalg.eigh(gram)
  s = jnp.maximum(s, 0.0)
  uy = u.T @ y
  shrink = 1.0 / (s[None, :] + n * jnp.asarray(lams)[:, None])          # (L, n)
  alphas = (shrink * uy[None, :]) @ u.T
  hat_eig = s[None, :] * shrink
  fitted = (hat_eig * uy[None, :]) @ u.T
  hat_diag = hat_eig @ (u * u).T                                        # (L, n)
  loo = (y[None, :] - fitted) / jnp.maximum(1.0 - hat_diag, 1e-12)
  return SpectralPath(alphas=alphas, fitted=fitted, loo_mse=jnp.mean(loo * loo, axis=1))


def gram_matvec(k: Gram, z: Any, v: Array, chunk_size: int | None) -> Array:
  """(K v)_i = sum_j k(z_i, z_j) v_j without storing K: rows of K are built
  ``chunk_size`` at a time.

  Args:
    k: kernel ``k(z_a, z_b) -> Gram matrix``.
    z: inputs, a pytree with leading axis n.
    v: (n,) vector.
    chunk_size: rows of K per block, or None for the whole K at once.

  Returns:
    (n,) K v.

  Example:
    >>> x = jnp.linspace(0.0, 1.0, 10)
    >>> kv = gram_matvec(kernels.Kernel(0.3), x, jnp.ones(10), chunk_size=4)
  """
  return chunked_rows(lambda rows: k(rows, z) @ v, z, chunk_size)


def solve_cg(k: Gram, z: Any, y: Array, lam, *, chunk_size: int | None = 2048,
             tol: float = 1e-6, maxiter: int | None = None) -> Array:
  """alpha = (K + n lambda I)^{-1} y by conjugate gradients with a matrix-free K v.

  Args:
    k: kernel ``k(z_a, z_b) -> Gram matrix``.
    z: inputs, a pytree with leading axis n.
    y: (n,) targets.
    lam: ridge lambda > 0.
    chunk_size: rows of K built at a time (memory O(n chunk_size)).
    tol, maxiter: passed to ``jax.scipy.sparse.linalg.cg``.

  Returns:
    (n,) dual coefficients alpha.

  Example:
    >>> x = jnp.linspace(0.0, 1.0, 30)
    >>> alpha = solve_cg(kernels.Kernel(0.3), x, jnp.sin(x), 1e-3, chunk_size=8)
  """
  n = y.shape[0]

  def matvec(v):
    return gram_matvec(k, z, v, chunk_size) + n * lam * v

  alpha, _ = jax.scipy.sparse.linalg.cg(matvec, y, tol=tol, maxiter=maxiter)
  return alpha


def nystrom_normal_equations(k: Gram, z: Any, y: Array, landmarks: Any,
                             chunk_size: int | None) -> tuple[Array, Array, Array]:
  """The Nystrom normal equations' pieces (K_mn K_nm, K_mn y, K_mm).

  K_mn K_nm = sum_b K_bm^T K_bm and K_mn y = sum_b K_bm^T y_b are accumulated over
  row blocks b of z, so K_nm is never stored whole.

  Args:
    k: kernel ``k(z_a, z_b) -> Gram matrix``.
    z: inputs, a pytree with leading axis n.
    y: (n,) targets.
    landmarks: a pytree like ``z`` with leading axis m.
    chunk_size: rows per block, or None for one block.

  Returns:
    ((m, m) K_mn K_nm, (m,) K_mn y, (m, m) K_mm).

  Example:
    >>> x = jnp.linspace(0.0, 1.0, 30)
    >>> ktk, kty, kmm = nystrom_normal_equations(kernels.Kernel(0.3), x, jnp.sin(x), x[::3], 8)
  """
  m = num_rows(landmarks)
  n = y.shape[0]
  if chunk_size is None or chunk_size >= n:
    k_nm = k(z, landmarks)
    return k_nm.T @ k_nm, k_nm.T @ y, k(landmarks, landmarks)
  blocks, _ = row_blocks((z, y), chunk_size)
  # Padding rows are zeroed so they add nothing to K_mn K_nm or K_mn y.
  mask = block_mask(n, chunk_size, y.dtype)

  def body(carry, xs):
    ktk, kty = carry
    (rows, yc), w = xs
    kc = k(rows, landmarks) * w[:, None]
    return (ktk + kc.T @ kc, kty + kc.T @ yc), None

  dtype = y.dtype
  init = (jnp.zeros((m, m), dtype), jnp.zeros((m,), dtype))
  (ktk, kty), _ = jax.lax.scan(body, init, (blocks, mask))
  return ktk, kty, k(landmarks, landmarks)


def solve_nystrom(k: Gram, z: Any, y: Array, lam, landmarks: Any, *,
                  chunk_size: int | None = 2048, jitter: float = 1e-8) -> Array:
  """beta = (K_mn K_nm + n lambda K_mm)^{-1} K_mn y for the given landmarks.

  A jitter of ``jitter * trace / m`` on the diagonal keeps the m x m system solvable.

  Args:
    k: kernel ``k(z_a, z_b) -> Gram matrix``.
    z: inputs, a pytree with leading axis n.
    y: (n,) targets.
    lam: ridge lambda > 0.
    landmarks: a pytree like ``z`` with leading axis m (the centres of the fit).
    chunk_size: rows of K_nm built at a time.
    jitter: relative diagonal jitter.

  Returns:
    (m,) weights beta; f(z) = sum_l beta_l k(z, landmarks_l).

  Example:
    >>> x = jnp.linspace(0.0, 1.0, 30)
    >>> beta = solve_nystrom(kernels.Kernel(0.3), x, jnp.sin(x), 1e-3, x[::3])
  """
  n = y.shape[0]
  ktk, kty, kmm = nystrom_normal_equations(k, z, y, landmarks, chunk_size)
  a = ktk + n * lam * kmm
  m = a.shape[0]
  a = a + jitter * (jnp.trace(a) / m) * jnp.eye(m, dtype=a.dtype)
  return jnp.linalg.solve(a, kty)


@functools.partial(jax.jit, static_argnames=("solver", "num_landmarks", "chunk_size"))
def _fit(k, z, y, lam, key, solver, num_landmarks, chunk_size):
  n = y.shape[0]
  if solver == "cholesky":
    return KRRFit(centers=z, weights=solve_cholesky(k(z, z), y, lam))
  if solver == "cg":
    return KRRFit(centers=z, weights=solve_cg(k, z, y, lam, chunk_size=chunk_size))
  idx = jax.random.choice(key, n, (min(num_landmarks, n),), replace=False)
  landmarks = take_rows(z, idx)
  beta = solve_nystrom(k, z, y, lam, landmarks, chunk_size=chunk_size)
  return KRRFit(centers=landmarks, weights=beta)


def fit(k: Gram, z: Any, y: Array, lam, *, solver: str = "cholesky",
        key: Array | None = None, num_landmarks: int | None = None,
        chunk_size: int | None = 2048) -> KRRFit:
  """Fits kernel ridge regression of ``y`` on rows of ``z``.

  Args:
    k: kernel, a pytree callable ``k(z_a, z_b) -> Gram matrix`` (e.g.
      ``common.kernels.Kernel(lengthscale=0.5, name="rbf")``).
    z: inputs, a pytree of arrays with leading axis n.
    y: (n,) targets.
    lam: ridge lambda > 0 (the loss is normalised by n).
    solver: "cholesky" (exact, O(n^3)), "cg" (exact, matrix-free, O(n^2) per
      iteration, O(n chunk) memory) or "nystrom" (``num_landmarks`` uniformly
      sampled landmarks, O(n m^2)), or "auto": "nystrom" from ``NYSTROM_MIN_N``
      rows on, "cholesky" below (see ``resolve_solver``).
    key: PRNG key choosing the Nystrom landmarks (required when the solver is or
      resolves to "nystrom", unused by the exact solvers).
    num_landmarks: m for "nystrom", or None for ``landmark_rule(n)``.
    chunk_size: rows per block when building K for "cg"/"nystrom".

  Returns:
    KRRFit; predict with ``predict(k, fit, z_new)``.

  Example:
    >>> k = kernels.Kernel(lengthscale=0.5, name="rbf")
    >>> x = jnp.linspace(-1.0, 1.0, 40)
    >>> model = fit(k, x, jnp.sin(3 * x), 1e-3)
    >>> y_hat = predict(k, model, jnp.linspace(-1.0, 1.0, 7))
    >>> sparse = fit(k, x, jnp.sin(3 * x), 1e-3, solver="nystrom",
    ...              key=jax.random.PRNGKey(0), num_landmarks=10)
  """
  check_chunk_size(chunk_size)
  n = num_rows(z)
  solver, num_landmarks = resolve_solver(solver, n, num_landmarks)
  y = checks.as_float("targets y", y)
  _check_fit_args(y, n, lam)
  z = jax.tree_util.tree_map(lambda a: checks.as_float("inputs z", a), z)
  for leaf in jax.tree_util.tree_leaves(z):
    checks.check_finite("inputs z", leaf)
  checks.check_finite("targets y", y)
  if solver == "nystrom" and key is None:
    raise ValueError(f"solver='nystrom' (n={n}) needs a PRNG key to choose landmarks")
  return _fit(k, z, y, lam, key, solver, num_landmarks, chunk_size)


def predict(k: Gram, model: KRRFit, z: Any, chunk_size: int | None = None) -> Array:
  """f(z_i) = sum_l weights_l k(z_i, centers_l), optionally in row chunks.

  Args:
    k: the kernel the model was fitted with.
    model: a ``KRRFit``.
    z: query inputs, a pytree with leading axis q.
    chunk_size: query rows per block, or None.

  Returns:
    (q,) predictions.

  Example:
    >>> k = kernels.Kernel(0.5)
    >>> x = jnp.linspace(-1.0, 1.0, 40)
    >>> y_hat = predict(k, fit(k, x, jnp.sin(3 * x), 1e-3), x, chunk_size=16)
  """
  return chunked_rows(lambda rows: k(rows, model.centers) @ model.weights, z, chunk_size)
