"""Evaluation of an unlearned model: distance to retraining, risk decomposition,
forgotten-task accuracy and a loss-threshold membership-inference AUC.

  unlearning loss (expected over the release noise)
      E ||theta~ - theta'||^2 = ||theta_hat - theta'||^2 + d sigma^2
  post-unlearning excess risk on the retained tasks, and its decomposition
      R(theta~) - R*  =  [R(theta') - R*]      (CL excess risk: sequential vs joint)
                       + [R(theta~) - R(theta')]  (the unlearning term)
      with R the mean data loss over the retained tasks and R* its (ridge-regularised)
      minimum over theta (the joint, non-sequential fit).
  loss-threshold MIA: score_i = -l(theta~; x_i, y_i); AUC = P(score_member >
      score_nonmember) + P(tie) / 2 (the Mann-Whitney statistic), members = the
      forgotten training examples, non-members = held-out examples of the same task.
      0.5 means the attack cannot tell them apart.

Reference: the ICML 2026 CL-unlearning paper (abstract 5): post-unlearning excess risk
= CL excess risk + unlearning loss.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn import metrics as sk_metrics

from methods.unlearning import continual
from methods.unlearning.objective import Objective, Task, data_loss, per_example_loss


def squared_distance(a, b) -> float:
  """||a - b||^2 over every leaf of two pytrees of the same structure.

  Args:
    a, b: parameter pytrees.

  Returns:
    The squared Euclidean distance (a Python float).

  Example:
    >>> squared_distance({"w": jnp.ones(4)}, {"w": jnp.zeros(4)})
    4.0
  """
  return float(optax.tree.norm(optax.tree.sub(a, b), squared=True))


def expected_unlearning_loss(theta_hat, theta_retrain, sigma: float) -> float:
  """E ||theta~ - theta'||^2 = ||theta_hat - theta'||^2 + d sigma^2 (exact over the noise).

  Args:
    theta_hat: the unlearned parameters before noise.
    theta_retrain: theta', the retrained parameters.
    sigma: the release noise scale.

  Returns:
    The expected unlearning loss.

  Example:
    >>> expected_unlearning_loss({"w": jnp.ones(4)}, {"w": jnp.zeros(4)}, 0.5)
    5.0
  """
  if not float(sigma) >= 0:
    raise ValueError(f"expected_unlearning_loss: sigma={sigma!r}; expected >= 0")
  d = sum(np.size(x) for x in jax.tree.leaves(theta_hat))
  return squared_distance(theta_hat, theta_retrain) + d * float(sigma) ** 2


def auc(member_scores, nonmember_scores) -> float:
  """AUC = P(member score > non-member score) + P(tie) / 2 (scikit-learn's roc_auc_score).

  Args:
    member_scores: (m,) scores of members.
    nonmember_scores: (n,) scores of non-members.

  Returns:
    The AUC in [0, 1]; 0.5 when the scores cannot tell the two apart.

  Example:
    >>> auc([2.0, 3.0], [1.0, 2.0])
    0.875
  """
  a = np.asarray(member_scores, np.float64)
  b = np.asarray(nonmember_scores, np.float64)
  for name, v in (("member_scores", a), ("nonmember_scores", b)):
    if v.ndim != 1 or v.size == 0:
      raise ValueError(f"auc: {name} has shape {v.shape}; expected a non-empty 1-D array")
    if not np.all(np.isfinite(v)):
      raise ValueError(f"auc: {name} has a non-finite score at index "
                       f"{int(np.argmin(np.isfinite(v)))}; expected finite scores")
  labels = np.concatenate([np.ones(a.size), np.zeros(b.size)])
  return float(sk_metrics.roc_auc_score(labels, np.concatenate([a, b])))


_per_example_loss = jax.jit(per_example_loss, static_argnums=0)
_data_loss = jax.jit(data_loss, static_argnums=0)


def mia_auc(obj: Objective, params, members: Task, nonmembers: Task) -> float:
  """Loss-threshold membership-inference AUC: score_i = -l(theta; x_i, y_i).

  Args:
    obj: the objective (its loss).
    params: the released parameters.
    members: the forgotten training examples (kept weights only).
    nonmembers: held-out examples of the same task.

  Returns:
    `auc(member scores, non-member scores)`.

  Example:
    >>> mia_auc(obj, theta_release, only(train[k], train[k].w > 0), test[k])
  """
  score = lambda t: -np.asarray(_per_example_loss(obj, params, t.x, t.y))[
      np.asarray(t.w) > 0]
  return auc(score(members), score(nonmembers))


@functools.partial(jax.jit, static_argnums=(0, 3))
def _accuracy(obj: Objective, params, task: Task, classes):
  logits = obj.apply_fn(params, task.x)
  if classes is not None:
    pred = jnp.asarray(classes)[jnp.argmax(logits[:, jnp.asarray(classes)], axis=-1)]
  else:
    pred = jnp.argmax(logits, axis=-1)
  return jnp.sum(task.w * (pred == task.y)) / jnp.maximum(jnp.sum(task.w), 1.0)


def accuracy(obj: Objective, params, task: Task, classes: tuple | None = None) -> float:
  """Weighted top-1 accuracy (1/W) sum_i w_i [argmax f(x_i) = y_i] of a softmax model.

  Args:
    obj: the objective (its apply_fn).
    params: the parameters.
    task: the examples (kept weights only).
    classes: if given, the argmax is over these classes only (task-incremental
      evaluation).

  Returns:
    The accuracy in [0, 1].

  Example:
    >>> accuracy(obj, theta, test[0], classes=(0, 1))
  """
  return float(_accuracy(obj, params, task, None if classes is None else tuple(classes)))


def joint_risk(obj: Objective, params, tasks) -> float:
  """R(theta) = (1 / W) sum_i w_i l(theta; x_i, y_i) over the examples of all `tasks`.

  Args:
    obj: the objective (its loss).
    params: theta.
    tasks: the tasks whose kept examples count.

  Returns:
    R (a Python float).

  Example:
    >>> joint_risk(obj, theta, [t for j, t in enumerate(tasks) if j != k])
  """
  return float(_data_loss(obj, params, concat(tasks)))


def joint_minimum(obj: Objective, tasks, init, *, tol: float = 1e-9,
                  max_iters: int = 50) -> float:
  """R* = R(theta*), theta* = argmin R(theta) + (mu / 2) ||theta||^2 (the joint fit).

  The non-sequential reference of the risk decomposition: all `tasks` fitted at once
  by Newton (Gauss-Newton, so for linear models), from zeros, without the anchor term.

  Args:
    obj: the objective (its mu; lam is dropped).
    tasks: the retained tasks.
    init: a parameter pytree of the right structure (its values are not used).
    tol, max_iters: the Newton solver's settings (`continual.fit_stage_newton`).

  Returns:
    R*.

  Example:
    >>> cl_excess = joint_risk(obj, target, kept) - joint_minimum(obj, kept, anchors[0])
  """
  joined = concat(tasks)
  theta = continual.fit_stage_newton(obj._replace(lam=0.0), jax.tree.map(jnp.zeros_like, init),
                                     joined, gauss_newton=True, tol=tol, max_iters=max_iters)
  return float(data_loss(obj, theta, joined))


def concat(tasks) -> Task:
  """D_1 u ... u D_T: one Task holding the examples of all `tasks` (weights kept).

  Example:
    >>> concat(tasks).x.shape   # (sum of the sizes, p)
  """
  return Task(*(jnp.concatenate(parts) for parts in zip(*tasks)))
