"""Experiment: a small byte-level LM learns the standard library's English + code corpus.

Trains `common.models.Transformer` with the common loop on windows of the corpus
(`common.data.text`), then measures validation bits per byte

    bpb = -(1 / N) sum_i log2 p(x_i | x_<i)      (byte tokens, so bits/token = bits/byte)

over consecutive validation windows, against the unigram baseline (the cross-entropy
of the validation bytes under the training bytes' frequencies). It also checks that
cached decoding reproduces full recomputation on the trained weights, samples a few
lines, and exports the weights as a Hugging Face checkpoint (`workdir/hf`).

`trained_lm(config, workdir)` is how other experiments get the trained model: it
reuses the `lm` experiment's own run beside their workdir (`results/lm` for
`results/<name>`, as `make reproduce` lays them out) when that run finished with the
same config, and otherwise restores or trains one in `workdir/lm`.
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from common import metrics as metrics_lib  # noqa: E402
from common import report  # noqa: E402
from common import train as train_lib  # noqa: E402
from common import trials as trials_lib  # noqa: E402
from common.data import text  # noqa: E402
from common.data.tokenizers import ByteTokenizer  # noqa: E402
from common.models import hf  # noqa: E402
from common.models import logprobs  # noqa: E402
from common.models import sampling  # noqa: E402
from common.models import transformer  # noqa: E402
from experiments.configs import lm as config_module  # noqa: E402


class TrainedLM(NamedTuple):
  model: transformer.Transformer
  params: Any
  corpus: text.TextCorpus
  history: list


def model_config(config) -> transformer.TransformerConfig:
  """The TransformerConfig an experiment config describes (byte vocabulary)."""
  family = transformer.llama_config if config.family == "llama" else transformer.neox_config
  return family(vocab_size=ByteTokenizer.vocab_size, d_model=config.d_model,
                num_layers=config.num_layers, num_heads=config.num_heads,
                num_kv_heads=config.num_kv_heads, d_ff=config.d_ff,
                max_seq_len=max(config.seq_len, 1024), qk_norm=config.qk_norm,
                dtype=config.dtype)


def make_optimizer(config) -> optax.GradientTransformation:
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, config.learning_rate, max(config.warmup_steps, 1), config.num_steps,
      end_value=config.learning_rate * 0.1)
  return optax.chain(optax.clip_by_global_norm(config.grad_clip),
                     optax.adamw(schedule, b2=0.95, weight_decay=config.weight_decay))


def train_config(config):
  tc = train_lib.default_train_config()
  tc.num_steps, tc.seed, tc.batch_size = config.num_steps, config.seed, config.batch_size
  tc.checkpoint_every, tc.log_every = config.checkpoint_every, config.log_every
  return tc


def lm_loss(model: transformer.Transformer):
  """loss_fn(params, batch, key) for the common loop: mean next-byte cross-entropy."""

  def loss_fn(params, batch, key):
    del key
    tokens = batch["tokens"]
    logits = model.apply({"params": params}, tokens[:, :-1])
    loss = -jnp.mean(logprobs.token_logprobs(logits, tokens[:, 1:]))
    return loss, {"bits_per_byte": logprobs.nats_to_bits(loss)}

  return loss_fn


def load_or_train(config, workdir: str) -> TrainedLM:
  """The trained model of `config`: restored from workdir's final checkpoint, or trained."""
  config_module.validate(config)
  corpus = text.stdlib_corpus(config.validation_fraction)
  model = transformer.Transformer(model_config(config))
  seq_len, batch_size = config.seq_len, config.batch_size
  result = train_lib.train(
      init_fn=lambda key: transformer.init_params(model, key),
      loss_fn=lm_loss(model),
      batch_fn=lambda seed, step: text.window_batch(corpus.train, seed, step, batch_size,
                                                    seq_len),
      optimizer=make_optimizer(config), config=train_config(config), workdir=workdir)
  report.atomic_write_text(os.path.join(workdir, FINGERPRINT_FILE), _fingerprint(config))
  return TrainedLM(model, result.state.params, corpus, result.history)


FINGERPRINT_FILE = "lm_fingerprint.txt"


def _fingerprint(config) -> str:
  # Keys that change the trained weights; evaluation and sampling keys do not.
  weights_keys = ("seed", "family", "d_model", "num_layers", "num_heads", "num_kv_heads",
                  "d_ff", "seq_len", "qk_norm", "dtype", "num_steps", "batch_size",
                  "learning_rate", "warmup_steps", "weight_decay", "grad_clip",
                  "validation_fraction")
  return trials_lib.config_fingerprint(
      config, exclude=[k for k in config.keys() if k not in weights_keys])


def trained_lm(config, workdir: str) -> TrainedLM:
  """The trained LM of `config` for an experiment running in `workdir`.

  Uses `<parent of workdir>/lm` (the `lm` experiment's run) if it finished training
  with the same weights-determining config, else `workdir/lm` (restored, or trained
  there first).
  """
  sibling = os.path.join(os.path.dirname(os.path.abspath(workdir)), "lm")
  marker = os.path.join(sibling, FINGERPRINT_FILE)
  if os.path.isfile(marker):
    with open(marker) as f:
      if f.read().strip() == _fingerprint(config):
        return load_or_train(config, sibling)
  return load_or_train(config, os.path.join(workdir, "lm"))


def bits_per_byte(model, params, data: np.ndarray, config) -> float:
  """Mean next-byte cross-entropy in bits over consecutive validation windows."""

  @jax.jit
  def window_nats(params, tokens):
    logits = model.apply({"params": params}, tokens[:, :-1])
    return -jnp.sum(logprobs.token_logprobs(logits, tokens[:, 1:]))

  total, count = 0.0, 0
  for tokens in text.eval_windows(data, config.seq_len, config.eval_batch_size,
                                  config.max_eval_windows):
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


def samples(model, params, config) -> list[str]:
  tok = ByteTokenizer()
  out = []
  for i, prompt in enumerate(config.sample_prompts):
    ids = jnp.asarray([tok.encode(prompt)], jnp.int32)
    gen = sampling.generate(model, params, ids, jax.random.PRNGKey(config.seed + i),
                            max_new_tokens=config.sample_tokens,
                            temperature=float(config.temperature), top_p=float(config.top_p))
    out.append(tok.decode(np.asarray(gen[0])))
  return out


def plot_curve(workdir: str, val_bpb: float, unigram: float) -> str:
  rows = metrics_lib.read_metrics_jsonl(os.path.join(workdir, metrics_lib.METRICS_FILENAME))
  steps = [r["step"] for r in rows if "bits_per_byte" in r]
  bpb = [r["bits_per_byte"] for r in rows if "bits_per_byte" in r]
  fig, ax = plt.subplots(figsize=(5.5, 3.6))
  ax.plot(steps, bpb, label="train (minibatch)")
  ax.axhline(val_bpb, color="C1", ls="--", label=f"validation, final ({val_bpb:.2f})")
  ax.axhline(unigram, color="gray", ls=":", label=f"unigram baseline ({unigram:.2f})")
  ax.set_xlabel("step")
  ax.set_ylabel("bits per byte")
  ax.set_title("Byte-level LM on the stdlib corpus")
  ax.legend()
  fig.tight_layout()
  path = os.path.join(workdir, "bits_per_byte.png")
  fig.savefig(path + ".tmp.png", dpi=110)
  plt.close(fig)
  os.replace(path + ".tmp.png", path)
  return path


@report.register("lm", title="Shared LM stack: a byte-level transformer on the stdlib corpus")
def run(config, workdir: str) -> report.Result:
  """Trains (or restores) the LM, evaluates it, and returns the claim and figures."""
  config_module.validate(config)
  start = time.time()
  trained = load_or_train(config, workdir)
  model, params, corpus = trained.model, trained.params, trained.corpus
  val_bpb = bits_per_byte(model, params, corpus.validation, config)
  unigram = text.unigram_cross_entropy_bits(corpus.train, corpus.validation)
  gap = cache_consistency(model, params, corpus.validation[None, :min(64, config.seq_len)])
  lines = samples(model, params, config)
  report.atomic_write_text(os.path.join(workdir, "samples.txt"),
                           "\n\n".join(f"--- sample {i} ---\n{s}" for i, s in enumerate(lines)))
  hf.save_hf_checkpoint(os.path.join(workdir, "hf"), params, model.config)
  plot_curve(workdir, val_bpb, unigram)
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
  logging.info("lm figures: %s\nsamples:\n%s", figures, "\n".join(lines))
  claims = [report.ClaimCheck(
      claim=f"The model learns the corpus: validation bits per byte at most "
            f"{config.bpb_margin:g} x the unigram cross-entropy",
      paper_figure="(shared infrastructure; no paper figure)",
      our_figure=f"{val_bpb:.3f} bpb vs unigram {unigram:.3f} bits "
                 f"(ratio {val_bpb / unigram:.2f}); {figures['num_params'] / 1e6:.2f}M params",
      reproduced=val_bpb <= config.bpb_margin * unigram)]
  return report.Result(claims=claims, figures=figures, plots=["bits_per_byte.png"],
                       seconds=time.time() - start)
