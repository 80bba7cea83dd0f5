"""Orbax checkpoint save/restore for pytrees of (sharded) arrays.

Checkpoints live in `<directory>/<step>/`. Orbax writes each one into
`<step>.orbax-checkpoint-tmp/` and renames it to `<step>/` only once every file
is written, so a process killed mid-write leaves the previous checkpoints
intact; the unfinished temporary directory is ignored and removed when the
next manager is opened. A finished step that no longer restores (a truncated,
deleted or bit-flipped file: OCDBT checks CRC-32C checksums, so damage is an
error, never silently wrong values) is skipped by `restore_newest`, which falls
back to the newest step that restores.

Example:
    >>> manager = make_manager(workdir + "/checkpoints", keep=3)
    >>> save(manager, 100, state)
    >>> step = latest_step(manager)                       # 100
    >>> state = restore(manager, step, jax.eval_shape(init, key), shardings)
    >>> step, state = restore_newest(manager, jax.eval_shape(init, key), shardings)
    >>> manager.close()
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from typing import Any

from absl import logging
import jax
import orbax.checkpoint as ocp


class CheckpointError(ValueError):
  """No checkpoint in a directory restores; the message is one line."""


def make_manager(directory: str | os.PathLike, *, keep: int,
                 async_save: bool = True) -> ocp.CheckpointManager:
  """Opens (creating if needed) a checkpoint directory.

  Args:
    directory: where the step directories live; made absolute.
    keep: how many of the newest checkpoints to retain (>= 1).
    async_save: if True, `save` returns once the arrays are copied off the
      devices and files are written in the background; call
      `manager.wait_until_finished()` (or `close`) before relying on them.

  Returns:
    An `orbax.checkpoint.CheckpointManager`; close it when done.

  Raises:
    ValueError: if `keep` < 1.
  """
  if isinstance(keep, bool) or not isinstance(keep, numbers.Integral) or keep < 1:
    raise ValueError(f"keep must be an int >= 1, got {keep!r}")
  options = ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      create=True,
      cleanup_tmp_directories=True,  # Leftovers of an interrupted write.
      enable_async_checkpointing=async_save,
  )
  return ocp.CheckpointManager(os.path.abspath(os.fspath(directory)), options=options)


def latest_step(manager: ocp.CheckpointManager) -> int | None:
  """Returns the newest finished checkpoint's step, or None if there is none."""
  return manager.latest_step()


def save(manager: ocp.CheckpointManager, step: int, state: Any) -> None:
  """Saves `state` (a pytree of arrays) as checkpoint `step`, replacing no existing step.

  Args:
    manager: from `make_manager`.
    step: the step number (>= 0) to file the checkpoint under.
    state: a pytree of `jax.Array`s (sharded or not) and NumPy arrays.

  Raises:
    ValueError: if `step` is not an integer >= 0 (a float would be truncated).
  """
  if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
    raise ValueError(f"checkpoint step must be an int >= 0, got {step!r}")
  manager.save(int(step), args=ocp.args.StandardSave(state), force=True)


def abstract_with_shardings(abstract_state: Any, shardings: Any) -> Any:
  """Attaches shardings to a `jax.eval_shape` tree, giving orbax its restore target.

  Args:
    abstract_state: a pytree of `jax.ShapeDtypeStruct`.
    shardings: a matching pytree of `jax.sharding.Sharding`.

  Returns:
    The pytree of `jax.ShapeDtypeStruct` carrying those shardings.
  """
  return jax.tree.map(
      lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
      abstract_state, shardings)


def restore(manager: ocp.CheckpointManager, step: int, abstract_state: Any,
            shardings: Any | None = None) -> Any:
  """Restores checkpoint `step` into the structure, dtypes and shardings of `abstract_state`.

  Args:
    manager: from `make_manager`.
    step: a step listed by `manager.all_steps()`.
    abstract_state: the target pytree of `jax.ShapeDtypeStruct` (e.g. from
      `jax.eval_shape`), or concrete arrays whose shapes, dtypes and shardings
      are used.
    shardings: optional pytree of shardings matching `abstract_state`; if
      given, it overrides the shardings of the target.

  Returns:
    The restored pytree with the same structure as `abstract_state`.

  Raises:
    FileNotFoundError: if `step` is not a finished checkpoint.
  """
  steps = manager.all_steps()
  if step not in steps:
    raise FileNotFoundError(f"no checkpoint for step {step} in {manager.directory}; "
                            f"found steps {sorted(steps)}")
  if shardings is not None:
    abstract_state = abstract_with_shardings(abstract_state, shardings)
  return manager.restore(int(step), args=ocp.args.StandardRestore(abstract_state))


def _one_line(error: BaseException, limit: int = 200) -> str:
  """`Type: first line of the message`, cut to `limit` characters."""
  lines = str(error).strip().splitlines()
  text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
  return text if len(text) <= limit else text[:limit - 3] + "..."


def restore_newest(manager: ocp.CheckpointManager, abstract_state: Any,
                   shardings: Any | None = None, *,
                   check: Callable[[int, Any], None] | None = None) -> tuple[int | None, Any]:
  """Restores the newest step that restores, skipping (and then deleting) broken ones.

  Each step that fails to restore (or fails `check`) is logged on one line naming
  the step and why. Once an older step restores, the broken newer steps are
  deleted so that training can write those steps again.

  Args:
    manager: from `make_manager`.
    abstract_state: the target, as for `restore`.
    shardings: optional shardings, as for `restore`.
    check: optional `(step, restored) -> None` that raises (e.g. ValueError) if
      the restored state is not valid for `step`.

  Returns:
    `(step, state)`, or `(None, None)` if the directory has no checkpoint.

  Raises:
    CheckpointError: (a ValueError) one line naming the directory, when there are
      checkpoints but none restores.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  broken = []
  for step in steps:
    try:
      state = restore(manager, step, abstract_state, shardings)
      if check is not None:
        check(step, state)
    except Exception as e:  # pylint: disable=broad-except
      broken.append((step, _one_line(e)))
      logging.warning("Skipping checkpoint step %d in %s: it does not restore (%s)", step,
                      manager.directory, broken[-1][1])
      continue
    for bad, _ in broken:
      logging.warning("Deleting broken checkpoint step %d in %s", bad, manager.directory)
      manager.delete(bad)
    return step, state
  if broken:
    raise CheckpointError(
        f"no checkpoint in {manager.directory} restores (steps {[s for s, _ in broken]}; "
        f"newest: {broken[0][1]}); use a new workdir, or train(..., overwrite=True) to "
        "discard them")
  return None, None
