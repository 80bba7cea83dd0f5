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

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from methods.unlearning import certificate
from methods.unlearning import continual
from methods.unlearning import gradient
from methods.unlearning import hessian
from methods.unlearning.continual import CLState, Objective, Task

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
    lissa_depth: LiSSA Neumann terms ("lissa").
    seed: key for power iteration.
  """
  grad_steps: int = 10
  newton_steps: int = 1
  smoothness: str = "linear"
  cg_iters: int = 200
  lissa_depth: int = 500
  seed: int = 0


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
  """
  if len(plan) != len(tasks) or len(anchors) != len(tasks) + 1:
    raise ValueError(f"plan ({len(plan)}), tasks ({len(tasks)}) and anchors "
                     f"({len(anchors)}) must have T, T and T + 1 entries")
  curv = tuple(store_curvature(kind, obj, hessian.curvature(kind, obj, anchors[t + 1], tasks[t]))
               for t, kind in enumerate(plan))
  return CLState(anchors=tuple(anchors), curvature=curv)


def store_curvature(kind: str, obj: Objective, value):
  """What is kept for a computed curvature: (C + (lam + mu) I)^{-1} for dense kinds."""
  if kind in ("full", "ggn"):
    return hessian.damped_inverse(obj, value)
  return value


def _smoothness(obj, params, task, config: UnlearnConfig, t: int) -> float:
  if config.smoothness == "linear":
    return gradient.linear_smoothness(obj, task)
  return gradient.estimated_smoothness(obj, params, task,
                                       jax.random.fold_in(jax.random.PRNGKey(config.seed), t))


def stage_update(kind: str, obj: Objective, start, anchor, task: Task, stored,
                 config: UnlearnConfig, t: int):
  """One stage's correction from `start` (= theta_t) for L(. ; anchor, task).

  Curvature kinds take `config.newton_steps` steps theta <- theta - (C + m I)^{-1}
  grad L(theta), C fixed at theta_t; "gradient" takes `config.grad_steps` GD steps.

  Returns:
    (params, the a priori distance bound of the gradient stage, or inf).
  """
  if kind == "gradient":
    return _gradient_stage(obj, start, anchor, task, config, t)
  scale = _smoothness(obj, start, task, config, t) if kind == "lissa" else None
  params = start
  for _ in range(config.newton_steps):
    grad = continual.stage_grad(obj, params, anchor, task)
    if kind in ("full", "ggn"):
      params = hessian.newton_dense(params, grad, stored)
    elif kind in ("diag", "diag_ggn"):
      params = hessian.newton_diag(obj, params, grad, stored)
    elif kind in ("cg", "cg_ggn"):
      params = hessian.newton_matrix_free(obj, params, grad, task, "cg", config.cg_iters,
                                          kind == "cg_ggn", None, start)
    elif kind == "lissa":
      params = hessian.newton_matrix_free(obj, params, grad, task, "lissa",
                                          config.lissa_depth, False, scale, start)
    else:
      raise ValueError(f"unknown stage kind {kind!r}")
  return params, float("inf")


def _gradient_stage(obj, start, anchor, task, config, t):
  """K gradient steps with eta = 1 / M and the a priori bound (1 - m/M)^K ||g_0|| / m."""
  grad_norm = float(continual.stage_grad_norm(obj, start, anchor, task))
  m = obj.strong_convexity
  smooth = _smoothness(obj, start, task, config, t)
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
            config: UnlearnConfig = UnlearnConfig()) -> Unlearned:
  """Approximates retraining tasks k..T on the retained data (0-based k).

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

  Returns:
    `Unlearned(params, residuals, stage_bounds, bound)`.
  """
  num = len(tasks)
  if not 0 <= k < num:
    raise ValueError(f"task index k={k} out of range [0, {num})")
  anchors = state.anchors
  prev = anchors[k]
  residuals, bounds, b = [], [], 0.0
  for j in range(k, num):
    task = tasks[j]
    if continual.total_weight(task) == 0:
      current, r, prior = prev, 0.0, 0.0   # the task is skipped, exactly
    else:
      stored = state.curvature[j]
      if j == k and stored is not None:
        if removed is None:
          raise ValueError("removing part of a task with stored curvature needs `removed`")
        stored = _removed_curvature(plan[j], obj, anchors[j + 1], stored, task, removed)
      current, prior = stage_update(plan[j], obj, anchors[j + 1], prev, task, stored,
                                    config, j)
      r = float(continual.stage_grad_norm(obj, current, prev, task))
    stage = min(r / obj.strong_convexity, prior)
    b = stage + obj.lam / obj.strong_convexity * b
    residuals.append(r)
    bounds.append(stage)
    prev = current
  return Unlearned(params=prev, residuals=tuple(residuals), stage_bounds=tuple(bounds),
                   bound=float(b))
