"""Tests of common/train (the package): the loop, resuming, checkpoint safety, metrics, NaN guard,
and the gradient-free path (zeroth-order estimators) and SGLD through the same loop.

Every run here is the same small MLP regression with adam (or MeZO for the
gradient-free runs), so they can be compared: bit for bit where the same compiled
program is replayed (a resume), to float32 summation order where the programs differ
(K updates per call, 8 devices). Run as a script (`python tests/common/test_train.py
OUT.npz WORKDIR`), this file trains that run and saves its final parameters: the
8-device test does so in a subprocess with 8 fake CPU devices.
"""

import os
import shutil
import subprocess
import sys
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common import checkpoint, metrics, sharding
from common import train as train_lib
from common.data.regression import regression_batch
from common.models import MLP
from common.train import (NonFiniteError, default_train_config, init_train_state, train,
                          train_step)
import methods.zeroth_order as zo
from methods.susceptibility.sgld import sgld

NUM_STEPS, BATCH, DIM = 10, 16, 4
ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"  # What orbax 0.12 appends while writing.
MODEL = MLP((16, 1))
OPTIMIZER = optax.adam(3e-2)  # One object: runs reuse the compiled step.


def loss_fn(params, batch, key):
  del key
  err = MODEL.apply(params, batch["x"]) - batch["y"]
  return jnp.mean(err ** 2), {"mae": jnp.mean(jnp.abs(err))}


def init_fn(key):
  return MODEL.init(key, jnp.zeros((1, DIM)))


def batch_fn(seed, step):
  return regression_batch(seed, step, BATCH, DIM)


def make_config(**overrides):
  config = default_train_config()
  config.num_steps = NUM_STEPS
  config.batch_size = BATCH
  config.checkpoint_every = 4
  config.keep_checkpoints = 2
  config.log_every = 3
  config.progress_bar = False
  config.update(overrides)
  return config


def run(workdir, *, loss=loss_fn, batches=batch_fn, **overrides):
  return train(init_fn=init_fn, loss_fn=loss, batch_fn=batches,
               optimizer=OPTIMIZER, config=make_config(**overrides),
               workdir=workdir)


def zo_value(params, batch):
  return loss_fn(params, batch, None)[0]


def make_zo_optimizer(value=zo_value):
  """MeZO (two-sided, its own base key) followed by SGD."""
  return optax.chain(zo.mezo(value, 1e-2, key=jax.random.PRNGKey(1)), optax.sgd(1e-2))


ZO_OPTIMIZER = make_zo_optimizer()  # One object: gradient-free runs reuse the compiled step.


def run_zo(workdir, *, optimizer=ZO_OPTIMIZER, batches=batch_fn, **overrides):
  return train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batches, optimizer=optimizer,
               config=make_config(**overrides), workdir=workdir, gradient_free=True)


def steps_on_disk(workdir):
  """The entries of workdir/checkpoints (the run record lives beside it)."""
  return sorted(os.listdir(os.path.join(workdir, "checkpoints")))


def assert_same_state(got, want):
  """Bit for bit: for the same compiled program replayed (a resume, a rerun)."""
  assert int(got.step) == int(want.step)
  for a, b in zip(jax.tree.leaves((got.params, got.opt_state)),
                  jax.tree.leaves((want.params, want.opt_state))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# Runs through different compiled programs (K updates per call as a lax.scan against one
# per call) agree up to the order of float32 sums: XLA:CPU vectorises a fused reduction
# to the host's instruction set, and on some CPUs the two programs sum in different
# orders (issue 52: the update norm moved by 6e-8 under --xla_cpu_max_isa=AVX).
F32_RTOL = 1e-6


def assert_close_state(got, want):
  """Equal steps; every float leaf of the state within F32_RTOL (integers exactly)."""
  assert int(got.step) == int(want.step)
  chex.assert_trees_all_close(got, want, rtol=F32_RTOL, atol=0)


def assert_close_history(got, want):
  """The same logged steps and metric names; each value within F32_RTOL."""
  assert [sorted(h) for h in got] == [sorted(h) for h in want]
  for g, w in zip(got, want):
    assert g["step"] == w["step"]
    np.testing.assert_allclose([g[k] for k in sorted(g)], [w[k] for k in sorted(g)],
                               rtol=F32_RTOL, atol=0, err_msg=f"step {g['step']}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted 10-step run; loss_fn counts its traces and is chex-guarded."""
  workdir = tmp_path_factory.mktemp("reference")
  traces = []

  def counted_loss(params, batch, key):
    traces.append(1)
    return loss_fn(params, batch, key)

  chex.clear_trace_counter()
  result = run(workdir, loss=chex.assert_max_traces(counted_loss, n=1))
  return workdir, result, len(traces)


def test_trains_and_compiles_the_step_once(reference):
  _, result, num_traces = reference
  assert int(result.state.step) == NUM_STEPS
  assert num_traces == 1
  assert result.history[-1]["loss"] < 0.5 * result.history[0]["loss"]
  assert [h["step"] for h in result.history] == [0, 3, 6, 9]
  assert list(result.history[0]) == ["step", "loss", "grad_norm", "mae"]


def test_state_is_replicated_over_the_mesh(reference):
  _, result, _ = reference
  for leaf in jax.tree.leaves(result.state):
    assert leaf.sharding.is_fully_replicated
    assert leaf.sharding.mesh.axis_names == ("data",)


def test_step_donates_state_and_traces_once():
  mesh = sharding.make_mesh()
  key = jax.random.PRNGKey(0)
  state = init_train_state(key, init_fn=init_fn, optimizer=OPTIMIZER, mesh=mesh)
  chex.clear_trace_counter()
  guarded_loss = chex.assert_max_traces(loss_fn, n=1)
  for step in range(3):
    old = state
    batch = sharding.shard_batch(batch_fn(0, step), mesh)
    state, step_metrics, finite = train_step(state, batch, key, loss_fn=guarded_loss,
                                             optimizer=OPTIMIZER, mesh=mesh)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(old))  # Donated.
  assert int(state.step) == 3 and bool(finite)
  assert set(step_metrics) == {"loss", "grad_norm", "mae"}


def test_unhashable_loss_fn_still_compiles_once(tmp_path):
  class Loss:  # Defines __eq__ without __hash__, so it cannot be a static argument.
    def __init__(self):
      self.calls = 0

    def __eq__(self, other):
      return self is other

    def __call__(self, params, batch, key):
      self.calls += 1
      return loss_fn(params, batch, key)

  loss = Loss()
  result = run(tmp_path, loss=loss, num_steps=3)
  assert int(result.state.step) == 3 and loss.calls == 1


def test_progress_bar_shows_live_loss(tmp_path, capsys):
  run(tmp_path / "quiet", num_steps=2)
  assert "loss=" not in capsys.readouterr().err
  run(tmp_path / "bar", num_steps=2, progress_bar=True)
  err = capsys.readouterr().err
  assert "2/2" in err and "loss=" in err


def test_writes_metrics_and_keeps_checkpoints(reference, tensorboard_scalars):
  workdir, result, _ = reference
  records = metrics.read_metrics_jsonl(workdir)
  assert records == result.history
  scalars = tensorboard_scalars(workdir)
  assert [(s, t) for s, t, _ in scalars if t == "loss"] == [(0, "loss"), (3, "loss"),
                                                            (6, "loss"), (9, "loss")]
  losses = [v for _, t, v in scalars if t == "loss"]
  np.testing.assert_allclose(losses, [h["loss"] for h in result.history], rtol=1e-6)
  # Saved at 4, 8 and the end (10); keep_checkpoints=2 retains the newest two.
  assert steps_on_disk(workdir) == ["10", "8"]


def test_resumed_run_matches_uninterrupted_bitwise(reference, tmp_path):
  _, want, _ = reference
  first = run(tmp_path, num_steps=6)  # Stops after 6 updates, checkpoint at 6.
  assert int(first.state.step) == 6
  second = run(tmp_path)
  assert [h["step"] for h in second.history] == [6, 9]
  assert_same_state(second.state, want.state)
  # JSONL has each step once; the resumed run appended after the checkpoint.
  assert [r["step"] for r in metrics.read_metrics_jsonl(tmp_path)] == [0, 3, 5, 6, 9]
  # Rerunning a finished workdir trains nothing and returns the same state.
  again = run(tmp_path)
  assert again.history == []
  assert_same_state(again.state, want.state)


def test_interrupt_checkpoints_then_resumes_bitwise(reference, tmp_path):
  _, want, _ = reference

  def interrupted_batches(seed, step):
    if step == 7:
      raise KeyboardInterrupt  # Arrives after update 6, while fetching batch 7.
    return batch_fn(seed, step)

  with pytest.raises(KeyboardInterrupt):
    run(tmp_path, batches=interrupted_batches)
  assert steps_on_disk(tmp_path) == ["4", "7"]  # 7 saved on exit.
  resumed = run(tmp_path, log_every=1)
  assert resumed.history[0]["step"] == 7
  assert_same_state(resumed.state, want.state)


def test_kill_during_checkpoint_write_keeps_previous(reference, tmp_path):
  _, want, _ = reference
  run(tmp_path, num_steps=4)
  ckpt = tmp_path / "checkpoints"
  # Leave step 8 the way a kill mid-write does: orbax's tmp dir (named
  # "<step>.orbax-checkpoint-tmp", its item dir likewise), no commit marker yet,
  # and a truncated file. The finished directory "8" never appeared.
  partial = ckpt / f"8{ORBAX_TMP_SUFFIX}"
  shutil.copytree(ckpt / "4", partial)
  os.rename(partial / "default", partial / f"default{ORBAX_TMP_SUFFIX}")
  os.remove(partial / "commit_success.txt")
  os.remove(partial / f"default{ORBAX_TMP_SUFFIX}" / "commit_success.txt")
  with open(partial / f"default{ORBAX_TMP_SUFFIX}" / "manifest.ocdbt", "r+b") as f:
    f.truncate(5)
  resumed = run(tmp_path, log_every=1)
  assert resumed.history[0]["step"] == 4  # Resumed from 4, not from the partial 8.
  assert_same_state(resumed.state, want.state)
  assert steps_on_disk(tmp_path) == ["10", "8"]


def _nan_at(bad_step):
  def batches(seed, step):
    batch = batch_fn(seed, step)
    if step >= bad_step:
      batch = {**batch, "y": batch["y"] * jnp.nan}
    return batch
  return batches


def test_nan_guard_names_step_and_metric_and_does_not_save(tmp_path):
  with pytest.raises(FloatingPointError, match="non-finite loss=nan at step 3") as info:
    run(tmp_path, batches=_nan_at(3), checkpoint_every=2)
  assert isinstance(info.value, NonFiniteError) and info.value.step == 3
  # Update 3 would have produced checkpoint 4; only 2 exists and it restores.
  manager = checkpoint.make_manager(tmp_path / "checkpoints", keep=2)
  assert manager.all_steps() == [2]
  manager.close()


def test_nan_guard_catches_a_non_finite_metric(tmp_path):
  def loss_with_ratio(params, batch, key):
    loss, aux = loss_fn(params, batch, key)
    return loss, {**aux, "ratio": 1.0 / (5.0 - batch["flag"][0])}

  def batches(seed, step):
    return {**batch_fn(seed, step), "flag": jnp.full((BATCH,), float(step))}

  with pytest.raises(NonFiniteError, match="non-finite ratio=inf at step 5"):
    run(tmp_path, loss=loss_with_ratio, batches=batches)


def test_nan_guard_catches_a_state_that_goes_non_finite_with_finite_metrics(tmp_path):
  """An optimizer whose last update is NaN: every loss and gradient stays finite, so only
  the state check at the final log/checkpoint step can see it, and nothing is saved."""
  def nan_from(bad_step):
    def update(updates, state, params=None):
      del params
      bad = state >= bad_step
      return jax.tree.map(lambda u: jnp.where(bad, jnp.nan, u), updates), state + 1
    return optax.chain(optax.sgd(1e-2),
                       optax.GradientTransformation(lambda p: jnp.int32(0), update))

  config = make_config(num_steps=6, checkpoint_every=0, log_every=100)
  with pytest.raises(NonFiniteError, match="non-finite state=nan at step 5") as info:
    train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=nan_from(5),
          config=config, workdir=tmp_path)
  assert info.value.name == "state"
  manager = checkpoint.make_manager(tmp_path / "checkpoints", keep=2)
  assert manager.all_steps() == []
  manager.close()


def test_without_guard_a_non_finite_state_is_never_saved(tmp_path):
  result = run(tmp_path, batches=_nan_at(3), checkpoint_every=2, nan_guard=False,
               num_steps=6)
  assert np.isnan(result.history[-1]["loss"])
  manager = checkpoint.make_manager(tmp_path / "checkpoints", keep=2)
  assert manager.all_steps() == [2]  # 4 and 6 hold NaN parameters.
  manager.close()


@pytest.mark.parametrize("key, value, match", [
    ("num_steps", 0, "config.num_steps must be an int >= 1, got 0"),
    ("batch_size", -4, "config.batch_size must be an int >= 1, got -4"),
    ("log_every", 0, "config.log_every must be an int >= 1, got 0"),
    ("keep_checkpoints", 0, "config.keep_checkpoints must be an int >= 1, got 0"),
    ("checkpoint_every", -1, "config.checkpoint_every must be an int >= 0, got -1"),
    ("nan_guard", 1, "config.nan_guard must be a bool, got 1"),
    ("steps_per_call", 0, "config.steps_per_call must be an int >= 1, got 0"),
    ("compiler_options", "fast=1", r"'fast=1' in 'fast=1' is not 'name=value' with an XLA"),
    ("compiler_options", "xla_cpu_x", r"'xla_cpu_x' in 'xla_cpu_x' is not 'name=value'"),
    ("compiler_options", 3, r"config.compiler_options must be a string 'name=value,...', got 3"),
])
def test_invalid_config_is_rejected_before_any_work(tmp_path, key, value, match):
  config = dict(make_config().items())  # A plain dict: ConfigDict would refuse 1 for a bool.
  config[key] = value
  with pytest.raises(ValueError, match=match):
    train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=OPTIMIZER,
          config=config, workdir=tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_config_defaults_and_bad_arguments(tmp_path):
  config = default_train_config()
  assert config.distributed is False and config.nan_guard is True
  assert config.steps_per_call == 1 and config.compiler_options == ""
  with pytest.raises(AttributeError):
    config.num_step = 5  # Locked: a misspelt key fails.
  with pytest.raises(ValueError, match="missing key 'seed'"):
    train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=optax.sgd(0.1),
          config={k: v for k, v in make_config().items() if k != "seed"}, workdir=tmp_path)
  with pytest.raises(TypeError, match="optimizer must be an optax.GradientTransformation"):
    train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer="adam",
          config=make_config(), workdir=tmp_path)
  with pytest.raises(ValueError, match=r"leading size config.batch_size=16"):
    run(tmp_path / "wrong_batch", batches=lambda seed, step: regression_batch(seed, step, 8, DIM))


@pytest.fixture(scope="module")
def zo_reference(tmp_path_factory):
  """An uninterrupted 10-step MeZO run; its loss function counts its calls."""
  calls = []

  def counted(params, batch):
    calls.append(1)
    return zo_value(params, batch)

  result = run_zo(tmp_path_factory.mktemp("zo_reference"), optimizer=make_zo_optimizer(counted))
  return result, len(calls)


def _flat(tree):
  return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


def test_zeroth_order_run_matches_a_hand_written_loop_and_traces_once(zo_reference):
  result, calls = zo_reference
  assert calls == 2  # One trace of the two-sided estimate: L(theta + eps z), L(theta - eps z).
  tx = make_zo_optimizer()
  params = init_fn(jax.random.split(jax.random.PRNGKey(0))[0])  # The loop's init key.
  state, step, losses = tx.init(params), zo.make_step(tx), []
  for s in range(NUM_STEPS):
    params, state = step(params, state, batch_fn(0, s))
    losses.append(float(zo.find_zo_state(state).loss))
  assert int(result.state.step) == NUM_STEPS
  assert int(zo.find_zo_state(result.state.opt_state).step) == NUM_STEPS
  for got, want in zip(_flat(result.state.params), _flat(params)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert [h["step"] for h in result.history] == [0, 3, 6, 9]
  assert list(result.history[0]) == ["step", "loss", "update_norm"]
  np.testing.assert_allclose([h["loss"] for h in result.history],
                             [losses[s] for s in (0, 3, 6, 9)], rtol=1e-6)


def test_zeroth_order_run_resumes_bitwise_after_a_kill(zo_reference, tmp_path):
  want, _ = zo_reference

  def interrupted_batches(seed, step):
    if step == 7:
      raise KeyboardInterrupt  # Arrives after update 6, while fetching batch 7.
    return batch_fn(seed, step)

  assert int(run_zo(tmp_path, num_steps=6).state.step) == 6
  with pytest.raises(KeyboardInterrupt):
    run_zo(tmp_path, batches=interrupted_batches)
  assert steps_on_disk(tmp_path) == ["6", "7"]  # 7 saved on exit.
  resumed = run_zo(tmp_path)
  assert [h["step"] for h in resumed.history] == [9]
  assert_same_state(resumed.state, want.state)
  # Step 6 was never logged: the interrupt came while fetching batch 7, before its log.
  assert [r["step"] for r in metrics.read_metrics_jsonl(tmp_path)] == [0, 3, 5, 9]


def test_zeroth_order_run_stops_at_a_non_finite_loss(tmp_path):
  with pytest.raises(NonFiniteError, match="non-finite loss=nan at step 3"):
    run_zo(tmp_path, batches=_nan_at(3), checkpoint_every=2)
  manager = checkpoint.make_manager(tmp_path / "checkpoints", keep=2)
  assert manager.all_steps() == [2]
  manager.close()


class _Probe(NamedTuple):
  loss: jax.Array
  key: jax.Array


def _probe():
  """A gradient-free transformation that only measures: zero updates; its state holds
  the loop loss_fn's value and the key the loop passed at the last step."""
  def init(params):
    del params
    return _Probe(jnp.zeros(()), jnp.zeros((2,), jnp.uint32))

  def update(updates, state, params=None, *, loss_fn, batch, key):
    del updates, state
    return optax.tree.zeros_like(params), _Probe(loss_fn(params, batch, key)[0], key)

  return optax.GradientTransformationExtraArgs(init, update)


def test_gradient_free_update_gets_the_loss_batch_and_step_key(tmp_path):
  result = run_zo(tmp_path / "probe", optimizer=_probe(), num_steps=4, log_every=1)
  init_key, step_key = jax.random.split(jax.random.PRNGKey(0))
  params = init_fn(init_key)
  want = [float(loss_fn(params, batch_fn(0, s), None)[0]) for s in range(4)]
  np.testing.assert_allclose([h["loss"] for h in result.history], want, rtol=1e-6)
  assert all(h["update_norm"] == 0.0 for h in result.history)
  np.testing.assert_array_equal(result.state.opt_state.key, jax.random.fold_in(step_key, 3))
  with pytest.raises(TypeError, match="under the name 'loss'"):
    run_zo(tmp_path / "sgd", optimizer=optax.sgd(0.1), num_steps=1)


def test_sgld_runs_through_the_loop_like_a_hand_written_chain(tmp_path):
  sampler = sgld(1e-3, n_beta=16.0, localization=1.0, key=jax.random.PRNGKey(2))
  result = train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=sampler,
                 config=make_config(num_steps=5), workdir=tmp_path)
  @jax.jit
  def step(params, state, batch):
    updates, state = sampler.update(jax.grad(zo_value)(params, batch), state, params)
    return optax.apply_updates(params, updates), state

  params = init_fn(jax.random.split(jax.random.PRNGKey(0))[0])
  state = sampler.init(params)
  for s in range(5):
    params, state = step(params, state, batch_fn(0, s))
  assert int(result.state.opt_state.count) == 5
  for got, want in zip(_flat(result.state.params), _flat(params)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _train_and_save(out_path, workdir):
  if jax.device_count() == 8:
    try:
      run(os.path.join(workdir, "indivisible"), batch_size=12)
    except ValueError as e:
      assert "batch_size=12 is not divisible by the 8 devices" in str(e), e
    else:
      raise AssertionError("a batch of 12 on 8 devices was accepted")
  result = run(workdir)
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(result.state.params)}
  k_result = run(os.path.join(workdir, "k4"), steps_per_call=4)  # Stacked batches on the mesh.
  flat.update({"k4" + jax.tree_util.keystr(path): np.asarray(leaf)
               for path, leaf in jax.tree_util.tree_leaves_with_path(k_result.state.params)})
  zo_result = run_zo(os.path.join(workdir, "zo"))  # The gradient-free path on the mesh.
  flat.update({"zo" + jax.tree_util.keystr(path): np.asarray(leaf)
               for path, leaf in jax.tree_util.tree_leaves_with_path(zo_result.state.params)})
  np.savez(out_path, device_count=jax.device_count(),
           mesh_size=result.state.step.sharding.mesh.size,
           losses=np.array([h["loss"] for h in result.history]), **flat)


def test_eight_fake_devices_match_one_device(reference, zo_reference, tmp_path):
  _, want, _ = reference
  out = tmp_path / "params.npz"
  # The script imports this checkout's packages (not an installed copy's): the repo root first.
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  # After the caller's XLA_FLAGS, so that an ISA cap reaches the child too.
  xla_flags = (f"{os.environ.get('XLA_FLAGS', '')} "
               f"--xla_force_host_platform_device_count=8").strip()
  env = dict(os.environ, XLA_FLAGS=xla_flags,
             JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(out),
                         str(tmp_path / "run")], env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = np.load(out)
  assert int(got["device_count"]) == 8 and int(got["mesh_size"]) == 8
  assert got["losses"][-1] < 0.5 * got["losses"][0]
  for path, leaf in jax.tree_util.tree_leaves_with_path(want.state.params):
    np.testing.assert_allclose(got[jax.tree_util.keystr(path)], leaf, rtol=1e-5, atol=1e-6)
    # 4 steps per call on the 8 devices: the 1-step run on them, up to summation order.
    np.testing.assert_allclose(got["k4" + jax.tree_util.keystr(path)],
                               got[jax.tree_util.keystr(path)], rtol=F32_RTOL, atol=0)
  # The estimate divides loss differences by 2 eps, so summation order across the
  # shards shows up more than in the gradient run.
  for path, leaf in jax.tree_util.tree_leaves_with_path(zo_reference[0].state.params):
    np.testing.assert_allclose(got["zo" + jax.tree_util.keystr(path)], leaf, rtol=1e-5,
                               atol=1e-5)


# ----------------------------------------------------------------------------- faults
def test_changed_config_on_resume_is_a_one_line_error(tmp_path):
  run(tmp_path, num_steps=4)
  changed_lr = dict(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn,
                    optimizer=optax.adam(1e-2), config=make_config(num_steps=4),
                    workdir=tmp_path)
  with pytest.raises(ValueError, match=r"different training run \(the optimizer .*"
                     r"use a new workdir, or train\(\.\.\., overwrite=True\)") as info:
    train(**changed_lr)  # Before: history=[] and the lr-3e-2 parameters, silently.
  assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
  with pytest.raises(ValueError, match=r"config\.seed: 0 -> 1"):
    run(tmp_path, num_steps=4, seed=1)
  wider = MLP((32, 1))  # Before: a 70-line orbax shape error.
  with pytest.raises(ValueError, match=r"params tree: params\['params'\]\['dense_0'\]"
                     r"\['bias'\] float32\[16\] -> float32\[32\]") as info:
    train(init_fn=lambda key: wider.init(key, jnp.zeros((1, DIM))),
          loss_fn=lambda p, b, k: (jnp.mean((wider.apply(p, b["x"]) - b["y"]) ** 2), {}),
          batch_fn=batch_fn, optimizer=OPTIMIZER, config=make_config(num_steps=4),
          workdir=tmp_path)
  assert "\n" not in str(info.value)
  # overwrite=True discards the old run: the new one equals a fresh run elsewhere.
  fresh = train(**{**changed_lr, "workdir": tmp_path / "fresh"})
  again = train(**changed_lr, overwrite=True)
  assert [h["step"] for h in again.history] == [0, 3]
  assert_same_state(again.state, fresh.state)
  assert [r["step"] for r in metrics.read_metrics_jsonl(tmp_path)] == [0, 3]


def test_fewer_steps_than_done_is_a_mismatch_and_more_steps_extend(reference, tmp_path):
  _, want, _ = reference
  run(tmp_path, num_steps=6)
  with pytest.raises(ValueError, match=r"config.num_steps=4 is below the newest "
                     r"checkpoint's step 6"):
    run(tmp_path, num_steps=4)  # Before: the 6-step parameters, silently.
  # Raising num_steps extends the run; logging, checkpointing and guard keys may change.
  extended = run(tmp_path, log_every=2, checkpoint_every=5, keep_checkpoints=3,
                 nan_guard=False)
  assert [h["step"] for h in extended.history] == [6, 8, 9]
  assert_same_state(extended.state, want.state)
  assert_same_state(run(tmp_path).state, want.state)  # Finished: same config, same state.


def test_checkpoints_without_a_run_record_resume_with_a_warning(reference, tmp_path, caplog):
  _, want, _ = reference
  run(tmp_path, num_steps=6)
  os.remove(tmp_path / "checkpoints.json")  # As written before the record existed.
  caplog.set_level("WARNING")
  assert_same_state(run(tmp_path).state, want.state)
  assert any("no readable" in r.getMessage() for r in caplog.records)
  with pytest.raises(ValueError, match=r"config\.seed: 0 -> 2"):  # Adopted: checked from now on.
    run(tmp_path, seed=2)


def _damage(path, how):
  if how == "truncate":
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)
  elif how == "delete":
    os.remove(path)
  elif how == "bitflip":
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    with open(path, "wb") as f:
      f.write(bytes(data))
  else:  # "empty": the step directory of a save killed on a non-atomic filesystem
    shutil.rmtree(path)
    os.makedirs(path)


def _data_file(step_dir):
  data = os.path.join(step_dir, "default", "d")
  return os.path.join(data, sorted(os.listdir(data))[0])


@pytest.mark.parametrize("how, which", [
    ("truncate", "data"), ("delete", "data"), ("bitflip", "data"),
    ("delete", "_METADATA"), ("empty", "item"),
])
def test_damaged_newest_checkpoint_falls_back_to_the_previous(reference, tmp_path, caplog,
                                                              how, which):
  _, want, _ = reference
  run(tmp_path, num_steps=8)  # Checkpoints 4 and 8.
  step_dir = str(tmp_path / "checkpoints" / "8")
  _damage({"data": _data_file(step_dir), "_METADATA": os.path.join(step_dir, "default",
                                                                    "_METADATA"),
           "item": os.path.join(step_dir, "default")}[which], how)
  caplog.set_level("WARNING")
  resumed = run(tmp_path, log_every=1)  # Before: a 69-110-line tensorstore traceback.
  assert resumed.history[0]["step"] == 4
  assert_same_state(resumed.state, want.state)
  skipped = [r.getMessage() for r in caplog.records if "Skipping checkpoint" in r.getMessage()]
  assert len(skipped) == 1 and "step 8" in skipped[0] and "\n" not in skipped[0]
  assert steps_on_disk(tmp_path) == ["10", "8"]  # 8 was written again.


def test_no_checkpoint_restores_is_one_line_naming_the_workdir(tmp_path):
  run(tmp_path, num_steps=8)
  for step in ("4", "8"):
    _damage(_data_file(str(tmp_path / "checkpoints" / step)), "bitflip")
  with pytest.raises(ValueError, match=r"no checkpoint in .*checkpoints restores \(steps "
                     r"\[8, 4\]; .*overwrite=True") as info:
    run(tmp_path)
  assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
  fresh = train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=OPTIMIZER,
                config=make_config(), workdir=tmp_path, overwrite=True)
  assert int(fresh.state.step) == NUM_STEPS


def test_bad_workdir_fails_before_any_work(tmp_path):
  calls = []

  def counted_init(key):
    calls.append(1)
    return init_fn(key)

  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  for workdir, match in [(a_file, r"workdir '.*a_file' is a file; expected a directory"),
                         (a_file / "sub", r"workdir '.*sub' is not a writable directory"),
                         ("/proc/x", r"workdir '/proc/x' is not a writable directory"),
                         ("", r"workdir must be a non-empty path")]:
    with pytest.raises(ValueError, match=match) as info:
      train(init_fn=counted_init, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=OPTIMIZER,
            config=make_config(), workdir=workdir)
    assert "\n" not in str(info.value)
  assert calls == []


def test_optimizer_fingerprint_sees_hyperparameters_not_mutable_state():
  from common.train import _summary
  calls = []

  def value(params, batch):
    calls.append(1)
    return 0.0

  def fp(tx):
    return _summary((tx.init, tx.update))

  assert fp(optax.adam(1e-3)) == fp(optax.adam(1e-3))
  assert fp(optax.adam(1e-3)) != fp(optax.adam(2e-3))
  assert fp(optax.adam(1e-3)) != fp(optax.sgd(1e-3))
  assert fp(optax.adam(optax.cosine_decay_schedule(1e-3, 100))) != fp(
      optax.adam(optax.cosine_decay_schedule(1e-3, 200)))
  zo_tx = make_zo_optimizer(value)
  before = fp(zo_tx)
  calls.extend([1, 1])  # A list the loss appends to does not change what it computes.
  assert fp(zo_tx) == before


if __name__ == "__main__":
  _train_and_save(sys.argv[1], sys.argv[2])


# ----------------------------------------------------------------------------- carry


class Stats(NamedTuple):
  """A batch function's running statistics: an EMA of the targets' mean and a count."""
  ema: jax.Array
  count: jax.Array


STATS0 = Stats(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))


def carrying_batches(seed, step, stats):
  """Targets shifted by the running EMA, so the batches depend on the whole history."""
  batch = batch_fn(seed, step)
  y = np.asarray(batch["y"]) + float(stats.ema)
  ema = 0.9 * stats.ema + 0.1 * jnp.mean(y)
  return {**batch, "y": y}, Stats(ema.astype(jnp.float32), stats.count + 1)


def run_carry(workdir, *, batches=carrying_batches, carry=STATS0, **overrides):
  return train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batches, optimizer=OPTIMIZER,
               config=make_config(**overrides), workdir=workdir, carry=carry)


def test_carry_is_threaded_checkpointed_and_resumed_bitwise(tmp_path):
  want = run_carry(tmp_path / "whole")
  assert int(want.state.carry.count) == NUM_STEPS
  # The carry's batches are not the carry-free ones: the EMA really shifts the targets.
  assert float(want.state.carry.ema) != 0.0

  def interrupted(seed, step, stats):
    if step == 7:
      raise KeyboardInterrupt
    return carrying_batches(seed, step, stats)

  with pytest.raises(KeyboardInterrupt):
    run_carry(tmp_path / "killed", batches=interrupted)
  restored = checkpoint.restore(
      checkpoint.make_manager(tmp_path / "killed" / "checkpoints", keep=2), 7,
      jax.eval_shape(lambda: want.state))
  assert int(restored.carry.count) == 7  # The carry the batch of update 7 is made from.
  resumed = run_carry(tmp_path / "killed")
  chex.assert_trees_all_equal(resumed.state, want.state)


def test_carry_mismatches_are_one_line_errors(tmp_path):
  run_carry(tmp_path / "a", num_steps=2)
  with pytest.raises(ValueError, match=r"carry tree: carry\.ema float32\[\] -> float32\[2\]"):
    run_carry(tmp_path / "a", carry=Stats(jnp.zeros(2, jnp.float32), STATS0.count))
  run(tmp_path / "b", num_steps=2)
  with pytest.raises(ValueError, match="different training run"):
    run_carry(tmp_path / "b", num_steps=4)  # A carry-free run's checkpoints.
  with pytest.raises(TypeError, match=r"must return \(batch, carry\)"):
    run_carry(tmp_path / "c", batches=lambda seed, step, stats: batch_fn(seed, step))
  with pytest.raises(ValueError, match="carry of another structure"):
    run_carry(tmp_path / "d", batches=lambda seed, step, stats: (batch_fn(seed, step),
                                                                   (stats.ema,)))
  with pytest.raises(TypeError, match=r"carry\.ema must be an array or number, got str"):
    run_carry(tmp_path / "e", carry=Stats("x", 0))


# ----------------------------------------------------------------------------- steps_per_call
# 23 updates, logs at steps 0, 10, 20, 22 and checkpoints at 8, 16, 23: with K = 4 the
# calls are [0, 1), [1, 5), [5, 8), [8, 11), [11, 15), [15, 16), [16, 20), [20, 21),
# [21, 23) (a call ends at a log step, a checkpoint step and num_steps).
K_STEPS = 23
K_CALLS = {1: [1] * K_STEPS, 3: [1, 3, 3, 1, 3, 3, 2, 3, 2, 2],
           4: [1, 4, 3, 3, 4, 1, 4, 1, 2]}


def k_config(k, **overrides):
  return {"num_steps": K_STEPS, "log_every": 10, "checkpoint_every": 8, "keep_checkpoints": 3,
          "steps_per_call": k, **overrides}


def run_k(workdir, k, **overrides):
  return run(workdir, **k_config(k, **overrides))


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
  """The uninterrupted 23-step run, one update per call."""
  return run_k(tmp_path_factory.mktemp("one_step"), 1)


@pytest.mark.parametrize("k", [1, 3, 4])
def test_k_steps_per_call_equal_one_step_per_call(one_step, tmp_path, monkeypatch, k):
  calls, traces = [], []
  real = train_lib._train_steps

  def recorded(state, guard, batches, key, **kwargs):
    calls.append(jax.tree.leaves(batches)[0].shape[0])
    assert isinstance(batches["x"], np.ndarray)  # jit places it (`_compiled_steps`).
    return real(state, guard, batches, key, **kwargs)

  def counted_loss(params, batch, key):
    traces.append(1)
    return loss_fn(params, batch, key)

  monkeypatch.setattr(train_lib, "_train_steps", recorded)
  got = run_k(tmp_path, k, loss=counted_loss)
  assert calls == K_CALLS[k]
  assert len(traces) == len(set(calls))  # Compiled once per call length.
  assert [h["step"] for h in got.history] == [0, 10, 20, 22]
  assert metrics.read_metrics_jsonl(tmp_path) == got.history
  if k == 1:  # The same compiled program: bit for bit.
    assert got.history == one_step.history
    assert_same_state(got.state, one_step.state)
  else:  # A lax.scan of K updates: equal up to summation order.
    assert_close_history(got.history, one_step.history)
    assert_close_state(got.state, one_step.state)
  assert steps_on_disk(tmp_path) == ["16", "23", "8"]
  restored = checkpoint.restore(checkpoint.make_manager(tmp_path / "checkpoints", keep=3), 16,
                                jax.eval_shape(lambda: got.state))
  assert int(restored.step) == 16


def test_compiler_options_reach_xla_and_resume_with_other_options(one_step, tmp_path):
  assert train_lib.compiler_options({"compiler_options": " xla_a=1, xla_b= ,xla_c=False"}) == (
      ("xla_a", 1), ("xla_b", ""), ("xla_c", False))
  # An option XLA does not know fails its compilation: the options reach XLA.
  with pytest.raises(Exception, match="xla_no_such_option"):
    run_k(tmp_path / "unknown", 1, compiler_options="xla_no_such_option=1")
  # A real one (XLA:CPU's thread pool for its dots) compiles and trains; the options are
  # bookkeeping: a run checkpointed with them resumes without them.
  run_k(tmp_path / "run", 1, num_steps=16, compiler_options="xla_cpu_multi_thread_eigen=false")
  got = run_k(tmp_path / "run", 1)
  np.testing.assert_allclose(got.history[-1]["loss"], one_step.history[-1]["loss"], rtol=1e-5)


def test_k_step_runs_resume_after_an_extension_or_an_interrupt(one_step, tmp_path):
  # Extended: 13 updates 4 per call, then on to 23 with 3 per call (K may change).
  first = run_k(tmp_path / "extended", 4, num_steps=13)
  assert steps_on_disk(tmp_path / "extended") == ["13", "8"]
  second = run_k(tmp_path / "extended", 3)
  assert_close_state(second.state, one_step.state)
  logged = [h for h in first.history + second.history if h["step"] != 12]
  assert_close_history(logged, one_step.history)  # Step 12 ended the 13-step run.

  def interrupted(seed, step):
    if step == 13:
      raise KeyboardInterrupt  # While making the batches of the call [11, 15).
    return batch_fn(seed, step)

  with pytest.raises(KeyboardInterrupt):
    run_k(tmp_path / "killed", 4, batches=interrupted)
  assert steps_on_disk(tmp_path / "killed") == ["11", "8"]  # 11 saved on exit.
  resumed = run_k(tmp_path / "killed", 4)
  assert [h["step"] for h in resumed.history] == [20, 22]
  assert_same_state(resumed.state, run_k(tmp_path / "whole", 4).state)  # Same program.
  assert_close_state(resumed.state, one_step.state)


def test_k_step_nan_guard_names_the_first_bad_step_and_rolls_back(one_step, tmp_path):
  with pytest.raises(NonFiniteError, match=r"non-finite loss=nan at step 13; .*the last "
                     r"good state is checkpoint 8, where a rerun resumes") as info:
    run_k(tmp_path, 4, batches=_nan_at(13))  # In the call [11, 15), read at 16.
  assert info.value.step == 13 and info.value.last_good_step == 8
  assert "\n" not in str(info.value)
  assert steps_on_disk(tmp_path) == ["8"]  # 16 (after the NaN) was not saved.
  resumed = run_k(tmp_path, 4)  # Fixed data: the rerun resumes from the last good state.
  assert resumed.history[0]["step"] == 10
  assert_close_state(resumed.state, one_step.state)  # K = 4 against K = 1.
  def nan_then_interrupt(seed, step):
    if step == 15:
      raise KeyboardInterrupt  # After the call [11, 15), before the guard is read at 16.
    return _nan_at(13)(seed, step)

  with pytest.raises(KeyboardInterrupt):
    run_k(tmp_path / "interrupted", 4, batches=nan_then_interrupt)
  assert steps_on_disk(tmp_path / "interrupted") == ["8"]  # 15 is not saved on exit.
  # Without the guard the run goes on and never saves a non-finite state.
  result = run_k(tmp_path / "off", 4, batches=_nan_at(13), nan_guard=False)
  assert np.isnan(result.history[-1]["loss"]) and steps_on_disk(tmp_path / "off") == ["8"]


def test_k_step_nan_guard_catches_a_metric_inside_a_call(tmp_path):
  def loss_with_ratio(params, batch, key):
    loss, aux = loss_fn(params, batch, key)
    return loss, {**aux, "ratio": 1.0 / (13.0 - batch["flag"][0])}

  def batches(seed, step):
    return {**batch_fn(seed, step), "flag": np.full((BATCH,), float(step), np.float32)}

  with pytest.raises(NonFiniteError, match="non-finite ratio=inf at step 13"):
    run_k(tmp_path / "guard", 4, loss=loss_with_ratio, batches=batches)
  assert steps_on_disk(tmp_path / "guard") == ["8"]

  def interrupted(seed, step):
    if step == 15:
      raise KeyboardInterrupt  # The state after [11, 15) is finite, but the guard tripped.
    return batches(seed, step)

  with pytest.raises(KeyboardInterrupt):
    run_k(tmp_path / "interrupted", 4, loss=loss_with_ratio, batches=interrupted)
  assert steps_on_disk(tmp_path / "interrupted") == ["8"]
  # Off: only the metric was infinite, so every checkpoint is saved.
  run_k(tmp_path / "off", 4, loss=loss_with_ratio, batches=batches, nan_guard=False)
  assert steps_on_disk(tmp_path / "off") == ["16", "23", "8"]


def test_k_step_gradient_free_and_carry_runs_equal_one_step_runs(tmp_path):
  zo_one = run_zo(tmp_path / "zo1", **k_config(1))
  zo_four = run_zo(tmp_path / "zo4", **k_config(4))
  assert_close_history(zo_four.history, zo_one.history)
  assert_close_state(zo_four.state, zo_one.state)
  carry_one = run_carry(tmp_path / "carry1", **k_config(1))
  carry_four = run_carry(tmp_path / "carry4", **k_config(4))
  assert int(carry_four.state.carry.count) == K_STEPS
  assert_close_history(carry_four.history, carry_one.history)
  assert_close_state(carry_four.state, carry_one.state)


def test_k_steps_with_on_policy_is_a_one_line_error_before_any_work(tmp_path):
  with pytest.raises(ValueError, match=r"config.steps_per_call=4 needs on_policy=False") as info:
    train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=lambda seed, step, params: None,
          optimizer=OPTIMIZER, config=make_config(steps_per_call=4),
          workdir=tmp_path / "run", on_policy=True)
  assert "\n" not in str(info.value) and not (tmp_path / "run").exists()


def test_all_finite_flags_any_nan_or_inf_and_never_overflows():
  big = jnp.full((1000,), 3e38, jnp.float32)  # sum(x) would overflow to inf.
  assert bool(train_lib._all_finite({"w": big, "step": jnp.int32(7)}))
  for bad in (jnp.nan, jnp.inf, -jnp.inf):
    tree = {"w": big, "b": jnp.zeros((3, 2), jnp.bfloat16).at[2, 1].set(bad)}
    assert not bool(jax.jit(train_lib._all_finite)(tree)), bad
  assert bool(train_lib._all_finite({"n": jnp.arange(3)}))  # no float leaves
