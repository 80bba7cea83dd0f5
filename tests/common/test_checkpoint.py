"""Tests of common/checkpoint.py: round trip into an abstract target, retention, atomicity."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common import checkpoint, sharding
from common.train import TrainState

# What orbax 0.12 appends to a step directory while writing it (renamed away on success).
ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"


def _state(scale=1.0):
  params = {"w": scale * jnp.arange(6.0).reshape(2, 3), "b": jnp.full((3,), scale)}
  return TrainState(step=jnp.array(3, jnp.int32), params=params,
                    opt_state=optax.adam(1e-3).init(params))


def test_round_trip_into_abstract_state_with_shardings(tmp_path):
  state = _state()
  mesh = sharding.make_mesh()
  shardings = jax.tree.map(lambda _: sharding.replicated_sharding(mesh), state)
  manager = checkpoint.make_manager(tmp_path / "ckpt", keep=2)
  checkpoint.save(manager, 3, state)
  manager.wait_until_finished()
  assert checkpoint.latest_step(manager) == 3
  abstract = jax.eval_shape(lambda: _state(0.0))
  restored = checkpoint.restore(manager, 3, abstract, shardings)
  manager.close()
  assert isinstance(restored, TrainState)
  assert jax.tree.structure(restored) == jax.tree.structure(state)
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    assert got.sharding == sharding.replicated_sharding(mesh)


def test_keeps_only_the_newest(tmp_path):
  manager = checkpoint.make_manager(tmp_path, keep=2)
  for step in (1, 2, 3):
    checkpoint.save(manager, step, _state(step))
  manager.wait_until_finished()
  assert manager.all_steps() == [2, 3]
  manager.close()
  assert sorted(os.listdir(tmp_path)) == ["2", "3"]


def test_unfinished_write_is_ignored_and_cleaned_up(tmp_path):
  manager = checkpoint.make_manager(tmp_path, keep=3)
  checkpoint.save(manager, 4, _state(4.0))
  manager.close()
  # What a process killed mid-write leaves: the step-8 tmp dir, without the commit
  # markers that orbax writes just before its final rename, and a truncated file.
  tmp = tmp_path / f"8{ORBAX_TMP_SUFFIX}"
  shutil.copytree(tmp_path / "4", tmp)
  os.rename(tmp / "default", tmp / f"default{ORBAX_TMP_SUFFIX}")
  for root, _, files in os.walk(tmp):
    for name in files:
      if name == "commit_success.txt":
        os.remove(os.path.join(root, name))
      elif name == "manifest.ocdbt":
        with open(os.path.join(root, name), "r+b") as f:
          f.truncate(3)
  manager = checkpoint.make_manager(tmp_path, keep=3)
  assert checkpoint.latest_step(manager) == 4
  restored = checkpoint.restore(manager, 4, jax.eval_shape(_state))
  np.testing.assert_array_equal(restored.params["w"], _state(4.0).params["w"])
  checkpoint.save(manager, 8, _state(8.0))  # The step can be written again.
  manager.close()
  assert sorted(os.listdir(tmp_path)) == ["4", "8"]


def test_bad_arguments(tmp_path):
  with pytest.raises(ValueError, match="keep must be an int >= 1, got 0"):
    checkpoint.make_manager(tmp_path, keep=0)
  manager = checkpoint.make_manager(tmp_path, keep=1)
  with pytest.raises(ValueError, match="step must be an int >= 0, got -2"):
    checkpoint.save(manager, -2, _state())
  with pytest.raises(FileNotFoundError, match=r"no checkpoint for step 5 .* found steps \[\]"):
    checkpoint.restore(manager, 5, jax.eval_shape(_state))
  manager.close()


def test_restore_newest_skips_broken_steps_and_deletes_them(tmp_path, caplog):
  manager = checkpoint.make_manager(tmp_path, keep=3)
  for step in (2, 4, 6):
    checkpoint.save(manager, step, _state(float(step)))
  manager.close()
  os.remove(tmp_path / "6" / "default" / "_METADATA")  # Before: a "pytree structure error".
  data = tmp_path / "4" / "default" / "d"
  with open(data / sorted(os.listdir(data))[0], "r+b") as f:
    f.truncate(10)
  manager = checkpoint.make_manager(tmp_path, keep=3)
  caplog.set_level("WARNING")
  step, restored = checkpoint.restore_newest(manager, jax.eval_shape(_state))
  assert step == 2
  np.testing.assert_array_equal(restored.params["w"], _state(2.0).params["w"])
  skipped = [r.getMessage() for r in caplog.records if "Skipping" in r.getMessage()]
  assert [m.split(" in ")[0] for m in skipped] == ["Skipping checkpoint step 6",
                                                   "Skipping checkpoint step 4"]
  assert "_METADATA" in skipped[0] and all("\n" not in m for m in skipped)
  assert manager.all_steps() == [2]  # The broken steps are gone: they can be written again.
  checkpoint.save(manager, 4, _state(4.0))
  manager.close()


def test_restore_newest_with_nothing_and_with_nothing_that_restores(tmp_path):
  manager = checkpoint.make_manager(tmp_path / "empty", keep=2)
  assert checkpoint.restore_newest(manager, jax.eval_shape(_state)) == (None, None)
  manager.close()
  manager = checkpoint.make_manager(tmp_path / "run", keep=2)
  checkpoint.save(manager, 3, _state())
  manager.wait_until_finished()

  def reject(step, state):
    raise ValueError(f"it holds state.step={int(state.step)}, not {step + 1}")

  with pytest.raises(checkpoint.CheckpointError, match=r"no checkpoint in .*run restores "
                     r"\(steps \[3\]; newest: ValueError: it holds state.step=3, not 4\)"):
    checkpoint.restore_newest(manager, jax.eval_shape(_state), check=reject)
  assert manager.all_steps() == [3]  # Nothing is deleted when nothing restores.
  manager.close()


def test_save_rejects_a_float_step_and_keep_accepts_numpy_ints(tmp_path):
  manager = checkpoint.make_manager(tmp_path, keep=np.int64(2))
  with pytest.raises(ValueError, match=r"step must be an int >= 0, got 3.5"):
    checkpoint.save(manager, 3.5, _state())  # Before: filed silently as step 3.
  manager.close()
