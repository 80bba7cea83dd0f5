"""Benchmark: our transformer vs Hugging Face `transformers` (PyTorch) on the same weights.

  python -m experiments.benchmarks.lm [--repeats=5] [--batch=4] [--prefill_len=256]
      [--decode_prompt=32] [--decode_tokens=128] [--torch_threads=1,2] [--nopeer_compile] [--tiny]

(needs the ``bench`` extra: ``pip install -e '.[test,bench]'``, which adds torch and
transformers).

A random Llama-style model (``BENCH_CONFIG``: vocab 4096, d_model 256, 4 layers, 8 query
/ 4 key-value heads, SwiGLU 704) is created in `transformers`, saved with
``save_pretrained`` and loaded into ours with ``common.models.hf.load_hf_checkpoint``,
so both sides run the same architecture and weights in float32 on the CPU. Measured,
as medians of ``repeats`` interleaved runs after one untimed warm-up each (ours then
excludes compilation):

- prefill tokens/s: one forward pass over (batch, prefill_len) tokens that fills the
  KV cache, with every position's logits and with the last one's (``logits_to_keep=1``
  on both sides, what generation runs) (ours: ``model.apply(params, tokens, cache)``
  under jit; theirs: ``model(ids, use_cache=True)`` under ``torch.inference_mode``);
- decode tokens/s: batch * (decode_tokens - 1) / (time of greedy generation of
  decode_tokens tokens after a decode_prompt-token prompt, minus that of 1 token)
  (ours: ``common.models.sampling.generate``, one jit-compiled prefill + a
  lax.while_loop; theirs: ``model.generate(do_sample=False, min_new_tokens=...)``);
  the peer runs in each ``PEER_VARIANTS`` setting (dynamic cache, static cache, static
  cache + ``torch.compile``) at each ``--torch_threads`` count, and each row compares
  ours with the fastest of them;
- roofline lines: each side's decode step against the bytes it must read (weights and
  the filled KV cache) as a fraction of the memory bandwidth, and its prefill against
  its FLOPs as a fraction of the peak matmul rate, both measured in the same run;
- the compiled memory of one jit training step (forward, backward, AdamW update) of
  our model on (batch, prefill_len) tokens, from ``compiled.memory_analysis()``.
It also prints the largest logit gap between our prefill and each peer variant's, and
fails when it is over ``MAX_LOGIT_GAP`` (the correctness check). ``--tiny`` runs a 2-layer width-64 model on
(1, 16) tokens, 4 decode tokens, 1 repeat, one torch thread count and no torch.compile, in
seconds (the suite's smoke test).
"""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.models import hf
from common.models import logprobs
from common.models import sampling
from common.models import transformer
from experiments.benchmarks import machine_line
from experiments.benchmarks import peak_matmul_flops
from experiments.benchmarks import roofline_line
from experiments.benchmarks import stream_bandwidth

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 5, "timed runs per measurement (median reported)")
flags.DEFINE_integer("batch", 4, "sequences per batch")
flags.DEFINE_integer("prefill_len", 256, "prompt length of the prefill measurement")
flags.DEFINE_integer("decode_prompt", 32, "prompt length before decoding")
flags.DEFINE_integer("decode_tokens", 128, "greedy tokens generated")
flags.DEFINE_integer("seed", 0, "weights and tokens seed")
flags.DEFINE_list("torch_threads", ["1", "2"], "torch thread counts the peer is run at "
                  "(each variant at each count; the fastest is the reference)")
flags.DEFINE_bool("peer_compile", True, "also run the peer under torch.compile (inductor; "
                  "compiling takes minutes on 2 cores; --tiny turns it off)")
flags.DEFINE_bool("tiny", False, "a seconds-long run: a 2-layer width-64 model, batch 1, "
                  "16 prefill tokens, 4 + 4 decode tokens, 1 repeat, the first torch thread count, "
                  "no torch.compile")

PEERS = ("torch", "transformers")
# The peer's generate settings (name, cache_implementation, torch.compile'd forward),
# as transformers documents them for fast generation: the default dynamic cache, a
# static (preallocated) cache, and a static cache with `torch.compile(model.forward)`.
PEER_VARIANTS = (("dynamic", None, False), ("static", "static", False),
                 ("static+compile", "static", True))
MAX_LOGIT_GAP = 1e-3  # float32 on both sides: the gap is ~1e-5; 1e-3 means a real mismatch

PAD_ID = 0  # transformers' pad_token_id in generate; never a prompt token
BENCH_CONFIG = dict(vocab_size=4096, hidden_size=256, num_hidden_layers=4,
                    num_attention_heads=8, num_key_value_heads=4, intermediate_size=704,
                    max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=10000.0,
                    tie_word_embeddings=False)
TINY_CONFIG = dict(BENCH_CONFIG, vocab_size=512, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                   max_position_embeddings=64)


def _timed_cases(cases, repeats):
  """Seconds per run of each ``(name, fn)`` of ``cases()``, after one untimed warm-up.

  The runs are interleaved, so drifts in machine load hit both sides.
  """
  measured = {}
  for name, fn in cases():
    fn()  # warm-up (compilation for ours)
    measured[name] = []
  for _ in range(repeats):
    for name, fn in cases():
      start = time.perf_counter()
      fn()
      measured[name].append(time.perf_counter() - start)
  return measured


def _models(seed, config):
  """A random transformers Llama of ``config``, saved and loaded into ours:
  (theirs, ours, params)."""
  import torch
  import transformers

  torch.manual_seed(seed)
  hf_model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
  folder = tempfile.mkdtemp(prefix="bench_lm_")
  hf_model.save_pretrained(folder)
  ckpt = hf.load_hf_checkpoint(folder)
  return hf_model, transformer.Transformer(ckpt.config), jax.device_put(ckpt.params)


def _ours(model, params, prompt, n):
  """Our cases: prefill with all logits and with the last position's (``logits_to_keep=1``,
  what generate runs), and greedy generation of n and of 1 tokens."""

  @jax.jit
  def prefill(params, tokens):
    cache = transformer.init_cache(model.config, tokens.shape[0], tokens.shape[1])
    return model.apply({"params": params}, tokens, cache)

  @jax.jit
  def prefill_last(params, tokens):
    cache = transformer.init_cache(model.config, tokens.shape[0], tokens.shape[1])
    return model.apply({"params": params}, tokens, cache, logits_to_keep=1)

  def generate(k):
    return lambda: jax.block_until_ready(sampling.generate(
        model, params, jnp.asarray(prompt), jax.random.PRNGKey(0), max_new_tokens=k,
        temperature=0.0))

  def run(fn):
    return lambda x: lambda: jax.block_until_ready(fn(params, jnp.asarray(x)))
  return prefill, {"prefill": run(prefill), "prefill_last": run(prefill_last),
                   "gen_n": generate(n), "gen_1": generate(1)}


def _theirs(hf_model, prompt, n, variant, threads):
  """The transformers cases of one ``PEER_VARIANTS`` entry at ``threads`` torch threads,
  each run under ``torch.inference_mode``: prefill (all logits, and ``logits_to_keep=1``)
  and ``generate`` of n and of 1 greedy tokens."""
  import torch

  _, cache_implementation, _ = variant
  extra = {} if cache_implementation is None else {"cache_implementation": cache_implementation}

  def call(fn):
    def run():
      torch.set_num_threads(threads)
      with torch.inference_mode():
        return fn()
    return run

  def prefill(keep):
    return lambda x: call(lambda: hf_model(torch.tensor(x, dtype=torch.long), use_cache=True,
                                           **({} if keep is None else {"logits_to_keep": keep}))
                          .logits)

  def generate(k):
    ids = torch.tensor(prompt, dtype=torch.long)
    return call(lambda: hf_model.generate(ids, attention_mask=torch.ones_like(ids),
                                          max_new_tokens=k, min_new_tokens=k, do_sample=False,
                                          pad_token_id=PAD_ID, **extra))
  return {"prefill": prefill(None), "prefill_last": prefill(1), "gen_n": generate(n),
          "gen_1": generate(1)}


def _peer_models(hf_model, compile_peer):
  """The peer model per PEER_VARIANTS entry: eager, or a copy whose forward is
  ``torch.compile``d (as transformers documents for static-cache generation)."""
  import torch

  models = {}
  for variant in PEER_VARIANTS:
    name, _, compiled = variant
    if compiled and not compile_peer:
      continue
    model = hf_model
    if compiled:
      model = copy.deepcopy(hf_model)
      model.forward = torch.compile(model.forward)
    models[name] = (variant, model)
  return models


def _train_step_memory(model, params, tokens):
  """``memory_analysis()`` of one compiled, donating AdamW training step of our model."""
  opt = optax.adamw(1e-3)

  def train_step(params, opt_state, tokens):
    def loss(p):
      logits = model.apply({"params": p}, tokens[:, :-1])
      return -jnp.mean(logprobs.token_logprobs(logits, tokens[:, 1:]))
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  opt_state = opt.init(params)
  compiled = jax.jit(train_step, donate_argnums=(0, 1)).lower(
      params, opt_state, jnp.asarray(tokens)).compile()
  return compiled.memory_analysis()


def _rates(measured, b, t, n):
  """Median-based rates per side: prefill tokens/s (all logits, last logits) and decode
  tokens/s = b (n - 1) / (generate(n) - generate(1)), the tokens after the first one."""
  med = {k: statistics.median(v) for k, v in measured.items()}
  sides = sorted({k.rsplit("|", 1)[0] for k in med})
  rates = {}
  for side in sides:
    rates[side] = {"prefill": b * t / med[f"{side}|prefill"],
                   "prefill_last": b * t / med[f"{side}|prefill_last"],
                   "decode": b * (n - 1) / max(med[f"{side}|gen_n"] - med[f"{side}|gen_1"], 1e-9)}
  return med, rates


def _print_table(measured, b, t, n, p):
  med, rates = _rates(measured, b, t, n)
  ours = rates.pop("ours")
  print("\n| peer variant (torch threads) | prefill tok/s, all logits | prefill tok/s, last "
        "logits | decode tok/s |\n|---|---|---|---|")
  for side, r in rates.items():
    print(f"| {side} | {r['prefill']:,.0f} | {r['prefill_last']:,.0f} | {r['decode']:,.0f} |")
  rows = (("prefill", f"prefill tokens/s (batch {b} x {t}, all logits)"),
          ("prefill_last", f"prefill tokens/s (batch {b} x {t}, last-position logits)"),
          ("decode", f"decode tokens/s (batch {b}, {n} greedy tokens after {p})"))
  print("\n| measurement | ours | best transformers variant | ratio ours/theirs |\n"
        "|---|---|---|---|")
  for key, label in rows:
    best = max(rates, key=lambda side: rates[side][key])
    print(f"| {label} | {ours[key]:,.0f} | {rates[best][key]:,.0f} ({best}) | "
          f"{ours[key] / rates[best][key]:.2f} |")
  print("\nmedian seconds (min-max): " + "; ".join(
      f"{k} {med[k]:.4f} ({min(v):.4f}-{max(v):.4f})" for k, v in measured.items()))
  return rates, ours


def _roofline(rates, ours, params, config, b, t, p, n, tiny):
  """Roofline lines: decode steps against the bytes they must read, prefill against its
  FLOPs, as fractions of this machine's bandwidth and peak matmul rate (measured now)."""
  layers, kv_heads = config["num_hidden_layers"], config["num_key_value_heads"]
  head_dim = config["hidden_size"] // config["num_attention_heads"]
  embed = config["vocab_size"] * config["hidden_size"]
  matmul_params = transformer.num_params(params) - embed - sum(
      x.size for path, x in jax.tree_util.tree_leaves_with_path(params)
      if "norm" in jax.tree_util.keystr(path))
  # A decoding step reads every weight once (the embedding only for its b rows) and the
  # filled keys and values: p + n/2 positions on average over the n steps.
  step_bytes = 4 * (transformer.num_params(params) - embed + b * config["hidden_size"]
                    + 2 * layers * b * (p + n / 2) * kv_heads * head_dim)
  # Prefill: 2 FLOPs per weight per token, plus q.k and p.v over the causal half.
  attn = 4 * b * layers * config["num_attention_heads"] * head_dim * t * (t + 1) / 2
  flops = {"prefill": 2 * b * t * matmul_params + attn,
           "prefill_last": 2 * b * t * (matmul_params - config["hidden_size"]
                                        * config["vocab_size"]) + 2 * b * embed + attn}
  bandwidth = stream_bandwidth(1 << 24 if tiny else 1 << 28)
  peak = peak_matmul_flops(256 if tiny else 2048)
  print(f"\nmeasured now: bandwidth copy (numpy) {bandwidth['copy_numpy'] / 1e9:.1f} GB/s, "
        f"scale (XLA) {bandwidth['scale_xla'] / 1e9:.1f} GB/s; peak fp32 matmul XLA "
        f"{peak['xla'] / 1e9:.0f} GFLOP/s, numpy BLAS {peak['numpy_blas'] / 1e9:.0f} GFLOP/s")
  print(f"decode step reads >= {step_bytes / 2**20:.2f} MiB (weights + mean filled KV cache)")
  for side, r in (("ours", ours), *rates.items()):
    print(roofline_line(f"{side} decode step", seconds=b / r["decode"], bytes_moved=step_bytes,
                        bandwidth=bandwidth["best"]))
    for key in ("prefill", "prefill_last"):
      print(roofline_line(f"{side} {key}", seconds=b * t / r[key], flops=flops[key],
                          peak_flops=peak["best"]))


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  if FLAGS.tiny:
    b, t, p, n, repeats, config = 1, 16, 4, 4, 1, TINY_CONFIG
  else:
    b, t, p, n = FLAGS.batch, FLAGS.prefill_len, FLAGS.decode_prompt, FLAGS.decode_tokens
    repeats, config = FLAGS.repeats, BENCH_CONFIG
  threads = [int(x) for x in FLAGS.torch_threads][:1 if FLAGS.tiny else None]
  hf_model, model, params = _models(FLAGS.seed, config)
  rng = np.random.default_rng(FLAGS.seed)
  # Token 0 is kept out of the prompts: it is the peer's pad id, which it would mask.
  tokens = rng.integers(PAD_ID + 1, config["vocab_size"], (b, t)).astype(np.int32)
  prompt = tokens[:, :p]

  print("# LM benchmark: ours vs transformers, float32 CPU")
  print(f"torch threads {threads}; peer variants {[v[0] for v in PEER_VARIANTS]} "
        f"(torch.compile {'on' if FLAGS.peer_compile and not FLAGS.tiny else 'off'}); "
        f"model: {config}; {transformer.num_params(params) / 1e6:.2f}M params")

  prefill, ours = _ours(model, params, prompt, n)
  cases = {("ours", k): fn for k, fn in ours.items()}
  for name, (variant, peer) in _peer_models(hf_model, FLAGS.peer_compile
                                            and not FLAGS.tiny).items():
    for th in threads:
      cases.update({(f"{name} ({th})", k): fn
                    for k, fn in _theirs(peer, prompt, n, variant, th).items()})
  _check_logits(prefill, params, tokens, cases)
  inputs = {"prefill": tokens, "prefill_last": tokens}
  measured = _timed_cases(lambda: tuple(
      (f"{side}|{k}", fn(inputs[k]) if k in inputs else fn)
      for (side, k), fn in cases.items()), repeats)
  rates, ours_rates = _print_table(measured, b, t, n, p)
  _roofline(rates, ours_rates, params, config, b, t, p, n, FLAGS.tiny)
  mem = _train_step_memory(model, params, tokens)
  _print_memory(mem, b, t, sum(x.nbytes for x in jax.tree.leaves(params)))
  sys.stdout.flush()


def _check_logits(prefill, params, tokens, cases):
  """The correctness check: our prefill's logits match every peer variant's."""
  ours_logits = np.asarray(prefill(params, jnp.asarray(tokens))[0])
  gaps = {side: float(np.max(np.abs(ours_logits - fn(tokens)().numpy())))
          for (side, k), fn in cases.items() if k == "prefill" and side != "ours"}
  print("max |logit gap| between our prefill and each peer's: "
        + ", ".join(f"{side} {gap:.2e}" for side, gap in gaps.items()))
  worst = max(gaps.values())
  if worst > MAX_LOGIT_GAP:
    raise AssertionError(f"our prefill logits differ from transformers' by {worst:.2e} "
                         f"(expected <= {MAX_LOGIT_GAP})")


def _print_memory(mem, b, t, param_bytes):
  if mem is not None:
    print(f"compiled train step (batch {b} x {t}): arguments {mem.argument_size_in_bytes / 2**20:.1f} "
          f"MiB, outputs {mem.output_size_in_bytes / 2**20:.1f} MiB, aliased "
          f"{mem.alias_size_in_bytes / 2**20:.1f} MiB, temporaries "
          f"{mem.temp_size_in_bytes / 2**20:.1f} MiB; parameters {param_bytes / 2**20:.1f} MiB")


if __name__ == "__main__":
  app.run(main)
