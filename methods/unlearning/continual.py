"""The continual-learning objective and the per-task state that unlearning keeps.

Tasks D_1..D_T arrive in sequence. Task t is fitted by minimising the stage objective

    L_t(theta; a, D) = (1 / W) sum_i w_i l(theta; x_i, y_i)
                       + (lam / 2) ||theta - a||^2 + (mu / 2) ||theta||^2,      (1)

    theta_t = argmin_theta L_t(theta; theta_{t-1}, D_t),   theta_0 = the initialisation,

where W = sum_i w_i. The example weights w_i in {0, 1} mark which examples are kept, so
a request to forget examples only zeroes weights and every array keeps its shape (no
recompilation). A task whose weights are all zero is skipped: its stage leaves the
parameters where they were. The anchor term (lam) is the L2 pull toward the previous
task's weights; the ridge term (mu) makes (1) (lam + mu)-strongly convex whenever the
data term is convex (linear softmax or least-squares models).

The retraining target after a request is the same recursion run on the retained data:
theta'_j = theta_j for j < k, and theta'_j = argmin L_j(theta; theta'_{j-1}, D'_j) for
j >= k. Every unlearning method in this package approximates theta'_T starting from the
stored state `CLState` (the per-task checkpoints theta_0..theta_T and, for Hessian-based
methods, a curvature summary per task).

Reference: "Certified unlearning in continual learning", ICML 2026 (abstract 5 of
papers/icml2026-abstracts.txt): the CL objective, the per-task state, and the
decomposition of post-unlearning excess risk into CL excess risk plus unlearning loss.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

LOSSES = ("softmax_ce", "squared")


class Objective(NamedTuple):
  """The stage objective (1). Hashable, so it is a static argument of jitted functions.

  Attributes:
    apply_fn: (params, x (n, p)) -> outputs: logits (n, C) for "softmax_ce", or
      predictions (n,) / (n, 1) for "squared".
    loss: "softmax_ce" (multinomial logistic) or "squared" (0.5 (f - y)^2, ridge).
    lam: strength of the pull toward the previous task's weights (> 0).
    mu: ridge strength (>= 0).
  """
  apply_fn: Callable[[Any, jax.Array], jax.Array]
  loss: str
  lam: float
  mu: float

  @property
  def strong_convexity(self) -> float:
    """lam + mu: the strong-convexity constant of (1) when the data term is convex."""
    return float(self.lam) + float(self.mu)


class Task(NamedTuple):
  """One task's examples; w marks which are kept (1) or forgotten / padding (0)."""
  x: jax.Array  # (n, p)
  y: jax.Array  # (n,) int labels or float targets
  w: jax.Array  # (n,) weights in {0, 1}


class CLState(NamedTuple):
  """What is kept after training on tasks 1..T.

  Attributes:
    anchors: (theta_0, ..., theta_T), the parameter pytree after each task
      (anchors[0] is the initialisation, anchors[-1] the deployed model).
    curvature: one entry per task: a (d, d) matrix ((C_t + (lam + mu) I)^{-1},
      C_t the full Hessian or Gauss-Newton matrix of the task's
      data term at theta_t), a (d,) diagonal majorizer, or None (nothing stored:
      gradient-based or Hessian-vector-product stages).
  """
  anchors: tuple
  curvature: tuple


def make_task(x, y, w=None) -> Task:
  """A Task with all weights 1 unless given; checks the shapes agree."""
  x, y = jnp.asarray(x), jnp.asarray(y)
  w = jnp.ones((x.shape[0],), x.dtype) if w is None else jnp.asarray(w, x.dtype)
  if x.ndim != 2 or y.shape[:1] != x.shape[:1] or w.shape != x.shape[:1]:
    raise ValueError(f"task shapes x {x.shape}, y {y.shape}, w {w.shape}: expected "
                     "x (n, p), y (n,) and w (n,)")
  return Task(x, y, w)


def pad(task: Task, n: int) -> Task:
  """The task padded with weight-0 rows to n examples (equal shapes: one compilation)."""
  extra = n - task.x.shape[0]
  if extra < 0:
    raise ValueError(f"cannot pad a task of {task.x.shape[0]} examples to {n}")
  return Task(jnp.pad(task.x, ((0, extra), (0, 0))), jnp.pad(task.y, (0, extra)),
              jnp.pad(task.w, (0, extra)))


def forget(task: Task, mask) -> Task:
  """The task with the examples where mask is True removed (their weights set to 0)."""
  mask = jnp.asarray(mask, bool)
  if mask.shape != task.w.shape:
    raise ValueError(f"forget mask shape {mask.shape} != task weights shape {task.w.shape}")
  return task._replace(w=jnp.where(mask, 0.0, task.w).astype(task.w.dtype))


def only(task: Task, mask) -> Task:
  """The sub-task of the examples where mask is True (the others get weight 0)."""
  mask = jnp.asarray(mask, bool)
  return task._replace(w=jnp.where(mask, task.w, 0.0).astype(task.w.dtype))


def total_weight(task: Task) -> float:
  return float(jnp.sum(task.w))


def per_example_loss(obj: Objective, params, x: jax.Array, y: jax.Array) -> jax.Array:
  """l(theta; x_i, y_i) for every row: softmax cross-entropy or 0.5 (f - y)^2. Shape (n,)."""
  out = obj.apply_fn(params, x)
  if obj.loss == "softmax_ce":
    return optax.softmax_cross_entropy_with_integer_labels(out, y)
  if obj.loss == "squared":
    return 0.5 * (out.reshape(y.shape) - y) ** 2
  raise ValueError(f"unknown loss {obj.loss!r}; expected one of {LOSSES}")


def data_loss(obj: Objective, params, task: Task) -> jax.Array:
  """(1 / W) sum_i w_i l(theta; x_i, y_i) (0 when W = 0)."""
  losses = per_example_loss(obj, params, task.x, task.y)
  total = jnp.sum(task.w)
  return jnp.sum(task.w * losses) / jnp.where(total > 0, total, 1.0)


def stage_loss(obj: Objective, params, anchor, task: Task) -> jax.Array:
  """L_t(theta; a, D) of equation (1)."""
  diff = jax.tree.map(lambda p, a: p - a, params, anchor)
  return (data_loss(obj, params, task) + 0.5 * obj.lam * optax.tree.norm(diff, squared=True)
          + 0.5 * obj.mu * optax.tree.norm(params, squared=True))


@functools.partial(jax.jit, static_argnums=0)
def stage_grad(obj: Objective, params, anchor, task: Task):
  """grad_theta L_t(theta; a, D), a pytree like params."""
  return jax.grad(stage_loss, argnums=1)(obj, params, anchor, task)


@functools.partial(jax.jit, static_argnums=0)
def stage_grad_norm(obj: Objective, params, anchor, task: Task) -> jax.Array:
  """||grad_theta L_t(theta; a, D)||_2, the residual gradient norm of a stage."""
  return optax.tree.norm(stage_grad(obj, params, anchor, task))


@functools.partial(jax.jit, static_argnums=(0, 4))
def _newton_direction(obj: Objective, params, anchor, task: Task, gauss_newton: bool):
  """(L, ||grad||, grad . direction, direction as a pytree) at params."""
  flat, unravel = ravel_pytree(params)
  f = lambda v: stage_loss(obj, unravel(v), anchor, task)
  value, grad = jax.value_and_grad(f)(flat)
  if gauss_newton:
    from methods.unlearning import hessian  # pylint: disable=import-outside-toplevel
    hess = hessian.data_ggn(obj, params, task) + obj.strong_convexity * jnp.eye(
        flat.size, dtype=flat.dtype)
  else:
    hess = jax.hessian(f)(flat)
  direction = jnp.linalg.solve(hess, grad)
  return value, jnp.linalg.norm(grad), grad @ direction, unravel(direction)


@functools.partial(jax.jit, static_argnums=0)
def _trial_step(obj: Objective, params, direction, step, anchor, task: Task):
  """(params - step * direction, its stage loss)."""
  candidate = jax.tree.map(lambda p, d: p - step * d, params, direction)
  return candidate, stage_loss(obj, candidate, anchor, task)


def fit_stage_newton(obj: Objective, anchor, task: Task, init=None, *, max_iters: int = 50,
                     tol: float = 1e-9, gauss_newton: bool = False):
  """theta = argmin L_t(theta; anchor, task) by damped Newton with Armijo backtracking.

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
      `functools.partial(fit_stage_newton, obj)`, or an SGD/Adam run of the shared loop).
    init: theta_0.
    tasks: D_1..D_T.
  """
  anchors = [init]
  for task in tasks:
    anchors.append(anchor_if_empty(fit_stage, anchors[-1], task))
  return tuple(anchors)


def anchor_if_empty(fit_stage, anchor, task: Task):
  """fit_stage(anchor, task), or anchor itself when the task has no kept examples."""
  return anchor if total_weight(task) == 0 else fit_stage(anchor, task)


def num_params(params) -> int:
  return int(sum(np.size(x) for x in jax.tree.leaves(params)))
