"""How K updates run as one compiled call (`config.steps_per_call`), and what the host
does for each call: where it ends and the batches it takes.

A call is `_steps_body`, the `lax.scan` of `step._update` over the batches of K
consecutive updates stacked on a new leading axis, with the per-step keys of K single
steps (so its result equals theirs up to the order of float sums), jitted once per
static arguments
and K by `_compiled_steps`. The loop calls it through `_train_steps`. `_call_end` ends a
call at the first log step, checkpoint step or `num_steps`, so the loop's metrics,
checkpoints and resume are those of one update per call. `batch_maker` makes a call's
batches, `batch_fn(seed, s[, params][, carry])` for each update, and threads the carry
through them on the host.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from common.sharding import batch_sharding, check_batch, replicated_sharding, shard_batch
from common.train.guard import _Guard, _record
from common.train.step import (TrainState, _Shardings, _abstract, _pin_state,
                               _tree_signature, _update)


def _steps_body(state: TrainState, guard: _Guard, batches: Any, key: jax.Array, *,
                loss_fn: Callable, opt_update: Callable, mesh: jax.sharding.Mesh,
                gradient_free: bool, shardings: _Shardings | None):
  """The K updates of the batches stacked on `batches`' leading axis, a `lax.scan` of
  `_update` (K = 1: the update itself); traced by `_compiled_steps`.

  Returns:
    (state after the K updates, `guard` with their first non-finite metric recorded,
    the metrics of the last update, whether all of them are finite).
  """
  update = functools.partial(_update, key=key, loss_fn=loss_fn, opt_update=opt_update,
                             gradient_free=gradient_free)

  def body(carry, batch):
    state, guard, _ = carry
    new_state, metrics, finite = update(state, batch)
    return (new_state, _record(guard, state.step, metrics, finite), jnp.all(finite)), metrics

  if jax.tree.leaves(batches)[0].shape[0] == 1:
    (state, guard, finite), metrics = body((state, guard, True),
                                           jax.tree.map(lambda x: x[0], batches))
  else:
    (state, guard, finite), metrics = jax.lax.scan(body, (state, guard, jnp.bool_(True)),
                                                   batches)
    metrics = jax.tree.map(lambda m: m[-1], metrics)
  outputs = (guard, metrics, finite)
  return (_pin_state(state, mesh, shardings),
          *jax.lax.with_sharding_constraint(outputs, replicated_sharding(mesh)))


@functools.lru_cache(maxsize=64)
def _compiled_steps(loss_fn: Callable, opt_update: Callable, mesh: jax.sharding.Mesh,
                    gradient_free: bool, shardings: _Shardings | None,
                    options: tuple[tuple[str, Any], ...] = ()) -> Callable:
  """The loop's jitted, state-donating call for these static arguments.

  Its batches argument is placed with `batch_sharding(mesh, batch_axis=1)` by jit
  itself, so host (NumPy) batches go to the devices in jit's C++ dispatch: on a small
  model a Python `shard_batch` per call costs as much as the update. Global
  `jax.Array` batches (multi-process runs) already carry that sharding.
  """
  body = functools.partial(_steps_body, loss_fn=loss_fn, opt_update=opt_update, mesh=mesh,
                           gradient_free=gradient_free, shardings=shardings)
  return jax.jit(body, donate_argnums=0, compiler_options=dict(options) or None,
                 in_shardings=(None, None, batch_sharding(mesh, batch_axis=1), None))


def _train_steps(state: TrainState, guard: _Guard, batches: Any, key: jax.Array, *,
                 loss_fn: Callable, opt_update: Callable, mesh: jax.sharding.Mesh,
                 gradient_free: bool = False, shardings: _Shardings | None = None,
                 options: tuple[tuple[str, Any], ...] = ()):
  """The loop's compiled call (`_steps_body`), compiled once per static arguments and K."""
  return _compiled_steps(loss_fn, opt_update, mesh, bool(gradient_free), shardings,
                         options)(state, guard, batches, key)


def _call_end(begin: int, config: Any) -> int:
  """Where the compiled call starting at update `begin` ends (exclusive): after at most
  `config.steps_per_call` updates, and at the first log step (included), checkpoint
  step or `num_steps`, so those are always the last update of a call."""
  next_log = -(-begin // config.log_every) * config.log_every + 1
  every = config.checkpoint_every
  next_checkpoint = -(-(begin + 1) // every) * every if every else config.num_steps
  return min(begin + config.steps_per_call, config.num_steps, next_log, next_checkpoint)


def _stack(batches: list[Any], call: str) -> Any:
  """The batches of one call stacked on a new leading axis (host arrays)."""
  if len(batches) == 1:
    return jax.tree.map(lambda x: np.asarray(x)[None], batches[0])
  try:
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *batches)
  except ValueError as e:
    raise ValueError(f"{call} returned batches of different structures or shapes, which "
                     f"a call of {len(batches)} updates (config.steps_per_call) stacks: "
                     f"{e}") from None


def batch_maker(batch_fn: Callable, *, seed: int, batch_size: int, mesh: jax.sharding.Mesh,
                on_policy: bool, abstract_carry: Any) -> Callable:
  """`batches(begin, end, state) -> (batches, carry)`: the batches of updates
  begin..end-1, stacked and placed for the compiled call, and the carry after them.

  Update s's batch is `batch_fn(seed, s)`, with `state.params` after `s` when
  `on_policy`, and with the carry (starting from `state.carry`) after those when
  `abstract_carry` (the carry's shapes) is not None.
  """
  def one(step, state, carry):
    args = (seed, step) + ((state.params,) if on_policy else ())
    call = ", ".join([str(seed), str(step)] + ["params"] * on_policy)
    if abstract_carry is None:
      batch = batch_fn(*args)
    else:
      batch, carry = _split_carry(batch_fn(*args, carry), f"batch_fn({call}, carry)",
                                  abstract_carry, mesh)
    for leaf in jax.tree.leaves(batch):
      if np.ndim(leaf) == 0 or np.shape(leaf)[0] != batch_size:
        raise ValueError(f"batch_fn({call}) returned a leaf of shape "
                         f"{np.shape(leaf)}; expected leading size "
                         f"config.batch_size={batch_size}")
    return batch, carry

  def batches(begin, end, state):
    made, carry = [], getattr(state, "carry", None)
    for step in range(begin, end):
      batch, carry = one(step, state, carry)
      made.append(batch)
    stacked = _stack(made, f"batch_fn for steps {begin}..{end - 1}")
    if jax.process_count() == 1:  # jit places host arrays (`_compiled_steps`).
      return check_batch(stacked, mesh, batch_axis=1), carry
    return shard_batch(stacked, mesh, batch_axis=1), carry

  return batches


def _check_carry(carry: Any) -> Any:
  """The initial carry as jax arrays; one-line error for a non-array leaf."""
  def convert(path, leaf):
    if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, numbers.Number)):
      raise TypeError(f"carry{jax.tree_util.keystr(path)} must be an array or number, got "
                      f"{type(leaf).__name__}")
    return jnp.asarray(leaf)
  return jax.tree_util.tree_map_with_path(convert, carry)


def _split_carry(out: Any, call: str, abstract_carry: Any, mesh: jax.sharding.Mesh):
  """(batch, next carry placed replicated) from a carrying batch function's output."""
  if not (isinstance(out, tuple) and len(out) == 2):
    raise TypeError(f"{call} must return (batch, carry) when train(..., carry=) is given, "
                    f"got {type(out).__name__}")
  batch, next_carry = out
  new = _abstract(jax.tree.map(jnp.asarray, next_carry))
  if jax.tree.structure(new) != jax.tree.structure(abstract_carry) or new != abstract_carry:
    raise ValueError(f"{call} returned a carry of another structure, shape or dtype: "
                     f"{_tree_signature(new)} != {_tree_signature(abstract_carry)}")
  return batch, jax.device_put(next_carry, replicated_sharding(mesh))
