"""Benchmark: our jit-compiled flow matching vs torchcfm (PyTorch, CPU) on the same MLP.

  python -m experiments.benchmarks.flow_matching [--batch_size=256] [--train_steps=200]
      [--num_samples=10000] [--sample_steps=100] [--repeats=5] [--torch_threads=0] [--tiny]

(torch and torchcfm are benchmark-only dependencies; nothing at run time imports them.)

Both sides train the same unconditional velocity MLP v(x, t) on [x, t] (3 -> 256 ->
256 -> 256 -> 2, tanh-GELU, float32) with the conditional flow-matching loss of the
linear path (sigma = 0, independent coupling), Adam(lr 1e-3), on the same 8-Gaussians
2-D data (batches drawn on the host by numpy, outside the timed region for both):

* ours: ``common.train.train_step`` (the shared loop's jit-compiled, donating step)
  with ``methods.flow_matching.cfm_loss`` and ``optax.adam``; one untimed warm-up
  step compiles it. Sampling: ``methods.flow_matching.sample_ode`` (diffrax Euler,
  ``sample_steps`` steps) jit-compiled, warmed up once.
* torchcfm: ``ConditionalFlowMatcher(sigma=0).sample_location_and_conditional_flow``,
  ``torch.nn`` MLP, ``torch.optim.Adam``; sampling: an explicit Euler loop of the same
  steps under ``torch.no_grad()`` (torchdyn, which torchcfm's examples use, is not
  installed).

Training throughput is ``train_steps / seconds`` of one timed block (ending with a
device sync), sampling throughput ``num_samples / seconds``; each is the median of
``repeats`` blocks. On a loaded machine torch's multi-threaded intra-op pool degrades
badly (threads wait for descheduled siblings); ``--torch_threads=1`` gives the peer
its best case there. It prints a markdown table with the ratio ours / torchcfm (> 1:
ours is faster) and, as a sanity check, the final training loss on each side.
``--tiny`` runs batch 32, 5 steps, 100 samples x 5 Euler steps, 1 repeat, in seconds
(the suite's smoke test).
"""

from __future__ import annotations

import time

from absl import app
from absl import flags
import numpy as np

from experiments.benchmarks import machine_line

# The experiments whose method core this benchmark times (tests/experiments/test_contract.py).
COVERS = ("dfm_convergence", "divin")
# torchcfm imports POT (`ot`) for its optimal-transport couplings.
PEERS = ("torch", "torchcfm", "ot")

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 256, "Training batch size.")
flags.DEFINE_integer("train_steps", 200, "Training steps per timed block.")
flags.DEFINE_integer("num_samples", 10000, "Samples per timed sampling block.")
flags.DEFINE_integer("sample_steps", 100, "Euler steps per sample.")
flags.DEFINE_integer("repeats", 5, "Timed blocks per measurement (the median is reported).")
flags.DEFINE_integer("seed", 0, "Seed of the data and the parameters.")
flags.DEFINE_integer("torch_threads", 0, "torch.set_num_threads for the peer (0: torch's default).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: batch 32, 5 steps, 100 samples x 5 "
                  "Euler steps, 1 repeat.")

HIDDEN = (256, 256, 256)


def eight_gaussians(rng: np.random.Generator, n: int) -> np.ndarray:
  angles = 2 * np.pi * rng.integers(0, 8, n) / 8
  centers = 4.0 * np.stack([np.cos(angles), np.sin(angles)], 1)
  return (centers + 0.3 * rng.standard_normal((n, 2))).astype(np.float32)


def batches(num: int, batch_size: int, seed: int):
  rng = np.random.default_rng(seed)
  return [(rng.standard_normal((batch_size, 2)).astype(np.float32),
           eight_gaussians(rng, batch_size), rng.random(batch_size).astype(np.float32))
          for _ in range(num)]


def bench_ours(data, num_samples, sample_steps, repeats, seed):
  import jax
  import jax.numpy as jnp
  import optax
  from common import sharding
  from common import train as train_lib
  from common.models import MLP
  from methods import flow_matching as fm

  model = MLP(HIDDEN + (2,))
  apply_fn = lambda p, t, x, c: model.apply(p, jnp.concatenate([x, t[:, None]], -1))

  def loss_fn(params, batch, key):
    del key
    x0, x1, t = batch
    return fm.cfm_loss(apply_fn, params, x0, x1, t, None), {}

  optimizer = optax.adam(1e-3)
  mesh = sharding.make_mesh((-1,))
  init_fn = lambda k: model.init(k, jnp.zeros((1, 3)))
  state = train_lib.init_train_state(jax.random.PRNGKey(seed), init_fn=init_fn,
                                     optimizer=optimizer, mesh=mesh)
  key = jax.random.PRNGKey(seed + 1)
  placed = [sharding.shard_batch(b, mesh) for b in data]
  state, metrics, _ = train_lib.train_step(state, placed[0], key, loss_fn=loss_fn,
                                           optimizer=optimizer, mesh=mesh)
  jax.block_until_ready(state)
  rates = []
  for _ in range(repeats):
    start = time.perf_counter()
    for b in placed:
      state, metrics, _ = train_lib.train_step(state, b, key, loss_fn=loss_fn,
                                               optimizer=optimizer, mesh=mesh)
    jax.block_until_ready(state)
    rates.append(len(placed) / (time.perf_counter() - start))
  final_loss = float(metrics["loss"])
  params = state.params

  @jax.jit
  def sample(params, x0):
    field = lambda t, x: apply_fn(params, jnp.full(x.shape[:1], t, x.dtype), x, None)
    return fm.sample_ode(field, x0, num_steps=sample_steps, solver="euler")

  x0 = jax.random.normal(jax.random.PRNGKey(seed + 2), (num_samples, 2))
  jax.block_until_ready(sample(params, x0))
  srates = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(sample(params, x0))
    srates.append(num_samples / (time.perf_counter() - start))
  return rates, srates, final_loss


def bench_torchcfm(data, num_samples, sample_steps, repeats, seed):
  import torch
  from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

  if FLAGS.torch_threads > 0:
    torch.set_num_threads(FLAGS.torch_threads)
  torch.manual_seed(seed)
  layers, width = [], 3
  for h in HIDDEN:
    layers += [torch.nn.Linear(width, h), torch.nn.GELU(approximate="tanh")]
    width = h
  model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 2))
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  matcher = ConditionalFlowMatcher(sigma=0.0)
  tdata = [tuple(torch.from_numpy(a) for a in b) for b in data]

  def step(x0, x1, t):
    opt.zero_grad()
    t, xt, ut = matcher.sample_location_and_conditional_flow(x0, x1, t=t)
    vt = model(torch.cat([xt, t[:, None]], dim=-1))
    loss = torch.mean(torch.sum((vt - ut) ** 2, dim=-1))
    loss.backward()
    opt.step()
    return loss

  step(*tdata[0])
  rates = []
  for _ in range(repeats):
    start = time.perf_counter()
    for b in tdata:
      loss = step(*b)
    rates.append(len(tdata) / (time.perf_counter() - start))
  final_loss = float(loss.detach())

  def sample(x):
    h = 1.0 / sample_steps
    with torch.no_grad():
      for k in range(sample_steps):
        t = torch.full((x.shape[0], 1), k * h)
        x = x + h * model(torch.cat([x, t], dim=-1))
    return x

  x0 = torch.randn(num_samples, 2)
  sample(x0)
  srates = []
  for _ in range(repeats):
    start = time.perf_counter()
    sample(x0)
    srates.append(num_samples / (time.perf_counter() - start))
  return rates, srates, final_loss, torch.__version__, torch.get_num_threads()


def _fmt(r):
  return f"{np.median(r):.1f} [{np.min(r):.1f}-{np.max(r):.1f}]"


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  if FLAGS.tiny:
    batch_size, train_steps, num_samples, sample_steps, repeats = 32, 5, 100, 5, 1
  else:
    batch_size, train_steps, repeats = FLAGS.batch_size, FLAGS.train_steps, FLAGS.repeats
    num_samples, sample_steps = FLAGS.num_samples, FLAGS.sample_steps
  if min(batch_size, train_steps, num_samples, sample_steps, repeats) < 1:
    from common import config as config_lib
    config_lib.die("--batch_size, --train_steps, --num_samples, --sample_steps and "
                   "--repeats must all be >= 1")
  import jax
  data = batches(train_steps, batch_size, FLAGS.seed)
  ours = bench_ours(data, num_samples, sample_steps, repeats, FLAGS.seed)
  peer = bench_torchcfm(data, num_samples, sample_steps, repeats, FLAGS.seed)
  print(f"jax backend {jax.default_backend()}, torch {peer[4]} threads; "
        f"MLP {HIDDEN}, batch {batch_size}, {train_steps} steps/block, "
        f"{num_samples} samples x {sample_steps} Euler steps, median of {repeats}")
  print("| measure | ours (JAX): median [min-max] | torchcfm: median [min-max] | ours / torchcfm |")
  print("|---|---:|---:|---:|")
  print(f"| training steps/s | {_fmt(ours[0])} | {_fmt(peer[0])} | "
        f"{np.median(ours[0]) / np.median(peer[0]):.2f} |")
  print(f"| sampling samples/s | {_fmt(ours[1])} | {_fmt(peer[1])} | "
        f"{np.median(ours[1]) / np.median(peer[1]):.2f} |")
  print(f"| final training loss (sanity) | {ours[2]:.3f} | {peer[2]:.3f} | |")


if __name__ == "__main__":
  app.run(main)
