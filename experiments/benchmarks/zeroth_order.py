"""Benchmark: steps/s and compiled peak memory of MeZO, LOZO, AGZO and first order on
one model and batch, and the AGZO/MeZO gradient-cosine ratio, in one run.

  python -m experiments.benchmarks.zeroth_order [--lm_workdir=results/lm]
      [--ranks=1,4,16] [--steps=20] [--repeats=5] [--draws=32]

The model is the LM of `experiments/configs/lm.py:<--lm_preset>`; with --lm_workdir
holding its trained checkpoint (e.g. the zeroth_order experiment's workdir/lm) that
model is restored (if the checkpoint is missing it is trained there first), otherwise
the benchmark uses freshly initialised weights (speed and memory do not depend on the
weights; the cosine ratio does, so it is printed only for a restored model). Every method
tunes the same parameters as the quick experiment (`--trainable`) on the same English
vs code batch (`experiments/zeroth_order.py`), with an optax SGD step (first order
also with Adam).

For each method: the step is jitted with donated params and optimizer state, lowered
and compiled once (compilation excluded), `memory_analysis()` gives the peak (arguments
+ outputs - aliased + temporaries), then `repeats` timed runs of `steps` steps each
(ending in block_until_ready) give the median steps/s. Ratios are against MeZO,
measured in the same run. Forward passes per step: MeZO, LOZO, one-sided AGZO 2;
first order 1 forward + 1 backward.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.models import transformer
from experiments import lm as lm_experiment
from experiments import zeroth_order as ex
from experiments.configs import lm as lm_configs
from experiments.configs import zeroth_order as zo_configs
import methods.zeroth_order as zo

FLAGS = flags.FLAGS
flags.DEFINE_string("lm_workdir", "", "Workdir of a trained LM checkpoint (empty: random init).")
flags.DEFINE_enum("lm_preset", "quick", ["quick", "tiny", "paper"], "LM config preset.")
flags.DEFINE_list("ranks", ["1", "4", "16"], "AGZO ranks.")
flags.DEFINE_integer("steps", 20, "Steps per timed run.")
flags.DEFINE_integer("repeats", 5, "Timed runs per method (median reported).")
flags.DEFINE_integer("draws", 32, "Draws for the cosine ratio.")
flags.DEFINE_enum("trainable", "linear", ["linear", "all"], "Tuned parameters.")


def main(argv):
  del argv
  if FLAGS.steps < 1 or FLAGS.repeats < 1 or FLAGS.draws < 1:
    raise app.UsageError("--steps, --repeats and --draws must be >= 1")
  ranks = [int(r) for r in FLAGS.ranks]
  config = zo_configs.get_config("quick")
  config.unlock()
  config.trainable, config.agzo_ranks = FLAGS.trainable, tuple(ranks)
  lm_config = lm_configs.get_config(FLAGS.lm_preset)
  restored = bool(FLAGS.lm_workdir)
  if restored:
    trained = lm_experiment.load_or_train(lm_config, FLAGS.lm_workdir)
    model, full = trained.model, trained.params
  else:
    model = transformer.Transformer(lm_experiment.model_config(lm_config))
    full = transformer.init_params(model, jax.random.PRNGKey(0))
  params, frozen = ex.split_trainable(full, config.trainable)
  losses = ex.make_losses(model, [ord(v) for v in config.verbalisers])
  task = ex.make_task(lm_config.validation_fraction)
  batch = ex.device_batch(task.train, 0, 0, config.batch_size, config, frozen)
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; model {transformer.num_params(full) / 1e6:.2f}M params "
        f"({'trained' if restored else 'random init'}), tuning {config.trainable} "
        f"({transformer.num_params(params) / 1e6:.2f}M); batch {config.batch_size} x "
        f"{config.window} bytes; {FLAGS.repeats} x {FLAGS.steps} steps")
  names = ["mezo", "lozo"] + [f"agzo_r{r}" for r in ranks] + ["first_order", "first_order_adam"]
  rows = {}
  for name in names:
    base = "first_order" if name.startswith("first_order") else name
    lr = ex.learning_rate(base if base != "first_order" else "mezo", params, config)
    if name == "first_order_adam":
      tx = ex.optimizer("first_order", losses[0], losses[1], config.lr_first_order, config)
    elif name == "first_order":
      tx = optax.chain(zo.first_order(losses[0]), optax.sgd(lr))
    else:
      tx = ex.optimizer(name, losses[0], losses[1], lr, config)
    p = jax.tree.map(jnp.copy, params)
    state = tx.init(p)
    step = zo.make_step(tx).lower(p, state, batch).compile()
    memory = ex.peak_bytes(step) / 2**20
    p, state = step(p, state, batch)  # warm-up
    times = []
    for _ in range(FLAGS.repeats):
      t0 = time.perf_counter()
      for _ in range(FLAGS.steps):
        p, state = step(p, state, batch)
      jax.block_until_ready(p)
      times.append(time.perf_counter() - t0)
    sps = [FLAGS.steps / t for t in times]
    rows[name] = (statistics.median(sps), min(sps), max(sps), memory)
  cos = {}
  if restored:
    grads = jax.jit(jax.grad(losses[0]))(params, batch)
    for name in ["mezo"] + [f"agzo_r{r}" for r in ranks]:
      est = ex.estimate_fn(name, losses[0], losses[1], config)
      c = jax.jit(lambda p, b, g, est=est: zo.alignment_draws(
          est, p, b, g, jax.random.PRNGKey(7), FLAGS.draws))(params, batch, grads)["overall"]
      cos[name] = float(np.mean(np.asarray(c)))
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


if __name__ == "__main__":
  app.run(main)
