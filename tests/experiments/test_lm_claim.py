"""Claim test of the shared LM stack at tiny scale: a 25k-parameter byte-level model,
trained 300 steps with a fixed seed, predicts validation bytes clearly better than the
unigram baseline; a second run restores the checkpoint instead of retraining."""

import os

import numpy as np
import pytest

from common.models import hf
from experiments import lm
from experiments.configs import lm as lm_config


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("runs") / "lm")
  config = lm_config.get_config("tiny")
  return config, workdir, lm.run(config, workdir)


def test_tiny_lm_beats_the_unigram_baseline(tiny_run):
  config, _, result = tiny_run
  (claim,) = result.claims
  fig = result.figures
  assert fig["validation_bits_per_byte"] < config.bpb_margin * fig["unigram_cross_entropy_bits"]
  assert claim.reproduced
  assert fig["cache_vs_full_max_abs_logit_gap"] < 1e-4


def test_rerun_restores_instead_of_retraining(tiny_run):
  config, workdir, result = tiny_run
  again = lm.load_or_train(config, workdir)
  assert again.history == []  # nothing trained: the final checkpoint was restored
  assert lm.bits_per_byte(again.model, again.params, again.corpus.validation, config) == (
      pytest.approx(result.figures["validation_bits_per_byte"], rel=1e-6))


def test_exported_checkpoint_reloads(tiny_run):
  config, workdir, _ = tiny_run
  ckpt = hf.load_hf_checkpoint(os.path.join(workdir, "hf"))
  assert ckpt.config == lm.model_config(config)
  trained = lm.load_or_train(config, workdir)
  for name in ("embed", "final_norm"):
    for key, value in trained.params[name].items():
      np.testing.assert_array_equal(ckpt.params[name][key], np.asarray(value))


def test_other_experiments_reuse_the_lm_run_beside_them(tiny_run):
  config, workdir, result = tiny_run
  neighbour = os.path.join(os.path.dirname(workdir), "susceptibility")
  reused = lm.trained_lm(config, neighbour)
  assert reused.history == [] and not os.path.exists(os.path.join(neighbour, "lm"))
  changed = lm_config.get_config("tiny")
  changed.unlock()
  changed.num_steps = 20  # different weights: must not reuse the neighbour's run
  fresh = lm.trained_lm(changed, neighbour)
  assert len(fresh.history) > 0 and os.path.isdir(os.path.join(neighbour, "lm", "checkpoints"))
