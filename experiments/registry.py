"""Imports every experiment module so that each registers itself in common.report."""

from __future__ import annotations

import importlib
import pkgutil

import experiments

NOT_EXPERIMENTS = {"main", "reproduce", "registry", "runtime", "configs", "benchmarks", "plots",
                   "serve_lm"}


def experiment_modules() -> list[str]:
  """Names of the modules under experiments/ that define an experiment."""
  return sorted(m.name for m in pkgutil.iter_modules(experiments.__path__)
                if m.name not in NOT_EXPERIMENTS and not m.name.startswith("_"))


def load_all() -> None:
  for name in experiment_modules():
    importlib.import_module(f"experiments.{name}")


def config_module(name: str):
  """The config module experiments/configs/<name>.py."""
  return importlib.import_module(f"experiments.configs.{name}")
