"""Runs one experiment from a config file.

  python -m experiments.main --config=experiments/configs/kernel_ridge.py:quick \
      --workdir=/tmp/kernel_ridge [--config.ns="(500,1000)"]

The config's ``method`` names the registered experiment; its ``run(config,
workdir)`` writes into the workdir and returns the measured figures, which are
saved to ``workdir/result.json`` (atomically). A bad preset, override key or value
stops with a one-line error before any work.
"""

from __future__ import annotations

import importlib.util
import os

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from common import config as config_lib
from common import report
from experiments import registry

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Path to a config file, with :preset.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for outputs, checkpoints and results.")


def _config_path(argv: list[str]) -> str | None:
  spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
  return None if spec is None else spec.split(":", 1)[0]


def _config_keys(path: str) -> list[str]:
  """The top-level keys of the config file at ``path`` (default preset)."""
  module_spec = importlib.util.spec_from_file_location("_config_for_checks", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return sorted(module.get_config().keys())


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing that turns config errors into one-line messages."""
  path = _config_path(argv)
  if path is not None:
    if not os.path.isfile(path):
      config_lib.die(f"config file not found: {path}")
    keys = _config_keys(path)
    for arg in argv:
      if arg.startswith("--config."):
        key = arg[len("--config."):].split("=", 1)[0].split(".", 1)[0]
        if key not in keys:
          config_lib.die(f"unknown config key {key!r} in {arg.split('=', 1)[0]}; "
              f"valid keys: {', '.join(keys)}")
  try:
    rest = FLAGS(argv)
    FLAGS.config  # noqa: B018 -- loads the config file and applies overrides here
  except Exception as e:  # pylint: disable=broad-except
    text = str(e)
    if "Traceback" in text:  # config_flags wraps errors from get_config in a traceback
      text = text.strip().splitlines()[-1]
      text = text.split("ConfigError: ", 1)[-1]
    config_lib.die(text)
  if FLAGS.config is None:
    config_lib.die("--config is required, e.g. --config=experiments/configs/kernel_ridge.py:quick")
  if not FLAGS.workdir:
    config_lib.die("--workdir is required")
  return rest


def run_experiment(config, workdir: str) -> report.Result:
  """Validates ``config``, runs its experiment in ``workdir`` and saves result.json."""
  registry.load_all()
  try:
    experiment = report.get(config.method)
    registry.config_module(config.method).validate(config)
  except (config_lib.ConfigError, ValueError) as e:
    config_lib.die(e)
  result = experiment.run(config, workdir)
  report.save_result(result, workdir)
  return result


def main(argv):
  del argv
  result = run_experiment(FLAGS.config, FLAGS.workdir)
  for c in result.claims:
    logging.info("[%s] %s -> %s", "yes" if c.reproduced else "no", c.claim, c.our_figure)
  print(report.render_report({FLAGS.config.method: (report.get(FLAGS.config.method), result, "")},
                             FLAGS.config.preset))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
