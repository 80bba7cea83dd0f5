"""The notebooks of docs/notebooks/ run, show a plot, and are committed stripped.

Each notebook is executed top to bottom by nbclient in a real IPython kernel (ipykernel)
whose Python is this test's interpreter, with the repository root as its working
directory, so the install cell finds the package and skips, and the notebook imports
this checkout. JAX runs on the CPU. A failing cell fails the test with the notebook's
name, the cell's index and its first line.
"""

import importlib.util
import json
import os
import re
import sys

from IPython.core.inputtransformer2 import TransformerManager
import nbclient
from nbclient.exceptions import CellExecutionError
import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(ROOT, "docs", "notebooks")
NAMES = sorted(name for name in os.listdir(FOLDER) if name.endswith(".ipynb"))
CELL_TIMEOUT_S = 120
# Appended to the executed copy (never to the file): which Python and which checkout ran it.
PROBE = "import sys, methods\nprint(sys.executable)\nprint(methods.__file__)"
# XLA:CPU's optimisation level in a notebook's kernel where it is not the suite's 0
# (tests/conftest.py). SmolLM2's notebook runs the 30-layer model (RaBitQ decoding, SGLD
# chains) long enough that level 1 wins: CPU seconds of its cells, 188 at level 0, 129
# at 1, 133 at 2, 147 at 3 (SGLD 84 -> 34, RaBitQ 54 -> 48, the AGZO/MeZO compile
# 30 -> 31 from 0 to 1). The other notebooks are compile-bound: level 1 measured equal
# or slower for each, so they keep 0.
_OPT_LEVEL = re.compile(r"--xla_backend_optimization_level=(\d+)")
KERNEL_OPT_LEVEL = {"smollm2.ipynb": 1}


def _build_module():
  spec = importlib.util.spec_from_file_location("notebooks_build",
                                                os.path.join(FOLDER, "build.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _kernel_manager(tmp_path):
  """A kernel manager whose kernelspec runs this interpreter's ipykernel (not whatever
  "python3" kernelspec the machine has installed elsewhere)."""
  from ipykernel import kernelspec  # pylint: disable=import-outside-toplevel
  from jupyter_client import kernelspec as specs  # pylint: disable=import-outside-toplevel
  from jupyter_client.manager import KernelManager  # pylint: disable=import-outside-toplevel

  kernelspec.install(prefix=str(tmp_path), kernel_name="icml26-test")
  spec_manager = specs.KernelSpecManager(
      kernel_dirs=[os.path.join(str(tmp_path), "share", "jupyter", "kernels")])
  return KernelManager(kernel_name="icml26-test", kernel_spec_manager=spec_manager)


def _xla_flags(flags: str, name: str) -> str:
  """`flags` (XLA_FLAGS) with the notebook's optimisation level (`KERNEL_OPT_LEVEL`) in
  place of level 0; a level other than 0 that the caller chose is kept."""
  level = KERNEL_OPT_LEVEL.get(name)
  if level is None or _OPT_LEVEL.findall(flags)[-1:] != ["0"]:
    return flags
  return " ".join(_OPT_LEVEL.sub("", flags).split() +
                  [f"--xla_backend_optimization_level={level}"])


def _kernel_env(name: str):
  """The kernel's environment: JAX on the CPU, inline plots, this checkout first on the
  path, the notebook's XLA optimisation level (`_xla_flags`), and the session's
  persistent compilation cache (tests/conftest.py), so that a program another notebook
  or test already compiled (the tiny LM's training step) is loaded instead of compiled
  again."""
  env = dict(os.environ)
  if env.get("XLA_FLAGS"):
    env["XLA_FLAGS"] = _xla_flags(env["XLA_FLAGS"], name)
  env.update(JAX_PLATFORMS="cpu", PYDEVD_DISABLE_FILE_VALIDATION="1",
             MPLBACKEND="module://matplotlib_inline.backend_inline",
             PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p))
  cache = env.get("TESTS_JAX_COMPILATION_CACHE")
  if cache:
    env.update(JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="1",
               JAX_COMPILATION_CACHE_MAX_SIZE=str(64 << 30))
  return env


def _first_line(cell) -> str:
  lines = cell.source.strip().splitlines()
  return lines[0] if lines else ""


def _execute(nb, name: str, tmp_path) -> None:
  """Runs every cell of `nb` in place; a failing cell fails the test with its index and
  first line."""
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, km=_kernel_manager(tmp_path),
                                   shutdown_kernel="immediate")
  try:
    # cleanup_kc: shut the kernel down here (with a kernel manager passed in, nbclient
    # would leave it running, holding a core's share and a GiB, until the worker exits).
    client.execute(env=_kernel_env(name), cwd=ROOT, cleanup_kc=True)
  except CellExecutionError as error:
    failed = next((i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
                   and any(o.get("output_type") == "error" for o in cell.get("outputs", []))),
                  None)
    where = (f"cell {failed} ({_first_line(nb.cells[failed])!r})" if failed is not None
             else "a cell")
    pytest.fail(f"{name}: {where} failed: {error.ename}: {error.evalue}", pytrace=False)


def test_a_failing_cell_names_the_notebook_and_the_cell(tmp_path):
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("x = 1"),
              nbformat.v4.new_code_cell("y = x + 1\nraise ValueError(f'bad {y}')"),
              nbformat.v4.new_code_cell("z = 3")]
  with pytest.raises(pytest.fail.Exception) as failure:
    _execute(nb, "demo.ipynb", tmp_path)
  assert str(failure.value) == "demo.ipynb: cell 2 ('y = x + 1') failed: ValueError: bad 2"


def test_kernel_optimisation_level_replaces_only_the_suites_level_0():
  suite = "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=0"
  assert _xla_flags(suite, "smollm2.ipynb") == (
      "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=1")
  assert _xla_flags(suite, "divin.ipynb") == suite
  chosen = "--xla_backend_optimization_level=3"
  assert _xla_flags(chosen, "smollm2.ipynb") == chosen
  assert set(KERNEL_OPT_LEVEL) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_and_shows_a_plot(name, tmp_path):
  nb = nbformat.read(os.path.join(FOLDER, name), as_version=4)
  nb.cells.append(nbformat.v4.new_code_cell(PROBE))
  _execute(nb, name, tmp_path)
  # The kernel may send the two printed lines as two stream messages (nbclient does not
  # merge them by default), so read all of the probe's stdout.
  stdout = "".join(o["text"] for o in nb.cells[-1].outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
  executable, package = stdout.split()
  assert os.path.realpath(executable) == os.path.realpath(sys.executable), executable
  assert os.path.realpath(package).startswith(os.path.realpath(ROOT) + os.sep), package
  # The install cell found the package and did not run pip (which always prints).
  install = nb.cells[2]
  assert "%pip install" in install.source
  assert not any("pip" in o.get("text", "") or "install" in o.get("text", "")
                 for o in install.outputs), install.outputs
  images = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
            if "image/png" in o.get("data", {})]
  assert images, f"{name} shows no plot"


def test_notebooks_are_committed_stripped_and_match_their_cells():
  build = _build_module()
  assert NAMES == sorted(build.NOTEBOOKS), (NAMES, sorted(build.NOTEBOOKS))
  for name in NAMES:
    path = os.path.join(FOLDER, name)
    with open(path, encoding="utf-8") as f:
      text = f.read()
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
      if cell.cell_type == "code":
        assert cell.outputs == [] and cell.execution_count is None, f"{name}: cell {i} not stripped"
    assert text == nbformat.writes(build.NOTEBOOKS[name]) + "\n", (
        f"{name} differs from docs/notebooks/build.py; run python docs/notebooks/build.py")
    assert json.loads(text)["metadata"]["kernelspec"]["name"] == "python3"
    # The install cell: IPython turns its %pip into a call that runs only when the
    # package does not import (the executed notebooks check that it is skipped then).
    python = TransformerManager().transform_cell(nb.cells[2].source)
    assert "except ImportError:\n  get_ipython().run_line_magic('pip', 'install" in python, python
    compile(python, f"{name}: install cell", "exec")
