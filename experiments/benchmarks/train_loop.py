"""Benchmark: the overhead of `common.train` over a bare loop with the same step.

  python -m experiments.benchmarks.train_loop [--steps=2000] [--repeats=5] [--batch=64]
      [--hidden=64] [--tiny]

The model is a small MLP regressor (16 -> hidden -> hidden -> 1, GELU) trained with
Adam on batches from a pure function of (seed, step) that draws NumPy arrays, the
shape of batch function every experiment hands the loop. Sides, each run for
`--steps` and for `--steps / 2` updates so that fixed costs (the final checkpoint,
opening the metrics files) cancel; every side compiles in an untimed first run, and
all runs share the same functions, so no timed run compiles:

- bare loop: `for s in range(n): state = step(state, batch_fn(seed, s), s)`, with
  `step` one jitted, donating function (value_and_grad, the optimizer update,
  `optax.apply_updates`); the same init and per-step keys as `common.train`;
- bare loop, prebuilt batches: the same with every batch already on the device (what
  a loop costs when the batch function is free);
- `common.train` at steps_per_call K = 1, 10, 50: logging and checkpoints only at the
  end, the NaN guard on (the defaults every experiment runs with).

The figure is the marginal rate (n - n/2) / (t(n) - t(n/2)) from the medians of
`--repeats` runs of each length, and the overhead of each side against the bare
loop: bare rate / side rate - 1 (negative: faster than the bare loop). The check:
every `common.train` run ends at the bare loop's parameters (to 1e-6).
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import config as config_lib
from common import train as train_lib
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 2000, "Updates per long run (>= 2); short runs take half.")
flags.DEFINE_integer("repeats", 5, "Runs of each length per side (>= 1); medians are used.")
flags.DEFINE_integer("batch", 64, "Batch size (>= 1).")
flags.DEFINE_integer("hidden", 64, "Width of the two hidden layers (>= 1).")
flags.DEFINE_list("steps_per_call", ["1", "10", "50"], "The K values of common.train.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: 20 updates, 1 repeat, K = 1 and 2.")

PEERS = ()  # the peer is a bare loop over the same jitted step
SEED = 0
NUM_FEATURES = 16


class MLP(nn.Module):
  hidden: int

  @nn.compact
  def __call__(self, x):
    for _ in range(2):
      x = nn.gelu(nn.Dense(self.hidden)(x))
    return nn.Dense(1)(x)[..., 0]


def batch_fn(seed: int, step: int):
  rng = np.random.default_rng([seed, step])
  x = rng.standard_normal((FLAGS.batch, NUM_FEATURES), dtype=np.float32)
  return {"x": x, "y": np.sin(x[:, 0]) + 0.1 * x[:, 1]}


@functools.lru_cache(maxsize=None)
def make_problem():
  """(init_fn, loss_fn, optimizer) shared by every side and run: the same function
  objects, so `common.train` reuses its compiled calls after a side's untimed first
  run instead of compiling in every timed run (whose compile-time noise would swamp
  the marginal rate at large steps_per_call)."""
  model = MLP(FLAGS.hidden)

  def init_fn(key):
    return model.init(key, jnp.zeros((1, NUM_FEATURES)))["params"]

  def loss_fn(params, batch, key):
    del key
    pred = model.apply({"params": params}, batch["x"])
    return jnp.mean((pred - batch["y"]) ** 2), {}

  return init_fn, loss_fn, optax.adam(1e-3)


def bare_loop(num_steps: int, prebuilt: bool):
  """(seconds, final params) of the bare loop over `num_steps` updates."""
  init_fn, loss_fn, optimizer = make_problem()
  init_key, step_key = jax.random.split(jax.random.PRNGKey(SEED))

  @jax.jit
  def init(key):
    params = init_fn(key)
    return params, optimizer.init(params)

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def step(params, opt_state, batch, s):
    (_, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, batch, jax.random.fold_in(step_key, s))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  batches = ([jax.device_put(batch_fn(SEED, s)) for s in range(num_steps)] if prebuilt
             else None)
  params, opt_state = init(init_key)
  jax.block_until_ready(step(*init(init_key), batches[0] if prebuilt
                             else batch_fn(SEED, 0), 0))  # compile, untimed
  start = time.perf_counter()
  for s in range(num_steps):
    batch = batches[s] if prebuilt else batch_fn(SEED, s)
    params, opt_state = step(params, opt_state, batch, s)
  jax.block_until_ready(params)
  return time.perf_counter() - start, params


def common_train(num_steps: int, steps_per_call: int):
  """(seconds, final params) of `common.train` over `num_steps` updates."""
  init_fn, loss_fn, optimizer = make_problem()
  config = train_lib.default_train_config(
      num_steps=num_steps, seed=SEED, batch_size=FLAGS.batch, checkpoint_every=0,
      keep_checkpoints=1, log_every=num_steps, progress_bar=False,
      steps_per_call=steps_per_call)
  with tempfile.TemporaryDirectory() as workdir:
    start = time.perf_counter()
    result = train_lib.train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn,
                             optimizer=optimizer, config=config, workdir=workdir)
    jax.block_until_ready(result.state.params)
    return time.perf_counter() - start, result.state.params


def marginal_rate(run, num_steps: int, repeats: int, tiny: bool = False):
  """(updates per second between n/2 and n updates, final params of an n-update run).

  With `tiny`, one run of n updates and its plain rate (a smoke test: no timing).
  """
  if tiny:
    t, params = run(num_steps)
    return num_steps / t, params
  run(num_steps // 2)  # compiles (a side's own programs), untimed
  long_t, short_t, params = [], [], None
  for _ in range(repeats):
    t, params = run(num_steps)
    long_t.append(t)
    short_t.append(run(num_steps // 2)[0])
  dt = statistics.median(long_t) - statistics.median(short_t)
  return (num_steps - num_steps // 2) / max(dt, 1e-9), params


def max_difference(a, b) -> float:
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in
             zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def main(argv):
  config_lib.parse_flags_or_die(FLAGS, argv)
  ks = [int(k) for k in FLAGS.steps_per_call]
  for name, value, low in (("steps", FLAGS.steps, 2), ("repeats", FLAGS.repeats, 1),
                           ("batch", FLAGS.batch, 1), ("hidden", FLAGS.hidden, 1),
                           ("steps_per_call", min(ks), 1)):
    if value < low:
      config_lib.die(f"--{name} must be >= {low}, got {value}")
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint at INFO
  print(machine_line(PEERS), flush=True)
  steps, repeats = (20, 1) if FLAGS.tiny else (FLAGS.steps, FLAGS.repeats)
  ks = [1, 2] if FLAGS.tiny else ks
  sides = {"bare loop": lambda n: bare_loop(n, prebuilt=False),
           "bare loop, prebuilt batches": lambda n: bare_loop(n, prebuilt=True)}
  sides.update({f"common.train, steps_per_call={k}":
                (lambda n, k=k: common_train(n, k)) for k in ks})
  rates, finals = {}, {}
  for name, run in sides.items():
    rates[name], finals[name] = marginal_rate(run, steps, repeats, FLAGS.tiny)
  reference = finals["bare loop"]
  worst = max(max_difference(reference, p) for p in finals.values())
  print(f"MLP 16-{FLAGS.hidden}-{FLAGS.hidden}-1, batch {FLAGS.batch}, Adam; marginal "
        f"rate between {steps // 2} and {steps} updates, medians of {repeats} runs")
  print("| side | updates/s | overhead vs the bare loop |")
  print("|---|---:|---:|")
  for name, rate in rates.items():
    print(f"| {name} | {rate:,.0f} | {rates['bare loop'] / rate - 1:+.1%} |")
  print(f"\nCheck: every side ends at the bare loop's parameters to {worst:.1e}.")
  if worst > 1e-6:
    raise SystemExit(f"the sides disagree: max parameter difference {worst:.2e} > 1e-6")


if __name__ == "__main__":
  app.run(main)
