"""Benchmark: time to unlearn one task vs time to retrain, for an MLP on split digits.

  python -m experiments.benchmarks.unlearning [--hidden=256,256] [--steps=1500] \
      [--repeats=5] [--forget=0] [--methods=hessian_cg,gradient] \
      [--retrain=scan,loop,loop_k] [--steps_per_call=50] [--newton_steps=N] \
      [--cg_iters=N] [--cg_tol=TOL] [--tiny]

The MLP (hidden widths --hidden, 10 outputs, GELU) is trained on the five split-digits
tasks in sequence on the stage objective (1) (methods/unlearning/objective.py,
objective.lam / objective.mu and the Adam rate mlp.lr from the quick config), each stage
--steps full-batch Adam steps. Then task --forget (0-based; 0 = the oldest, the most
expensive to retrain) is forgotten:

  * retrain oracle: the same Adam stages refitted for tasks forget+1..T from the
    checkpoint theta_forget (the cheapest honest retrain), in up to three forms
    (--retrain), each warmed up (compiled) by an untimed one-stage fit:
      scan    one jitted `lax.scan` of the full-batch steps per stage
              (`methods.unlearning.scan_stage_fitter`): no host transfer, log or
              checkpoint between steps;
      loop    the shared loop `common.train` one step per call, in a fresh workdir
              with its final orbax checkpoint (`loop_stage_fitter(...).fresh()`);
      loop_k  the same with --steps_per_call steps per compiled call.
    Speed-ups are against the fastest of them (the oracle at its best);
  * each method of --methods: `methods.unlearning.unlearn` with the quick config's
    unlearn.newton_steps / grad_steps / cg_iters (or --newton_steps / --cg_iters /
    --cg_tol), compiled, compilation excluded by one untimed warm-up request; the
    timed region ends with `block_until_ready`.

Only matrix-free methods are offered at this size: the Gauss-Newton matrix of an MLP
with d ~ 85k parameters is d^2 ~ 29 GB per task (the stored-curvature methods and the
hybrid are compared in the experiment, at d = 2410).

It prints one markdown row per side: median wall time of --repeats runs [min-max], the
speed-up best retrain / side (> 1: unlearning is faster) and the distance of the output
to the (scan) retrained weights, with the distance of the original model for scale;
then the profile of the CG request: the Hessian-vector products it made (counted by
replaying its solves), the median time of one gradient, one GGN-vector product and one
Adam step, and the speed-up those counts allow. ``--tiny`` trains a width-16 MLP for
10 steps per stage, 1 repeat, and forgets task 4 (``TINY_FORGET``, unless --forget
is given: one later stage to retrain and unlearn), in seconds (the suite's smoke test).
"""

from __future__ import annotations

import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np

from common import config as config_lib
from common import timing
from experiments.benchmarks import machine_line
from experiments.benchmarks import peak_matmul_flops
from experiments.benchmarks import roofline_line

FLAGS = flags.FLAGS
flags.DEFINE_list("hidden", ["256", "256"], "Hidden widths of the MLP.")
flags.DEFINE_integer("steps", 1500, "Adam steps per task stage (>= 1).")
flags.DEFINE_integer("repeats", 5, "Timed runs per side (>= 1); medians are reported.")
flags.DEFINE_integer("forget", 0, "0-based index of the task to forget (0..3).")
flags.DEFINE_list("methods", ["hessian_cg", "gradient"],
                  "Unlearning methods (matrix-free only: hessian_cg, gradient).")
flags.DEFINE_list("retrain", ["scan", "loop", "loop_k"],
                  "Forms of the retrain oracle: scan, loop, loop_k.")
flags.DEFINE_integer("steps_per_call", 50, "Steps per compiled call of loop_k (>= 2).")
flags.DEFINE_integer("newton_steps", 0, "Newton steps per stage (0: the quick config's).")
flags.DEFINE_integer("cg_iters", 0, "CG iterations at most (0: the quick config's).")
flags.DEFINE_float("cg_tol", 0.0, "CG's relative tolerance (0: the library default, "
                   "hessian.default_cg_tol).")
flags.DEFINE_integer("seed", 0, "Seed of the split, the initialisation and the loop.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: hidden 16, 10 steps per stage, "
                  "1 repeat, task 4 forgotten unless --forget is given.")

PEERS = ()  # the peer is retraining with our own loop

ALLOWED = ("hessian_cg", "gradient")
RETRAIN = ("scan", "loop", "loop_k")
NUM_TASKS = 5
# --tiny's task to forget: the last one whose forgetting is not free, so that one stage
# is retrained and unlearned (task 1 has four, each compiling its own CG solve in
# `count_products`); every code path runs the same.
TINY_FORGET = NUM_TASKS - 2


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
  for name, allowed in (("methods", ALLOWED), ("retrain", RETRAIN)):
    values = getattr(FLAGS, name)
    if not values or any(v not in allowed for v in values):
      config_lib.die(f"--{name} must be from {', '.join(allowed)}, got {values}")
  if FLAGS.steps_per_call < 2 or FLAGS.newton_steps < 0 or FLAGS.cg_iters < 0:
    config_lib.die(f"--steps_per_call must be >= 2 and --newton_steps, --cg_iters >= 0, "
                   f"got {FLAGS.steps_per_call}, {FLAGS.newton_steps}, {FLAGS.cg_iters}")
  if not 0.0 <= FLAGS.cg_tol < 1.0:
    config_lib.die(f"--cg_tol must be in [0, 1), got {FLAGS.cg_tol}")
  return rest


def _fmt(times) -> str:
  return f"{np.median(times):.3f} [{min(times):.3f}-{max(times):.3f}]"


def _timed(fn, *args, **kwargs):
  start = time.perf_counter()
  out = fn(*args, **kwargs)
  jax.block_until_ready(jax.tree.leaves(out))
  return out, time.perf_counter() - start


def setup(config, workdir: str, k: int) -> dict:
  """The trained sequence, its retained tasks, the retrain fitters and the requests."""
  import optax  # pylint: disable=import-outside-toplevel
  from common.data import digits  # pylint: disable=import-outside-toplevel
  from common.models.mlp import MLP  # pylint: disable=import-outside-toplevel
  from methods import unlearning as ul  # pylint: disable=import-outside-toplevel

  split, _ = digits.split_digits(config.data.test_fraction, config.seed)
  tasks = ul.pad_tasks([(t.flat.astype(np.float32), t.labels)
                        for t in digits.pair_tasks(split)])
  net = MLP((*config.mlp.hidden, 10))
  obj = ul.Objective(net.apply, "softmax_ce", config.objective.lam, config.objective.mu)
  adam = optax.adam(config.mlp.lr)
  scan = ul.scan_stage_fitter(obj, adam, int(config.train.num_steps))
  loop = lambda k_: ul.loop_stage_fitter(
      obj, adam, {**dict(config.train.items()), "steps_per_call": k_}, workdir).fresh()
  fitters = {"scan": scan, "loop": loop(1), "loop_k": loop(FLAGS.steps_per_call)}
  start = time.perf_counter()
  anchors = ul.train_sequence(scan, net.init(jax.random.PRNGKey(config.seed),
                                             tasks[0].x[:1]), tasks)
  jax.block_until_ready(anchors)
  print(f"parameters d = {ul.objective.num_params(anchors[-1])}; original sequence trained "
        f"in {time.perf_counter() - start:.1f} s", flush=True)
  plans = {m: ul.method_plan(m, NUM_TASKS, linear=False) for m in config.methods}
  states = ul.build_states(obj, anchors, tasks, plans)
  u = config.unlearn
  cfg = ul.UnlearnConfig(grad_steps=u.grad_steps, newton_steps=u.newton_steps,
                         smoothness="power", cg_iters=u.cg_iters,
                         cg_tol=FLAGS.cg_tol or None)
  retained, key = ul.forget_task(tasks, k), jax.random.PRNGKey(config.seed)
  requests = {m: (lambda m=m: ul.unlearn(obj, states[m], retained, k, plans[m],
                                         config=cfg, key=key)) for m in plans}
  return dict(obj=obj, tasks=tasks, retained=retained, anchors=anchors, cfg=cfg,
              steps=int(config.train.num_steps),
              fitters={r: fitters[r] for r in FLAGS.retrain}, requests=requests)


def measure(s: dict, k: int, repeats: int) -> tuple[dict, dict, object]:
  """({side: [seconds per repeat]}, {method: Unlearned}, theta'_T of the scan oracle)."""
  from methods import unlearning as ul  # pylint: disable=import-outside-toplevel

  for fit in s["fitters"].values():  # warm-up: compile each oracle's programs, untimed
    jax.block_until_ready(fit(s["anchors"][k], s["retained"][k + 1]))
  for request in s["requests"].values():
    request()
  sides = [f"retrain {r}" for r in s["fitters"]] + list(s["requests"])
  times, outputs, targets = {side: [] for side in sides}, {}, {}
  for r in range(repeats):
    for name, fit in s["fitters"].items():
      targets[name], seconds = _timed(ul.baselines.retrain, fit, s["anchors"],
                                      s["retained"], k)
      times[f"retrain {name}"].append(seconds)
    for m, request in s["requests"].items():
      outputs[m], seconds = _timed(request)
      times[m].append(seconds)
    print(f"  repeat {r + 1}: " + ", ".join(f"{n} {t[-1]:.3f}s" for n, t in times.items()),
          flush=True)
  return times, outputs, targets.get("scan", next(iter(targets.values())))


def count_products(s: dict, k: int) -> list[int]:
  """Hessian-vector products per stage of the "hessian_cg" request (cg_ggn stages),
  counted by replaying its Newton steps with a counting product (untimed)."""
  from jax.flatten_util import ravel_pytree  # pylint: disable=import-outside-toplevel
  from methods import unlearning as ul  # pylint: disable=import-outside-toplevel
  from methods.unlearning import hessian  # pylint: disable=import-outside-toplevel

  obj, cfg, anchors, count, per_stage = s["obj"], s["cfg"], s["anchors"], [0], []
  prev = anchors[k]  # stage k (forgotten whole) is skipped
  for j in range(k + 1, NUM_TASKS):
    task, start, before = s["retained"][j], anchors[j + 1], count[0]
    product = hessian.hvp(obj, start, task, gauss_newton=True)

    def counted(v, product=product):
      jax.debug.callback(lambda: count.__setitem__(0, count[0] + 1))
      return product(v)

    solve = jax.jit(lambda g, counted=counted: hessian.cg_solve(
        counted, g, obj.strong_convexity, cfg.cg_iters, cfg.cg_tol))
    flat, unravel = ravel_pytree(start)
    for _ in range(cfg.newton_steps):
      flat = flat - solve(ravel_pytree(ul.stage_grad(obj, unravel(flat), prev, task))[0])
    jax.effects_barrier()
    prev = unravel(flat)
    per_stage.append(count[0] - before)
  return per_stage


def profile(s: dict, k: int, times: dict) -> None:
  """Prints the CG request's cost arithmetic: counted products x their measured cost."""
  from methods import unlearning as ul  # pylint: disable=import-outside-toplevel
  from methods.unlearning import hessian  # pylint: disable=import-outside-toplevel

  obj, task = s["obj"], s["tasks"][k + 1]
  theta, anchor = s["anchors"][k + 2], s["anchors"][k + 1]
  grad = jax.jit(lambda p: ul.stage_grad(obj, p, anchor, task))
  g = jax.flatten_util.ravel_pytree(grad(theta))[0]
  # One CG iteration as the request runs it: the marginal cost of 40 more iterations
  # (tol 0) of the compiled solve, so the linearization and the loop are amortised.
  solve = jax.jit(lambda p, g, n: hessian.cg_solve(
      hessian.hvp(obj, p, task, gauss_newton=True), g, obj.strong_convexity, n, 0.0),
                  static_argnums=2)
  t_grad = timing.median_seconds(lambda: grad(theta), 20)
  t_hvp = max(1e-9, (timing.median_seconds(lambda: solve(theta, g, 50), 7)
                     - timing.median_seconds(lambda: solve(theta, g, 10), 7)) / 40)
  stages, steps = NUM_TASKS - k - 1, s["cfg"].newton_steps
  per_stage = count_products(s, k)
  grads = stages * (steps + 1)  # each Newton step's gradient + the residual r_j
  print(f"\nprofile of the hessian_cg request: {stages} stages x {steps} Newton steps; "
        f"{sum(per_stage)} GGN-vector products (per stage {per_stage}, i.e. "
        f"{sum(per_stage) / (stages * steps):.1f} CG iterations per Newton step) and "
        f"{grads} gradients")
  retrain = {n: np.median(t) for n, t in times.items() if n.startswith("retrain")}
  best = min(retrain, key=retrain.get)
  t_step = retrain[best] / (stages * s["steps"])
  model = sum(per_stage) * t_hvp + grads * t_grad
  print(f"one gradient {1e3 * t_grad:.3f} ms, one CG iteration (a GGN-vector product) "
        f"{1e3 * t_hvp:.3f} ms "
        f"({t_hvp / t_grad:.2f} gradients), one Adam step of {best} "
        f"{1e3 * t_step:.3f} ms ({t_step / t_grad:.2f} gradients)")
  print(f"products x cost: {model:.3f} s per request (measured "
        f"{np.median(times['hessian_cg']):.3f} s); the speed-up these counts allow: "
        f"{stages * s['steps']} steps x {1e3 * t_step:.3f} ms / {model:.3f} s = "
        f"{retrain[best] / model:.1f}")
  n = int(task.x.shape[0])
  weights = ul.objective.num_params(theta) - sum(np.size(l) for l in jax.tree.leaves(theta)
                                                 if np.ndim(l) == 1)
  peak = peak_matmul_flops(256 if FLAGS.tiny else 2048)["best"]
  print(roofline_line("Adam step (6 n W FLOPs)", seconds=t_step, flops=6 * n * weights,
                      peak_flops=peak))
  print(roofline_line("GGN-vector product (8 n W FLOPs)", seconds=t_hvp,
                      flops=8 * n * weights, peak_flops=peak))


def report(s: dict, k: int, times: dict, outputs: dict, target) -> None:
  """The markdown table: medians, speed-ups against the fastest oracle, distances."""
  from methods.unlearning import metrics  # pylint: disable=import-outside-toplevel

  retrain = {n: np.median(t) for n, t in times.items() if n.startswith("retrain")}
  base = min(retrain.values())
  print()
  print("| side | median s [min-max] | speed-up best retrain/side | "
        "||theta - theta_retrain|| |")
  print("|---|---:|---:|---:|")
  for name in retrain:
    print(f"| {name} (tasks {k + 2}..5) | {_fmt(times[name])} | {base / retrain[name]:.2f} | "
          f"{'0' if name == 'retrain scan' else '-'} |")
  for m, out in outputs.items():
    dist = np.sqrt(metrics.squared_distance(out.params, target))
    print(f"| {m} | {_fmt(times[m])} | {base / np.median(times[m]):.1f} | {dist:.3g} |")
  dist0 = np.sqrt(metrics.squared_distance(s["anchors"][-1], target))
  print(f"| original model (no unlearning) | - | - | {dist0:.3g} |")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # the loop's orbax saves log at INFO
  from experiments.configs import unlearning as configs  # pylint: disable=import-outside-toplevel

  print(machine_line(PEERS), flush=True)
  hidden, steps, repeats = (((16,), 10, 1) if FLAGS.tiny else
                            (tuple(int(h) for h in FLAGS.hidden), FLAGS.steps, FLAGS.repeats))
  config = configs.get_config("quick")
  config.mlp.hidden = hidden
  config.train.num_steps = config.train.log_every = steps
  config.seed = FLAGS.seed
  config.methods = tuple(FLAGS.methods)
  config.unlearn.newton_steps = FLAGS.newton_steps or config.unlearn.newton_steps
  config.unlearn.cg_iters = FLAGS.cg_iters or config.unlearn.cg_iters
  k = TINY_FORGET if FLAGS.tiny and not FLAGS["forget"].present else FLAGS.forget
  u = config.unlearn
  print(f"# unlearning benchmark: MLP {config.mlp.hidden}, {steps} Adam steps/stage, "
        f"forget task {k + 1} of 5, repeats={repeats}, seed={FLAGS.seed}; Newton steps "
        f"{u.newton_steps}, CG iterations <= {u.cg_iters}, CG tol "
        f"{FLAGS.cg_tol or 'default'}, gradient steps {u.grad_steps}; backend "
        f"{jax.default_backend()}", flush=True)
  with tempfile.TemporaryDirectory() as workdir, jax.enable_x64(False):
    s = setup(config, workdir, k)
    times, outputs, target = measure(s, k, repeats)
    report(s, k, times, outputs, target)
    if "hessian_cg" in outputs:
      profile(s, k, times)


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
