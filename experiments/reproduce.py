"""Runs every registered experiment at a preset and writes ``REPORT.md`` with plots.

  python -m experiments.reproduce [--only=kernel_ridge] [--preset=quick] [--workdir=results]
  python -m experiments.reproduce --norun   # only rewrite results/REPORT.md

Each experiment runs in ``workdir/<name>/`` at quick and ``workdir/<preset>/<name>/``
at any other preset (``report.run_dir``), and saves its ``result.json`` atomically;
``lm`` runs first, since the LM experiments reuse its model. ``REPORT.md`` shows the
quick and full results side by side, full's verdicts first where it has run. If an experiment fails, its last good result (if any) stays in the
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
flags.DEFINE_bool("run", True, "Run the experiments; --norun only rewrites REPORT.md from "
                  "the results on disk.")
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


# Experiments whose runs others reuse go first (`common.lm.trained_lm` takes the `lm`
# experiment's trained model from beside its own workdir).
RUN_FIRST = ("lm",)


def _run_order(names: list[str]) -> list[str]:
  return sorted(names, key=lambda n: (n not in RUN_FIRST, names.index(n)))


def _status(name: str, result: report.Result, preset: str) -> str:
  """"" when ``result`` came from today's config of ``name`` at ``preset``."""
  if not result.fingerprint:
    return report.NOT_RECORDED
  module = registry.config_module(name)
  if preset not in getattr(module, "PRESETS", {}):
    return f"no {preset} preset now"
  return report.config_status(result, module.get_config(preset))


def _entries(experiments: dict, workdir: str, preset: str, fresh: dict, failed: list[str]):
  """name -> (experiment, {preset: (result, status)}) for every result on disk."""
  presets = list(report.REPORT_PRESETS) + ([preset] if preset not in report.REPORT_PRESETS
                                          else [])
  entries = {}
  for name, exp in experiments.items():
    runs = {}
    for p in presets:
      if p == preset and name in fresh:
        runs[p] = (fresh[name], "")
        continue
      result = report.load_result(report.run_dir(workdir, p, name))
      if result is not None:
        failed_now = p == preset and name in failed
        runs[p] = (result, "stale: this run failed" if failed_now else _status(name, result, p))
    if runs:
      entries[name] = (exp, runs)
  return entries


def _run_one(exp, config, exp_dir: str, preset: str):
  """Runs one experiment and prints its line; returns its Result, or None if it failed."""
  print(f"[reproduce] {exp.name} ({preset}) -> {exp_dir}", flush=True)
  start = time.time()
  try:
    result = exp.run(config, exp_dir)  # The runner saves result.json.
  except Exception as e:  # pylint: disable=broad-except
    traceback.print_exc()
    print(f"[reproduce] {exp.name}: failed after {(time.time() - start) / 60:.1f} min: "
          f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return None
  done, checked = report.claims_count(result)
  print(f"[reproduce] {exp.name}: {(time.time() - start) / 60:.1f} min, {done}/{checked} "
        "claims reproduced", flush=True)
  return result


def reproduce(names: list[str] | None, preset: str, workdir: str,
              run: bool = True) -> tuple[str, list[str]]:
  """Runs the experiments at ``preset``; returns (report text, names that failed).

  Each runs in ``report.run_dir(workdir, preset, name)``; ``workdir/REPORT.md`` then
  shows every result on disk at each of ``report.REPORT_PRESETS`` (and ``preset``),
  a result from an older config marked stale (``run=False``: only that report). Bad
  input fails before the experiment
  modules are imported (which takes seconds): the input is checked against the module
  names, which are what they register, then against the registry.

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
  fresh, failed = {}, []
  for name in _run_order(names) if run else ():
    result = _run_one(experiments[name], configs[name],
                      report.run_dir(workdir, preset, name), preset)
    if result is None:
      failed.append(name)
    else:
      fresh[name] = result
  entries = _entries(experiments, workdir, preset, fresh, failed)
  text = report.write_report(entries, os.path.join(workdir, "REPORT.md"))
  return text, failed


def main(argv):
  del argv
  runtime.setup()
  try:
    text, failed = reproduce(FLAGS.only, FLAGS.preset, FLAGS.workdir, FLAGS.run)
  except ValueError as e:  # ConfigError included: names, presets, configs, workdir.
    config_lib.die(e)
  print(text.split("\n<a id=")[0].rstrip())  # The summary; the sections are in the file.
  print(f"\nFull report: {os.path.join(FLAGS.workdir, 'REPORT.md')}")
  if failed:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
