"""Runs every registered experiment at a preset and writes ``REPORT.md`` with plots.

  python -m experiments.reproduce [--only=kernel_ridge] [--preset=quick] [--workdir=results]

Each experiment runs in ``workdir/<name>/`` and saves its ``result.json``
atomically. If an experiment fails, its last good result (if any) stays in the
report marked stale, the error is printed on one line, and the exit status is 1:
a broken run never replaces a good result. Bad names, presets or a workdir that is a
file or not writable stop with a one-line error (exit status 2) before any run.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from absl import app
from absl import flags

from common import config as config_lib
from common import report
from common import trials
from experiments import registry
from experiments import runtime

flags.DEFINE_list("only", None, "Comma-separated experiment names (default: all).")
flags.DEFINE_string("preset", "quick", "Config preset for every experiment.")
flags.DEFINE_string("workdir", "results", "Where REPORT.md, plots and results go.")
FLAGS = flags.FLAGS


def _checked_configs(names: list[str], preset: str, workdir: str,
                    registered: list[str]) -> dict:
  """The validated config of each of ``names`` at ``preset``, after checking ``workdir``.

  Raises:
    ValueError: (``ConfigError`` for names and presets) for a name not in
      ``registered``, an unknown preset, an invalid config, or a bad ``workdir``.
  """
  unknown = [n for n in names if n not in registered]
  if unknown:
    raise config_lib.ConfigError(
        f"unknown experiment(s) {unknown}; registered: {', '.join(registered)}")
  configs = {n: registry.config_module(n).get_config(preset) for n in names}
  for n, config in configs.items():
    registry.config_module(n).validate(config)
  trials.ensure_directory(workdir, "--workdir")
  return configs


def reproduce(names: list[str] | None, preset: str, workdir: str) -> tuple[str, list[str]]:
  """Runs the experiments; returns (report text, names that failed).

  Bad input fails before the experiment modules are imported (which takes seconds):
  the input is checked against the module names, which are what they register, then
  against the registry.

  Raises:
    ValueError: (``ConfigError`` for names and presets) before any run, for an
      unknown name or preset, an invalid config, or a bad ``workdir``.
  """
  modules = registry.experiment_modules()
  _checked_configs(names or modules, preset, workdir, modules)
  registry.load_all()
  experiments = report.registered()
  names = list(experiments) if not names else names
  configs = _checked_configs(names, preset, workdir, list(experiments))
  entries, failed = {}, []
  for name in names:
    exp_dir = os.path.join(workdir, name)
    print(f"[reproduce] {name} ({preset}) -> {exp_dir}", flush=True)
    start = time.time()
    try:
      result = experiments[name].run(configs[name], exp_dir)  # The runner saves result.json.
      entries[name] = (experiments[name], result, "")
      done, checked = report.claims_count(result)
      print(f"[reproduce] {name}: {(time.time() - start) / 60:.1f} min, {done}/{checked} "
            "claims reproduced", flush=True)
    except Exception as e:  # pylint: disable=broad-except
      traceback.print_exc()
      failed.append(name)
      print(f"[reproduce] {name}: failed after {(time.time() - start) / 60:.1f} min: "
            f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
      previous = report.load_result(exp_dir)
      if previous is not None:
        entries[name] = (experiments[name], previous, "stale: this run failed")
  # Keep rows of experiments not run this time (e.g. with --only) from their last result.
  for name, exp in experiments.items():
    if name not in entries:
      previous = report.load_result(os.path.join(workdir, name))
      if previous is not None:
        entries[name] = (exp, previous, "")
  text = report.write_report(dict(sorted(entries.items())),
                             os.path.join(workdir, "REPORT.md"), preset)
  return text, failed


def main(argv):
  del argv
  runtime.setup()
  try:
    text, failed = reproduce(FLAGS.only, FLAGS.preset, FLAGS.workdir)
  except ValueError as e:  # ConfigError included: names, presets, configs, workdir.
    config_lib.die(e)
  print(text.split("\n<a id=")[0].rstrip())  # The summary; the sections are in the file.
  print(f"\nFull report: {os.path.join(FLAGS.workdir, 'REPORT.md')}")
  if failed:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
