"""Claim test of the shared LM stack at tiny scale: a 25k-parameter byte-level model,
trained 300 steps with a fixed seed, predicts validation bytes clearly better than the
unigram baseline (bits per byte at most 0.9 x the unigram cross-entropy).

The experiment runs where `make reproduce` puts it, in a workdir that already holds
the LM (a copy of the session's tiny LM), so it restores instead of training; the
training itself is `common.lm`'s, tested in tests/common/test_lm.py."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from common import lm as lm_lib
from common.models import hf
from experiments import lm
from experiments.configs import lm as lm_config


@pytest.fixture(scope="module")
def tiny_run(tiny_lm_dir, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("results") / "lm")
  shutil.copytree(tiny_lm_dir, workdir)
  config = lm_config.get_config("tiny")
  return config, workdir, lm.run(config, workdir)


def test_tiny_lm_beats_the_unigram_baseline(tiny_run):
  config, _, result = tiny_run
  (claim,) = result.claims
  fig = result.figures
  assert claim.claim == ("The model learns the corpus: validation bits per byte at most "
                         "0.9 x the unigram cross-entropy")
  assert fig["validation_bits_per_byte"] < config.bpb_margin * fig["unigram_cross_entropy_bits"]
  assert claim.reproduced
  assert fig["cache_vs_full_max_abs_logit_gap"] < 1e-4
  assert fig["num_params"] == 25696


def test_the_runner_writes_the_outputs(tiny_run):
  _, workdir, result = tiny_run
  with open(os.path.join(workdir, "result.json")) as f:
    assert json.load(f)["claims"][0]["our_figure"] == result.claims[0].our_figure
  for name in ("bits_per_byte.png", "samples.txt"):
    assert os.path.getsize(os.path.join(workdir, name)) > 0
  with open(os.path.join(workdir, "samples.txt")) as f:
    assert f.read().count("--- sample ") == 2


def test_the_lm_in_the_workdir_is_restored_not_retrained(tiny_run, tiny_lm_dir):
  _, workdir, _ = tiny_run
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["300"]
  assert not os.path.exists(os.path.join(workdir, "lm"))
  with open(os.path.join(workdir, "metrics.jsonl")) as a, \
      open(os.path.join(tiny_lm_dir, "metrics.jsonl")) as b:
    assert a.read() == b.read()  # Nothing was trained (or logged) again.


def test_exported_checkpoint_reloads(tiny_run, tiny_lm):
  config, workdir, _ = tiny_run
  ckpt = hf.load_hf_checkpoint(os.path.join(workdir, "hf"))
  assert ckpt.config == lm_lib.model_config(config.lm)
  jax.tree.map(np.testing.assert_array_equal, ckpt.params, jax.device_get(tiny_lm.params))
