"""Tests of common/metrics.py: CRC-32C, TFRecord framing, Event encoding, the writer."""

import math
import os
import pathlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import metrics


def _bitwise_crc32c(data: bytes) -> int:
  """Slow reference: CRC-32C one bit at a time."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 * (crc & 1))
  return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("data, expected", [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),  # The standard check value.
    (bytes(32), 0x8A9136AA),  # RFC 3720, B.4.
    (b"\xff" * 32, 0x62A8AB43),  # RFC 3720, B.4.
    (bytes(range(32)), 0x46DD794E),  # RFC 3720, B.4.
])
def test_crc32c_known_values(data, expected):
  assert metrics.crc32c(data) == expected


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=64))
def test_crc32c_table_matches_bitwise_reference(data):
  assert metrics.crc32c(data) == _bitwise_crc32c(data)


def test_masked_crc32c_formula():
  crc = metrics.crc32c(b"abc")
  expected = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32
  assert metrics.masked_crc32c(b"abc") == expected


def test_frame_record_layout():
  data = b"hello event"
  framed = metrics.frame_record(data)
  assert len(framed) == 8 + 4 + len(data) + 4
  assert struct.unpack("<Q", framed[:8])[0] == len(data)
  assert struct.unpack("<I", framed[8:12])[0] == metrics.masked_crc32c(framed[:8])
  assert framed[12:-4] == data
  assert struct.unpack("<I", framed[-4:])[0] == metrics.masked_crc32c(data)


def test_encode_event_exact_bytes():
  got = metrics.encode_event(wall_time=1.5, step=300, scalars={"loss": 0.25})
  value = b"\x0a\x04loss" + b"\x15" + struct.pack("<f", 0.25)
  summary = b"\x0a" + bytes([len(value)]) + value
  expected = (b"\x09" + struct.pack("<d", 1.5) + b"\x10\xac\x02" +  # 300 as a varint.
              b"\x2a" + bytes([len(summary)]) + summary)
  assert got == expected
  first = metrics.encode_event(wall_time=2.0, file_version="brain.Event:2")
  assert first == (b"\x09" + struct.pack("<d", 2.0) + b"\x10\x00" +
                   b"\x1a\x0dbrain.Event:2")


def _event_message_class():
  """Builds tensorflow.Event / Summary / Value with the protobuf runtime, if installed."""
  descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
  from google.protobuf import descriptor_pool, message_factory
  FD = descriptor_pb2.FieldDescriptorProto
  proto = descriptor_pb2.FileDescriptorProto(name="test_event.proto", package="testtf")
  value = proto.message_type.add(name="Value")
  value.field.add(name="tag", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
  value.field.add(name="simple_value", number=2, type=FD.TYPE_FLOAT,
                  label=FD.LABEL_OPTIONAL)
  summary = proto.message_type.add(name="Summary")
  summary.field.add(name="value", number=1, type=FD.TYPE_MESSAGE,
                    label=FD.LABEL_REPEATED, type_name=".testtf.Value")
  event = proto.message_type.add(name="Event")
  event.field.add(name="wall_time", number=1, type=FD.TYPE_DOUBLE, label=FD.LABEL_OPTIONAL)
  event.field.add(name="step", number=2, type=FD.TYPE_INT64, label=FD.LABEL_OPTIONAL)
  event.field.add(name="file_version", number=3, type=FD.TYPE_STRING,
                  label=FD.LABEL_OPTIONAL)
  event.field.add(name="summary", number=5, type=FD.TYPE_MESSAGE,
                  label=FD.LABEL_OPTIONAL, type_name=".testtf.Summary")
  pool = descriptor_pool.DescriptorPool()
  pool.Add(proto)
  return message_factory.GetMessageClass(pool.FindMessageTypeByName("testtf.Event"))


def test_encode_event_parses_with_protobuf_runtime():
  Event = _event_message_class()
  event = Event.FromString(metrics.encode_event(
      wall_time=123.25, step=-7, scalars={"loss": 1.5, "acc/top1": -0.125}))
  assert event.wall_time == 123.25 and event.step == -7
  assert [(v.tag, v.simple_value) for v in event.summary.value] == [
      ("loss", 1.5), ("acc/top1", -0.125)]
  head = Event.FromString(metrics.encode_event(wall_time=0.0, file_version="brain.Event:2"))
  assert head.file_version == "brain.Event:2"


@settings(max_examples=50, deadline=None)
@given(step=st.integers(-2**63, 2**63 - 1),
       scalars=st.dictionaries(st.text(min_size=1, max_size=8),
                               st.floats(width=32, allow_nan=False), max_size=4))
def test_encode_decode_round_trip(step, scalars):
  event = metrics.decode_event(metrics.encode_event(wall_time=1.0, step=step,
                                                    scalars=scalars))
  assert event["step"] == step
  assert event["scalars"] == list(scalars.items())


def test_writer_writes_jsonl_and_events(tmp_path):
  with metrics.MetricsWriter(tmp_path) as writer:
    writer.write_scalars(0, {"loss": 2.0, "acc": np.float32(0.5)})
    writer.write_scalars(10, {"loss": 1.0 / 3.0, "acc": float("nan")})
  records = metrics.read_metrics_jsonl(tmp_path)
  assert records[0] == {"step": 0, "loss": 2.0, "acc": 0.5}
  assert records[1]["step"] == 10 and records[1]["acc"] == "nan"
  files = metrics.event_files(tmp_path)
  assert len(files) == 1 and os.path.basename(files[0]).startswith("events.out.tfevents.")
  first = metrics.decode_event(metrics.read_records(files[0])[0])
  assert first["file_version"] == "brain.Event:2"
  scalars = metrics.read_event_scalars(files[0])
  assert scalars[:3] == [(0, "loss", 2.0), (0, "acc", 0.5), (10, "loss", pytest.approx(1 / 3))]
  assert scalars[3][:2] == (10, "acc") and math.isnan(scalars[3][2])
  from_dir = metrics.read_event_scalars(tmp_path)  # A directory reads all its files.
  assert from_dir[:3] == scalars[:3] and len(from_dir) == 4


def test_reader_detects_corruption(tmp_path):
  with metrics.MetricsWriter(tmp_path) as writer:
    writer.write_scalars(1, {"loss": 1.0})
  (path,) = metrics.event_files(tmp_path)
  raw = bytearray(pathlib.Path(path).read_bytes())
  raw[-6] ^= 0xFF  # Inside the last record's float payload.
  pathlib.Path(path).write_bytes(bytes(raw))
  with pytest.raises(ValueError, match="data CRC mismatch"):
    metrics.read_event_scalars(path)
  pathlib.Path(path).write_bytes(bytes(raw[:-3]))
  with pytest.raises(ValueError, match="truncated"):
    metrics.read_event_scalars(path)


def test_resumed_writer_purges_later_jsonl_steps_and_appends(tmp_path):
  with metrics.MetricsWriter(tmp_path) as writer:
    for step in range(6):
      writer.write_scalars(step, {"loss": float(step)})
  with metrics.MetricsWriter(tmp_path, purge_after_step=3) as writer:
    writer.write_scalars(4, {"loss": 40.0})
  records = metrics.read_metrics_jsonl(tmp_path / "metrics.jsonl")
  assert [(r["step"], r["loss"]) for r in records] == [
      (0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
  assert len(metrics.event_files(tmp_path)) == 2  # One event file per writer.


def test_disabled_writer_writes_nothing(tmp_path):
  with metrics.MetricsWriter(tmp_path / "run", enabled=False) as writer:
    writer.write_scalars(0, {"loss": 1.0})
  assert not (tmp_path / "run").exists()


def test_writer_rejects_bad_input(tmp_path):
  with metrics.MetricsWriter(tmp_path) as writer:
    with pytest.raises(ValueError, match="step must be >= 0, got -1"):
      writer.write_scalars(-1, {"loss": 1.0})
    with pytest.raises(ValueError, match=r"'w' must be a scalar, got shape \(3,\)"):
      writer.write_scalars(0, {"w": np.ones(3)})
  with pytest.raises(FileNotFoundError, match="no event file"):
    metrics.read_event_scalars(tmp_path / "missing")
  assert metrics.read_metrics_jsonl(tmp_path) == []  # Nothing half-written.


def test_write_scalars_rejects_a_fractional_step_and_a_non_numeric_value(tmp_path):
  # A step of 2.7 was silently truncated to 2; a string value failed without its name.
  with metrics.MetricsWriter(tmp_path) as writer:
    with pytest.raises(ValueError, match="step must be an int, got 2.7"):
      writer.write_scalars(2.7, {"loss": 1.0})
    with pytest.raises(TypeError, match="metric 'loss' must be a number, got 'high'"):
      writer.write_scalars(3, {"loss": "high"})
