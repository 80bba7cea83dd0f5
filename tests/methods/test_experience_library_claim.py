"""The experience-library experiment: the claim table's thresholds on made-up curves,
the tiny-scale claim test (simulated roles), resume after an interruption, the
paper-scale path (MATH-style JSONL, a local HF checkpoint in-process, and the whole
TSGD loop for two steps against our own server over loopback), and bad input.

At the tiny preset (12 families, K = 8, 30 steps, one seed) all four claims held for
seeds 0-4 when the test was written (TSGD +66 to +71 pts over zero-shot; append-only
from a 49-69 % peak to 14-28 %; 34-43 % of unverified accepted operations harmful,
against 28-38 % with verification, and about 2.5x more of them); the test runs seed 0.
"""

import json
import os
import socket

import numpy as np
import pytest

from common import config as config_lib
from common.llm import server as llm_server
from experiments import experience_library as experiment
from experiments.configs import experience_library as configs


def _curves(tsgd, append, no_verify_deltas, verify_deltas, sizes=(20, 300)):
  steps = list(range(0, 61, 5))
  acc = {"zero_shot": [0.05], "tsgd": tsgd, "append_only": append}
  evals = {m: steps if len(a) > 1 else [0] for m, a in acc.items()}
  size = {"zero_shot": [0], "tsgd": [0, sizes[0]], "append_only": [0, sizes[1]]}
  audit = {"tsgd": verify_deltas, "tsgd_no_verify": no_verify_deltas}
  return experiment.Curves(evals, acc, size, {"tsgd": ["r"]}, audit)


def test_claim_table_applies_the_stated_thresholds():
  config = configs.get_config("quick")
  rising = list(np.linspace(0.3, 0.7, 13))
  saturating = [0.4, 0.5, 0.45, 0.4, 0.35, 0.3, 0.3, 0.25, 0.2, 0.2, 0.2, 0.2, 0.2]
  rows = experiment.claims(_curves(rising, saturating, [-0.1, 0.1, 0.0], [0.1]), config)
  assert [r.check().reproduced for r in rows] == [True, True, True, True]
  assert all("(simulated roles)" in r.claim for r in rows)
  # TSGD only 10 pts above zero-shot; append-only still rising; verification no better;
  # a library as large as the memory.
  flat = [0.15] * 13
  rows = experiment.claims(_curves(flat, rising, [-0.1, 0.1], [-0.1, -0.1], (20, 20)), config)
  assert [r.check().reproduced for r in rows] == [False, False, False, False]
  # TSGD that falls by more than the tolerance fails claim 2 even if append-only drops.
  falling = [0.3] + [0.8] * 6 + [0.6] * 6
  rows = experiment.claims(_curves(falling, saturating, [-0.1], []), config)
  assert not rows[1].check().reproduced


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("experience_library_tiny"))
  return workdir, experiment.run(configs.get_config("tiny"), workdir)


def test_tiny_claims_hold_with_simulated_roles(tiny_run):
  workdir, result = tiny_run
  verdicts = {c.claim.split(" (")[0]: c.reproduced for c in result.claims}
  assert len(verdicts) == 4 and all(verdicts.values()), result.claims
  assert all("simulated roles" in c.claim for c in result.claims)
  f = result.figures
  assert f["tsgd_size"] <= 8 < f["append_only_size"]
  assert f["zero_shot_accuracy"] < f["tsgd_accuracy"] <= f["oracle_top_k_accuracy"] + 0.05
  assert os.path.getsize(os.path.join(workdir, "curves.png")) > 0
  assert "Final TSGD library" in result.notes[0] and result.notes[0].count("\n1. ") == 1


def test_an_interrupted_run_resumes_where_it_stopped(tiny_run, tmp_path):
  workdir, result = tiny_run
  with open(os.path.join(workdir, "steps.jsonl")) as f:
    lines = f.read().splitlines()
  resumed = tmp_path / "resumed"
  resumed.mkdir()
  # Killed mid-way: half the rows, the last one torn.
  half = lines[:len(lines) // 2]
  (resumed / "steps.jsonl").write_text("\n".join(half) + "\n" + lines[len(half)][:25])
  again = experiment.run(configs.get_config("tiny"), str(resumed))
  assert again.figures == result.figures and again.claims == result.claims
  # The torn row was skipped and recomputed; every step is there once more.
  rows = (resumed / "steps.jsonl").read_text().splitlines()
  assert len(rows) == len(lines) + 1 and rows[len(half)] == lines[len(half)][:25]


def _paper_config(tmp_path, text_model):
  problems = tmp_path / "math.jsonl"
  problems.write_text("".join(json.dumps({"problem": f"What is {i} + {i}?", "answer": str(2 * i)})
                              + "\n" for i in range(16)))
  config = configs.get_config("tiny")
  with config.unlocked():
    config.text_model = text_model
    config.data.problems_path = str(problems)
    config.methods = ("zero_shot", "tsgd")
    config.update_from_flattened_dict({
        "steps": 2, "batch_size": 3, "heldout_size": 2, "audit_size": 2, "eval_every": 1,
        "data.test_size": 3, "roles.context_chars": 1000, "roles.solver_max_tokens": 12,
        "roles.reflector_max_tokens": 24})
  return config


def test_paper_path_runs_on_jsonl_with_a_local_checkpoint(tiny_hf_dir, tmp_path):
  config = _paper_config(tmp_path, f"hf:{tiny_hf_dir}")
  result = experiment.run(config, str(tmp_path / "run"))
  assert len(result.claims) == 1 and "simulated" not in result.claims[0].claim
  assert np.isfinite(result.figures["tsgd_accuracy"])
  assert "oracle_top_k_accuracy" not in result.figures


def test_two_tsgd_steps_against_our_server_over_loopback(tiny_hf_dir, tmp_path):
  with llm_server.serving(tiny_hf_dir, batch_size=4) as url:
    config = _paper_config(tmp_path, url)
    result = experiment.run(config, str(tmp_path / "run"))
  with open(tmp_path / "run" / "steps.jsonl") as f:
    rows = [json.loads(line) for line in f]
  assert sorted((r["method"], r["step"]) for r in rows) == [
      ("tsgd", 0), ("tsgd", 1), ("tsgd", 2), ("zero_shot", 0)]
  assert all(r["record"]["batch_accuracy"] >= 0 for r in rows if r["record"])
  assert np.isfinite(result.figures["tsgd_accuracy"])


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_bad_input_is_refused_before_the_run_starts(tmp_path):
  config = configs.get_config("tiny")
  url = f"http://127.0.0.1:{_closed_port()}/v1"
  with config.unlocked():
    config.text_model = url
  with pytest.raises(config_lib.ConfigError, match=f"config.text_model='{url}' is invalid: "
                     "expected a usable text model .* connection refused"):
    experiment.run(config, str(tmp_path / "a"))
  assert not os.path.exists(tmp_path / "a" / "steps.jsonl")
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"problem": "1+1?", "answer": "2"}\n{"question": "x"}\n')
  config = configs.get_config("tiny")
  config.data.problems_path = str(bad)
  with pytest.raises(config_lib.ConfigError, match=r"bad.jsonl:2: expected an object"):
    experiment.run(config, str(tmp_path / "b"))
  config = configs.get_config("tiny")
  config.capacity = 0
  with pytest.raises(config_lib.ConfigError, match=r"config.capacity=0 is invalid"):
    experiment.run(config, str(tmp_path / "c"))
  config = configs.get_config("tiny")
  config.initial_rules = ("z" * 9000,)
  with pytest.raises(config_lib.ConfigError, match=r"initial_rules\[0\] has 9000 characters, "
                     "longer than the solver's context"):
    experiment.run(config, str(tmp_path / "d"))
