"""The retrain oracle: re-run the task sequence without the forgotten data.

    theta'_j = theta_j (j < k),  theta'_j = argmin L_j(theta; theta'_{j-1}, D'_j) (j >= k)

starting from the stored checkpoint theta_{k-1}; a task with nothing left is skipped.
This is the reference every certificate is measured against and the cost to beat.

Reference: the ICML 2026 CL-unlearning paper (abstract 5).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from methods.unlearning import continual
from methods.unlearning.objective import Task


def retrain(fit_stage: Callable[[Any, Task], Any], anchors: Sequence, tasks: Sequence[Task],
            k: int):
  """theta'_T: refits tasks k..T on the retained data from theta_{k-1} = anchors[k].

  Args:
    fit_stage: (anchor, task) -> params, the solver used for training (e.g.
      `functools.partial(continual.fit_stage_newton, obj)`).
    anchors: the stored checkpoints theta_0..theta_T.
    tasks: the retained data of every task.
    k: 0-based index of the first task that changed.

  Returns:
    theta'_T, the retrained parameters.

  Example:
    >>> fit = functools.partial(continual.fit_stage_newton, obj)
    >>> target = retrain(fit, anchors, forget_task(tasks, k), k)
  """
  params = anchors[k]
  for task in tasks[k:]:
    params = continual.anchor_if_empty(fit_stage, params, task)
  return params
