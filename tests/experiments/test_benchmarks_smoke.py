"""Smoke test of every benchmark: `python -m experiments.benchmarks.<name> --tiny` runs
end to end against its peer when the peer is installed, so a benchmark cannot rot
unnoticed when the code it times changes.

Modules are discovered with pkgutil, so a new benchmark is picked up without an edit
here. A benchmark whose peer (its module-level ``PEERS``) is not installed is skipped
with the install command; the `bench` extra (`make bench`) installs every peer.
The modules are read as source, not imported: each defines absl flags, and several
define the same names (``--repeats``), which would clash in one process.
"""

import ast
import importlib.metadata
import importlib.util
import os
import pkgutil
import subprocess
import sys

import pytest

from experiments import benchmarks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__)
               if not m.name.startswith("_"))
TIMEOUT_S = 120


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


@pytest.mark.parametrize("name", NAMES)
def test_benchmark_runs_tiny(name):
  for peer in _peers(_source(name)) or ():
    if importlib.util.find_spec(peer) is None:
      pytest.skip(f"peer {peer} not installed (pip install -e '.[bench]')")
  # One torch thread: beside the suite's other worker a 2-thread pool stalls on a
  # 2-core machine (docs/benchmarks.md); benchmarks that set torch's threads themselves
  # use 1 under --tiny. XLA_FLAGS, with the suite's -O0 (tests/conftest.py), is inherited.
  env = dict(os.environ, JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
  proc = subprocess.run([sys.executable, "-m", f"experiments.benchmarks.{name}", "--tiny"],
                        cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=TIMEOUT_S, check=False)
  assert proc.returncode == 0, (
      f"{name} --tiny failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
  first = proc.stdout.lstrip().splitlines()[0] if proc.stdout.strip() else ""
  assert first.startswith("# machine: ") and benchmarks.cpu_model() in first, (
      f"{name} did not print the machine line first:\n{proc.stdout[:500]}")


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
