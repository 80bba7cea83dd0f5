"""The FGR experiment's figures: ECE against corruption severity per method, and
reliability diagrams (ID and pooled over the corruptions)."""

from __future__ import annotations

import os

import numpy as np

from common import plotting


def ece_vs_severity(workdir: str, curves: dict, severities) -> str:
  """`ece_vs_severity.png`: mean ECE over the corruptions at each severity (0 = clean ID
  test), mean +- s.e. over seeds, one line per run; left without, right with
  temperature scaling.

  Args:
    curves: {run: {"plain" | "ts": (means, standard errors)}}, one value per severity.
    severities: the x values, 0 first.
  """
  fig, axes = plotting.subplots(1, 2, figsize=(11, 4), squeeze=False)
  x = np.asarray(severities)
  for ax, group, title in zip(axes[0], ("plain", "ts"), ("no TS", "+ temperature scaling")):
    for i, (run, c) in enumerate(curves.items()):
      mean, se = (np.asarray(v, float) for v in c[group])
      fgr = run.startswith("fgr")
      ax.plot(x, mean, marker="o", ms=3, color=f"C{i % 10}", lw=2.2 if fgr else 1.1,
              ls="-" if i < 10 else "--", label=run)
      ax.fill_between(x, mean - se, mean + se, color=f"C{i % 10}", alpha=0.12)
    ax.set(title=f"ECE vs severity ({title})", xlabel="severity (0 = clean)",
           ylabel="ECE (15 bins)", xticks=x)
  axes[0][0].legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir,
                                                                 "ece_vs_severity.png")))


def reliability(workdir: str, diagrams: dict) -> str:
  """`reliability.png`: per run (columns) accuracy (filled) and mean confidence
  (outline) per equal-width confidence bin, ID (top row) and pooled over the
  corruption sets (bottom row), seed 0, no TS; the title's ECE is of the pooled bins.

  Args:
    diagrams: {run: {"id" | "shift": {"count", "conf", "acc"} per bin}}.
  """
  runs = list(diagrams)
  rows = [w for w in ("id", "shift") if all(w in diagrams[r] for r in runs)]
  fig, axes = plotting.subplots(len(rows), len(runs), figsize=(2.3 * len(runs), 2.4 * len(rows)),
                                squeeze=False)
  for r, where in enumerate(rows):
    for col, run in enumerate(runs):
      d = diagrams[run][where]
      count, conf, acc = (np.asarray(d[k], float) for k in ("count", "conf", "acc"))
      n = len(count)
      edges = np.linspace(0, 1, n + 1)
      ax = axes[r][col]
      keep = count > 0
      ax.bar(edges[:-1][keep], acc[keep], width=1 / n, align="edge", color="C0",
             alpha=0.8, label="accuracy")
      ax.bar(edges[:-1][keep], conf[keep], width=1 / n, align="edge", fill=False,
             edgecolor="C3", lw=0.8, label="confidence")
      ax.plot([0, 1], [0, 1], "k--", lw=0.7)
      ece = float(np.sum(count * np.abs(conf - acc)) / max(count.sum(), 1))
      ax.set(xlim=(0, 1), ylim=(0, 1), title=f"{run} ({where}) ECE {ece:.3f}")
      ax.title.set_fontsize(7)
      ax.tick_params(labelsize=6)
  axes[0][0].legend(fontsize=6)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "reliability.png")))
