"""Contract over every registered experiment: it imports, registers itself through
the runner, every preset of its config loads, validates and is locked; it has its
docs page, benchmark and one README results row (its quick count the committed
result's); and the entrypoints turn bad input into one-line errors without writing
results."""

import ast
import os
import re
import subprocess
import sys

import pytest

from common import config as config_lib
from common import report
from experiments import registry

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
registry.load_all()
NAMES = registry.experiment_modules()


def test_every_experiment_module_is_registered_with_a_config():
  assert NAMES, "no experiment modules found"
  assert sorted(report.registered()) == NAMES
  for name in NAMES:
    assert os.path.isfile(os.path.join(REPO, "experiments", "configs", f"{name}.py"))
    assert os.path.isfile(os.path.join(REPO, "docs", f"{name}.md")), f"docs/{name}.md missing"
    # The registry holds the runner (validate, x64, timing, result.json), not the body.
    assert report.get(name).run.__wrapped__ is not None
    # Presets other than quick run in results/<preset>/<name> (report.run_dir).
    assert name not in ("quick", "full", "paper", "tiny"), f"{name} is a preset's name"


def _benchmark_coverage() -> dict[str, str]:
  """experiment name -> benchmark module: `experiments/benchmarks/<name>.py`, or a
  benchmark whose module-level `COVERS = (...)` names the experiment."""
  covered = {}
  folder = os.path.join(REPO, "experiments", "benchmarks")
  for file in sorted(os.listdir(folder)):
    if not file.endswith(".py") or file.startswith("_"):
      continue
    covered[file[:-3]] = file
    with open(os.path.join(folder, file)) as f:
      tree = ast.parse(f.read())
    for node in tree.body:
      if (isinstance(node, ast.Assign) and
          any(getattr(t, "id", None) == "COVERS" for t in node.targets)):
        for name in ast.literal_eval(node.value):
          covered[name] = file
  return covered


NOT_RUN = ("not run yet", "—")  # what a README count cell says without results


def _readme_results_rows() -> list[list[str]]:
  """The cells of each row of README.md's results table, the one whose header is
  `| method | quick | full | details |`."""
  with open(os.path.join(REPO, "README.md")) as f:
    lines = f.read().splitlines()
  header = [i for i, line in enumerate(lines)
            if re.fullmatch(r"\|\s*method\s*\|\s*quick\s*\|\s*full\s*\|\s*details\s*\|", line)]
  assert len(header) == 1, (
      "README.md needs one results table headed | method | quick | full | details |")
  rows = []
  for line in lines[header[0] + 2:]:
    if not line.startswith("|"):
      break
    rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
  return rows


def test_readme_has_one_results_row_per_experiment():
  """One row per registered experiment, each naming exactly one of them in backticks;
  the claim-by-claim table lives in results/REPORT.md only."""
  named = []
  for row in _readme_results_rows():
    assert len(row) == 4, f"README.md results row {row} does not have 4 cells"
    names = [n for n in re.findall(r"`(\w+)`", row[0]) if n in NAMES]
    assert len(names) == 1, f"README.md results row {row[0]!r} names {names}, not one experiment"
    named += names
  assert sorted(named) == NAMES, (
      f"README.md's results rows name {sorted(named)}; the registered experiments are {NAMES}")


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_has_a_benchmark_and_a_readme_row(name):
  """Its README row links its docs page and its REPORT.md section, and its quick and
  full counts (claims reproduced / checked) are the committed results/<name>/ and
  results/full/<name>/ result.json's."""
  assert name in _benchmark_coverage(), (
      f"no experiments/benchmarks/{name}.py and no benchmark with {name!r} in COVERS")
  rows = [row for row in _readme_results_rows() if f"`{name}`" in row[0]]
  assert len(rows) == 1, f"README.md has {len(rows)} results rows for {name}, not one"
  _, quick, full, details = rows[0]
  assert f"](docs/{name}.md)" in details, f"README.md's {name} row does not link docs/{name}.md"
  assert os.path.isfile(os.path.join(REPO, "docs", f"{name}.md")), f"docs/{name}.md missing"
  assert f"](results/REPORT.md#{name})" in details, (
      f"README.md's {name} row does not link results/REPORT.md#{name}")
  report_md = os.path.join(REPO, "results", "REPORT.md")
  if os.path.exists(report_md):
    with open(report_md) as f:
      assert f'<a id="{name}"></a>' in f.read(), f"results/REPORT.md has no section {name}"
  for preset, cell in (("quick", quick), ("full", full)):
    folder = os.path.relpath(report.run_dir("results", preset, name))
    result = report.load_result(os.path.join(REPO, folder))
    if result is None:
      assert cell in NOT_RUN, (
          f"README.md gives {name} the {preset} count {cell!r}, but {folder}/result.json "
          f"is not there: say {NOT_RUN[0]!r}")
    else:
      done, checked = report.claims_count(result)
      assert cell == f"{done}/{checked}", (
          f"README.md gives {name} the {preset} count {cell!r}; {folder}/result.json "
          f"has {done}/{checked}")


@pytest.mark.parametrize("name", NAMES)
def test_presets_declare_their_minutes_and_results_their_config(name):
  """Every experiment has quick and full presets; the config module declares their
  measured minutes, MINUTES = {"quick": <= 8, "full": <= 30 or None until measured},
  never fewer than the committed run took; a committed result that records its config
  came from today's config of its preset (change a preset, rerun it)."""
  module = registry.config_module(name)
  assert {"quick", "full"} <= set(module.PRESETS), f"{name} needs quick and full presets"
  minutes = getattr(module, "MINUTES", None)
  assert isinstance(minutes, dict) and set(minutes) == {"quick", "full"}, (
      f"experiments/configs/{name}.py needs MINUTES = {{'quick': m, 'full': m or None}}")
  for preset, cap in (("quick", 8.0), ("full", 30.0)):
    declared = minutes[preset]
    if declared is None and preset == "full":
      continue
    assert isinstance(declared, (int, float)) and 0 < declared <= cap, (
        f"{name}: MINUTES[{preset!r}]={declared!r}, expected a number in (0, {cap:g}]")
    result = report.load_result(os.path.join(REPO, report.run_dir("results", preset, name)))
    if result is None or not result.fingerprint:
      continue
    assert not report.config_status(result, module.get_config(preset)), (
        f"results for {name} at {preset} came from another config than today's "
        f"{preset} preset: rerun it (python -m experiments.reproduce --only={name} "
        f"--preset={preset})")
    assert result.resumed or result.seconds / 60 <= 1.1 * declared + 0.2, (
        f"{name}: MINUTES[{preset!r}]={declared} but its committed run took "
        f"{result.seconds / 60:.1f} minutes")


def _experiment_files() -> list[str]:
  files = []
  for root, _, names in os.walk(os.path.join(REPO, "experiments")):
    files += [os.path.relpath(os.path.join(root, n), REPO) for n in names if n.endswith(".py")]
  return sorted(files)


def _imported_modules(tree: ast.AST):
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom):
      yield from (f"{node.module}.{a.name}" for a in node.names)
    elif isinstance(node, ast.Import):
      yield from (a.name for a in node.names)


@pytest.mark.parametrize("path", _experiment_files())
def test_experiment_code_stays_thin(path):
  """No function over 60 lines; an experiment imports no other experiment (nor its
  config or plots); a benchmark imports no experiment module (entrypoints such as
  `serve_lm`, listed in `registry.NOT_EXPERIMENTS`, are not experiments)."""
  with open(os.path.join(REPO, path)) as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      length = node.end_lineno - node.lineno + 1
      assert length <= 60, f"{path}: {node.name} is {length} lines"
  parts = path[:-3].split(os.sep)
  for module in _imported_modules(tree):
    target = re.match(r"experiments\.(configs\.|plots\.)?(\w+)", module)
    if target is None or target.group(2) in registry.NOT_EXPERIMENTS:
      continue
    if parts[1] == "benchmarks":
      assert target.group(1), f"{path} imports the experiment module {module}"
    elif len(parts) == 2 and parts[1] in NAMES:
      assert target.group(2) == parts[1], f"{path} imports {module}"


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_loads_validates_and_is_locked(name):
  module = registry.config_module(name)
  assert {"quick", "full", "paper", "tiny"} <= set(module.PRESETS)
  for preset in module.PRESETS:
    config = module.get_config(preset)
    assert config.method == name and config.preset == preset
    module.validate(config)
    with pytest.raises(AttributeError):
      config.no_such_key_anywhere = 1
  with pytest.raises(config_lib.ConfigError, match="allowed: .*quick"):
    module.get_config("no_such_preset")


def _main(*args, workdir):
  return subprocess.run(
      [sys.executable, "-m", "experiments.main", *args, f"--workdir={workdir}"],
      cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["--config=experiments/configs/kernel_ridge.py:huge"], "unknown preset 'huge'"),
    (["--config=experiments/configs/kernel_ridge.py:quick", "--config.bandwidth=1"],
     "unknown config key 'bandwidth'"),
    (["--config=experiments/configs/kernel_ridge.py:quick", "--config.ns=(-4,100)"],
     "config.ns=(-4, 100) is invalid"),
    (["--config=experiments/configs/kernel_ridge.py:quick", "--config.selection.scales_t=(0.0,)"],
     "config.selection.scales_t=(0.0,) is invalid"),
    (["--config=experiments/configs/kernel_ridge.py:quick", "--config.selection.nope=1"],
     "unknown config key 'selection.nope'"),
    (["--config=experiments/configs/kernel_ridge.py:quick", "--config.ns.x=1"],
     "config.ns is a value, not a sub-config"),
    (["--config=experiments/configs/nowhere.py"], "config file not found"),
])
def test_main_rejects_bad_config_with_one_line(args, message, tmp_path):
  proc = _main(*args, workdir=tmp_path)
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and message in lines[0], proc.stderr
  assert not os.path.exists(tmp_path / "result.json")


def test_reproduce_rejects_unknown_names_and_presets(tmp_path):
  for flag in ("--only=nope", "--preset=nope"):
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", flag,
                           f"--workdir={tmp_path}"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not os.path.exists(tmp_path / "REPORT.md")


def test_main_and_reproduce_reject_a_bad_workdir_with_one_line(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  for workdir, message in [(a_file, "is a file; expected a directory"),
                           ("/proc/x", "'/proc/x' is not a writable directory")]:
    proc = _main("--config=experiments/configs/kernel_ridge.py:tiny", workdir=workdir)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--only=kernel_ridge",
                           "--preset=tiny", f"--workdir={workdir}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
