"""Smoke test of every benchmark: `python -m experiments.benchmarks.<name> --tiny` runs
end to end against its peer when the peer is installed, so a benchmark cannot rot
unnoticed when the code it times changes.

Modules are discovered with pkgutil, so a new benchmark is picked up without an edit
here. A benchmark whose peer (its module-level ``PEERS``) is not installed is skipped
with the install command; the `bench` extra (`make bench`) installs every peer.
The modules are read as source, not imported: each defines absl flags, and several
define the same names (``--repeats``), which would clash in one process.

Each benchmark runs in its own process, as `python -m` runs it (`runpy`, as __main__),
forked from one server that has imported the libraries most of them load (`PRELOAD`,
tests/experiments/_benchmark_server.py): the imports are paid once, not once per
benchmark (about 2 s of CPU each, 4 s with torch; the file took 145 s of CPU instead
of 175 s, measured back to back).
"""

import ast
import importlib.metadata
import importlib.util
import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading

import pytest

from experiments import benchmarks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__)
               if not m.name.startswith("_"))
TIMEOUT_S = 120
SERVER = os.path.join(REPO, "tests", "experiments", "_benchmark_server.py")
# What the fork server imports before it forks: modules that several benchmarks import
# and that define no absl flags (one defined twice would clash), jax before torch as in
# the benchmarks. One whose package is not installed is left out.
PRELOAD = ("numpy", "scipy", "sklearn", "jax", "jax.numpy", "flax.linen", "optax",
           "orbax.checkpoint", "absl.app", "absl.flags", "absl.logging", "torch",
           "common.config", "common.train", "common.timing", "common.models.transformer",
           "common.models.sampling", "common.lm", "experiments.benchmarks")


def _source(name: str) -> ast.Module:
  with open(os.path.join(REPO, "experiments", "benchmarks", f"{name}.py")) as f:
    return ast.parse(f.read())


def _peers(tree: ast.Module):
  """The literal value of the module-level ``PEERS = (...)``, or None without one."""
  for node in tree.body:
    if (isinstance(node, ast.Assign) and
        any(getattr(t, "id", None) == "PEERS" for t in node.targets)):
      return ast.literal_eval(node.value)
  return None


def _defines_tiny(tree: ast.Module) -> bool:
  """Whether the module calls ``flags.DEFINE_bool("tiny", ...)``."""
  return any(isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "DEFINE_bool"
             and node.args and isinstance(node.args[0], ast.Constant)
             and node.args[0].value == "tiny" for node in ast.walk(tree))


def test_benchmarks_are_discovered():
  assert len(NAMES) >= 19 and "lm" in NAMES, NAMES


def test_machine_line_records_cpu_flags_and_versions():
  line = benchmarks.machine_line(("sklearn", "no_such_peer_pkg"))
  assert line.startswith("# machine: " + benchmarks.cpu_model())
  assert set(benchmarks.cpu_flags()) <= set(benchmarks.SIMD_FLAGS)
  if benchmarks.cpu_flags():
    assert "SIMD " + " ".join(benchmarks.cpu_flags()) in line
  # An import name that differs from its distribution's name resolves to it.
  assert f"sklearn {importlib.metadata.version('scikit-learn')}" in line
  assert f"jaxlib {importlib.metadata.version('jaxlib')}" in line
  assert line.endswith("no_such_peer_pkg not installed")


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_declares_peers_and_a_tiny_flag(name):
  tree = _source(name)
  peers = _peers(tree)
  assert isinstance(peers, tuple) and all(isinstance(p, str) for p in peers), (
      f"experiments/benchmarks/{name}.py needs a module-level PEERS = (import names, ...)")
  assert _defines_tiny(tree), f"experiments/benchmarks/{name}.py has no --tiny flag"
  assert "machine_line" in ast.unparse(tree), f"{name} does not print machine_line(PEERS)"


def _kill_after(seconds: float, pid: int) -> tuple[threading.Timer, threading.Event]:
  """A started timer that kills `pid` after `seconds`, and the event it sets then."""
  killed = threading.Event()

  def kill():
    killed.set()
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended as the timer fired
      pass

  timer = threading.Timer(seconds, kill)
  timer.start()
  return timer, killed


def _reply(server: subprocess.Popen, log: str) -> dict:
  """The server's next answer (one JSON line); its log if it has exited."""
  line = server.stdout.readline()
  if not line:
    with open(log) as f:
      raise RuntimeError(f"the benchmark server exited:\n{f.read()[-3000:]}")
  return json.loads(line)


@pytest.fixture(scope="module")
def run_tiny(tmp_path_factory):
  """run_tiny(name) -> (exit code, stdout, stderr, timed out?) of
  `python -m experiments.benchmarks.<name> --tiny`, in a process forked from the
  module's server (`PRELOAD`); one killed after TIMEOUT_S seconds reports timing out."""
  folder = str(tmp_path_factory.mktemp("benchmarks"))
  log = os.path.join(folder, "server.err")
  # One torch thread: beside the suite's other worker a 2-thread pool stalls on a
  # 2-core machine (docs/benchmarks.md); benchmarks that set torch's threads themselves
  # use 1 under --tiny. XLA_FLAGS, with the suite's -O0 (tests/conftest.py), is inherited.
  env = dict(os.environ, JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
  with open(log, "w") as err:
    server = subprocess.Popen([sys.executable, SERVER, json.dumps(PRELOAD)], cwd=REPO,
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=err, text=True)

  def run(name: str):
    out, err = (os.path.join(folder, f"{name}.{k}") for k in ("out", "err"))
    server.stdin.write(json.dumps({"module": f"experiments.benchmarks.{name}",
                                   "args": ["--tiny"], "stdout": out, "stderr": err}) + "\n")
    server.stdin.flush()
    timer, killed = _kill_after(TIMEOUT_S, _reply(server, log)["pid"])
    try:
      status = _reply(server, log)["status"]
    finally:
      timer.cancel()
    with open(out) as o, open(err) as e:
      return status, o.read(), e.read(), killed.is_set()

  yield run
  server.stdin.close()
  server.wait(timeout=TIMEOUT_S)


@pytest.mark.parametrize("name", NAMES)
def test_benchmark_runs_tiny(name, request):
  for peer in _peers(_source(name)) or ():
    if importlib.util.find_spec(peer) is None:
      pytest.skip(f"peer {peer} not installed (pip install -e '.[bench]')")
  status, stdout, stderr, timed_out = request.getfixturevalue("run_tiny")(name)
  assert not timed_out, f"{name} --tiny ran past {TIMEOUT_S} s:\n{stderr[-3000:]}"
  assert status == 0, f"{name} --tiny failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
  first = stdout.lstrip().splitlines()[0] if stdout.strip() else ""
  assert first.startswith("# machine: ") and benchmarks.cpu_model() in first, (
      f"{name} did not print the machine line first:\n{stdout[:500]}")


def test_roofline_measurements_and_line():
  bandwidth = benchmarks.stream_bandwidth(num_bytes=1 << 22, repeats=2)
  peak = benchmarks.peak_matmul_flops(size=128, repeats=2)
  assert bandwidth["best"] == max(bandwidth["copy_numpy"], bandwidth["scale_xla"]) > 0
  assert peak["best"] == max(peak["xla"], peak["numpy_blas"]) > 0
  line = benchmarks.roofline_line("step", seconds=0.5, bytes_moved=1e9, flops=4e9,
                                  bandwidth=4e9, peak_flops=16e9)
  assert line == ("# roofline step: 2.00 GB/s = 50% of measured bandwidth 4.0 GB/s; "
                  "8.0 GFLOP/s = 50% of measured peak 16.0 GFLOP/s")
  with pytest.raises(ValueError, match="seconds must be positive"):
    benchmarks.roofline_line("step", seconds=0.0, flops=1.0)
  with pytest.raises(ValueError, match="needs bytes_moved or flops"):
    benchmarks.roofline_line("step", seconds=1.0)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_proc_status_bytes_reads_kb_fields_in_bytes():
  rss, peak = benchmarks.proc_status_bytes("VmRSS"), benchmarks.proc_status_bytes("VmHWM")
  assert 0 < rss <= peak and rss % 1024 == 0
  with pytest.raises(ValueError, match="has no NoSuchField"):
    benchmarks.proc_status_bytes("NoSuchField")
