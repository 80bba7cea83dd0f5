"""Gradient-based removal: a few gradient steps on the retained stage objective.

The near-zero-storage correction (descent-to-delete, Neel et al. ALT 2021; noisy
fine-tuning): starting from the stored theta_t, take K steps of gradient descent

    theta <- theta - eta grad L_t(theta; a', D'_t),   eta = 1 / M,          (GD)

on the stage objective (1) with the retained data D'_t and the already-corrected
anchor a'. Nothing but the parameter checkpoints is stored; curvature enters only
through the step size. With L_t m-strongly convex and M-smooth (m = lam + mu),
K steps contract the distance to the stage minimiser by (1 - m / M)^K, which gives
the a priori bound in `certificate.gd_distance_bound`.

Smoothness M: for a linear softmax model with bias, grad^2_z l <= I / 2 and the
data Hessian is a mean of (grad^2_z l) (x) (x~ x~^T), x~ = (x, 1), so
M <= max_i ||x~_i||^2 / 2 + lam + mu (`linear_smoothness`; ||x~||^2 for least
squares). For other models it is estimated by power iteration on the Gauss-Newton
matrix (`estimated_smoothness`), which makes the step a heuristic.

Reference: the ICML 2026 CL-unlearning paper (abstract 5): the gradient-based method
is less effective than the Hessian-based one at reducing unlearning loss, but needs
almost no storage.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from methods.unlearning import hessian
from methods.unlearning.objective import Objective, Task, stage_grad


@functools.partial(jax.jit, static_argnums=(0, 4))
def gradient_descent(obj: Objective, params, anchor, task: Task, steps: int, step_size):
  """K = `steps` iterations of (GD): theta <- theta - eta grad L_t(theta; anchor, task).

  Args:
    obj: the objective (1).
    params: the start theta_0 (a pytree).
    anchor: a, the (corrected) previous task's parameters.
    task: the retained data of the stage.
    steps: K (static).
    step_size: eta, e.g. 1 / M from `linear_smoothness`.

  Returns:
    The parameters after K steps.

  Example:
    >>> m_smooth = linear_smoothness(obj, task)
    >>> theta = gradient_descent(obj, theta_t, anchor, task, 5, 1.0 / m_smooth)
  """
  def body(_, p):
    return optax.tree.add_scale(p, -step_size, stage_grad(obj, p, anchor, task))
  return jax.lax.fori_loop(0, steps, body, params)


def linear_smoothness(obj: Objective, task: Task) -> float:
  """M = c max_i ||x~_i||^2 + lam + mu, x~ = (x, 1), c = 1/2 (softmax) or 1 (squared).

  An upper bound on the stage Hessian for a linear model with bias (see the module
  doc); rows with weight 0 are ignored.

  Args:
    obj: the objective (its loss, lam and mu).
    task: the stage's data.

  Returns:
    M as a float.

  Example:
    >>> linear_smoothness(obj, task)   # e.g. 33.1 for 8x8 digits, lam + mu = 1.1
  """
  sq = jnp.sum(task.x.astype(jnp.float64 if task.x.dtype == jnp.float64 else jnp.float32) ** 2,
               axis=1) + 1.0
  sq = jnp.where(task.w > 0, sq, 0.0)
  factor = 0.5 if obj.loss == "softmax_ce" else 1.0
  return float(factor * jnp.max(sq)) + obj.strong_convexity


def estimated_smoothness(obj: Objective, params, task: Task, key: jax.Array,
                         iters: int = 30, margin: float = 1.2) -> float:
  """M ~= margin * lambda_max(G) + lam + mu, lambda_max by power iteration on the GGN.

  A heuristic (power iteration estimates from below) for models without an analytic
  bound, such as an MLP.

  Args:
    obj: the objective.
    params: where the GGN is taken.
    task: the stage's data.
    key: the PRNG key of the power iteration's start vector.
    iters: power steps.
    margin: the safety factor on the estimate.

  Returns:
    M as a float.

  Example:
    >>> estimated_smoothness(obj, theta, task, jax.random.PRNGKey(0))
  """
  top = _power_ggn(obj, params, task, key, iters)
  return margin * float(top) + obj.strong_convexity


@functools.partial(jax.jit, static_argnums=(0, 4))
def _power_ggn(obj, params, task, key, iters):
  flat, _ = ravel_pytree(params)
  return hessian.power_iteration(hessian.hvp(obj, params, task, gauss_newton=True),
                                 flat.size, key, iters, flat.dtype)
