"""The NaN guard, in two halves. Inside the compiled call, `_record` keeps the first
update whose loss or metrics are non-finite (its step, which value, the value) in a few
device scalars, a `_Guard`. The host reads them only at log and checkpoint steps, with the
metrics it fetches there anyway, and checks the state (parameters and optimizer state)
there once (`_state_finite`); `_tripped` turns what it read into the `NonFiniteError` the
run stops with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.sharding import replicated_sharding
from common.train.step import _all_finite, _metric_order


class NonFiniteError(FloatingPointError):
  """A loss, metric or parameter became NaN or infinite; the run stopped unsaved.

  Attributes:
    step: the first update (0-based) that produced a non-finite value.
    name: the metric name, or "state" for the parameters / optimizer state.
    value: the offending value.
    last_good_step: the step of the newest checkpoint, the last good state a
      rerun resumes from (None: no checkpoint yet, a rerun starts afresh).
  """

  def __init__(self, step: int, name: str, value: float,
               last_good_step: int | None = None):
    self.step, self.name, self.value = step, name, value
    self.last_good_step = last_good_step
    where = ("" if last_good_step is None else
             f"; the last good state is checkpoint {last_good_step}, where a rerun resumes")
    super().__init__(f"non-finite {name}={value} at step {step}; stopped before "
                     f"checkpointing it (earlier checkpoints are intact){where}")


class _Guard(NamedTuple):
  """The NaN guard's record of the first update with a non-finite value (device scalars).

  Attributes:
    step: int32, that update; -1 while every update was finite.
    index: int32, which value: a metric's index in `_metric_order`.
    value: float32, that metric's value.
  """
  step: jax.Array
  index: jax.Array
  value: jax.Array


def _clean_guard(mesh: jax.sharding.Mesh) -> _Guard:
  guard = _Guard(jnp.int32(-1), jnp.int32(0), jnp.float32(0.0))
  return jax.device_put(guard, replicated_sharding(mesh))


def _record(guard: _Guard, step: jax.Array, metrics: Mapping[str, jax.Array],
            finite: jax.Array) -> _Guard:
  """`guard`, or update `step`'s first non-finite value if it is the first one."""
  values = jnp.stack([jnp.asarray(metrics[k]).astype(jnp.float32)
                      for k in _metric_order(metrics)])
  first = jnp.argmin(finite).astype(jnp.int32)  # The first False (0 if none: unused).
  trips = (guard.step < 0) & ~jnp.all(finite)
  return _Guard(jnp.where(trips, step, guard.step), jnp.where(trips, first, guard.index),
                jnp.where(trips, values[first], guard.value))


def _tripped(guard: _Guard, names: list[str], state_finite: bool,
             step: int) -> tuple[int, str, float] | None:
  """(step, name, value) of the first non-finite metric a host copy of the guard
  recorded (`names`: the metric names in `_metric_order`), else ("state" at `step`,
  the update just checked) if the state is not finite, else None."""
  first, index = int(guard.step), int(guard.index)
  if first >= 0:
    return first, names[index], float(guard.value)
  return None if state_finite else (step, "state", float("nan"))


# The state's finiteness, checked where the loop reads the guard (not every update).
_state_finite = jax.jit(lambda state: _all_finite((state.params, state.opt_state)))
