"""Figures and the per-depth table of the AdaThink experiment, from its evaluations."""

from __future__ import annotations

import os

import numpy as np

from common import plotting
from common import trials


def _rows(evals: dict, variants) -> list[str]:
  return ["sft", "stage1", *variants]


def length_histograms(workdir: str, evals: dict, variants) -> str:
  """Response-length histograms on the held-out cases, one panel per policy.

  Args:
    workdir: where ``length_histogram.png`` goes.
    evals: {policy: evaluation with "tokens" (per case) and "k"}.
    variants: the stage-2 rows, in order.
  """
  names = _rows(evals, variants)
  cols = 3
  rows = -(-len(names) // cols)
  fig, axes = plotting.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
  top = max(max(evals[n]["tokens"]) for n in names)
  bins = np.arange(0, top + 4, 3)
  for ax, name in zip(axes.flat, names):
    tokens, k = np.asarray(evals[name]["tokens"]), np.asarray(evals[name]["k"])
    easy = k <= np.median(k)
    ax.hist([tokens[easy], tokens[~easy]], bins=bins, stacked=True,
            label=[f"k <= {int(np.median(k))}", f"k > {int(np.median(k))}"])
    ax.set_title(f"{name}: mean {tokens.mean():.1f}", fontsize=9)
    ax.set_xlabel("response tokens")
  for ax in list(axes.flat)[len(names):]:
    ax.axis("off")
  axes.flat[0].legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir,
                                                                 "length_histogram.png")))


def per_depth(workdir: str, evals: dict, variants) -> str:
  """Accuracy, mean response tokens and empty-think fraction vs depth k, per policy."""
  names = _rows(evals, variants)
  fig, axes = plotting.subplots(1, 3, figsize=(14, 4))
  for i, name in enumerate(names):
    by_k = evals[name]["summary"]["by_k"]
    ks = sorted(by_k, key=int)
    for ax, key in zip(axes, ("accuracy", "tokens", "empty_think")):
      ax.plot([int(k) for k in ks], [by_k[k][key] for k in ks], marker="o", ms=3,
              label=name, color=f"C{i % 10}", ls="--" if name in ("sft", "stage1") else "-")
  for ax, label in zip(axes, ("accuracy", "mean response tokens", "empty-think fraction")):
    ax.set_xlabel("chain depth k")
    ax.set_ylabel(label)
  axes[0].legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "per_depth.png")))


def write_table(workdir: str, evals: dict, loss_agg: dict) -> str:
  """``per_depth.md``: accuracy / tokens / empty-think per policy and depth, with each
  row's loss aggregation mode."""
  names = ["sft", "stage1", *loss_agg]
  ks = sorted(evals["sft"]["summary"]["by_k"], key=int)
  head = "| policy | loss agg | acc | tokens | empty think | " + " | ".join(
      f"k={k} acc / tok / empty" for k in ks) + " |"
  lines = [head, "|" + "---|" * (5 + len(ks))]
  for name in names:
    s = evals[name]["summary"]
    cells = [f"{s['by_k'][k]['accuracy']:.2f} / {s['by_k'][k]['tokens']:.0f} / "
             f"{s['by_k'][k]['empty_think']:.2f}" for k in ks]
    agg = loss_agg.get(name, "token-mean (stage 1)" if name == "stage1" else "-")
    lines.append(f"| {name} | {agg} | {s['all']['accuracy']:.3f} | {s['all']['tokens']:.1f} | "
                 f"{s['all']['empty_think']:.2f} | " + " | ".join(cells) + " |")
  path = os.path.join(workdir, "per_depth.md")
  trials.atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
  return os.path.basename(path)
