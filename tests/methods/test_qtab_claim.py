"""The Q-Tab experiment: the claim table on made-up rows, the tiny run end to end
(tables, both training stages on the common loop, the copula, every metric, plots),
resume without retraining, and bad input before any work.

At the tiny preset (600 rows of the generated table, 150 updates per stage) the
asserted claim is the one that holds by construction of the method and not by luck:
the generated rows use more distinct numeric codes than the training set has rows,
and rows from unseen codes are not copies of training rows (claim 3). Fidelity is
checked loosely (column shapes well above an independent-columns sample's); the MLE,
fidelity and ablation claims are measured at the quick preset in results/REPORT.md.
"""

import json
import os

import pytest

from common import config as config_lib
from experiments import qtab as experiment
from experiments.configs import qtab as configs


def _row(method, mle, shapes, trends, codes=None, unseen_dcr=0.05, det=(0.9, 0.9)):
  row = {"table": "mixed", "seed": 0, "method": method, "mle": mle, "column_shapes": shapes,
         "pair_trends": trends}
  if codes is not None:
    row.update(distinct_codes=float(codes), train_rows=1000.0, unseen_dcr_median=unseen_dcr,
               detection_seen=det[0], detection_unseen=det[1])
  return row


def _config():
  config = configs.get_config("quick")
  with config.unlocked():
    config.tables, config.num_seeds = ("mixed",), 1
  return config


def test_claim_table_applies_the_stated_thresholds():
  config = _config()
  good = [_row("qtab", 0.80, 0.95, 0.90, codes=3000), _row("copula", 0.70, 0.90, 0.85),
          _row("diffusion", 0.78, 0.96, 0.92), _row("no_corruption", 0.75, 0.94, 0.9, 2000),
          _row("plain_lfq", 0.70, 0.9, 0.85, 500), _row("qtab_uniform", 0.8, 0.95, 0.9, 3000),
          _row("rvq", 0.7, 0.9, 0.8, 400)]
  assert [c.check().reproduced for c in experiment.claims(good, config)] == [True] * 4
  bad = [_row("qtab", 0.60, 0.80, 0.70, codes=900, det=(0.9, 0.5)),
         _row("copula", 0.70, 0.9, 0.85), _row("diffusion", 0.78, 0.96, 0.92),
         _row("no_corruption", 0.75, 0.94, 0.9, 950), _row("plain_lfq", 0.7, 0.9, 0.85, 500),
         _row("qtab_uniform", 0.8, 0.95, 0.9, 3000), _row("rvq", 0.7, 0.9, 0.8, 400)]
  assert [c.check().reproduced for c in experiment.claims(bad, config)] == [False] * 4
  figures = experiment.figures(good, config)
  assert figures["mixed_qtab_mle"] == 0.80 and figures["mixed_qtab_mle_se"] == 0.0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("qtab_tiny"))
  return workdir, experiment.run(configs.get_config("tiny"), workdir)


def _log(workdir):
  with open(os.path.join(workdir, "evals.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_tiny_run_end_to_end(tiny_run):
  workdir, result = tiny_run
  rows = _log(workdir)
  assert {(r["method"]) for r in rows} == {"qtab", "no_corruption", "copula", "real"}
  qtab = next(r for r in rows if r["method"] == "qtab")
  assert qtab["distinct_codes"] > qtab["train_rows"]          # claim 3, by construction
  assert qtab["unseen_dcr_median"] > 0 and qtab["unseen_zero_dcr_share"] < 0.05
  assert qtab["column_shapes"] > 0.85
  assert 0.0 <= qtab["dcr_share"] <= 1.0 and 0.0 <= qtab["alpha_precision"] <= 1.0
  assert all(k in qtab for k in ("impute_region", "impute_plan", "impute_churn"))
  real = next(r for r in rows if r["method"] == "real")
  assert real["column_shapes"] == pytest.approx(1.0)
  assert len(result.claims) == 3  # no diffusion baseline at the tiny preset: no claim 2
  for name in result.plots:
    assert os.path.getsize(os.path.join(workdir, name)) > 0


def test_rerun_resumes_without_recomputing(tiny_run):
  workdir, _ = tiny_run
  before = _log(workdir)
  experiment.run(configs.get_config("tiny"), workdir)
  assert _log(workdir) == before


def test_bad_config_fails_before_any_work(tmp_path):
  config = configs.get_config("tiny")
  with config.unlocked():
    config.tokenizer.corruption = "everywhere"
  with pytest.raises(config_lib.ConfigError, match="tokenizer.corruption"):
    experiment.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "evals.jsonl")
