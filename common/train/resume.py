"""How a run resumes: from the newest checkpoint in `workdir/checkpoints` that restores,
and only if it is of this run.

`workdir/checkpoints.json` (`_run_record`) records what determines the checkpoints'
values: `seed`, `batch_size`, `gradient_free` (and `on_policy` when set), a fingerprint
of the optimizer's hyperparameters (`_summary`), and the shapes and dtypes of the
parameters, optimizer state and carry. A rerun whose record differs, or that asks for
fewer `num_steps` than the newest checkpoint holds, is the one-line `ValueError` of
`_check_run`; `overwrite=True` discards the checkpoints first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import numbers
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from absl import logging

from common import checkpoint
from common import trials
from common.train.config import _ALL_KEYS, BOOKKEEPING_KEYS
from common.train.step import CarryTrainState, TrainState, _tree_signature

CHECKPOINT_SUBDIR = "checkpoints"
RUN_RECORD = "checkpoints.json"  # Beside checkpoints/: what its steps are of.


def _paths(workdir: str) -> tuple[str, str]:
  """The checkpoint directory (absolute) and the run record of `workdir`."""
  return (os.path.abspath(os.path.join(workdir, CHECKPOINT_SUBDIR)),
          os.path.join(workdir, RUN_RECORD))


@contextlib.contextmanager
def checkpoints(workdir: str, *, keep: int, overwrite: bool) -> Iterator[Any]:
  """The checkpoint manager of `workdir/checkpoints` (with `overwrite`, emptied first, its
  run record removed), closed once its last save has finished."""
  directory, record_path = _paths(workdir)
  if overwrite and os.path.isdir(directory):
    if jax.process_index() == 0:
      logging.warning("overwrite=True: discarding the checkpoints in %s", directory)
      shutil.rmtree(directory)
      if os.path.exists(record_path):
        os.remove(record_path)
    _sync("overwrite")
  manager = checkpoint.make_manager(directory, keep=keep)
  try:
    yield manager
  finally:
    manager.wait_until_finished()
    manager.close()


def restore_or_init(manager, workdir: str, record: dict, abstract_state: Any,
                    state_shardings: Any, fresh: Callable[[], Any]) -> tuple[int, Any]:
  """(step, state) a run starts from: the newest checkpoint that restores, if the
  checkpoints are of the run `record` describes, else (0, `fresh()`); then `record` is
  written beside them.

  Raises:
    ValueError: the checkpoints are of another run (`_check_run`), or none restores.
  """
  directory, record_path = _paths(workdir)
  _check_run(directory, record_path, record, checkpoint.latest_step(manager))
  start, state = checkpoint.restore_newest(manager, abstract_state, state_shardings,
                                           check=_check_step)
  if start is None:
    start, state = 0, fresh()
  else:
    logging.info("Resuming from checkpoint step %d in %s", start, workdir)
  if jax.process_index() == 0:
    trials.atomic_write_bytes(record_path, json.dumps(record, indent=1).encode())
  return start, state


def _check_step(step: int, restored: Any) -> None:
  """The check a checkpoint must pass to restore: it holds the state of its step."""
  if int(jax.device_get(restored.step)) != step:
    raise ValueError(f"it holds state.step={int(jax.device_get(restored.step))}")


def _sync(name: str) -> None:
  """A barrier across processes (a no-op with one process)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


# Keys that do not change the trained values: they may differ on resume.
_NOT_RESULT_KEYS = ("num_steps", *BOOKKEEPING_KEYS)
_SMALL_ARRAY = 64  # Arrays an optimizer closes over up to this size count by value.


def _summary(obj: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
  """What a function computes with, as JSON: its name, the numbers, strings and small
  arrays it closes over, and the same of the functions and tuples it closes over.

  Mutable containers and other objects count by type only (a list a loss function
  appends to must not change the fingerprint); large arrays by dtype and shape. At
  most 12 levels deep and 5000 nodes, in a fixed order (so equal in every process).
  """
  budget = [5000] if budget is None else budget
  if obj is None or isinstance(obj, (bool, int, str)):
    return obj
  if isinstance(obj, float):
    return f"{obj:.10g}"
  budget[0] -= 1
  if depth > 12 or budget[0] < 0:
    return "..."
  go = functools.partial(_summary, depth=depth + 1, budget=budget)
  if isinstance(obj, (np.ndarray, np.generic, jax.Array)) and not isinstance(
      obj, jax.core.Tracer):
    if np.size(obj) <= _SMALL_ARRAY:
      return [str(obj.dtype), list(np.shape(obj)),
              [f"{v:.10g}" if isinstance(v, float) else v
               for v in np.asarray(obj).ravel().tolist()]]
    return f"{obj.dtype}{list(np.shape(obj))}"
  if isinstance(obj, tuple):
    return [go(x) for x in obj]
  if isinstance(obj, functools.partial):
    return {"partial": go(obj.func), "args": go(obj.args),
            "keywords": {k: go(v) for k, v in sorted(obj.keywords.items())}}
  if hasattr(obj, "__wrapped__") and callable(obj):
    return go(obj.__wrapped__)
  if getattr(obj, "__code__", None) is not None:
    cells = []
    for cell in getattr(obj, "__closure__", None) or ():
      try:
        cells.append(go(cell.cell_contents))
      except ValueError:  # an empty cell
        cells.append(None)
    return {"fn": f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}",
            "defaults": go(getattr(obj, "__defaults__", None)), "closure": cells}
  return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _plain_number(value: Any) -> Any:
  return int(value) if isinstance(value, numbers.Integral) else value


def _run_record(config: Any, abstract_state: TrainState | CarryTrainState, optimizer: Any,
                gradient_free: bool, on_policy: bool) -> dict:
  """What determines the checkpoints' values (see the module docstring)."""
  blob = json.dumps(_summary((optimizer.init, optimizer.update)), sort_keys=True)
  keys = [key for key in _ALL_KEYS if key not in _NOT_RESULT_KEYS]  # seed, batch_size
  flags = {"gradient_free": bool(gradient_free)}
  if on_policy:  # Only when set, so the records of earlier runs still match.
    flags["on_policy"] = True
  record = {"num_steps": int(config.num_steps),
            "config": {**{key: _plain_number(getattr(config, key)) for key in keys}, **flags},
            "optimizer": trials.config_fingerprint({"optimizer": blob}),
            "params": _tree_signature(abstract_state.params),
            "opt_state": _tree_signature(abstract_state.opt_state)}
  if isinstance(abstract_state, CarryTrainState):
    record["carry"] = _tree_signature(abstract_state.carry)
  return record


def _tree_difference(name: str, old: dict, new: dict) -> str | None:
  if old == new:
    return None
  for path in (*new, *old):
    if old.get(path) != new.get(path):
      return (f"{name} tree: {name}{path} {old.get(path, 'absent')} -> "
              f"{new.get(path, 'absent')}")
  return f"{name} tree: leaf order"


def _differences(old: dict, new: dict) -> list[str]:
  """The differences that matter between two run records, one phrase each."""
  config_keys = dict.fromkeys([*new["config"], *old["config"]])
  out = [f"config.{key}: {old['config'].get(key)!r} -> {new['config'].get(key)!r}"
         for key in config_keys if old["config"].get(key) != new["config"].get(key)]
  if old.get("optimizer") != new["optimizer"]:
    out.append("the optimizer (its hyperparameters or structure)")
  out += [d for d in (_tree_difference(name, old.get(name, {}), new[name])
                      for name in ("params", "opt_state", "carry")
                      if name in new or name in old) if d]
  return out


def _read_run_record(path: str) -> dict | None:
  try:
    with open(path) as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) and "config" in record else None


def _check_run(directory: str, path: str, record: dict, newest: int | None) -> None:
  """Raises the one-line mismatch error if `directory`'s checkpoints are of another run
  than `record` (the record of theirs is at `path`)."""
  if newest is None:
    return
  old = _read_run_record(path)
  if old is None:
    logging.warning("%s has checkpoints but no readable %s (written before it existed): "
                    "resuming from them unchecked", directory, path)
    differences = []
  else:
    differences = _differences(old, record)
  if newest > record["num_steps"]:
    differences.append(f"config.num_steps={record['num_steps']} is below the newest "
                       f"checkpoint's step {newest}")
  if differences:
    raise ValueError(f"{directory} holds checkpoints of a different training run "
                     f"({'; '.join(differences)}); use a new workdir, or "
                     "train(..., overwrite=True) to discard them")
