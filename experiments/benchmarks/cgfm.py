"""Benchmark: the CGFM vector-field network's training step, ours (JAX) vs a PyTorch peer.

  python -m experiments.benchmarks.cgfm [--num_points=400] [--large_points=2000,20000]
      [--batch_size=8] [--repeats=5] [--steps=10] [--seed=0] [--torch_threads=0] [--tiny]

(torch is a benchmark-only dependency, installed by ``make bench``; nothing at run time
imports it.) Figures go to docs/benchmarks.md.

What one training step is, on both sides: a batch of B random states x1 (B, N, 3) and
conditions c (B, 1) on one real mesh (``lbm.make_geometry`` + ``fluid_meshes.make_mesh``
with the quick preset's geometry and mesh seed; no simulation, random states are enough
for timing), x0 ~ N(0, I), t ~ U(0, 1) drawn inside the step, x_t = (1 - t) x0 + t x1,
the mean squared error of v(t, x_t, c) against x1 - x0 over the real nodes and
channels, its gradient and one Adam(lr 1e-3) update.

* ours: ``jax.jit`` of ``jax.value_and_grad(methods.cgfm.make_loss_fn(model))`` plus
  ``optax.adam``, params and optimizer state donated, compiled once (untimed) and timed
  with ``jax.block_until_ready``; the graph is padded (``graphs.pad``) and the batch
  merged into one graph (``graphs.merge``), as the experiment trains it; graphs and
  networks come from ``methods.cgfm.variants``, as in the experiment. Two models: (a)
  the single-level network (``variant_model(None, ...)``: a MeshGraphNet with
  B (2L - 1) conditioned blocks) and (b) the 3-level HieraGraphNet on the aware
  hierarchy (``variant_graph(..., method="aware")``). The network is the experiment's:
  receiver-sorted edges and the split-weight InteractionBlock (``common.models.gnn``).
  Both are compiled with the experiment's ``config.train.compiler_options`` (XLA:CPU's
  YNNPACK fusions off, see ``experiments/configs/cgfm.py``); (a) is also timed with
  XLA's default options (the "XLA defaults" column).
* torch: a re-implementation of (a) in ``torch.nn``, eager, float32, with the same
  equations and widths: the conditioning e = LNMLP([phi(t), psi(c)]) per graph,
  node encoder LNMLP([x, static features]), edge encoder LNMLP([dx, dy, |d|]/s), blocks
  e' = e + LNMLP_e([e, h_s, h_r, g]), h' = h + LNMLP_v([h, sum_in e', g]) (gather with
  indexing, aggregation with ``index_add_``; the edge input concatenated, as MeshGraphNet
  implementations write it, where ours splits the first layer by input part: the same
  function), decoder MLP without LayerNorm; GELU (tanh
  form, as ``flax.linen.gelu``), LayerNorm eps 1e-6 (flax's); B graphs merged into one
  with offset indices; ``torch.optim.Adam(lr=1e-3)`` (torch's default implementation).
  The peer is timed with ``torch.set_num_threads`` 1 and the number of cores JAX can use
  (the process's CPU affinity), each in its own process, and the faster one is compared
  (``--torch_threads`` fixes one count): on a loaded machine torch's intra-op pool
  degrades badly once an op is big enough to run in parallel (threads wait for
  descheduled siblings), so measure on an idle one.
  The peer is checked: its parameter count must equal ours, and after loading our
  initial parameters its field on the same (t, x_t, c) must match ours.

Per configuration (quick-preset mesh size ``num_points`` and each of ``large_points``,
meshes from the same generator on the same domain) it prints the median step time (ms)
of ``repeats`` blocks of ``steps`` steps each (above 2,000 nodes proportionally fewer
steps per block, at least 1: ``steps_per_block``), the speed-up torch / ours (> 1: ours
is faster; with the faster torch thread count), the cost of the hierarchy (hierarchical /
single-level step time, both ours) and memory: for ours the compiled step's
``memory_analysis()`` (temp + argument bytes), and for every side the peak RSS of its
process minus its RSS just before building the model (for JAX that includes the XLA
compiler's own memory, so compare JAX's compiled figure with torch's RSS delta only
roughly). Each (side, model, size) runs in its own freshly spawned process. The peer
runs on the unpadded graph (it needs no static shapes); ours runs on the padded one
(sizes rounded up to a multiple of 32 per sample), a cost of ``jit`` that is counted.
A markdown table for docs/benchmarks.md comes last. ``--tiny`` uses the tiny preset's
mesh and hierarchy (150 nodes, one coarse level) with batch 2, one configuration, 1 block
of 1 step, no "XLA defaults" run, torch on 1 thread unless ``--torch_threads`` says otherwise,
in seconds (the
suite's smoke test, beside the rest of the suite); the peer checks run as at full size.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import multiprocessing
import os
import resource
import sys
import time

from absl import app
from absl import flags
import numpy as np

from common import config as config_lib
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_points", None, "Mesh nodes (target) of the small configuration "
                     "(default: the quick preset's).")
flags.DEFINE_list("large_points", ["2000", "20000"], "Mesh nodes (targets) of the larger "
                  "configurations, same generator and domain as the quick mesh.")
flags.DEFINE_integer("batch_size", None, "Graphs per batch (default: the quick preset's).")
flags.DEFINE_integer("repeats", 5, "Timed blocks per measurement (the median is reported).")
flags.DEFINE_integer("steps", 10, "Training steps per timed block.")
flags.DEFINE_integer("seed", 0, "Seed of the states, conditions and parameters.")
flags.DEFINE_integer("torch_threads", 0, "torch.set_num_threads for the peer (0: time it at 1 "
                     "thread and at the cores JAX can use, and compare with the faster).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: the tiny preset's mesh (150 nodes, one "
                  "coarse level), batch 2, one configuration, 1 block of 1 step.")

PEERS = ("torch",)

LEARNING_RATE = 1e-3
NUM_CHANNELS = 3
REFERENCE_POINTS = 2000  # mesh size up to which a timed block has --steps steps


def num_cores() -> int:
  """Cores this process may run on: what XLA:CPU's thread pool uses."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def base_config(num_points: int | None = None):
  """The preset's config (tiny under --tiny, else quick) with the flags' overrides."""
  from experiments.configs import cgfm as config_module
  config = config_module.get_config("tiny" if FLAGS.tiny else "quick")
  config.data.num_points = int(num_points or config.data.num_points)
  if FLAGS.tiny:
    config.train.batch_size = 2
  if FLAGS.batch_size is not None:
    config.train.batch_size = FLAGS.batch_size
  return config


def make_problem(config, seed: int) -> dict:
  """The mesh, its single-level graph (real, unpadded) and random states and conditions."""
  from common.data import fluid_meshes
  from common.data import lbm
  from methods import cgfm

  data, batch_size = config.data, config.train.batch_size
  geometry = lbm.make_geometry(data.nx, data.ny, "cylinder", diameter=data.diameter)
  mesh = fluid_meshes.make_mesh(geometry, data.num_points, seed=data.mesh_seed)
  real = cgfm.graphs.build(mesh.pos, mesh.senders, mesh.receivers,
                           cgfm.node_features(mesh.pos, mesh.node_type))
  rng = np.random.default_rng(seed)
  n = len(mesh.pos)
  return {"mesh": mesh, "nodes": real.levels[0].nodes, "edges": real.levels[0].edges,
          "senders": real.levels[0].senders, "receivers": real.levels[0].receivers,
          "x1": rng.standard_normal((batch_size, n, NUM_CHANNELS)).astype(np.float32),
          "cond": rng.standard_normal((batch_size, 1)).astype(np.float32)}


def make_model(config, method: str | None):
  """The experiment's network of a variant (``methods.cgfm.variant_model``)."""
  from methods import cgfm

  m = config.model
  return cgfm.variant_model(method, latent=m.latent, blocks_per_level=m.blocks_per_level,
                            num_layers=m.mlp_layers, num_levels=len(m.coarsening_ratios) + 1)


def _rss_kib() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


# ----------------------------------------------------------------------------- ours
def _ours_step(model, optimizer):
  """One training step: CFM loss, its gradient and an optimizer update."""
  import jax
  import optax
  from methods import cgfm

  loss_fn = cgfm.make_loss_fn(model)

  def step(params, opt_state, batch, key):
    key, sub = jax.random.split(key)
    (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, sub)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, key, loss

  return step


def _compile(step, *args, options: dict | None = None):
  """(compiled step with donated params and optimizer state, seconds, temp + argument bytes);
  ``options`` are XLA compiler options of this one compilation."""
  import jax

  t0 = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=(0, 1)).lower(*args).compile(compiler_options=options)
  compile_s = time.perf_counter() - t0
  try:
    ma = compiled.memory_analysis()
    return compiled, compile_s, int(ma.temp_size_in_bytes + ma.argument_size_in_bytes)
  except Exception:  # pylint: disable=broad-except  # not every backend reports it
    return compiled, compile_s, None


def _time_ours(compiled, params, opt_state, batch, key, repeats: int, steps: int):
  """(seconds per step of each timed block, the last loss), after one warm-up step."""
  import jax

  params, opt_state, key, loss = compiled(params, opt_state, batch, key)  # warm-up
  jax.block_until_ready(loss)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(steps):
      params, opt_state, key, loss = compiled(params, opt_state, batch, key)
    jax.block_until_ready((params, loss))
    times.append((time.perf_counter() - start) / steps)
  return times, float(loss)


def _field_check(model, init_params, batch, x1, n_real: int, seed: int) -> dict:
  """A fixed (t, x_t, c) and our field on it, for the peer's equivalence check."""
  import jax
  import jax.numpy as jnp
  from methods import cgfm

  rng = np.random.default_rng(seed + 2)
  t = rng.random(len(x1)).astype(np.float32)
  xt = np.zeros_like(x1)
  xt[:, :n_real] = rng.standard_normal((len(x1), n_real, NUM_CHANNELS))
  field = cgfm.batched_field(model, init_params, batch["graph"])
  v = np.asarray(jax.jit(field)(jnp.asarray(t), jnp.asarray(xt), batch["cond"]))
  return {"params": init_params, "t": t, "xt": xt[:, :n_real], "v": v[:, :n_real]}


def run_ours(kind: str, num_points: int, seed: int, repeats: int, steps: int,
             flag_values: dict) -> dict:
  """Times our jitted training step of the 'single' or 'hier' model, compiled with the
  experiment's ``config.train.compiler_options``, or 'single_xla_defaults' (the
  single-level step with XLA's default options), in a fresh process."""
  FLAGS(["cgfm"] + [f"--{k}={v}" for k, v in flag_values.items() if v is not None])
  import jax
  import jax.numpy as jnp
  import optax
  from common import train as train_lib
  from methods import cgfm

  config = base_config(num_points)
  prob, method = make_problem(config, seed), "aware" if kind == "hier" else None
  options = None if kind == "single_xla_defaults" else (
      dict(train_lib.compiler_options(config.train)) or None)
  graph = cgfm.variant_graph(prob["mesh"].pos, prob["mesh"].senders, prob["mesh"].receivers,
                             prob["mesh"].node_type, method=method,
                             ratios=config.model.coarsening_ratios, seed=seed)
  model = make_model(config, method)
  (b, n_real), n_pad = prob["x1"].shape[:2], graph.levels[0].nodes.shape[0]
  x1 = np.zeros((b, n_pad, NUM_CHANNELS), np.float32)
  x1[:, :n_real] = prob["x1"]
  batch = jax.device_put({"graph": cgfm.graphs.broadcast(graph, b), "x1": x1,
                          "cond": prob["cond"]})
  rss0 = _rss_kib()
  params = jax.jit(model.init)(jax.random.PRNGKey(seed), graph, 0.0,
                               jnp.zeros((n_pad, NUM_CHANNELS)), jnp.zeros(1))
  init_params = jax.device_get(params)
  optimizer = optax.adam(LEARNING_RATE)
  opt_state = optimizer.init(params)
  key = jax.random.PRNGKey(seed + 1)
  compiled, compile_s, mem = _compile(_ours_step(model, optimizer), params, opt_state, batch,
                                      key, options=options)
  times, loss = _time_ours(compiled, params, opt_state, batch, key, repeats, steps)
  out = {"times": times, "rss_kib": _rss_kib() - rss0, "compiled_bytes": mem,
         "compile_s": compile_s, "loss": loss, "n_real": n_real,
         "n_pad": n_pad, "edges_real": len(prob["senders"]),
         "edges_pad": int(graph.levels[0].senders.shape[0]),
         "levels": [int(np.sum(g.n_node[:1])) for g in graph.levels],
         "num_params": int(sum(np.size(p) for p in jax.tree.leaves(init_params))),
         "versions": {"jax": jax.__version__, "backend": jax.default_backend()}}
  if kind == "single":
    out["check"] = _field_check(model, init_params, batch, x1, n_real, seed)
  return out


# ----------------------------------------------------------------------------- torch
def _torch_blocks():
  """The peer's LNMLP and Block (torch is imported here, in the peer's process only)."""
  import torch
  from torch import nn

  class LNMLP(nn.Module):
    """common.models.gnn.LayerNormMLP: GELU hidden layers, linear output, LayerNorm."""

    def __init__(self, d_in, out, latent, layers, layer_norm=True):
      super().__init__()
      widths = [d_in] + [latent] * layers + [out]
      self.dense = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
      self.norm = nn.LayerNorm(out, eps=1e-6) if layer_norm else None

    def forward(self, x):
      for i, lin in enumerate(self.dense):
        x = lin(x)
        if i < len(self.dense) - 1:
          x = nn.functional.gelu(x, approximate="tanh")
      return self.norm(x) if self.norm is not None else x

  class Block(nn.Module):
    """common.models.gnn.InteractionBlock."""

    def __init__(self, latent, layers):
      super().__init__()
      self.edge = LNMLP(4 * latent, latent, latent, layers)
      self.node = LNMLP(3 * latent, latent, latent, layers)

    def forward(self, h, e, g_node, g_edge, senders, receivers):
      e = e + self.edge(torch.cat([e, h[senders], h[receivers], g_edge], -1))
      agg = torch.zeros_like(h).index_add_(0, receivers, e)
      return h + self.node(torch.cat([h, agg, g_node], -1)), e

  return LNMLP, Block


def _torch_net(latent: int, layers: int, num_blocks: int, freqs: int, node_dim: int,
               edge_dim: int):
  """HieraGraphNet with one level, in torch (module names as in the flax parameter tree)."""
  import torch
  from torch import nn

  LNMLP, Block = _torch_blocks()  # pylint: disable=invalid-name
  num_time = 9  # methods.flow_matching.networks.time_features: [t, sin, cos] x 4
  num_cond = 1 + 2 * freqs  # psi(c) for P = 1

  class Net(nn.Module):

    def __init__(self):
      super().__init__()
      self.cond_encoder = LNMLP(num_time + num_cond, latent, latent, layers)
      self.node_encoder_0 = LNMLP(NUM_CHANNELS + node_dim, latent, latent, layers)
      self.edge_encoder_0 = LNMLP(edge_dim, latent, latent, layers)
      self.blocks = nn.ModuleList(Block(latent, layers) for _ in range(num_blocks))
      self.decoder = LNMLP(latent, NUM_CHANNELS, latent, layers, layer_norm=False)

    def forward(self, t, x, cond, nodes, edges, senders, receivers, node_graph, edge_graph):
      k = torch.arange(1, 5, dtype=t.dtype)
      ang = 2 * torch.pi * t[:, None] * k
      phi = torch.cat([t[:, None], torch.sin(ang), torch.cos(ang)], -1)
      ang = (torch.pi * cond[:, :, None] * torch.arange(1, freqs + 1, dtype=t.dtype)
             ).reshape(cond.shape[0], -1)
      psi = torch.cat([cond, torch.sin(ang), torch.cos(ang)], -1)
      g = self.cond_encoder(torch.cat([phi, psi], -1))
      g_node, g_edge = g[node_graph], g[edge_graph]
      h = self.node_encoder_0(torch.cat([x, nodes], -1))
      e = self.edge_encoder_0(edges)
      for block in self.blocks:
        h, e = block(h, e, g_node, g_edge, senders, receivers)
      return self.decoder(h)

  return Net()


def _torch_graph(prob: dict) -> dict:
  """The batch as one merged graph: sample b's indices offset by b N."""
  import torch

  b, n = prob["x1"].shape[:2]
  n_edge = len(prob["senders"])
  offset = lambda idx: torch.from_numpy(
      (np.asarray(idx, np.int64)[None, :] + n * np.arange(b)[:, None]).ravel())
  return dict(nodes=torch.from_numpy(np.tile(prob["nodes"], (b, 1))),
              edges=torch.from_numpy(np.tile(prob["edges"], (b, 1))),
              senders=offset(prob["senders"]), receivers=offset(prob["receivers"]),
              node_graph=torch.arange(b).repeat_interleave(n),
              edge_graph=torch.arange(b).repeat_interleave(n_edge))


def _time_torch(net, x1, cond, graph: dict, repeats: int, steps: int):
  """(seconds per step of each timed block, the last loss), after one warm-up step."""
  import torch

  b, n = x1.shape[:2]
  opt = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE)

  def step():
    opt.zero_grad(set_to_none=True)
    x0 = torch.randn_like(x1)
    t = torch.rand(b)
    xt = (1 - t)[:, None, None] * x0 + t[:, None, None] * x1
    v = net(t, xt.reshape(b * n, NUM_CHANNELS), cond, **graph).reshape(b, n, NUM_CHANNELS)
    loss = torch.mean((v - (x1 - x0)) ** 2)
    loss.backward()
    opt.step()
    return loss

  loss = step()  # warm-up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(steps):
      loss = step()
    times.append((time.perf_counter() - start) / steps)
  return times, loss.item()


def _load_ours(net, params: dict) -> None:
  """Loads our (flax) parameters into the torch peer."""
  import torch

  def load(module, tree):
    for i, lin in enumerate(module.dense):
      dense = tree["mlp"][f"dense_{i}"]
      lin.weight.data = torch.from_numpy(np.array(dense["kernel"], np.float32).T.copy())
      lin.bias.data = torch.from_numpy(np.array(dense["bias"], np.float32))
    if module.norm is not None:
      module.norm.weight.data = torch.from_numpy(np.array(tree["norm"]["scale"], np.float32))
      module.norm.bias.data = torch.from_numpy(np.array(tree["norm"]["bias"], np.float32))

  for name in ("cond_encoder", "node_encoder_0", "edge_encoder_0", "decoder"):
    load(getattr(net, name), params[name])
  for i, block in enumerate(net.blocks):
    load(block.edge, params[f"down_0_block_{i}"]["edge"])
    load(block.node, params[f"down_0_block_{i}"]["node"])


def run_torch(num_points: int, seed: int, repeats: int, steps: int, threads: int,
              check: dict, flag_values: dict) -> dict:
  """Times the PyTorch peer of the single-level network (in a fresh process)."""
  FLAGS(["cgfm"] + [f"--{k}={v}" for k, v in flag_values.items() if v is not None])
  import torch

  torch.set_num_threads(threads)
  torch.manual_seed(seed)
  config = base_config(num_points)
  prob = make_problem(config, seed)
  ref = make_model(config, None)
  graph = _torch_graph(prob)
  x1, cond = torch.from_numpy(prob["x1"]), torch.from_numpy(prob["cond"])
  (b, n), rss0 = prob["x1"].shape[:2], _rss_kib()
  net = _torch_net(ref.latent, ref.num_layers, ref.blocks_per_level, ref.cond_frequencies,
                   prob["nodes"].shape[1], prob["edges"].shape[1])
  times, loss = _time_torch(net, x1, cond, graph, repeats, steps)
  rss = _rss_kib() - rss0
  num_params = sum(p.numel() for p in net.parameters())
  # Equivalence: load our initial parameters and compare the fields.
  _load_ours(net, check["params"]["params"])
  with torch.no_grad():
    v = net(torch.from_numpy(check["t"]),
            torch.from_numpy(np.ascontiguousarray(check["xt"])).reshape(b * n, NUM_CHANNELS),
            cond, **graph).reshape(b, n, NUM_CHANNELS).numpy()
  return {"times": times, "rss_kib": rss, "loss": loss, "num_params": num_params,
          "max_field_diff": float(np.max(np.abs(v - check["v"]))),
          "field_scale": float(np.max(np.abs(check["v"]))),
          "versions": {"torch": torch.__version__, "threads": torch.get_num_threads()}}


# ----------------------------------------------------------------------------- driver
def run_isolated(fn, *args):
  """``fn(*args)`` in a freshly spawned process (clean memory peak, no shared pools);
  under ``--tiny`` in this one (a smoke run: its memory figures mean nothing)."""
  if FLAGS.tiny:
    return fn(*args)
  ctx = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
    return pool.submit(fn, *args).result()


def parse_flags(argv: list[str]) -> list[str]:
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  for name, minimum in (("num_points", 40), ("batch_size", 1), ("repeats", 1), ("steps", 1)):
    value = getattr(FLAGS, name)
    if value is not None and value < minimum:
      config_lib.die(f"--{name} must be >= {minimum}, got {value}")
  for value in FLAGS.large_points:
    if not value.isdigit() or int(value) < 40:
      config_lib.die(f"--large_points must list integers >= 40, got {value!r}")
  return rest


def steps_per_block(num_points: int, steps: int) -> int:
  """``steps`` up to REFERENCE_POINTS nodes; above, proportionally fewer (at least 1), so
  every size's block lasts about as long (a step is linear in the mesh size)."""
  return max(1, round(steps * min(1.0, REFERENCE_POINTS / num_points)))


def _ms(times) -> str:
  t = 1e3 * np.asarray(times)
  return f"{np.median(t):.1f} [{t.min():.1f}-{t.max():.1f}]"


def _mib(num_bytes) -> str:
  return "n/a" if num_bytes is None else f"{num_bytes / 2**20:.1f}"


def measure(num_points: int, thread_counts, repeats: int, steps: int, flag_values: dict):
  """Every side at one mesh size, each in its own process: {ours single, ours single
  with XLA's default options (not under --tiny), ours hierarchical, torch at each thread count,
  the fastest torch}."""
  args = (num_points, FLAGS.seed, repeats, steps_per_block(num_points, steps))
  out = {}
  for kind in ("single", "hier") if FLAGS.tiny else ("single", "single_xla_defaults", "hier"):
    print(f"num_points={num_points}: ours {kind} ...", file=sys.stderr, flush=True)
    out[kind] = run_isolated(run_ours, kind, *args, flag_values)
  check = out["single"].pop("check")
  out["torch_by_threads"] = {}
  for threads in thread_counts:
    print(f"num_points={num_points}: torch, {threads} threads ...", file=sys.stderr, flush=True)
    out["torch_by_threads"][threads] = run_isolated(run_torch, *args, threads, check,
                                                    flag_values)
  out["torch"] = min(out["torch_by_threads"].values(), key=lambda r: np.median(r["times"]))
  out["steps"] = args[-1]
  return out


def _row(r: dict) -> str:
  """One markdown row of the results table (see the header in ``main``)."""
  single, plain, hier, peer = r["single"], r.get("single_xla_defaults"), r["hier"], r["torch"]
  ts, th, tp = (np.median(x["times"]) for x in (single, hier, peer))
  plain_ms, plain_ratio = "n/a", "n/a"
  if plain is not None:
    plain_ms, plain_ratio = _ms(plain["times"]), f"{tp / np.median(plain['times']):.2f}"
  by_threads = " / ".join(f"{_ms(x['times'])} ({k} thr)"
                          for k, x in sorted(r["torch_by_threads"].items()))
  return (f"| {single['n_real']} nodes / {single['edges_real']} edges "
          f"(padded {single['n_pad']} / {single['edges_pad']}), levels {hier['levels']} "
          f"| {_ms(single['times'])} | {plain_ms} | {by_threads} "
          f"| {tp / ts:.2f} | {plain_ratio} | {_ms(hier['times'])} | {th / ts:.2f} "
          f"| {_mib(single['compiled_bytes'])} / {_mib(hier['compiled_bytes'])} "
          f"| {single['rss_kib'] / 1024:.0f} / {hier['rss_kib'] / 1024:.0f} "
          f"/ {peer['rss_kib'] / 1024:.0f} |")


def _note(num_points: int, r: dict) -> str:
  single, hier, peer = r["single"], r["hier"], r["torch"]
  warn = "" if peer["num_params"] == single["num_params"] else "PARAMETER COUNTS DIFFER; "
  return (f"num_points={num_points}: {warn}params ours {single['num_params']} / torch "
          f"{peer['num_params']} (hierarchical {hier['num_params']}); field check max "
          f"|v_ours - v_torch| = {peer['max_field_diff']:.2e} (max |v| "
          f"{peer['field_scale']:.2f}); final loss ours {single['loss']:.3f}, torch "
          f"{peer['loss']:.3f}; compile s: single {single['compile_s']:.1f}, hierarchical "
          f"{hier['compile_s']:.1f}; blocks of {r['steps']} steps")


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  if importlib.util.find_spec("torch") is None:
    config_lib.die("torch is not installed; run `make bench` (installs the bench extra) "
                   "to run this benchmark")
  flag_values = {"batch_size": FLAGS.batch_size, "tiny": FLAGS.tiny}
  config = base_config(FLAGS.num_points)
  small = config.data.num_points
  thread_counts = ([FLAGS.torch_threads] if FLAGS.torch_threads else [1] if FLAGS.tiny
                   else sorted({1, num_cores()}))
  repeats, steps = (1, 1) if FLAGS.tiny else (FLAGS.repeats, FLAGS.steps)
  sizes = [small] + ([] if FLAGS.tiny else
                     [int(n) for n in FLAGS.large_points if int(n) != small])
  results = {n: measure(n, thread_counts, repeats, steps, flag_values) for n in sizes}
  last, model = results[sizes[-1]], config.model
  v = {**last["single"]["versions"], **last["torch"]["versions"]}
  print(f"jax {v['jax']} backend {v['backend']} ({num_cores()} cores), torch {v['torch']} "
        f"(eager, threads {thread_counts}, the faster per size in 'torch / ours'); latent "
        f"{model.latent}, mlp_layers {model.mlp_layers}, blocks_per_level "
        f"{model.blocks_per_level} (single-level: {len(model.coarsening_ratios) * 2 + 1} x "
        f"that), coarsening_ratios {tuple(model.coarsening_ratios)}, batch "
        f"{config.train.batch_size}, float32; median [min-max] of {repeats} blocks")
  print("\n".join(_note(n, r) for n, r in results.items()))
  print()
  print("| mesh | ours single-level ms/step | ours, XLA defaults | torch single-level ms/step "
        "| torch / ours | torch / ours (XLA defaults) | ours hierarchical ms/step "
        "| hierarchical / single | ours compiled MiB (single / hier) "
        "| peak RSS delta MiB (single / hier / torch) |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  print("\n".join(_row(r) for r in results.values()))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
