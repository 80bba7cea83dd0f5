"""Figures for experiments: one way to make them and one way to save them.

`subplots` makes a matplotlib `Figure` without pyplot, so no backend is chosen and
no global figure state is touched (it works the same in a script, a test and a
notebook); `save_figure` writes it as a PNG through a temporary file and a rename,
so an interrupted run never leaves a truncated plot in place of a good one.

    fig, axes = plotting.subplots(1, 2, figsize=(8, 3.5))
    axes[0, 0].plot(x, y)
    plotting.save_figure(fig, os.path.join(workdir, "curve.png"))
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

import matplotlib.figure
import matplotlib.ticker
import numpy as np


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] = (6.0, 4.0),
             squeeze: bool = True, **kwargs: Any):
  """`(fig, axes)` like `pyplot.subplots`, for a pyplot-free `Figure`.

  Args:
    nrows, ncols: the grid of axes.
    figsize: the figure size in inches.
    squeeze: as in pyplot: a single Axes, or a 1-D array for one row or column.
    **kwargs: passed to `Figure.subplots` (sharex, gridspec_kw, subplot_kw, ...).

  Returns:
    (figure, Axes or array of Axes).
  """
  fig = matplotlib.figure.Figure(figsize=figsize)
  return fig, fig.subplots(nrows, ncols, squeeze=squeeze, **kwargs)


def save_figure(fig: matplotlib.figure.Figure, path: str, *, dpi: int = 110,
                tight: bool = True) -> str:
  """Saves `fig` as a PNG at `path` atomically (temporary file, then rename).

  Args:
    fig: the figure (from `subplots`, or any matplotlib figure).
    path: the destination; its folder is created.
    dpi: resolution.
    tight: call `fig.tight_layout()` first.

  Returns:
    `path`.
  """
  if tight:
    fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f"{path}.tmp-{os.getpid()}.png"
  fig.savefig(tmp, dpi=dpi)
  os.replace(tmp, path)
  pyplot = sys.modules.get("matplotlib.pyplot")
  if pyplot is not None:  # A figure from pyplot: release it from pyplot's registry.
    pyplot.close(fig)
  return path


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
  """Least-squares slope of log y against log x (the empirical rate exponent)."""
  x, y = np.asarray(x, float), np.asarray(y, float)
  keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
  if keep.sum() < 2:
    return float("nan")
  return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def error_vs_n_panels(panels: Mapping[str, Mapping[str, tuple]], path: str,
                      ylabel: str = "integrated squared error") -> str:
  """One log-log panel per scenario; each curve is label -> (ns, median, low, high).

  The legend carries each curve's fitted log-log slope. Returns ``path``.
  """
  fig, axes = subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
  for ax, (title, curves) in zip(axes[0], panels.items()):
    for label, (ns, med, lo, hi) in curves.items():
      slope = loglog_slope(ns, med)
      line, = ax.loglog(ns, med, "o-", label=f"{label} (slope {slope:.2f})")
      ax.fill_between(ns, lo, hi, color=line.get_color(), alpha=0.15)
    all_ns = sorted({int(n) for ns, *_ in curves.values() for n in ns})
    ax.set_xticks(all_ns)
    ax.set_xticklabels([str(n) for n in all_ns], fontsize=7)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title(title)
    ax.set_xlabel("n")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  return save_figure(fig, path)
