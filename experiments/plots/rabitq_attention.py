"""Plots of the RaBitQ attention experiment: pure functions from its measured results
(the stage outputs of `experiments/rabitq_attention.py`) to PNG files."""

from __future__ import annotations

import math
import os

from common import plotting

LABELS = {"rabitq": "RaBitQ top-p", "rabitq_keys_only": "RaBitQ top-p (keys centred only)",
          "rabitq_no_centering": "RaBitQ top-p (no centring)", "oracle_top_p": "oracle top-p",
          "oracle_top_k": "oracle top-k", "quest": "Quest"}
DPI = 100


def estimator_error(est: dict, path: str) -> str:
  """RMSE of the three estimates and the median bound against d (log-log), with a
  1/sqrt(d) reference line. `est`: {d: {"float"|"randomized"|"deterministic":
  {"rmse": ...}, "median_bound": ...}}."""
  dims = sorted(est, key=int)
  xs = [int(d) for d in dims]
  fig, ax = plotting.subplots(figsize=(5.2, 3.6))
  for name, m in (("float", "o-"), ("randomized", "s-"), ("deterministic", "^--")):
    ax.loglog(xs, [est[d][name]["rmse"] for d in dims], m, label=f"RMSE, {name} query")
  ax.loglog(xs, [est[d]["median_bound"] for d in dims], "k:", label="median bound (eps0=1.9)")
  ax.loglog(xs, [est[dims[0]]["float"]["rmse"] * math.sqrt(xs[0] / x) for x in xs], color="gray",
            lw=0.8, label="1/sqrt(d) reference")
  ax.minorticks_off()
  ax.set_xticks(xs, [str(x) for x in xs])
  ax.set_xlabel("dimension d")
  ax.set_ylabel("error of <o,q> estimate")
  ax.set_title("RaBitQ estimator error vs d")
  ax.legend(fontsize=7)
  return plotting.save_figure(fig, path, dpi=DPI)


def selection(panels: dict, path: str, key: str, ylabel: str, logy: bool = False) -> str:
  """One panel per cache: `key` ("recall" or "out_err") of every method against the
  tokens touched. `panels`: {title: {method: {"all": {"tokens": [...], key: [...]}}}}."""
  fig, axes = plotting.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
  for ax, (title, summ) in zip(axes[0], panels.items()):
    for name, lab in LABELS.items():
      if name not in summ:
        continue
      c = summ[name]["all"]
      ax.plot(c["tokens"], c[key], "o-" if name.startswith("rabitq") else "s--", label=lab,
              ms=3)
    ax.set_xscale("log")
    if logy:
      ax.set_yscale("log")
    ax.set_xlabel("tokens touched (exact attention)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
  axes[0][0].legend(fontsize=6)
  return plotting.save_figure(fig, path, dpi=DPI)


def end_to_end(e2e: dict, path: str) -> str:
  """Next-byte loss and top-1 agreement of sparse decoding against p, with full
  attention's loss. `e2e`: {"full": {...}, "p=0.9": {"loss", "agreement"}, ...}."""
  ps = [k for k in e2e if k != "full"]
  xs = [float(k.split("=")[1]) for k in ps]
  fig, ax = plotting.subplots(1, 2, figsize=(8.5, 3.4))
  ax[0].plot(xs, [e2e[k]["loss"] for k in ps], "o-", label="RaBitQ sparse decoding")
  ax[0].axhline(e2e["full"]["loss"], color="k", ls=":", label="full attention")
  ax[0].set_xlabel("p")
  ax[0].set_ylabel("next-byte loss (nats)")
  ax[0].legend(fontsize=7)
  ax[1].plot(xs, [e2e[k]["agreement"] for k in ps], "o-")
  ax[1].set_xlabel("p")
  ax[1].set_ylabel("top-1 agreement with full attention")
  return plotting.save_figure(fig, path, dpi=DPI)


def write_all(workdir: str, est: dict, panels: dict, e2e: dict) -> list[str]:
  """Writes the experiment's four plots into `workdir`; returns their file names."""
  names = ["estimator_error_vs_d.png", "recall_vs_tokens.png", "output_error_vs_tokens.png",
           "end_to_end.png"]
  paths = [os.path.join(workdir, name) for name in names]
  estimator_error(est, paths[0])
  selection(panels, paths[1], "recall", "recall of true attention mass")
  selection(panels, paths[2], "out_err", "relative output error", logy=True)
  end_to_end(e2e, paths[3])
  return names
