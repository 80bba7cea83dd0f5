"""Metrics to JSON lines and TensorBoard event files, without TensorFlow.

`MetricsWriter(workdir)` appends one JSON object per logged step to
`workdir/metrics.jsonl` and writes the same scalars to a TensorBoard event file
`workdir/events.out.tfevents.*`, which TensorBoard reads as a run.

An event file is a sequence of TFRecords, each framing one serialised
`tensorflow.Event` protocol buffer:

    record = uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)

all little-endian, where `masked_crc32c(b) = ((c >> 15) | (c << 17)) + 0xa282ead8`
(mod 2**32) with `c = crc32c(b)` (Castagnoli polynomial). The first record is an
Event with `file_version = "brain.Event:2"`; each later one carries a Summary:

    Event   {double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5}
    Summary {repeated Value value = 1}
    Value   {string tag = 1; float simple_value = 2}

`read_event_scalars(path)` parses such files back (checking every CRC), and
`read_metrics_jsonl(path)` reads the JSON lines.

Example:
    >>> with MetricsWriter(workdir) as writer:
    ...     writer.write_scalars(0, {"loss": 1.5})
    >>> read_event_scalars(workdir)
    [(0, 'loss', 1.5)]
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

METRICS_FILENAME = "metrics.jsonl"
EVENTS_PREFIX = "events.out.tfevents."
FILE_VERSION = "brain.Event:2"

_CRC32C_POLY = 0x82F63B78  # Castagnoli polynomial, bit-reversed.
_MASK_DELTA = 0xA282EAD8


def _make_crc32c_table() -> tuple[int, ...]:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ _CRC32C_POLY if crc & 1 else crc >> 1
    table.append(crc)
  return tuple(table)


_CRC32C_TABLE = _make_crc32c_table()  # immutable


def crc32c(data: bytes) -> int:
  """Returns the CRC-32C (Castagnoli) checksum of `data` as an unsigned int.

  Args:
    data: the bytes to checksum.

  Returns:
    The checksum, in [0, 2**32). `crc32c(b"123456789") == 0xE3069283`.
  """
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
  """Returns TFRecord's masked CRC-32C: `((c >> 15) | (c << 17)) + 0xa282ead8` mod 2**32.

  Args:
    data: the bytes to checksum.

  Returns:
    The masked checksum, in [0, 2**32).
  """
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
  """Frames `data` as one TFRecord (length, masked CRC of length, data, masked CRC of data).

  Args:
    data: the record payload.

  Returns:
    The framed bytes, ready to append to a TFRecord file.
  """
  length = struct.pack("<Q", len(data))
  return (length + struct.pack("<I", masked_crc32c(length)) + data +
          struct.pack("<I", masked_crc32c(data)))


# ----------------------------------------------------------------------------
# Protocol buffer encoding (only what Event/Summary/Value need).

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


def _varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # int64 fields encode negatives as 10-byte two's complement.
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _field_key(number: int, wire_type: int) -> bytes:
  return _varint((number << 3) | wire_type)


def _length_delimited(number: int, payload: bytes) -> bytes:
  return _field_key(number, _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def encode_event(*, wall_time: float, step: int = 0, file_version: str | None = None,
                 scalars: Mapping[str, float] | None = None) -> bytes:
  """Serialises a `tensorflow.Event` protocol buffer.

  Args:
    wall_time: seconds since the epoch (Event field 1, double).
    step: the global step (Event field 2, int64).
    file_version: if given, Event field 3 (the first record of a file says
      "brain.Event:2").
    scalars: if given, a Summary (Event field 5) with one `simple_value` Value
      per (tag, value) item, in order.

  Returns:
    The serialised Event (unframed).
  """
  out = _field_key(1, _FIXED64) + struct.pack("<d", float(wall_time))
  out += _field_key(2, _VARINT) + _varint(int(step))
  if file_version is not None:
    out += _length_delimited(3, file_version.encode("utf-8"))
  if scalars is not None:
    summary = b""
    for tag, value in scalars.items():
      value_msg = (_length_delimited(1, str(tag).encode("utf-8")) +
                   _field_key(2, _FIXED32) + struct.pack("<f", float(value)))
      summary += _length_delimited(1, value_msg)
    out += _length_delimited(5, summary)
  return out


# ----------------------------------------------------------------------------
# Decoding (for tests and users who want their scalars back).


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
  result, shift = 0, 0
  while True:
    if pos >= len(buf):
      raise ValueError("truncated varint in protocol buffer")
    byte = buf[pos]
    pos += 1
    result |= (byte & 0x7F) << shift
    if not byte & 0x80:
      return result, pos
    shift += 7


def _parse_fields(buf: bytes) -> list[tuple[int, int, Any]]:
  """Splits a protocol buffer message into (field number, wire type, raw value)."""
  fields, pos = [], 0
  while pos < len(buf):
    key, pos = _read_varint(buf, pos)
    number, wire_type = key >> 3, key & 7
    if wire_type == _VARINT:
      value, pos = _read_varint(buf, pos)
    elif wire_type == _FIXED64:
      value, pos = buf[pos:pos + 8], pos + 8
    elif wire_type == _LENGTH_DELIMITED:
      length, pos = _read_varint(buf, pos)
      value, pos = buf[pos:pos + length], pos + length
    elif wire_type == _FIXED32:
      value, pos = buf[pos:pos + 4], pos + 4
    else:
      raise ValueError(f"unsupported protocol buffer wire type {wire_type} (field {number})")
    if pos > len(buf):
      raise ValueError(f"truncated protocol buffer field {number}")
    fields.append((number, wire_type, value))
  return fields


def decode_event(data: bytes) -> dict[str, Any]:
  """Parses a serialised `tensorflow.Event` into a dict.

  Args:
    data: one unframed Event message.

  Returns:
    A dict with `wall_time` (float), `step` (int), and `file_version` (str) and
    `scalars` (list of (tag, value)) where present. Unknown fields are skipped.
  """
  event: dict[str, Any] = {"wall_time": 0.0, "step": 0}
  for number, wire_type, value in _parse_fields(data):
    if number == 1 and wire_type == _FIXED64:
      event["wall_time"] = struct.unpack("<d", value)[0]
    elif number == 2 and wire_type == _VARINT:
      event["step"] = value - (1 << 64) if value >= 1 << 63 else value
    elif number == 3 and wire_type == _LENGTH_DELIMITED:
      event["file_version"] = value.decode("utf-8")
    elif number == 5 and wire_type == _LENGTH_DELIMITED:
      scalars = event.setdefault("scalars", [])
      for v_number, v_type, value_msg in _parse_fields(value):
        if v_number != 1 or v_type != _LENGTH_DELIMITED:
          continue
        tag, simple_value = None, None
        for f_number, f_type, f_value in _parse_fields(value_msg):
          if f_number == 1 and f_type == _LENGTH_DELIMITED:
            tag = f_value.decode("utf-8")
          elif f_number == 2 and f_type == _FIXED32:
            simple_value = struct.unpack("<f", f_value)[0]
        if tag is not None and simple_value is not None:
          scalars.append((tag, simple_value))
  return event


def read_records(path: str | os.PathLike) -> list[bytes]:
  """Reads the payloads of a TFRecord file, verifying both CRCs of every record.

  Args:
    path: a TFRecord file.

  Returns:
    The record payloads, in file order.

  Raises:
    ValueError: naming the file and byte offset if a record is truncated or a
      CRC does not match.
  """
  with open(path, "rb") as f:
    buf = f.read()
  records, pos = [], 0
  while pos < len(buf):
    if pos + 12 > len(buf):
      raise ValueError(f"{path}: truncated record header at byte {pos}")
    length_bytes = buf[pos:pos + 8]
    (length,) = struct.unpack("<Q", length_bytes)
    (length_crc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
    if length_crc != masked_crc32c(length_bytes):
      raise ValueError(f"{path}: length CRC mismatch in record at byte {pos}")
    start, end = pos + 12, pos + 12 + length
    if end + 4 > len(buf):
      raise ValueError(f"{path}: truncated record data at byte {pos} "
                       f"(length {length}, file has {len(buf)} bytes)")
    data = buf[start:end]
    (data_crc,) = struct.unpack("<I", buf[end:end + 4])
    if data_crc != masked_crc32c(data):
      raise ValueError(f"{path}: data CRC mismatch in record at byte {pos}")
    records.append(data)
    pos = end + 4
  return records


def event_files(workdir: str | os.PathLike) -> list[str]:
  """Returns the TensorBoard event files in `workdir`, least recently written first."""
  paths = [os.path.join(workdir, name) for name in os.listdir(workdir)
           if name.startswith(EVENTS_PREFIX)]
  return sorted(paths, key=lambda path: (os.path.getmtime(path), path))


def read_event_scalars(path: str | os.PathLike) -> list[tuple[int, str, float]]:
  """Reads every scalar from a TensorBoard event file, or from all of them in a directory.

  Args:
    path: an `events.out.tfevents.*` file, or a directory whose event files are
      all read, least recently written first (a resumed run's file last).

  Returns:
    A list of (step, tag, value) in file order; values are float32-rounded,
    as TensorBoard stores them.

  Raises:
    FileNotFoundError: if `path` does not exist.
    ValueError: if a record is truncated or fails its CRC, or the first record
      is not a "brain.Event:2" file_version event.
  """
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no event file or directory at {path!r}")
  paths = event_files(path) if os.path.isdir(path) else [path]
  scalars = []
  for file_path in paths:
    records = read_records(file_path)
    if records and decode_event(records[0]).get("file_version") != FILE_VERSION:
      raise ValueError(f"{file_path}: first record is not a {FILE_VERSION!r} "
                       "file_version event")
    for record in records:
      event = decode_event(record)
      for tag, value in event.get("scalars", []):
        scalars.append((event["step"], tag, value))
  return scalars


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
        checkpoint, so they are not duplicated). TensorBoard event files are
        append-only and are left as they are.
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
    name = (f"{EVENTS_PREFIX}{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{uuid.uuid4().hex[:8]}")
    self.events_path = os.path.join(workdir, name)
    self._events = open(self.events_path, "ab")
    self._events.write(frame_record(encode_event(wall_time=time.time(),
                                                 file_version=FILE_VERSION)))
    self._events.flush()

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
    self._events.write(frame_record(encode_event(wall_time=time.time(), step=int(step),
                                                 scalars=values)))
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
