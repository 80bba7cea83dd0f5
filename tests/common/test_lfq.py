"""Lookup-free quantisation (common/models/lfq.py) against closed forms and brute force."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import lfq


def test_plain_lfq_is_the_sign_and_indices_round_trip():
  z = jnp.asarray([[0.3, -1.2, 0.0, 2.0], [-0.1, 0.2, -3.0, -0.5]])
  q = lfq.quantize(z)
  np.testing.assert_array_equal(q.codes[:, 0], [[1, -1, 1, 1], [-1, 1, -1, -1]])
  np.testing.assert_array_equal(q.indices[:, 0], [1 + 4 + 8, 2])
  np.testing.assert_array_equal(lfq.indices_to_codes(q.indices, 4), q.codes)
  every = jnp.arange(16)
  np.testing.assert_array_equal(lfq.codes_to_indices(lfq.indices_to_codes(every, 4)), every)
  np.testing.assert_array_equal(q.z_hat, q.codes[:, 0])


@pytest.mark.parametrize("levels", [1, 2, 4, 6])
def test_residual_lfq_is_a_binary_expansion(levels):
  """|z - z_hat| <= s_0 / 2^(L-1) wherever |z| <= 2 s_0, and the bound is reached."""
  scale = 0.7
  z = jax.random.uniform(jax.random.PRNGKey(0), (2000, 3), minval=-2 * scale, maxval=2 * scale)
  q = lfq.quantize(z, levels, scale)
  err = jnp.max(jnp.abs(z - q.z_hat))
  assert err <= scale / 2 ** (levels - 1) + 1e-6
  assert err > 0.9 * scale / 2 ** (levels - 1)  # dense samples come close to it
  np.testing.assert_allclose(lfq.dequantize(q.indices, 3, scale), q.z_hat, atol=1e-6)
  np.testing.assert_allclose(q.residuals[:, 0], z)


def test_straight_through_gradient_is_the_identity():
  z = jax.random.normal(jax.random.PRNGKey(1), (5, 4))
  g = jax.grad(lambda x: jnp.sum(lfq.quantize(x, 3).z_hat * jnp.arange(4.0)))(z)
  np.testing.assert_allclose(g, jnp.broadcast_to(jnp.arange(4.0), (5, 4)))


def test_entropy_terms_match_brute_force_and_factorise():
  r = jax.random.normal(jax.random.PRNGKey(2), (7, 2, 3))
  beta, scale = 1.5, 2.0
  per_sample, batch = lfq.entropy_terms(r, scale, beta)
  codes = np.array(list(itertools.product((-1.0, 1.0), repeat=3)))
  for l in range(2):
    s = scale / 2**l
    logits = beta * np.asarray(r[:, l]) / s @ codes.T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    h = -(p * np.log(p)).sum(1)
    mean_p = p.mean(0)
    np.testing.assert_allclose(per_sample[l], h.mean(), rtol=1e-5)
    np.testing.assert_allclose(batch[l], -(mean_p * np.log(mean_p)).sum(), rtol=1e-5)
    # softmax(beta <x, c>) factorises over bits: H = sum_i H(sigmoid(2 beta x_i)).
    x = np.asarray(r[:, l]) / s
    pi = 1 / (1 + np.exp(-2 * beta * x))
    bern = -(pi * np.log(pi) + (1 - pi) * np.log(1 - pi)).sum(1)
    np.testing.assert_allclose(per_sample[l], bern.mean(), rtol=1e-5)


def test_lfq_losses_and_their_gradients_are_finite():
  z = jax.random.normal(jax.random.PRNGKey(3), (16, 6))

  def total(x):
    return lfq.lfq_losses(x, lfq.quantize(x, 2), gamma=1.0)["total"]

  value, grad = jax.value_and_grad(total)(z)
  assert np.isfinite(value) and np.all(np.isfinite(grad)) and np.any(grad != 0)
  parts = lfq.lfq_losses(z, lfq.quantize(z, 2))
  assert parts["commitment"] > 0
  np.testing.assert_allclose(parts["total"], 0.1 * parts["entropy"] + 0.25 * parts["commitment"],
                             rtol=1e-6)


@pytest.mark.parametrize("mode, changed", [("flip", 1.0), ("resample", 0.5)])
def test_corruption_changes_bits_at_the_level_rate(mode, changed):
  codes = lfq.quantize(jax.random.normal(jax.random.PRNGKey(4), (20000, 3, 8)), 3).codes
  rates = (0.0, 0.1, 0.4)
  out = lfq.corrupt_codes(jax.random.PRNGKey(5), codes, rates, mode)
  frac = np.asarray(jnp.mean(out != codes, axis=(0, 1, 3)))  # per level (axis -2)
  n = codes.shape[0] * codes.shape[1] * codes.shape[3]
  for level, rate in enumerate(rates):
    p = rate * changed
    assert abs(frac[level] - p) <= 5 * np.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-9, (level, frac)
  assert set(np.unique(np.asarray(out))) <= {-1.0, 1.0}


def test_bad_arguments_are_one_line_errors():
  codes = jnp.ones((4, 2, 3))
  with pytest.raises(ValueError, match="rates must be 2 probabilities"):
    lfq.corrupt_codes(jax.random.PRNGKey(0), codes, (0.1,))
  with pytest.raises(ValueError, match="mode must be one of"):
    lfq.corrupt_codes(jax.random.PRNGKey(0), codes, (0.1, 0.2), "swap")
  with pytest.raises(ValueError, match="levels must be >= 1"):
    lfq.quantize(jnp.ones((2, 3)), 0)
  with pytest.raises(ValueError, match="enumerates 2\\^b codes"):
    lfq.entropy_terms(jnp.ones((2, 1, 17)))
