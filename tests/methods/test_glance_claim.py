"""GLANCE at tiny scale: the whole experiment end to end (DoorKey-5x5, PPO without
curiosity and GLANCE, 2 seeds, 4 updates of 4 x 32 steps, one minibatch per update).

Checked is what such a run can show: the experiment writes its three claims, its
success curves and heat maps; a rerun trains nothing; GLANCE's linguistic world model
learns the description of the next view (its cross-entropy, the mean over the seeds,
falls at every update: 13.14, 13.05, 12.96, 12.95). The paper's claims
(success rates against every baseline over 5 seeds) are measured at the quick preset:
results/glance/ and docs/glance.md.
"""

import glob
import json
import os

import jax
import numpy as np
import pytest

from common.rl import ppo
from experiments import glance as ex
from experiments.configs import glance as configs


def _keep_compiled(monkeypatch):
  """The experiment drops jax's compiled programs after each (environment, method) run,
  which bounds a long run's memory maps; its tiny runs share most of their small
  programs (initialisers, the policy network, the environment), so here they are kept
  (the suite's own guard, tests/conftest.py, still clears them between files)."""
  monkeypatch.setattr(jax, "clear_caches", lambda: None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  config = configs.get_config("tiny")
  workdir = str(tmp_path_factory.mktemp("glance"))
  with pytest.MonkeyPatch.context() as monkeypatch:
    _keep_compiled(monkeypatch)
    return config, workdir, ex.run(config, workdir)


def test_the_experiment_runs_end_to_end_and_reruns_nothing(tiny, monkeypatch):
  config, workdir, result = tiny
  _keep_compiled(monkeypatch)
  assert len(result.claims) == 3
  assert sorted(result.plots) == ["intrinsic_heatmaps.png", "success.png"]
  for plot in result.plots:
    assert os.path.getsize(os.path.join(workdir, plot)) > 0
  env = config.envs[0]
  for m in config.methods:
    assert 0.0 <= result.figures[f"{env}_{m}_success"] <= 1.0
  monkeypatch.setattr(ppo, "run_updates", lambda *a, **k: pytest.fail("trained again"))
  again = ex.run(config, workdir)
  np.testing.assert_equal(again.figures, result.figures)


def _glance_history(workdir):
  (path,) = glob.glob(os.path.join(workdir, "runs", "*-glance-*", "metrics.jsonl"))
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_the_linguistic_world_model_learns(tiny):
  config, workdir, result = tiny
  history = _glance_history(workdir)
  assert len(history) == config.num_updates
  assert history[-1]["language_ce"] < history[0]["language_ce"]
  # The measurement behind claim 3 exists and is a correlation. Its sign is not
  # asserted: after 4 updates it was positive for seeds 0 and 1 (0.26, 0.16) and
  # negative for seed 2 (-0.14), so only the quick preset measures it.
  assert -1.0 <= result.figures[f"{config.envs[0]}_glance_correlation"] <= 1.0
