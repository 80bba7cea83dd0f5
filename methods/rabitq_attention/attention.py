"""RaBitQ sparse decoding as a `Transformer` attention_fn.

One decode step (T = 1) of query head h (KV head h // G) at position t:

  1. estimate: s_j = <q, k_j> / sqrt(d) for the quantised tokens from the 1-bit keys
     and the rotated 4-bit query (estimator.py, kernel `rabitq_scores`); exact q.k_j
     for the sinks and the full-precision tail;
  2. select: adaptive top-p over softmax(s) (selection.py), sinks and tail forced,
     at most `max_budget` tokens;
  3. attend: exact softmax attention over the gathered selected keys/values only
     (kernel `sparse_decode_attention`);
  4. grow: quantise the next chunk of the tail if it is too long (cache.py).

Prefill (T > 1) uses exact attention and quantises the prompt's keys. Randomised
query rounding draws u from the state's base key folded with the position and the
layer. References: Gao & Long, RaBitQ (SIGMOD 2024); RaBitQCache (ICML 2026).

Example:
    >>> rcfg = RaBitQConfig(num_sink=4, recent_window=32, interval=16, max_budget=96)
    >>> model = Transformer(lm_config, attention_fn=make_attention_fn(rcfg))
    >>> cache = init_cache(rcfg, lm_config, batch, max_len, jax.random.PRNGKey(0))
    >>> out = sampling.generate(model, params, prompt, key, max_new_tokens=64,
    ...                         cache=cache)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.models import transformer
from kernels_pallas import sparse_decode_attention as sd_kernel
from methods.rabitq_attention import estimator
from methods.rabitq_attention import quantization
from methods.rabitq_attention import selection
from methods.rabitq_attention.cache import LayerState
from methods.rabitq_attention.cache import maybe_quantize_chunk
from methods.rabitq_attention.cache import prefill_update
from methods.rabitq_attention.cache import RaBitQConfig


def make_attention_fn(rcfg: RaBitQConfig):
  """The stateful `Transformer` attention_fn of RaBitQ sparse decoding.

  attention_fn(q, k, v, *, q_positions, kv_length, layer, state) -> (out, state):
  exact attention and `prefill_update` for a call with T > 1 tokens; `decode_step`
  (estimate, select top-p, sparse attention) and `maybe_quantize_chunk` for T = 1.

  Args:
    rcfg: the RaBitQ settings (static).

  Returns:
    The attention_fn; the cache must come from `init_cache(rcfg, ...)`.

  Example:
    >>> model = Transformer(lm_config, attention_fn=make_attention_fn(rcfg))
  """

  def attention_fn(q, k, v, *, q_positions, kv_length, layer, state: LayerState):
    if q.shape[1] > 1:
      out = transformer.dot_product_attention(q, k, v, q_positions=q_positions,
                                              kv_length=kv_length, layer=layer)
      return out, prefill_update(rcfg, state, q, k, kv_length)
    out, state = decode_step(rcfg, state, q, k, v, q_positions[0], kv_length, layer)
    return out, maybe_quantize_chunk(rcfg, state, k, kv_length)

  return attention_fn


def rotated_query_code(rcfg: RaBitQConfig, state: LayerState, qh: jax.Array,
                       key: jax.Array) -> tuple[quantization.QueryCode, jax.Array]:
  """The B_q-bit code of q' = P^T (q - c_q) and the bias <q, c_k> for queries
  qh (B, KV, G, D); `key` draws the rounding noise. Returns (QueryCode (B, KV, G),
  bias (B, KV, G))."""
  centred = quantization.pad_last(qh - state.query_center[:, :, None, :],
                                  state.rotation.shape[-1])
  q_rot = centred @ state.rotation[None]
  code = quantization.quantize_query(q_rot, key, bits=rcfg.query_bits,
                                     randomized=rcfg.randomized_rounding)
  bias = jnp.einsum("bkgd,bkd->bkg", qh, state.key_center)
  return code, bias


def decode_step(rcfg: RaBitQConfig, state: LayerState, q, k, v, position, kv_length,
                layer: int):
  """One decode step of RaBitQ sparse attention for the new token at `position`:

      s_j = est<q, k_j> / sqrt(d) (quantised j),  q.k_j / sqrt(d) (sinks, tail);
      M = top-p(softmax(s), p = state.top_p, forced = sinks + tail, <= max_budget);
      out = sum_{j in M} softmax_M(q.k / sqrt(d))_j v_j.

  Args:
    rcfg: the RaBitQ settings.
    state: the layer's `LayerState` (after prefill).
    q: (B, 1, H, D) the query; k, v: (B, S, KV, D) the full-precision cache.
    position: the query's position; kv_length: tokens in the cache.
    layer: the layer index (folded into the rounding key).

  Returns:
    (out (B, 1, H, D), state with last_count / last_mass of this step).

  Example:
    >>> out, state = decode_step(rcfg, state, q, k, v, pos, pos + 1, 0)
  """
  b, _, h, d = q.shape
  s, kv = k.shape[1], k.shape[2]
  g = h // kv
  qh = q[:, 0].astype(jnp.float32).reshape(b, kv, g, d)
  scale = 1.0 / math.sqrt(d)
  # 1. Estimated logits for every position (only [num_sink, qlen) is used).
  key = jax.random.fold_in(jax.random.fold_in(state.rng, position), layer)
  code, bias = rotated_query_code(rcfg, state, qh, key)
  codes = state.codes()
  flat = lambda x: x.reshape((b * kv,) + x.shape[2:])
  est = estimator.kernel_scores(
      quantization.KeyCodes(*map(flat, codes)),
      quantization.QueryCode(*map(flat, code)), flat(bias),
      use_kernel=rcfg.kernels_enabled(), interpret=rcfg.interpret, blocks=rcfg.score_blocks)
  logits = est.reshape(b, kv, g, s) * scale
  # Exact logits for the sinks and the tail [qlen, qlen + tail_len).
  pos = jnp.arange(s)
  if rcfg.num_sink:
    sink_logits = jnp.einsum("bkgd,bskd->bkgs", qh, k[:, :rcfg.num_sink].astype(
        jnp.float32)) * scale
    logits = logits.at[..., :rcfg.num_sink].set(sink_logits)
  start = jnp.minimum(state.qlen, s - rcfg.tail_len)
  tail_k = jax.lax.dynamic_slice_in_dim(k, start, rcfg.tail_len, axis=1).astype(jnp.float32)
  tail_logits = jnp.einsum("bkgd,bskd->bkgs", qh, tail_k) * scale
  tail_pos = start + jnp.arange(rcfg.tail_len)
  old = jax.lax.dynamic_slice_in_dim(logits, start, rcfg.tail_len, axis=3)
  logits = jax.lax.dynamic_update_slice_in_dim(
      logits, jnp.where(tail_pos >= state.qlen, tail_logits, old), start, axis=3)
  # 2. Adaptive top-p with sinks and tail forced.
  valid = (pos < kv_length) & (pos <= position)
  forced = (pos < rcfg.num_sink) | (pos >= state.qlen)
  sel = selection.top_p_select(logits, valid, state.top_p, rcfg.max_budget, forced)
  # 3. Exact attention over the gathered tokens.
  bi = jnp.arange(b)[:, None, None, None]
  ki = jnp.arange(kv)[None, :, None, None]
  k_sel = k[bi, sel.indices, ki]                          # (B, KV, G, K, D)
  v_sel = v[bi, sel.indices, ki]
  rows = b * h
  args = (qh.reshape(rows, d), k_sel.reshape(rows, -1, d), v_sel.reshape(rows, -1, d),
          sel.keep.reshape(rows, -1))
  if rcfg.kernels_enabled():
    out = sd_kernel.sparse_decode_attention(*args, blocks=rcfg.decode_blocks,
                                            interpret=rcfg.interpret)
  else:
    out = sd_kernel.sparse_decode_attention_reference(*args)
  out = out.reshape(b, 1, h, d).astype(q.dtype)
  state = state._replace(last_count=sel.count.reshape(b, h).astype(jnp.int32),
                         last_mass=sel.mass.reshape(b, h))
  return out, state


class DenseEstimate(NamedTuple):
  """Analysis output: estimated logits (..., S) and the unit-estimate codes."""
  logits: jax.Array
  codes: quantization.KeyCodes


def dense_estimated_logits(q: jax.Array, k: jax.Array, key: jax.Array, *,
                           center_keys: bool = True, center_queries: bool = True,
                           query_center: jax.Array | None = None,
                           randomized: bool = True, query_bits: int = 4) -> DenseEstimate:
  """RaBitQ estimated logits of queries q (Q, D) against keys k (S, D), for studying
  selection on a cache outside the decoding loop:

      s_ij = [<q_i, c_k> + ||k_j - c_k|| <x_bar_j, q_bar_i>/<o_bar_j, o_j>
              + <c_q, k_j - c_k>] / sqrt(D).

  Args:
    q: (Q, D) queries; k: (S, D) keys.
    key: PRNG key of the rotation and the rounding noise.
    center_keys: c_k = mean key (else 0).
    center_queries: c_q = `query_center`, or the mean of q when None (else 0).
    query_center: optional (D,) c_q.
    randomized: randomised (else nearest) query rounding.
    query_bits: B_q.

  Returns:
    `DenseEstimate(logits (Q, S), codes)`.

  Example:
    >>> est = dense_estimated_logits(q, k, jax.random.PRNGKey(0)).logits
  """
  d = k.shape[-1]
  dp = quantization.padded_dim(d)
  rot_key, round_key = jax.random.split(key)
  rotation = quantization.random_rotation(rot_key, dp)
  k = k.astype(jnp.float32)
  q = q.astype(jnp.float32)
  kc = jnp.mean(k, axis=0) if center_keys else jnp.zeros((d,), jnp.float32)
  if center_queries:
    qc = jnp.mean(q, axis=0) if query_center is None else query_center.astype(jnp.float32)
  else:
    qc = jnp.zeros((d,), jnp.float32)
  codes = quantization.quantize_keys(k, rotation, kc, qc)
  code = quantization.quantize_query(quantization.pad_last(q - qc, dp) @ rotation, round_key,
                                     bits=query_bits,
                                     randomized=randomized)
  est = jax.vmap(lambda c: estimator.estimate_scores(codes, c))(code)  # (Q, S)
  est = est + (q @ kc)[:, None]
  return DenseEstimate(est / math.sqrt(d), codes)
