"""Metrics to JSON lines and TensorBoard event files.

`MetricsWriter(workdir)` appends one JSON object per logged step to
`workdir/metrics.jsonl` and writes the same scalars to a TensorBoard event file
`workdir/events.out.tfevents.*` through tensorboardX (no TensorFlow), which
TensorBoard, `tbparse` or `tensorboard`'s `EventAccumulator` read as a run.
`read_metrics_jsonl(path)` reads the JSON lines back.

Example:
    >>> with MetricsWriter(workdir) as writer:
    ...     writer.write_scalars(0, {"loss": 1.5})
    >>> read_metrics_jsonl(workdir)
    [{'step': 0, 'loss': 1.5}]
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

METRICS_FILENAME = "metrics.jsonl"
EVENTS_PREFIX = "events.out.tfevents."


def event_files(workdir: str | os.PathLike) -> list[str]:
  """Returns the TensorBoard event files in `workdir`, least recently written first."""
  paths = [os.path.join(workdir, name) for name in os.listdir(workdir)
           if name.startswith(EVENTS_PREFIX)]
  return sorted(paths, key=lambda path: (os.path.getmtime(path), path))


def read_metrics_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
  """Reads a metrics JSONL file (or `<dir>/metrics.jsonl`) into a list of dicts."""
  path = os.fspath(path)
  if os.path.isdir(path):
    path = os.path.join(path, METRICS_FILENAME)
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _to_float(name: str, value: Any) -> float:
  array = np.asarray(value)
  if array.size != 1:
    raise ValueError(f"metric {name!r} must be a scalar, got shape {array.shape}")
  if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
    raise TypeError(f"metric {name!r} must be a number, got {value!r}")
  return float(array.reshape(()))


def _json_number(value: float) -> float | str:
  # JSON has no NaN/Infinity; write them as strings so the file stays valid JSON.
  return value if math.isfinite(value) else str(value)


class MetricsWriter:
  """Writes scalar metrics to `workdir/metrics.jsonl` and a TensorBoard event file.

  Example:
    >>> with MetricsWriter("/tmp/run") as writer:
    ...   writer.write_scalars(step=10, scalars={"loss": 0.25, "accuracy": 0.9})
  """

  def __init__(self, workdir: str | os.PathLike, *, enabled: bool = True,
               purge_after_step: int | None = None):
    """Opens (creating `workdir` if needed) the JSONL file and a new event file.

    Args:
      workdir: the run directory.
      enabled: if False, every method is a no-op and nothing is written (used
        on all but the first process of a multi-host run).
      purge_after_step: if given, JSONL records with a step greater than this
        are dropped first (a resumed run rewrites the steps after its
        checkpoint, so they are not duplicated); the new event file starts
        with a purge marker at `purge_after_step + 1`, so TensorBoard also
        drops the older files' events from that step on.
    """
    self._enabled = enabled
    self._jsonl = None
    self._events = None
    if not enabled:
      return
    workdir = os.fspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    jsonl_path = os.path.join(workdir, METRICS_FILENAME)
    if purge_after_step is not None and os.path.exists(jsonl_path):
      _drop_jsonl_records_after(jsonl_path, purge_after_step)
    self._jsonl = open(jsonl_path, "a", encoding="utf-8")
    # tensorboardX names files by the second and host; a resumed run opened within
    # the same second must neither truncate the first file nor sort before it
    # (TensorBoard reads a run's files in name order), hence the nanoseconds.
    # Imported here: tensorboardX imports torch whenever torch is installed (about a
    # second), which only a process that writes metrics should pay.
    import tensorboardX  # pylint: disable=import-outside-toplevel
    self._events = tensorboardX.SummaryWriter(
        logdir=workdir, purge_step=None if purge_after_step is None else purge_after_step + 1,
        filename_suffix=f".{time.time_ns() % 10**9:09d}.{os.getpid()}.{uuid.uuid4().hex[:6]}")

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    """Appends one JSONL record and one event holding `scalars` at `step`, then flushes.

    Args:
      step: the step the scalars belong to (an int >= 0).
      scalars: metric name -> scalar (Python, NumPy or JAX; one element).

    Raises:
      ValueError: if `step` is negative or a value is not a scalar.
    """
    if not self._enabled:
      return
    if (isinstance(step, bool) or np.ndim(step) != 0
        or not np.issubdtype(np.asarray(step).dtype, np.integer)):
      raise ValueError(f"step must be an int, got {step!r}")
    if int(step) < 0:
      raise ValueError(f"step must be >= 0, got {step}")
    values = {str(name): _to_float(name, value) for name, value in scalars.items()}
    record = {"step": int(step), **{k: _json_number(v) for k, v in values.items()}}
    self._jsonl.write(json.dumps(record) + "\n")
    self._jsonl.flush()
    for name, value in values.items():
      self._events.add_scalar(name, value, global_step=int(step))
    self._events.flush()

  def close(self) -> None:
    """Closes both files; further writes are an error."""
    for f in (self._jsonl, self._events):
      if f is not None:
        f.close()

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


def _drop_jsonl_records_after(path: str, step: int) -> None:
  with open(path, encoding="utf-8") as f:
    lines = [line for line in f if line.strip()]
  kept = [line for line in lines if json.loads(line).get("step", -1) <= step]
  if len(kept) == len(lines):
    return
  tmp_path = path + ".tmp"
  with open(tmp_path, "w", encoding="utf-8") as f:
    f.writelines(kept)
  os.replace(tmp_path, path)
