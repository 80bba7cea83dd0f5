"""Rotated binary key quantisation and 4-bit query quantisation (RaBitQ).

Keys (Gao & Long, "RaBitQ", SIGMOD 2024, Sec. 3.1-3.2): with a key centre c_k, the
unit residual o = (k - c_k) / ||k - c_k|| is rotated by a random orthogonal P and
only the signs are kept,

    x_b = [P^T o > 0] in {0,1}^D,    x_bar = (2 x_b - 1) / sqrt(D),
    o_bar = P x_bar,                 <o_bar, o> = <x_bar, P^T o> = ||P^T o||_1 / sqrt(D).

Per token we store the D sign bits packed into D/32 uint32 words, ||k - c_k||,
<o_bar, o> and (for query centring, see estimator.py) <c_q, k - c_k>.

Queries (Sec. 3.3): the rotated query q' = P^T (q - c_q) is quantised to B_q = 4 bit
unsigned integers, q' ~ Delta q_u + v_l with v_l = min_i q'_i and
Delta = (max_i q'_i - v_l) / (2^B_q - 1), using randomised rounding

    q_u = floor((q' - v_l) / Delta + u),   u ~ U[0, 1)   (E[Delta q_u + v_l] = q'),

or, optionally, deterministic round-to-nearest (u = 1/2). The bit planes
plane_j(q_u) (bit j of every coordinate, packed like x_b) feed the popcount kernel.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp

WORD_BITS = 32
QUERY_BITS = 4


def padded_dim(dim: int) -> int:
  """The code width D' = 32 ceil(dim / 32). Narrower heads are zero-padded before the
  rotation, which leaves every inner product unchanged.

  Example:
    >>> padded_dim(16), padded_dim(64)
    (32, 64)
  """
  return -(-dim // WORD_BITS) * WORD_BITS


def pad_last(x: jax.Array, width: int) -> jax.Array:
  """Zero-pads the last axis of x to `width` (>= its size).

  Example:
    >>> pad_last(jnp.ones((2, 3)), 4).shape
    (2, 4)
  """
  extra = width - x.shape[-1]
  if extra < 0:
    raise ValueError(f"cannot pad a last axis of {x.shape[-1]} down to {width}")
  return x if extra == 0 else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)])


def random_rotation(key: jax.Array, dim: int, dtype=jnp.float32) -> jax.Array:
  """A Haar-random orthogonal matrix P: with G = QR a Gaussian matrix's QR
  decomposition, P = Q diag(sign(diag(R))) (the sign fix makes the law exactly
  uniform on the orthogonal group).

  Args:
    key: PRNG key.
    dim: the size D.
    dtype: the result's dtype.

  Returns:
    (dim, dim) orthogonal P (P^T P = I).

  Example:
    >>> p = random_rotation(jax.random.PRNGKey(0), 64)
    >>> y = o @ p                                        # rotated coordinates P^T o
  """
  g = jax.random.normal(key, (dim, dim), jnp.float32)
  q, r = jnp.linalg.qr(g)
  return (q * jnp.sign(jnp.diagonal(r))[None, :]).astype(dtype)


def pack_bits(bits: jax.Array) -> jax.Array:
  """Packs booleans (..., D) into (..., D/32) uint32 words:
  word_w = sum_i bits[32 w + i] 2^i.

  Example:
    >>> pack_bits(jnp.zeros(64, bool).at[33].set(True))
    Array([0, 2], dtype=uint32)
  """
  d = bits.shape[-1]
  if d % WORD_BITS:
    raise ValueError(f"the last axis ({d}) must be a multiple of {WORD_BITS} to pack bits")
  b = bits.astype(jnp.uint32).reshape(bits.shape[:-1] + (d // WORD_BITS, WORD_BITS))
  shifts = jnp.arange(WORD_BITS, dtype=jnp.uint32)
  return jnp.sum(b << shifts, axis=-1, dtype=jnp.uint32)


def unpack_bits(words: jax.Array, dim: int | None = None) -> jax.Array:
  """Inverse of `pack_bits`: (..., W) uint32 -> (..., 32 W) bool (the first `dim` kept).

  Example:
    >>> unpack_bits(jnp.array([5], jnp.uint32), 4)
    Array([ True, False,  True, False], dtype=bool)
  """
  shifts = jnp.arange(WORD_BITS, dtype=jnp.uint32)
  bits = ((words[..., None] >> shifts) & jnp.uint32(1)).astype(bool)
  bits = bits.reshape(words.shape[:-1] + (words.shape[-1] * WORD_BITS,))
  return bits if dim is None else bits[..., :dim]


class KeyCodes(NamedTuple):
  """Quantised keys (leading axes ..., N tokens).

  words: (..., N, D/32) uint32 sign bits of P^T o.
  norm: (..., N) ||k - c_k||.
  ip_correction: (..., N) <o_bar, o> in (0, 1].
  center_term: (..., N) <c_q, k - c_k> (zero without query centring).
  """
  words: jax.Array
  norm: jax.Array
  ip_correction: jax.Array
  center_term: jax.Array


def quantize_keys(k: jax.Array, rotation: jax.Array, key_center: jax.Array | None = None,
                  query_center: jax.Array | None = None) -> KeyCodes:
  """RaBitQ codes of keys k (..., N, D):

      o = (k - c_k) / ||k - c_k||,  x_b = [P^T o > 0],  <o_bar, o> = ||P^T o||_1 / sqrt(D'),

  stored with ||k - c_k|| and <c_q, k - c_k>.

  Args:
    k: (..., N, D) keys.
    rotation: (..., D', D') orthogonal P, D' = padded_dim(D), broadcast against k's
      leading axes (rotated coordinates: y = P^T o = o @ P, o zero-padded to D').
    key_center: (..., D) c_k, broadcast over N (None: no centring).
    query_center: (..., D) c_q for the stored <c_q, k - c_k> (None: zeros).

  Returns:
    `KeyCodes` with leading axes (..., N).

  Example:
    >>> p = random_rotation(jax.random.PRNGKey(0), 128)
    >>> codes = quantize_keys(k, p, k.mean(0), q.mean(0))      # k (N, 128)
  """
  k = k.astype(jnp.float32)
  d = rotation.shape[-1]
  if rotation.shape[-2] != d or d != padded_dim(k.shape[-1]):
    raise ValueError(f"rotation must be (..., {padded_dim(k.shape[-1])}, "
                     f"{padded_dim(k.shape[-1])}) for keys of width {k.shape[-1]}, got "
                     f"{rotation.shape}")
  resid = k if key_center is None else k - key_center[..., None, :]
  center_resid = resid
  resid = pad_last(resid, d)
  norm = jnp.linalg.norm(resid, axis=-1)
  o = resid / jnp.where(norm > 0, norm, 1.0)[..., None]
  y = o @ rotation                                         # P^T o
  bits = y > 0
  corr = jnp.sum(jnp.abs(y), axis=-1) / jnp.sqrt(jnp.float32(d))
  corr = jnp.where(norm > 0, corr, 1.0)                    # a zero residual estimates 0
  if query_center is None:
    center_term = jnp.zeros_like(norm)
  else:
    center_term = jnp.einsum("...nd,...d->...n", center_resid,
                             query_center.astype(jnp.float32))
  return KeyCodes(pack_bits(bits), norm, corr, center_term)


class QueryCode(NamedTuple):
  """A rotated query quantised to B_q-bit unsigned integers (leading axes ...).

  q_u: (..., D) int32 in [0, 2^B_q - 1].
  planes: (..., B_q, D/32) uint32; plane j packs bit j of every q_u,i.
  delta, v_l: (...) the scale and offset, q' ~ delta q_u + v_l.
  sum_q: (...) sum_i q_u,i.
  """
  q_u: jax.Array
  planes: jax.Array
  delta: jax.Array
  v_l: jax.Array
  sum_q: jax.Array


def quantize_query(q_rot: jax.Array, key: jax.Array | None = None, *,
                   bits: int = QUERY_BITS, randomized: bool = True) -> QueryCode:
  """Quantises rotated queries q' (..., D) to `bits`-bit unsigned integers:

      v_l = min_i q'_i,  Delta = (max_i q'_i - v_l) / (2^bits - 1),
      q_u = floor((q' - v_l) / Delta + u),

  with u ~ U[0, 1) (randomized=True, unbiased: E[Delta q_u + v_l] = q') or u = 1/2
  (round to nearest).

  Args:
    q_rot: (..., D) rotated centred queries, D a multiple of 32.
    key: PRNG key of u (required when randomized).
    bits: B_q.
    randomized: randomised (True) or nearest (False) rounding.

  Returns:
    `QueryCode` with leading axes (...).

  Example:
    >>> code = quantize_query(q @ p, jax.random.PRNGKey(1))
    >>> code.delta * code.q_u + code.v_l                  # ~ q @ p
  """
  if randomized and key is None:
    raise ValueError("randomised query rounding needs a PRNG key")
  if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not 1 <= bits <= 16:
    raise ValueError(f"quantize_query: bits={bits!r}; expected an int in [1, 16]")
  levels = (1 << bits) - 1
  q_rot = q_rot.astype(jnp.float32)
  v_l = jnp.min(q_rot, axis=-1)
  delta = (jnp.max(q_rot, axis=-1) - v_l) / levels
  safe = jnp.where(delta > 0, delta, 1.0)
  x = (q_rot - v_l[..., None]) / safe[..., None]
  u = jax.random.uniform(key, q_rot.shape) if randomized else 0.5
  q_u = jnp.clip(jnp.floor(x + u), 0, levels).astype(jnp.int32)
  planes = jnp.stack([pack_bits(((q_u >> j) & 1).astype(bool)) for j in range(bits)], axis=-2)
  return QueryCode(q_u, planes, delta, v_l, jnp.sum(q_u, axis=-1))


def key_bytes_per_token(dim: int, scalar_bytes: int = 4, num_scalars: int = 3) -> int:
  """Bytes of one quantised key: D'/8 for the bits (D' = padded_dim(D)) plus the scalars
  (||k - c_k||, <o_bar, o>, <c_q, k - c_k>).

  Example:
    >>> key_bytes_per_token(128)                           # 16 + 3 * 4, vs 256 in bf16
    28
  """
  return padded_dim(dim) // 8 + scalar_bytes * num_scalars
