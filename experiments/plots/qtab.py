"""The Q-Tab experiment's figures: MLE and fidelity per table and method, the first
table's marginals and the pairwise correlations of real and generated rows."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from common import plotting


def _methods(rows) -> list[str]:
  seen = []
  for r in rows:
    if r["method"] not in seen:
      seen.append(r["method"])
  return seen


def _bars(workdir: str, rows, config, keys: tuple[str, ...], name: str, ylabel: str) -> str:
  methods = _methods(rows)
  fig, axes = plotting.subplots(len(keys), 1, figsize=(max(7, 1.6 * len(config.tables) *
                                                          len(methods) / 4), 3.4 * len(keys)),
                                squeeze=False)
  width = 0.8 / len(methods)
  for ax, key in zip(axes[:, 0], keys):
    for i, m in enumerate(methods):
      mean, se = [], []
      for t in config.tables:
        got = [r[key] for r in rows if r["table"] == t and r["method"] == m and key in r]
        mean.append(np.mean(got) if got else np.nan)
        se.append(np.std(got) / np.sqrt(len(got)) if got else 0.0)
      ax.bar(np.arange(len(config.tables)) + i * width, mean, width, yerr=se, capsize=2,
             label=m, color=f"C{i}")
    ax.set_xticks(np.arange(len(config.tables)) + 0.4 - width / 2, config.tables)
    ax.set(ylabel=f"{ylabel}: {key}")
    ax.legend(fontsize=7, ncol=4)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, name)))


def mle_bars(workdir: str, rows, config) -> str:
  """`mle.png`: held-out MLE (AUC / macro-F1 / R^2) of a model trained on each method's
  rows, mean +- s.e. over seeds; 'real' trains on the real training rows."""
  return _bars(workdir, rows, config, ("mle",), "mle.png", "MLE")


def fidelity_bars(workdir: str, rows, config) -> str:
  """`fidelity.png`: sdmetrics column shapes and pair trends, detection, alpha-precision
  and beta-recall per table and method."""
  return _bars(workdir, rows, config, ("column_shapes", "pair_trends", "detection",
                                       "alpha_precision", "beta_recall"),
               "fidelity.png", "score")


def marginals(workdir: str, schema, samples: dict[str, pd.DataFrame]) -> str:
  """`marginals.png`: each column's distribution in the real and generated rows of the
  first table (histograms for numeric columns, category frequencies otherwise)."""
  columns = list(schema.columns)[:12]
  cols = 4
  fig, axes = plotting.subplots((len(columns) + cols - 1) // cols, cols,
                                figsize=(4 * cols, 2.8 * ((len(columns) + cols - 1) // cols)),
                                squeeze=False)
  for ax, column in zip(axes.ravel(), columns):
    if column in schema.numeric:
      values = {m: pd.to_numeric(f[column]).to_numpy() for m, f in samples.items()}
      bins = np.histogram_bin_edges(np.concatenate(list(values.values())), 30)
      for i, (m, v) in enumerate(values.items()):
        ax.hist(v, bins, density=True, histtype="step", label=m, color=f"C{i}")
    else:
      cats = sorted(set().union(*(set(f[column]) for f in samples.values())))[:20]
      width = 0.8 / max(len(samples), 1)
      for i, (m, f) in enumerate(samples.items()):
        freq = f[column].value_counts(normalize=True).reindex(cats, fill_value=0.0)
        ax.bar(np.arange(len(cats)) + i * width, freq.to_numpy(), width, label=m, color=f"C{i}")
      ax.set_xticks(np.arange(len(cats)) + 0.4 - width / 2, cats, fontsize=6, rotation=45)
    ax.set_title(column, fontsize=9)
  for ax in axes.ravel()[len(columns):]:
    ax.axis("off")
  axes[0, 0].legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "marginals.png")))


def _association(frame: pd.DataFrame, schema) -> np.ndarray:
  """Spearman correlation of all columns (categories as their sorted codes)."""
  coded = pd.DataFrame({c: (pd.to_numeric(frame[c]) if c in schema.numeric else
                            frame[c].astype("category").cat.codes) for c in schema.columns})
  return np.nan_to_num(coded.corr(method="spearman").to_numpy())


def pair_correlations(workdir: str, schema, samples: dict[str, pd.DataFrame]) -> str:
  """`pair_correlations.png`: the real rows' column correlations and each method's
  absolute difference from them (first table, first seed)."""
  real = _association(samples["real"], schema)
  others = [m for m in samples if m != "real"]
  fig, axes = plotting.subplots(1, 1 + len(others), figsize=(3.6 * (1 + len(others)), 3.4),
                                squeeze=False)
  image = axes[0, 0].imshow(real, vmin=-1, vmax=1, cmap="RdBu_r")
  axes[0, 0].set_title("real: Spearman", fontsize=9)
  fig.colorbar(image, ax=axes[0, 0], fraction=0.046)
  for ax, m in zip(axes[0, 1:], others):
    diff = np.abs(_association(samples[m], schema) - real)
    image = ax.imshow(diff, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"|{m} - real| (mean {diff.mean():.3f})", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
  for ax in axes.ravel():
    ax.set_xticks([])
    ax.set_yticks([])
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir,
                                                                 "pair_correlations.png")))
