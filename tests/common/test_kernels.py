"""Kernels against their closed forms; PSD; finite gradients at zero distance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common import kernels


def _brute(name, x, y, ell):
  out = np.zeros((len(x), len(y)))
  for i, a in enumerate(x):
    for j, b in enumerate(y):
      r = np.linalg.norm(a - b) / ell
      out[i, j] = {
          "rbf": np.exp(-0.5 * r * r),
          "laplace": np.exp(-r),
          "matern32": (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r),
          "matern52": (1 + np.sqrt(5) * r + 5 * r * r / 3) * np.exp(-np.sqrt(5) * r),
      }[name]
  return out


@pytest.mark.parametrize("name", ["rbf", "laplace", "matern32", "matern52"])
def test_kernel_matches_closed_form_and_is_psd(name, x64):
  x = np.random.default_rng(0).normal(size=(7, 3))
  y = np.random.default_rng(1).normal(size=(5, 3))
  k = kernels.Kernel(0.7, name)
  np.testing.assert_allclose(k(x, y), _brute(name, x, y, 0.7), rtol=1e-10, atol=1e-12)
  assert np.linalg.eigvalsh(np.asarray(k(x, x))).min() > -1e-10


def test_gradient_wrt_lengthscale_is_finite_on_diagonal():
  x = jnp.linspace(-1, 1, 5)
  for name in ["laplace", "matern32", "matern52"]:
    g = jax.grad(lambda ell: kernels.Kernel(ell, name)(x, x).sum())(0.5)
    assert np.isfinite(g)


def test_product_kernel_and_median_heuristic(x64):
  t, x = jnp.linspace(0, 1, 4), jnp.arange(8.0).reshape(4, 2)
  k = kernels.ProductKernel((kernels.Kernel(0.3), kernels.Kernel(2.0, "laplace")))
  expected = kernels.rbf(t, t, 0.3) * kernels.laplace(x, x, 2.0)
  np.testing.assert_allclose(k((t, x), (t, x)), expected)
  d = np.abs(np.subtract.outer(np.arange(5.0), np.arange(5.0)))
  assert float(kernels.median_heuristic(jnp.arange(5.0))) == np.median(d[np.triu_indices(5, 1)])


def test_bad_inputs_raise_with_names():
  with pytest.raises(ValueError, match="unknown kernel 'gauss'"):
    kernels.get_kernel("gauss")
  with pytest.raises(ValueError, match="feature sizes differ"):
    kernels.rbf(jnp.ones((3, 2)), jnp.ones((3, 4)), 1.0)
  with pytest.raises(ValueError, match="at least 2 points"):
    kernels.median_heuristic(jnp.ones((1, 2)))


def test_non_positive_lengthscales_raise_instead_of_nan():
  x = jnp.arange(3.0)
  for name in ("rbf", "laplace", "matern32", "matern52"):
    with pytest.raises(ValueError, match="kernel lengthscale must be finite and > 0, got 0"):
      kernels.Kernel(0.0, name)(x, x)
  with pytest.raises(ValueError, match="kernel lengthscale must be finite and > 0"):
    kernels.rbf(x, x, float("nan"))
  # Under jit the lengthscale is a tracer: no check, no cost.
  assert jax.jit(lambda ell: kernels.rbf(x, x, ell))(0.5).shape == (3, 3)
