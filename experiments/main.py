"""Runs one experiment from a config file.

  python -m experiments.main --config=experiments/configs/kernel_ridge.py:quick \
      --workdir=/tmp/kernel_ridge [--config.ns="(500,1000)"] [--config.train.num_steps=10]

The config file is executed once; its ``method`` names the registered experiment,
whose runner (``common.report.register``) validates the config, runs it in the
workdir and saves ``workdir/result.json`` atomically. A missing file, a bad preset,
an unknown override key (dotted keys reach into sub-configs), an invalid value, a
failed ``preflight`` check of the config module (I/O: an unreachable server, an
unreadable data file) or a workdir that is a file or not writable stops with a one-line
error (exit status 2) before any work.

Multi-process runs (several hosts, or several processes on one machine) start every
process with the same command plus the launcher's flags, which go to
``common.sharding.maybe_initialize_distributed`` before anything touches a device:

  python -m experiments.main --config=... --workdir=DIR \
      --coordinator_address=HOST0:1234 --num_processes=2 --process_id=0   # and =1

On Cloud TPU, SLURM and Open MPI ``--distributed`` alone auto-detects all three.
They are flags, not config keys: they differ between the processes of one run,
while the config (and so its fingerprint) must not. A process whose experiment raises
prints the traceback and exits at once (status 1) rather than waiting in jax's
shutdown barrier for its peers.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback

from absl import app
from absl import flags
import jax
from ml_collections import config_flags
import ml_collections

from common import config as config_lib
from common import report
from common import sharding
from common import trials
from experiments import registry
from experiments import runtime

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Directory for outputs, checkpoints and results.")
flags.DEFINE_bool("distributed", False,
                  "Start jax.distributed (multi-process run); the launcher flags below may "
                  "be left out on Cloud TPU, SLURM and Open MPI, which are auto-detected.")
flags.DEFINE_string("coordinator_address", None,
                    "host:port of process 0's coordinator (implies --distributed).")
flags.DEFINE_integer("num_processes", None, "Number of processes (implies --distributed).")
flags.DEFINE_integer("process_id", None,
                     "This process's id, 0..num_processes-1 (implies --distributed).")
flags.DEFINE_list("local_device_ids", None,
                  "Comma-separated local device ids this process uses, e.g. one GPU per "
                  "process (implies --distributed).")
CONFIG_HELP = "Path to a config file, with :preset (e.g. experiments/configs/lm.py:quick)."


def _split_config_arg(argv: list[str]) -> tuple[str | None, list[str]]:
  """(the --config=path[:preset] value, argv without it)."""
  spec, rest = None, []
  for arg in argv:
    if arg.startswith("--config="):
      spec = arg.split("=", 1)[1]
    else:
      rest.append(arg)
  return spec, rest


def load_config(spec: str) -> ml_collections.ConfigDict:
  """Executes the config file of ``path[:preset]`` once and returns its config."""
  path, _, preset = spec.partition(":")
  if not os.path.isfile(path):
    config_lib.die(f"config file not found: {path}")
  module_spec = importlib.util.spec_from_file_location("_experiment_config", path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
    return module.get_config(preset or None)
  except config_lib.ConfigError as e:
    config_lib.die(e)


def _check_override(config: ml_collections.ConfigDict, arg: str) -> None:
  name = arg.split("=", 1)[0]
  node, path = config, name[len("--config."):].split(".")
  for i, part in enumerate(path):
    where = ".".join(path[:i])
    if not isinstance(node, ml_collections.ConfigDict):
      config_lib.die(f"unknown config key {'.'.join(path[:i + 1])!r} in {name}: "
                     f"config.{where} is a value, not a sub-config")
    if part not in node:
      config_lib.die(f"unknown config key {'.'.join(path[:i + 1])!r} in {name}; "
                     f"valid keys{' of config.' + where if where else ''}: "
                     f"{', '.join(sorted(node.keys()))}")
    node = node[part]


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing that turns config errors into one-line messages."""
  spec, argv = _split_config_arg(argv)
  if spec is None:
    if any(a in ("--help", "--helpfull", "-h") for a in argv):
      return FLAGS(argv)
    config_lib.die("--config is required, e.g. --config=experiments/configs/kernel_ridge.py:quick")
  config = load_config(spec)
  for arg in argv:
    if arg.startswith("--config."):
      _check_override(config, arg)
  config_flags.DEFINE_config_dict("config", config, CONFIG_HELP, lock_config=True,
                                  sys_argv=argv)
  try:
    rest = FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    config_lib.die(str(e).strip().splitlines()[-1] if str(e).strip() else repr(e))
  if len(rest) > 1:
    config_lib.die(f"unexpected positional arguments: {' '.join(rest[1:])}")
  if not FLAGS.workdir:
    config_lib.die("--workdir is required")
  launcher_args()  # Bad launcher flags stop here, before any work.
  return rest


def launcher_args() -> dict:
  """The launcher flags as ``maybe_initialize_distributed`` arguments, checked.

  A bad value (a process id out of range, an address without port, a device id
  that is not an int) dies with one line (exit status 2).
  """
  ids = FLAGS.local_device_ids
  try:
    if ids is not None:
      ids = [int(i) for i in ids]
  except ValueError:
    config_lib.die(f"--local_device_ids={','.join(ids)} must be comma-separated ints")
  args = dict(coordinator_address=FLAGS.coordinator_address,
              num_processes=FLAGS.num_processes, process_id=FLAGS.process_id,
              local_device_ids=ids)
  try:
    sharding.check_launcher_args(**args)
  except (TypeError, ValueError) as e:
    config_lib.die(e)
  return args


def run_experiment(config, workdir: str) -> report.Result:
  """Runs the registered experiment ``config.method`` in ``workdir`` (through its runner).

  A bad config or workdir dies with one line (exit status 2) before any work. Only
  the experiment that runs is imported (importing them all takes seconds); a method
  that names none imports them all, for the error that lists the registered ones.
  """
  if config.method in registry.experiment_modules():
    importlib.import_module(f"experiments.{config.method}")
  else:
    registry.load_all()
  try:
    experiment = report.get(config.method)
    config_module = registry.config_module(config.method)
    config_module.validate(config)
    if hasattr(config_module, "preflight"):  # checks that need I/O (a server, a file)
      config_module.preflight(config)
    trials.ensure_directory(workdir, "--workdir")
  except (config_lib.ConfigError, ValueError) as e:
    config_lib.die(e)
  return experiment.run(config, workdir)


def main(argv):
  del argv
  runtime.setup()  # before the distributed runtime: it touches no device
  args = launcher_args()
  if FLAGS.distributed or any(value is not None for value in args.values()):
    try:
      sharding.maybe_initialize_distributed(True, **args)
    except ValueError as e:  # A launcher value missing and not auto-detected.
      config_lib.die(e)
  try:
    result = run_experiment(FLAGS.config, FLAGS.workdir)
  except Exception:  # pylint: disable=broad-except
    if not jax.distributed.is_initialized():
      raise
    # A normal exit would wait in jax's shutdown barrier for the other processes
    # (minutes); exit now so the launcher sees the failure and stops the rest.
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)  # pylint: disable=protected-access
  name = FLAGS.config.method
  print(report.render_report({name: (report.get(name), {FLAGS.config.preset: (result, "")})}))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
