"""Continual training on the stage objective (1), and the retraining target.

Tasks D_1..D_T arrive in sequence (the objective and its types are in `objective.py`):

    theta_t = argmin_theta L_t(theta; theta_{t-1}, D_t),   theta_0 = the initialisation.

A task whose weights are all zero is skipped: its stage leaves the parameters where
they were. The retraining target after a request is the same recursion run on the
retained data: theta'_j = theta_j for j < k, and theta'_j = argmin L_j(theta;
theta'_{j-1}, D'_j) for j >= k. Every unlearning method in this package approximates
theta'_T starting from the stored state `CLState` (the per-task checkpoints
theta_0..theta_T and, for Hessian-based methods, a curvature summary per task).

Here: `fit_stage_newton`, the direct (damped Newton) solver of one stage for convex
models, and `train_sequence`, the recursion itself for any stage solver (Newton, or an
Adam run of the shared loop: `loop.loop_stage_fitter`).

Reference: "Certified unlearning in continual learning", ICML 2026 (abstract 5 of
papers/icml2026-abstracts.txt): the CL objective, the per-task state, and the
decomposition of post-unlearning excess risk into CL excess risk plus unlearning loss.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from methods.unlearning import hessian
from methods.unlearning.objective import Objective, Task, stage_loss, total_weight


@functools.partial(jax.jit, static_argnums=(0, 4))
def _newton_direction(obj: Objective, params, anchor, task: Task, gauss_newton: bool):
  """(L, ||grad||, grad . direction, direction as a pytree) at params."""
  flat, unravel = ravel_pytree(params)
  f = lambda v: stage_loss(obj, unravel(v), anchor, task)
  value, grad = jax.value_and_grad(f)(flat)
  if gauss_newton:
    hess = hessian.data_ggn(obj, params, task) + obj.strong_convexity * jnp.eye(
        flat.size, dtype=flat.dtype)
  else:
    hess = jax.hessian(f)(flat)
  direction = jnp.linalg.solve(hess, grad)
  return value, jnp.linalg.norm(grad), grad @ direction, unravel(direction)


@functools.partial(jax.jit, static_argnums=0)
def _trial_step(obj: Objective, params, direction, step, anchor, task: Task):
  """(params - step * direction, its stage loss)."""
  candidate = optax.tree.add_scale(params, -step, direction)
  return candidate, stage_loss(obj, candidate, anchor, task)


def fit_stage_newton(obj: Objective, anchor, task: Task, init=None, *, max_iters: int = 50,
                     tol: float = 1e-9, gauss_newton: bool = False):
  """theta = argmin L_t(theta; anchor, task) by damped Newton with Armijo backtracking.

      theta <- theta - s (grad^2 L_t)^{-1} grad L_t,   s = 2^-i, the first i with
      L_t(new) <= L_t(theta) - 1e-4 s grad . direction.

  The direct solver for convex models (linear softmax / least squares), whose full
  Hessian fits in memory. Stops when ||grad|| <= tol. A task with all weights 0 is
  skipped (returns anchor), matching "the sequence without the forgotten data".

  Args:
    obj: the objective.
    anchor: theta_{t-1}, the previous task's parameters (also the default start).
    task: the task's data.
    init: starting point (default: anchor).
    max_iters: Newton iterations at most.
    tol: gradient-norm tolerance.
    gauss_newton: use the Gauss-Newton matrix in place of the Hessian: identical for
      models linear in their parameters (linear softmax, least squares), and faster
      to form (one Jacobian contraction instead of d Hessian-vector products).

  Returns:
    The minimiser's parameter pytree.

  Example:
    >>> theta_1 = fit_stage_newton(obj, theta_0, task, gauss_newton=True)
  """
  if total_weight(task) == 0:
    return anchor
  params = anchor if init is None else init
  for _ in range(max_iters):
    value, grad_norm, slope, direction = _newton_direction(obj, params, anchor, task,
                                                           gauss_newton)
    if float(grad_norm) <= tol:
      break
    value, slope, step = float(value), float(slope), 1.0
    for _ in range(30):
      candidate, new_value = _trial_step(obj, params, direction, step, anchor, task)
      if float(new_value) <= value - 1e-4 * step * slope:
        break
      step *= 0.5
    params = candidate
  return params


def train_sequence(fit_stage: Callable[[Any, Task], Any], init, tasks: Sequence[Task]) -> tuple:
  """(theta_0, ..., theta_T) with theta_t = fit_stage(theta_{t-1}, D_t), theta_0 = init.

  Args:
    fit_stage: (anchor, task) -> params, a solver of (1) (e.g.
      `functools.partial(fit_stage_newton, obj)`, or an Adam run of the shared loop,
      `loop.loop_stage_fitter`).
    init: theta_0.
    tasks: D_1..D_T.

  Returns:
    The checkpoints theta_0..theta_T, the `anchors` of a `CLState`.

  Example:
    >>> anchors = train_sequence(functools.partial(fit_stage_newton, obj), init, tasks)
  """
  anchors = [init]
  for task in tasks:
    anchors.append(anchor_if_empty(fit_stage, anchors[-1], task))
  return tuple(anchors)


def anchor_if_empty(fit_stage, anchor, task: Task):
  """theta_t = fit_stage(anchor, task), or anchor itself when the task has no kept examples.

  Args:
    fit_stage: (anchor, task) -> params.
    anchor: theta_{t-1}.
    task: D_t.

  Returns:
    theta_t.

  Example:
    >>> theta = anchor_if_empty(fit, theta_prev, forget(task, np.ones(n, bool)))  # theta_prev
  """
  return anchor if total_weight(task) == 0 else fit_stage(anchor, task)
