"""The RaBitQ inner-product estimator for attention scores, and its error bound.

With o = (k - c_k)/||k - c_k||, the rotated quantised key x_bar (quantization.py) and
the rotated centred query q' = P^T (q - c_q), RaBitQ (Gao & Long, SIGMOD 2024,
Thm. 3.2) estimates

    <o, q - c_q>  ~  <x_bar, q'> / <o_bar, o>          (unbiased over the rotation P)

and, for unit o and unit q - c_q, with high probability

    |<x_bar, q'>/<o_bar, o> - <o, q - c_q>| <= sqrt((1 - <o_bar,o>^2) / <o_bar,o>^2)
                                                * eps0 / sqrt(D - 1),   eps0 = 1.9.

The error behaves like that factor times sqrt(1 - <o,q>^2) z with z ~ N(0, 1), so the
bound holds for a fraction of at least P(|z| <= eps0) = 0.943 of the pairs (the rate
we test), and the error shrinks like 1 / sqrt(D).

With q' replaced by its 4-bit code q_bar = Delta q_u + v_l the inner product is
integer arithmetic (eq. 19-20 of the paper):

    <x_bar, q_bar> = (1/sqrt(D)) [2 Delta <x_b, q_u> + 2 v_l popcount(x_b)
                                  - Delta sum_i q_u,i - D v_l],
    <x_b, q_u> = sum_j 2^j popcount(x_b AND plane_j(q_u)),

and the attention score is assembled from the centring identity

    <q, k> = <q, c_k> + <q - c_q, k - c_k> + <c_q, k - c_k>
           ~ <q, c_k> + ||k - c_k|| <x_bar, q_bar> / <o_bar, o> + <c_q, k - c_k>,

where <q, c_k> is one number per query (softmax ignores it) and <c_q, k - c_k> is
stored per token when the key is quantised. Randomised query rounding keeps the
estimate unbiased (E over P and u).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from kernels_pallas import rabitq_scores as rs_kernel
from methods.rabitq_attention.quantization import KeyCodes
from methods.rabitq_attention.quantization import QueryCode
from methods.rabitq_attention.quantization import unpack_bits

EPS0 = 1.9


def integer_dot(bits: jax.Array, q_u: jax.Array) -> jax.Array:
  """<x_b, q_u> by plain integer arithmetic: bits (..., N, D) bool, q_u (..., D)."""
  return jnp.einsum("...nd,...d->...n", bits.astype(jnp.int32), q_u.astype(jnp.int32))


def binary_int4_dot(words: jax.Array, planes: jax.Array) -> jax.Array:
  """<x_b, q_u> = sum_j 2^j sum_w popcount(words[w] & plane_j[w]).

  words: (..., N, W) uint32 packed key bits; planes: (..., B_q, W) query bit planes.
  Returns (..., N) int32.
  """
  total = 0
  for j in range(planes.shape[-2]):
    both = words & planes[..., j, None, :]
    total = total + (1 << j) * jnp.sum(jax.lax.population_count(both).astype(jnp.int32),
                                       axis=-1)
  return total


def binary_query_product(words: jax.Array, qcode: QueryCode) -> jax.Array:
  """<x_bar, q_bar> from the integer parts (eq. 20): words (..., N, W), qcode (...)."""
  d = words.shape[-1] * 32
  dot = binary_int4_dot(words, qcode.planes).astype(jnp.float32)
  popc = jnp.sum(jax.lax.population_count(words).astype(jnp.int32), -1).astype(jnp.float32)
  delta, v_l = qcode.delta[..., None], qcode.v_l[..., None]
  return (2 * delta * dot + 2 * v_l * popc - delta * qcode.sum_q[..., None].astype(
      jnp.float32) - d * v_l) / math.sqrt(d)


def estimate_unit_float(codes: KeyCodes, q_rot: jax.Array) -> jax.Array:
  """<x_bar, q'> / <o_bar, o> with the exact (unquantised) rotated query q' (..., D):
  the estimate of <o, q - c_q> that the bound is stated for. Returns (..., N)."""
  d = q_rot.shape[-1]
  x_bar = (2.0 * unpack_bits(codes.words, d).astype(jnp.float32) - 1.0) / math.sqrt(d)
  return jnp.einsum("...nd,...d->...n", x_bar, q_rot.astype(jnp.float32)) / codes.ip_correction


def estimate_unit(codes: KeyCodes, qcode: QueryCode) -> jax.Array:
  """<x_bar, q_bar> / <o_bar, o>: the estimate of <o, q - c_q> from the 4-bit query."""
  return binary_query_product(codes.words, qcode) / codes.ip_correction


def estimate_scores(codes: KeyCodes, qcode: QueryCode, query_bias: jax.Array | None = None,
                    ) -> jax.Array:
  """Estimated <q, k> (..., N) = ||k - c_k|| <x_bar, q_bar>/<o_bar, o> + <c_q, k - c_k>
  + <q, c_k> (query_bias (...), optional)."""
  est = codes.norm * estimate_unit(codes, qcode) + codes.center_term
  return est if query_bias is None else est + query_bias[..., None]


def kernel_scores(codes: KeyCodes, qcode: QueryCode, query_bias: jax.Array, *,
                  use_kernel: bool = False, interpret: bool = False,
                  blocks: rs_kernel.RaBitQScoresBlocks = rs_kernel.RaBitQScoresBlocks(),
                  ) -> jax.Array:
  """`estimate_scores` for a block of Q queries per row through `rabitq_scores`.

  codes: leading axes (R, N); qcode and query_bias: leading axes (R, Q).
  Returns (R, Q, N). use_kernel picks the Pallas kernel (interpret=True on CPU),
  otherwise its jnp reference (the fast path under jit on CPU).
  """
  scale = codes.norm / codes.ip_correction
  scalars = jnp.stack([qcode.delta, qcode.v_l, qcode.sum_q.astype(jnp.float32),
                       query_bias.astype(jnp.float32)], axis=-1)
  args = (codes.words, scale, codes.center_term, qcode.planes, scalars)
  if use_kernel:
    return rs_kernel.rabitq_scores(*args, blocks=blocks, interpret=interpret)
  return rs_kernel.rabitq_scores_reference(*args)


def error_bound(ip_correction: jax.Array, dim: int, eps0: float = EPS0) -> jax.Array:
  """The RaBitQ bound on |<x_bar, q'>/<o_bar, o> - <o, q'>| for unit o and q':
  sqrt((1 - <o_bar,o>^2) / <o_bar,o>^2) * eps0 / sqrt(D - 1)."""
  c = ip_correction
  return jnp.sqrt(jnp.clip(1.0 - c * c, 0.0) / (c * c)) * eps0 / math.sqrt(dim - 1)


def bound_rate(eps0: float = EPS0) -> float:
  """The fraction of pairs the bound is expected to cover, P(|N(0,1)| <= eps0)."""
  return math.erf(eps0 / math.sqrt(2.0))
