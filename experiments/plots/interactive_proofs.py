"""Plots of the interactive-proofs experiment: pure functions from measured rates and
times to PNG files."""

from __future__ import annotations

from matplotlib import ticker
import numpy as np

from common import plotting


def soundness(path: str, sound: dict) -> str:
  """Each cheating strategy's acceptance rate with its confidence interval, against the
  bound n d / |F| and the optimal strategy's exact rate."""
  names = list(sound["strategies"])
  fig, ax = plotting.subplots(1, 1, figsize=(6, 3.5))
  rates = np.array([sound["strategies"][n]["rate"] for n in names])
  lo = np.array([sound["strategies"][n]["lower"] for n in names])
  hi = np.array([sound["strategies"][n]["upper"] for n in names])
  x = np.arange(len(names))
  ax.bar(x, rates, color="tab:blue", alpha=0.7, label="measured acceptance")
  ax.errorbar(x, rates, yerr=[rates - lo, hi - rates], fmt="none", color="k", capsize=4)
  ax.axhline(sound["bound"], color="tab:red", ls="--", label="bound n d / |F|")
  ax.axhline(sound["optimal_exact"], color="tab:green", ls=":",
             label="optimal: 1 - (1 - d/|F|)^n")
  ax.set_xticks(x)
  ax.set_xticklabels(names)
  ax.set_ylabel("acceptance rate of a false claim")
  ax.legend(fontsize=7)
  return plotting.save_figure(fig, path)


def spot_checks(path: str, rob: dict, config) -> str:
  """Measured acceptance against k for each lie fraction f, with (1 - f)^k."""
  fig, ax = plotting.subplots(1, 1, figsize=(5.5, 3.8))
  ks = np.asarray(config.ks, float)
  for f in config.lie_fractions:
    measured = [rob["measured"][f"f={f:g}/k={k}"] for k in config.ks]
    theory = [rob["theory"][f"f={f:g}/k={k}"] for k in config.ks]
    line = ax.semilogy(ks, theory, "-", label=f"(1 - {f:g})^k")[0]
    ax.semilogy(ks, np.maximum(measured, 1e-6), "o", color=line.get_color(),
                label=f"measured, f = {f:g}")
  ax.set_xlabel("spot checks k")
  ax.set_ylabel("acceptance rate of the lying prover")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7)
  return plotting.save_figure(fig, path)


def scaling(path: str, scale: dict, app: dict) -> str:
  """Wall time and oracle calls against N: GKR over a low-degree oracle (left, middle)
  and the LM-judged spot checks (right)."""
  fig, axes = plotting.subplots(1, 3, figsize=(14, 4))
  rows, slopes = scale["rows"], scale["slopes"]
  ns = [r["n"] for r in rows]
  for key, label in (("compute_s", "recompute"), ("prover_s", "prover"),
                     ("verifier_s", "verifier")):
    axes[0].loglog(ns, [r[key] for r in rows], "o-", ms=3,
                   label=f"{label} (slope {slopes[key]:.2f})")
  axes[0].set_title("GKR over a low-degree oracle: wall time")
  for key, label in (("compute_queries", "recompute"), ("prover_queries", "prover"),
                     ("verifier_queries", "verifier")):
    axes[1].loglog(ns, [r[key] for r in rows], "o-", ms=3, label=label)
  axes[1].set_title("GKR: oracle calls")
  arows = app["rows"]
  an = [r["n"] for r in arows]
  axes[2].loglog(an, [r["recompute_s"] for r in arows], "o-", ms=3,
                 label=f"recompute all N (slope {app['slopes']['recompute_s']:.2f})")
  axes[2].loglog(an, [r["verifier_s"] for r in arows], "s-", ms=3,
                 label=f"k spot checks (slope {app['slopes']['verifier_s']:.2f})")
  axes[2].set_title("LM judge: wall time")
  for ax, ylabel in zip(axes, ("seconds", "oracle calls", "seconds")):
    ax.set_xlabel("N (oracle answers aggregated)")
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  return plotting.save_figure(fig, path)
