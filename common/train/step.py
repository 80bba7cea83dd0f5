"""What one update does: the loop's state, how it is created and sharded, and the update

    (loss, metrics), g = value_and_grad(loss_fn)(params, batch, fold_in(key, s))
    updates, opt_state = optimizer.update(g, opt_state, params)
    params = params + updates

or, gradient-free (no gradients; the optimizer measures the loss and keeps it in its state),

    updates, opt_state = optimizer.update(params, opt_state, params,
                                          loss_fn=loss_fn, batch=batch, key=fold_in(key, s))
    params = params + updates

`_update` is that update, traced into the loop's compiled call (`common.train.calls`);
`train_step` and `init_train_state` compile it and the init for callers who write their
own loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from absl import logging

from common import partitioning
from common.sharding import FSDP_AXIS, TENSOR_AXIS, replicated_sharding


class TrainState(NamedTuple):
  """Everything a step updates: the step counter, parameters and optimizer state.

  Attributes:
    step: int32 scalar, the number of updates applied so far.
    params: the parameter pytree, as returned by `init_fn`.
    opt_state: the optax state of `params`.
  """
  step: jax.Array
  params: Any
  opt_state: Any


class CarryTrainState(NamedTuple):
  """A `TrainState` plus the batch function's carry (runs with `train(..., carry=)`).

  Attributes:
    step, params, opt_state: as in `TrainState`.
    carry: the carry that the batch of update `step` is made from.
  """
  step: jax.Array
  params: Any
  opt_state: Any
  carry: Any


def _make_state(key: jax.Array, init_fn: Callable, opt_init: Callable) -> TrainState:
  params = nn.meta.unbox(init_fn(key))  # Plain arrays, also from a boxed flax init.
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_init(params))


def _with_carry(state: TrainState, carry: Any) -> TrainState | CarryTrainState:
  return state if carry is None else CarryTrainState(*state[:3], carry=carry)


def _abstract(tree: Any) -> Any:
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _tree_signature(tree: Any) -> dict[str, str]:
  """{leaf path: "dtype[shape]"} of an abstract pytree."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): f"{leaf.dtype}{list(leaf.shape)}"
          for path, leaf in leaves}


class _Shardings:
  """A pytree of shardings as a jit static argument (hashed by its leaves and structure)."""

  def __init__(self, tree: Any):
    self.tree = tree
    leaves, treedef = jax.tree.flatten(tree)
    self._key = (treedef, tuple(leaves))
    self._hash = hash(self._key)  # Looked up on every compiled call of the loop.

  def __hash__(self):
    return self._hash

  def __eq__(self, other):
    return isinstance(other, _Shardings) and self._key == other._key


def _pin_state(state: TrainState, mesh: jax.sharding.Mesh,
               shardings: _Shardings | None) -> TrainState:
  """`state` constrained to `shardings` (None: replicated over `mesh`)."""
  return jax.lax.with_sharding_constraint(
      state, replicated_sharding(mesh) if shardings is None else shardings.tree)


# The functions, optimizer, mesh and shardings are static arguments, so repeated
# `train` calls with the same ones (resuming in a notebook, tests) reuse the compiled
# step. Output shardings are pinned with sharding constraints: state replicated, or
# as `shardings` says (parameters sharded from their logical axis names).
@functools.partial(jax.jit, static_argnames=("init_fn", "opt_init", "mesh", "shardings"))
def _init_state(key: jax.Array, *, init_fn: Callable, opt_init: Callable,
                mesh: jax.sharding.Mesh, shardings: _Shardings | None = None) -> TrainState:
  """Creates the state directly with its final sharding (no host copy)."""
  return _pin_state(_make_state(key, init_fn, opt_init), mesh, shardings)


def _state_shardings(abstract_state: Any, init_fn: Callable, init_key: jax.Array,
                     optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                     param_axes: Any) -> _Shardings | None:
  """The `TrainState` shardings of a model-parallel run, or None (replicated): on a
  mesh with fsdp or tensor > 1, parameters sharded from their logical names
  (`param_axes`, else the boxes of `init_fn`'s output), optimizer state alike."""
  if all(mesh.shape.get(name, 1) == 1 for name in (FSDP_AXIS, TENSOR_AXIS)):
    return None
  if param_axes is None:
    param_axes = nn.get_partition_spec(jax.eval_shape(init_fn, init_key))
  if not any(len(spec) for spec in jax.tree.leaves(
      param_axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))):
    logging.warning("mesh %s has fsdp/tensor axes but the parameters carry no logical axis "
                    "names: they are replicated (pass train(..., param_axes=))",
                    dict(mesh.shape))
    return None
  params = partitioning.param_shardings(abstract_state.params, param_axes, mesh)
  opt_state = partitioning.opt_state_shardings(optimizer, abstract_state.opt_state, params,
                                               mesh)
  return _Shardings(TrainState(replicated_sharding(mesh), params, opt_state))


def init_train_state(key: jax.Array, *, init_fn: Callable[[jax.Array], Any],
                     optimizer: optax.GradientTransformation,
                     mesh: jax.sharding.Mesh, state_shardings: Any = None) -> TrainState:
  """Creates `TrainState(0, params, optimizer.init(params))` on `mesh`.

  Jit-compiled (once per init_fn, optimizer, mesh and shardings, which must be
  hashable, as functions are), so the parameters are created on the devices with
  their final sharding.

  Args:
    key: the PRNG key passed to `init_fn`.
    init_fn: `key -> params` pytree (flax's boxed `nn.LogicallyPartitioned` leaves
      are unboxed).
    optimizer: an `optax.GradientTransformation`.
    mesh: the device mesh.
    state_shardings: None (every leaf replicated), or a `TrainState` of shardings
      (e.g. parameters sharded by `common.partitioning.param_shardings`).

  Returns:
    The initial `TrainState`, with `state_shardings` (default
    `replicated_sharding(mesh)` on every leaf).
  """
  return _init_state(key, init_fn=init_fn, opt_init=optimizer.init, mesh=mesh,
                     shardings=None if state_shardings is None else _Shardings(state_shardings))


def _checked_loss(loss_fn: Callable, params: Any, batch: Any, key: jax.Array):
  """Calls loss_fn; a wrong return type fails at trace time with a clear message."""
  out = loss_fn(params, batch, key)
  if not isinstance(out, tuple) or len(out) != 2:
    raise TypeError(f"loss_fn must return (loss, metrics dict), got {type(out).__name__}")
  loss, metrics = out
  if jnp.shape(loss) != ():
    raise ValueError(f"loss_fn must return a scalar loss, got shape {jnp.shape(loss)}")
  if not isinstance(metrics, Mapping):
    raise TypeError(f"loss_fn metrics must be a dict, got {type(metrics).__name__}")
  for name, value in metrics.items():
    if jnp.shape(value) != ():
      raise ValueError(f"loss_fn metric {name!r} must be a scalar, got shape "
                       f"{jnp.shape(value)}")
  return loss, metrics


def _all_finite(tree: Any) -> jax.Array:
  """Whether every floating-point leaf of `tree` is finite, as one bool.

  sum(x * 0) is 0 when every element of x is finite and NaN as soon as one is NaN or
  infinite (and, unlike sum(x), cannot overflow): one reduction per leaf with the
  multiply fused into it, against isfinite + all + a stack, which on a small model
  costs as many kernels as the update itself.
  """
  sums = [jnp.sum(x * 0, dtype=jnp.float32) for x in jax.tree.leaves(tree)
          if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.isfinite(sum(sums)) if sums else jnp.array(True)


def _gradient_free_update(opt_update: Callable, loss_fn: Callable, params: Any,
                          opt_state: Any, batch: Any, key: jax.Array):
  """updates, opt_state and metrics of a gradient-free optimizer (no value_and_grad)."""
  updates, opt_state = opt_update(params, opt_state, params,
                                  loss_fn=functools.partial(_checked_loss, loss_fn),
                                  batch=batch, key=key)
  loss = optax.tree.get(opt_state, "loss")
  if loss is None or jnp.shape(loss) != ():
    raise TypeError("a gradient-free optimizer must keep the scalar loss it measured in "
                    "its state under the name 'loss' (e.g. a NamedTuple field), got "
                    f"{loss!r}; with gradient_free=False the loop computes gradients")
  return updates, opt_state, {"loss": loss, "update_norm": optax.tree.norm(updates)}


def _metric_order(names: Any) -> list[str]:
  """Metric names as logged: loss first, then grad_norm, then the rest by name."""
  return sorted(names, key=lambda k: (k != "loss", k != "grad_norm", k))


def _update(state: TrainState, batch: Any, key: jax.Array, *, loss_fn: Callable,
            opt_update: Callable, gradient_free: bool):
  """One update (traced): (new state, metrics incl. loss and grad_norm, bool[n]:
  whether each metric, in `_metric_order`, is finite)."""
  step_key = jax.random.fold_in(key, state.step)
  if gradient_free:
    updates, opt_state, metrics = _gradient_free_update(
        opt_update, loss_fn, state.params, state.opt_state, batch, step_key)
  else:
    (loss, metrics), grads = jax.value_and_grad(
        functools.partial(_checked_loss, loss_fn), has_aux=True)(state.params, batch, step_key)
    updates, opt_state = opt_update(grads, state.opt_state, state.params)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **metrics}
  params = optax.apply_updates(state.params, updates)
  new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
  finite = jnp.stack([jnp.all(jnp.isfinite(metrics[k])) for k in _metric_order(metrics)])
  return new_state, metrics, finite


@functools.partial(jax.jit, donate_argnums=0,
                   static_argnames=("loss_fn", "opt_update", "mesh", "gradient_free",
                                    "shardings"))
def _train_step(state: TrainState, batch: Any, key: jax.Array, *, loss_fn: Callable,
                opt_update: Callable, mesh: jax.sharding.Mesh, gradient_free: bool = False,
                shardings: _Shardings | None = None):
  """One update; returns (new state, metrics incl. loss and grad_norm, all-finite flag)."""
  new_state, metrics, finite = _update(state, batch, key, loss_fn=loss_fn,
                                       opt_update=opt_update, gradient_free=gradient_free)
  outputs = (metrics, jnp.all(finite) & _all_finite(new_state[1:]))
  return (_pin_state(new_state, mesh, shardings),
          *jax.lax.with_sharding_constraint(outputs, replicated_sharding(mesh)))


def train_step(state: TrainState, batch: Any, key: jax.Array, *, loss_fn: Callable,
               optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh,
               gradient_free: bool = False, state_shardings: Any = None
               ) -> tuple[TrainState, dict[str, jax.Array], jax.Array]:
  """The loop's jit-compiled update (for callers who write their own loop).

      (loss, metrics), g = value_and_grad(loss_fn)(params, batch, fold_in(key, state.step))
      updates, opt_state = optimizer.update(g, opt_state, params)
      params = params + updates

  or, with `gradient_free=True` (no gradients are computed),

      updates, opt_state = optimizer.update(params, opt_state, params, loss_fn=loss_fn,
                                            batch=batch, key=fold_in(key, state.step))
      params = params + updates;   loss = optax.tree.get(opt_state, "loss")

  Compiled once per (loss_fn, optimizer, mesh) and batch shapes (loss_fn and
  optimizer must be hashable, as functions are; wrap others in
  `functools.partial` once). `state` is donated: its buffers are reused for the
  result and must not be used again.

  Args:
    state: the current `TrainState` (replicated over `mesh`).
    batch: a pytree of global arrays (e.g. from `shard_batch`).
    key: the base PRNG key; the step's key is `fold_in(key, state.step)`.
    loss_fn: `(params, batch, key) -> (scalar loss, {name: scalar})`.
    optimizer: an `optax.GradientTransformation` (gradient-free: one that
      accepts the extra arguments, e.g. an `optax.chain` headed by a
      zeroth-order estimator, and keeps a scalar `loss` in its state).
    mesh: the device mesh; outputs are replicated over it.
    gradient_free: skip `value_and_grad` (see above).
    state_shardings: None (the new state replicated), or the `TrainState` of
      shardings it keeps (as for `init_train_state`).

  Returns:
    (new state, metrics with "loss", "grad_norm" and loss_fn's metrics (gradient
    free: "loss" and "update_norm"), bool scalar: the loss, all metrics, the new
    params and the optimizer state are finite).
  """
  return _train_step(state, batch, key, loss_fn=loss_fn, opt_update=optimizer.update,
                     mesh=mesh, gradient_free=bool(gradient_free),
                     shardings=None if state_shardings is None else _Shardings(state_shardings))
