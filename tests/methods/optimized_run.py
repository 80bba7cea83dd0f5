"""Runs a registered experiment in a subprocess compiled at XLA's optimisation level 1.

The suite compiles at level 0 (tests/conftest.py), which suits its compile-bound
majority. A claim test whose tiny run is bound by executing compiled code (a model
trained for hundreds of steps, SGLD chains, a lattice-Boltzmann simulation) runs that
experiment here instead: the same programs and the same config, compiled at level 1,
for about half the CPU time (the susceptibility tiny run: 175 -> 93 CPU-seconds).
Results move by float rounding at most.

The child runs the experiment's registered runner, so the workdir holds what an
in-process run leaves there (result.json, stages, checkpoints, plots), and returns its
`report.Result`; the caller's reruns in the same workdir resume from it.
"""

import os
import pickle
import re
import subprocess
import sys

LEVEL = 1

_CHILD = """
import importlib, pickle, sys
name, workdir, io_path = sys.argv[1:]
with open(io_path, "rb") as f:
  config = pickle.load(f)
result = importlib.import_module(f"experiments.{name}").run(config, workdir)
with open(io_path, "wb") as f:
  pickle.dump(result, f)
"""


def _environment() -> dict:
  """The caller's environment with XLA's backend optimisation level set to LEVEL."""
  flags = re.sub(r"--xla_backend_optimization_level=\S*", "", os.environ.get("XLA_FLAGS", ""))
  return dict(os.environ, XLA_FLAGS=f"{flags} --xla_backend_optimization_level={LEVEL}".strip())


def run(name: str, config, workdir: str):
  """`experiments.<name>.run(config, workdir)` in a child process at LEVEL; its Result."""
  io_path = f"{os.path.normpath(workdir)}.pkl"  # the config in, the Result out
  with open(io_path, "wb") as f:
    pickle.dump(config, f)
  proc = subprocess.run([sys.executable, "-c", _CHILD, name, workdir, io_path],
                        env=_environment(), capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"experiments.{name} at XLA level {LEVEL} failed "
                       f"(exit {proc.returncode}):\n{proc.stderr[-4000:]}")
  with open(io_path, "rb") as f:
    return pickle.load(f)
