"""Plots shared by experiments (matplotlib, Agg backend, PNG files)."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


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
  fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
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
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp.png"
  fig.savefig(tmp, dpi=110)
  plt.close(fig)
  os.replace(tmp, path)
  return path
