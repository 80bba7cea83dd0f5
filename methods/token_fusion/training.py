"""Batches and batched evaluation for token fusion's training stages.

The tokenizer trains on fresh random crops of photos every step; the 2D backbone and
STE train on a fixed pool of source pairs, simulated once from crops of the training
photos (``common.data.fusion_images.make_pairs``) or read from a paper dataset's
folder, so that STE's inputs from the frozen parts are computed once per pool. Both
batch functions are pure functions of (seed, step), as ``common.train`` requires.
"""

from __future__ import annotations

from typing import Callable, Mapping

import jax
import numpy as np

from common.data import fusion_images as fi
from methods.token_fusion import metrics


def _step_seed(seed: int, step: int) -> int:
  return int(np.random.default_rng([seed, step]).integers(2**31))


def crops_batch_fn(photos, batch_size: int, size: int) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) -> {"images": (B, size, size)} random crops of ``photos``
  (prepared with ``fusion_images.prepare_photos``)."""
  def batch_fn(seed: int, step: int) -> dict:
    return {"images": fi.random_crops(photos, _step_seed(seed, step), batch_size, size,
                                      scale=None)}
  return batch_fn


def simulated_pool(photos, task: str, num: int, size: int, seed: int) -> fi.FusionPair:
  """``num`` training pairs of ``task`` simulated from random crops of ``photos``."""
  return fi.make_pairs(task, fi.random_crops(photos, seed, num, size, scale=None), seed + 1)


def pool_batch_fn(pool: Mapping[str, np.ndarray], batch_size: int
                  ) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) -> {name: (B, ...)}: the same B rows of every array of the
  pool, drawn uniformly with replacement."""
  pool = {k: np.asarray(v) for k, v in pool.items()}
  sizes = {len(v) for v in pool.values()}
  if len(sizes) != 1 or 0 in sizes:
    raise ValueError(f"pool arrays must share one non-zero length, got "
                     f"{ {k: len(v) for k, v in pool.items()} }")
  n = sizes.pop()

  def batch_fn(seed: int, step: int) -> dict:
    idx = np.random.default_rng([seed, step]).integers(0, n, batch_size)
    return {k: v[idx] for k, v in pool.items()}
  return batch_fn


@jax.jit
def _metrics_with_gt(a, b, f, gt):
  return jax.vmap(metrics.all_metrics)(a, b, f, gt)


@jax.jit
def _metrics(a, b, f):
  return jax.vmap(metrics.all_metrics)(a, b, f)


def batched_metrics(a, b, f, ground_truth=None) -> dict:
  """``metrics.all_metrics`` of each image of (n, H, W) batches: {name: (n,)}."""
  if ground_truth is None:
    return _metrics(a, b, f)
  return _metrics_with_gt(a, b, f, ground_truth)
