"""The sparse_decode_attention Pallas kernel (interpret mode) against its reference,
and with every token selected against the model's dense attention.

Inputs are numpy draws of one shape (8 rows x 96 tokens x 32 dims: with the default
blocks one row block and three key blocks, with (4, 32) two row blocks), and each check
runs kernel and reference in one jitted function (compiled at the suite's -O0,
tests/conftest.py).
"""


import jax
import numpy as np
import pytest

from common.models import transformer
from kernels_pallas import sparse_decode_attention as sd

R, K, D = 8, 96, 32


def _inputs(p=0.4, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.standard_normal((R, D)).astype(np.float32)
  k = 2.0 * rng.standard_normal((R, K, D)).astype(np.float32)
  v = rng.standard_normal((R, K, D)).astype(np.float32)
  return q, k, v, rng.random((R, K)) < p


@pytest.mark.parametrize("blocks", [sd.SparseDecodeBlocks(), sd.SparseDecodeBlocks(4, 32)])
def test_kernel_matches_reference(blocks):
  q, k, v, mask = _inputs()
  mask[3] = False                                # a row with nothing selected -> zeros
  got, want = jax.jit(lambda *a: (sd.sparse_decode_attention(*a, blocks=blocks, interpret=True),
                               sd.sparse_decode_attention_reference(*a)))(q, k, v, mask)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(got[3]), 0.0)


def test_all_selected_equals_full_attention():
  b, h, kvh = 2, 4, 2                            # R = b * h query heads over K tokens
  rng = np.random.default_rng(1)
  q = rng.standard_normal((b, 1, h, D)).astype(np.float32)
  k = rng.standard_normal((b, K, kvh, D)).astype(np.float32)
  v = rng.standard_normal((b, K, kvh, D)).astype(np.float32)
  g = h // kvh
  # Gather per query head: head hh reads KV head hh // g.
  kg = np.repeat(np.swapaxes(k, 1, 2), g, axis=1).reshape(b * h, K, D)
  vg = np.repeat(np.swapaxes(v, 1, 2), g, axis=1).reshape(b * h, K, D)
  mask = np.ones((b * h, K), bool)

  @jax.jit
  def outputs(q, k, v, kg, vg):
    full = transformer.dot_product_attention(q, k, v, q_positions=np.array([K - 1]),
                                             kv_length=np.int32(K), layer=0)
    args = (q.reshape(b * h, D), kg, vg, mask)
    return full, [fn(*args).reshape(b, 1, h, D) for fn in (
        lambda *a: sd.sparse_decode_attention(*a, interpret=True),
        sd.sparse_decode_attention_reference)]

  full, outs = outputs(q, k, v, kg, vg)
  for out in outs:
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-5)


def test_rejects_bad_shapes():
  q, k, v, mask = _inputs()
  with pytest.raises(ValueError, match="need q"):
    sd.sparse_decode_attention(q, k, v[:, :10], mask, interpret=True)
