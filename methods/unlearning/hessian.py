"""Curvature of a task's data term, stored or applied matrix-free, and the Newton step.

For the data term D_t(theta) = (1 / W) sum_i w_i l(theta; x_i, y_i) of equation (1):

  full Hessian          H = grad^2 D_t(theta)                             (d, d) stored
  Gauss-Newton (GGN)    G = (1 / W) sum_i w_i J_i^T (grad^2_z l_i) J_i      (d, d) stored
                        (J_i = d f(theta; x_i) / d theta, z the model output; G = H
                        for linear models, and G is positive semi-definite always)
  diagonal majorizer    c = |H| 1 or |G| 1 (Gershgorin row sums)          (d,)   stored
                        (diag(c) - C is diagonally dominant, so C <= diag(c): the
                        diagonal Newton step is a majorise-minimise step and cannot
                        overshoot, unlike the plain diagonal, which diverges on
                        pixel data whose Hessian mass is off the diagonal)
  Hessian-vector        v -> H v (forward-over-reverse) or v -> G v (jvp, then vjp);
  products              nothing stored, the task's data is read at unlearning time

A stage's Newton correction (the Hessian-based update of the paper, propagated through
the later tasks) is

    theta_hat = theta - (C + (lam + mu) I)^{-1} g,   g = grad L_t(theta; a', D'),

with C any of the above (a stored dense C is kept as (C + (lam + mu) I)^{-1}, see
`damped_inverse`; a diagonal C divides elementwise); with Hessian-vector
products the linear system is solved by conjugate gradients (`cg_solve`, via
jax.scipy.sparse.linalg.cg) or LiSSA (`lissa_solve`, the truncated Neumann series of
Agarwal et al. 2017). For a quadratic data term one such step is exact.

All vectors here are flat: `ravel_pytree(params)[0]` order.

References: Guo et al., "Certified data removal from machine learning models", ICML
2020 (Newton removal + noise); Sekhari et al., NeurIPS 2021 (stored Hessians);
Martens, "New insights and perspectives on the natural gradient method", JMLR 2020
(GGN); and the ICML 2026 CL-unlearning paper (abstract 5), which propagates the
Hessian-based update through the tasks after the forgotten one.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from methods.unlearning.objective import Objective, Task, data_loss, stage_loss

STORED = ("full", "ggn", "diag", "diag_ggn")   # kinds with a stored curvature
MATRIX_FREE = ("cg", "cg_ggn", "lissa")       # kinds with Hessian-vector products


def _flat_data_loss(obj: Objective, params, task: Task):
  flat, unravel = ravel_pytree(params)
  return flat, (lambda v: data_loss(obj, unravel(v), task))


@functools.partial(jax.jit, static_argnums=0)
def data_hessian(obj: Objective, params, task: Task) -> jax.Array:
  """H = grad^2 D_t(theta), the exact Hessian of the task's data term at params.

  Args:
    obj: the objective (its data term is differentiated).
    params: theta, a pytree.
    task: the task's data and weights.

  Returns:
    (d, d) matrix in `ravel_pytree(params)` order.

  Example:
    >>> h = data_hessian(obj, theta, task)   # (d, d)
  """
  flat, f = _flat_data_loss(obj, params, task)
  return jax.hessian(f)(flat)


def _output_hessian(obj: Objective, out: jax.Array) -> jax.Array:
  """grad^2_z l at outputs z: (n, C, C) for softmax CE (diag(p) - p p^T), (n, 1, 1) squared."""
  if obj.loss == "softmax_ce":
    p = jax.nn.softmax(out, axis=-1)
    return jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
  return jnp.ones((out.shape[0], 1, 1), out.dtype)


def _jacobian(obj: Objective, params, task: Task):
  """Per-example output Jacobians (n, C, d) and outputs (n, C)."""
  flat, unravel = ravel_pytree(params)

  def one(x):
    out = lambda v: obj.apply_fn(unravel(v), x[None])[0].reshape(-1)
    return jax.jacrev(out)(flat), out(flat)

  return jax.vmap(one)(task.x)


@functools.partial(jax.jit, static_argnums=0)
def data_ggn(obj: Objective, params, task: Task) -> jax.Array:
  """G = (1/W) sum_i w_i J_i^T (grad^2_z l_i) J_i, the generalised Gauss-Newton matrix.

  Args:
    obj: the objective.
    params: theta, a pytree.
    task: the task's data and weights.

  Returns:
    (d, d) PSD matrix in `ravel_pytree(params)` order (= the Hessian for models
    linear in their parameters).

  Example:
    >>> g = data_ggn(obj, theta, task)
  """
  jac, out = _jacobian(obj, params, task)
  hz = _output_hessian(obj, out)
  weights = task.w / jnp.maximum(jnp.sum(task.w), 1e-30)
  left = jnp.einsum("nce,ned->ncd", hz * weights[:, None, None], jac)
  n, c, d = jac.shape
  return jac.reshape(n * c, d).T @ left.reshape(n * c, d)   # one (d, nC) x (nC, d) matmul


def row_sums(matrix: jax.Array) -> jax.Array:
  """c = |C| 1, the Gershgorin diagonal majorizer of a symmetric C (C <= diag(c)).

  Args:
    matrix: (d, d) symmetric.

  Returns:
    (d,) row sums of absolute values.

  Example:
    >>> row_sums(jnp.array([[2.0, -1.0], [-1.0, 2.0]]))   # [3., 3.]
  """
  return jnp.sum(jnp.abs(matrix), axis=1)


@functools.partial(jax.jit, static_argnums=(0, 3))
def data_diag(obj: Objective, params, task: Task, gauss_newton: bool = False) -> jax.Array:
  """c = |H| 1 (or |G| 1 with `gauss_newton`): the diagonal majorizer of the data term.

  The (d, d) matrix is formed once, then only its d row sums are kept.

  Args:
    obj, params, task: as `data_hessian`.
    gauss_newton: the GGN's row sums instead of the Hessian's.

  Returns:
    (d,) majorizer in `ravel_pytree(params)` order.

  Example:
    >>> c = data_diag(obj, theta, task, gauss_newton=True)   # (d,)
  """
  return row_sums((data_ggn if gauss_newton else data_hessian)(obj, params, task))


def data_hessian_diag(obj: Objective, params, task: Task) -> jax.Array:
  """|H| 1: `data_diag(obj, params, task)` (arguments and result as there)."""
  return data_diag(obj, params, task)


def data_ggn_diag(obj: Objective, params, task: Task) -> jax.Array:
  """|G| 1: `data_diag(obj, params, task, gauss_newton=True)` (as there)."""
  return data_diag(obj, params, task, True)


def curvature(kind: str, obj: Objective, params, task: Task) -> jax.Array | None:
  """The curvature C of one task that a stage of `kind` stores (before damping).

      full: H;  ggn: G;  diag: |H| 1;  diag_ggn: |G| 1;  any other kind: None.

  Args:
    kind: a stage kind (`hybrid.KINDS`).
    obj, params, task: as `data_hessian` (params = theta_t, task = D_t).

  Returns:
    (d, d) or (d,) array, or None for kinds that store nothing.

  Example:
    >>> curvature("full", obj, anchors[1], tasks[0]).shape   # (d, d)
  """
  if kind == "full":
    return data_hessian(obj, params, task)
  if kind == "ggn":
    return data_ggn(obj, params, task)
  if kind == "diag":
    return data_hessian_diag(obj, params, task)
  if kind == "diag_ggn":
    return data_ggn_diag(obj, params, task)
  return None


def hvp(obj: Objective, params, task: Task, gauss_newton: bool = False
        ) -> Callable[[jax.Array], jax.Array]:
  """The matrix-free product v -> H v (forward-over-reverse) or v -> G v (jvp, then vjp).

  The model is linearized at params once (`jax.linearize`, `jax.vjp`): the returned
  function holds the forward pass's intermediates and only runs tangent and cotangent
  passes, so a solver that calls it many times (CG, LiSSA, power iteration) pays for
  the primal pass once.

  Args:
    obj, params, task: as `data_hessian`.
    gauss_newton: G (J^T H_z J) instead of the exact Hessian H.

  Returns:
    A function of flat (d,) vectors in `ravel_pytree(params)` order.

  Example:
    >>> matvec = hvp(obj, theta, task, gauss_newton=True)
    >>> matvec(jnp.ones(d)).shape   # (d,)
  """
  flat, unravel = ravel_pytree(params)
  if not gauss_newton:
    f = lambda v: data_loss(obj, unravel(v), task)
    return jax.linearize(jax.grad(f), flat)[1]
  out_fn = lambda v: obj.apply_fn(unravel(v), task.x).reshape(task.x.shape[0], -1)
  out, jvp_fn = jax.linearize(out_fn, flat)
  vjp_fn = jax.vjp(out_fn, flat)[1]
  weights = task.w / jnp.maximum(jnp.sum(task.w), 1e-30)
  hz = _output_hessian(obj, out) * weights[:, None, None]
  return lambda v: vjp_fn(jnp.einsum("nce,ne->nc", hz, jvp_fn(v)))[0]


def default_cg_tol(dtype) -> float:
  """CG's default relative residual tolerance: 1e-10, or 10 machine epsilons of `dtype`
  where that is coarser (float32: 1.2e-6).

  Below about that, a float32 solve's recursive residual keeps falling while its
  iterate no longer changes beyond rounding: on the benchmark's d = 85k MLP, stopping
  at 1.2e-6 instead of 1e-10 gives the same unlearned weights to 4 digits with a third
  fewer Hessian-vector products (docs/benchmarks.md).

  Args:
    dtype: the dtype of the system.

  Returns:
    The tolerance.

  Example:
    >>> default_cg_tol(jnp.float64)
    1e-10
  """
  return max(1e-10, 10.0 * float(jnp.finfo(dtype).eps))


def cg_solve(matvec: Callable[[jax.Array], jax.Array], b: jax.Array, damping: float,
             maxiter: int = 200, tol: float | None = None) -> jax.Array:
  """x = (C + damping I)^{-1} b by conjugate gradients (C symmetric PSD, matrix-free).

  Args:
    matvec: v -> C v.
    b: (d,) right-hand side.
    damping: added to the diagonal (lam + mu in a Newton step).
    maxiter: iterations at most.
    tol: relative residual tolerance (default: `default_cg_tol` of b's dtype).

  Returns:
    (d,) solution.

  Example:
    >>> x = cg_solve(hvp(obj, theta, task), g, obj.strong_convexity)
  """
  tol = default_cg_tol(b.dtype) if tol is None else tol
  x, _ = jax.scipy.sparse.linalg.cg(lambda v: matvec(v) + damping * v, b, tol=tol,
                                    atol=0.0, maxiter=maxiter)
  return x


def lissa_solve(matvec: Callable[[jax.Array], jax.Array], b: jax.Array, damping: float,
                scale: float, depth: int = 500) -> jax.Array:
  """LiSSA: (C + damping I)^{-1} b ~= (1/s) sum_{i<depth} (I - (C + damping I)/s)^i b.

  The recursion v_0 = b, v_{i+1} = b + v_i - (C + damping I) v_i / s converges to
  s (C + damping I)^{-1} b when s > lambda_max(C) + damping (geometric rate
  1 - damping / s). Deterministic here (the full data term each step).

  Args:
    matvec: v -> C v.
    b: (d,) right-hand side.
    damping: added to the diagonal.
    scale: s, above lambda_max(C) + damping (e.g. a smoothness bound).
    depth: Neumann terms.

  Returns:
    (d,) approximate solution.

  Example:
    >>> x = lissa_solve(matvec, g, obj.strong_convexity, scale=smoothness, depth=300)
  """
  def body(_, v):
    return b + v - (matvec(v) + damping * v) / scale
  return jax.lax.fori_loop(0, depth, body, b) / scale


def power_iteration(matvec: Callable[[jax.Array], jax.Array], dim: int, key: jax.Array,
                    iters: int = 30, dtype=jnp.float32) -> jax.Array:
  """lambda_max(C) ~= v^T C v, v = C^iters v_0 / ||...||, v_0 ~ N(0, I) from `key`.

  An estimate from below of the largest eigenvalue of a symmetric PSD operator.

  Args:
    matvec: v -> C v.
    dim: d.
    key: the PRNG key of the start vector.
    iters: power steps.
    dtype: dtype of the start vector.

  Returns:
    Scalar estimate.

  Example:
    >>> top = power_iteration(hvp(obj, theta, task, True), d, jax.random.PRNGKey(0))
  """
  v = jax.random.normal(key, (dim,), dtype)
  def body(_, v):
    w = matvec(v)
    return w / jnp.maximum(jnp.linalg.norm(w), 1e-30)
  v = jax.lax.fori_loop(0, iters, body, v / jnp.linalg.norm(v))
  return v @ matvec(v)


@functools.partial(jax.jit, static_argnums=0)
def damped_inverse(obj: Objective, matrix: jax.Array) -> jax.Array:
  """S = (C + (lam + mu) I)^{-1}, by Cholesky.

  C is PSD, so the system is well conditioned: kappa <= (lambda_max(C) + lam + mu) /
  (lam + mu). Stored once per task, so a request costs one matrix-vector product per
  Newton step (a triangular solve per step is ~40x slower on XLA:CPU at d = 2410).

  Args:
    obj: the objective (its lam + mu).
    matrix: (d, d) C.

  Returns:
    (d, d) S.

  Example:
    >>> s = damped_inverse(obj, data_hessian(obj, theta, task))
  """
  eye = jnp.eye(matrix.shape[0], dtype=matrix.dtype)
  factor = jnp.linalg.cholesky(matrix + obj.strong_convexity * eye)
  return jax.scipy.linalg.cho_solve((factor, True), eye)


def undamped(obj: Objective, inverse: jax.Array) -> jax.Array:
  """C = S^{-1} - (lam + mu) I: the inverse map of `damped_inverse` (same arguments, with
  the (d, d) S in place of C; returns the (d, d) C).

  Example:
    >>> undamped(obj, damped_inverse(obj, c))   # ~= c
  """
  eye = jnp.eye(inverse.shape[0], dtype=inverse.dtype)
  return jnp.linalg.inv(inverse) - obj.strong_convexity * eye


@jax.jit
def newton_dense(params, grad, inverse):
  """theta - S g, S = (C + (lam + mu) I)^{-1} stored.

  Args:
    params: theta, a pytree.
    grad: g = grad L_t(theta), a pytree like params.
    inverse: (d, d) S.

  Returns:
    The updated pytree.

  Example:
    >>> theta = newton_dense(theta, stage_grad(obj, theta, anchor, task), s)
  """
  flat, unravel = ravel_pytree(params)
  g, _ = ravel_pytree(grad)
  return unravel(flat - (inverse @ g.astype(inverse.dtype)).astype(flat.dtype))


@functools.partial(jax.jit, static_argnums=0)
def newton_diag(obj: Objective, params, grad, diagonal):
  """theta - g / (max(c, 0) + lam + mu) for a stored diagonal c.

  Args:
    obj: the objective (its lam + mu).
    params, grad: as `newton_dense`.
    diagonal: (d,) c.

  Returns:
    The updated pytree.

  Example:
    >>> theta = newton_diag(obj, theta, g, data_hessian_diag(obj, theta, task))
  """
  flat, unravel = ravel_pytree(params)
  g, _ = ravel_pytree(grad)
  return unravel(flat - g / (jnp.maximum(diagonal, 0.0) + obj.strong_convexity))


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6, 7))
def newton_matrix_free(obj: Objective, start, anchor, task: Task, steps: int, method: str,
                       maxiter: int, gauss_newton: bool, lissa_scale=None,
                       tol: float | None = None):
  """`steps` Newton steps on L(. ; anchor, task) from start, with C taken at start:

      theta_0 = start,  theta_{i+1} = theta_i - (C + (lam + mu) I)^{-1} grad L(theta_i),

  C v from Hessian-vector products on `task`. The whole stage is one compiled program:
  the model is linearized at start once (`hvp`) and that product serves every step's
  solve, and no value comes back to the host between steps.

  Args:
    obj: the objective.
    start: theta_t, a pytree (where C is taken, and the first iterate).
    anchor: the stage's anchor (theta_hat_{t-1}).
    task: the data of the gradient and of C.
    steps: Newton steps (>= 0).
    method: "cg" (conjugate gradients) or "lissa".
    maxiter: CG iterations at most per step, or LiSSA's Neumann terms.
    gauss_newton: C = G (else the exact Hessian).
    lissa_scale: LiSSA's scale s ("lissa" only).
    tol: CG's relative residual tolerance (default: `default_cg_tol`).

  Returns:
    theta_steps, a pytree like start.

  Example:
    >>> theta = newton_matrix_free(obj, theta_t, theta_hat, task, 5, "cg", 100, True)
  """
  flat, unravel = ravel_pytree(start)
  matvec = hvp(obj, start, task, gauss_newton=gauss_newton)
  m = obj.strong_convexity

  def newton_step(_, x):
    g, _ = ravel_pytree(jax.grad(stage_loss, argnums=1)(obj, unravel(x), anchor, task))
    if method == "cg":
      return x - cg_solve(matvec, g, m, maxiter=maxiter, tol=tol)
    return x - lissa_solve(matvec, g, m, lissa_scale, depth=maxiter)

  return unravel(jax.lax.fori_loop(0, steps, newton_step, flat))
