"""Benchmark: steps/s and compiled peak memory of MeZO, LOZO, AGZO and first order on
one model and batch, and the AGZO/MeZO gradient-cosine ratio, in one run.

  python -m experiments.benchmarks.zeroth_order [--lm_workdir=results/lm]
      [--ranks=1,4,16] [--steps=20] [--repeats=5] [--draws=32] [--tiny]

The model is the shared LM of `common.lm` with preset `--lm_preset`; with
--lm_workdir holding its trained checkpoint (e.g. the zeroth_order experiment's
workdir/lm) that model is restored (if the checkpoint is missing it is trained there
first), otherwise the benchmark uses freshly initialised weights (speed and memory do
not depend on the weights; the cosine ratio does, so it is printed only for a restored
model). Every method tunes the same parameters as the quick experiment (`--trainable`)
on the same English vs code batch (`methods.zeroth_order.task`), with the optax chains
of `methods.zeroth_order.recipes` (SGD; first order also with Adam).

For each method: the step is jitted with donated params and optimizer state, lowered
and compiled once (compilation excluded), `memory_analysis()` gives the peak (arguments
+ outputs - aliased + temporaries), then `repeats` timed runs of `steps` steps each
(ending in block_until_ready) give the median steps/s. Ratios are against MeZO,
measured in the same run. Forward passes per step: MeZO, LOZO, one-sided AGZO 2;
first order 1 forward + 1 backward. ``--tiny`` sets the values of ``TINY`` (the LM's tiny
preset, rank 1, 1 x 2 steps, 2 draws), in seconds (the suite's smoke test).
"""

from __future__ import annotations

import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import lm as lm_lib
from common.models import transformer
from experiments.benchmarks import machine_line
from experiments.configs import zeroth_order as zo_configs
import methods.zeroth_order as zo
from methods.zeroth_order import recipes
from methods.zeroth_order import task as task_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("lm_workdir", "", "Workdir of a trained LM checkpoint (empty: random init).")
flags.DEFINE_enum("lm_preset", "quick", ["quick", "tiny", "paper"], "LM config preset.")
flags.DEFINE_list("ranks", ["1", "4", "16"], "AGZO ranks.")
flags.DEFINE_integer("steps", 20, "Steps per timed run.")
flags.DEFINE_integer("repeats", 5, "Timed runs per method (median reported).")
flags.DEFINE_integer("draws", 32, "Draws for the cosine ratio.")
flags.DEFINE_enum("trainable", "linear", ["linear", "all"], "Tuned parameters.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: the values of TINY, which override "
                  "the flags above.")

PEERS = ()  # the peers are MeZO and first-order training, in our own code
# --tiny's flag values: every method at sizes that run in seconds.
TINY = dict(lm_preset="tiny", ranks=["1"], steps=2, repeats=1, draws=2)


def _model(lm_config):
  """(model, full params, restored?) of the LM."""
  if FLAGS.lm_workdir:
    trained = lm_lib.load_or_train(lm_config, FLAGS.lm_workdir)
    return trained.model, trained.params, True
  model = transformer.Transformer(lm_lib.model_config(lm_config))
  return model, transformer.init_params(model, jax.random.PRNGKey(0)), False


def _optimizer(name: str, losses, params, config):
  lr = recipes.learning_rate("mezo" if name.startswith("first_order") else name, params,
                             config.fine_tune)
  key = jax.random.PRNGKey(1)
  if name == "first_order_adam":
    return recipes.optimizer("first_order", losses.loss_fn, losses.loss_and_taps,
                             config.fine_tune.lr_first_order, config.estimator, key=key)
  if name == "first_order":
    return optax.chain(zo.first_order(losses.loss_fn), optax.sgd(lr))
  return recipes.optimizer(name, losses.loss_fn, losses.loss_and_taps, lr, config.estimator,
                           key=key)


def _time(tx, params, batch) -> tuple[float, float, float, float]:
  """(median, min, max steps/s, peak MiB) of the donating jitted step."""
  p = jax.tree.map(jnp.copy, params)
  state = tx.init(p)
  step = zo.make_step(tx, donate=True).lower(p, state, batch).compile()
  memory = recipes.peak_bytes(step) / 2**20
  p, state = step(p, state, batch)  # warm-up
  times = []
  for _ in range(FLAGS.repeats):
    t0 = time.perf_counter()
    for _ in range(FLAGS.steps):
      p, state = step(p, state, batch)
    jax.block_until_ready(p)
    times.append(time.perf_counter() - t0)
  sps = [FLAGS.steps / t for t in times]
  return statistics.median(sps), min(sps), max(sps), memory


def _cosines(losses, params, batch, names, config) -> dict[str, float]:
  grads = jax.jit(jax.grad(losses.loss_fn))(params, batch)
  out = {}
  for name in names:
    est = recipes.estimator(name, losses.loss_fn, losses.loss_and_taps, config.estimator)
    c = jax.jit(lambda p, b, g, est=est: zo.alignment_draws(
        est, p, b, g, jax.random.PRNGKey(7), FLAGS.draws))(params, batch, grads)["overall"]
    out[name] = float(np.mean(np.asarray(c)))
  return out


def _print_table(rows: dict, cos: dict) -> None:
  mezo_sps, mezo_mem = rows["mezo"][0], rows["mezo"][3]
  print("\n| method | steps/s median [min-max] | forward passes/s | speed vs MeZO | peak MiB | "
        "memory vs MeZO | mean cosine | cosine vs MeZO |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|")
  for name, (med, lo, hi, mem) in rows.items():
    fwd = med * (1 if name.startswith("first_order") else 2)
    c = cos.get(name)
    c_txt = (f"{c:.2e} | {c / cos['mezo']:.2f}" if c is not None else "- | -")
    print(f"| {name} | {med:.1f} [{lo:.1f}-{hi:.1f}] | {fwd:.1f} | {med / mezo_sps:.2f} | "
          f"{mem:.1f} | {mem / mezo_mem:.2f} | {c_txt} |")


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  if FLAGS.tiny:
    for name, value in TINY.items():
      setattr(FLAGS, name, value)
  if FLAGS.steps < 1 or FLAGS.repeats < 1 or FLAGS.draws < 1:
    raise app.UsageError("--steps, --repeats and --draws must be >= 1")
  ranks = [int(r) for r in FLAGS.ranks]
  config = zo_configs.get_config("quick")
  lm_config = lm_lib.get_config(FLAGS.lm_preset)
  model, full, restored = _model(lm_config)
  params, frozen = task_lib.split_trainable(full, FLAGS.trainable)
  losses = task_lib.verbaliser_losses(model, [ord(v) for v in config.task.verbalisers])
  task = task_lib.make_task(lm_config.validation_fraction)
  batch = task_lib.labelled_batch(task.train, 0, 0, config.train.batch_size,
                                  config.task.window, frozen)
  print(f"backend {jax.devices()[0].platform}; model "
        f"{transformer.num_params(full) / 1e6:.2f}M params "
        f"({'trained' if restored else 'random init'}), tuning {FLAGS.trainable} "
        f"({transformer.num_params(params) / 1e6:.2f}M); batch {config.train.batch_size} x "
        f"{config.task.window} bytes; {FLAGS.repeats} x {FLAGS.steps} steps")
  agzo = [f"agzo_r{r}" for r in ranks]
  names = ["mezo", "lozo", *agzo, "first_order", "first_order_adam"]
  rows = {name: _time(_optimizer(name, losses, params, config), params, batch)
          for name in names}
  cos = _cosines(losses, params, batch, ["mezo", *agzo], config) if restored else {}
  _print_table(rows, cos)


if __name__ == "__main__":
  app.run(main)
