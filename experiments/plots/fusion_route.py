"""The FusionRoute experiment's figures: bits per byte per method and split, the routing
pattern, the coverage case, and a routed text sample coloured by expert."""

from __future__ import annotations

import os

import numpy as np

from common import plotting


def _save(fig, workdir: str, name: str) -> str:
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, name)))


def bits_per_byte(workdir: str, bpb: dict) -> str:
  """`bits_per_byte.png`: one panel per split, a bar per method (lower is better).

  Args:
    bpb: {method: {split: bits per byte}}.
  """
  methods = list(bpb)
  splits = list(next(iter(bpb.values())))
  fig, axes = plotting.subplots(1, len(splits), figsize=(3.2 * len(splits), 4.6),
                                squeeze=False)
  for ax, split in zip(axes[0], splits):
    values = [bpb[m][split] for m in methods]
    colors = ["C3" if m == "fusion_route" else "C0" if m.startswith("expert_") else "C7"
              for m in methods]
    ax.barh(np.arange(len(methods)), values, color=colors)
    ax.set_yticks(np.arange(len(methods)))
    ax.set_yticklabels(methods if ax is axes[0][0] else [""] * len(methods), fontsize=7)
    ax.invert_yaxis()
    lo = min(values)
    hi = min(max(values), 2.0 * lo) * 1.05           # far-off bars are clipped, labelled
    ax.set_xlim(lo * 0.9, hi)
    for y, v in enumerate(values):
      ax.text(min(v, hi), y, f" {v:.2f}", va="center", ha="right" if v >= hi else "left",
              fontsize=6, color="w" if v >= hi else "k")
    ax.set(title=split, xlabel="bits / byte (lower is better)")
  return _save(fig, workdir, "bits_per_byte.png")


def routing_pattern(workdir: str, by_domain, by_class, experts, domains, classes) -> str:
  """`routing_pattern.png`: share of the mixed split's tokens of each domain (left) and
  character class (right) routed to each expert."""
  fig, axes = plotting.subplots(1, 2, figsize=(9, 3.4))
  for ax, matrix, rows, title in ((axes[0], by_domain, domains, "by source domain"),
                                  (axes[1], by_class, classes, "by character class")):
    m = np.asarray(matrix)
    image = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(experts)))
    ax.set_xticklabels(experts, rotation=30, fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    for (i, j), v in np.ndenumerate(m):
      ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
              color="w" if v < 0.6 else "k")
    ax.set(title=f"tokens routed to each expert, {title}", xlabel="expert")
    ax.title.set_fontsize(9)
  fig.colorbar(image, ax=axes[1], fraction=0.046)
  return _save(fig, workdir, "routing_pattern.png")


def coverage(workdir: str, cov: dict) -> str:
  """`coverage.png`: bits per byte on held-out ROT13 prose, which no expert saw."""
  names = list(cov)
  fig, ax = plotting.subplots(1, 1, figsize=(5.5, 3.2))
  colors = ["C3" if n == "fusion_route" else "C1" if n == "no_complementary" else "C0"
            for n in names]
  ax.barh(np.arange(len(names)), [cov[n] for n in names], color=colors)
  ax.set_yticks(np.arange(len(names)))
  ax.set_yticklabels(names, fontsize=8)
  ax.invert_yaxis()
  ax.set(xlabel="bits / byte on ROT13 prose", title="coverage case: no expert saw ROT13")
  return _save(fig, workdir, "coverage.png")


def routed_sample(workdir: str, tokens, choices, experts, width: int = 96) -> str:
  """`routed_sample.png`: byte tokens of a mixed document, each coloured by the expert
  the router chose for it (monospace grid, newlines start a new row)."""
  rows, row, colours, crow = [], [], [], []
  for t, c in zip(tokens, choices):
    if t == 10 or len(row) >= width:
      rows.append(row)
      colours.append(crow)
      row, crow = [], []
      if t == 10:
        continue
    row.append(chr(t) if 32 <= t < 127 else "?")
    crow.append(c)
  rows.append(row)
  colours.append(crow)
  rows, colours = rows[:60], colours[:60]
  fig, ax = plotting.subplots(1, 1, figsize=(width * 0.085, 0.2 * len(rows) + 0.8))
  for i, (r, cs) in enumerate(zip(rows, colours)):
    for j, (ch, c) in enumerate(zip(r, cs)):
      ax.text(j, -i, ch, color=f"C{c % 10}", family="monospace", fontsize=7,
              ha="center", va="center")
  ax.set_xlim(-1, width)
  ax.set_ylim(-len(rows), 1)
  ax.axis("off")
  for k, name in enumerate(experts):
    ax.text(k * width / len(experts), 1.0, name, color=f"C{k % 10}", fontsize=9,
            weight="bold")
  return _save(fig, workdir, "routed_sample.png")
