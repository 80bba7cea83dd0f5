"""The rabitq_scores Pallas kernel (interpret mode) against its references: the
integer bit-plane inner product bit-exactly, the float scores to float rounding.

Test time is compilation: one set of inputs (2 rows x 96 keys x 64 dims: two words per
key, several key tiles per row) is built once, from numpy draws, and each check runs
kernel and reference in one jitted function (compiled at the suite's -O0,
tests/conftest.py).
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas import rabitq_scores as rs
from methods import rabitq_attention as ra

R, N, D, Q = 2, 96, 64, 3


@pytest.fixture(scope="module")
def codes_and_args():
  """Key codes (R, N), query codes (R, Q) and the kernel's five arguments."""
  rng = np.random.default_rng(0)
  k = rng.standard_normal((R, N, D)).astype(np.float32)
  q = rng.standard_normal((R, Q, D)).astype(np.float32)
  bias = np.arange(R * Q, dtype=np.float32).reshape(R, Q)

  @jax.jit
  def build(k, q, key):
    rot_key, round_key = jax.random.split(key)
    rot = ra.random_rotation(rot_key, D)
    codes = ra.quantize_keys(k, rot, jnp.mean(k, axis=1), jnp.ones((R, D)) * 0.1)
    code = ra.quantize_query(q @ rot, round_key)
    scalars = jnp.stack([code.delta, code.v_l, code.sum_q.astype(jnp.float32), bias], -1)
    args = (codes.words, codes.norm / codes.ip_correction, codes.center_term, code.planes,
            scalars)
    return codes, code, args

  return build(k, q, jax.random.PRNGKey(1))


@pytest.mark.parametrize("block_n", [32, 128])     # 3 tiles of 32; 128 > N falls back to 32
def test_kernel_integer_dot_is_bit_exact(codes_and_args, block_n):
  codes, code, args = codes_and_args
  blocks = rs.RaBitQScoresBlocks(block_n=block_n)
  got, ref = jax.jit(lambda *a: (rs.rabitq_scores(*a, raw=True, blocks=blocks, interpret=True),
                              rs.rabitq_scores_reference(*a, raw=True)))(*args)
  # Independent integer reference: unpacked bits times the 4-bit integers.
  bits = np.asarray(ra.unpack_bits(np.asarray(codes.words), D), np.int64)      # (R, N, D)
  want = np.einsum("rnd,rqd->rqn", bits, np.asarray(code.q_u, np.int64))
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(np.asarray(got), want)
  np.testing.assert_array_equal(np.asarray(ref), want)


def test_kernel_scores_match_reference_and_estimator(codes_and_args):
  codes, code, args = codes_and_args
  bias = args[4][..., 3]

  @jax.jit
  def scores(codes, code, bias, *args):
    got = rs.rabitq_scores(*args, interpret=True, blocks=rs.RaBitQScoresBlocks(block_n=16))
    # Same numbers as the estimator written from the equation.
    est = jax.vmap(lambda c, qc, b: jax.vmap(lambda qq, bb: ra.estimate_scores(c, qq, bb))(
        qc, b))(codes, code, bias)
    return got, rs.rabitq_scores_reference(*args), est

  got, ref, est = scores(codes, code, bias, *args)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(got, est, rtol=1e-4, atol=1e-3)


def test_kernel_rejects_bad_shapes(codes_and_args):
  codes, _, args = codes_and_args
  args = list(args)
  with pytest.raises(ValueError, match="q_planes"):
    rs.rabitq_scores(*args[:3], args[3][:, :, :3], args[4], interpret=True)
  with pytest.raises(ValueError, match="key_words"):
    rs.rabitq_scores_reference(np.asarray(codes.words).astype(np.int32), *args[1:])


def test_bitplane_dot_and_inner_product_are_the_estimator_arithmetic():
  """The two reference pieces against brute force: Q queries against shared keys."""
  rng = np.random.default_rng(2)
  bits = rng.random((20, 64)) < 0.5
  q_u = rng.integers(0, 16, (3, 64), dtype=np.int32)
  delta, v_l = np.array([[0.3], [0.1], [1.0]]), np.array([[-1.0], [0.5], [0.0]])

  @jax.jit
  def pieces(bits, q_u):
    planes = jnp.stack([ra.pack_bits(((q_u >> j) & 1).astype(bool)) for j in range(4)], -2)
    dot = rs.bitplane_dot(ra.pack_bits(bits), planes)                 # (3, 20)
    return dot, rs.binary_query_inner_product(dot, jnp.sum(bits, -1), delta, v_l,
                                              jnp.sum(q_u, -1)[:, None], 64)

  dot, got = pieces(bits, q_u)
  np.testing.assert_array_equal(dot, q_u.astype(np.int64) @ bits.astype(np.int64).T)
  x_bar = (2.0 * bits - 1.0) / 8.0                                  # (2 x_b - 1) / sqrt(D)
  want = (delta * q_u + v_l) @ x_bar.T                              # <x_bar, q_bar>
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
