"""Benchmark: our jit-compiled flow matching vs torchcfm (PyTorch, CPU) on the same MLP.

  python -m experiments.benchmarks.flow_matching [--batch_size=256] [--train_steps=200]
      [--steps_per_call=20] [--num_samples=10000] [--sample_steps=100] [--repeats=5]
      [--torch_threads=0] [--torch_compile] [--tiny]

(torch and torchcfm are benchmark-only dependencies; nothing at run time imports them.)

Both sides train the same unconditional velocity MLP v(x, t) on [x, t] (3 -> 256 ->
256 -> 256 -> 2, tanh-GELU, float32) with the conditional flow-matching loss of the
linear path (sigma = 0, independent coupling), Adam(lr 1e-3), on the same 8-Gaussians
2-D data (batches drawn on the host by numpy and placed before the timed region, for
both sides):

* ours: ``common.train.train_step`` (the shared loop's jit-compiled, donating step)
  with ``methods.flow_matching.cfm_loss`` and ``optax.adam``, timed two ways: one
  call per step, and a jitted ``lax.scan`` of ``train_step`` over K stacked batches
  per call (what ``config.train.steps_per_call=K`` runs inside ``common.train``).
  Sampling: ``methods.flow_matching.sample_ode`` Euler (a ``lax.scan``), the same
  steps through diffrax (``solver="diffrax_euler"``), and the network's forward
  passes alone (the floor of any Euler sampler), all jitted.
* torchcfm: ``ConditionalFlowMatcher(sigma=0).sample_location_and_conditional_flow``,
  ``torch.nn`` MLP, ``torch.optim.Adam``; sampling: an explicit Euler loop of the same
  steps under ``torch.no_grad()`` (torchdyn, which torchcfm's examples use, is not
  installed). Timed at 1 and 2 intra-op threads (``--torch_threads=N``: only N),
  eager and under ``torch.compile`` (model and ``Adam.step``; ``--notorch_compile``
  skips it, ``--tiny`` too: compiling takes minutes).

Every variant starts from the same init, warms up with one untimed block (which
compiles) and runs ``repeats`` timed blocks; training throughput is ``train_steps /
seconds`` of a block, sampling ``num_samples / seconds``; tables give the median and
the ratio to the fastest torchcfm variant. Checks: our per-step and K-step paths end
at the same loss (the same updates), our two samplers agree; the final losses of the
two libraries are printed (same objective; their inits differ). Roofline lines give
each side's FLOP/s against ``peak_matmul_flops`` (the torch GEMM rate is printed too).
``--tiny`` runs batch 32, 4 steps (K = 2), 100 samples x 5 Euler steps, 1 repeat,
torch eager at 1 thread.
"""

from __future__ import annotations

import functools
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
flags.DEFINE_integer("steps_per_call", 20, "Our updates per compiled call on the K-step path "
                     "(what config.train.steps_per_call=K runs); must divide --train_steps.")
flags.DEFINE_integer("torch_threads", 0, "torch.set_num_threads for the peer (0: time 1 and 2; "
                     "--tiny: 1).")
flags.DEFINE_bool("torch_compile", True, "Also time the peer under torch.compile "
                  "(not with --tiny).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: batch 32, 4 steps (K = 2), "
                  "100 samples x 5 Euler steps, 1 repeat.")

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


def _rates(run, work: int, repeats: int) -> list[float]:
  """Calls ``run()`` (which waits for its results) once untimed, then ``repeats`` times
  timed; returns ``work / seconds`` of each timed call."""
  run()
  rates = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    rates.append(work / (time.perf_counter() - start))
  return rates


def _ours_problem(seed: int):
  """(init_fn, apply_fn, loss_fn) of our MLP and CFM loss."""
  import jax.numpy as jnp
  from common.models import MLP
  from methods import flow_matching as fm

  model = MLP(HIDDEN + (2,))
  apply_fn = lambda p, t, x, c: model.apply(p, jnp.concatenate([x, t[:, None]], -1))

  def loss_fn(params, batch, key):
    del key
    x0, x1, t = batch
    return fm.cfm_loss(apply_fn, params, x0, x1, t, None), {}

  init_fn = lambda k: model.init(k, jnp.zeros((1, 3)))
  return init_fn, apply_fn, loss_fn


def bench_ours_train(data, repeats: int, seed: int, steps_per_call: int) -> dict:
  """Our training throughput, per step and K = ``steps_per_call`` steps per call.

  Both start from the same init and run (1 + repeats) blocks over ``data``, so their
  final losses come from the same updates on the same batches.

  Returns:
    ``{variant: (steps/s of each block, final loss, final params)}``.
  """
  import jax
  import jax.numpy as jnp
  import optax
  from common import sharding
  from common import train as train_lib

  init_fn, _, loss_fn = _ours_problem(seed)
  optimizer, mesh = optax.adam(1e-3), sharding.make_mesh((-1,))
  step = functools.partial(train_lib.train_step, key=jax.random.PRNGKey(seed + 1),
                           loss_fn=loss_fn, optimizer=optimizer, mesh=mesh)
  placed = [sharding.shard_batch(b, mesh) for b in data]
  stacked = [jax.device_put(jax.tree.map(lambda *a: np.stack(a), *data[i:i + steps_per_call]))
             for i in range(0, len(data), steps_per_call)]

  @functools.partial(jax.jit, donate_argnums=0)
  def scan_steps(state, batches):  # K updates in one call: what config.steps_per_call=K runs.
    def body(state, batch):
      state, metrics, _ = step(state, batch)
      return state, metrics["loss"]
    state, losses = jax.lax.scan(body, state, batches)
    return state, losses[-1]

  def per_step(state):
    for batch in placed:
      state, metrics, _ = step(state, batch)
    return state, metrics["loss"]

  def k_steps(state):
    for batches in stacked:
      state, loss = scan_steps(state, batches)
    return state, loss

  out = {}
  for name, block in (("per step", per_step), (f"K={steps_per_call} steps per call", k_steps)):
    box = [train_lib.init_train_state(jax.random.PRNGKey(seed), init_fn=init_fn,
                                      optimizer=optimizer, mesh=mesh), None]

    def run(block=block, box=box):
      box[:] = block(box[0])
      jax.block_until_ready(box)

    rates = _rates(run, len(data), repeats)
    out[name] = (rates, float(box[1]), box[0].params)
  return out


def bench_ours_sample(params, num_samples: int, sample_steps: int, repeats: int,
                      seed: int) -> dict:
  """Our sampling throughput (samples/s), jitted: ``sample_ode`` Euler (a ``lax.scan``
  of the step), the same steps through diffrax (``solver="diffrax_euler"``), and
  ``sample_steps`` bare forward passes of the network, the floor of any Euler sampler.

  Returns:
    ``{variant: samples/s of each timed call}``.

  Raises:
    RuntimeError: if the two samplers' outputs differ.
  """
  import jax
  import jax.numpy as jnp
  from methods import flow_matching as fm

  _, apply_fn, _ = _ours_problem(seed)

  @functools.partial(jax.jit, static_argnames="solver")
  def sample(params, x0, solver):
    field = lambda t, x: apply_fn(params, jnp.full(x.shape[:1], t, x.dtype), x, None)
    return fm.sample_ode(field, x0, num_steps=sample_steps, solver=solver)

  forward = jax.jit(lambda params, x: apply_fn(params, jnp.zeros(x.shape[:1], x.dtype), x, None))
  x0 = jax.random.normal(jax.random.PRNGKey(seed + 2), (num_samples, 2))
  gap = float(jnp.max(jnp.abs(sample(params, x0, "euler") - sample(params, x0, "diffrax_euler"))))
  if gap > 1e-4:
    raise RuntimeError(f"sample_ode's scan and diffrax Euler differ by {gap}; expected equal")
  out = {f"sample_ode {s}": _rates(lambda s=s: sample(params, x0, s).block_until_ready(),
                                   num_samples, repeats) for s in ("euler", "diffrax_euler")}
  passes = _rates(lambda: forward(params, x0).block_until_ready(), num_samples, repeats)
  out[f"floor: {sample_steps} forward passes alone"] = [r / sample_steps for r in passes]
  return out


def _torch_model(seed: int):
  import torch
  torch.manual_seed(seed)
  layers, width = [], 3
  for h in HIDDEN:
    layers += [torch.nn.Linear(width, h), torch.nn.GELU(approximate="tanh")]
    width = h
  return torch.nn.Sequential(*layers, torch.nn.Linear(width, 2))


def bench_torchcfm_train(data, repeats: int, seed: int, compiled: bool):
  """torchcfm's training throughput: (steps/s of each block, final loss, trained model).

  ``compiled``: ``torch.compile`` on the model and on ``Adam.step`` (PyTorch's recipe
  for compiling the optimizer); otherwise eager.
  """
  import torch
  from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

  model = _torch_model(seed)
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  net = torch.compile(model) if compiled else model
  opt_step = torch.compile(opt.step) if compiled else opt.step
  matcher = ConditionalFlowMatcher(sigma=0.0)
  tdata = [tuple(torch.from_numpy(a) for a in b) for b in data]

  def step(x0, x1, t):
    opt.zero_grad()
    t, xt, ut = matcher.sample_location_and_conditional_flow(x0, x1, t=t)
    vt = net(torch.cat([xt, t[:, None]], dim=-1))
    loss = torch.mean(torch.sum((vt - ut) ** 2, dim=-1))
    loss.backward()
    opt_step()
    return loss

  box = [None]

  def run():
    for b in tdata:
      box[0] = step(*b)

  rates = _rates(run, len(tdata), repeats)
  return rates, float(box[0].detach()), model


def bench_torchcfm_sample(model, num_samples: int, sample_steps: int, repeats: int,
                          compiled: bool) -> list[float]:
  """samples/s of an explicit Euler loop under ``no_grad`` (``compiled``: over
  ``torch.compile(model)``)."""
  import torch

  net = torch.compile(model) if compiled else model
  h = 1.0 / sample_steps

  def sample(x):
    with torch.no_grad():
      for k in range(sample_steps):
        t = torch.full((x.shape[0], 1), k * h)
        x = x + h * net(torch.cat([x, t], dim=-1))
    return x

  x0 = torch.randn(num_samples, 2)
  return _rates(lambda: sample(x0), num_samples, repeats)


def torch_gemm_flops(size: int, repeats: int) -> float:
  """torch's float32 FLOP/s on a ``size`` square matmul at its current thread setting
  (the peer's side of ``peak_matmul_flops``)."""
  import torch
  a, b = torch.randn(size, size), torch.randn(size, size)
  return float(np.median(_rates(lambda: a @ b, 2 * size ** 3, repeats)))


def bench_torchcfm(data, num_samples: int, sample_steps: int, repeats: int, seed: int,
                   threads: tuple[int, ...], compiled: tuple[bool, ...]):
  """Every peer variant (thread count x eager / ``torch.compile``).

  Returns:
    ({label: (training steps/s, final loss)}, {label: sampling samples/s},
    {threads: torch's 2048-GEMM FLOP/s}).
  """
  import torch
  train, sample, gemm = {}, {}, {}
  for n in threads:
    torch.set_num_threads(n)
    gemm[n] = torch_gemm_flops(256 if FLAGS.tiny else 2048, repeats)
    for c in compiled:
      label = f"torchcfm, {'torch.compile' if c else 'eager'}, {n} thread{'s' * (n > 1)}"
      rates, loss, model = bench_torchcfm_train(data, repeats, seed, c)
      train[label] = (rates, loss)
      sample[label] = bench_torchcfm_sample(model, num_samples, sample_steps, repeats, c)
  return train, sample, gemm


def _fmt(r):
  return f"{np.median(r):.1f} [{np.min(r):.1f}-{np.max(r):.1f}]"


def _table(measure: str, rows: dict, losses: dict | None = None) -> float:
  """Prints one markdown table of ``rows`` ({label: rates}); ratios are against the
  fastest torchcfm row. Returns that fastest median."""
  best = max(float(np.median(r)) for k, r in rows.items() if k.startswith("torchcfm"))
  extra = " final loss (sanity) |" if losses else ""
  print(f"| {measure} | median [min-max] | / fastest torchcfm |{extra}")
  print("|---|---:|---:|" + "---:|" * bool(losses))
  for label, r in rows.items():
    tail = f" {losses[label]:.4f} |" if losses else ""
    print(f"| {label} | {_fmt(r)} | {np.median(r) / best:.2f} |{tail}")
  return best


def forward_flops(batch: int) -> float:
  """FLOPs of one forward pass of the MLP on ``batch`` rows (2 per multiply-add)."""
  widths = (3,) + HIDDEN + (2,)
  return 2.0 * batch * sum(a * b for a, b in zip(widths[:-1], widths[1:]))


def _sizes():
  """(batch, steps, K, samples, Euler steps, repeats) from the flags (``--tiny``: small)."""
  if FLAGS.tiny:
    return 32, 4, 2, 100, 5, 1
  sizes = (FLAGS.batch_size, FLAGS.train_steps, FLAGS.steps_per_call, FLAGS.num_samples,
           FLAGS.sample_steps, FLAGS.repeats)
  if min(sizes) < 1 or FLAGS.train_steps % FLAGS.steps_per_call:
    from common import config as config_lib
    config_lib.die(f"--batch_size, --train_steps, --steps_per_call, --num_samples, "
                   f"--sample_steps and --repeats must all be >= 1, with --steps_per_call "
                   f"dividing --train_steps; got {sizes}")
  return sizes


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  batch_size, train_steps, k, num_samples, sample_steps, repeats = _sizes()
  from experiments.benchmarks import peak_matmul_flops, roofline_line
  data = batches(train_steps, batch_size, FLAGS.seed)
  ours = bench_ours_train(data, repeats, FLAGS.seed, k)
  (_, loss_1, params), (_, loss_k, _) = ours.values()
  if not np.isclose(loss_1, loss_k, rtol=1e-3):
    raise RuntimeError(f"per-step loss {loss_1} != K-step loss {loss_k}: the two paths "
                       "must run the same updates")
  ours_sample = bench_ours_sample(params, num_samples, sample_steps, repeats, FLAGS.seed)
  # --tiny: 1 thread, as the suite's other benchmarks (a 2-thread pool stalls beside it).
  threads = (FLAGS.torch_threads,) if FLAGS.torch_threads > 0 else (1,) if FLAGS.tiny else (1, 2)
  compiled = (False, True) if FLAGS.torch_compile and not FLAGS.tiny else (False,)
  peer, peer_sample, gemm = bench_torchcfm(data, num_samples, sample_steps, repeats,
                                           FLAGS.seed, threads, compiled)
  print(f"MLP {HIDDEN}, batch {batch_size}, {train_steps} steps/block, {num_samples} samples "
        f"x {sample_steps} Euler steps, median of {repeats} blocks")
  losses = {f"ours, {name}": v[1] for name, v in ours.items()}
  losses.update({name: v[1] for name, v in peer.items()})
  rows = {f"ours, {name}": v[0] for name, v in ours.items()}
  rows.update({name: v[0] for name, v in peer.items()})
  peer_train = _table("training steps/s", rows, losses)
  print()
  rows = {f"ours, {name}": v for name, v in ours_sample.items()}
  peer_sampling = _table("sampling samples/s", {**rows, **peer_sample})
  size = 256 if FLAGS.tiny else 2048
  peak = peak_matmul_flops(size=size)
  print(f"# {size}-square GEMM float32: XLA {peak['xla'] / 1e9:.1f}, "
        f"numpy {peak['numpy_blas'] / 1e9:.1f}, "
        + ", ".join(f"torch {n} thread(s) {f / 1e9:.1f}" for n, f in gemm.items()) + " GFLOP/s")
  best = max(peak["best"], *gemm.values())   # The fastest GEMM of any library here.
  step_flops, sample_flops = 3 * forward_flops(batch_size), forward_flops(sample_steps)
  for name, rate in ((f"ours training, K={k}", np.median(ours[f"K={k} steps per call"][0])),
                     ("fastest torchcfm training", peer_train)):
    print(roofline_line(name, seconds=1 / rate, flops=step_flops, peak_flops=best))
  for name, rate in (("ours sampling", np.median(ours_sample["sample_ode euler"])),
                     ("fastest torchcfm sampling", peer_sampling)):
    print(roofline_line(name, seconds=1 / rate, flops=sample_flops, peak_flops=best))


if __name__ == "__main__":
  app.run(main)
