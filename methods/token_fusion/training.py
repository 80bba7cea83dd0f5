"""Batches and batched evaluation for token fusion's training stages.

The tokenizer trains on random crops of photos; the 2D backbone and STE train on source
pairs simulated from fresh crops every step (``common.data.fusion_images.make_pairs``)
or drawn from a fixed set of real pairs (a paper dataset's folder). Both batch
functions are pure functions of (seed, step), as ``common.train`` requires.
"""

from __future__ import annotations

from typing import Callable

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


def pairs_batch_fn(source, task: str, batch_size: int, size: int) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) -> {"a", "b"} (B, size, size).

  Args:
    source: prepared photos (a dict; pairs are simulated with ``task`` from fresh
      crops) or a ``FusionPair`` of real (N, size, size) sources (pairs drawn
      uniformly with replacement).
    task: a key of ``fusion_images.TASKS`` (used with photos).
    batch_size: B.
    size: the crop side.
  """
  if isinstance(source, fi.FusionPair):
    a, b = np.asarray(source.a), np.asarray(source.b)
    if len(a) < 1:
      raise ValueError("source holds no pairs")

    def real_batch(seed: int, step: int) -> dict:
      idx = np.random.default_rng([seed, step]).integers(0, len(a), batch_size)
      return {"a": a[idx], "b": b[idx]}
    return real_batch

  def simulated_batch(seed: int, step: int) -> dict:
    s = _step_seed(seed, step)
    pair = fi.make_pairs(task, fi.random_crops(photos, s, batch_size, size, scale=None), s + 1)
    return {"a": pair.a, "b": pair.b}
  photos = source
  return simulated_batch


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
