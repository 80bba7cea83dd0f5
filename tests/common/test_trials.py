"""The resume mechanism: the trial log and cached stages."""

import os

import ml_collections
import numpy as np
import pytest

from common import trials


def _config(**kw):
  return ml_collections.ConfigDict({"preset": "quick", "lr": 0.1, "ns": (1, 2), **kw})


def test_fingerprint_ignores_excluded_keys_and_sees_the_rest():
  a = trials.config_fingerprint(_config(), exclude=("preset", "ns"))
  assert a == trials.config_fingerprint(_config(ns=(5,), preset="paper"), exclude=("preset", "ns"))
  assert a != trials.config_fingerprint(_config(lr=0.2), exclude=("preset", "ns"))
  assert a != trials.config_fingerprint(_config(), exclude=("preset", "ns"), salt="toy")


def test_log_resumes_skips_cut_lines_and_other_fingerprints(tmp_path):
  path = str(tmp_path / "sub" / "trials.jsonl")
  with trials.TrialLog(path, "abc") as log:
    log.append({"k": 1, "v": 10})
    log.append({"k": 2, "v": 20})
  with trials.TrialLog(path, "other") as log:
    log.append({"k": 1, "v": -1})
  with open(path, "a") as f:
    f.write('{"fingerprint": "abc", "k": 3, "v"')  # cut by an interruption
  again = trials.TrialLog(path, "abc")
  assert again.done(lambda r: r["k"]) == {1: {"fingerprint": "abc", "k": 1, "v": 10},
                                          2: {"fingerprint": "abc", "k": 2, "v": 20}}
  assert trials.read_trials(path, "other")[0]["v"] == -1
  with again:
    again.append({"k": 3, "v": 30})  # starts a fresh line after the cut one
  assert trials.TrialLog(path, "abc").done(lambda r: r["k"])[3]["v"] == 30


def test_fingerprint_of_nested_configs_and_dotted_excludes():
  def nested(**train):
    return ml_collections.ConfigDict({"preset": "quick", "lr": 0.1,
                                      "train": {"num_steps": 10, "log_every": 5, **train}})
  a = trials.config_fingerprint(nested(), exclude=("preset", "train.log_every"))
  assert a == trials.config_fingerprint(nested(log_every=1), exclude=("preset", "train.log_every"))
  assert a != trials.config_fingerprint(nested(num_steps=11), exclude=("preset", "train.log_every"))
  # A sub-config hashes like the same keys at the top level.
  assert (trials.config_fingerprint(nested().train, exclude=()) ==
          trials.config_fingerprint({"num_steps": 10, "log_every": 5}, exclude=()))


def test_cached_stage_computes_once_per_fingerprint(tmp_path):
  calls = []

  def compute():
    calls.append(1)
    return {1: np.float32(0.5), "xs": np.arange(3), "nested": {"a": [1.0, 2.0]}}

  first = trials.cached_stage(str(tmp_path), "study", "fp1", compute)
  again = trials.cached_stage(str(tmp_path), "study", "fp1", compute)
  # Fresh and resumed runs see the same (JSON) value: string keys, lists, floats.
  assert first == again == {"1": 0.5, "xs": [0, 1, 2], "nested": {"a": [1.0, 2.0]}}
  assert len(calls) == 1
  trials.cached_stage(str(tmp_path), "study", "fp2", compute)  # a changed config recomputes
  assert len(calls) == 2
  assert trials.read_stage(str(tmp_path), "study", "fp1") is None
  assert not [p for p in os.listdir(tmp_path / "stages") if ".tmp" in p]


def test_npz_stage_round_trips_arrays_and_ignores_a_corrupt_file(tmp_path):
  value = {"u": np.linspace(0, 1, 5, dtype=np.float32), "ids": np.arange(4)}
  out = trials.cached_stage(str(tmp_path), "data", "fp", lambda: value, kind="npz")
  back = trials.read_stage(str(tmp_path), "data", "fp", kind="npz")
  for k in value:
    np.testing.assert_array_equal(out[k], value[k])
    np.testing.assert_array_equal(back[k], value[k])
    assert back[k].dtype == value[k].dtype
  path = trials.stage_path(str(tmp_path), "data", "npz")
  with open(path, "wb") as f:
    f.write(b"not an npz file")
  assert trials.read_stage(str(tmp_path), "data", "fp", kind="npz") is None
  out = trials.cached_stage(str(tmp_path), "data", "fp", lambda: value, kind="npz")
  np.testing.assert_array_equal(out["u"], value["u"])
  with pytest.raises(ValueError, match="stage kind"):
    trials.stage_path(str(tmp_path), "data", "pickle")
  with pytest.raises(TypeError, match="npz stage"):
    trials.write_stage(str(tmp_path), "bad", "fp", [1, 2], kind="npz")


def test_a_stage_that_fails_leaves_the_previous_value(tmp_path):
  trials.cached_stage(str(tmp_path), "s", "fp", lambda: {"v": 1})

  def boom():
    raise RuntimeError("interrupted")

  with pytest.raises(RuntimeError):
    trials.cached_stage(str(tmp_path), "s", "fp2", boom)
  assert trials.read_stage(str(tmp_path), "s", "fp") == {"v": 1}


@pytest.mark.parametrize("tail", [
    b'{"fingerprint": "abc", "k": 3, "v"',           # cut mid-row
    b'{"fingerprint": "abc", "k": 3, "s": "\xc3',    # cut inside a UTF-8 character
    b"\0" * 40,                                       # NUL padding left by a crash
    b"[1, 2",                                         # not a row at all
])
def test_torn_last_line_is_skipped_repaired_and_the_run_resumes(tmp_path, caplog, tail):
  path = str(tmp_path / "trials.jsonl")
  with trials.TrialLog(path, "abc") as log:
    for k in (1, 2):
      log.append({"k": k, "v": 10 * k})
  with open(path, "ab") as f:
    f.write(tail)
  caplog.set_level("WARNING")
  done = []
  with trials.TrialLog(path, "abc") as log:  # Before: UnicodeDecodeError for the UTF-8 cut.
    for k in (1, 2, 3):
      if k not in log.done(lambda r: r["k"]):
        done.append(k)
        log.append({"k": k, "v": 10 * k})
  assert done == [3]  # Only the trial whose row was torn runs again.
  assert any("skipped 1 unreadable line(s) (line 3)" in r.getMessage() for r in caplog.records)
  rows = trials.read_trials(path, "abc")
  assert [(r["k"], r["v"]) for r in rows] == [(1, 10), (2, 20), (3, 30)]
  with open(path, "rb") as f:
    assert f.read().endswith(b'"v": 30}\n')


def test_ensure_directory_creates_and_rejects_files_and_unwritable_paths(tmp_path):
  assert trials.ensure_directory(tmp_path / "a" / "b") == str(tmp_path / "a" / "b")
  assert os.listdir(tmp_path / "a" / "b") == []  # The write check leaves nothing.
  (tmp_path / "f").write_text("x")
  with pytest.raises(ValueError, match=r"^workdir '.*f' is a file; expected a directory"):
    trials.ensure_directory(tmp_path / "f")
  with pytest.raises(ValueError, match=r"^--workdir '/proc/x' is not a writable directory.*"
                     r"nearest existing directory '/proc'"):
    trials.ensure_directory("/proc/x", "--workdir")
  with pytest.raises(ValueError, match="workdir must be a non-empty path, got ''"):
    trials.ensure_directory("")


def test_fingerprint_sweep_numpy_values_sets_and_bad_arguments():
  # NumPy values hash like the Python ones (before: TypeError "not iterable").
  assert (trials.config_fingerprint({"lr": np.float64(0.5), "n": np.int64(3), "xs": np.arange(2)})
          == trials.config_fingerprint({"lr": 0.5, "n": 3, "xs": [0, 1]}))
  trials.config_fingerprint({"lr": np.float32(0.1)})
  # A set hashes the same in every process (before: in its iteration order).
  assert trials.config_fingerprint({"s": {"b", "a"}}) == trials.config_fingerprint({"s": ["a", "b"]})
  # A bare string as exclude used to exclude its letters: "ns" dropped keys "n" and "s".
  with pytest.raises(TypeError, match="exclude must be a sequence of key names"):
    trials.config_fingerprint({"n": 1, "ns": 2}, exclude="ns")
  with pytest.raises(TypeError, match="fingerprint must be a str"):
    trials.TrialLog("/tmp/never.jsonl", _config())
  calls = []
  with pytest.raises(TypeError, match="fingerprint must be a str"):
    trials.cached_stage("/tmp/never", "s", {"a": 1}, lambda: calls.append(1))
  assert calls == []  # Before: computed first, then failed to write.


def test_only_the_writing_process_writes_rows_and_stages(tmp_path, monkeypatch):
  monkeypatch.setattr(trials, "is_writer", lambda: False)  # process 1 of a multi-process run
  with trials.TrialLog(str(tmp_path / "t.jsonl"), "fp") as log:
    log.append({"x": 1})
    assert [r["x"] for r in log.rows] == [1]
  assert trials.cached_stage(str(tmp_path), "s", "fp", lambda: {"a": 2}) == {"a": 2}
  assert os.listdir(tmp_path) == []
  monkeypatch.setattr(trials, "is_writer", lambda: True)
  with trials.TrialLog(str(tmp_path / "t.jsonl"), "fp") as log:
    log.append({"x": 1})
  assert trials.read_trials(str(tmp_path / "t.jsonl"), "fp") == [{"fingerprint": "fp", "x": 1}]
