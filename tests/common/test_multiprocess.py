"""A real multi-process launch of the training loop through `jax.distributed`.

Two processes on loopback, each with 2 fake CPU devices (cross-process CPU
collectives through gloo), train a small MLP regression data-parallel over the 4
global devices with `common.train.train`: a first call checkpoints at step
SAVE_AT, a second call restores that checkpoint (written by both processes into
one directory by orbax) and trains on to NUM_STEPS. A third process runs the same
on 4 fake devices without `jax.distributed`; the parameters and the logged losses
must agree. This is the path multi-host runs on pods take, not only the
multi-device one.

Run as a script (`python tests/common/test_multiprocess.py OUT.npz WORKDIR NUM_PROCESSES
PROCESS_ID COORDINATOR`), this file is one of those processes.
"""

import os
import socket
import subprocess
import sys
import time
import traceback

import jax
import numpy as np
import pytest

from common import sharding
from common.train import default_train_config, train

NUM_STEPS, SAVE_AT = 6, 3
DEVICES_PER_PROCESS = 2
TIMEOUT_S = 120  # A hung peer (a barrier never reached) fails the test, with its stderr.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train_in_two_calls(workdir, distributed):
  """Trains to SAVE_AT (its last checkpoint), then resumes from it to NUM_STEPS.

  The task is the small MLP regression of the loop's own tests. Its module is
  imported only now: it makes arrays at import, and nothing may touch a device
  before `jax.distributed` starts (this directory is on sys.path both under pytest
  and when this file runs as a script).

  Returns:
    (the logged history of both calls, the final TrainResult).
  """
  import test_train  # pylint: disable=g-import-not-at-top

  def call(num_steps):
    config = default_train_config(num_steps=num_steps, batch_size=test_train.BATCH,
                                  checkpoint_every=SAVE_AT, keep_checkpoints=3,
                                  log_every=1, progress_bar=False,
                                  distributed=distributed)  # Already started: a no-op.
    return train(init_fn=test_train.init_fn, loss_fn=test_train.loss_fn,
                 batch_fn=test_train.batch_fn, optimizer=test_train.OPTIMIZER,
                 config=config, workdir=workdir)

  first = call(SAVE_AT)
  second = call(NUM_STEPS)
  return first.history + second.history, second


def _worker(out_path, workdir, num_processes, process_id, coordinator):
  """One process of the launch: initialise, train in two calls, save what it saw."""
  if num_processes > 1:
    assert sharding.maybe_initialize_distributed(
        True, coordinator_address=coordinator, num_processes=num_processes,
        process_id=process_id, initialization_timeout=TIMEOUT_S)
  history, result = train_in_two_calls(workdir, distributed=num_processes > 1)
  mesh = result.state.step.sharding.mesh
  flat = {jax.tree_util.keystr(path): np.asarray(leaf)  # Replicated: any process reads it.
          for path, leaf in jax.tree_util.tree_leaves_with_path(result.state.params)}
  np.savez(out_path, process_count=jax.process_count(), process_index=jax.process_index(),
           device_count=jax.device_count(), local_device_count=jax.local_device_count(),
           mesh_size=mesh.size, steps=np.array([h["step"] for h in history]),
           losses=np.array([h["loss"] for h in history]),
           resumed_from=result.history[0]["step"], **flat)


def _free_port():
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(tmp_path, name, num_processes, devices, coordinator=""):
  """Starts `num_processes` copies of this script; returns [(Popen, out, log path)]."""
  # After the caller's XLA_FLAGS, so that an ISA cap reaches the child too.
  xla_flags = (f"{os.environ.get('XLA_FLAGS', '')} "
               f"--xla_force_host_platform_device_count={devices}").strip()
  env = dict(os.environ, XLA_FLAGS=xla_flags,
             JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
  procs = []
  for process_id in range(num_processes):
    out, log = tmp_path / f"{name}{process_id}.npz", tmp_path / f"{name}{process_id}.log"
    with open(log, "w") as stderr:
      procs.append((subprocess.Popen(
          [sys.executable, os.path.abspath(__file__), str(out), str(tmp_path / name),
           str(num_processes), str(process_id), coordinator],
          env=env, stdout=subprocess.DEVNULL, stderr=stderr), out, log))
  return procs


def _wait(procs, timeout_s):
  """Waits for every process. At the first failure, or after `timeout_s`, kills the
  others (a peer of a dead process would wait at a barrier) and fails with the logs."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    codes = [proc.poll() for proc, _, _ in procs]  # None while running.
    if None not in codes or any(codes):
      break
    time.sleep(0.1)
  for proc, _, _ in procs:
    if proc.poll() is None:
      proc.kill()
    proc.wait()
  failed = [f"{log.name} (exit {proc.returncode}{', killed' if proc.returncode < 0 else ''}):"
            f"\n{log.read_text()[-3000:]}" for proc, _, log in procs if proc.returncode]
  assert not failed, "\n".join(failed)


def _has_gloo():
  try:
    from jax._src.lib import _jax  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  return hasattr(_jax, "make_gloo_tcp_collectives")


@pytest.mark.skipif(not _has_gloo(), reason="this jaxlib has no gloo CPU collectives, "
                    "which cross-process CPU all-reduces need")
def test_two_processes_train_and_resume_like_one(tmp_path):
  coordinator = f"127.0.0.1:{_free_port()}"
  multi = _launch(tmp_path, "multi", 2, DEVICES_PER_PROCESS, coordinator)
  single = _launch(tmp_path, "single", 1, 2 * DEVICES_PER_PROCESS)
  _wait(multi + single, TIMEOUT_S)
  want, *got = [np.load(out) for _, out, _ in single + multi]

  assert int(want["process_count"]) == 1 and int(want["device_count"]) == 4
  steps = list(range(NUM_STEPS))
  np.testing.assert_array_equal(want["steps"], steps)
  assert int(want["resumed_from"]) == SAVE_AT
  assert want["losses"][-1] < want["losses"][0]
  params = [k for k in want.files if k.startswith("[")]
  assert params
  for process_id, run in enumerate(got):
    assert int(run["process_index"]) == process_id and int(run["process_count"]) == 2
    assert int(run["device_count"]) == 4 and int(run["local_device_count"]) == 2
    assert int(run["mesh_size"]) == 4  # The mesh spans both processes' devices.
    assert int(run["resumed_from"]) == SAVE_AT  # The second call restored step SAVE_AT.
    np.testing.assert_array_equal(run["steps"], steps)
    # Equal up to rounding (about 1e-7 here), not bitwise: gloo's all-reduce adds the
    # 4 devices' gradients in another order than XLA's in-process one.
    np.testing.assert_allclose(run["losses"], want["losses"], rtol=1e-6)
    for key in params:
      np.testing.assert_allclose(run[key], want[key], rtol=1e-6, atol=1e-6, err_msg=key)
  for key in params:  # The two processes hold the same replicated parameters.
    np.testing.assert_array_equal(got[0][key], got[1][key], err_msg=key)
  checkpoints = sorted(os.listdir(tmp_path / "multi" / "checkpoints"))
  assert [c for c in checkpoints if c.isdigit()] == [str(SAVE_AT), str(NUM_STEPS)]


@pytest.mark.parametrize("flags, message", [
    (["--num_processes=2", "--process_id=2"],
     "process_id 2 is out of range for num_processes=2"),
    (["--distributed"], "jax.distributed cannot start: coordinator_address should be "
                        "defined. No cluster (Cloud TPU, SLURM, Open MPI) was detected"),
])
def test_main_rejects_bad_launcher_flags_with_one_line(flags, message, tmp_path):
  # No cluster variables, so that nothing is auto-detected (a CI job may run in one).
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM_", "OMPI_", "PMI_", "JAX_COORDINATOR"))}
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.main", "--config=experiments/configs/kernel_ridge.py:tiny",
       f"--workdir={tmp_path / 'run'}", *flags],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert message in lines[0]
  assert not os.path.exists(tmp_path / "run")


if __name__ == "__main__":
  try:
    _worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
  except BaseException:  # pylint: disable=broad-except
    # Exit now: a normal exit would wait (minutes) in jax.distributed's shutdown
    # barrier for the peers, which are themselves waiting for this process.
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)
