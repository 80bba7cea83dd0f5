"""RaBitQ binary x INT4 attention-score estimation (Pallas kernel + jnp reference).

For one (batch, KV-head) row, a block of Q queries is scored against N keys whose
rotated, centred unit vectors are stored as sign bits x_b in W = D / 32 uint32 words.
Each query has been rotated and quantised to 4-bit unsigned integers q_u
(q' ~ Delta q_u + v_l) and split into bit planes plane_j(q_u), j = 0..3, packed the
same way. The integer part of the estimator is computed with popcounts only:

    <x_b, q_u> = sum_{j<4} 2^j sum_w popcount(x_b[w] AND plane_j(q_u)[w])

and turned into the estimated score (Gao & Long, "RaBitQ", SIGMOD 2024, eq. 19-20):

    <x_bar, q_bar> = (1/sqrt(D)) [2 Delta <x_b, q_u> + 2 v_l popcount(x_b)
                                  - Delta sum_i q_u,i - D v_l]
    score = scale_n <x_bar, q_bar> + add_n + bias_q

with the per-key scale_n = ||k_n - c_k|| / <o_bar_n, o_n> and additive term
add_n = <c_q, k_n - c_k> (query centring), and the per-query bias_q = <q, c_k>
(see methods/rabitq_attention/estimator.py).

Shapes:
  key_words   (R, N, W) uint32      packed sign bits, R = batch * KV heads
  key_scale   (R, N)    float32     ||k - c_k|| / <o_bar, o>
  key_add     (R, N)    float32     <c_q, k - c_k>
  q_planes    (R, Q, 4, W) uint32   bit planes of q_u (plane j holds bit j)
  q_scalars   (R, Q, 4) float32     [Delta, v_l, sum_i q_u,i, bias_q]
  returns     (R, Q, N) float32     estimated <q, k>  (or the int32 <x_b, q_u>
                                    with raw=True)

The kernel tiles N by `RaBitQScoresBlocks.block_n`; it runs with interpret=True on
CPU (tests check it bit-exactly against the integer reference) and compiled on
GPU/TPU. On CPU under jit, call the reference (it is what `use_kernel=False` picks).

The reference is built from two pieces that are the only jnp implementation of the
estimator's arithmetic in the library: `bitplane_dot` (the popcount sum above) and
`binary_query_inner_product` (eq. 20). The kernel body and
`methods.rabitq_attention.estimator` call them too.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

QUERY_BITS = 4


@dataclasses.dataclass(frozen=True)
class RaBitQScoresBlocks:
  """Tile sizes: keys per program (gcd(N, block_n) is used, so any N works)."""
  block_n: int = 128


def _check(key_words, key_scale, key_add, q_planes, q_scalars):
  if key_words.ndim != 3 or key_words.dtype != jnp.uint32:
    raise ValueError(f"key_words must be (R, N, W) uint32, got {key_words.shape} "
                     f"{key_words.dtype}")
  r, n, w = key_words.shape
  if key_scale.shape != (r, n) or key_add.shape != (r, n):
    raise ValueError(f"key_scale/key_add must be (R, N)=({r}, {n}), got {key_scale.shape}, "
                     f"{key_add.shape}")
  if (q_planes.ndim != 4 or q_planes.shape[0] != r or q_planes.shape[2:] != (QUERY_BITS, w)
      or q_planes.dtype != jnp.uint32):
    raise ValueError(f"q_planes must be (R, Q, {QUERY_BITS}, W)=({r}, Q, {QUERY_BITS}, {w}) "
                     f"uint32, got {q_planes.shape} {q_planes.dtype}")
  if q_scalars.shape != q_planes.shape[:2] + (4,):
    raise ValueError(f"q_scalars must be (R, Q, 4)={q_planes.shape[:2] + (4,)}, got "
                     f"{q_scalars.shape}")


def _popcount_sum(x: jax.Array, axis: int) -> jax.Array:
  return jnp.sum(jax.lax.population_count(x).astype(jnp.int32), axis=axis)


def bitplane_dot(words: jax.Array, planes: jax.Array) -> jax.Array:
  """The integer part of the estimator, from popcounts only:

      <x_b, q_u> = sum_j 2^j sum_w popcount(x_b[w] AND plane_j(q_u)[w]).

  This is the one jnp reference of the kernel's inner loop; the kernel calls it on
  one tile and `methods.rabitq_attention.estimator` on any batch of keys and queries.

  Args:
    words: (..., N, W) uint32 packed key sign bits x_b.
    planes: (..., B, W) uint32 bit planes of a query's B-bit integers q_u (plane j
      holds bit j). Leading axes broadcast: words (N, W) against planes (Q, B, W)
      scores Q queries against the same N keys.

  Returns:
    (..., N) int32 <x_b, q_u>.

  Example:
    >>> words = jnp.full((2, 1), 0b1011, jnp.uint32)             # N=2 keys, W=1
    >>> planes = jnp.zeros((4, 1), jnp.uint32).at[1].set(0b11)   # q_u = 2 on coords 0, 1
    >>> bitplane_dot(words, planes)                              # 2 * popcount(0b11)
    Array([4, 4], dtype=int32)
  """
  total = 0
  for j in range(planes.shape[-2]):
    both = words & planes[..., j, None, :]                       # (..., N, W)
    total = total + (1 << j) * _popcount_sum(both, -1)
  return total


def binary_query_inner_product(dot, popcount, delta, v_l, sum_q, dim: int) -> jax.Array:
  """<x_bar, q_bar> from the integer parts (Gao & Long, eq. 20):

      <x_bar, q_bar> = (1/sqrt(D)) [2 Delta <x_b, q_u> + 2 v_l popcount(x_b)
                                    - Delta sum_i q_u,i - D v_l].

  Args:
    dot: <x_b, q_u> (`bitplane_dot`), any shape.
    popcount: popcount(x_b) per key, broadcast against `dot`.
    delta, v_l, sum_q: the query code's scale, offset and sum of q_u, broadcast
      against `dot` (e.g. (Q, 1) against (Q, N)).
    dim: D, the code width (32 W).

  Returns:
    float32 <x_bar, q_bar>, the broadcast shape.

  Example:
    >>> binary_query_inner_product(jnp.int32(4), jnp.int32(3), 1.0, 0.0, 2, 32)  # (8-2)/sqrt(32)
    Array(1.0606602, dtype=float32)
  """
  f32 = jnp.float32
  return (2.0 * delta * dot.astype(f32) + 2.0 * v_l * jnp.asarray(popcount).astype(f32)
          - delta * jnp.asarray(sum_q).astype(f32) - dim * v_l) / math.sqrt(dim)


def _scores_from_dot(dot, popc, scale, add, scalars, dim):
  """The float estimator from the integer parts; dot (Q, N), popc/scale/add (N,)."""
  delta, v_l, sum_q, bias = (scalars[:, i:i + 1] for i in range(4))
  x_dot_q = binary_query_inner_product(dot, popc[None, :], delta, v_l, sum_q, dim)
  return scale[None, :] * x_dot_q + add[None, :] + bias


def rabitq_scores_reference(key_words, key_scale, key_add, q_planes, q_scalars, *,
                            raw: bool = False) -> jax.Array:
  """Plain-jnp version of `rabitq_scores` (same signature and outputs)."""
  _check(key_words, key_scale, key_add, q_planes, q_scalars)
  dim = 32 * key_words.shape[-1]
  dot = jax.vmap(bitplane_dot)(key_words, q_planes)
  if raw:
    return dot
  popc = _popcount_sum(key_words, -1)
  return jax.vmap(functools.partial(_scores_from_dot, dim=dim))(
      dot, popc, key_scale.astype(jnp.float32), key_add.astype(jnp.float32),
      q_scalars.astype(jnp.float32))


def _kernel(words_ref, scale_ref, add_ref, planes_ref, scalars_ref, out_ref, *, raw, dim):
  words = words_ref[0]                       # (bn, W)
  planes = planes_ref[0]                     # (Q, 4, W)
  dot = bitplane_dot(words, planes)          # (Q, bn)
  if raw:
    out_ref[0] = dot
  else:
    popc = _popcount_sum(words, -1)
    out_ref[0] = _scores_from_dot(dot, popc, scale_ref[0], add_ref[0], scalars_ref[0], dim)


@functools.partial(jax.jit, static_argnames=("blocks", "raw", "interpret"))
def rabitq_scores(key_words, key_scale, key_add, q_planes, q_scalars, *,
                  blocks: RaBitQScoresBlocks = RaBitQScoresBlocks(), raw: bool = False,
                  interpret: bool = False) -> jax.Array:
  """Estimated scores (R, Q, N) of Q rotated INT4 queries against N packed binary keys.

  See the module docstring for the equation and shapes. raw=True returns the int32
  bit-plane inner products <x_b, q_u> instead (what the tests compare bit-exactly).
  """
  _check(key_words, key_scale, key_add, q_planes, q_scalars)
  r, n, w = key_words.shape
  q = q_planes.shape[1]
  bn = math.gcd(n, blocks.block_n)   # the largest tile <= block_n dividing N (a power of 2)
  kernel = functools.partial(_kernel, raw=raw, dim=32 * w)
  out_dtype = jnp.int32 if raw else jnp.float32
  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((r, q, n), out_dtype),
      grid=(r, n // bn),
      in_specs=[
          pl.BlockSpec((1, bn, w), lambda i, j: (i, j, 0)),
          pl.BlockSpec((1, bn), lambda i, j: (i, j)),
          pl.BlockSpec((1, bn), lambda i, j: (i, j)),
          pl.BlockSpec((1, q, QUERY_BITS, w), lambda i, j: (i, 0, 0, 0)),
          pl.BlockSpec((1, q, 4), lambda i, j: (i, 0, 0)),
      ],
      out_specs=pl.BlockSpec((1, q, bn), lambda i, j: (i, 0, j)),
      interpret=interpret,
  )(key_words, key_scale.astype(jnp.float32), key_add.astype(jnp.float32), q_planes,
    q_scalars.astype(jnp.float32))
