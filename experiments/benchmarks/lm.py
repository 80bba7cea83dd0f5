"""Benchmark: our transformer vs Hugging Face `transformers` (PyTorch) on the same weights.

  python -m experiments.benchmarks.lm [--repeats=5] [--batch=4] [--prefill_len=256]
      [--decode_prompt=32] [--decode_tokens=128] [--tiny]

(needs the ``bench`` extra: ``pip install -e '.[test,bench]'``, which adds torch and
transformers).

A random Llama-style model (``BENCH_CONFIG``: vocab 4096, d_model 256, 4 layers, 8 query
/ 4 key-value heads, SwiGLU 704) is created in `transformers`, saved with
``save_pretrained`` and loaded into ours with ``common.models.hf.load_hf_checkpoint``,
so both sides run the same architecture and weights in float32 on the CPU. Measured,
as medians of ``repeats`` interleaved runs after one untimed warm-up each (ours then
excludes compilation):

- prefill tokens/s: one forward pass over (batch, prefill_len) tokens that fills the
  KV cache (ours: ``model.apply(params, tokens, cache)`` under jit; theirs:
  ``model(ids, use_cache=True)`` under ``torch.inference_mode``);
- decode tokens/s: batch * decode_tokens / (time of greedy generation of decode_tokens
  tokens after a decode_prompt-token prompt, minus the prefill time of that prompt)
  (ours: ``common.models.sampling.generate``, one jit-compiled prefill + a lax.while_loop decode;
  theirs: ``model.generate(do_sample=False, min_new_tokens=max_new_tokens)``);
- the compiled memory of one jit training step (forward, backward, AdamW update) of
  our model on (batch, prefill_len) tokens, from ``compiled.memory_analysis()``.
It also prints the largest logit gap between the two prefills, and fails when it is over
``MAX_LOGIT_GAP`` (the correctness check). ``--tiny`` runs a 2-layer width-64 model on
(1, 16) tokens, 4 decode tokens, 1 repeat, in seconds (the suite's smoke test).
"""

from __future__ import annotations

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

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 5, "timed runs per measurement (median reported)")
flags.DEFINE_integer("batch", 4, "sequences per batch")
flags.DEFINE_integer("prefill_len", 256, "prompt length of the prefill measurement")
flags.DEFINE_integer("decode_prompt", 32, "prompt length before decoding")
flags.DEFINE_integer("decode_tokens", 128, "greedy tokens generated")
flags.DEFINE_integer("seed", 0, "weights and tokens seed")
flags.DEFINE_bool("tiny", False, "a seconds-long run: a 2-layer width-64 model, batch 1, "
                  "16 prefill tokens, 4 + 4 decode tokens, 1 repeat")

PEERS = ("torch", "transformers")
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
  """Our (prefill, generate) callables: a jitted cache-filling forward, greedy sampling."""

  @jax.jit
  def prefill(params, tokens):
    cache = transformer.init_cache(model.config, tokens.shape[0], tokens.shape[1])
    return model.apply({"params": params}, tokens, cache)

  def ours_prefill(x):
    return lambda: jax.block_until_ready(prefill(params, jnp.asarray(x)))

  def ours_generate():
    jax.block_until_ready(sampling.generate(model, params, jnp.asarray(prompt),
                                            jax.random.PRNGKey(0), max_new_tokens=n,
                                            temperature=0.0))
  return prefill, ours_prefill, ours_generate


def _theirs(hf_model, prompt, n):
  """The transformers (prefill, generate) callables, under torch.inference_mode."""
  import torch

  def theirs_prefill(x):
    ids = torch.tensor(x, dtype=torch.long)

    def run():
      with torch.inference_mode():
        return hf_model(ids, use_cache=True).logits
    return run

  def theirs_generate():
    with torch.inference_mode():
      ids = torch.tensor(prompt, dtype=torch.long)
      hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                        min_new_tokens=n, do_sample=False, pad_token_id=PAD_ID)
  return theirs_prefill, theirs_generate


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


def _print_table(measured, b, t, n, p, gap, mem, param_bytes):
  med = {k: statistics.median(v) for k, v in measured.items()}
  prefill_tps = {s: b * t / med[f"{s}_prefill"] for s in ("ours", "theirs")}
  decode_tps = {s: b * n / max(med[f"{s}_generate"] - med[f"{s}_prompt"], 1e-9)
                for s in ("ours", "theirs")}
  print()
  print("| measurement | ours | transformers | ratio ours/theirs |")
  print("|---|---|---|---|")
  print(f"| prefill tokens/s (batch {b} x {t}) | {prefill_tps['ours']:,.0f} | "
        f"{prefill_tps['theirs']:,.0f} | {prefill_tps['ours'] / prefill_tps['theirs']:.2f} |")
  print(f"| decode tokens/s (batch {b}, {n} greedy tokens after {p}) | "
        f"{decode_tps['ours']:,.0f} | {decode_tps['theirs']:,.0f} | "
        f"{decode_tps['ours'] / decode_tps['theirs']:.2f} |")
  print()
  print("median seconds (min-max): " + "; ".join(
      f"{k} {med[k]:.4f} ({min(v):.4f}-{max(v):.4f})" for k, v in measured.items()))
  print(f"max |logit gap| between the two prefills: {gap:.2e}")
  if mem is not None:
    print(f"compiled train step (batch {b} x {t}): arguments {mem.argument_size_in_bytes / 2**20:.1f} "
          f"MiB, outputs {mem.output_size_in_bytes / 2**20:.1f} MiB, aliased "
          f"{mem.alias_size_in_bytes / 2**20:.1f} MiB, temporaries "
          f"{mem.temp_size_in_bytes / 2**20:.1f} MiB; parameters {param_bytes / 2**20:.1f} MiB")


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  import torch

  if FLAGS.tiny:
    b, t, p, n, repeats, config = 1, 16, 4, 4, 1, TINY_CONFIG
  else:
    b, t, p, n = FLAGS.batch, FLAGS.prefill_len, FLAGS.decode_prompt, FLAGS.decode_tokens
    repeats, config = FLAGS.repeats, BENCH_CONFIG
  hf_model, model, params = _models(FLAGS.seed, config)
  rng = np.random.default_rng(FLAGS.seed)
  # Token 0 is kept out of the prompts: it is the peer's pad id, which it would mask.
  tokens = rng.integers(PAD_ID + 1, config["vocab_size"], (b, t)).astype(np.int32)
  prompt = tokens[:, :p]

  print("# LM benchmark: ours vs transformers, float32 CPU")
  print(f"torch threads {torch.get_num_threads()}; model: {config}; "
        f"{transformer.num_params(params) / 1e6:.2f}M params")

  prefill, ours_prefill, ours_generate = _ours(model, params, prompt, n)
  theirs_prefill, theirs_generate = _theirs(hf_model, prompt, n)
  # Correctness: the two prefills agree.
  ours_logits = np.asarray(prefill(params, jnp.asarray(tokens))[0])
  gap = float(np.max(np.abs(ours_logits - theirs_prefill(tokens)().numpy())))
  if gap > MAX_LOGIT_GAP:
    raise AssertionError(f"our prefill logits differ from transformers' by {gap:.2e} "
                         f"(expected <= {MAX_LOGIT_GAP})")

  measured = _timed_cases(lambda: (
      ("ours_prefill", ours_prefill(tokens)), ("theirs_prefill", theirs_prefill(tokens)),
      ("ours_prompt", ours_prefill(prompt)), ("theirs_prompt", theirs_prefill(prompt)),
      ("ours_generate", ours_generate), ("theirs_generate", theirs_generate)), repeats)
  mem = _train_step_memory(model, params, tokens)
  param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  _print_table(measured, b, t, n, p, gap, mem, param_bytes)
  sys.stdout.flush()


if __name__ == "__main__":
  app.run(main)
