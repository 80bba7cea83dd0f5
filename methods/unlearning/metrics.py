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
from jax.flatten_util import ravel_pytree

from methods.unlearning import continual
from methods.unlearning.continual import Objective, Task


def squared_distance(a, b) -> float:
  return float(jnp.sum((ravel_pytree(a)[0] - ravel_pytree(b)[0]) ** 2))


def expected_unlearning_loss(theta_hat, theta_retrain, sigma: float) -> float:
  """||theta_hat - theta'||^2 + d sigma^2 (exact expectation over the Gaussian release)."""
  d = ravel_pytree(theta_hat)[0].size
  return squared_distance(theta_hat, theta_retrain) + d * float(sigma) ** 2


def auc(member_scores, nonmember_scores) -> float:
  """P(member score > non-member score) + ties / 2 (rank statistic, O((m + n) log))."""
  a = np.asarray(member_scores, np.float64)
  b = np.asarray(nonmember_scores, np.float64)
  allv = np.concatenate([a, b])
  order = np.argsort(allv, kind="mergesort")
  ranks = np.empty(len(allv))
  sorted_v = allv[order]
  # Average ranks over ties.
  _, start, counts = np.unique(sorted_v, return_index=True, return_counts=True)
  avg = start + (counts - 1) / 2.0 + 1.0
  ranks[order] = np.repeat(avg, counts)
  return float((ranks[: len(a)].sum() - len(a) * (len(a) + 1) / 2.0) / (len(a) * len(b)))


_per_example_loss = jax.jit(continual.per_example_loss, static_argnums=0)
_data_loss = jax.jit(continual.data_loss, static_argnums=0)


def mia_auc(obj: Objective, params, members: Task, nonmembers: Task) -> float:
  """Loss-threshold membership-inference AUC of params on (members, non-members)."""
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
  """Weighted top-1 accuracy (softmax models); with `classes`, the argmax is taken over
  those classes only (task-incremental evaluation)."""
  return float(_accuracy(obj, params, task, None if classes is None else tuple(classes)))


def joint_risk(obj: Objective, params, tasks) -> float:
  """R(theta): the mean data loss over the examples of `tasks` (kept weights only)."""
  return float(_data_loss(obj, params, concat(tasks)))


def concat(tasks) -> Task:
  return Task(*(jnp.concatenate(parts) for parts in zip(*tasks)))
