"""Choosing one chunk from scored candidates.

``thres_weighted_merge`` (TapSampling's selection): with candidates x_i and verifier
scores s_i, let S = {i : s_i >= tau}. If S is empty the best candidate x_{argmax s} is
returned; otherwise the score-weighted mean

    x* = sum_{i in S} s_i x_i / sum_{i in S} s_i

(the plain mean over S when those scores sum to zero). ``argmax`` is tau = +inf.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from common import checks

Array = jax.Array


def thres_weighted_merge(chunks: Array, scores: Array, threshold) -> Array:
  """The score-weighted mean of the candidates at or above ``threshold``, else the argmax.

  Args:
    chunks: (n, H, a) candidates.
    scores: (n,) verifier scores.
    threshold: tau in [0, 1] (progress scores live there).

  Returns:
    (H, a), the merged chunk.

  Example:
    >>> thres_weighted_merge(jnp.array([[[0.]], [[1.]]]), jnp.array([0.2, 0.6]), 0.5)
    Array([[1.]], dtype=float32)
  """
  checks.scalar("threshold", threshold, strict=False, high=1.0)
  if chunks.ndim != 3 or scores.shape != chunks.shape[:1]:
    raise ValueError(f"expected chunks (n, H, a) and scores (n,), got {chunks.shape} and "
                     f"{scores.shape}")
  above = scores >= threshold
  w = jnp.where(above, scores, 0.0)
  total = jnp.sum(w)
  uniform = above.astype(chunks.dtype) / jnp.maximum(jnp.sum(above), 1)
  weights = jnp.where(total != 0, w / jnp.where(total != 0, total, 1.0), uniform)
  merged = jnp.tensordot(weights, chunks, axes=1)
  return jnp.where(jnp.any(above), merged, chunks[jnp.argmax(scores)])


def argmax(chunks: Array, scores: Array) -> Array:
  """The highest-scoring candidate, (H, a)."""
  return chunks[jnp.argmax(scores)]
