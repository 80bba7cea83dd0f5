"""Tests of common/sharding.py on this process's device(s) and on 8 fake CPU devices."""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from common import sharding
from common.train import default_train_config


def test_default_mesh_has_all_devices_on_data_axis():
  mesh = sharding.make_mesh()
  assert mesh.axis_names == ("data",)
  assert mesh.shape["data"] == jax.device_count()
  assert sharding.make_mesh((jax.device_count(),)).shape == mesh.shape


@pytest.mark.parametrize("shape, names, match", [
    ((jax.device_count() + 1,), ("data",), "needs .* devices, but .* are visible"),
    ((0,), ("data",), "positive sizes"),
    ((-1, -1), ("data", "model"), "at most one -1"),
    ((-1,), ("data", "model"), "has 1 axes but axis_names"),
    ((-1,), ("batch",), "must include 'data'"),
])
def test_make_mesh_rejects_bad_shapes(shape, names, match):
  with pytest.raises(ValueError, match=match):
    sharding.make_mesh(shape, names)


def test_shard_batch_places_global_arrays():
  mesh = sharding.make_mesh()
  n = 2 * jax.device_count()
  batch = {"x": np.arange(n * 3, dtype=np.float32).reshape(n, 3), "y": [np.arange(n)]}
  placed = sharding.shard_batch(batch, mesh)
  assert placed["x"].sharding == sharding.batch_sharding(mesh)
  np.testing.assert_array_equal(placed["x"], batch["x"])
  np.testing.assert_array_equal(placed["y"][0], batch["y"][0])
  assert sharding.replicated_sharding(mesh).is_fully_replicated


def test_shard_batch_splits_a_stack_of_batches_on_axis_1():
  mesh = sharding.make_mesh()
  n = 2 * jax.device_count()
  stack = np.arange(3 * n * 2, dtype=np.float32).reshape(3, n, 2)  # 3 batches of n.
  placed = sharding.shard_batch({"x": stack}, mesh, batch_axis=1)["x"]
  assert placed.sharding == sharding.batch_sharding(mesh, 1)
  assert placed.sharding.spec == jax.sharding.PartitionSpec(None, "data")
  np.testing.assert_array_equal(placed, stack)
  with pytest.raises(ValueError, match=r"leaf \['y'\] has size on axis 1: 3, but other"):
    sharding.shard_batch({"x": stack, "y": np.ones((3, 3))}, mesh, batch_axis=1)
  with pytest.raises(ValueError, match=r"leaf \['x'\] has shape \(4,\), no batch axis 1"):
    sharding.shard_batch({"x": np.ones(4)}, mesh, batch_axis=1)


@pytest.mark.parametrize("batch, match", [
    ({"x": np.ones(()), "y": np.ones(4)}, r"leaf \['x'\] is a scalar"),
    ({"x": np.ones((4, 2)), "y": np.ones(3)}, r"leaf \['y'\] has leading size 3, but other "
                                              "leaves have 4"),
    ({}, "no array leaves"),
])
def test_shard_batch_rejects_bad_batches(batch, match):
  with pytest.raises(ValueError, match=match):
    sharding.shard_batch(batch, sharding.make_mesh())


def test_distributed_flag_defaults_off_and_is_validated():
  assert default_train_config().distributed is False
  assert sharding.maybe_initialize_distributed(False) is False
  assert not jax.distributed.is_initialized()
  with pytest.raises(TypeError, match="must be a bool, got 'yes'"):
    sharding.maybe_initialize_distributed("yes")


@pytest.mark.parametrize("kwargs, match", [
    (dict(coordinator_address="10.0.0.1"), r"'10.0.0.1' must be 'host:port'"),
    (dict(coordinator_address="host:99999"), r"'host:99999' must be 'host:port' with a port"),
    (dict(coordinator_address="::1:1234"), r"IPv6 as '\[addr\]:port'"),
    (dict(num_processes=0), "num_processes must be an int >= 1, got 0"),
    (dict(num_processes=2, process_id=2), r"process_id 2 is out of range for num_processes=2; "
                                          r"expected 0\.\.1"),
    (dict(process_id=-1), "process_id must be an int >= 0, got -1"),
    (dict(process_id=True), "process_id must be an int >= 0, got True"),
    (dict(local_device_ids="0,1"), "local_device_ids must be an int >= 0 or a sequence"),
    (dict(initialization_timeout=0), "initialization_timeout must be an int >= 1"),
])
def test_launcher_arguments_are_checked_before_starting(kwargs, match):
  # Checked before jax.distributed.initialize, which would wait for peers first.
  with pytest.raises(ValueError, match=match) as info:
    sharding.maybe_initialize_distributed(True, **kwargs)
  assert "\n" not in str(info.value)
  assert not jax.distributed.is_initialized()


def test_launcher_arguments_need_the_flag_and_accept_valid_values():
  with pytest.raises(ValueError, match=r"\['num_processes', 'process_id'\] were given, but "
                     "the distributed flag is false"):
    sharding.maybe_initialize_distributed(False, num_processes=2, process_id=0)
  with pytest.raises(TypeError, match="coordinator_address must be a 'host:port' string"):
    sharding.check_launcher_args(coordinator_address=1234)
  for valid in (dict(coordinator_address="[::1]:1234", num_processes=2, process_id=1),
                dict(coordinator_address="localhost:1", local_device_ids=(0, 1)),
                dict(process_id=np.int64(3), local_device_ids=0), {}):
    sharding.check_launcher_args(**valid)


_EIGHT_DEVICES = textwrap.dedent("""
    import jax, numpy as np
    from common import sharding
    assert jax.device_count() == 8, jax.devices()
    mesh = sharding.make_mesh()
    assert dict(mesh.shape) == {"data": 8}
    assert dict(sharding.make_mesh((4, -1), ("data", "model")).shape) == {"data": 4, "model": 2}
    x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    placed = sharding.shard_batch({"x": x}, mesh)["x"]
    shards = sorted(placed.addressable_shards, key=lambda s: s.index[0].start)
    assert len(shards) == 8 and all(s.data.shape == (2, 3) for s in shards)
    np.testing.assert_array_equal(np.concatenate([np.asarray(s.data) for s in shards]), x)
    try:
      sharding.shard_batch({"x": np.ones((12, 3))}, mesh)
    except ValueError as e:
      assert "batch size 12" in str(e) and "8 devices" in str(e), e
    else:
      raise AssertionError("no error for a batch of 12 on 8 devices")
    stack = np.stack([x, x + 100])  # Two batches of 16: each device holds 2 rows of each.
    placed = sharding.shard_batch({"x": stack}, mesh, batch_axis=1)["x"]
    shards = sorted(placed.addressable_shards, key=lambda s: s.index[1].start)
    assert len(shards) == 8 and all(s.data.shape == (2, 2, 3) for s in shards)
    np.testing.assert_array_equal(np.concatenate([np.asarray(s.data) for s in shards], 1),
                                  stack)
    print("OK")
""")


def test_eight_fake_devices_split_the_batch():
  # After the caller's XLA_FLAGS, so that an ISA cap reaches the child too.
  xla_flags = (f"{os.environ.get('XLA_FLAGS', '')} "
               f"--xla_force_host_platform_device_count=8").strip()
  env = dict(os.environ, XLA_FLAGS=xla_flags,
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _EIGHT_DEVICES], env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_make_mesh_and_shard_batch_reject_bad_types():
  with pytest.raises(TypeError, match=r"mesh_shape must be None or a sequence of ints, got \(1.5,\)"):
    sharding.make_mesh((1.5,))  # Before: truncated to 1 silently.
  with pytest.raises(TypeError, match="axis_names must be a sequence of names"):
    sharding.make_mesh((-1,), axis_names="data")
  with pytest.raises(TypeError, match=r"batch leaf \['s'\] has dtype <U1"):
    sharding.shard_batch({"s": np.array(["a", "b"])}, sharding.make_mesh())
