"""What RaBitQ top-p selection is compared against (dense masks over the cache).

All functions act on one decode query per row: q (..., D), keys/values (..., S, D),
`valid` (..., S) or (S,) bool, and `forced` (sinks + recent window) kept by every
method. Each selection returns a dense (..., S) bool mask; `masked_attention` then
gives the exact attention restricted to it.

- full attention: every valid token.
- oracle top-k: the k tokens of largest exact score q.k (fixed budget).
- oracle top-p: the smallest set whose exact attention mass reaches p.
- Quest (Tang et al., ICML 2024): keys are cut into chunks of `chunk` tokens with
  per-channel min m and max M; a chunk's upper bound on q.k is
  sum_i max(q_i m_i, q_i M_i), and the `num_chunks` chunks with the largest bounds
  are read in full.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from methods.rabitq_attention import selection


def exact_logits(q: jax.Array, k: jax.Array) -> jax.Array:
  """Exact attention logits s_j = <q, k_j> / sqrt(D).

  Args:
    q: (..., D) queries; k: (..., S, D) keys.

  Returns:
    (..., S) float32.

  Example:
    >>> exact_logits(jnp.ones((4,)), jnp.ones((3, 4)))
    Array([2., 2., 2.], dtype=float32)
  """
  return jnp.einsum("...d,...sd->...s", q.astype(jnp.float32), k.astype(jnp.float32)) / (
      jnp.sqrt(jnp.float32(q.shape[-1])))


def masked_attention(q, k, v, mask) -> jax.Array:
  """Exact attention restricted to the tokens of `mask`:

      out = sum_{j in M} softmax_M(s)_j v_j,   s_j = <q, k_j> / sqrt(D).

  Args:
    q: (..., D); k, v: (..., S, D); mask: (..., S) bool (at least one token).

  Returns:
    (..., D) float32.

  Example:
    >>> masked_attention(q, k, v, top_k_mask)            # attention over the top-k only
  """
  logits = jnp.where(mask, exact_logits(q, k), -jnp.inf)
  return jnp.einsum("...s,...sd->...d", jax.nn.softmax(logits, axis=-1), v.astype(jnp.float32))


def full_attention(q, k, v, valid) -> jax.Array:
  """Exact attention over every valid token (`masked_attention` with M = valid).

  Example:
    >>> full_attention(q, k, v, jnp.ones(k.shape[-2], bool))
  """
  return masked_attention(q, k, v, jnp.broadcast_to(valid, k.shape[:-1]))


def oracle_top_k(q, k, valid, budget: int, forced=None) -> jax.Array:
  """Mask of the forced tokens and the `budget` others of largest exact score q.k
  (`selection.top_k_mask` on `exact_logits`).

  Example:
    >>> oracle_top_k(q, k, valid, 64, forced)             # (..., S) bool
  """
  return selection.top_k_mask(exact_logits(q, k), valid, budget, forced)


def oracle_top_p(q, k, valid, p: float, forced=None) -> jax.Array:
  """Mask of the smallest set (forced first) whose exact attention mass reaches p
  (`selection.top_p_mask` on `exact_logits`).

  Example:
    >>> oracle_top_p(q, k, valid, 0.9, forced)            # (..., S) bool
  """
  return selection.top_p_mask(exact_logits(q, k), valid, p, forced)


def quest_bounds(q: jax.Array, k: jax.Array, valid: jax.Array, chunk: int) -> jax.Array:
  """Quest's per-chunk upper bounds of q.k from the channel-wise min m and max M of
  the chunk's valid keys:

      bound_c = sum_i max(q_i m_{c,i}, q_i M_{c,i})  >=  q.k_j  for every j in chunk c.

  Args:
    q: (..., D) queries; k: (..., S, D) keys, S a multiple of `chunk`.
    valid: (..., S) or (S,) bool.
    chunk: tokens per chunk.

  Returns:
    (..., S / chunk) bounds (-inf for chunks without a valid token).

  Example:
    >>> bounds = quest_bounds(q, k, valid, 16)
  """
  s, d = k.shape[-2:]
  if s % chunk:
    raise ValueError(f"S={s} must be a multiple of the Quest chunk size {chunk}")
  lead = jnp.broadcast_shapes(valid.shape, k.shape[:-1])
  valid = jnp.broadcast_to(valid, lead)
  k = jnp.broadcast_to(k, lead + (d,))
  kc = k.reshape(k.shape[:-2] + (s // chunk, chunk, d)).astype(jnp.float32)
  vc = valid.reshape(valid.shape[:-1] + (s // chunk, chunk))[..., None]
  hi = jnp.max(jnp.where(vc, kc, -jnp.inf), axis=-2)
  lo = jnp.min(jnp.where(vc, kc, jnp.inf), axis=-2)
  qq = q[..., None, :].astype(jnp.float32)
  bound = jnp.sum(jnp.maximum(qq * hi, qq * lo), axis=-1)
  return jnp.where(jnp.any(vc[..., 0], axis=-1), bound, -jnp.inf)


def quest_mask(bounds: jax.Array, valid: jax.Array, num_chunks: int, chunk: int,
               forced: jax.Array | None = None) -> jax.Array:
  """Quest's selection from precomputed bounds: the `num_chunks` chunks of largest
  bound, read in full (valid tokens only), plus the forced tokens.

  Computing `quest_bounds` once and this mask for several budgets is what a budget
  sweep does.

  Args:
    bounds: (..., C) `quest_bounds`.
    valid: (..., C * chunk) or (C * chunk,) bool.
    num_chunks: chunks read (clipped to [1, C]).
    chunk: tokens per chunk.
    forced: optional (..., C * chunk) bool tokens always kept.

  Returns:
    (..., C * chunk) bool.

  Example:
    >>> bounds = quest_bounds(q, k, valid, 16)
    >>> masks = [quest_mask(bounds, valid, n, 16, forced) for n in (2, 8, 32)]
  """
  n = max(1, min(int(num_chunks), bounds.shape[-1]))
  _, idx = jax.lax.top_k(bounds, n)
  chunk_mask = selection.put_along(jnp.zeros(bounds.shape, bool), idx,
                                   jnp.ones(idx.shape, bool))
  valid = jnp.broadcast_to(valid, chunk_mask.shape[:-1] + (bounds.shape[-1] * chunk,))
  mask = jnp.repeat(chunk_mask, chunk, axis=-1) & valid
  if forced is not None:
    mask = mask | (jnp.broadcast_to(forced, mask.shape) & valid)
  return mask


def quest(q, k, valid, num_chunks: int, chunk: int, forced=None) -> jax.Array:
  """Quest (Tang et al., ICML 2024): the mask of the `num_chunks` chunks with the
  largest `quest_bounds`, plus the forced tokens.

  Args:
    q: (..., D); k: (..., S, D); valid: (..., S) or (S,) bool.
    num_chunks: chunks read; chunk: tokens per chunk (S a multiple of it).
    forced: optional (..., S) bool.

  Returns:
    (..., S) bool.

  Example:
    >>> quest(q, k, valid, 8, 16, forced)                 # 8 chunks of 16 tokens
  """
  return quest_mask(quest_bounds(q, k, valid, chunk), valid, num_chunks, chunk, forced)
