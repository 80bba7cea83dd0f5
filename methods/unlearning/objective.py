"""The stage objective, its data, and the state that unlearning keeps.

Tasks D_1..D_T arrive in sequence. Task t is fitted by minimising the stage objective

    L_t(theta; a, D) = (1 / W) sum_i w_i l(theta; x_i, y_i)
                       + (lam / 2) ||theta - a||^2 + (mu / 2) ||theta||^2,      (1)

where W = sum_i w_i and a = theta_{t-1} is the anchor. The example weights w_i in
{0, 1} mark which examples are kept, so a request to forget examples only zeroes
weights and every array keeps its shape (no recompilation). The ridge term (mu) makes
(1) (lam + mu)-strongly convex whenever the data term is convex (linear softmax or
least-squares models). With lam = 0, (1) is the plain ridge-regularised empirical risk
of one model (see `single.py`).

These types and functions are shared by the training (`continual.py`), the curvature
(`hessian.py`) and the unlearning (`unlearn.py`) modules; they import nothing else of
the package, so the modules that use them do not import each other in a cycle.

Reference: "Certified unlearning in continual learning", ICML 2026 (abstract 5 of
papers/icml2026-abstracts.txt).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

LOSSES = ("softmax_ce", "squared")


class Objective(NamedTuple):
  """The stage objective (1). Hashable, so it is a static argument of jitted functions.

  Attributes:
    apply_fn: (params, x (n, p)) -> outputs: logits (n, C) for "softmax_ce", or
      predictions (n,) / (n, 1) for "squared".
    loss: "softmax_ce" (multinomial logistic) or "squared" (0.5 (f - y)^2, ridge).
    lam: strength of the pull toward the previous task's weights (>= 0; 0 for a
      single model trained once).
    mu: ridge strength (>= 0; lam + mu > 0 for the certificate).

  Example:
    >>> obj = Objective(MLP((10,)).apply, "softmax_ce", lam=1.0, mu=0.1)
    >>> obj.strong_convexity
    1.1
  """
  apply_fn: Callable[[Any, jax.Array], jax.Array]
  loss: str
  lam: float
  mu: float

  @property
  def strong_convexity(self) -> float:
    """m = lam + mu: the strong-convexity constant of (1) when the data term is convex."""
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
      gradient-based or Hessian-vector-product stages). Matrices and vectors are
      in `jax.flatten_util.ravel_pytree(params)` order.
  """
  anchors: tuple
  curvature: tuple


def make_task(x, y, w=None) -> Task:
  """A Task with all weights 1 unless given; checks the shapes agree.

  Args:
    x: (n, p) inputs.
    y: (n,) integer labels (softmax_ce) or float targets (squared).
    w: (n,) weights in {0, 1}; default all 1, in x's dtype.

  Returns:
    `Task(x, y, w)` as JAX arrays.

  Example:
    >>> task = make_task(np.zeros((4, 3)), np.array([0, 1, 0, 1]))
    >>> task.w
    Array([1., 1., 1., 1.], dtype=float32)
  """
  x, y = jnp.asarray(x), jnp.asarray(y)
  w = jnp.ones((x.shape[0],), x.dtype) if w is None else jnp.asarray(w, x.dtype)
  if x.ndim != 2 or y.shape[:1] != x.shape[:1] or w.shape != x.shape[:1]:
    raise ValueError(f"task shapes x {x.shape}, y {y.shape}, w {w.shape}: expected "
                     "x (n, p), y (n,) and w (n,)")
  if x.shape[0] == 0:
    raise ValueError("make_task: x has 0 examples; expected n >= 1")
  for name, a in (("x", x), ("y", y), ("w", w)):
    if jnp.issubdtype(a.dtype, jnp.inexact) and not isinstance(a, jax.core.Tracer):
      bad = np.argwhere(~np.isfinite(np.asarray(a)))
      if len(bad):
        raise ValueError(f"make_task: {name} has a non-finite value at index "
                         f"{tuple(int(i) for i in bad[0])}; expected finite values")
  if not isinstance(w, jax.core.Tracer) and bool(jnp.any(w < 0)):
    raise ValueError(f"make_task: w has a negative weight at index {int(jnp.argmax(w < 0))}; "
                     "expected weights >= 0")
  return Task(x, y, w)


def pad(task: Task, n: int) -> Task:
  """The task padded with weight-0 rows to n examples (equal shapes: one compilation).

  Args:
    task: the task.
    n: the size to pad to (>= the task's size).

  Returns:
    The padded `Task` (zeros, weight 0, in the new rows).

  Example:
    >>> pad(make_task(np.ones((3, 2)), np.zeros(3)), 5).w   # [1, 1, 1, 0, 0]
  """
  extra = n - task.x.shape[0]
  if extra < 0:
    raise ValueError(f"cannot pad a task of {task.x.shape[0]} examples to {n}")
  return Task(jnp.pad(task.x, ((0, extra), (0, 0))), jnp.pad(task.y, (0, extra)),
              jnp.pad(task.w, (0, extra)))


def pad_tasks(parts: Sequence[tuple[Any, Any]]) -> list[Task]:
  """Tasks from (x, y) pairs, all padded with weight-0 rows to the largest one's size.

  Every task then has one shape, so every jitted stage function compiles once.

  Args:
    parts: (x (n_t, p), y (n_t,)) per task, with a common p and dtype.

  Returns:
    One `Task` per pair, each with max_t n_t rows (w = 1 on the real rows).

  Example:
    >>> a, b = pad_tasks([(np.ones((3, 2)), np.zeros(3)), (np.ones((5, 2)), np.ones(5))])
    >>> a.x.shape, float(a.w.sum())
    ((5, 2), 3.0)
  """
  n = max(len(y) for _, y in parts)
  return [pad(make_task(x, y), n) for x, y in parts]


def forget(task: Task, mask) -> Task:
  """D' = D without the examples where mask is True: w_i <- 0 there.

  Args:
    task: the task.
    mask: (n,) bools, True for the examples to forget.

  Returns:
    The task with those weights zeroed (same shapes).

  Example:
    >>> retained = forget(task, np.arange(n) < 10)   # forget the first 10 examples
  """
  mask = jnp.asarray(mask, bool)
  if mask.shape != task.w.shape:
    raise ValueError(f"forget mask shape {mask.shape} != task weights shape {task.w.shape}")
  return task._replace(w=jnp.where(mask, 0.0, task.w).astype(task.w.dtype))


def forget_task(tasks: Sequence[Task], k: int) -> list[Task]:
  """The tasks with every example of task k (0-based) forgotten: D'_k = {}.

  Args:
    tasks: D_1..D_T.
    k: the task to forget.

  Returns:
    A new list; task k has all weights 0, the others are the same objects.

  Example:
    >>> out = unlearn(obj, state, forget_task(tasks, 0), 0, plan)
  """
  return [forget(t, jnp.ones(t.w.shape, bool)) if j == k else t for j, t in enumerate(tasks)]


def only(task: Task, mask) -> Task:
  """D_F: the sub-task of the examples where mask is True (the others get weight 0).

  Args:
    task: the task.
    mask: (n,) bools.

  Returns:
    The task with weights kept only where mask is True.

  Example:
    >>> removed = only(task, mask)   # what `unlearn(..., removed=...)` takes
  """
  mask = jnp.asarray(mask, bool)
  return task._replace(w=jnp.where(mask, task.w, 0.0).astype(task.w.dtype))


def total_weight(task: Task) -> float:
  """W = sum_i w_i, the number of kept examples (a Python float).

  Example:
    >>> total_weight(make_task(np.ones((4, 2)), np.zeros(4)))
    4.0
  """
  return float(jnp.sum(task.w))


def per_example_loss(obj: Objective, params, x: jax.Array, y: jax.Array) -> jax.Array:
  """l(theta; x_i, y_i) for every row: softmax cross-entropy or 0.5 (f(x_i) - y_i)^2.

  Args:
    obj: the objective (its apply_fn and loss).
    params: theta.
    x: (n, p) inputs.
    y: (n,) labels or targets.

  Returns:
    (n,) losses, weights not applied.

  Example:
    >>> per_example_loss(obj, params, task.x, task.y)
  """
  out = obj.apply_fn(params, x)
  if obj.loss == "softmax_ce":
    return optax.softmax_cross_entropy_with_integer_labels(out, y)
  if obj.loss == "squared":
    return 0.5 * (out.reshape(y.shape) - y) ** 2
  raise ValueError(f"unknown loss {obj.loss!r}; expected one of {LOSSES}")


def data_loss(obj: Objective, params, task: Task) -> jax.Array:
  """D_t(theta) = (1 / W) sum_i w_i l(theta; x_i, y_i), the data term of (1) (0 when W = 0).

  Args:
    obj: the objective.
    params: theta.
    task: the examples and weights.

  Returns:
    A scalar.

  Example:
    >>> data_loss(obj, params, task)
  """
  losses = per_example_loss(obj, params, task.x, task.y)
  total = jnp.sum(task.w)
  return jnp.sum(task.w * losses) / jnp.where(total > 0, total, 1.0)


def stage_loss(obj: Objective, params, anchor, task: Task) -> jax.Array:
  """L_t(theta; a, D) of equation (1).

  Args:
    obj: the objective (its lam and mu).
    params: theta.
    anchor: a, the previous task's parameters.
    task: D, the task's data.

  Returns:
    A scalar.

  Example:
    >>> stage_loss(obj, params, anchor=params, task=task)   # the anchor term is 0
  """
  return (data_loss(obj, params, task)
          + 0.5 * obj.lam * optax.tree.norm(optax.tree.sub(params, anchor), squared=True)
          + 0.5 * obj.mu * optax.tree.norm(params, squared=True))


@functools.partial(jax.jit, static_argnums=0)
def stage_grad(obj: Objective, params, anchor, task: Task):
  """g = grad_theta L_t(theta; a, D): arguments as `stage_loss`, a pytree like params.

  Example:
    >>> g = stage_grad(obj, params, anchor, task)
  """
  return jax.grad(stage_loss, argnums=1)(obj, params, anchor, task)


@functools.partial(jax.jit, static_argnums=0)
def stage_grad_norm(obj: Objective, params, anchor, task: Task) -> jax.Array:
  """r = ||grad_theta L_t(theta; a, D)||_2, the residual gradient norm of a stage.

  Arguments as `stage_loss`; returns a scalar.

  Example:
    >>> r = stage_grad_norm(obj, theta_hat, anchor, retained_task)
  """
  return optax.tree.norm(stage_grad(obj, params, anchor, task))


def num_params(params) -> int:
  """d, the number of scalars in the parameter pytree.

  Example:
    >>> num_params({"w": np.zeros((3, 2)), "b": np.zeros(2)})
    8
  """
  return int(sum(np.size(x) for x in jax.tree.leaves(params)))
