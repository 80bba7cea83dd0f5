"""The token-fusion experiment: the claim table on made-up rows, the tiny run end to end
(the tokenizer, the backbone, STE's probing and edit runs on the common loop, every
metric, both classical baselines, plots), resume without recomputing, bad input before
any work.

At the tiny preset (48 x 48 crops; 200 tokenizer updates, tens for the backbone and
STE runs) what is asserted is what holds by construction and not by luck: the trained
tokenizer reconstructs held-out crops better than each crop's mean image, STE edits
exactly ``budget`` probed positions, and every metric is finite. The three claims are
measured at the quick preset (results/REPORT.md).
"""

import json
import os

import numpy as np
import pytest

from common import config as config_lib
from experiments import token_fusion as experiment
from experiments.configs import token_fusion as configs

_KEYS = ("EN", "SD", "SF", "MI", "SCD", "VIF", "Qabf", "SSIM", "SSIM_gt", "PSNR_gt")


def _row(task, method, value, objective):
  return {"task": task, "seed": 0, "method": method, "objective": objective,
          **{k: value for k in _KEYS}}


def _config():
  config = configs.get_config("quick")
  with config.unlocked():
    config.tasks, config.num_seeds = ("multi_exposure", "multi_focus"), 1
  return config


def test_claim_table_applies_the_stated_thresholds():
  config = _config()
  tasks = config.tasks
  good = [r for t in tasks for r in (
      _row(t, "2d", 1.0, 0.50), _row(t, "ste", 1.2, 0.41), _row(t, "random", 1.1, 0.45),
      _row(t, "all", 1.1, 0.40), _row(t, "laplacian", 0.9, 0.6), _row(t, "wavelet", 0.8, 0.7))]
  assert [c.check().reproduced for c in experiment.claims(good, config, {})] == [True] * 3
  bad = [r for t in tasks for r in (
      _row(t, "2d", 1.0, 0.50), _row(t, "ste", 0.95, 0.48), _row(t, "random", 1.1, 0.45),
      _row(t, "all", 1.1, 0.40), _row(t, "laplacian", 1.3, 0.6), _row(t, "wavelet", 0.8, 0.7))]
  assert [c.check().reproduced for c in experiment.claims(bad, config, {})] == [False] * 3
  counts = experiment.first_places(good, config)
  assert counts["ste"] == len(tasks) * len(_KEYS) and counts["2d"] == 0
  assert experiment.figures(good, config)["multi_focus_ste_SD"] == 1.2


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("token_fusion_tiny"))
  return workdir, experiment.run(configs.get_config("tiny"), workdir)


def _log(workdir):
  with open(os.path.join(workdir, "evals.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_tiny_run_end_to_end(tiny_run):
  workdir, result = tiny_run
  config = configs.get_config("tiny")
  rows = _log(workdir)
  methods = ("2d", "ste", "random", "all", "laplacian", "wavelet")
  assert {(r["task"], r["method"]) for r in rows} == {(t, m) for t in config.tasks
                                                      for m in methods}
  for r in rows:
    assert all(np.isfinite(r[k]) for k in ("EN", "SD", "SF", "MI", "SCD", "VIF", "Qabf",
                                           "SSIM", "objective")), r
  for r in rows:
    assert "SSIM_gt" in r and "PSNR_gt" in r  # multi-exposure has ground truth
    if r["method"] == "ste":
      assert len(set(r["positions"])) == config.ste.budget
  f = result.figures
  assert np.isfinite(f["tokenizer_psnr"]) and f["tokenizer_psnr"] > 10.0
  assert len(result.claims) == 3
  for name in result.plots:
    assert os.path.getsize(os.path.join(workdir, name)) > 0


def test_rerun_resumes_without_recomputing(tiny_run):
  workdir, _ = tiny_run
  before = _log(workdir)
  stages = sorted(os.listdir(os.path.join(workdir, "stages")))
  mtimes = [os.path.getmtime(os.path.join(workdir, "stages", s)) for s in stages]
  experiment.run(configs.get_config("tiny"), workdir)
  assert _log(workdir) == before
  assert [os.path.getmtime(os.path.join(workdir, "stages", s)) for s in stages] == mtimes


def test_bad_config_fails_before_any_work(tmp_path):
  config = configs.get_config("tiny")
  with config.unlocked():
    config.ste.budget = 9
  with pytest.raises(config_lib.ConfigError, match="ste.budget"):
    experiment.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "evals.jsonl")


def test_data_dir_path_reads_a_paper_layout_folder(tmp_path):
  """The paper path: an MSRS-style folder feeds the infrared/visible task (split into
  training and held-out pairs, batches drawn from it); a folder without vi/ fails the
  preflight with one line."""
  from common.data import fusion_images  # pylint: disable=import-outside-toplevel
  from methods.token_fusion import training  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  ir, vi = rng.uniform(size=(2, 12, 60, 60)).astype(np.float32)
  fusion_images.write_fusion_folder(str(tmp_path / "msrs"), ir, vi,
                                    [f"{i:05d}" for i in range(12)])
  config = configs.get_config("tiny")
  with config.unlocked():
    config.data_dir, config.tasks = str(tmp_path / "msrs"), ("infrared_visible",)
  configs.preflight(config)
  train, held = experiment.task_data(config, "infrared_visible")
  assert train.a.shape == (4, 48, 48) and held.b.shape == (8, 48, 48)
  assert held.ground_truth is None
  batch = training.pool_batch_fn({"a": train.a, "b": train.b}, 8)(0, 0)
  assert batch["a"].shape == (8, 48, 48)
  (tmp_path / "bad" / "ir").mkdir(parents=True)
  with config.unlocked():
    config.data_dir = str(tmp_path / "bad")
  with pytest.raises(config_lib.ConfigError, match="data_dir"):
    configs.preflight(config)
