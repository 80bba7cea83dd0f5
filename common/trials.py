"""The one way experiments resume: fingerprinted results that a rerun reuses.

Two shapes of the same idea, both keyed by `config_fingerprint` so that a changed
config never reuses stale results:

* `TrialLog`: one JSON line per finished trial (a grid of seeds, sizes, methods);
  an interrupted run skips the trials already logged.
* `cached_stage`: the whole output of one stage of an experiment (a study, a
  simulated data set, a trained model's marker), written atomically as JSON or
  `.npz` under `workdir/stages/`; a rerun with the same fingerprint loads it.

A TrialLog:

    fp = config_fingerprint(config, exclude=("preset", "ns"))
    with TrialLog(os.path.join(workdir, "trials.jsonl"), fp) as log:
      for key in todo:
        if key not in log.done(lambda row: row["key"]):
          log.append({"key": key, "value": measure(key)})

Lines cut by an interruption (a torn last line, a run of NUL bytes, undecodable
bytes) are skipped when reading, with one logged line; the next append starts a
fresh line after them. Rows are flushed one by one.

A stage:

    fp = config_fingerprint(config.estimator, salt="estimator")
    est = cached_stage(workdir, "estimator", fp, lambda: estimator_study(config))
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from absl import logging
import jax
import numpy as np


def _plain(value: Any) -> Any:
  """Nested ConfigDicts and mappings as plain dicts, for hashing and JSON."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, dict):
    return {str(k): _plain(v) for k, v in value.items()}
  return value


def _fingerprint_default(value: Any) -> Any:
  """JSON for the values a config may hold beyond JSON's own: NumPy scalars and
  arrays by value, sets sorted (so every process hashes them alike)."""
  if isinstance(value, (set, frozenset)):
    return sorted(value, key=repr)
  if isinstance(value, np.generic) or hasattr(value, "__array__"):
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array.tolist()
  return list(value)


def _check_fingerprint(fingerprint: Any) -> None:
  if not isinstance(fingerprint, str):
    raise TypeError(f"fingerprint must be a str (from config_fingerprint), got "
                    f"{type(fingerprint).__name__}")


def config_fingerprint(config: Any, exclude: Iterable[str] = ("preset",), salt: str = "") -> str:
  """A 16-hex-digit hash of every config key except `exclude`, plus `salt`.

  Args:
    config: a ConfigDict (sub-configs included) or a mapping; pass a sub-config
      (`config.estimator`) to key a stage on just the keys it reads.
    exclude: keys that only select which trials run, not what a trial computes;
      dotted keys ("train.log_every") reach into sub-configs. A sequence of
      names: a bare string is an error (it would exclude its letters).
    salt: an extra string mixed in (e.g. the stage or case name).

  Returns:
    16 hex digits; equal configs give equal fingerprints in every process.

  Raises:
    TypeError: if `exclude` is a string or holds a non-string, or `salt` is not a string.
  """
  if isinstance(exclude, (str, bytes)) or not all(isinstance(k, str) for k in exclude):
    raise TypeError(f"exclude must be a sequence of key names such as ('preset',), got "
                    f"{exclude!r}")
  if not isinstance(salt, str):
    raise TypeError(f"salt must be a str, got {type(salt).__name__}")
  plain = _plain(config)
  if not isinstance(plain, dict):
    raise TypeError(f"config must be a ConfigDict or a mapping, got {type(config).__name__}")
  for key in exclude:
    *parents, leaf = key.split(".")
    node = plain
    for part in parents:
      node = node.get(part, {}) if isinstance(node, dict) else {}
    if isinstance(node, dict):
      node.pop(leaf, None)
  blob = json.dumps({k: plain[k] for k in sorted(plain)}, sort_keys=True,
                    default=_fingerprint_default)
  return hashlib.sha256((salt + blob).encode()).hexdigest()[:16]


def _json_default(value: Any) -> Any:
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic) or hasattr(value, "__array__"):
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array.tolist()
  raise TypeError(f"cannot store {type(value).__name__} in a JSON stage")


def is_writer() -> bool:
  """Whether this process writes results: all but process 0 of a multi-process run
  (`jax.distributed`) compute the same values and write nothing, so trial rows are
  not appended once per process."""
  return not jax.distributed.is_initialized() or jax.process_index() == 0


def atomic_write_bytes(path: str, data: bytes) -> None:
  """Writes `data` to `path` through a temporary file and a rename (on the writing
  process only, see `is_writer`)."""
  if not is_writer():
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def ensure_directory(path: str | os.PathLike, name: str = "workdir") -> str:
  """Creates directory `path` if needed and checks that files can be written in it.

  Entrypoints and runners call it before any work, so a bad workdir fails at once
  with one line instead of after the first trial's compute.

  Args:
    path: the directory (it may not exist yet).
    name: what to call it in the error (the argument or flag name).

  Returns:
    `path` as a string.

  Raises:
    ValueError: one line naming `name` and the path: it is empty, it (or a parent)
      is a file, or no directory can be created or written there (e.g. `/proc/x`).
  """
  if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
    raise ValueError(f"{name} must be a non-empty path, got {path!r}")
  path = os.fspath(path)
  if os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f"{name} {path!r} is a file; expected a directory (or a path that "
                     "does not exist yet)")
  try:
    os.makedirs(path, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=path)
    os.close(fd)
    os.remove(probe)
  except OSError as e:
    parent = os.path.abspath(path)
    while not os.path.isdir(parent):
      parent = os.path.dirname(parent)
    raise ValueError(f"{name} {path!r} is not a writable directory: cannot create or write "
                     f"it ({e.strerror or type(e).__name__}; nearest existing directory "
                     f"{parent!r}); expected a path where a directory can be created and "
                     "written") from None
  return path


STAGES_SUBDIR = "stages"
_FINGERPRINT_KEY = "__fingerprint__"


def stage_path(workdir: str, name: str, kind: str = "json") -> str:
  """Where stage `name` of kind "json" or "npz" is stored: `workdir/stages/name.kind`."""
  if kind not in ("json", "npz"):
    raise ValueError(f"stage kind must be 'json' or 'npz', got {kind!r}")
  return os.path.join(workdir, STAGES_SUBDIR, f"{name}.{kind}")


def read_stage(workdir: str, name: str, fingerprint: str, kind: str = "json") -> Any | None:
  """The stored value of stage `name` if it was written under `fingerprint`, else None.

  A file that cannot be read (cut short, corrupted) counts as missing.
  """
  _check_fingerprint(fingerprint)
  path = stage_path(workdir, name, kind)
  if not os.path.exists(path):
    return None
  try:
    if kind == "json":
      with open(path) as f:
        saved = json.load(f)
      ok = isinstance(saved, dict) and saved.get("fingerprint") == fingerprint
      return saved["value"] if ok else None
    with np.load(path, allow_pickle=False) as saved:
      if _FINGERPRINT_KEY not in saved or str(saved[_FINGERPRINT_KEY]) != fingerprint:
        return None
      return {k: saved[k] for k in saved.files if k != _FINGERPRINT_KEY}
  except (OSError, ValueError, KeyError, EOFError) as e:
    logging.warning("ignoring unreadable stage %s: %s", path, e)
    return None


def write_stage(workdir: str, name: str, fingerprint: str, value: Any,
                kind: str = "json") -> Any:
  """Stores `value` atomically as stage `name`; returns it as `read_stage` will.

  kind "json": any JSON-able structure (NumPy/JAX scalars and arrays become
  numbers and lists; mapping keys become strings). kind "npz": a flat dict of
  arrays.
  """
  path = stage_path(workdir, name, kind)
  if kind == "json":
    text = json.dumps({"fingerprint": fingerprint, "value": value}, default=_json_default)
    atomic_write_bytes(path, text.encode())
    return json.loads(text)["value"]
  if not isinstance(value, dict) or _FINGERPRINT_KEY in value:
    raise TypeError(f"an npz stage must be a dict of arrays without {_FINGERPRINT_KEY!r}")
  arrays = {k: np.asarray(v) for k, v in value.items()}
  buffer = io.BytesIO()
  np.savez(buffer, **arrays, **{_FINGERPRINT_KEY: np.asarray(fingerprint)})
  atomic_write_bytes(path, buffer.getvalue())
  return arrays


def cached_stage(workdir: str, name: str, fingerprint: str, compute: Callable[[], Any],
                 kind: str = "json") -> Any:
  """`compute()` once per fingerprint: stored under `workdir/stages/`, reused on rerun.

  Args:
    workdir: the experiment's directory.
    name: the stage's name (a file name stem).
    fingerprint: `config_fingerprint` of the config keys the stage reads.
    compute: `() -> value`, run only when no stage with this fingerprint exists.
    kind: "json" (nested dicts/lists/numbers) or "npz" (a flat dict of arrays).

  Returns:
    The value as stored: a fresh and a resumed run see the same types (JSON
    mapping keys are strings).

  Raises:
    TypeError: if `fingerprint` is not a str or `compute` is not callable, before
      computing anything.
  """
  if not callable(compute):
    raise TypeError(f"compute must be a callable () -> value, got {compute!r}")
  value = read_stage(workdir, name, fingerprint, kind)
  if value is not None:
    logging.info("stage %s: reused from %s", name, stage_path(workdir, name, kind))
    return value
  start = time.time()
  value = write_stage(workdir, name, fingerprint, compute(), kind)
  logging.info("stage %s: computed in %.1f s", name, time.time() - start)
  return value


def read_trials(path: str, fingerprint: str) -> list[dict]:
  """The rows of `path` written under `fingerprint`, in file order.

  Lines that are not a JSON object (cut by an interruption, NUL padding left by a
  crash, undecodable bytes) are skipped with one logged line.
  """
  rows, bad = [], []
  if os.path.exists(path):
    with open(path, "rb") as f:
      for number, line in enumerate(f, 1):
        if not line.strip(b"\0 \t\r\n"):
          bad += [number] if line.strip() else []
          continue
        try:
          row = json.loads(line)
        except ValueError:  # a line cut by an interruption (or not UTF-8)
          bad.append(number)
          continue
        if not isinstance(row, dict):
          bad.append(number)
        elif row.get("fingerprint") == fingerprint:
          rows.append(row)
  if bad:
    logging.warning("%s: skipped %d unreadable line(s) (line %s), cut by an interruption",
                    path, len(bad), ", ".join(map(str, bad[:5])))
  return rows


class TrialLog:
  """Appends fingerprinted rows to a JSONL file; `rows` holds those already there."""

  def __init__(self, path: str, fingerprint: str):
    _check_fingerprint(fingerprint)
    self.path, self.fingerprint = path, fingerprint
    self.rows = read_trials(path, fingerprint)
    self._file = None

  def done(self, key: Callable[[dict], Hashable]) -> dict:
    """{key(row): row} over the rows logged so far (the last row wins)."""
    return {key(row): row for row in self.rows}

  def append(self, row: dict) -> dict:
    row = {"fingerprint": self.fingerprint, **row}
    if not is_writer():
      self.rows.append(row)
      return row
    if self._file is None:
      os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
      self._file = open(self.path, "a+b")
      self._file.seek(0, os.SEEK_END)
      if self._file.tell():  # end a line cut by an interruption before appending
        self._file.seek(-1, os.SEEK_END)
        if self._file.read(1) != b"\n":
          self._file.write(b"\n")
    self._file.write((json.dumps(row) + "\n").encode())
    self._file.flush()
    self.rows.append(row)
    return row

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None

  def __enter__(self) -> "TrialLog":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
