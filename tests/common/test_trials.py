"""The resumable trial log."""

import ml_collections

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
