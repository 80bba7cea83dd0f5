"""The LILO experiment's figures: best true utility vs DM interactions, and the
mistranslation sweep."""

from __future__ import annotations

import os

import numpy as np

from common import plotting


def utility_curves(workdir: str, curves: dict) -> str:
  """`utility.png`: per problem, the best true utility found (mean +- standard error
  over seeds) against the number of DM interactions, one line per method.

  Args:
    workdir: where the file goes.
    curves: {problem: {method: (best (iterations + 1, seeds), interactions (same))}}.
  """
  fig, axes = plotting.subplots(1, len(curves), figsize=(5.5 * len(curves), 4), squeeze=False)
  for ax, (problem, methods) in zip(axes[0], curves.items()):
    for i, (name, (best, inter)) in enumerate(methods.items()):
      mean = best.mean(1)
      se = best.std(1, ddof=1) / np.sqrt(best.shape[1]) if best.shape[1] > 1 else 0 * mean
      if inter.max() > 0:
        x = inter.mean(1)
      else:                      # no DM (oracle, random): at the budget of the same iteration
        x = methods["lilo"][1].mean(1) if "lilo" in methods else np.arange(len(mean))
      ls = ":" if name.startswith("lilo_err") else "-"
      ax.plot(x, mean, marker="o", ms=3, ls=ls, color=f"C{i % 10}", label=name)
      ax.fill_between(x, mean - se, mean + se, color=f"C{i % 10}", alpha=0.15)
    ax.set(title=problem, xlabel="DM interactions (same iterations for oracle / random)",
           ylabel="best true utility")
  axes[0][0].legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "utility.png")))


def error_sweep(workdir: str, errors, accuracy, utility) -> str:
  """`error_sweep.png`: the translator's pairwise accuracy and LILO's final best utility
  against the offline translator's mistranslation rate."""
  fig, ax = plotting.subplots(1, 1, figsize=(5, 3.6))
  ax.plot(errors, utility, marker="o", color="C0", label="LILO final best utility")
  ax.set(xlabel="mistranslation rate", ylabel="best true utility")
  twin = ax.twinx()
  twin.plot(errors, accuracy, marker="s", color="C1", label="translator pairwise accuracy")
  twin.set_ylabel("pairwise accuracy")
  ax.legend(loc="lower left", fontsize=7)
  twin.legend(loc="upper right", fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "error_sweep.png")))
