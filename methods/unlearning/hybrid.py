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

The named methods of the paper (and of the experiment) are plans: `method_plan` maps
"hessian", "hessian_diag", "hessian_cg", "hessian_lissa", "gradient" and "hybrid" to
their per-task kinds, with the Gauss-Newton variants for models that are not linear in
their parameters.

Reference: the ICML 2026 CL-unlearning paper (abstract 5): a hybrid strategy that
reduces storage while keeping post-unlearning performance.
"""

from __future__ import annotations

from methods.unlearning import hessian

KINDS = (*hessian.STORED, *hessian.MATRIX_FREE, "gradient")
METHODS = ("hessian", "hessian_diag", "hessian_cg", "hessian_lissa", "gradient", "hybrid")


def uniform_plan(kind: str, num_tasks: int) -> tuple[str, ...]:
  """(kind,) * T: the same stage update for every task.

  Args:
    kind: one of `KINDS`.
    num_tasks: T.

  Returns:
    The plan, a tuple of T kinds.

  Example:
    >>> uniform_plan("cg", 3)
    ('cg', 'cg', 'cg')
  """
  if kind not in KINDS:
    raise ValueError(f"unknown stage kind {kind!r}; expected one of {KINDS}")
  return (kind,) * num_tasks


def hybrid_plan(num_tasks: int, num_full: int, full: str = "full",
                rest: str = "diag") -> tuple[str, ...]:
  """(rest,) * (T - num_full) + (full,) * num_full: full curvature on the recent tasks.

  Args:
    num_tasks: T.
    num_full: how many of the most recent tasks keep `full` (0..T).
    full: the kind of the recent tasks ("full" or "ggn").
    rest: the kind of the older tasks ("diag", "diag_ggn" or "gradient").

  Returns:
    The plan, a tuple of T kinds.

  Example:
    >>> hybrid_plan(4, 2)
    ('diag', 'diag', 'full', 'full')
  """
  if not 0 <= num_full <= num_tasks:
    raise ValueError(f"num_full={num_full} must be in [0, {num_tasks}]")
  for kind in (full, rest):
    if kind not in KINDS:
      raise ValueError(f"unknown stage kind {kind!r}; expected one of {KINDS}")
  return (rest,) * (num_tasks - num_full) + (full,) * num_full


def method_plan(method: str, num_tasks: int, *, linear: bool, num_full: int = 2,
                rest: str = "diag") -> tuple[str, ...]:
  """The plan of a named method; GGN kinds when the model is not linear in its parameters.

      hessian: full / ggn        hessian_diag: diag / diag_ggn   hessian_cg: cg / cg_ggn
      hessian_lissa: lissa       gradient: gradient
      hybrid: hybrid_plan(T, num_full, full, rest), rest "diag" (-> diag / diag_ggn)
              or "gradient"

  Args:
    method: one of `METHODS`.
    num_tasks: T.
    linear: the model is linear in its parameters (then GGN = Hessian).
    num_full: the hybrid's full-curvature tasks.
    rest: the hybrid's kind elsewhere, "diag" or "gradient".

  Returns:
    The plan, a tuple of T kinds.

  Example:
    >>> method_plan("hessian", 3, linear=False)
    ('ggn', 'ggn', 'ggn')
  """
  full, diag = ("full", "diag") if linear else ("ggn", "diag_ggn")
  if method == "hybrid":
    return hybrid_plan(num_tasks, num_full, full=full,
                       rest=diag if rest == "diag" else "gradient")
  kinds = {"hessian": full, "hessian_diag": diag, "hessian_cg": "cg" if linear else "cg_ggn",
           "hessian_lissa": "lissa", "gradient": "gradient"}
  if method not in kinds:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  return uniform_plan(kinds[method], num_tasks)
