"""Batches and the optimizer for Q-Tab's two training stages.

Stage 1 trains the numeric tokenizer (encoder, decoder and, for the RVQ ablation, the
codebooks) on rows; stage 2 trains the masked generator on the frozen tokenizer's
token sequences. Both run through ``common.train.train``, whose batches must be pure
functions of (seed, step).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from common import train as train_lib


def rows_batch_fn(array: np.ndarray, batch_size: int, name: str) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) -> {name: (B, ...)} rows drawn uniformly with replacement.

  Raises:
    ValueError: if there are fewer rows than ``batch_size``.
  """
  array = np.asarray(array)
  if len(array) < batch_size:
    raise ValueError(f"{name}: {len(array)} rows, fewer than the batch size {batch_size}")

  def batch_fn(seed: int, step: int) -> dict:
    idx = np.random.default_rng([seed, step]).integers(0, len(array), batch_size)
    return {name: array[idx]}
  return batch_fn


optimizer = train_lib.warmup_cosine_adamw
