"""The work of log and checkpoint steps, and of an early exit.

Update s logs its metrics when s % log_every == 0 or it is the last update; the state
after it is saved as checkpoint s + 1 when s + 1 is a multiple of checkpoint_every or is
num_steps. Compiled calls end at those updates (`calls._call_end`), so `after_call` sees
exactly their metrics: it reads them, the NaN guard and the state's finiteness in one
transfer, raises `NonFiniteError` (with `nan_guard`), then logs (history, metrics files,
progress bar) and saves, never a state whose update is non-finite. `saving_on_exit` keeps
the progress made when the loop stops on an interrupt or an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import jax
from absl import logging

from common import checkpoint
from common.train.guard import NonFiniteError, _Guard, _state_finite, _tripped
from common.train.step import TrainState, _metric_order


@dataclasses.dataclass
class Position:
  """Where the loop is, as the work at log and checkpoint steps and on exit needs it.

  Attributes:
    state: the state after the newest call (deleted while the next call, which it is
      donated to, runs).
    guard: the NaN guard after that call.
    done: `state.step`, the number of updates done.
    saved: the step of the newest checkpoint.
    finite: whether that call's last update is all finite (device bool; None before).
    saving: a checkpoint of `state` is being written.
  """
  state: Any
  guard: _Guard
  done: int
  saved: int
  finite: Any = None
  saving: bool = False


def after_call(at: Position, metrics: Mapping[str, jax.Array], config: Any, manager,
               writer, progress, history: list[dict[str, float]]) -> None:
  """The work of a call that ends at a log or checkpoint step (else none): the NaN guard
  (`NonFiniteError` with `config.nan_guard`), then update `at.done - 1`'s metrics to
  `history`, `writer` and `progress`, and `at.state` saved as checkpoint `at.done`."""
  is_log = (at.done - 1) % config.log_every == 0 or at.done == config.num_steps
  is_checkpoint = at.done == config.num_steps or (
      config.checkpoint_every and at.done % config.checkpoint_every == 0)
  if not (is_log or is_checkpoint):
    return
  host_metrics, finite, bad = _read(at, metrics)
  if bad is not None and config.nan_guard:
    raise NonFiniteError(*bad, last_good_step=at.saved or None)
  progress.set_postfix(loss=f"{host_metrics['loss']:.4g}", refresh=False)
  if is_log:
    history.append({"step": at.done - 1, **host_metrics})
    writer.write_scalars(at.done - 1, host_metrics)
  if is_checkpoint:
    if finite:
      at.saving = True
      checkpoint.save(manager, at.done, at.state)
      at.saving, at.saved = False, at.done
    else:
      logging.warning("Not checkpointing step %d: its update has a non-finite value (the "
                      "first was %s=%s at step %d)", at.done, bad[1], bad[2], bad[0])


def _read(at: Position, metrics: Mapping[str, jax.Array]):
  """(host metrics in `_metric_order`, whether the last update and the state are finite,
  the guard's (step, name, value) or None), in one transfer from the devices."""
  host_metrics, guard, finite, state_finite = jax.device_get(
      (metrics, at.guard, at.finite, _state_finite(at.state)))
  host_metrics = _ordered_floats(host_metrics)
  bad = _tripped(guard, list(host_metrics), state_finite, at.done - 1)
  return host_metrics, finite and state_finite, bad


def _ordered_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
  """Host metrics as floats, loss first, then grad_norm, then the rest by name."""
  return {k: float(metrics[k]) for k in _metric_order(metrics)}


@contextlib.contextmanager
def saving_on_exit(manager, at: Position, nan_guard: bool) -> Iterator[None]:
  """If the loop stops on an interrupt or an error (not `NonFiniteError`) inside it,
  checkpoints the progress made since the newest checkpoint (`at`), if that state is
  alive (not donated mid-call), finite, and not mid-save."""
  try:
    yield
  except NonFiniteError:
    raise
  except BaseException:
    if at.done > at.saved and not at.saving:
      _save_on_exit(manager, at.done, at.state, at.guard if nan_guard else None, at.finite)
    raise


def _save_on_exit(manager, step: int, state: TrainState, guard: _Guard | None,
                  finite: jax.Array) -> None:
  """Checkpoints `state` (at `step`) on an interrupt, unless it was donated, its update
  was non-finite, or (`guard` given: with the NaN guard) any update of the run was."""
  try:
    if any(leaf.is_deleted() for leaf in jax.tree.leaves(state)):
      return
    guard_step = -1 if guard is None else int(jax.device_get(guard.step))
    if not (bool(jax.device_get(finite)) and bool(_state_finite(state))) or guard_step >= 0:
      logging.warning("Not checkpointing step %d on exit: non-finite values", step)
      return
    logging.warning("Interrupted: checkpointing step %d before exiting", step)
    checkpoint.save(manager, step, state)
  except Exception as e:  # Never mask the original exception.
    logging.exception("Could not checkpoint step %d on exit: %s", step, e)
