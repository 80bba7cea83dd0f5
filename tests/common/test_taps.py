"""Tests of common/models/taps.py: the tapped Dense is nn.Dense plus its recorded input,
the interceptor taps an unchanged model the same way, and the paths line up."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.models import TappedDense, apply_with_taps, record_dense_inputs
from common.models import taps as taps_lib


class _Plain(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(2, name="out")(nn.relu(nn.Dense(5, name="hidden")(x)))


class _Tapped(nn.Module):
  @nn.compact
  def __call__(self, x):
    return TappedDense(2, name="out")(nn.relu(TappedDense(5, name="hidden")(x)))


def test_tapped_dense_is_dense_and_records_its_input():
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 3))
  plain, tapped = _Plain(), _Tapped()
  params = plain.init(jax.random.PRNGKey(1), x)["params"]
  for a, b in zip(jax.tree.leaves(params),
                  jax.tree.leaves(tapped.init(jax.random.PRNGKey(1), x)["params"])):
    np.testing.assert_array_equal(a, b)  # Same names, same initial parameters.
  y, state = tapped.apply({"params": params}, x, mutable=["taps"])
  np.testing.assert_array_equal(y, plain.apply({"params": params}, x))
  taps = state["taps"]
  np.testing.assert_array_equal(taps["hidden"]["input"], x)
  hidden = jax.nn.relu(x @ params["hidden"]["kernel"] + params["hidden"]["bias"])
  np.testing.assert_allclose(taps["out"]["input"], hidden, rtol=1e-6)
  # The layer's paths index both trees.
  assert taps_lib.linear_paths(params) == [("hidden",), ("out",)]
  for path in taps_lib.linear_paths(params):
    assert taps_lib.tapped_input(taps, path).shape[-1] == params[path[0]]["kernel"].shape[0]
  assert taps_lib.tapped_input(taps, ("missing",)) is None
  # Nothing is stored unless the caller asks for the collection.
  assert not isinstance(tapped.apply({"params": params}, x), tuple)


def test_interceptor_taps_an_unchanged_model_like_the_tapped_dense():
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 3))
  plain, tapped = _Plain(), _Tapped()
  params = plain.init(jax.random.PRNGKey(1), x)["params"]
  y_plain, taps_plain = apply_with_taps(plain, {"params": params}, x)
  y_tapped, state = tapped.apply({"params": params}, x, mutable=["taps"])
  np.testing.assert_array_equal(y_plain, y_tapped)
  for a, b in zip(jax.tree.leaves(taps_plain), jax.tree.leaves(state["taps"])):
    np.testing.assert_array_equal(a, b)
  with record_dense_inputs():  # Also works under jit, and for a bare layer.
    y, state = jax.jit(lambda p: nn.Dense(2).apply({"params": p}, x, mutable=["taps"]))(
        params["out"] | {"kernel": jnp.ones((3, 2))})
  np.testing.assert_array_equal(state["taps"]["input"], x)
  assert apply_with_taps(nn.LayerNorm(), nn.LayerNorm().init(jax.random.PRNGKey(0), x), x)[1] == {}
