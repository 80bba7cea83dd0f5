"""A decoder-only transformer LM (Llama/Qwen and GPT-NeoX/Pythia families), used functionally.

One `TransformerConfig` picks the family and the sizes:

  llama (Llama, Qwen2, Qwen3):   h = x + Attn(RMSNorm(x));  y = h + SwiGLU(RMSNorm(h))
  neox  (GPT-NeoX, Pythia):      y = x + Attn(LN_1(x)) + MLP(LN_2(x))   (parallel residual)
                                 or the sequential form when parallel_residual=False

with causal grouped-query attention softmax(q k^T / sqrt(d_head)) v over rotary-embedded
queries and keys (rotary on the first `rotary_fraction` of each head, as in Pythia), an
optional per-head RMSNorm of q and k before the rotation (Qwen3's QK-norm), and
SwiGLU(x) = W_down (silu(W_gate x) * W_up x) or MLP(x) = W_out act(W_in x).

The module is pure at its boundary: `model.apply({"params": params}, tokens)` gives
logits; with a `KVCache` it also returns the updated cache, so prefill and one-token
decoding are the same call. Ragged batches are left-padded: `left_pad=` (B,) gives
each row's number of padding slots p_b; row b's real tokens then sit at slots
p_b .. T-1, get rotary positions slot - p_b (so 0 .. len_b - 1, as if unpadded), and
attend only to keys at slots >= p_b (a key-padding mask on top of the causal one).
The cache remembers `left_pad`, so decoding after a ragged prefill stays ragged.
The cache is a plain pytree (stacked per-layer keys and values plus the filled
length); the attention over it is a swappable function
(`attention_fn`, see `dot_product_attention` for the signature), so other code can read
the cache and replace how it is attended (e.g. quantised keys, sparse selection).

Activation taps: every linear layer sows its input under the "taps" collection at the
same path as its parameters (`params[...]["q_proj"]["kernel"]` <->
`taps[...]["q_proj"]["input"]`), each attention block sows its per-head outputs
("heads", (B, T, H, d_head)) and each layer its residual-stream output ("residual").
Nothing is stored unless the caller asks: `model.apply(..., mutable=["taps"])`.

Sharding: every parameter carries logical axis names (flax's logical partitioning, e.g.
("embed", "mlp") for an MLP kernel); `model.init` returns them boxed, `init_params`
returns plain arrays and `logical_axes(model)` the names, which
`common.partitioning` maps onto fsdp / tensor mesh axes (docs/scaling.md). The cache
a call returns is constrained to ("layers", "batch", "length", "kv_heads",
"head_dim") when logical axis rules are active (a no-op otherwise).

Example:
    >>> config = TransformerConfig(family="llama", vocab_size=256, d_model=64,
    ...                            num_layers=2, num_heads=4, num_kv_heads=2, d_ff=128)
    >>> model = Transformer(config)
    >>> params = init_params(model, jax.random.PRNGKey(0))
    >>> model.apply({"params": params}, jnp.zeros((2, 8), jnp.int32)).shape
    (2, 8, 256)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.checks import is_concrete
from common.models.taps import TAPS, linear_paths, sow_input  # noqa: F401 (re-exported)

FAMILIES = ("llama", "neox")
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "silu": jax.nn.silu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}
ROPE_SCALINGS = ("none", "linear", "llama3")
# Logical axis names of the parameters and the KV cache (`common.partitioning` maps them
# onto mesh axes): the model width, the vocabulary, the MLP width, the query and the
# key/value head columns (heads x head_dim), and unsharded norm scales.
EMBED, VOCAB, MLP, HEADS, KV_HEADS, NORM = "embed", "vocab", "mlp", "heads", "kv_heads", "norm"
CACHE_AXES = ("layers", "batch", "length", KV_HEADS, "head_dim")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Rotary frequency rescaling for long-context checkpoints.

  kind "linear" divides every frequency by `factor`; "llama3" (Llama 3.1+) divides
  low frequencies (wavelength > original_max_len / low_freq_factor) by `factor`, keeps
  high ones (wavelength < original_max_len / high_freq_factor), and interpolates
  between them linearly in original_max_len / wavelength.
  """
  kind: str = "none"
  factor: float = 1.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_len: int = 8192


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Family and sizes of a decoder-only transformer.

  Attributes:
    family: "llama" (RMSNorm, SwiGLU, sequential residual) or "neox" (LayerNorm with
      bias, plain MLP, parallel residual by default).
    vocab_size, d_model, num_layers, num_heads, d_ff: the sizes.
    num_kv_heads: key/value heads for grouped-query attention (None: num_heads);
      must divide num_heads.
    head_dim: per-head width (None: d_model // num_heads).
    max_seq_len: the longest sequence positions are meant for (cache default size).
    rope_theta: rotary base; rotary_fraction: share of each head that is rotated.
    rope_scaling: frequency rescaling (`RopeScaling`).
    norm_eps: epsilon of every RMSNorm/LayerNorm.
    qk_norm: RMSNorm over head_dim on q and k before the rotation (Qwen3).
    qkv_bias, o_bias, mlp_bias: biases on q/k/v, the attention output, the MLP.
    parallel_residual: attention and MLP read the same input (GPT-NeoX).
    tie_embeddings: the output projection is the transposed input embedding.
    activation: a key of ACTIVATIONS ("silu" for SwiGLU, "gelu" for NeoX).
    use_mlp: False gives an attention-only transformer (no MLP, no MLP norm), the
      model class of mechanistic-interpretability toy studies.
    dtype: compute dtype ("float32" or "bfloat16"); parameters stay float32.
  """
  family: str = "llama"
  vocab_size: int = 256
  d_model: int = 128
  num_layers: int = 4
  num_heads: int = 4
  num_kv_heads: int | None = None
  head_dim: int | None = None
  d_ff: int = 512
  max_seq_len: int = 512
  rope_theta: float = 10000.0
  rotary_fraction: float = 1.0
  rope_scaling: RopeScaling = RopeScaling()
  norm_eps: float = 1e-5
  qk_norm: bool = False
  qkv_bias: bool = False
  o_bias: bool = False
  mlp_bias: bool = False
  parallel_residual: bool = False
  tie_embeddings: bool = False
  activation: str = "silu"
  use_mlp: bool = True
  dtype: str = "float32"

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f"TransformerConfig.family={self.family!r}; expected one of {FAMILIES}")
    for name in ("vocab_size", "d_model", "num_layers", "num_heads", "d_ff", "max_seq_len"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"TransformerConfig.{name}={value!r}; expected a positive int")
    for name in ("num_kv_heads", "head_dim"):
      value = getattr(self, name)
      if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                or value < 1):
        raise ValueError(f"TransformerConfig.{name}={value!r}; expected None or a positive int")
    if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
      raise ValueError(f"TransformerConfig.rope_theta={self.rope_theta!r}; expected a finite "
                       "number > 0 (the rotary base)")
    if not (self.norm_eps >= 0 and math.isfinite(self.norm_eps)):
      raise ValueError(f"TransformerConfig.norm_eps={self.norm_eps!r}; expected a finite "
                       "number >= 0")
    s = self.rope_scaling
    if s.kind != "none" and not (s.factor > 0 and math.isfinite(s.factor)):
      raise ValueError(f"RopeScaling.factor={s.factor!r}; expected a finite number > 0")
    if s.kind == "llama3" and not (s.high_freq_factor > s.low_freq_factor > 0
                                   and s.original_max_len > 0):
      raise ValueError(f"RopeScaling: llama3 needs high_freq_factor > low_freq_factor > 0 and "
                       f"original_max_len > 0, got {s.high_freq_factor!r}, "
                       f"{s.low_freq_factor!r}, {s.original_max_len!r}")
    if self.num_heads % self.kv_heads:
      raise ValueError(f"TransformerConfig.num_kv_heads={self.kv_heads} must divide "
                       f"num_heads={self.num_heads}")
    if self.head_dim is None and self.d_model % self.num_heads:
      raise ValueError(f"TransformerConfig.d_model={self.d_model} is not divisible by "
                       f"num_heads={self.num_heads}; set head_dim explicitly")
    if not 0.0 < self.rotary_fraction <= 1.0 or self.rotary_dim % 2:
      raise ValueError(f"TransformerConfig.rotary_fraction={self.rotary_fraction!r} must be in "
                       f"(0, 1] and give an even rotary width (got {self.rotary_dim})")
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"TransformerConfig.activation={self.activation!r}; expected one of "
                       f"{tuple(ACTIVATIONS)}")
    if self.rope_scaling.kind not in ROPE_SCALINGS:
      raise ValueError(f"RopeScaling.kind={self.rope_scaling.kind!r}; expected one of "
                       f"{ROPE_SCALINGS}")
    if self.dtype not in ("float32", "bfloat16", "float16"):
      raise ValueError(f"TransformerConfig.dtype={self.dtype!r}; expected float32/bfloat16/float16")

  @property
  def kv_heads(self) -> int:
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def dim_per_head(self) -> int:
    return self.d_model // self.num_heads if self.head_dim is None else self.head_dim

  @property
  def rotary_dim(self) -> int:
    return int(self.dim_per_head * self.rotary_fraction)

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)


def llama_config(**overrides) -> TransformerConfig:
  """A Llama/Qwen-style config (RMSNorm, SwiGLU, sequential residual, full rotary)."""
  return TransformerConfig(**{"family": "llama", "activation": "silu", **overrides})


def neox_config(**overrides) -> TransformerConfig:
  """A GPT-NeoX/Pythia-style config (LayerNorm, GELU MLP with biases, parallel
  residual, rotary on a quarter of each head)."""
  defaults = {"family": "neox", "activation": "gelu", "rotary_fraction": 0.25,
              "qkv_bias": True, "o_bias": True, "mlp_bias": True,
              "parallel_residual": True}
  return TransformerConfig(**{**defaults, **overrides})


class KVCache(NamedTuple):
  """Keys and values of every layer for the first `length` positions.

  Attributes:
    k, v: (num_layers, batch, max_len, num_kv_heads, head_dim); positions >= length
      are unused. Keys are stored after the rotary embedding.
    length: int32 scalar, the number of filled positions (shared by the batch).
    state: None, or a tuple with one pytree per layer owned by the model's
      `attention_fn` (e.g. quantised keys). When present, each layer's attention
      is called with `state=` and returns `(output, new_state)`; see
      `dot_product_attention`.
    left_pad: None (every row starts at slot 0), or (batch,) int32, the number of
      left-padding slots of each row, set by a ragged prefill
      (`Transformer(..., left_pad=)`): row b's token at slot s has rotary position
      s - left_pad[b], and slots < left_pad[b] are never attended to.
  """
  k: jax.Array
  v: jax.Array
  length: jax.Array
  state: Any = None
  left_pad: Any = None



def check_token_ids(tokens, vocab_size: int, name: str = "tokens") -> None:
  """Raises unless `tokens` are integer ids in [0, vocab_size).

  The dtype is checked always (it is known under jit too); the values only when
  `tokens` is concrete (a numpy or committed jax array, not a tracer), so a jitted
  caller pays nothing. Out-of-vocabulary ids would otherwise give NaN embeddings
  (`jnp.take` fills out-of-range rows with NaN) and then NaN logits.

  Raises:
    TypeError: non-integer tokens. ValueError: an id outside [0, vocab_size), naming
    the first bad index and its value.
  """
  dtype = getattr(tokens, "dtype", None)
  if dtype is None or not jnp.issubdtype(dtype, jnp.integer):
    raise TypeError(f"{name} must be integer token ids, got dtype {dtype}")
  if not is_concrete(tokens) or tokens.size == 0:
    return
  ids = np.asarray(tokens)
  bad = (ids < 0) | (ids >= vocab_size)
  if bad.any():
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"{name}[{', '.join(map(str, index))}] = {int(ids[index])} is out of "
                     f"the vocabulary; expected ids in [0, {vocab_size})")


def _check_cache(cache: "KVCache", tokens) -> None:
  """The cache's batch matches the tokens' and (when its length is concrete) it has room
  for them: `dynamic_update_slice` would otherwise clamp the write silently."""
  if cache.k.ndim != 5 or cache.k.shape != cache.v.shape:
    raise ValueError(f"cache.k {cache.k.shape} and cache.v {cache.v.shape} must both be "
                     "(num_layers, batch, max_len, kv_heads, head_dim)")
  b, t = tokens.shape
  if cache.k.shape[1] != b:
    raise ValueError(f"cache batch {cache.k.shape[1]} != tokens batch {b}")
  if is_concrete(cache.length):
    length, room = int(cache.length), cache.k.shape[2]
    if length + t > room:
      raise ValueError(f"cache overflow: cache.length + tokens = {length} + {t} = {length + t} "
                       f"positions, but the cache holds {room}; use a larger init_cache max_len")


def _check_left_pad(left_pad, tokens, cache: "KVCache | None") -> jax.Array:
  """left_pad as (B,) int32; its values (when concrete) in [0, the filled length)."""
  if not hasattr(left_pad, "ndim"):
    left_pad = jnp.asarray(left_pad)
  b, t = tokens.shape
  if left_pad.shape != (b,) or not jnp.issubdtype(left_pad.dtype, jnp.integer):
    raise ValueError(f"left_pad must be ({b},) integers (one per row), got shape "
                     f"{left_pad.shape} and dtype {left_pad.dtype}")
  filled = t
  if cache is not None:
    filled = int(cache.length) + t if is_concrete(cache.length) else None
  if filled is not None and is_concrete(left_pad):
    pads = np.asarray(left_pad)
    bad = (pads < 0) | (pads >= filled)
    if bad.any():
      i = int(np.argmax(bad))
      raise ValueError(f"left_pad[{i}] = {int(pads[i])}; expected padding in [0, {filled}) "
                       "so that every row keeps at least one real token")
  return left_pad.astype(jnp.int32)


def init_cache(config: TransformerConfig, batch_size: int, max_len: int | None = None,
               dtype=None) -> KVCache:
  """An empty cache for `batch_size` sequences of up to `max_len` (default max_seq_len)."""
  max_len = config.max_seq_len if max_len is None else max_len
  if batch_size < 1 or max_len < 1:
    raise ValueError(f"init_cache needs batch_size >= 1 and max_len >= 1, got "
                     f"{batch_size}, {max_len}")
  shape = (config.num_layers, batch_size, max_len, config.kv_heads, config.dim_per_head)
  dtype = config.compute_dtype if dtype is None else dtype
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((), jnp.int32))


def rope_frequencies(config: TransformerConfig) -> jax.Array:
  """Inverse frequencies theta^(-2i/r), i < r/2, for rotary width r, after rescaling."""
  r = config.rotary_dim
  inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, r, 2, dtype=jnp.float32) / r))
  s = config.rope_scaling
  if s.kind == "linear":
    inv_freq = inv_freq / s.factor
  elif s.kind == "llama3":
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = s.original_max_len / s.low_freq_factor
    high_wavelen = s.original_max_len / s.high_freq_factor
    scaled = jnp.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_len / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    inv_freq = jnp.where(medium, smoothed, scaled)
  return inv_freq


def apply_rope(x: jax.Array, positions: jax.Array, config: TransformerConfig) -> jax.Array:
  """Rotates the first rotary_dim features of x (B, T, heads, d) by position angles.

  With a = positions * inv_freq duplicated to width r and x_r = x[..., :r]:
  x_r * cos(a) + rotate_half(x_r) * sin(a), rotate_half([u, w]) = [-w, u]
  (the half-split convention of the Hugging Face checkpoints). `positions` is (T,),
  shared by the batch, or (B, T), one row of positions per sequence (ragged batches).
  """
  r = config.rotary_dim
  angles = positions.astype(jnp.float32)[..., None] * rope_frequencies(config)
  angles = jnp.concatenate([angles, angles], axis=-1)
  angles = angles[None, :, None, :] if positions.ndim == 1 else angles[:, :, None, :]
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  x_rot, x_pass = x[..., :r].astype(jnp.float32), x[..., r:]
  half = r // 2
  rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
  out = (x_rot * cos + rotated * sin).astype(x.dtype)
  return jnp.concatenate([out, x_pass], axis=-1) if x_pass.shape[-1] else out


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, *,
                          q_positions: jax.Array, kv_length: jax.Array,
                          layer: int, kv_start: jax.Array | None = None) -> jax.Array:
  """Causal grouped-query attention; the default `attention_fn`.

  Args:
    q: (B, T, H, d) rotated queries at absolute positions `q_positions` (T,).
    k, v: (B, S, KV, d) keys (rotated) and values at positions 0..S-1; only the
      first `kv_length` are valid. H must be a multiple of KV (query head h reads
      key/value head h // (H / KV)).
    kv_length: int scalar, the number of valid key positions.
    layer: the layer index (unused here).
    kv_start: None, or (B,) int, the first valid key slot of each row (its left
      padding); passed only for ragged (left-padded) batches.

  Returns:
    (B, T, H, d): softmax_j(q . k_j / sqrt(d)) v_j over kv_start_b <= j <= position,
    j < kv_length. A query with no valid key (a padding slot) gets the uniform
    average, finite and never read by a real token.

  A replacement has the same signature; it gets `kv_start=` only from ragged batches,
  so one without that keyword still serves equal-length ones. If it keeps per-layer
  state across decoding steps, the cache carries it (`KVCache.state`, one entry per
  layer) and the replacement is called with an extra keyword `state=` (that layer's
  entry) and must return `(output, new_state)`.
  """
  del layer
  b, t, h, d = q.shape
  kv = k.shape[2]
  g = h // kv
  q = q * jnp.asarray(1.0 / math.sqrt(d), q.dtype)
  key_pos = jnp.arange(k.shape[1])
  mask = (key_pos[:, None] <= q_positions[None, :]) & (key_pos[:, None] < kv_length)  # (S, T)
  if t == 1:
    # One query (a decoding step): q.k and p.v are products and reductions that read
    # the cache once in its own (B, S, KV, d) layout; a batched matmul would first
    # copy every key and value into a transposed one.
    q = q.reshape(b, kv, g, d)
    scores = jnp.sum(q[:, None].astype(jnp.float32) * k[:, :, :, None].astype(jnp.float32),
                     axis=-1)  # (B, S, KV, G)
    mask = mask[None, :, :, None]  # (1, S, 1, 1)
    if kv_start is not None:
      mask = mask & (key_pos[None, :, None, None] >= kv_start[:, None, None, None])
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=1).astype(v.dtype)
    out = jnp.sum(probs[..., None] * v[:, :, :, None], axis=1)  # (B, KV, G, d)
    return out.reshape(b, 1, h, d)
  # The G query heads that share a key/value head are extra query rows: queries are
  # laid out (B, KV, T*G, d) and the scores (B, KV, S, T*G), keys before queries. In
  # that layout XLA's CPU matmuls read the probabilities in place for p.v and fold the
  # softmax into it (the (.., T, S) layout cost a transposed copy of the probabilities
  # per layer); keeping T and G as two axes instead, with G last, was up to 10x slower
  # (a unit G axis for multi-head attention; docs/benchmarks.md, "Language model").
  q = q.reshape(b, t, kv, g, d).transpose(0, 2, 1, 3, 4).reshape(b, kv, t * g, d)
  scores = jnp.einsum("bkqd,bskd->bksq", q, k, preferred_element_type=jnp.float32)
  mask = jnp.repeat(mask, g, axis=1)[None, None]  # (1, 1, S, T*G): row t*G + j is query t
  if kv_start is not None:  # (B, 1, S, T*G): the causal mask and each row's key padding.
    mask = mask & (key_pos[None, None, :, None] >= kv_start[:, None, None, None])
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=2).astype(v.dtype)
  out = jnp.einsum("bksq,bskd->bqkd", probs, v)  # (B, T*G, KV, d)
  return out.reshape(b, t, g, kv, d).transpose(0, 1, 3, 2, 4).reshape(b, t, h, d)


class Linear(nn.Module):
  """y = x W + b with W stored (in, out); sows its input x under "taps" (the
  convention of `common.models.taps`). `axes` are the logical names of W's two axes
  (b takes the second), e.g. ("embed", "mlp"); None leaves them unnamed."""
  features: int
  use_bias: bool = False
  dtype: Any = jnp.float32
  axes: tuple[str | None, str | None] = (None, None)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    sow_input(self, x)
    kernel = self.param("kernel", _named(nn.initializers.normal(0.02), self.axes),
                        (x.shape[-1], self.features), jnp.float32)
    y = jnp.dot(x.astype(self.dtype), kernel.astype(self.dtype))
    if self.use_bias:
      y = y + self.param("bias", _named(nn.initializers.zeros, self.axes[1:]),
                         (self.features,), jnp.float32).astype(self.dtype)
    return y


class RMSNorm(nn.Module):
  """x / sqrt(mean(x^2) + eps) * scale, computed in float32."""
  eps: float = 1e-6
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    scale = self.param("scale", _named(nn.initializers.ones, (NORM,)), (x.shape[-1],),
                       jnp.float32)
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (y * scale).astype(self.dtype)


def _norm(config: TransformerConfig, name: str) -> nn.Module:
  if config.family == "llama":
    return RMSNorm(eps=config.norm_eps, dtype=config.compute_dtype, name=name)
  return nn.LayerNorm(epsilon=config.norm_eps, dtype=config.compute_dtype,
                      scale_init=_named(nn.initializers.ones, (NORM,)),
                      bias_init=_named(nn.initializers.zeros, (NORM,)), name=name)


class _LayerModule(nn.Module):
  """Fields shared by a decoder layer and its attention: the config, the layer index
  (passed to `attention_fn`) and the attention function."""
  config: TransformerConfig
  layer: int
  attention_fn: Callable = dot_product_attention


class Attention(_LayerModule):
  """Grouped-query attention over cache slots `positions` (T,); with `left_pad` (B,),
  rotary positions are slot - left_pad[b] (clipped at 0 on padding slots) and the
  attention_fn gets `kv_start=left_pad`."""

  @nn.compact
  def __call__(self, x, positions, cache_kv, kv_length, state=None, left_pad=None):
    c = self.config
    b, t, _ = x.shape
    h, kv, d = c.num_heads, c.kv_heads, c.dim_per_head
    q = _linear(h * d, c.qkv_bias, c, "q_proj", (EMBED, HEADS))(x).reshape(b, t, h, d)
    k = _linear(kv * d, c.qkv_bias, c, "k_proj", (EMBED, KV_HEADS))(x).reshape(b, t, kv, d)
    v = _linear(kv * d, c.qkv_bias, c, "v_proj", (EMBED, KV_HEADS))(x).reshape(b, t, kv, d)
    if c.qk_norm:
      q = RMSNorm(c.norm_eps, c.compute_dtype, name="q_norm")(q)
      k = RMSNorm(c.norm_eps, c.compute_dtype, name="k_norm")(k)
    rope_positions = positions if left_pad is None else jnp.maximum(
        positions[None, :] - left_pad[:, None], 0)
    q, k = apply_rope(q, rope_positions, c), apply_rope(k, rope_positions, c)
    if cache_kv is None:
      k_all, v_all, new_kv = k, v, None
    else:
      k_cache, v_cache = cache_kv
      start = positions[0]
      k_all = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, start, 0, 0))
      v_all = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, start, 0, 0))
      new_kv = (k_all, v_all)
    kwargs = dict(q_positions=positions, kv_length=kv_length, layer=self.layer)
    if left_pad is not None:
      kwargs["kv_start"] = left_pad
    if state is None:
      heads = self.attention_fn(q, k_all, v_all, **kwargs)
    else:
      heads, state = self.attention_fn(q, k_all, v_all, state=state, **kwargs)
    self.sow(TAPS, "heads", heads, init_fn=lambda: None, reduce_fn=lambda _, new: new)
    out = _linear(c.d_model, c.o_bias, c, "o_proj", (HEADS, EMBED))(heads.reshape(b, t, h * d))
    return out, new_kv, state


class FeedForward(nn.Module):
  config: TransformerConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    act = ACTIVATIONS[c.activation]
    if c.family == "llama":
      hidden = act(_linear(c.d_ff, c.mlp_bias, c, "gate_proj", (EMBED, MLP))(x)) * _linear(
          c.d_ff, c.mlp_bias, c, "up_proj", (EMBED, MLP))(x)
    else:
      hidden = act(_linear(c.d_ff, c.mlp_bias, c, "up_proj", (EMBED, MLP))(x))
    return _linear(c.d_model, c.mlp_bias, c, "down_proj", (MLP, EMBED))(hidden)


class Block(_LayerModule):

  @nn.compact
  def __call__(self, x, positions, cache_kv, kv_length, state=None, left_pad=None):
    c = self.config
    attn = Attention(c, self.layer, self.attention_fn, name="attn")
    attn_out, new_kv, state = attn(_norm(c, "attn_norm")(x), positions, cache_kv, kv_length,
                                   state, left_pad)
    if not c.use_mlp:
      y = x + attn_out
    elif c.parallel_residual:
      y = x + attn_out + FeedForward(c, name="mlp")(_norm(c, "mlp_norm")(x))
    else:
      h = x + attn_out
      y = h + FeedForward(c, name="mlp")(_norm(c, "mlp_norm")(h))
    self.sow(TAPS, "residual", y, init_fn=lambda: None, reduce_fn=lambda _, new: new)
    return y, new_kv, state


class Transformer(nn.Module):
  """The decoder-only LM.

  Call: `apply({"params": p}, tokens)` -> logits (B, T, V) for tokens (B, T) at
  positions 0..T-1; `apply({"params": p}, tokens, cache)` -> (logits, new_cache) for
  tokens at positions cache.length .. cache.length+T-1, attending to everything
  cached before them. `left_pad=` (B,) ints makes the batch ragged (left-padded):
  row b's slots < left_pad[b] are padding, its token at slot s has position
  s - left_pad[b], and no token attends to padding; the logits at padding slots are
  meaningless. With a cache, left_pad is stored in it (an explicit one replaces the
  cache's), so later decoding calls need not repeat it. `return_hidden=True` appends
  the final-normed hidden states h (B, T, d_model), the input of the LM head, to the
  outputs: (logits, h) or (logits, new_cache, h) (heads on top of an LM read it).
  `logits_to_keep=n` computes the LM head on the last n positions only: logits (and
  h) are then (B, n, ...), equal to the last n rows of the full ones. A prefill that
  only samples the next token needs n = 1 and skips (T - 1) / T of the head's
  (B, T, d_model) x (d_model, V) matmul, the largest one of a small model.

  Example (ragged):
      >>> tokens = jnp.array([[0, 0, 5, 6], [1, 2, 3, 4]])  # row 0: 2 pads, [5, 6]
      >>> logits = model.apply({"params": p}, tokens, left_pad=jnp.array([2, 0]))
      >>> # logits[0, 2:] == model.apply({"params": p}, tokens[:1, 2:])[0] (to rounding)

  Attributes:
    config: the `TransformerConfig`.
    attention_fn: replaces `dot_product_attention` (same signature) in every layer.
  """
  config: TransformerConfig
  attention_fn: Callable = dot_product_attention

  @nn.compact
  def __call__(self, tokens: jax.Array, cache: KVCache | None = None,
               left_pad: jax.Array | None = None, return_hidden: bool = False,
               logits_to_keep: int | None = None):
    c = self.config
    if not hasattr(tokens, "ndim"):
      tokens = jnp.asarray(tokens)
    if tokens.ndim != 2:
      raise ValueError(f"tokens must be (batch, time), got shape {tokens.shape}")
    if logits_to_keep is not None and (
        isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, numbers.Integral)
        or not 1 <= logits_to_keep <= tokens.shape[1]):
      raise ValueError(f"logits_to_keep={logits_to_keep!r}; expected None or an int in "
                       f"[1, {tokens.shape[1]}] (the tokens' length)")
    check_token_ids(tokens, c.vocab_size)
    if cache is not None:
      _check_cache(cache, tokens)
      if left_pad is None:
        left_pad = cache.left_pad
    if left_pad is not None:
      left_pad = _check_left_pad(left_pad, tokens, cache)
    embed = nn.Embed(c.vocab_size, c.d_model,
                     embedding_init=_named(nn.initializers.normal(0.02), (VOCAB, EMBED)),
                     dtype=c.compute_dtype, name="embed")
    x = embed(tokens)
    t = tokens.shape[1]
    start = jnp.zeros((), jnp.int32) if cache is None else cache.length
    positions = start + jnp.arange(t, dtype=jnp.int32)
    kv_length = start + t
    new_k, new_v, new_states = [], [], []
    for i in range(c.num_layers):
      layer_kv = None if cache is None else (cache.k[i], cache.v[i])
      layer_state = None if cache is None or cache.state is None else cache.state[i]
      x, kv, layer_state = Block(c, i, self.attention_fn, name=f"layer_{i}")(
          x, positions, layer_kv, kv_length, layer_state, left_pad)
      if kv is not None:
        new_k.append(kv[0])
        new_v.append(kv[1])
        new_states.append(layer_state)
    x = _norm(c, "final_norm")(x)
    if logits_to_keep is not None:
      x = x[:, t - logits_to_keep:]
    if c.tie_embeddings:
      logits = embed.attend(x)
    else:
      logits = _linear(c.vocab_size, False, c, "lm_head", (EMBED, VOCAB))(x)
    logits = logits.astype(jnp.float32)
    hidden = (x.astype(jnp.float32),) if return_hidden else ()
    if cache is None:
      return (logits, *hidden) if return_hidden else logits
    state = None if cache.state is None else tuple(new_states)
    # Split over batch and kv heads where the caller set logical axis rules and a mesh
    # (`common.partitioning.axis_rules`); a no-op otherwise.
    new_k, new_v = (nn.with_logical_constraint(jnp.stack(kv), CACHE_AXES)
                    for kv in (new_k, new_v))
    return (logits, KVCache(new_k, new_v, kv_length, state, left_pad), *hidden)


def _linear(features: int, bias: bool, config: TransformerConfig, name: str,
            axes: tuple[str | None, str | None] = (None, None)) -> Linear:
  return Linear(features, use_bias=bias, dtype=config.compute_dtype, axes=axes, name=name)


def _named(init: Callable, axes: tuple[str | None, ...]) -> Callable:
  """`init` boxed with the logical axis names `axes` (flax's logical partitioning), or
  `init` itself when every name is None."""
  return init if all(a is None for a in axes) else nn.with_logical_partitioning(init, axes)


def init_params(model: nn.Module, key: jax.Array, seq_len: int = 1) -> Any:
  """Fresh parameters: normal(0.02) weights and embeddings, zero biases, unit norms.

  Plain arrays: `model.init` boxes every parameter with its logical axis names
  (`nn.LogicallyPartitioned`); this unboxes them (`logical_axes` gives the names).
  `model` is a `Transformer` or another module called on (B, T) int tokens (the
  FusionRoute router). The init is compiled once per module and `seq_len`.
  """
  return nn.meta.unbox(_init_variables(model, key, seq_len)["params"])


# Module level with the module static (modules hash and compare by their fields): a
# `jax.jit(model.init)` made per call traced and compiled the init again every call.
@functools.partial(jax.jit, static_argnums=(0, 2))
def _init_variables(model: nn.Module, key: jax.Array, seq_len: int) -> Any:
  return model.init(key, jnp.zeros((1, seq_len), jnp.int32))


def logical_axes(model: nn.Module, *args: Any) -> Any:
  """The logical axis names of `model`'s parameters, a pytree like `init_params`' of
  `jax.sharding.PartitionSpec`s such as P("embed", "mlp") (P() for an unnamed leaf).

  `common.partitioning.param_shardings` maps them onto a mesh; nothing is computed
  (the shapes come from `jax.eval_shape`).

  Args:
    model: a `Transformer` or any flax module whose params carry logical names
      (e.g. a model that contains a `Transformer`).
    *args: its example inputs; default one (1, 1) token batch.

  Returns:
    The names of `model.init(...)["params"]`, unboxed.

  Example:
      >>> logical_axes(Transformer(config))["layer_0"]["mlp"]["up_proj"]["kernel"]
      PartitionSpec('embed', 'mlp')
  """
  args = args or (jnp.zeros((1, 1), jnp.int32),)
  boxed = jax.eval_shape(model.init, jax.random.PRNGKey(0), *args)["params"]
  return nn.get_partition_spec(boxed)


def num_params(params: Any) -> int:
  return int(sum(x.size for x in jax.tree.leaves(params)))


def component_mask(params: Any, config: TransformerConfig, layer: int,
                   head: int | None = None) -> Any:
  """A 0/1 pytree like `params` selecting one component's parameters.

  head=None selects every parameter of `layer` (attention, MLP, norms). With a head
  h, it selects the columns of q_proj that produce head h, the rows of o_proj that read
  it, and the columns of k_proj/v_proj of its key/value head h // (H / KV) (shared by
  the heads of that group), including the matching bias entries.
  """
  if not 0 <= layer < config.num_layers:
    raise ValueError(f"layer={layer} out of range for num_layers={config.num_layers}")
  if head is not None and not 0 <= head < config.num_heads:
    raise ValueError(f"head={head} out of range for num_heads={config.num_heads}")
  name = f"layer_{layer}"
  zeros = jax.tree.map(jnp.zeros_like, params)
  if head is None:
    zeros = dict(zeros)
    zeros[name] = jax.tree.map(jnp.ones_like, params[name])
    return zeros
  d = config.dim_per_head
  kv_head = head // (config.num_heads // config.kv_heads)

  def cols(arr, index):
    return arr.at[..., index * d:(index + 1) * d].set(1)

  attn = dict(zeros[name]["attn"])
  for proj, index in (("q_proj", head), ("k_proj", kv_head), ("v_proj", kv_head)):
    attn[proj] = {k: cols(v, index) for k, v in attn[proj].items()}
  o = dict(attn["o_proj"])
  o["kernel"] = o["kernel"].at[head * d:(head + 1) * d, :].set(1)
  attn["o_proj"] = o
  out = dict(zeros)
  out[name] = {**zeros[name], "attn": attn}
  return out
