"""The AutoMS experiment's figures: success rates per method and task, and the best
design of each task as an image with its property values."""

from __future__ import annotations

import os

import numpy as np

from common import plotting
from methods.automs import cells
from methods.automs import tasks


def success_rates(workdir: str, rows: list[dict], methods, task_names) -> str:
  """`success.png`: the success rate per method (left) and per task x method (right)."""
  grid = np.array([[np.mean([r["success"] for r in rows if r["task"] == t and
                             r["method"] == m] or [np.nan]) for m in methods]
                   for t in task_names])
  fig, (ax, ax2) = plotting.subplots(1, 2, figsize=(13, 0.3 * len(task_names) + 3),
                                     gridspec_kw={"width_ratios": [1, 1.6]})
  ax.bar(range(len(methods)), 100 * np.nanmean(grid, 0), color=[f"C{i}" for i in
                                                                range(len(methods))])
  ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right")
  ax.set(ylabel="tasks solved (%)", title="success rate at equal solves")
  im = ax2.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
  ax2.set_xticks(range(len(methods)), methods, rotation=45, ha="right")
  ax2.set_yticks(range(len(task_names)), task_names, fontsize=7)
  ax2.set_title("fraction of seeds solved")
  fig.colorbar(im, ax=ax2)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "success.png")))


def designs(workdir: str, best: list[dict], n: int, per_row: int) -> str:
  """`designs.png`: each task's best design (2 x 2 periodic tiles) and its constrained
  properties."""
  cols = max(1, per_row)
  rows = max(1, -(-len(best) // cols))
  fig, axes = plotting.subplots(rows, cols, figsize=(3 * cols, 3.3 * rows), squeeze=False)
  for ax in axes.ravel():
    ax.axis("off")
  for ax, d in zip(axes.ravel(), best):
    rho = np.asarray(cells.density(cells.family_index(d["best_family"]),
                                   np.asarray(d["best_params"]), n))
    ax.imshow(np.tile(rho.T, (2, 2)), origin="lower", cmap="gray_r", vmin=0, vmax=1)
    props = ", ".join(f"{c.key}={d['best_properties'][c.key]:.3g}"
                      for c in tasks.get_task(d["task"]).constraints)
    mark = "solved" if d["success"] else f"violation {d['best_violation']:.2f}"
    ax.set_title(f"{d['task']} ({d['best_family']}, {mark})\n{props}", fontsize=6)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "designs.png")))
