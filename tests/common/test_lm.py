"""Tests of the shared LM (`common.lm`): its config and checks, the weights fingerprint,
exact resume and restore, and where `trained_lm` finds the model or trains it.

The tiny LM is trained once per session (the `tiny_lm_dir` fixture); a test that
needs to change a run directory copies it first. What must train here uses a model
smaller still, checkpointed halfway."""

import hashlib
import math
import os
import shutil

import jax
import ml_collections
import numpy as np
import pytest

from common import config as config_lib
from common import lm
from common import trials
from common.models import transformer


def _small_config():
  """Trains in a second or two: 8 steps, a checkpoint at step 4."""
  config = lm.get_config("tiny")
  config.update(dict(d_model=16, d_ff=32, seq_len=16, warmup_steps=2))
  config.train.update(dict(num_steps=8, batch_size=4, checkpoint_every=4, log_every=1,
                           progress_bar=False))
  return config


def _set(config, key, value):
  """Sets the dotted ``key`` of a (locked) config."""
  *parents, leaf = key.split(".")
  for part in parents:
    config = config[part]
  config[leaf] = value


def _digest(directory):
  """A hash of every file's path and bytes under `directory`."""
  h = hashlib.sha256()
  for root, dirs, files in os.walk(directory):
    dirs.sort()
    for name in sorted(files):
      path = os.path.join(root, name)
      h.update(os.path.relpath(path, directory).encode())
      with open(path, "rb") as f:
        h.update(f.read())
  return h.hexdigest()


def _assert_same_params(a, b):
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(a), jax.device_get(b))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("small_lm"))
  config = _small_config()
  return config, workdir, lm.load_or_train(config, workdir)


def test_load_or_train_trains_then_restores(small_run):
  config, workdir, trained = small_run
  assert [row["step"] for row in trained.history] == list(range(8))
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["4", "8"]
  assert lm.is_trained(config, workdir)
  again = lm.load_or_train(config, workdir)
  assert again.history == []  # nothing trained: the final checkpoint was restored
  _assert_same_params(again.params, trained.params)


def test_trained_lm_reuses_the_finished_lm_beside_the_workdir(tiny_lm_dir, tiny_lm, tmp_path):
  shutil.copytree(tiny_lm_dir, tmp_path / "lm")
  workdir = str(tmp_path / "susceptibility")
  reused = lm.trained_lm(lm.get_config("tiny"), workdir)
  assert reused.history == []
  _assert_same_params(reused.params, tiny_lm.params)
  assert not os.path.exists(os.path.join(workdir, "lm"))


def test_an_interrupted_run_resumes_in_workdir_lm_when_the_neighbour_differs(small_run,
                                                                              tiny_lm_dir,
                                                                              tmp_path):
  config, small_dir, trained = small_run
  shutil.copytree(tiny_lm_dir, tmp_path / "lm")  # A finished LM of another config.
  before = _digest(tmp_path / "lm")
  workdir = str(tmp_path / "zeroth_order")
  own = os.path.join(workdir, "lm")
  # What an interruption between steps 4 and 8 leaves in workdir/lm: the step-4
  # checkpoint and the marker written before the first step.
  shutil.copytree(small_dir, own)
  shutil.rmtree(os.path.join(own, "checkpoints", "8"))
  trials.write_stage(own, lm.STAGE, lm.fingerprint(config), {"finished": False})
  assert not lm.is_trained(config, own)
  resumed = lm.trained_lm(config, workdir)
  assert [row["step"] for row in resumed.history] == [4, 5, 6, 7]
  _assert_same_params(resumed.params, trained.params)  # Exact resume.
  assert lm.is_trained(config, own)
  assert _digest(tmp_path / "lm") == before


def test_an_explicit_lm_workdir_is_used(small_run, tiny_lm_dir, tiny_lm, tmp_path):
  _, small_dir, _ = small_run
  shutil.copytree(small_dir, tmp_path / "lm")  # A neighbour that must be passed over.
  workdir = str(tmp_path / "rabitq_attention")
  chosen = lm.trained_lm(lm.get_config("tiny"), workdir, lm_workdir=tiny_lm_dir)
  assert chosen.history == []
  _assert_same_params(chosen.params, tiny_lm.params)
  assert not os.path.exists(os.path.join(workdir, "lm"))


def test_a_directory_of_another_lm_is_refused_and_kept(tiny_lm_dir, tmp_path):
  held = str(tmp_path / "held")
  shutil.copytree(tiny_lm_dir, held)
  before = _digest(held)
  changed = lm.get_config("tiny")
  changed.train.num_steps = 301
  for call in (lambda: lm.load_or_train(changed, held),
               lambda: lm.trained_lm(changed, str(tmp_path / "exp"), lm_workdir=held)):
    with pytest.raises(config_lib.ConfigError, match="trained with a different config") as e:
      call()
    assert "\n" not in str(e.value) and held in str(e.value)
  assert _digest(held) == before


def test_checkpoints_without_a_marker_are_refused_and_kept(tiny_lm_dir, tmp_path):
  held = str(tmp_path / "held")
  shutil.copytree(tiny_lm_dir, held)
  shutil.rmtree(os.path.join(held, trials.STAGES_SUBDIR))
  before = _digest(held)
  with pytest.raises(config_lib.ConfigError, match="no record of the LM config"):
    lm.load_or_train(lm.get_config("tiny"), held)
  assert _digest(held) == before


@pytest.mark.parametrize("key, value", [("train.log_every", 7), ("train.progress_bar", False),
                                        ("train.checkpoint_every", 100),
                                        ("train.keep_checkpoints", 1)])
def test_evaluation_only_keys_keep_the_fingerprint(key, value):
  config = lm.get_config("tiny")
  _set(config, key, value)
  assert lm.fingerprint(config) == lm.fingerprint(lm.get_config("tiny"))


@pytest.mark.parametrize("key, value", [("train.num_steps", 301), ("train.seed", 1),
                                        ("train.batch_size", 8), ("d_model", 64),
                                        ("learning_rate", 0.02), ("validation_fraction", 0.2),
                                        ("family", "neox")])
def test_weight_keys_change_the_fingerprint(key, value):
  config = lm.get_config("tiny")
  _set(config, key, value)
  assert lm.fingerprint(config) != lm.fingerprint(lm.get_config("tiny"))


def test_a_restore_with_other_evaluation_keys_reuses_the_run(tiny_lm_dir):
  config = lm.get_config("tiny")
  config.train.update(dict(log_every=7, progress_bar=False))
  assert lm.load_or_train(config, tiny_lm_dir).history == []


def test_presets_validate_and_size():
  for preset in lm.PRESETS:
    config = lm.get_config(preset)
    lm.validate(config)
    assert "preset" not in config
  params = jax.eval_shape(lambda k: transformer.init_params(
      transformer.Transformer(lm.model_config(lm.get_config("tiny"))), k),
                          jax.random.PRNGKey(0))
  assert transformer.num_params(params) == 25696
  with pytest.raises(config_lib.ConfigError, match="unknown preset 'huge'"):
    lm.get_config("huge")


@pytest.mark.parametrize("key, value, message", [
    ("num_kv_heads", 3, r"config\.lm\.num_kv_heads=3 .* a divisor of lm\.num_heads=4"),
    ("warmup_steps", 700, r"config\.lm\.warmup_steps=700 .* below lm\.train\.num_steps=700"),
    ("family", "gpt2", r"config\.lm\.family='gpt2' .* one of"),
    ("train.batch_size", 0, r"config\.lm\.train\.batch_size"),
])
def test_validate_names_the_embedded_key(key, value, message):
  config = ml_collections.ConfigDict({"lm": lm.get_config("quick")})
  _set(config, f"lm.{key}", value)
  with pytest.raises(config_lib.ConfigError, match=message) as e:
    lm.validate(config, "lm.")
  assert "\n" not in str(e.value)


def test_lm_loss_is_the_mean_next_byte_cross_entropy(tiny_lm):
  tokens = np.asarray(tiny_lm.corpus.validation[:2 * 33], np.int32).reshape(2, 33)
  loss, metrics = jax.jit(lm.lm_loss(tiny_lm.model))(tiny_lm.params, {"tokens": tokens}, None)
  logits = jax.jit(tiny_lm.model.apply)({"params": tiny_lm.params}, tokens[:, :-1])
  log_p = jax.nn.log_softmax(np.asarray(logits, np.float64), axis=-1)
  expected = -np.mean(np.take_along_axis(np.asarray(log_p), tokens[:, 1:, None], axis=-1))
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  np.testing.assert_allclose(float(metrics["bits_per_byte"]), expected / math.log(2), rtol=1e-5)
