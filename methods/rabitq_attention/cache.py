"""The per-layer RaBitQ state carried in `KVCache.state`, and chunked quantisation.

Positions of the cache are split into three regions:

    [0, num_sink)          attention sinks, full precision
    [num_sink, qlen)       quantised: 1-bit rotated keys + per-token scalars
    [qlen, kv_length)      the recent tail, full precision (<= recent_window + interval + 1)

Prefill (a call with T > 1) sets the key centre c_k (mean prefill key) and the query
centre c_q (mean prefill query of each KV group) per layer and head, quantises the
prefill keys and leaves the last `recent_window` tokens in the tail. After each decode
step, when the tail is longer than recent_window + interval, its oldest `interval`
tokens are quantised (one chunk, `lax.cond` + `dynamic_update_slice`), so the tail
stays bounded as the cache grows (RaBitQCache's lazy update).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.models import transformer
from kernels_pallas import rabitq_scores as rs_kernel
from kernels_pallas import sparse_decode_attention as sd_kernel
from methods.rabitq_attention import quantization


@dataclasses.dataclass(frozen=True)
class RaBitQConfig:
  """Static settings of RaBitQ sparse decoding.

  Attributes:
    num_sink: first tokens kept in full precision and always attended.
    recent_window: most recent tokens kept in full precision and always attended.
    interval: tokens quantised at once when the tail grows past recent_window + interval.
    top_p: default attention mass the selection must reach (stored in the state, so
      it can change without recompiling).
    max_budget: static upper bound K on the attended tokens per query head.
    query_bits: bits of the rotated-query code (4: binary x INT4).
    randomized_rounding: unbiased randomised query rounding (else round-to-nearest).
    center_keys, center_queries: subtract c_k (resp. c_q) before quantising.
    use_kernels: Pallas kernels (True), jnp references (False) or None = kernels on
      GPU/TPU and references on CPU.
    interpret: run the Pallas kernels in interpret mode (CPU tests).
    score_blocks, decode_blocks: the kernels' tile sizes.

  Example:
    >>> rcfg = RaBitQConfig(num_sink=4, recent_window=64, interval=32, max_budget=256)
    >>> rcfg.forced_tokens                                   # 4 + 64 + 32 + 1
    101
  """
  num_sink: int = 4
  recent_window: int = 64
  interval: int = 32
  top_p: float = 0.9
  max_budget: int = 256
  query_bits: int = 4
  randomized_rounding: bool = True
  center_keys: bool = True
  center_queries: bool = True
  use_kernels: bool | None = None
  interpret: bool = False
  score_blocks: rs_kernel.RaBitQScoresBlocks = rs_kernel.RaBitQScoresBlocks()
  decode_blocks: sd_kernel.SparseDecodeBlocks = sd_kernel.SparseDecodeBlocks()

  def __post_init__(self):
    for name in ("num_sink", "recent_window", "interval", "max_budget", "query_bits"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"RaBitQConfig.{name}={value!r}; expected an int")
    if self.query_bits > 16:
      raise ValueError(f"RaBitQConfig.query_bits={self.query_bits} must be <= 16")
    for name in ("recent_window", "interval", "max_budget", "query_bits"):
      if getattr(self, name) < 1:
        raise ValueError(f"RaBitQConfig.{name}={getattr(self, name)} must be >= 1")
    if self.num_sink < 0:
      raise ValueError(f"RaBitQConfig.num_sink={self.num_sink} must be >= 0")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"RaBitQConfig.top_p={self.top_p} must be in (0, 1]")
    if self.max_budget < self.forced_tokens + 1:
      raise ValueError(
          f"RaBitQConfig.max_budget={self.max_budget} must exceed the always-attended tokens "
          f"num_sink + recent_window + interval + 1 = {self.forced_tokens}")

  @property
  def tail_len(self) -> int:
    """The longest full-precision tail seen by a decode step."""
    return self.recent_window + self.interval + 1

  @property
  def forced_tokens(self) -> int:
    """The always-attended tokens: sinks plus the longest tail."""
    return self.num_sink + self.tail_len

  def kernels_enabled(self) -> bool:
    """Whether decoding runs the Pallas kernels (else their jnp references)."""
    if self.use_kernels is None:
      return jax.default_backend() in ("gpu", "tpu")
    return bool(self.use_kernels)


class LayerState(NamedTuple):
  """RaBitQ state of one layer (B batch, KV heads, S cache positions, D head width).

  rotation: (KV, D', D') random orthogonal P per head, D' = D rounded up to a multiple
    of 32 (narrower heads are zero-padded).
  key_center, query_center: (B, KV, D) c_k and c_q.
  words: (B, KV, S, D'/32) uint32 sign bits; norm, ip_correction, center_term:
    (B, KV, S) float32 (see quantization.KeyCodes). Valid on [num_sink, qlen).
  qlen: int32, end of the quantised region.
  ready: bool, whether prefill has set the centres.
  rng: uint32 (2,) base PRNG key for randomised query rounding.
  top_p: float32 target mass.
  last_count: (B, H) int32 tokens attended per query head at the last decode step.
  last_mass: (B, H) float32 estimated mass of those tokens.
  """
  rotation: jax.Array
  key_center: jax.Array
  query_center: jax.Array
  words: jax.Array
  norm: jax.Array
  ip_correction: jax.Array
  center_term: jax.Array
  qlen: jax.Array
  ready: jax.Array
  rng: jax.Array
  top_p: jax.Array
  last_count: jax.Array
  last_mass: jax.Array

  def codes(self) -> quantization.KeyCodes:
    """The stored key codes as `KeyCodes` (leading axes (B, KV, S))."""
    return quantization.KeyCodes(self.words, self.norm, self.ip_correction, self.center_term)


def init_layer_state(rcfg: RaBitQConfig, model_config: transformer.TransformerConfig,
                     batch_size: int, max_len: int, key: jax.Array) -> LayerState:
  """An empty layer state (nothing quantised yet, qlen = num_sink).

  Args:
    rcfg: the RaBitQ settings.
    model_config: the model's `TransformerConfig` (heads, head width).
    batch_size: B.
    max_len: S, the cache length (>= max_budget and the forced tokens).
    key: PRNG key of the per-head rotations P and of the rounding noise.

  Returns:
    A `LayerState`.

  Example:
    >>> st = init_layer_state(rcfg, lm_config, 1, 4096, jax.random.PRNGKey(0))
  """
  kv, d, h = model_config.kv_heads, model_config.dim_per_head, model_config.num_heads
  dp = quantization.padded_dim(d)                          # code width
  if max_len < max(rcfg.max_budget, rcfg.forced_tokens):
    raise ValueError(f"max_len={max_len} must be >= max_budget={rcfg.max_budget} and the "
                     f"always-attended tokens ({rcfg.forced_tokens})")
  rot_key, rng = jax.random.split(key)
  rotation = jax.vmap(lambda k: quantization.random_rotation(k, dp))(
      jax.random.split(rot_key, kv))
  zeros = jnp.zeros((batch_size, kv, max_len), jnp.float32)
  return LayerState(
      rotation=rotation,
      key_center=jnp.zeros((batch_size, kv, d), jnp.float32),
      query_center=jnp.zeros((batch_size, kv, d), jnp.float32),
      words=jnp.zeros((batch_size, kv, max_len, dp // quantization.WORD_BITS), jnp.uint32),
      norm=zeros, ip_correction=jnp.ones_like(zeros), center_term=zeros,
      qlen=jnp.asarray(rcfg.num_sink, jnp.int32), ready=jnp.asarray(False),
      rng=rng, top_p=jnp.asarray(rcfg.top_p, jnp.float32),
      last_count=jnp.zeros((batch_size, h), jnp.int32),
      last_mass=jnp.zeros((batch_size, h), jnp.float32))


def init_cache(rcfg: RaBitQConfig, model_config: transformer.TransformerConfig,
               batch_size: int, max_len: int, key: jax.Array) -> transformer.KVCache:
  """A `KVCache` whose `state` holds one `LayerState` per layer (each with its own
  rotations, from `jax.random.split(key, num_layers)`).

  Args:
    rcfg: the RaBitQ settings.
    model_config: the model's `TransformerConfig`.
    batch_size: B.
    max_len: S, the cache length.
    key: PRNG key.

  Returns:
    The cache, for a `Transformer` built with `make_attention_fn(rcfg)`.

  Example:
    >>> cache = init_cache(rcfg, lm_config, 2, 1024, jax.random.PRNGKey(0))
  """
  cache = transformer.init_cache(model_config, batch_size, max_len)
  keys = jax.random.split(key, model_config.num_layers)
  state = tuple(init_layer_state(rcfg, model_config, batch_size, max_len, k) for k in keys)
  return cache._replace(state=state)


def with_top_p(cache: transformer.KVCache, top_p: float) -> transformer.KVCache:
  """The same cache with every layer's target mass set to top_p (a traced value, so a
  jitted decoding function is not recompiled).

  Example:
    >>> logits = decode(with_top_p(cache, 0.95))
  """
  if cache.state is None:
    raise ValueError("with_top_p: cache.state is None; expected a RaBitQ cache "
                     "(methods.rabitq_attention.init_cache)")
  if not isinstance(top_p, jax.core.Tracer) and not 0.0 < float(top_p) <= 1.0:
    raise ValueError(f"with_top_p: top_p={top_p!r}; expected a number in (0, 1]")
  p = jnp.asarray(top_p, jnp.float32)
  return cache._replace(state=tuple(s._replace(top_p=p) for s in cache.state))


def quantize_block(state: LayerState, k_block: jax.Array) -> quantization.KeyCodes:
  """Codes of keys k_block (B, N, KV, D) with the state's rotations and centres
  (`quantize_keys` per KV head); leading axes of the result (B, KV, N)."""
  kt = jnp.swapaxes(k_block, 1, 2)                        # (B, KV, N, D)
  return quantization.quantize_keys(kt, state.rotation, state.key_center, state.query_center)


def write_codes(state: LayerState, codes: quantization.KeyCodes, start) -> LayerState:
  """Stores codes (B, KV, N, ...) at positions start .. start + N."""
  return state._replace(
      words=jax.lax.dynamic_update_slice_in_dim(state.words, codes.words, start, axis=2),
      norm=jax.lax.dynamic_update_slice_in_dim(state.norm, codes.norm, start, axis=2),
      ip_correction=jax.lax.dynamic_update_slice_in_dim(state.ip_correction,
                                                        codes.ip_correction, start, axis=2),
      center_term=jax.lax.dynamic_update_slice_in_dim(state.center_term, codes.center_term,
                                                      start, axis=2))


def prefill_update(rcfg: RaBitQConfig, state: LayerState, q: jax.Array, k: jax.Array,
                   kv_length: jax.Array) -> LayerState:
  """After a T > 1 call: set the centres (first time), quantise the whole cache and move
  qlen to kv_length - recent_window (at least num_sink)."""
  b, s, kv, d = k.shape
  valid = (jnp.arange(s) < kv_length)[None, :, None, None]
  count = jnp.maximum(kv_length, 1).astype(jnp.float32)
  new_kc = jnp.sum(jnp.where(valid, k.astype(jnp.float32), 0.0), axis=1) / count
  t, h = q.shape[1], q.shape[2]
  new_qc = jnp.mean(q.astype(jnp.float32).reshape(b, t, kv, h // kv, d), axis=(1, 3))
  kc = jnp.where(state.ready, state.key_center, new_kc) if rcfg.center_keys else (
      jnp.zeros_like(new_kc))
  qc = jnp.where(state.ready, state.query_center, new_qc) if rcfg.center_queries else (
      jnp.zeros_like(new_qc))
  state = state._replace(key_center=kc, query_center=qc, ready=jnp.asarray(True))
  codes = quantize_block(state, k)
  state = write_codes(state, codes, 0)
  qlen = jnp.maximum(state.qlen, jnp.maximum(rcfg.num_sink, kv_length - rcfg.recent_window))
  return state._replace(qlen=qlen.astype(jnp.int32))


def maybe_quantize_chunk(rcfg: RaBitQConfig, state: LayerState, k: jax.Array,
                         kv_length: jax.Array) -> LayerState:
  """Quantises [qlen, qlen + interval) when the tail exceeds recent_window + interval."""

  def quantize(st):
    block = jax.lax.dynamic_slice_in_dim(k, st.qlen, rcfg.interval, axis=1)
    st = write_codes(st, quantize_block(st, block), st.qlen)
    return st._replace(qlen=st.qlen + rcfg.interval)

  tail = kv_length - state.qlen
  return jax.lax.cond(tail > rcfg.recent_window + rcfg.interval, quantize, lambda st: st,
                      state)
