"""Contract over every registered experiment: it imports, registers itself, every
preset of its config loads, validates and is locked; and the entrypoints turn bad
input into one-line errors without writing results."""

import os
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


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_loads_validates_and_is_locked(name):
  module = registry.config_module(name)
  assert {"quick", "paper"} <= set(module.PRESETS)
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
    (["--config=experiments/configs/kernel_ridge.py:quick", "--config.scales_t=(0.0,)"],
     "config.scales_t=(0.0,) is invalid"),
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
