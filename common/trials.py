"""A resumable log of finished trials: one JSON line per trial, tagged with a config
fingerprint, so an interrupted experiment skips what is done and a changed config
never reuses stale rows.

    fp = config_fingerprint(config, exclude=("preset", "ns"))
    with TrialLog(os.path.join(workdir, "trials.jsonl"), fp) as log:
      for key in todo:
        if key not in log.done(lambda row: row["key"]):
          log.append({"key": key, "value": measure(key)})

Lines cut by an interruption are skipped when reading; rows are flushed one by one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Hashable, Iterable
from typing import Any


def config_fingerprint(config: Any, exclude: Iterable[str] = ("preset",), salt: str = "") -> str:
  """A 16-hex-digit hash of every config key except `exclude` (keys that only select
  which trials run, not what a trial computes), plus an optional `salt`."""
  exclude = set(exclude)
  blob = json.dumps({k: config[k] for k in sorted(config.keys()) if k not in exclude},
                    sort_keys=True, default=list)
  return hashlib.sha256((salt + blob).encode()).hexdigest()[:16]


def read_trials(path: str, fingerprint: str) -> list[dict]:
  """The rows of `path` written under `fingerprint`, in file order."""
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by an interruption
          continue
        if isinstance(row, dict) and row.get("fingerprint") == fingerprint:
          rows.append(row)
  return rows


class TrialLog:
  """Appends fingerprinted rows to a JSONL file; `rows` holds those already there."""

  def __init__(self, path: str, fingerprint: str):
    self.path, self.fingerprint = path, fingerprint
    self.rows = read_trials(path, fingerprint)
    self._file = None

  def done(self, key: Callable[[dict], Hashable]) -> dict:
    """{key(row): row} over the rows logged so far (the last row wins)."""
    return {key(row): row for row in self.rows}

  def append(self, row: dict) -> dict:
    row = {"fingerprint": self.fingerprint, **row}
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
