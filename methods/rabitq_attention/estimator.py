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
  """<x_b, q_u> = sum_i x_b,i q_u,i by plain integer arithmetic (the brute-force check
  of `binary_int4_dot`).

  Args:
    bits: (..., N, D) bool key sign bits x_b.
    q_u: (..., D) integer query code.

  Returns:
    (..., N) int32.

  Example:
    >>> integer_dot(jnp.array([[True, False, True]]), jnp.array([3, 5, 7]))
    Array([10], dtype=int32)
  """
  return jnp.einsum("...nd,...d->...n", bits.astype(jnp.int32), q_u.astype(jnp.int32))


def binary_int4_dot(words: jax.Array, planes: jax.Array) -> jax.Array:
  """<x_b, q_u> = sum_j 2^j sum_w popcount(words[w] AND plane_j[w]) (the kernel's
  `bitplane_dot`).

  Args:
    words: (..., N, W) uint32 packed key bits (`pack_bits`).
    planes: (..., B_q, W) uint32 query bit planes (`QueryCode.planes`).

  Returns:
    (..., N) int32, equal to `integer_dot` of the unpacked bits and q_u.

  Example:
    >>> code = quantize_query(q_rot, randomized=False)      # q_rot (D,)
    >>> binary_int4_dot(codes.words, code.planes)           # codes: N keys -> (N,)
  """
  return rs_kernel.bitplane_dot(words, planes)


def binary_query_product(words: jax.Array, qcode: QueryCode) -> jax.Array:
  """<x_bar, q_bar> from the integer parts (eq. 20):

      <x_bar, q_bar> = (1/sqrt(D)) [2 Delta <x_b, q_u> + 2 v_l popcount(x_b)
                                    - Delta sum_i q_u,i - D v_l].

  Args:
    words: (..., N, W) uint32 packed key bits.
    qcode: a `QueryCode` with leading axes (...).

  Returns:
    (..., N) float32; equals <(2 x_b - 1)/sqrt(D), Delta q_u + v_l> up to rounding.

  Example:
    >>> binary_query_product(codes.words, quantize_query(q_rot, key))
  """
  d = words.shape[-1] * 32
  dot = binary_int4_dot(words, qcode.planes)
  popc = jnp.sum(jax.lax.population_count(words).astype(jnp.int32), -1)
  return rs_kernel.binary_query_inner_product(
      dot, popc, qcode.delta[..., None], qcode.v_l[..., None], qcode.sum_q[..., None], d)


def estimate_unit_float(codes: KeyCodes, q_rot: jax.Array) -> jax.Array:
  """The estimate of <o, q - c_q> with the exact (unquantised) rotated query q':

      <x_bar, q'> / <o_bar, o>,   x_bar = (2 x_b - 1) / sqrt(D);

  the quantity the error bound is stated for.

  Args:
    codes: `KeyCodes` of N keys (leading axes ..., N).
    q_rot: (..., D) rotated centred query q' = P^T (q - c_q).

  Returns:
    (..., N) float32.

  Example:
    >>> codes = quantize_keys(o[None], p)                    # one unit key o (D,)
    >>> estimate_unit_float(codes, q @ p)                    # ~ <o, q>, shape (1,)
  """
  d = q_rot.shape[-1]
  x_bar = (2.0 * unpack_bits(codes.words, d).astype(jnp.float32) - 1.0) / math.sqrt(d)
  return jnp.einsum("...nd,...d->...n", x_bar, q_rot.astype(jnp.float32)) / codes.ip_correction


def estimate_unit(codes: KeyCodes, qcode: QueryCode) -> jax.Array:
  """The estimate of <o, q - c_q> from the B_q-bit query: <x_bar, q_bar> / <o_bar, o>.

  Args:
    codes: `KeyCodes` (leading axes ..., N).
    qcode: the `QueryCode` of q' (leading axes ...).

  Returns:
    (..., N) float32; unbiased over the rotation and randomised rounding.

  Example:
    >>> estimate_unit(quantize_keys(o[None], p), quantize_query(q @ p, key))
  """
  return binary_query_product(codes.words, qcode) / codes.ip_correction


def estimate_scores(codes: KeyCodes, qcode: QueryCode, query_bias: jax.Array | None = None,
                    ) -> jax.Array:
  """Estimated scores from the centring identity:

      <q, k> ~ ||k - c_k|| <x_bar, q_bar> / <o_bar, o> + <c_q, k - c_k> + <q, c_k>.

  Args:
    codes: `KeyCodes` of N keys (norm, ip_correction, center_term: (..., N)).
    qcode: the `QueryCode` of P^T (q - c_q) (leading axes ...).
    query_bias: optional (...) <q, c_k> (the same for every key; softmax ignores it).

  Returns:
    (..., N) float32 estimated <q, k>.

  Example:
    >>> codes = quantize_keys(k, p, c_k, c_q)                              # k (N, D)
    >>> est = estimate_scores(codes, quantize_query((q - c_q) @ p, key), q @ c_k)
  """
  est = codes.norm * estimate_unit(codes, qcode) + codes.center_term
  return est if query_bias is None else est + query_bias[..., None]


def kernel_scores(codes: KeyCodes, qcode: QueryCode, query_bias: jax.Array, *,
                  use_kernel: bool = False, interpret: bool = False,
                  blocks: rs_kernel.RaBitQScoresBlocks = rs_kernel.RaBitQScoresBlocks(),
                  ) -> jax.Array:
  """`estimate_scores` for a block of Q queries per row, through `rabitq_scores`:

      score = (||k - c_k|| / <o_bar, o>) <x_bar, q_bar> + <c_q, k - c_k> + <q, c_k>.

  Args:
    codes: `KeyCodes` with leading axes (R, N).
    qcode: `QueryCode` with leading axes (R, Q) (4-bit planes).
    query_bias: (R, Q) <q, c_k>.
    use_kernel: the Pallas kernel (True) or its jnp reference (False; the fast path
      under jit on CPU).
    interpret: run the kernel in interpret mode (CPU tests).
    blocks: the kernel's tile sizes.

  Returns:
    (R, Q, N) float32 estimated scores.

  Example:
    >>> kernel_scores(codes, qcode, bias)                 # (R, Q, N), jnp reference
  """
  scale = codes.norm / codes.ip_correction
  scalars = jnp.stack([qcode.delta, qcode.v_l, qcode.sum_q.astype(jnp.float32),
                       query_bias.astype(jnp.float32)], axis=-1)
  args = (codes.words, scale, codes.center_term, qcode.planes, scalars)
  if use_kernel:
    return rs_kernel.rabitq_scores(*args, blocks=blocks, interpret=interpret)
  return rs_kernel.rabitq_scores_reference(*args)


def error_bound(ip_correction: jax.Array, dim: int, eps0: float = EPS0) -> jax.Array:
  """The RaBitQ bound on the error of the unit estimate (Gao & Long, Thm. 3.2):

      |<x_bar, q'>/<o_bar, o> - <o, q'>| <= sqrt((1 - <o_bar,o>^2) / <o_bar,o>^2)
                                             * eps0 / sqrt(D - 1)

  for unit o and q', with probability at least P(|N(0,1)| <= eps0) (`bound_rate`).

  Args:
    ip_correction: <o_bar, o> (any shape).
    dim: D.
    eps0: the confidence parameter (1.9 in the paper).

  Returns:
    The bound, shaped like `ip_correction`.

  Example:
    >>> error_bound(codes.ip_correction, 128)             # about 0.13 for <o_bar,o> = 0.8
  """
  c = ip_correction
  return jnp.sqrt(jnp.clip(1.0 - c * c, 0.0) / (c * c)) * eps0 / math.sqrt(dim - 1)


def bound_rate(eps0: float = EPS0) -> float:
  """The fraction of pairs the bound is expected to cover, P(|N(0,1)| <= eps0) =
  erf(eps0 / sqrt(2)).

  Example:
    >>> round(bound_rate(1.9), 4)
    0.9426
  """
  return math.erf(eps0 / math.sqrt(2.0))
