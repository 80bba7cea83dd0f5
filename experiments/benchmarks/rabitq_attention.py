"""Benchmark: one decode step of RaBitQ sparse attention vs exact full attention.

  python -m experiments.benchmarks.rabitq_attention [--contexts=32768,131072] [--repeats=5]
      [--tiny]

For each context length S, one layer's decode step for a batch of 1 with H query heads,
KV key/value heads and head width D (default 8 / 2 / 128, float32 cache):

  (a) exact: `common.models.transformer.dot_product_attention` (scores against all S
      keys, softmax, weighted sum of all S values);
  (b) RaBitQ: `methods.rabitq_attention.decode_step` on a cache whose keys before the
      recent window are quantised (1-bit codes + 3 scalars): binary x INT4 scores for
      all S tokens, exact scores for sinks and the tail, adaptive top-p (lax.top_k of
      max_budget candidates), gather, sparse attention over max_budget tokens.

Both are jit-compiled; one untimed call compiles; the figure is the median wall time of
`repeats` calls (each ending in block_until_ready). On CPU the RaBitQ path runs the
jnp references of the Pallas kernels (interpret-mode Pallas is for tests); on a GPU
it runs the compiled kernels, and the scoring kernel's achieved memory bandwidth
(bytes of codes and scalars read / kernel time) is printed against --peak_gbps.
The bytes each step reads from the cache are printed too (keys+values for (a); codes,
sinks, tail and the gathered keys/values for (b)), and each side's roofline line: those
bytes / its time as a fraction of this machine's memory bandwidth, measured in the same
run (`experiments.benchmarks.stream_bandwidth`). The relative output error of (b)
against (a) is printed next to the speed-up: the speed-up is bought at that error.
``--tiny`` runs S = 4096 with H = 2, KV = 1, D = 128 and a budget of 256, 1 repeat, in
seconds (the suite's smoke test).
"""

from __future__ import annotations

import statistics
import time
from typing import NamedTuple

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from common import config as config_lib
from common.models import transformer
from experiments.benchmarks import machine_line
from experiments.benchmarks import roofline_line
from experiments.benchmarks import stream_bandwidth
from kernels_pallas import rabitq_scores as rs_kernel
from methods import rabitq_attention as ra
from methods.rabitq_attention import cache as cache_lib

FLAGS = flags.FLAGS
flags.DEFINE_list("contexts", ["32768", "131072"], "Context lengths S (multiples of 1024).")
flags.DEFINE_integer("repeats", 5, "Timed calls per side (>= 1); medians are reported.")
flags.DEFINE_integer("heads", 8, "Query heads H.")
flags.DEFINE_integer("kv_heads", 2, "Key/value heads KV (divides H).")
flags.DEFINE_integer("head_dim", 128, "Head width D (multiple of 32).")
flags.DEFINE_float("top_p", 0.9, "Target attention mass.")
flags.DEFINE_integer("max_budget", 2048, "Static budget K of attended tokens per head.")
flags.DEFINE_float("peak_gbps", 0.0, "Device peak memory bandwidth (GB/s) for the GPU "
                   "bandwidth figure; 0: H200's 4800 on an H200, else not printed.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: S = 4096, H = 2, KV = 1, D = 128, "
                  "budget 256, 1 repeat.")

PEERS = ()  # the peer is exact attention in our own transformer


class Sizes(NamedTuple):
  """The attention shapes and repeats of a run (the flags, or --tiny's)."""
  heads: int
  kv_heads: int
  head_dim: int
  max_budget: int
  repeats: int


def sizes_from_flags() -> Sizes:
  if FLAGS.tiny:
    return Sizes(heads=2, kv_heads=1, head_dim=128, max_budget=256, repeats=1)
  return Sizes(FLAGS.heads, FLAGS.kv_heads, FLAGS.head_dim, FLAGS.max_budget, FLAGS.repeats)


def _median_time(fn, repeats: int) -> tuple[float, float, float]:
  jax.block_until_ready(fn())                      # compile + warm up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times), min(times), max(times)


def setup(s: int, key, sz: Sizes):
  """Random cache (mean-shifted keys), one peaked query per head, quantised state."""
  h, kvh, d = sz.heads, sz.kv_heads, sz.head_dim
  mc = transformer.llama_config(d_model=h * d, num_heads=h, num_kv_heads=kvh, head_dim=d,
                                max_seq_len=s)
  rcfg = ra.RaBitQConfig(num_sink=4, recent_window=64, interval=32, max_budget=sz.max_budget,
                         top_p=FLAGS.top_p)
  kk, kv_, kq, ks = jax.random.split(key, 4)
  mu = 2.0 * jax.random.normal(kk, (d,)).at[:4].set(12.0)
  k = mu + jax.random.normal(kk, (1, s, kvh, d))
  v = jax.random.normal(kv_, (1, s, kvh, d))
  # Each query head attends mostly to 2 random tokens of its KV head (peaked attention,
  # as in the experiment's synthetic caches): q = 24 * unit mean of their centred keys.
  g = h // kvh
  rel = jax.random.randint(kq, (h, 2), 0, s)
  cen = k[0, rel, (jnp.arange(h) // g)[:, None]] - mu           # (H, 2, D)
  u = jnp.sum(cen / jnp.linalg.norm(cen, axis=-1, keepdims=True), axis=1)
  q = (24.0 * u / jnp.linalg.norm(u, axis=-1, keepdims=True))[None, None]
  state = ra.init_layer_state(rcfg, mc, 1, s, ks)
  prefill_q = jax.random.normal(kq, (1, 8, h, d))
  state = jax.jit(lambda st, qq, kk_: cache_lib.prefill_update(rcfg, st, qq, kk_, s))(
      state, prefill_q, k)
  return rcfg, state, q, k, v


def bench_context(s: int, sz: Sizes) -> dict:
  rcfg, state, q, k, v = setup(s, jax.random.PRNGKey(s), sz)
  length = jnp.int32(s)
  pos = jnp.int32(s - 1)
  exact = jax.jit(lambda q, k, v: transformer.dot_product_attention(
      q, k, v, q_positions=pos[None], kv_length=length, layer=0))
  sparse = jax.jit(lambda st, q, k, v: ra.decode_step(rcfg, st, q, k, v, pos, length, 0))
  t_exact = _median_time(lambda: exact(q, k, v), sz.repeats)
  t_sparse = _median_time(lambda: sparse(state, q, k, v), sz.repeats)
  out, new_state = sparse(state, q, k, v)
  full = exact(q, k, v)
  kvh, d, h = sz.kv_heads, sz.head_dim, sz.heads
  bytes_exact = 2 * s * kvh * d * 4
  code_bytes = s * kvh * ra.key_bytes_per_token(d)
  bytes_sparse = code_bytes + (rcfg.forced_tokens * kvh + rcfg.max_budget * h) * 2 * d * 4
  row = dict(s=s, exact=t_exact, sparse=t_sparse, speedup=t_exact[0] / t_sparse[0],
             tokens=float(jnp.mean(new_state.last_count)),
             rel_err=float(jnp.linalg.norm(out - full) / jnp.linalg.norm(full)),
             bytes_exact=bytes_exact, bytes_sparse=bytes_sparse)
  if jax.default_backend() == "gpu":
    row.update(kernel_bandwidth(state, sz))
  return row


def kernel_bandwidth(state, sz: Sizes) -> dict:
  """Time of the rabitq_scores kernel alone and its achieved bandwidth."""
  b, kvh, s, w = state.words.shape
  g = sz.heads // kvh
  codes = state.codes()
  flat = lambda x: x.reshape((b * kvh,) + x.shape[2:])
  planes = jnp.zeros((b * kvh, g, 4, w), jnp.uint32)
  scalars = jnp.ones((b * kvh, g, 4), jnp.float32)
  args = (flat(codes.words), flat(codes.norm / codes.ip_correction), flat(codes.center_term),
          planes, scalars)
  t = _median_time(lambda: rs_kernel.rabitq_scores(*args), sz.repeats)[0]
  nbytes = sum(a.nbytes for a in args) + b * kvh * g * s * 4
  peak = FLAGS.peak_gbps or (4800.0 if "H200" in jax.devices()[0].device_kind else 0.0)
  return dict(kernel_s=t, kernel_gbps=nbytes / t / 1e9, peak_gbps=peak)


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  contexts = [4096] if FLAGS.tiny else [int(c) for c in FLAGS.contexts]
  for s in contexts:
    if s % 1024 or s < 4096:
      config_lib.die(f"--contexts values must be multiples of 1024 and >= 4096, got {s}")
  sz = sizes_from_flags()
  if sz.heads % sz.kv_heads or sz.head_dim % 32 or sz.repeats < 1:
    config_lib.die("need kv_heads | heads, head_dim a multiple of 32 and repeats >= 1")
  print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}); H={sz.heads} "
        f"KV={sz.kv_heads} D={sz.head_dim} top_p={FLAGS.top_p} "
        f"max_budget={sz.max_budget}, median of {sz.repeats}")
  bandwidth = stream_bandwidth(1 << 24 if FLAGS.tiny else 1 << 28)
  print(f"measured bandwidth: copy (numpy) {bandwidth['copy_numpy'] / 1e9:.1f} GB/s, scale "
        f"(XLA) {bandwidth['scale_xla'] / 1e9:.1f} GB/s")
  print("| context | exact: median ms [min-max] | RaBitQ: median ms [min-max] | speed-up "
        "exact/RaBitQ | at rel. output error | tokens attended (mean/head) | MB read exact / "
        "RaBitQ |")
  print("|---:|---:|---:|---:|---:|---:|---:|")
  rows = [bench_context(s, sz) for s in contexts]
  for r in rows:
    fmt = lambda t: f"{1e3 * t[0]:.2f} [{1e3 * t[1]:.2f}-{1e3 * t[2]:.2f}]"
    print(f"| {r['s']} | {fmt(r['exact'])} | {fmt(r['sparse'])} | {r['speedup']:.2f} | "
          f"{r['rel_err']:.3f} | {r['tokens']:.0f} | {r['bytes_exact'] / 2**20:.1f} / "
          f"{r['bytes_sparse'] / 2**20:.1f} |", flush=True)
  for r in rows:  # each step against the bytes it must read from the cache
    for name, side in (("exact", "exact"), ("RaBitQ", "sparse")):
      print(roofline_line(f"{name} decode step, S={r['s']}", seconds=r[side][0],
                          bytes_moved=r[f"bytes_{side}"], bandwidth=bandwidth["best"]))
    if "kernel_s" in r:
      peak = f" of peak {r['peak_gbps']:.0f} GB/s" if r["peak_gbps"] else ""
      print(f"  rabitq_scores kernel (S={r['s']}): {1e3 * r['kernel_s']:.3f} ms, "
            f"{r['kernel_gbps']:.0f} GB/s{peak}")


if __name__ == "__main__":
  app.run(main)
