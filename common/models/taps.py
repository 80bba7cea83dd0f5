"""Activation taps: linear layers that record their input, on any flax model.

Methods that read activations (AGZO builds each linear layer's perturbation from
the span of its inputs) rely on one convention. A linear layer y = x W (+ b) whose
parameters sit at `params[path] = {"kernel": (d_in, d_out), ...}` sows its input
x, shape (..., d_in), in the "taps" collection at the same path:

    params[path]["kernel"]   <->   taps[path]["input"]

Nothing is stored unless the caller asks for the collection,
`model.apply(variables, x, mutable=["taps"])`, and a layer called more than once
keeps its last input. Three ways to follow the convention:

* `TappedDense`: a drop-in `flax.linen.Dense` (same parameters, same numbers)
  that sows its input. Build a model with it.
* `record_dense_inputs()`: a flax method interceptor under which every
  `flax.linen.Dense` of an unchanged model sows its input.
* `common.models.transformer.Linear`, which the transformer uses.

`apply_with_taps` runs a model with the interceptor on and returns the taps, and
`linear_paths(params)` lists the paths that can have one.

Example:
    >>> class MLP(nn.Module):
    ...   @nn.compact
    ...   def __call__(self, x):
    ...     return TappedDense(1, name="out")(nn.relu(TappedDense(16, name="hidden")(x)))
    >>> model = MLP()
    >>> params = model.init(jax.random.PRNGKey(0), jnp.ones((4, 3)))["params"]
    >>> y, taps = apply_with_taps(model, {"params": params}, jnp.ones((4, 3)))
    >>> taps["hidden"]["input"].shape, linear_paths(params)
    ((4, 3), [('hidden',), ('out',)])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax

TAPS = "taps"
INPUT = "input"
Path = tuple[str, ...]


def sow_input(module: nn.Module, x: jax.Array) -> None:
  """Records `x` as `taps[<module path>]["input"]` (the last call wins)."""
  module.sow(TAPS, INPUT, x, init_fn=lambda: None, reduce_fn=lambda _, new: new)


class TappedDense(nn.Dense):
  """`flax.linen.Dense` (y = x W + b, W stored (d_in, d_out)) that sows its input x.

  Same attributes, parameters and outputs as `nn.Dense`; the automatic name is
  `TappedDense_<i>`, so pass `name=` to keep a checkpoint's `Dense_<i>` names.

  Example:
      >>> layer = TappedDense(4)
      >>> variables = layer.init(jax.random.PRNGKey(0), jnp.ones((2, 3)))
      >>> y, state = layer.apply({"params": variables["params"]}, jnp.ones((2, 3)),
      ...                        mutable=["taps"])
      >>> state["taps"]["input"].shape
      (2, 3)
  """

  @nn.compact
  def __call__(self, inputs: jax.Array) -> jax.Array:
    sow_input(self, inputs)
    return super().__call__(inputs)


@contextlib.contextmanager
def record_dense_inputs(layer_types: tuple[type, ...] = (nn.Dense,)) -> Iterator[None]:
  """Within the context, every `__call__` of a `layer_types` module sows its input.

  A flax method interceptor: the model is unchanged, so its parameters and
  outputs are too; apply it with `mutable=["taps"]` to get the taps.

  Args:
    layer_types: the module classes to tap (default `nn.Dense`, subclasses
      included). Their first positional argument is the recorded input.

  Example:
      >>> model = nn.Dense(4)
      >>> params = model.init(jax.random.PRNGKey(0), jnp.ones((2, 3)))["params"]
      >>> with record_dense_inputs():
      ...   y, state = model.apply({"params": params}, jnp.ones((2, 3)), mutable=["taps"])
      >>> state["taps"]["input"].shape
      (2, 3)
  """

  def interceptor(next_fun, args, kwargs, context):
    if isinstance(context.module, layer_types) and context.method_name == "__call__" and args:
      sow_input(context.module, args[0])
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(interceptor):
    yield


def apply_with_taps(model: nn.Module, variables: Any, *args, **kwargs) -> tuple[Any, Any]:
  """`(output, taps)` of `model.apply(variables, *args, **kwargs)` with every linear
  layer tapped (`TappedDense`, `transformer.Linear`, and plain `nn.Dense` through
  `record_dense_inputs`). `taps` is `{}` when the model has no linear layer."""
  with record_dense_inputs():
    out, state = model.apply(variables, *args, mutable=[TAPS], **kwargs)
  return out, state.get(TAPS, {})


def linear_paths(params: Any) -> list[Path]:
  """Paths (tuples of keys) of every linear layer in `params`: the dicts holding a
  2-D "kernel". The same paths index the taps (`tapped_input`)."""
  paths = []

  def visit(tree, prefix):
    if hasattr(tree, "items"):
      if "kernel" in tree and getattr(tree["kernel"], "ndim", 0) == 2:
        paths.append(prefix)
        return
      for name, sub in tree.items():
        visit(sub, prefix + (name,))

  visit(params, ())
  return paths


def tapped_input(taps: Any, path: Path) -> jax.Array | None:
  """`taps[path]["input"]`, or None when that layer recorded nothing."""
  node = taps
  for name in (*path, INPUT):
    if not hasattr(node, "get"):
      return None
    node = node.get(name)
  return node
