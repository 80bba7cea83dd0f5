"""The sparse_decode_attention Pallas kernel (interpret mode) against its reference,
and with every token selected against the model's dense attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import transformer
from kernels_pallas import sparse_decode_attention as sd


def _inputs(r=8, k=96, d=32, p=0.4, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  q = jax.random.normal(keys[0], (r, d))
  kk = 2.0 * jax.random.normal(keys[1], (r, k, d))
  v = jax.random.normal(keys[2], (r, k, d))
  mask = jax.random.uniform(keys[3], (r, k)) < p
  return q, kk, v, mask


@pytest.mark.parametrize("blocks", [sd.SparseDecodeBlocks(), sd.SparseDecodeBlocks(4, 32)])
def test_kernel_matches_reference(blocks):
  q, k, v, mask = _inputs()
  mask = mask.at[3].set(False)                   # a row with nothing selected -> zeros
  got = sd.sparse_decode_attention(q, k, v, mask, blocks=blocks, interpret=True)
  want = sd.sparse_decode_attention_reference(q, k, v, mask)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(got[3]), 0.0)


def test_all_selected_equals_full_attention():
  b, s, h, kvh, d = 2, 64, 4, 2, 32
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  q = jax.random.normal(keys[0], (b, 1, h, d))
  k = jax.random.normal(keys[1], (b, s, kvh, d))
  v = jax.random.normal(keys[2], (b, s, kvh, d))
  full = transformer.dot_product_attention(q, k, v, q_positions=jnp.array([s - 1]),
                                           kv_length=jnp.int32(s), layer=0)
  g = h // kvh
  # Gather per query head: head hh reads KV head hh // g.
  kg = jnp.repeat(jnp.swapaxes(k, 1, 2), g, axis=1).reshape(b * h, s, d)
  vg = jnp.repeat(jnp.swapaxes(v, 1, 2), g, axis=1).reshape(b * h, s, d)
  mask = jnp.ones((b * h, s), bool)
  for fn in (lambda *a: sd.sparse_decode_attention(*a, interpret=True),
             sd.sparse_decode_attention_reference):
    out = fn(q.reshape(b * h, d), kg, vg, mask).reshape(b, 1, h, d)
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-5)


def test_rejects_bad_shapes():
  q, k, v, mask = _inputs()
  with pytest.raises(ValueError, match="need q"):
    sd.sparse_decode_attention(q, k, v[:, :10], mask, interpret=True)
