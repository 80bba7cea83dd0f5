"""Plots of the certified-unlearning experiment: pure functions from its trial rows to PNGs.

`rows` is `{model: {k: row}}` as `experiments.unlearning.run_trials` returns it: per
forgotten task k, `row["methods"][method]` holds that method's `unlearning_loss` and
`bytes`. Forgetting the last task (k = num_tasks - 1) is exact for every method, so the
plots show the tasks k < T.
"""

from __future__ import annotations

import numpy as np

from common import plotting

LABELS = {"hessian": "Hessian (full / GGN)", "hessian_diag": "Hessian diagonal",
          "hessian_cg": "Hessian-vector CG", "hessian_lissa": "Hessian-vector LiSSA",
          "gradient": "gradient (descent-to-delete)", "hybrid": "hybrid"}
# Marker, size and line style per method (its colour is its position here): the
# matrix-free solvers land exactly on the stored-Hessian curve, so they are drawn
# smaller and dashed on top of it.
STYLE = {"hessian": ("o", 9, "-"), "hessian_diag": ("D", 6, "-"), "hessian_cg": ("s", 6, "--"),
         "hessian_lissa": ("^", 4, ":"), "gradient": ("v", 7, "-"), "hybrid": ("P", 7, "-")}


def _panels(rows: dict, num_tasks: int):
  """(figure, [(axes, model, per_k, the forgotten tasks k < T, first row)]), a panel a model."""
  fig, axes = plotting.subplots(1, len(rows), figsize=(5.5 * len(rows), 4), squeeze=False)
  panels = [(ax, model, per_k, [k for k in sorted(per_k) if k < num_tasks - 1],
             per_k[sorted(per_k)[0]]) for ax, (model, per_k) in zip(axes[0], rows.items())]
  return fig, panels


def _finish(ax, model: str, xlabel: str, ylabel: str) -> None:
  ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(model)
  ax.legend(fontsize=7)


def loss_vs_task(rows: dict, num_tasks: int, path: str) -> str:
  """The unlearning loss E||theta~ - theta'||^2 against the forgotten task, per method.

  Args:
    rows: {model: {k: row}} (see the module doc).
    num_tasks: T, the length of the task sequence.
    path: the PNG to write (atomically).

  Returns:
    `path`.
  """
  fig, panels = _panels(rows, num_tasks)
  for ax, model, per_k, ks, first in panels:
    for m in first["methods"]:
      marker, size, line = STYLE[m]
      ax.plot([k + 1 for k in ks], [per_k[k]["methods"][m]["unlearning_loss"] for k in ks],
              marker=marker, markersize=size, linestyle=line, label=LABELS[m],
              color=f"C{list(STYLE).index(m)}")
    ax.set_xticks([k + 1 for k in ks])
    _finish(ax, model, "forgotten task index (task T is exact for every method)",
            "unlearning loss E||theta~ - theta'||^2")
  return plotting.save_figure(fig, path, dpi=120)


def storage_vs_loss(rows: dict, num_tasks: int, path: str) -> str:
  """The storage / unlearning-loss picture: stored bytes against the mean loss over k < T.

  Arguments and return value as `loss_vs_task`.
  """
  fig, panels = _panels(rows, num_tasks)
  for ax, model, per_k, ks, first in panels:
    for m in first["methods"]:
      y = np.mean([per_k[k]["methods"][m]["unlearning_loss"] for k in ks]) if ks else np.nan
      marker, size, _ = STYLE[m]
      ax.scatter(first["methods"][m]["bytes"], y, label=LABELS[m], marker=marker,
                 s=size ** 2 * 1.5, alpha=0.8, color=f"C{list(STYLE).index(m)}")
    ax.set_xscale("log")
    _finish(ax, model, "stored bytes (checkpoints + curvature)",
            "mean unlearning loss over tasks k < T")
  return plotting.save_figure(fig, path, dpi=120)
