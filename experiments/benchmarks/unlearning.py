"""Benchmark: time to unlearn one task vs time to retrain, for an MLP on split digits.

  python -m experiments.benchmarks.unlearning [--hidden=256,256] [--steps=1500] \
      [--repeats=3] [--forget=0] [--methods=hessian_cg,gradient] [--tiny]

The MLP (hidden widths --hidden, 10 outputs, GELU) is trained on the five split-digits
tasks in sequence on the stage objective (1) (methods/unlearning/objective.py,
objective.lam / objective.mu and the Adam rate mlp.lr from the quick config), each stage
--steps full-batch Adam steps on the shared loop `common.train`
(`methods.unlearning.loop_stage_fitter`). Then task --forget (0-based; 0 = the oldest, the most expensive to
retrain) is forgotten:

  * retrain oracle: the same Adam stages refitted for tasks forget+1..T from the
    checkpoint theta_forget (the cheapest honest retrain); each stage on the shared loop
    in a fresh workdir (so its final orbax checkpoint is part of its cost);
  * each method of --methods: `methods.unlearning.unlearn` with the quick config's
    unlearn.newton_steps / grad_steps / cg_iters, jit-compiled, compilation excluded by one
    untimed warm-up request; the timed region ends with `block_until_ready`.

Only matrix-free methods are offered at this size: the Gauss-Newton matrix of an MLP
with d ~ 85k parameters is d^2 ~ 29 GB per task (the stored-curvature methods and the
hybrid are compared in the experiment, at d = 2410).

It prints one markdown row per side: median wall time of --repeats runs [min-max], the
speed-up retrain/method (> 1: unlearning is faster) and the distance of the method's
output to the retrained weights, with the distance of the original model for scale.
``--tiny`` trains a width-16 MLP for 10 steps per stage, 1 repeat, in seconds (the
suite's smoke test).
"""

from __future__ import annotations

import tempfile
import time

from absl import app
from absl import flags
import jax
import numpy as np

from common import config as config_lib
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_list("hidden", ["256", "256"], "Hidden widths of the MLP.")
flags.DEFINE_integer("steps", 1500, "Adam steps per task stage (>= 1).")
flags.DEFINE_integer("repeats", 3, "Timed runs per side (>= 1); medians are reported.")
flags.DEFINE_integer("forget", 0, "0-based index of the task to forget (0..3).")
flags.DEFINE_list("methods", ["hessian_cg", "gradient"],
                  "Unlearning methods (matrix-free only: hessian_cg, gradient).")
flags.DEFINE_integer("seed", 0, "Seed of the split, the initialisation and the loop.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: hidden 16, 10 steps per stage, "
                  "1 repeat.")

PEERS = ()  # the peer is retraining with our own loop

ALLOWED = ("hessian_cg", "gradient")
NUM_TASKS = 5


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing whose errors (and bad values) are one-line messages."""
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  try:
    hidden = [int(h) for h in FLAGS.hidden]
  except ValueError:
    config_lib.die(f"--hidden must be positive integers, got {FLAGS.hidden}")
  if not hidden or min(hidden) < 1:
    config_lib.die(f"--hidden must be positive integers, got {FLAGS.hidden}")
  if FLAGS.steps < 1 or FLAGS.repeats < 1:
    config_lib.die(f"--steps and --repeats must be >= 1, got {FLAGS.steps}, {FLAGS.repeats}")
  if not 0 <= FLAGS.forget <= 3:
    config_lib.die(f"--forget must be in 0..3 (forgetting the last task is free), "
                   f"got {FLAGS.forget}")
  bad = [m for m in FLAGS.methods if m not in ALLOWED]
  if bad or not FLAGS.methods:
    config_lib.die(f"--methods must be from {', '.join(ALLOWED)}, got {FLAGS.methods}")
  return rest


def _fmt(times) -> str:
  return f"{np.median(times):.3f} [{min(times):.3f}-{max(times):.3f}]"


def _timed(fn, *args, **kwargs):
  start = time.perf_counter()
  out = fn(*args, **kwargs)
  jax.block_until_ready(jax.tree.leaves(out))
  return out, time.perf_counter() - start


def train_mlp(config, workdir: str):
  """(objective, the fitter, the split-digits train tasks, theta_0..theta_T) of the MLP."""
  import optax  # pylint: disable=import-outside-toplevel
  from common.data import digits  # pylint: disable=import-outside-toplevel
  from common.models.mlp import MLP  # pylint: disable=import-outside-toplevel
  from methods import unlearning as ul  # pylint: disable=import-outside-toplevel

  split, _ = digits.split_digits(config.data.test_fraction, config.seed)
  tasks = ul.pad_tasks([(t.flat.astype(np.float32), t.labels)
                        for t in digits.pair_tasks(split)])
  net = MLP((*config.mlp.hidden, 10))
  obj = ul.Objective(net.apply, "softmax_ce", config.objective.lam, config.objective.mu)
  fit = ul.loop_stage_fitter(obj, optax.adam(config.mlp.lr), config.train, workdir)
  init = net.init(jax.random.PRNGKey(config.seed), tasks[0].x[:1])
  return obj, fit, tasks, ul.train_sequence(fit, init, tasks)


def measure(config, workdir: str, k: int, repeats: int) -> tuple[dict, dict, object, tuple]:
  """({side: [seconds per repeat]}, {method: Unlearned}, theta'_T, anchors)."""
  from methods import unlearning as ul  # pylint: disable=import-outside-toplevel

  start = time.perf_counter()
  obj, fit, tasks, anchors = train_mlp(config, workdir)
  print(f"parameters d = {ul.objective.num_params(anchors[-1])}; original sequence trained "
        f"in {time.perf_counter() - start:.1f} s", flush=True)
  plans = {m: ul.method_plan(m, NUM_TASKS, linear=False) for m in config.methods}
  states = ul.build_states(obj, anchors, tasks, plans)
  retained, key = ul.forget_task(tasks, k), jax.random.PRNGKey(config.seed)
  u = config.unlearn
  cfg = ul.UnlearnConfig(grad_steps=u.grad_steps, newton_steps=u.newton_steps,
                         smoothness="power", cg_iters=u.cg_iters)
  request = lambda m: ul.unlearn(obj, states[m], retained, k, plans[m], config=cfg, key=key)
  for m in plans:  # warm-up: compilation, untimed
    request(m)
  times, outputs = {"retrain": [], **{m: [] for m in plans}}, {}
  for r in range(repeats):
    target, seconds = _timed(ul.baselines.retrain, fit.fresh(), anchors, retained, k)
    times["retrain"].append(seconds)
    for m in plans:
      outputs[m], seconds = _timed(request, m)
      times[m].append(seconds)
    print(f"  repeat {r + 1}: " + ", ".join(f"{s} {t[-1]:.3f}s" for s, t in times.items()),
          flush=True)
  return times, outputs, target, anchors


def main(argv):
  del argv
  from experiments.configs import unlearning as configs  # pylint: disable=import-outside-toplevel
  from methods.unlearning import metrics  # pylint: disable=import-outside-toplevel

  print(machine_line(PEERS), flush=True)
  hidden, steps, repeats = (((16,), 10, 1) if FLAGS.tiny else
                            (tuple(int(h) for h in FLAGS.hidden), FLAGS.steps, FLAGS.repeats))
  config = configs.get_config("quick")
  config.mlp.hidden = hidden
  config.train.num_steps = config.train.log_every = steps
  config.seed = FLAGS.seed
  config.methods = tuple(FLAGS.methods)
  k = FLAGS.forget
  print(f"# unlearning benchmark: MLP {config.mlp.hidden}, {steps} Adam steps/stage, "
        f"forget task {k + 1} of 5, repeats={repeats}, seed={FLAGS.seed}; backend "
        f"{jax.default_backend()}", flush=True)
  with tempfile.TemporaryDirectory() as workdir, jax.enable_x64(False):
    times, outputs, target, anchors = measure(config, workdir, k, repeats)
  base = np.median(times["retrain"])
  print()
  print("| side | median s [min-max] | speed-up retrain/side | ||theta - theta_retrain|| |")
  print("|---|---:|---:|---:|")
  print(f"| retrain (tasks {k + 2}..5) | {_fmt(times['retrain'])} | 1.00 | 0 |")
  for m, out in outputs.items():
    dist = np.sqrt(metrics.squared_distance(out.params, target))
    print(f"| {m} | {_fmt(times[m])} | {base / np.median(times[m]):.1f} | {dist:.3g} |")
  dist0 = np.sqrt(metrics.squared_distance(anchors[-1], target))
  print(f"| original model (no unlearning) | - | - | {dist0:.3g} |")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
