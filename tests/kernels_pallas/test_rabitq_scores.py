"""The rabitq_scores Pallas kernel (interpret mode) against its references: the
integer bit-plane inner product bit-exactly, the float scores to float rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import rabitq_scores as rs
from methods import rabitq_attention as ra


def _inputs(r=2, n=96, d=64, q=3, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  k = jax.random.normal(keys[0], (r, n, d))
  rot = ra.random_rotation(keys[1], d)
  codes = ra.quantize_keys(k, rot, jnp.mean(k, axis=1), jnp.ones((r, d)) * 0.1)
  qv = jax.random.normal(keys[2], (r, q, d)) @ rot
  code = ra.quantize_query(qv, keys[3])
  bias = jnp.arange(r * q, dtype=jnp.float32).reshape(r, q)
  return k, codes, code, bias


def _args(codes, code, bias):
  scalars = jnp.stack([code.delta, code.v_l, code.sum_q.astype(jnp.float32), bias], -1)
  return (codes.words, codes.norm / codes.ip_correction, codes.center_term, code.planes,
          scalars)


@pytest.mark.parametrize("block_n", [32, 128])
def test_kernel_integer_dot_is_bit_exact(block_n):
  _, codes, code, bias = _inputs()
  args = _args(codes, code, bias)
  blocks = rs.RaBitQScoresBlocks(block_n=block_n)
  got = rs.rabitq_scores(*args, raw=True, blocks=blocks, interpret=True)
  # Independent integer reference: unpacked bits times the 4-bit integers.
  bits = np.asarray(ra.unpack_bits(codes.words, 64), np.int64)      # (R, N, D)
  want = np.einsum("rnd,rqd->rqn", bits, np.asarray(code.q_u, np.int64))
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(np.asarray(got), want)
  np.testing.assert_array_equal(np.asarray(rs.rabitq_scores_reference(*args, raw=True)), want)


def test_kernel_scores_match_reference_and_estimator():
  _, codes, code, bias = _inputs(n=64, d=32, q=2, seed=1)
  args = _args(codes, code, bias)
  got = rs.rabitq_scores(*args, interpret=True, blocks=rs.RaBitQScoresBlocks(block_n=16))
  ref = rs.rabitq_scores_reference(*args)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
  # Same numbers as the estimator written from the equation.
  est = jax.jit(jax.vmap(lambda c, qc, b: jax.vmap(lambda qq, bb: ra.estimate_scores(c, qq, bb))(
      qc, b)))(codes, code, bias)
  np.testing.assert_allclose(got, est, rtol=1e-4, atol=1e-3)


def test_kernel_rejects_bad_shapes():
  _, codes, code, bias = _inputs()
  args = list(_args(codes, code, bias))
  args[3] = args[3][:, :, :3]
  with pytest.raises(ValueError, match="q_planes"):
    rs.rabitq_scores(*args, interpret=True)
  with pytest.raises(ValueError, match="key_words"):
    rs.rabitq_scores_reference(codes.words.astype(jnp.int32), *_args(codes, code, bias)[1:])


def test_bitplane_dot_and_inner_product_are_the_estimator_arithmetic():
  """The two reference pieces against brute force: Q queries against shared keys."""
  keys = jax.random.split(jax.random.PRNGKey(2), 2)
  bits = jax.random.bernoulli(keys[0], 0.5, (20, 64))
  q_u = jax.random.randint(keys[1], (3, 64), 0, 16)
  planes = jnp.stack([ra.pack_bits(((q_u >> j) & 1).astype(bool)) for j in range(4)], -2)
  dot = rs.bitplane_dot(ra.pack_bits(bits), planes)                 # (3, 20)
  np.testing.assert_array_equal(dot, np.asarray(q_u) @ np.asarray(bits, np.int64).T)
  delta, v_l = jnp.array([[0.3], [0.1], [1.0]]), jnp.array([[-1.0], [0.5], [0.0]])
  popc = jnp.sum(bits, -1)
  got = rs.binary_query_inner_product(dot, popc, delta, v_l, jnp.sum(q_u, -1)[:, None], 64)
  x_bar = (2.0 * bits - 1.0) / 8.0                                  # (2 x_b - 1) / sqrt(D)
  want = (delta * q_u + v_l) @ x_bar.T                              # <x_bar, q_bar>
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
