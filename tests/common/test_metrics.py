"""Tests of common/metrics.py: the JSONL + TensorBoard writer, read back with TensorBoard's reader."""

import math
import os

import numpy as np
import pytest

from common import metrics


def test_writer_writes_jsonl_and_events(tmp_path, tensorboard_scalars):
  with metrics.MetricsWriter(tmp_path) as writer:
    writer.write_scalars(0, {"loss": 2.0, "acc": np.float32(0.5)})
    writer.write_scalars(10, {"loss": 1.0 / 3.0, "acc": float("nan")})
  records = metrics.read_metrics_jsonl(tmp_path)
  assert records[0] == {"step": 0, "loss": 2.0, "acc": 0.5}
  assert records[1]["step"] == 10 and records[1]["acc"] == "nan"
  files = metrics.event_files(tmp_path)
  assert len(files) == 1 and os.path.basename(files[0]).startswith("events.out.tfevents.")
  scalars = tensorboard_scalars(tmp_path)
  assert scalars[:3] == [(0, "acc", 0.5), (0, "loss", 2.0), (10, "acc", pytest.approx(math.nan, nan_ok=True))]
  assert scalars[3] == (10, "loss", pytest.approx(1 / 3))


def test_resumed_writer_purges_later_steps_in_both_files(tmp_path, tensorboard_scalars):
  with metrics.MetricsWriter(tmp_path) as writer:
    for step in range(6):
      writer.write_scalars(step, {"loss": float(step)})
  with metrics.MetricsWriter(tmp_path, purge_after_step=3) as writer:
    writer.write_scalars(4, {"loss": 40.0})
  records = metrics.read_metrics_jsonl(tmp_path / "metrics.jsonl")
  want = [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
  assert [(r["step"], r["loss"]) for r in records] == want
  assert len(metrics.event_files(tmp_path)) == 2  # One event file per writer.
  # TensorBoard drops the first run's steps 4 and 5 at the second file's purge marker.
  assert [(s, v) for s, _, v in tensorboard_scalars(tmp_path)] == want


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
  assert metrics.read_metrics_jsonl(tmp_path) == []  # Nothing half-written.


def test_write_scalars_rejects_a_fractional_step_and_a_non_numeric_value(tmp_path):
  # A step of 2.7 was silently truncated to 2; a string value failed without its name.
  with metrics.MetricsWriter(tmp_path) as writer:
    with pytest.raises(ValueError, match="step must be an int, got 2.7"):
      writer.write_scalars(2.7, {"loss": 1.0})
    with pytest.raises(TypeError, match="metric 'loss' must be a number, got 'high'"):
      writer.write_scalars(3, {"loss": "high"})
