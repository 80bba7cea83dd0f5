"""The GLANCE experiment's figures: success-rate curves and intrinsic-reward heat maps."""

from __future__ import annotations

import os

import numpy as np

from common import plotting


def _rate(curve: dict, window: int) -> np.ndarray:
  """(updates, seeds) success rate over a trailing window of updates."""
  s, e = np.asarray(curve["successes"]), np.asarray(curve["episodes"])
  cs, ce = np.cumsum(s, 0), np.cumsum(e, 0)
  lag = lambda c: np.concatenate([np.zeros((window,) + c.shape[1:]), c[:-window]])
  es = ce - lag(ce)
  return np.where(es > 0, (cs - lag(cs)) / np.maximum(es, 1), 0.0)


def success_curves(workdir: str, runs: dict, steps_per_update: int, window: int) -> str:
  """`success.png`: per environment, success rate (trailing window) vs environment
  steps, mean +- s.e. over seeds, one line per method."""
  fig, axes = plotting.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.8), squeeze=False)
  for ax, (env, methods) in zip(axes[0], runs.items()):
    for i, (name, run) in enumerate(methods.items()):
      r = _rate(run, max(1, window))
      x = (np.arange(len(r)) + 1) * steps_per_update
      mean = r.mean(1)
      se = r.std(1, ddof=1) / np.sqrt(r.shape[1]) if r.shape[1] > 1 else 0 * mean
      ax.plot(x, mean, color=f"C{i}", lw=2.2 if name == "glance" else 1.2, label=name)
      ax.fill_between(x, mean - se, mean + se, color=f"C{i}", alpha=0.15)
    ax.set(title=env, xlabel="environment steps", ylabel="success rate", ylim=(-0.02, 1.02))
  axes[0][0].legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "success.png")))


def heatmaps(workdir: str, runs: dict) -> str:
  """`intrinsic_heatmaps.png`: mean r_int per grid cell for GLANCE, early and late."""
  envs = list(runs)
  fig, axes = plotting.subplots(len(envs), 2, figsize=(7, 3.4 * len(envs)), squeeze=False)
  for row, env in zip(axes, envs):
    for ax, when in zip(row, ("early", "late")):
      h = np.asarray(runs[env]["glance"][when]["heatmap"], float)
      h = np.where(h < 0, np.nan, h)
      image = ax.imshow(h, cmap="magma")
      ax.set(title=f"{env}: GLANCE r_int, {when}", xticks=[], yticks=[])
      ax.title.set_fontsize(8)
      fig.colorbar(image, ax=ax, fraction=0.046)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir,
                                                                 "intrinsic_heatmaps.png")))
