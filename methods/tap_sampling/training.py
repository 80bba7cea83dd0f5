"""Batches and optimizers for training the policy, the Action-VAE and the verifier.

Every batch function is a pure function of (seed, step), as ``common.train.train``
needs for exact resume. The optimizer is TapSampling's: AdamW with the learning rate
decayed linearly to 0 over the run and gradients clipped to norm 1; the VAE also keeps
an EMA of its parameters (``vae.with_parameter_ema``), which is what samples.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import optax

from methods.tap_sampling import vae as vae_lib
from methods.tap_sampling import windows


def chunk_batch_fn(data: windows.ChunkData, batch_size: int) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) -> {"obs": (B, o), "chunks": (B, H, a)}, rows drawn uniformly."""
  if len(data.obs) == 0:
    raise ValueError("the chunk dataset is empty")

  def batch_fn(seed: int, step: int) -> dict:
    idx = np.random.default_rng([seed, step]).integers(0, len(data.obs), batch_size)
    return {"obs": data.obs[idx], "chunks": data.chunks[idx]}
  return batch_fn


def window_batch_fn(demos, batch_size: int, horizon: int, scale, min_len: int = 3,
                    max_len: int = 12) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) over ``windows.progress_windows`` (without the direction flag)."""
  def batch_fn(seed: int, step: int) -> dict:
    batch = windows.progress_windows(demos, seed, step, batch_size=batch_size,
                                     horizon=horizon, scale=scale, min_len=min_len,
                                     max_len=max_len)
    batch.pop("forward")
    return batch
  return batch_fn


def optimizer(learning_rate: float, num_steps: int, weight_decay: float = 1e-4,
              ema_decay: float | None = None) -> optax.GradientTransformation:
  """clip_by_global_norm(1) -> AdamW(lr linearly to 0), optionally with a parameter EMA."""
  schedule = optax.linear_schedule(learning_rate, 0.0, num_steps)
  opt = optax.chain(optax.clip_by_global_norm(1.0),
                    optax.adamw(schedule, weight_decay=weight_decay))
  return opt if ema_decay is None else vae_lib.with_parameter_ema(opt, ema_decay)
