"""Plots and tables of the susceptibility experiment: measured results -> PNG / Markdown.

  calibration        LLC estimate vs step size, and chain-0 loss traces (calibration.png)
  synthetic_heatmap  standardized susceptibilities of the probe tokens grouped by true
                     mechanism, and the ARI of the three feature sets
  component_traces   SGLD minibatch loss per component (mean over chains)
  synthetic_table    susceptibility clusters vs true mechanism (Markdown)
  lm_table           the LM's clusters with their representative tokens (Markdown)
"""

from __future__ import annotations

import numpy as np

from common import plotting
from common import report
from common.data import mechanisms
import methods.susceptibility as sus


def calibration(cal: dict, config, path: str) -> str:
  """LLC vs eps (±2 s.e., the d/2 line and its tolerance band) and the loss traces.

  Args:
    cal: the calibration stage (rows, true_llc, traces, trace_stride, n_beta).
    config: the `calibration` sub-config (dim, tolerance).
    path: the PNG to write.
  """
  fig, (a1, a2) = plotting.subplots(1, 2, figsize=(10, 3.8))
  rows, true = cal["rows"], cal["true_llc"]
  a1.errorbar([r["step_size"] for r in rows], [r["llc"] for r in rows],
              yerr=[2 * r["stderr"] for r in rows], marker="o", capsize=3,
              label="SGLD estimate (±2 s.e.)")
  a1.axhline(true, color="k", ls="--", label=f"d/2 = {true:g}")
  a1.axhspan(true * (1 - config.tolerance), true * (1 + config.tolerance), color="g",
             alpha=0.15, label=f"±{config.tolerance:.0%}")
  a1.set_xscale("log")
  a1.set_yscale("log")
  a1.set_xlabel("step size eps")
  a1.set_ylabel("lambda_hat")
  a1.set_title(f"Linear regression, d={config.dim}: LLC vs step size")
  a1.legend(fontsize=8)
  for key, trace in cal["traces"].items():
    steps = np.arange(len(trace)) * cal["trace_stride"]
    a2.plot(steps, np.asarray(trace) * cal["n_beta"], lw=0.7, label=f"eps={float(key):g}")
  a2.axhline(true, color="k", ls="--", lw=1)
  a2.set_yscale("symlog")
  a2.set_xlabel("SGLD step")
  a2.set_ylabel("n_beta (L_batch(w_t) - L(w0))")
  a2.set_title("Loss traces (chain 0)")
  a2.legend(fontsize=7, ncol=2)
  return plotting.save_figure(fig, path)


def synthetic_heatmap(syn: dict, arrays: dict, path: str) -> str:
  """Standardized susceptibilities of the probe tokens (grouped by mechanism, ordered by
  cluster within it) beside the ARI of susceptibility, gradient and residual clusters.

  Args:
    syn: the synthetic summary (names, ari_*); arrays: the synthetic stage (chi, labels,
      select, ours); path: the PNG to write.
  """
  truth = arrays["labels"][arrays["select"]]
  z = sus.standardize(arrays["chi"][:, arrays["select"]].T)
  order = np.lexsort((arrays["ours"], truth))
  fig, (a1, a2) = plotting.subplots(1, 2, figsize=(11, 4.6),
                                    gridspec_kw={"width_ratios": [3, 2]})
  lim = np.percentile(np.abs(z), 98)
  im = a1.imshow(z[order].T, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim,
                 interpolation="nearest")
  a1.set_yticks(range(len(syn["names"])), syn["names"], fontsize=7)
  bounds = np.flatnonzero(np.diff(truth[order])) + 0.5
  for b in bounds:
    a1.axvline(b, color="k", lw=0.8)
  starts = np.concatenate([[0], bounds + 0.5])
  ends = np.concatenate([bounds + 0.5, [len(order)]])
  a1.set_xticks((starts + ends) / 2, [mechanisms.MECHANISMS[i] for i in np.unique(truth)])
  a1.set_title("Standardized susceptibilities (tokens grouped by true mechanism)")
  fig.colorbar(im, ax=a1, fraction=0.03)
  bars = [syn["ari_susceptibility"], syn["ari_gradient"], syn["ari_residual"]]
  a2.bar(["susceptibility", "loss gradient\n(projected)", "residual\nstream"], bars,
         color=["C0", "C7", "C7"])
  a2.set_ylabel("adjusted Rand index vs mechanism")
  a2.set_title("Same conductance clustering, three feature sets")
  for i, v in enumerate(bars):
    a2.text(i, v, f"{v:.2f}", ha="center", va="bottom")
  return plotting.save_figure(fig, path)


def component_traces(names, traces, title: str, path: str) -> str:
  """One line per component: its SGLD minibatch loss (mean over chains) per step.

  Args:
    names: component names; traces: (components, steps) losses; title: the axes title;
    path: the PNG to write.
  """
  fig, ax = plotting.subplots(figsize=(6, 3.6))
  for name, trace in zip(names, traces):
    ax.plot(trace, lw=0.8, label=name)
  ax.set_xlabel("SGLD step")
  ax.set_ylabel("minibatch loss (mean over chains)")
  ax.set_title(title)
  ax.legend(fontsize=6, ncol=2)
  return plotting.save_figure(fig, path)


def synthetic_table(syn: dict, arrays: dict, path: str) -> str:
  """Markdown: the size of each susceptibility cluster and its tokens per mechanism."""
  truth = arrays["labels"][arrays["select"]]
  ours = arrays["ours"]
  lines = ["| cluster | size | " + " | ".join(mechanisms.MECHANISMS) + " |",
           "|---:|---:|" + "---:|" * len(mechanisms.MECHANISMS)]
  for c in range(int(ours.max()) + 1):
    members = truth[ours == c]
    lines.append(f"| {c} | {len(members)} | " + " | ".join(
        str(int(np.sum(members == i))) for i in range(len(mechanisms.MECHANISMS))) + " |")
  report.atomic_write_text(path, (
      "# Synthetic mechanisms: susceptibility clusters vs true mechanism\n\n"
      f"ARI {syn['ari_susceptibility']:.3f} (gradient baseline "
      f"{syn['ari_gradient']:.3f}, residual baseline {syn['ari_residual']:.3f}).\n\n"
      + "\n".join(lines) + "\n"))
  return path


def show_bytes(byte_values) -> str:
  """Bytes as Markdown-safe text (newline ⏎, tab ⇥, escaped | and `)."""
  s = bytes(int(b) for b in byte_values).decode("utf-8", errors="replace")
  return s.replace("\\", "\\\\").replace("\n", "⏎").replace("\t", "⇥").replace(
      "|", "\\|").replace("`", "'")


def lm_table(lm: dict, lm_name: str, path: str) -> str:
  """Markdown: the LM's clusters (rows of the lm stage) under a title naming the LM."""
  lines = ["| cluster | size | most frequent next bytes | strongest component (z) | "
           "representative tokens in context (`context[next byte]`) |", "|---:|---:|---|---|---|"]
  lines += [f"| {r['cluster']} | {r['size']} | {r['top_tokens']} | {r['strongest']} | "
            f"{r['examples']} |" for r in lm["rows"]]
  report.atomic_write_text(path, (
      f"# Susceptibility clusters of the {lm_name} byte-level LM ({lm['tokens']} validation "
      f"tokens, components: {', '.join(lm['names'])})\n\n" + "\n".join(lines) + "\n"))
  return path
