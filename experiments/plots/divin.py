"""Plots of the DivIn experiment: pure functions from measured points and samples to PNG files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from common import plotting
from methods.divin import METHODS

LABELS = {"cfg": "CFG", "cads": "CADS", "particle_guidance": "particle guidance",
          "divin": "DivIn", "divin_cads": "DivIn+CADS"}
MARKERS = {"cfg": "o", "cads": "s", "particle_guidance": "^", "divin": "D", "divin_cads": "*"}


def tradeoff(rows: Sequence[Mapping], path: str, xkey: str, ykey: str, title: str) -> str:
  """One marker per sweep point of each method on the (xkey, ykey) plane; CFG points
  are annotated with their weight w.

  Args:
    rows: the sweep's points, each with "method", "w" and the metrics.
    path: the PNG to write (atomically).
    xkey, ykey: the metrics on the axes (e.g. "precision", "vendi").
    title: the axes' title.

  Returns:
    `path`.
  """
  fig, ax = plotting.subplots(figsize=(5.6, 4.4))
  for m in METHODS:
    pts = sorted([(r[xkey], r[ykey], r["w"]) for r in rows if r["method"] == m])
    if not pts:
      continue
    xs, ys, _ = zip(*pts)
    ax.plot(xs, ys, MARKERS[m], label=LABELS[m], alpha=0.8, ms=7)
    if m == "cfg":
      for x, y, wv in pts:
        ax.annotate(f"w={wv:g}", (x, y), fontsize=7)
  ax.set_xlabel(xkey)
  ax.set_ylabel(ykey)
  ax.set_title(title)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7)
  return plotting.save_figure(fig, path)


def samples(drawn: Mapping[str, np.ndarray], means: np.ndarray, path: str) -> str:
  """A scatter of each named sample set (C, n, 2), one colour per class, over the modes.

  Args:
    drawn: {title: samples (C, n, 2)} (e.g. "cfg_w7").
    means: (C, K, 2) the mode means, drawn as crosses.
    path: the PNG to write (atomically).

  Returns:
    `path`.
  """
  fig, axes = plotting.subplots(1, len(drawn), figsize=(4 * len(drawn), 4), squeeze=False)
  for ax, (name, s) in zip(axes[0], drawn.items()):
    for c in range(s.shape[0]):
      ax.scatter(s[c, :, 0], s[c, :, 1], s=3, alpha=0.5)
    ax.scatter(means[..., 0].ravel(), means[..., 1].ravel(), c="k", marker="x")
    ax.set_title(name)
    ax.set_aspect("equal")
  return plotting.save_figure(fig, path, dpi=100)
