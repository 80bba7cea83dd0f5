"""The token-fusion experiment's figures: example fusions side by side per task, and the
metric table (methods x metrics per task, coloured by rank)."""

from __future__ import annotations

import os

import numpy as np

from common import plotting
from common import trials
from methods.token_fusion import metrics

_EXAMPLES = 2


def examples(workdir: str, config, methods) -> str:
  """`examples.png`: for the first seed, two held-out pairs per task: the sources, the
  ground truth where there is one, and every method's fused image."""
  rows = []
  for task in config.tasks:
    stage = np.load(trials.stage_path(workdir, f"fused-{task}-s{config.seed}", "npz"))
    for i in range(min(_EXAMPLES, len(stage["a"]))):
      cols = [("A", stage["a"][i]), ("B", stage["b"][i])]
      if "ground_truth" in stage.files:
        cols.append(("ground truth", stage["ground_truth"][i]))
      cols += [(m, stage[m][i]) for m in methods]
      rows.append((task, cols))
  ncols = max(len(c) for _, c in rows)
  fig, axes = plotting.subplots(len(rows), ncols, figsize=(1.6 * ncols, 1.7 * len(rows)),
                                squeeze=False)
  for r, (task, cols) in enumerate(rows):
    for c in range(ncols):
      ax = axes[r, c]
      ax.axis("off")
      if c < len(cols):
        ax.imshow(cols[c][1], cmap="gray", vmin=0.0, vmax=1.0)
        ax.set_title(cols[c][0], fontsize=7)
    axes[r, 0].text(-0.1, 0.5, task.replace("_", "\n"), transform=axes[r, 0].transAxes,
                    ha="right", va="center", fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "examples.png")))


def metric_table(workdir: str, rows, config, methods) -> str:
  """`metrics.png`: per task, the methods x metrics table of means over seeds, each
  column coloured by rank (dark: first)."""
  keys = [k for k in metrics.NO_REFERENCE + metrics.FULL_REFERENCE + ("objective",)
          if any(k in r for r in rows)]
  fig, axes = plotting.subplots(len(config.tasks), 1,
                                figsize=(1.0 * len(keys) + 2, 0.4 * len(methods) * len(
                                    config.tasks) + 1.0 * len(config.tasks)), squeeze=False)
  for ax, task in zip(axes[:, 0], config.tasks):
    table = np.array([[np.mean([r[k] for r in rows if r["task"] == task and r["method"] == m
                                and k in r] or [np.nan]) for k in keys] for m in methods])
    sign = np.array([-1.0 if k == "objective" else 1.0 for k in keys])
    ranks = np.argsort(np.argsort(-(table * sign), axis=0), axis=0).astype(float)
    ranks[np.isnan(table)] = np.nan
    ax.imshow(ranks, cmap="Blues_r", aspect="auto", vmin=0, vmax=len(methods))
    for i in range(len(methods)):
      for j in range(len(keys)):
        if np.isfinite(table[i, j]):
          ax.text(j, i, f"{table[i, j]:.3g}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(keys)), keys, fontsize=7)
    ax.set_yticks(range(len(methods)), methods, fontsize=7)
    ax.set_title(task, fontsize=8)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "metrics.png")))
