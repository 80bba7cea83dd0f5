"""Which update each task's stage uses: the method = a per-task plan of kinds.

A plan is a tuple of T kinds, one per task, from

    "full", "ggn"          stored dense curvature, exact Newton solve   (d^2 per task)
    "diag", "diag_ggn"     stored diagonal majorizer |C| 1, diagonal Newton (d per task)
    "cg", "cg_ggn", "lissa"  Hessian-vector products on the task's data (0 stored)
    "gradient"             K gradient steps (descent-to-delete)         (0 stored)

The hybrid stores curvature only where it pays: every request to forget task k < T is
propagated through the stages after k, so the most recent stages are on the path of
every request and their errors reach the output undamped, while an old stage serves
only requests for even older tasks. `hybrid_plan` keeps the full curvature for the
`num_full` most recent tasks and a cheap summary (`rest`: "diag"/"diag_ggn", or
"gradient") elsewhere; `num_full` is the storage/accuracy knob (0 = all `rest`,
T = all full).

Reference: the ICML 2026 CL-unlearning paper (abstract 5): a hybrid strategy that
reduces storage while keeping post-unlearning performance.
"""

from __future__ import annotations

from methods.unlearning import hessian

KINDS = (*hessian.STORED, *hessian.MATRIX_FREE, "gradient")


def uniform_plan(kind: str, num_tasks: int) -> tuple[str, ...]:
  if kind not in KINDS:
    raise ValueError(f"unknown stage kind {kind!r}; expected one of {KINDS}")
  return (kind,) * num_tasks


def hybrid_plan(num_tasks: int, num_full: int, full: str = "full",
                rest: str = "diag") -> tuple[str, ...]:
  """(rest,) * (T - num_full) + (full,) * num_full."""
  if not 0 <= num_full <= num_tasks:
    raise ValueError(f"num_full={num_full} must be in [0, {num_tasks}]")
  for kind in (full, rest):
    if kind not in KINDS:
      raise ValueError(f"unknown stage kind {kind!r}; expected one of {KINDS}")
  return (rest,) * (num_tasks - num_full) + (full,) * num_full
