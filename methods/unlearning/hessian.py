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

from methods.unlearning import continual
from methods.unlearning.continual import Objective, Task

STORED = ("full", "ggn", "diag", "diag_ggn")   # kinds with a stored curvature
MATRIX_FREE = ("cg", "cg_ggn", "lissa")       # kinds with Hessian-vector products


def _flat_data_loss(obj: Objective, params, task: Task):
  flat, unravel = ravel_pytree(params)
  return flat, (lambda v: continual.data_loss(obj, unravel(v), task))


@functools.partial(jax.jit, static_argnums=0)
def data_hessian(obj: Objective, params, task: Task) -> jax.Array:
  """The exact (d, d) Hessian of the task's data term at params."""
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
  """The (d, d) generalised Gauss-Newton matrix (1/W) sum_i w_i J_i^T H_z,i J_i."""
  jac, out = _jacobian(obj, params, task)
  hz = _output_hessian(obj, out)
  weights = task.w / jnp.maximum(jnp.sum(task.w), 1e-30)
  left = jnp.einsum("nce,ned->ncd", hz * weights[:, None, None], jac)
  n, c, d = jac.shape
  return jac.reshape(n * c, d).T @ left.reshape(n * c, d)   # one (d, nC) x (nC, d) matmul


def row_sums(matrix: jax.Array) -> jax.Array:
  """|C| 1: the Gershgorin diagonal majorizer of a symmetric C (C <= diag(|C| 1))."""
  return jnp.sum(jnp.abs(matrix), axis=1)


@functools.partial(jax.jit, static_argnums=0)
def data_ggn_diag(obj: Objective, params, task: Task) -> jax.Array:
  """|G| 1 for the GGN (formed once, then only its d row sums are kept)."""
  return row_sums(data_ggn(obj, params, task))


@functools.partial(jax.jit, static_argnums=0)
def data_hessian_diag(obj: Objective, params, task: Task) -> jax.Array:
  """|H| 1 for the exact Hessian (formed once, then only its d row sums are kept)."""
  return row_sums(data_hessian(obj, params, task))


def curvature(kind: str, obj: Objective, params, task: Task) -> jax.Array | None:
  """The stored curvature of one task for `kind` (None for kinds that store none)."""
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
  """v -> C v for the data term's Hessian (or GGN) at params, on flat vectors."""
  flat, unravel = ravel_pytree(params)
  if not gauss_newton:
    f = lambda v: continual.data_loss(obj, unravel(v), task)
    return lambda v: jax.jvp(jax.grad(f), (flat,), (v,))[1]
  out_fn = lambda v: obj.apply_fn(unravel(v), task.x).reshape(task.x.shape[0], -1)
  weights = task.w / jnp.maximum(jnp.sum(task.w), 1e-30)

  def ggn_vp(v):
    out, jv = jax.jvp(out_fn, (flat,), (v,))
    hjv = jnp.einsum("nce,ne->nc", _output_hessian(obj, out), jv) * weights[:, None]
    return jax.vjp(out_fn, flat)[1](hjv)[0]

  return ggn_vp


def cg_solve(matvec: Callable[[jax.Array], jax.Array], b: jax.Array, damping: float,
             maxiter: int = 200, tol: float = 1e-10) -> jax.Array:
  """Solves (C + damping I) x = b by conjugate gradients (C symmetric PSD, matrix-free)."""
  x, _ = jax.scipy.sparse.linalg.cg(lambda v: matvec(v) + damping * v, b, tol=tol,
                                    atol=0.0, maxiter=maxiter)
  return x


def lissa_solve(matvec: Callable[[jax.Array], jax.Array], b: jax.Array, damping: float,
                scale: float, depth: int = 500) -> jax.Array:
  """LiSSA: (C + damping I)^{-1} b ~= (1/s) sum_{i<depth} (I - (C + damping I)/s)^i b.

  The recursion v_0 = b, v_{i+1} = b + v_i - (C + damping I) v_i / s converges to
  s (C + damping I)^{-1} b when s > lambda_max(C) + damping (geometric rate
  1 - damping / s). Deterministic here (the full data term each step).
  """
  def body(_, v):
    return b + v - (matvec(v) + damping * v) / scale
  return jax.lax.fori_loop(0, depth, body, b) / scale


def power_iteration(matvec: Callable[[jax.Array], jax.Array], dim: int, key: jax.Array,
                    iters: int = 30, dtype=jnp.float32) -> jax.Array:
  """An estimate (from below) of the largest eigenvalue of a symmetric PSD operator."""
  v = jax.random.normal(key, (dim,), dtype)
  def body(_, v):
    w = matvec(v)
    return w / jnp.maximum(jnp.linalg.norm(w), 1e-30)
  v = jax.lax.fori_loop(0, iters, body, v / jnp.linalg.norm(v))
  return v @ matvec(v)


@functools.partial(jax.jit, static_argnums=0)
def damped_inverse(obj: Objective, matrix: jax.Array) -> jax.Array:
  """S = (C + (lam + mu) I)^{-1}, by Cholesky (C PSD, so the system is well conditioned:
  kappa <= (lambda_max(C) + lam + mu) / (lam + mu)). Stored once per task, so a request
  costs one matrix-vector product per Newton step (a triangular solve per step is
  ~40x slower on XLA:CPU at d = 2410)."""
  eye = jnp.eye(matrix.shape[0], dtype=matrix.dtype)
  factor = jnp.linalg.cholesky(matrix + obj.strong_convexity * eye)
  return jax.scipy.linalg.cho_solve((factor, True), eye)


def undamped(obj: Objective, inverse: jax.Array) -> jax.Array:
  """C from its stored S = (C + (lam + mu) I)^{-1}."""
  eye = jnp.eye(inverse.shape[0], dtype=inverse.dtype)
  return jnp.linalg.inv(inverse) - obj.strong_convexity * eye


@jax.jit
def newton_dense(params, grad, inverse):
  """theta - (C + (lam + mu) I)^{-1} g, from the stored inverse S."""
  flat, unravel = ravel_pytree(params)
  g, _ = ravel_pytree(grad)
  return unravel(flat - (inverse @ g.astype(inverse.dtype)).astype(flat.dtype))


@functools.partial(jax.jit, static_argnums=0)
def newton_diag(obj: Objective, params, grad, diagonal):
  """theta - g / (c + lam + mu) for a stored diagonal c."""
  flat, unravel = ravel_pytree(params)
  g, _ = ravel_pytree(grad)
  return unravel(flat - g / (jnp.maximum(diagonal, 0.0) + obj.strong_convexity))


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6))
def newton_matrix_free(obj: Objective, params, grad, task: Task, method: str,
                       maxiter: int, gauss_newton: bool, lissa_scale=None, at=None):
  """theta - (C + (lam + mu) I)^{-1} g with C v from Hessian-vector products on `task`.

  method: "cg" (conjugate gradients, tol 1e-10 relative, `maxiter` iterations at
  most) or "lissa" (`maxiter` Neumann terms with scale `lissa_scale`). C is taken
  at `at` (default: params).
  """
  flat, unravel = ravel_pytree(params)
  g, _ = ravel_pytree(grad)
  matvec = hvp(obj, params if at is None else at, task, gauss_newton=gauss_newton)
  if method == "cg":
    step = cg_solve(matvec, g, obj.strong_convexity, maxiter=maxiter)
  else:
    step = lissa_solve(matvec, g, obj.strong_convexity, lissa_scale, depth=maxiter)
  return unravel(flat - step)
