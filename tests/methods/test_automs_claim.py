"""The AutoMS experiment: the claim table on made-up rows, the tiny run (offline agents),
resume after an interruption, the agents against our own server over loopback, and bad
input before any work.

The tiny run (1 task, 1 seed, 60 solves on an 8 x 8 mesh) checks that every method
runs end to end through the agents and the simulator and that the rows, plots and notes
are written. No claim is asserted at this scale: 1 task x 1 seed cannot separate
success rates; the claims are measured at the quick preset (17 tasks x 3 seeds) in
results/REPORT.md.
"""

import json
import os
import shutil
import socket

import pytest

from common import config as config_lib
from common.llm import server as llm_server
from experiments import automs as experiment
from experiments.configs import automs as configs


def _rows(rates):
  rows = []
  for method, solved in rates.items():
    for i, ok in enumerate(solved):
      rows.append({"task": f"t{i}", "method": method, "seed": 0, "success": ok})
  return rows


def test_claim_table_applies_the_stated_thresholds():
  config = configs.get_config("tiny")
  good = {"saes": [1, 1, 1, 0], "saes_no_gradient": [1, 0, 0, 0], "llm_only": [1, 1, 0, 0],
          "nsga2": [1, 0, 1, 0], "cmaes": [0, 0, 0, 0], "random": [0, 0, 0, 0]}
  assert [c.check().reproduced for c in experiment.claims(_rows(good), config)] == [True] * 3
  bad = {**good, "saes": [1, 0, 0, 0], "nsga2": [1, 1, 0, 0]}
  rows = experiment.claims(_rows(bad), config)
  assert [c.check().reproduced for c in rows] == [False, False, False]
  assert all("(offline agents)" in c.claim for c in rows)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("automs_tiny"))
  return workdir, experiment.run(configs.get_config("tiny"), workdir)


def test_tiny_run_measures_every_method(tiny_run):
  workdir, result = tiny_run
  config = configs.get_config("tiny")
  with open(os.path.join(workdir, "searches.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert len(rows) == len(config.tasks) * len(config.methods)
  for r in rows:
    assert r["solves"] <= config.search.budget and r["failure"] is None
    assert r["success"] == (r["first_success"] is not None)
    if r["method"] in ("saes", "saes_no_gradient", "llm_only"):
      assert r["calls"] >= 1 and r["unparsed"] == 0
  for m in config.methods:
    assert 0.0 <= result.figures[f"{m}_success_rate"] <= 1.0
  assert len(result.claims) == 3 and result.notes
  for plot in result.plots:
    assert os.path.getsize(os.path.join(workdir, plot)) > 0


def test_an_interrupted_run_resumes_with_the_same_result(tiny_run, tmp_path):
  workdir, result = tiny_run
  with open(os.path.join(workdir, "searches.jsonl")) as f:
    lines = f.read().splitlines()
  keep = lines[:len(lines) - 2]
  (tmp_path / "searches.jsonl").write_text("\n".join(keep) + "\n" + lines[len(keep)][:40])
  again = experiment.run(configs.get_config("tiny"), str(tmp_path))
  # JSON compares NaN figures (no success, no median) as equal.
  assert json.dumps(again.figures) == json.dumps(result.figures)
  assert again.claims == result.claims


def test_the_agents_against_our_server_over_loopback(tiny_hf_dir, tmp_path):
  folder = tmp_path / "hf"
  shutil.copytree(tiny_hf_dir, folder)
  cfg = json.loads((folder / "config.json").read_text())
  cfg["max_position_embeddings"] = 4096
  (folder / "config.json").write_text(json.dumps(cfg))
  with llm_server.serving(str(folder), batch_size=4) as url:
    config = configs.get_config("tiny")
    with config.unlocked():
      config.text_model = url
      config.tasks = ("auxetic_light",)
      config.methods = ("saes", "llm_only")
      config.agents.max_tokens = 16
      config.agents.retries = 1
    result = experiment.run(config, str(tmp_path / "run"))
  with open(tmp_path / "run" / "searches.jsonl") as f:
    rows = [json.loads(line) for line in f]
  # A 25k-parameter byte LM writes no JSON: every reply is counted, retried once, and
  # the search records which role failed instead of inventing a design.
  assert [r["failure"] for r in rows] == ["manager", "manager"]
  assert all(r["unparsed"] == r["calls"] > 0 and r["solves"] == 0 for r in rows)
  assert all("offline" not in c.claim for c in result.claims)


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_bad_input_is_refused_before_any_work(tmp_path):
  config = configs.get_config("tiny")
  with config.unlocked():
    config.text_model = f"http://127.0.0.1:{_closed_port()}/v1"
  with pytest.raises(config_lib.ConfigError, match="expected a usable text model"):
    experiment.run(config, str(tmp_path / "a"))
  assert not os.path.exists(tmp_path / "a" / "searches.jsonl")
  config = configs.get_config("tiny")
  with config.unlocked():
    config.tasks = ("levitation",)
  with pytest.raises(config_lib.ConfigError, match=r"config.tasks=.* is invalid"):
    experiment.run(config, str(tmp_path / "b"))
