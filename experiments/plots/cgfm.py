"""Plots of the CGFM experiment: pure functions from measured fields to PNG files."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.tri as mtri
import numpy as np

from common import plotting
from common.data import fluid_meshes

_STATS = ((lambda s: s[..., 0].mean(0), "mean u / U"), (lambda s: s[..., 0].std(0), "std u / U"))


def fields(mesh: fluid_meshes.FlowMesh, reference: np.ndarray,
           generated: Mapping[str, np.ndarray], reynolds: float, path: str) -> str:
  """Mean and std of u on the mesh: the simulated states, then each model's samples.

  Args:
    mesh: the mesh the states live on.
    reference: (M, N, 3) simulated states at one condition.
    generated: {model name: (S, N, 3) generated states at that condition}.
    reynolds: the condition, for the title.
    path: the PNG to write (atomically).

  Returns:
    `path`.
  """
  tri = mtri.Triangulation(mesh.pos[:, 0], mesh.pos[:, 1], mesh.triangles)
  columns = [("simulated", reference)] + list(generated.items())
  fig, axes = plotting.subplots(len(columns), 2, figsize=(11, 1.6 * len(columns) + 0.6),
                                squeeze=False)
  for j, (fn, label) in enumerate(_STATS):
    ref = fn(reference)
    lo, hi = float(ref.min()), float(ref.max())
    for i, (name, states) in enumerate(columns):
      ax = axes[i, j]
      im = ax.tripcolor(tri, fn(states), vmin=lo, vmax=hi, shading="gouraud", cmap="viridis")
      ax.set_aspect("equal")
      ax.set_xticks([])
      ax.set_yticks([])
      ax.set_title(f"{name}: {label}", fontsize=8)
    fig.colorbar(im, ax=axes[:, j].tolist(), shrink=0.6)
  fig.suptitle(f"held-out Re = {reynolds:g}", fontsize=10)
  return plotting.save_figure(fig, path, dpi=110, tight=False)
