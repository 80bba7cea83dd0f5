"""Plots of the DFM convergence experiment: pure functions from measured errors to PNG files."""

from __future__ import annotations

import numpy as np

from common import plotting


def _finish(ax, xlabel: str, ylabel: str, fontsize: int = 7) -> None:
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=fontsize)


def error_vs_h(path: str, gauss: dict, mix: dict, config) -> str:
  """KL and W2 of the exact EM law against h for every d, and the mixture coupling bound.

  Args:
    path: the PNG to write (atomically).
    gauss: {"kl"|"w2": (len(gaussian.dims), len(gaussian.num_steps)) errors}.
    mix: {"bounds": (len(mixture.dims), len(mixture.steps)) coupling bounds}.
    config: the experiment's config (grids and dimensions).

  Returns:
    `path`.
  """
  hs = 1.0 / np.asarray(config.gaussian.num_steps, float)
  fig, axes = plotting.subplots(1, 3, figsize=(14, 4))
  for ax, name, label in ((axes[0], "kl", "KL(target || EM law)"),
                          (axes[1], "w2", "W2(EM law, target)")):
    for i, d in enumerate(config.gaussian.dims):
      s = plotting.loglog_slope(hs, gauss[name][i])
      ax.loglog(hs, gauss[name][i], "o-", ms=3, label=f"d={d} (slope {s:.2f})")
    _finish(ax, "step h = 1/N", label)
  mh = 1.0 / np.asarray(config.mixture.steps, float)
  for i, d in enumerate(config.mixture.dims):
    s = plotting.loglog_slope(mh, mix["bounds"][i])
    axes[2].loglog(mh, mix["bounds"][i], "s-", ms=3, label=f"mixture d={d} (slope {s:.2f})")
  _finish(axes[2], "step h = 1/N", "W2 coupling bound vs fine chain")
  return plotting.save_figure(fig, path)


def error_vs_d(path: str, gauss: dict, config) -> str:
  """KL and W2 at h = 1/gaussian.fixed_steps against d, with their fitted exponents.

  Args:
    path: the PNG to write (atomically).
    gauss: {"fixed_kl"|"fixed_w2": (len(gaussian.dims),) errors}.
    config: the experiment's config.

  Returns:
    `path`.
  """
  dims = np.asarray(config.gaussian.dims, float)
  fig, ax = plotting.subplots(figsize=(5, 4))
  for name in ("kl", "w2"):
    v = gauss[f"fixed_{name}"]
    ax.loglog(dims, v, "o-", label=f"{name} (exponent {plotting.loglog_slope(dims, v):.2f})")
  _finish(ax, "dimension d", f"error at h = 1/{config.gaussian.fixed_steps}", fontsize=8)
  return plotting.save_figure(fig, path)
