"""The shared small byte-level LM: its config, its training, and how experiments get it.

Several methods study the same trained model (RaBitQ KV caches, susceptibilities,
zeroth-order fine-tuning), so the model is a common piece, not an experiment. Its
config is a sub-config that an experiment's config embeds as ``config.lm``::

    BASE = dict(method="demo", lm=lm.get_config("quick"), lm_workdir="", ...)
    PRESETS = {"quick": {}, "full": {"lm": lm.PRESETS["full"]},
               "tiny": {"lm": lm.PRESETS["tiny"]}}

    trained = lm.trained_lm(config.lm, workdir, lm_workdir=config.lm_workdir)
    logits = trained.model.apply({"params": trained.params}, tokens)

The model is `common.models.Transformer` over byte tokens, trained with the common
loop (`common.train`, orbax checkpoints, exact resume) on windows of the stdlib
corpus (`common.data.text`) with AdamW, linear warmup and cosine decay:

    loss = -(1 / (B T)) sum_{b, t} log p(x_{b, t+1} | x_{b, <=t}).

A run directory carries a stage marker (`common.trials`, ``stages/trained_lm.json``)
fingerprinted by the keys that determine the weights (`fingerprint`: everything but
the loop's logging, checkpointing and device keys). It is written before the first
step and marked finished after the last, so an interrupted run resumes exactly, a
finished one is restored, a later experiment reuses it, and a directory that holds
another config's LM is refused (its checkpoints are never touched).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax.numpy as jnp
import ml_collections
import optax

from common import config as config_lib
from common import train as train_lib
from common import trials
from common.data import text
from common.data.tokenizers import ByteTokenizer
from common.models import logprobs
from common.models import transformer


BASE = dict(
    # Model.
    family="llama",
    d_model=128,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    d_ff=384,
    seq_len=128,
    qk_norm=False,
    dtype="float32",
    # Optimisation (AdamW, linear warmup then cosine decay, global-norm clipping).
    learning_rate=3e-3,
    warmup_steps=50,
    weight_decay=0.01,
    grad_clip=1.0,
    validation_fraction=0.1,
    # The common loop's settings (`common.train.default_train_config()`).
    train=train_lib.default_train_config(num_steps=700, batch_size=32, checkpoint_every=200,
                                         log_every=25, seed=0),
)

PRESETS = {
    # CPU, about 4-5 minutes of training on 2 cores: BASE's 0.85M-parameter model and
    # 700 steps, at batch 12 instead of 32 (what the experiments' quick presets embed).
    "quick": {"train": dict(batch_size=12)},
    # CPU, about 15 minutes: BASE (700 steps x batch 32), the experiments' full presets.
    # Spelled out, so that it also overrides an embedded quick LM.
    "full": {"train": dict(num_steps=700, batch_size=32)},
    # Accelerators: a ~25M-parameter model with longer context, trained much longer.
    "paper": {"d_model": 512, "num_layers": 8, "num_heads": 8, "num_kv_heads": 4,
              "d_ff": 1536, "seq_len": 512, "learning_rate": 1e-3, "warmup_steps": 500,
              "dtype": "bfloat16",
              "train": dict(num_steps=20000, batch_size=128, checkpoint_every=1000,
                            log_every=100)},
    # Seconds: what the tests train (25k parameters).
    "tiny": {"d_model": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "d_ff": 64,
             "seq_len": 32, "learning_rate": 1e-2, "warmup_steps": 10,
             "train": dict(num_steps=300, batch_size=16, checkpoint_every=0, log_every=50)},
}

# Train-loop keys that do not change the trained weights.
_NOT_WEIGHTS = tuple(f"train.{k}" for k in train_lib.BOOKKEEPING_KEYS)
STAGE = "trained_lm"
SUBDIR = "lm"


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  """The LM's config (a sub-config for experiment configs): quick, full, paper or tiny."""
  config = config_lib.build("lm", BASE, PRESETS, preset)
  with config.unlocked():
    del config["preset"]
  return config


def validate(config, prefix: str = "") -> None:
  """Raises a one-line ConfigError for an invalid LM config.

  Args:
    config: the LM config itself (``prefix=""``), or a config that embeds it.
    prefix: the dotted path of the LM config inside ``config`` ("lm." for an
      experiment's ``config.lm``); errors name the full key (``config.lm.d_model``).
  """
  if prefix and not prefix.endswith("."):
    prefix += "."
  c, k = config_lib, lambda key: prefix + key
  root = config
  config = config_lib.get(root, prefix[:-1]) if prefix else root
  c.one_of(root, k("family"), transformer.FAMILIES)
  for key in ("d_model", "num_layers", "num_heads", "num_kv_heads", "d_ff"):
    c.positive_int(root, k(key))
  c.positive_int(root, k("seq_len"), minimum=2)
  c.positive_int(root, k("warmup_steps"), minimum=0)
  c.check_train(root, k("train"))
  c.require(root, k("warmup_steps"), config.warmup_steps < config.train.num_steps,
            f"a number below {prefix}train.num_steps={config.train.num_steps}")
  c.require(root, k("num_kv_heads"), config.num_heads % config.num_kv_heads == 0,
            f"a divisor of {prefix}num_heads={config.num_heads}")
  c.require(root, k("num_heads"), config.d_model % config.num_heads == 0,
            f"a divisor of {prefix}d_model={config.d_model}")
  c.one_of(root, k("dtype"), ("float32", "bfloat16"))
  c.positive(root, k("learning_rate"))
  c.in_interval(root, k("weight_decay"), 0.0, 1.0, closed="low")
  c.positive(root, k("grad_clip"))
  c.in_range(root, k("validation_fraction"), 0.0, 1.0)


class TrainedLM(NamedTuple):
  """A trained LM and the corpus it was trained on.

  Attributes:
    model: the `Transformer` module.
    params: its parameter pytree (``model.apply({"params": params}, tokens)``).
    corpus: the stdlib `TextCorpus` (train / validation bytes).
    history: the metrics logged by this call's training (empty when restored).
  """
  model: transformer.Transformer
  params: Any
  corpus: text.TextCorpus
  history: list


def model_config(config) -> transformer.TransformerConfig:
  """The `TransformerConfig` an LM config describes (byte vocabulary of 256).

  Example:
    >>> model = transformer.Transformer(model_config(get_config("tiny")))
  """
  family = transformer.llama_config if config.family == "llama" else transformer.neox_config
  return family(vocab_size=ByteTokenizer.vocab_size, d_model=config.d_model,
                num_layers=config.num_layers, num_heads=config.num_heads,
                num_kv_heads=config.num_kv_heads, d_ff=config.d_ff,
                max_seq_len=max(config.seq_len, 1024), qk_norm=config.qk_norm,
                dtype=config.dtype)


def make_optimizer(config) -> optax.GradientTransformation:
  """clip_by_global_norm, then AdamW(b2 = 0.95) with warmup + cosine decay to lr / 10.

  The learning rate rises linearly from 0 to ``learning_rate`` over ``warmup_steps``
  and decays as a cosine to ``learning_rate / 10`` at ``train.num_steps``.
  """
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, config.learning_rate, max(config.warmup_steps, 1), config.train.num_steps,
      end_value=config.learning_rate * 0.1)
  return optax.chain(optax.clip_by_global_norm(config.grad_clip),
                     optax.adamw(schedule, b2=0.95, weight_decay=config.weight_decay))


def lm_loss(model: transformer.Transformer):
  """``loss_fn(params, batch, key)`` for the common loop: mean next-byte cross-entropy."""

  def loss_fn(params, batch, key):
    del key
    tokens = batch["tokens"]
    logits = model.apply({"params": params}, tokens[:, :-1])
    loss = -jnp.mean(logprobs.token_logprobs(logits, tokens[:, 1:]))
    return loss, {"bits_per_byte": logprobs.nats_to_bits(loss)}

  return loss_fn


def fingerprint(config) -> str:
  """16 hex digits over the keys that determine the trained weights.

  Everything but the loop's logging, checkpointing and device keys (``_NOT_WEIGHTS``:
  ``train.log_every``, ``train.progress_bar``, ...), so evaluating or resuming with
  other such settings reuses the same run.
  """
  return trials.config_fingerprint(config, exclude=_NOT_WEIGHTS)


def _claim(workdir: str, fp: str) -> None:
  """Marks ``workdir`` as the run of fingerprint ``fp``, unless another LM holds it."""
  if os.path.exists(trials.stage_path(workdir, STAGE)):
    raise config_lib.ConfigError(
        f"{workdir} holds an LM trained with a different config "
        f"({os.path.join(trials.STAGES_SUBDIR, STAGE)}.json); choose another lm_workdir "
        "or remove that directory")
  checkpoints = os.path.join(workdir, train_lib.CHECKPOINT_SUBDIR)
  if os.path.isdir(checkpoints) and os.listdir(checkpoints):
    raise config_lib.ConfigError(
        f"{workdir} holds checkpoints with no record of the LM config that wrote them; "
        "choose another lm_workdir or remove that directory")
  trials.write_stage(workdir, STAGE, fp, {"finished": False})


def load_or_train(config, workdir: str) -> TrainedLM:
  """The trained model of ``config``: restored from ``workdir``'s checkpoint, or trained.

  A finished run is restored; an interrupted one resumes from its newest checkpoint
  (batches are a pure function of (seed, step), so the weights come out the same);
  an empty directory trains from scratch. Loss:

      loss = -(1 / (B T)) sum_{b, t} log p(x_{b, t+1} | x_{b, <=t}).

  Args:
    config: the LM config (``get_config(...)`` or an experiment's ``config.lm``).
    workdir: the run directory (checkpoints, metrics.jsonl, the stage marker).

  Returns:
    The `TrainedLM` (``history`` empty when nothing was left to train).

  Raises:
    ConfigError: for an invalid config, or when ``workdir`` holds an LM of a
      different config (its checkpoints are kept, never overwritten).

  Example:
    >>> trained = load_or_train(get_config("tiny"), "/tmp/tiny_lm")
    >>> logits = trained.model.apply({"params": trained.params}, tokens)
  """
  validate(config)
  fp = fingerprint(config)
  marker = trials.read_stage(workdir, STAGE, fp)
  if marker is None:
    _claim(workdir, fp)
  corpus = text.stdlib_corpus(config.validation_fraction)
  model = transformer.Transformer(model_config(config))
  seq_len, batch_size = config.seq_len, config.train.batch_size
  result = train_lib.train(
      init_fn=lambda key: transformer.init_params(model, key),
      loss_fn=lm_loss(model),
      batch_fn=lambda seed, step: text.window_batch(corpus.train, seed, step, batch_size,
                                                    seq_len),
      optimizer=make_optimizer(config), config=config.train, workdir=workdir,
      param_axes=transformer.logical_axes(model))  # Sharded when train.mesh asks for it.
  if not _finished(marker):
    trials.write_stage(workdir, STAGE, fp,
                       {"finished": True, "num_steps": int(config.train.num_steps)})
  return TrainedLM(model, result.state.params, corpus, result.history)


def is_trained(config, workdir: str) -> bool:
  """Whether ``workdir`` holds a finished run of exactly this LM config."""
  return _finished(trials.read_stage(workdir, STAGE, fingerprint(config)))


def _finished(marker) -> bool:
  # A marker without "finished" was written by the first version, after training.
  return bool(marker and marker.get("finished", True))


def trained_lm(config, workdir: str, lm_workdir: str = "") -> TrainedLM:
  """The trained LM of ``config`` for an experiment running in ``workdir``.

  Args:
    config: the LM config (an experiment's ``config.lm``).
    workdir: the experiment's directory.
    lm_workdir: where the LM lives. Empty (the default): ``<parent of workdir>/lm``
      (the ``lm`` experiment's run, as ``make reproduce`` lays out ``results/``) if
      it finished training with the same weight-determining config, else
      ``workdir/lm`` (restored, or trained there first). A path: that directory
      (restored, or trained there first).

  Returns:
    The `TrainedLM`.

  Raises:
    ConfigError: as `load_or_train`, for the directory it picked.

  Example:
    >>> trained = trained_lm(config.lm, workdir, lm_workdir=config.lm_workdir)
  """
  if lm_workdir:
    return load_or_train(config, lm_workdir)
  sibling = os.path.join(os.path.dirname(os.path.abspath(workdir)), SUBDIR)
  if is_trained(config, sibling):
    return load_or_train(config, sibling)
  return load_or_train(config, os.path.join(workdir, SUBDIR))
