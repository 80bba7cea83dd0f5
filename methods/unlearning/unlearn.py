"""Unlearning through the task sequence: correct the forgotten task's stage, then
propagate the change through every later stage, one update rule per stage (a plan).

Request: forget examples of task k (all of them, or a subset). With theta_hat_{k-1} =
theta_{k-1} (earlier tasks are untouched):

  stage k:  all of task k forgotten -> theta_hat_k = theta_{k-1} (the task is skipped,
            exactly as retraining skips it); a subset forgotten -> one update of the
            stage's kind on L_k(. ; theta_{k-1}, D'_k) from theta_k, where a stored
            curvature C_k is first corrected for the removed examples,
            C'_k = (W C_k - W_f C_f) / (W - W_f);
  stage j > k: g_j = grad L_j(theta_j; theta_hat_{j-1}, D_j) (the anchor moved), and
            theta_hat_j = Newton / CG / LiSSA / K gradient steps from theta_j.

Then r_j = ||grad L_j(theta_hat_j; theta_hat_{j-1}, D'_j)|| feeds the propagated bound
(2) of `certificate`, and theta_hat_T is released with Gaussian noise.

With stored Hessians the propagation is Delta_j = lam (H_j + (lam + mu) I)^{-1}
Delta_{j-1} to first order (Delta = theta_hat - theta), exact for quadratic losses,
which the tests check against retraining.

Reference: the ICML 2026 CL-unlearning paper (abstract 5): Hessian-based and
gradient-based certified unlearning adapted to the CL sequence, and the hybrid.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from methods.unlearning import certificate
from methods.unlearning import gradient
from methods.unlearning import hessian
from methods.unlearning.objective import (CLState, Objective, Task, stage_grad,
                                          stage_grad_norm, total_weight)

SMOOTHNESS = ("linear", "power")


class UnlearnConfig(NamedTuple):
  """Settings of the stage updates.

  Attributes:
    grad_steps: K, gradient steps per stage for "gradient" stages.
    newton_steps: Newton steps per stage for curvature stages; each recomputes the
      gradient at the current point and reuses the same (stored or matrix-free)
      curvature at theta_t (one data pass each, like one gradient step).
    smoothness: "linear" (the analytic bound for linear models, a certificate) or
      "power" (power-iteration estimate on the GGN, for the MLP).
    cg_iters: conjugate-gradient iterations at most ("cg", "cg_ggn").
    cg_tol: CG's relative residual tolerance ||r|| <= cg_tol ||g|| ("cg", "cg_ggn");
      None: `hessian.default_cg_tol` of the parameters' dtype (1e-10 in float64).
    lissa_depth: LiSSA Neumann terms ("lissa").

  The power iteration of "power" draws its start vectors from the explicit `key`
  argument of `unlearn`.
  """
  grad_steps: int = 10
  newton_steps: int = 1
  smoothness: str = "linear"
  cg_iters: int = 200
  lissa_depth: int = 500
  cg_tol: float | None = None


class Unlearned(NamedTuple):
  """theta_hat (before noise) and what certifies it.

  Attributes:
    params: theta_hat_T, the corrected parameters before the release noise.
    residuals: r_k..r_T, the residual gradient norms of the corrected stages.
    stage_bounds: the per-stage distance bounds (min of data-dependent and, for
      gradient stages, the a priori GD bound) used in (2).
    bound: B_T of (2).
  """
  params: object
  residuals: tuple
  stage_bounds: tuple
  bound: float


def build_state(obj: Objective, anchors: Sequence, tasks: Sequence[Task],
                plan: Sequence[str]) -> CLState:
  """CLState with the curvature each stored kind of the plan needs, at theta_t.

  Dense kinds ("full", "ggn") are stored as S_t = (C_t + (lam + mu) I)^{-1} (the same
  d^2 numbers as C_t), so a request costs matrix-vector products only;
  C_t = S_t^{-1} - (lam + mu) I is recovered when part of a task is removed.

  Args:
    obj: the stage objective (1).
    anchors: theta_0..theta_T from `continual.train_sequence`.
    tasks: D_1..D_T, as trained on.
    plan: one kind per task (`hybrid.uniform_plan`, `hybrid.hybrid_plan`, ...).

  Returns:
    The `CLState` to unlearn from.

  Example:
    >>> state = build_state(obj, anchors, tasks, uniform_plan("full", len(tasks)))
  """
  if len(plan) != len(tasks) or len(anchors) != len(tasks) + 1:
    raise ValueError(f"plan ({len(plan)}), tasks ({len(tasks)}) and anchors "
                     f"({len(anchors)}) must have T, T and T + 1 entries")
  curv = tuple(store_curvature(kind, obj, hessian.curvature(kind, obj, anchors[t + 1], tasks[t]))
               for t, kind in enumerate(plan))
  return CLState(anchors=tuple(anchors), curvature=curv)


def build_states(obj: Objective, anchors: Sequence, tasks: Sequence[Task],
                 plans: Mapping[str, Sequence[str]]) -> dict[str, CLState]:
  """`build_state` for several plans, computing each (kind, task) curvature once.

  A diagonal majorizer |C| 1 is taken from the dense C when another plan stores that
  C for the same task, instead of forming C again.

  Args:
    obj, anchors, tasks: as `build_state`.
    plans: method name -> plan.

  Returns:
    method name -> its `CLState` (the checkpoints are shared).

  Example:
    >>> states = build_states(obj, anchors, tasks, {"hessian": uniform_plan("full", T),
    ...                                             "hybrid": hybrid_plan(T, 2)})
  """
  cache, states = {}, {}
  for method, plan in plans.items():
    curv = []
    for t, kind in enumerate(plan):
      dense = ("full", "ggn")[kind == "diag_ggn"]
      if (kind, t) not in cache:
        if kind in ("diag", "diag_ggn") and (dense, t) in cache:
          cache[kind, t] = hessian.row_sums(cache[dense, t])
        else:
          cache[kind, t] = hessian.curvature(kind, obj, anchors[t + 1], tasks[t])
      curv.append(store_curvature(kind, obj, cache[kind, t]))
    states[method] = CLState(anchors=tuple(anchors), curvature=tuple(curv))
  return states


def store_curvature(kind: str, obj: Objective, value):
  """What is kept for a computed curvature C: S = (C + (lam + mu) I)^{-1} for dense kinds,
  C itself otherwise.

  Args:
    kind: the stage kind.
    obj: the objective (its lam + mu).
    value: C from `hessian.curvature`, or None.

  Returns:
    What `CLState.curvature` holds for the task.

  Example:
    >>> store_curvature("full", obj, hessian.data_hessian(obj, theta, task))   # S
  """
  if kind in ("full", "ggn"):
    return hessian.damped_inverse(obj, value)
  return value


def _smoothness(obj, params, task, config: UnlearnConfig, key, t: int) -> float:
  if config.smoothness == "linear":
    return gradient.linear_smoothness(obj, task)
  if key is None:
    raise ValueError('smoothness="power" estimates by power iteration: pass an explicit key')
  return gradient.estimated_smoothness(obj, params, task, jax.random.fold_in(key, t))


def stage_update(kind: str, obj: Objective, start, anchor, task: Task, stored,
                 config: UnlearnConfig, t: int, key: jax.Array | None = None):
  """One stage's correction from `start` (= theta_t) for L(. ; anchor, task).

  Curvature kinds take `config.newton_steps` steps theta <- theta - (C + m I)^{-1}
  grad L(theta), C fixed at theta_t; "gradient" takes `config.grad_steps` GD steps
  with eta = 1 / M.

  Args:
    kind: the stage's kind (`hybrid.KINDS`).
    obj: the objective.
    start: theta_t, the stored checkpoint.
    anchor: theta_hat_{t-1}, the corrected previous stage.
    task: the stage's retained data.
    stored: the stage's stored curvature (`CLState.curvature[t]`), or None.
    config: `UnlearnConfig`.
    t: the stage's index (folded into `key`).
    key: PRNG key for power-iteration smoothness (`config.smoothness == "power"`).

  Returns:
    (params, the a priori distance bound of the gradient stage, or inf).

  Example:
    >>> theta, prior = stage_update("full", obj, anchors[2], theta_hat_1, tasks[1],
    ...                             state.curvature[1], UnlearnConfig(), 1)
  """
  if kind == "gradient":
    return _gradient_stage(obj, start, anchor, task, config, key, t)
  if kind in hessian.MATRIX_FREE:
    lissa = kind == "lissa"
    scale = _smoothness(obj, start, task, config, key, t) if lissa else None
    params = hessian.newton_matrix_free(
        obj, start, anchor, task, config.newton_steps, "lissa" if lissa else "cg",
        config.lissa_depth if lissa else config.cg_iters, kind == "cg_ggn", scale,
        config.cg_tol)
    return params, float("inf")
  params = start
  for _ in range(config.newton_steps):
    grad = stage_grad(obj, params, anchor, task)
    if kind in ("full", "ggn"):
      params = hessian.newton_dense(params, grad, stored)
    elif kind in ("diag", "diag_ggn"):
      params = hessian.newton_diag(obj, params, grad, stored)
    else:
      raise ValueError(f"unknown stage kind {kind!r}")
  return params, float("inf")


def _gradient_stage(obj, start, anchor, task, config, key, t):
  """K gradient steps with eta = 1 / M and the a priori bound (1 - m/M)^K ||g_0|| / m."""
  grad_norm = float(stage_grad_norm(obj, start, anchor, task))
  m = obj.strong_convexity
  smooth = _smoothness(obj, start, task, config, key, t)
  out = gradient.gradient_descent(obj, start, anchor, task, config.grad_steps, 1.0 / smooth)
  prior = certificate.gd_distance_bound(grad_norm, m, smooth, config.grad_steps)
  return out, (prior if config.smoothness == "linear" else float("inf"))


def _removed_curvature(kind, obj, params, stored, retained: Task, removed: Task):
  """The stored curvature of the retained data: C' = (W C - W_f C_f) / (W - W_f), with
  W = W_r + W_f (dense kinds: C from the stored inverse, and C' inverted again)."""
  if stored is None:
    return None
  w_r, w_f = jnp.sum(retained.w), jnp.sum(removed.w)
  c_f = hessian.curvature(kind, obj, params, removed)
  dense = kind in ("full", "ggn")
  c = hessian.undamped(obj, stored) if dense else stored
  adjusted = ((w_r + w_f) * c - w_f * c_f) / w_r
  return hessian.damped_inverse(obj, adjusted) if dense else adjusted


def unlearn(obj: Objective, state: CLState, tasks: Sequence[Task], k: int,
            plan: Sequence[str], removed: Task | None = None,
            config: UnlearnConfig = UnlearnConfig(),
            key: jax.Array | None = None) -> Unlearned:
  """Approximates retraining tasks k..T on the retained data (0-based k).

      theta_hat_{k-1} = theta_{k-1};  theta_hat_j = stage_update(theta_j; theta_hat_{j-1},
      D'_j) for j = k..T;  B_j = min(r_j / m, prior_j) + (lam / m) B_{j-1}       (2)

  Args:
    obj: the stage objective (1).
    state: the stored `CLState` (checkpoints + the curvature the plan's kinds need,
      as built by `build_state`).
    tasks: the retained data of every task (the request already applied: forgotten
      examples have weight 0).
    k: index of the task holding the forgotten examples.
    plan: one kind per task (`hybrid.uniform_plan` / `hybrid.hybrid_plan`).
    removed: the forgotten examples of task k as a Task (needed only when task k
      keeps some examples and its kind stores curvature).
    config: `UnlearnConfig`.
    key: PRNG key of the power iteration; required when `config.smoothness` is
      "power" and the plan has "gradient" or "lissa" stages, unused otherwise.

  Returns:
    `Unlearned(params, residuals, stage_bounds, bound)`.

  Example:
    >>> retained = forget_task(tasks, k)
    >>> out = unlearn(obj, state, retained, k, plan, config=UnlearnConfig(newton_steps=5))
    >>> cert = certificate.certify(out.bound, epsilon=0.5, delta=1e-5)
  """
  num = len(tasks)
  if not 0 <= k < num:
    raise ValueError(f"task index k={k} out of range [0, {num})")
  anchors = state.anchors
  prev = anchors[k]
  residuals, bounds, b = [], [], 0.0
  for j in range(k, num):
    task = tasks[j]
    if total_weight(task) == 0:
      current, r, prior = prev, 0.0, 0.0   # the task is skipped, exactly
    else:
      stored = state.curvature[j]
      if j == k and stored is not None:
        if removed is None:
          raise ValueError("removing part of a task with stored curvature needs `removed`")
        stored = _removed_curvature(plan[j], obj, anchors[j + 1], stored, task, removed)
      current, prior = stage_update(plan[j], obj, anchors[j + 1], prev, task, stored,
                                    config, j, key)
      r = float(stage_grad_norm(obj, current, prev, task))
    stage = min(r / obj.strong_convexity, prior)
    b = stage + obj.lam / obj.strong_convexity * b
    residuals.append(r)
    bounds.append(stage)
    prev = current
  return Unlearned(params=prev, residuals=tuple(residuals), stage_bounds=tuple(bounds),
                   bound=float(b))
