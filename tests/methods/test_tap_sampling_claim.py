"""The TapSampling experiment: the claim table on made-up rows, the tiny run end to end
(demonstrations, the common loop for every model, closed-loop evaluation, coverage,
verifier rows, plots), resume without retraining, and bad input before any work.

At the tiny preset (40 demonstrations, 200 updates per model, 16 episodes) the models
are far from trained, so no claim is asserted; the claims are measured at the quick
preset in results/REPORT.md. The pieces' own behaviour (the VAE reconstructs, the
verifier ranks forward above reversed motion, the merge rule) is tested on closed-form
cases in test_tap_sampling.py.
"""

import json
import os

import pytest

from common import config as config_lib
from experiments import tap_sampling as experiment
from experiments.configs import tap_sampling as configs


def _rows(single, tap, best, mmd=(0.1, 0.05), ver=(0.9, 0.9)):
  rows = []
  for method, total, rate in (("single", 1, single), ("tap", 16, tap),
                              ("best_of_k", 16, best), ("gaussian", 16, best)):
    rows.append({"kind": "eval", "env": "push", "seed": 0, "policy": "flow",
                 "method": method, "total": total, "success": rate, "progress": rate})
  rows.append({"kind": "coverage", "env": "push", "seed": 0, "policy": "flow",
               "mmd_policy": mmd[0], "mmd_vae": mmd[1], "verifier_rank_corr": 0.3})
  rows.append({"kind": "verifier", "env": "push", "seed": 0, "pearson": ver[0],
               "auc": ver[1]})
  return rows


def _config():
  config = configs.get_config("quick")
  with config.unlocked():
    config.envs, config.policies, config.num_seeds = ("push",), ("flow",), 1
  return config


def test_claim_table_applies_the_stated_thresholds():
  config = _config()
  good = experiment.claims(_rows(0.3, 0.5, 0.4), config)
  assert [c.check().reproduced for c in good] == [True] * 4
  bad = experiment.claims(_rows(0.3, 0.32, 0.4, mmd=(0.05, 0.1), ver=(0.9, 0.6)), config)
  assert [c.check().reproduced for c in bad] == [False, False, False, False]
  figures = experiment.figures(_rows(0.3, 0.5, 0.4), config)
  assert figures["push_flow_tap_k16_success"] == 0.5
  assert figures["push_flow_verifier_rank_corr"] == 0.3


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("tap_tiny"))
  return workdir, experiment.run(configs.get_config("tiny"), workdir)


def _log(workdir):
  with open(os.path.join(workdir, "evals.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_tiny_run_writes_every_row_and_plot(tiny_run):
  workdir, result = tiny_run
  config = configs.get_config("tiny")
  rows = [r for r in _log(workdir) if "kind" in r]
  evals = [r for r in rows if r["kind"] == "eval"]
  assert sorted((r["method"], r["total"]) for r in evals) == [
      ("best_of_k", 16), ("single", 1), ("tap", 16)]
  assert all(0.0 <= r["success"] <= 1.0 and 0.0 <= r["progress"] <= 1.0 for r in evals)
  (cov,) = [r for r in rows if r["kind"] == "coverage"]
  assert cov["mmd_policy"] > -0.05 and cov["mmd_vae"] > -0.05
  (ver,) = [r for r in rows if r["kind"] == "verifier"]
  assert 0.0 <= ver["auc"] <= 1.0 and -1.0 <= ver["pearson"] <= 1.0
  assert len(result.claims) == 4
  for name in result.plots:
    assert os.path.getsize(os.path.join(workdir, name)) > 1000
  assert config.episodes == 16


def test_a_rerun_resumes_without_training_or_evaluating(tiny_run, monkeypatch):
  workdir, first = tiny_run
  before = _log(workdir)

  def no_eval(*args, **kwargs):
    raise AssertionError("a finished row was recomputed")

  monkeypatch.setattr(experiment, "eval_row", no_eval)
  monkeypatch.setattr(experiment, "coverage_row", no_eval)
  monkeypatch.setattr(experiment, "verifier_row", no_eval)
  again = experiment.run(configs.get_config("tiny"), workdir)
  assert _log(workdir) == before
  assert json.dumps(again.figures) == json.dumps(first.figures)


@pytest.mark.parametrize("key,value,match", [
    ("sampling.total", 2, r"config.sampling.total=2 is invalid: expected a candidate count "
                          r">= sampling.num_policy \(N = 4\)"),
    ("sampling.threshold", 1.5, r"config.sampling.threshold=1.5 is invalid"),
    ("envs", ("fly",), r"config.envs=\('fly',\) is invalid"),
    ("policies", ("mlp",), r"config.policies=\('mlp',\) is invalid"),
    ("execute_steps", 11, r"config.execute_steps=11 is invalid: expected at most horizon"),
])
def test_bad_config_fails_in_one_line_before_any_work(tmp_path, key, value, match):
  config = configs.get_config("tiny")
  with config.unlocked():
    parts = key.split(".")
    target = config
    for p in parts[:-1]:
      target = target[p]
    target[parts[-1]] = value
  with pytest.raises(config_lib.ConfigError, match=match):
    experiment.run(config, str(tmp_path / "w"))
  assert not os.path.exists(tmp_path / "w" / "runs")
