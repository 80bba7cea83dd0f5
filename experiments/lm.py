"""Experiment: a small byte-level LM learns the standard library's English + code corpus.

The LM is the shared model of `common.lm`, trained (or restored) in ``lm_workdir``
(by default this experiment's workdir, where other experiments then find it:
`common.lm.trained_lm` looks in ``<parent of their workdir>/lm``). This experiment
measures its validation bits per byte

    bpb = -(1 / N) sum_i log2 p(x_i | x_<i)      (byte tokens, so bits/token = bits/byte)

over consecutive validation windows, against the unigram baseline (the cross-entropy
of the validation bytes under the training bytes' frequencies). It also checks that
cached decoding reproduces full recomputation on the trained weights, samples a few
lines, and exports the weights as a Hugging Face checkpoint (``workdir/hf``).
"""

from __future__ import annotations

import os

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from common import lm as lm_lib
from common import metrics as metrics_lib
from common import report
from common.data import text
from common.data.tokenizers import ByteTokenizer
from common.models import hf
from common.models import logprobs
from common.models import sampling
from common.models import transformer
from experiments.configs import lm as config_module
from experiments.plots import lm as plots


def bits_per_byte(model, params, data: np.ndarray, seq_len: int, batch_size: int,
                  max_windows: int) -> float:
  """Mean next-byte cross-entropy in bits over consecutive windows of ``data``."""

  @jax.jit
  def window_nats(params, tokens):
    logits = model.apply({"params": params}, tokens[:, :-1])
    return -jnp.sum(logprobs.token_logprobs(logits, tokens[:, 1:]))

  total, count = 0.0, 0
  for tokens in text.eval_windows(data, seq_len, batch_size, max_windows):
    total += float(window_nats(params, jnp.asarray(tokens)))
    count += tokens.shape[0] * (tokens.shape[1] - 1)
  return float(logprobs.nats_to_bits(total / count))


def cache_consistency(model, params, tokens: np.ndarray) -> float:
  """Max |logits| gap between one-token cached decoding and a full forward pass."""
  tokens = jnp.asarray(tokens)
  full = model.apply({"params": params}, tokens)
  b, t = tokens.shape
  half = t // 2
  cache = transformer.init_cache(model.config, b, t)
  first, cache = model.apply({"params": params}, tokens[:, :half], cache)
  step = jax.jit(lambda p, tok, c: model.apply({"params": p}, tok, c))
  pieces = [first]
  for i in range(half, t):
    logits, cache = step(params, tokens[:, i:i + 1], cache)
    pieces.append(logits)
  return float(jnp.max(jnp.abs(jnp.concatenate(pieces, axis=1) - full)))


def samples(model, params, prompts, seed: int, max_new_tokens: int, temperature: float,
            top_p: float) -> list[str]:
  """One top-p sample per prompt; prompt i uses the key ``PRNGKey(seed + i)``."""
  tok = ByteTokenizer()
  out = []
  for i, prompt in enumerate(prompts):
    ids = jnp.asarray([tok.encode(prompt)], jnp.int32)
    gen = sampling.generate(model, params, ids, jax.random.PRNGKey(seed + i),
                            max_new_tokens=max_new_tokens, temperature=float(temperature),
                            top_p=float(top_p))
    out.append(tok.decode(np.asarray(gen[0])))
  return out


def claims(config, figures) -> list[report.ClaimCheck]:
  """The report row: validation bpb at most ``bpb_margin`` x the unigram cross-entropy."""
  val_bpb, unigram = figures["validation_bits_per_byte"], figures["unigram_cross_entropy_bits"]
  return report.claims_table([report.Claim(
      claim=f"The model learns the corpus: validation bits per byte at most "
            f"{config.bpb_margin:g} x the unigram cross-entropy",
      paper_figure="(shared infrastructure; no paper figure)",
      our_figure=f"{val_bpb:.3f} bpb vs unigram {unigram:.3f} bits "
                 f"(ratio {val_bpb / unigram:.2f}); {figures['num_params'] / 1e6:.2f}M params",
      measured=val_bpb, op="<=", threshold=config.bpb_margin * unigram)])


def _plot(lm_dir: str, val_bpb: float, unigram: float, workdir: str) -> str:
  rows = [r for r in metrics_lib.read_metrics_jsonl(lm_dir) if "bits_per_byte" in r]
  return plots.training_curve([r["step"] for r in rows], [r["bits_per_byte"] for r in rows],
                              val_bpb, unigram, os.path.join(workdir, "bits_per_byte.png"))


@report.register("lm", title="Shared LM stack: a byte-level transformer on the stdlib corpus",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Trains (or restores) the LM, evaluates it, and returns the claim and figures."""
  lm_dir = config.lm_workdir or workdir
  trained = lm_lib.load_or_train(config.lm, lm_dir)
  model, params, corpus = trained.model, trained.params, trained.corpus
  val_bpb = bits_per_byte(model, params, corpus.validation, config.lm.seq_len,
                          config.eval_batch_size, config.max_eval_windows)
  unigram = text.unigram_cross_entropy_bits(corpus.train, corpus.validation)
  gap = cache_consistency(model, params, corpus.validation[None, :min(64, config.lm.seq_len)])
  lines = samples(model, params, config.sample_prompts, config.lm.train.seed,
                  config.sample_tokens, config.temperature, config.top_p)
  report.atomic_write_text(os.path.join(workdir, "samples.txt"),
                           "\n\n".join(f"--- sample {i} ---\n{s}" for i, s in enumerate(lines)))
  logging.info("lm samples:\n%s", "\n".join(lines))
  hf.save_hf_checkpoint(os.path.join(workdir, "hf"), params, model.config)
  _plot(lm_dir, val_bpb, unigram, workdir)
  figures = {
      "validation_bits_per_byte": val_bpb,
      "unigram_cross_entropy_bits": unigram,
      "unigram_entropy_bits_train": text.unigram_entropy_bits(corpus.train),
      "bpb_over_unigram": val_bpb / unigram,
      "cache_vs_full_max_abs_logit_gap": gap,
      "num_params": float(transformer.num_params(params)),
      "train_bytes": float(len(corpus.train)),
      "validation_bytes": float(len(corpus.validation)),
  }
  return report.Result(claims=claims(config, figures), figures=figures,
                       plots=["bits_per_byte.png"])
