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
  """q.k / sqrt(d): q (..., D), k (..., S, D) -> (..., S)."""
  return jnp.einsum("...d,...sd->...s", q.astype(jnp.float32), k.astype(jnp.float32)) / (
      jnp.sqrt(jnp.float32(q.shape[-1])))


def masked_attention(q, k, v, mask) -> jax.Array:
  """softmax over the masked-in tokens of q.k/sqrt(d), times v: (..., D)."""
  logits = jnp.where(mask, exact_logits(q, k), -jnp.inf)
  return jnp.einsum("...s,...sd->...d", jax.nn.softmax(logits, axis=-1), v.astype(jnp.float32))


def full_attention(q, k, v, valid) -> jax.Array:
  return masked_attention(q, k, v, jnp.broadcast_to(valid, k.shape[:-1]))


def oracle_top_k(q, k, valid, budget: int, forced=None) -> jax.Array:
  return selection.top_k_mask(exact_logits(q, k), valid, budget, forced)


def oracle_top_p(q, k, valid, p: float, forced=None) -> jax.Array:
  return selection.top_p_mask(exact_logits(q, k), valid, p, forced)


def quest_bounds(q: jax.Array, k: jax.Array, valid: jax.Array, chunk: int) -> jax.Array:
  """Per-chunk upper bounds (..., S/chunk) of q.k from channel-wise min/max of keys."""
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


def quest(q, k, valid, num_chunks: int, chunk: int, forced=None) -> jax.Array:
  """Mask of the `num_chunks` chunks with the largest Quest bounds (plus forced)."""
  bounds = quest_bounds(q, k, valid, chunk)
  n = max(1, min(int(num_chunks), bounds.shape[-1]))
  _, idx = jax.lax.top_k(bounds, n)
  chunk_mask = jnp.zeros(bounds.shape, bool)
  chunk_mask = selection.put_along(chunk_mask, idx, jnp.ones(idx.shape, bool))
  valid = jnp.broadcast_to(valid, chunk_mask.shape[:-1] + (k.shape[-2],))
  mask = jnp.repeat(chunk_mask, chunk, axis=-1) & valid
  if forced is not None:
    mask = mask | (jnp.broadcast_to(forced, mask.shape) & valid)
  return mask
