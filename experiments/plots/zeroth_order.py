"""Figures of the zeroth-order experiment, from its measured results."""

from __future__ import annotations

import numpy as np

from common import plotting

PLOTS = ("accuracy_vs_forward_passes.png", "gradient_alignment.png", "peak_memory.png")


def plot_accuracy(curves: dict[str, list], first_order_pass_cost: int, path: str) -> str:
  """Validation accuracy and cross-entropy vs forward passes, one line per method.

  Args:
    curves: {method: [(forward passes, accuracy, cross-entropy, s.e.), ...]}.
    first_order_pass_cost: forward-pass equivalents of a first-order step (x label).
    path: the PNG to write.
  """
  fig, axes = plotting.subplots(1, 2, figsize=(10, 4))
  for i, (name, curve) in enumerate(curves.items()):
    curve = np.asarray(curve)
    for ax, col in zip(axes, (1, 2)):
      ax.plot(curve[:, 0], curve[:, col], marker="o", ms=3, label=name, color=f"C{i}",
              ls="--" if name == "first_order" else "-")
  for ax, label in zip(axes, ("validation accuracy", "validation cross-entropy (nats)")):
    ax.set_xlabel(f"forward passes (first order: {first_order_pass_cost} per step)")
    ax.set_ylabel(label)
  axes[0].set_title("English vs code via verbaliser logits")
  axes[0].legend(fontsize=8)
  return plotting.save_figure(fig, path)


def plot_alignment(align: dict, control: dict, path: str) -> str:
  """Per-layer mean cosine with jax.grad per estimator, and the control's ratios.

  Args:
    align: {method: {"layers": {layer: mean cosine}, ...}}.
    control: {"low_rank" | "isotropic": {"ratio": AGZO / MeZO}}.
    path: the PNG to write.
  """
  fig, (ax1, ax2) = plotting.subplots(1, 2, figsize=(11, 4),
                                      gridspec_kw={"width_ratios": [3, 1]})
  names = list(align)
  layers = list(next(iter(align.values()))["layers"])
  x = np.arange(len(layers))
  w = 0.8 / len(names)
  for i, n in enumerate(names):
    ax1.bar(x + i * w, [align[n]["layers"][l] for l in layers], w, label=n)
  ax1.set_xticks(x + 0.4 - w / 2)
  ax1.set_xticklabels([l.replace("layer_", "L").replace("attn/", "").replace("mlp/", "")
                       for l in layers], rotation=90, fontsize=6)
  ax1.set_ylabel("mean cosine with jax.grad (per layer)")
  ax1.legend(fontsize=7)
  kinds = list(control)
  ax2.bar(kinds, [control[k]["ratio"] for k in kinds], color=["C2", "C7"])
  ax2.axhline(1.0, color="k", lw=0.8)
  ax2.set_ylabel("AGZO / MeZO mean cosine")
  ax2.set_title("control: input rank")
  return plotting.save_figure(fig, path)


def plot_memory(memory: dict[str, float], names: list[str], path: str) -> str:
  """Compiled peak memory of one step per method, and of a first-order SGD step.

  Args:
    memory: {method: bytes, "first_order_sgd": bytes}.
    names: the methods, in order.
    path: the PNG to write.
  """
  vals = [memory[n] / 2**20 for n in names] + [memory["first_order_sgd"] / 2**20]
  labels = [n + (" (Adam)" if n == "first_order" else "") for n in names]
  labels.append("first_order (SGD)")
  fig, ax = plotting.subplots(figsize=(6, 3.6))
  ax.barh(labels, vals, color=["C3" if l.startswith("first") else "C0" for l in labels])
  ax.set_xlabel("compiled peak memory of one step (MiB)")
  return plotting.save_figure(fig, path)
