"""Benchmark: our GRPO (JAX, common/rl) vs TRL's GRPOTrainer (PyTorch) on the same model and work.

  python -m experiments.benchmarks.adathink [--repeats=5] [--warmup=1] [--prompts=4]
      [--group_size=8] [--max_new_tokens=48] [--torch_threads=0] [--tiny]

(needs the ``bench`` extra: ``pip install -e '.[test,bench]'``, which adds torch,
transformers, trl and google-tunix; nothing at run time imports them; without tunix the
tunix columns are left out).

Model: a random byte-level Llama (``common.models.transformer``, the shared LM's ``quick``
shape: vocab 256, d_model 128, 4 layers, 4 query / 2 key-value heads, SwiGLU 384, about
0.9M parameters) is initialised in JAX, exported with
``common.models.hf.save_hf_checkpoint`` and opened by ``transformers`` from that folder,
so both sides run the same weights in float32 on the CPU (the largest logit gap of one
forward pass is printed as a check). TRL gets a byte-level ``PreTrainedTokenizerFast``
whose id of every byte is the byte (what ``common.data.tokenizers.ByteTokenizer``
encodes), with byte 0 as its end and padding token (``EOS_ID``).

Work, the same on both sides: each step draws ``prompts`` prompts from the training split
of ``methods.adathink.data.make_task`` (``"f3 m1 m0 m2\\n"``-style case prompts), samples
G = ``group_size`` completions of each at temperature 1 (top-p 1, no top-k) up to
``max_new_tokens`` tokens, stopping a row at byte 0; the reward is correctness
(``methods.adathink.data.is_correct``); the update is one GRPO step on the B*G
completions (advantages normalised in each group, clip 0.2 / 0.28, k3 KL to the initial
policy with coefficient ``kl_coef`` (a reference forward pass on both sides), token-mean
aggregation, global-norm clip 1, AdamW). The weights are random, so rows end by length
(or at a sampled byte 0), and the rewards are mostly 0: the work is the same whatever
the reward.

* ours: ``common.rl.rollout.make_grpo_batch_fn`` (the jitted ragged KV-cache sampler,
  with ``rescore=False``: ``old_logp`` is the sampler's own, at temperature 1, as TRL and
  tunix take it with one update per rollout; rewards on the host, group advantages,
  reference log-probs) and ``common.rl.grpo.make_loss_fn`` through
  ``common.train.train_step`` (the common loop's jitted, donating update), with the batch
  placed by ``common.sharding.shard_batch`` as ``train`` does; prompts are left-padded to
  the pool's longest prompt so nothing retraces.
* TRL: ``trl.GRPOTrainer`` with its generation through ``transformers``' ``generate``
  (``use_cache``, dynamic cache; vLLM does not run on a CPU), ``per_device_train_batch_size
  = B*G``, one generation per optimizer step, float32 (``bf16=False``; TRL's default bf16
  autocast changes the precision), ``gradient_checkpointing=False`` (TRL's default True
  only saves memory, which this model does not need), ``torch.set_num_threads`` = the core
  count (``--torch_threads``), logging and saving off.

Timed, interleaved (our step runs from TRL's ``on_step_end`` callback, so drifts in the
machine's load hit both sides), medians over ``repeats`` steps after ``warmup`` untimed
steps per side (ours: compilation):

- rollout tokens/s, generation only: sampled completion tokens (up to and including the
  end byte) / seconds of the sampler. Ours: ``common.models.sampling.generate`` with the
  exact call ``rollout.rollout`` makes (the G-fold repeated ragged prompts), run on its
  own on the current params; theirs: the trainer's ``model.generate`` call, timed in
  place;
- one full GRPO step, seconds: ours ``batch_fn`` + ``train_step`` until the new params are
  ready; theirs ``on_step_begin`` -> ``on_step_end`` (generation, rewards, advantages,
  reference log-probs, loss, backward, clipping, the optimizer and scheduler steps).
The ratios are ours / TRL for tokens/s and TRL / ours for step time (> 1: ours faster).

* tunix (a JAX GRPO library, when installed): ``tunix.rl.grpo.GRPOLearner`` on an
  ``RLCluster`` whose actor and reference are tunix's Llama3 built from the same
  safetensors folder (``create_model_from_safe_tensors``), the "vanilla" rollout engine
  (its jitted KV-cache sampler), the same tokenizer, reward, G, N, temperature,
  optimizer, beta and token-mean aggregation (tunix has no clip-higher: its clip is 0.2
  on both sides). It runs after TRL, not interleaved, with its own ``warmup`` +
  ``repeats`` steps; generation is its ``RLCluster.generate`` call (tokenising, sampling
  and detokenising), a step the time from one rollout's start to the next's.

``--tiny`` runs the shared LM's ``tiny`` shape, 2 prompts x G = 2, 4 tokens, 1 warm-up and
1 timed step per side, torch on 1 thread unless ``--torch_threads`` says otherwise, in
seconds (the suite's smoke test, which runs beside the rest of the suite: a 2-thread
pool on a busy 2-core machine stalls).
"""

from __future__ import annotations

import importlib.util
import os
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

from common import config as config_lib
from common import lm as lm_lib
from common import sharding
from common import train as train_lib
from common.data.tokenizers import ByteTokenizer
from common.models import hf
from common.models import sampling
from common.models import transformer
from common.rl import grpo
from common.rl import rollout
from experiments.benchmarks import machine_line
from methods.adathink import data

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 5, "timed GRPO steps per side (medians reported)")
flags.DEFINE_integer("warmup", 1, "untimed steps per side first (ours: compilation)")
flags.DEFINE_integer("prompts", 4, "prompts per step (B)")
flags.DEFINE_integer("group_size", 8, "completions per prompt (G)")
flags.DEFINE_integer("max_new_tokens", 48, "completion tokens at most (N)")
flags.DEFINE_float("learning_rate", 1e-5, "AdamW learning rate (both sides)")
flags.DEFINE_float("kl_coef", 1e-2, "k3 KL coefficient (TRL's beta); 0 drops the reference")
flags.DEFINE_integer("torch_threads", 0, "torch.set_num_threads for TRL (0: the core count)")
flags.DEFINE_integer("seed", 0, "weights, task and sampling seed")
flags.DEFINE_bool("tiny", False, "a seconds-long run: the LM's tiny shape, 2 prompts x G = 2, "
                  "4 tokens, 1 warm-up + 1 timed step")

# tunix is optional (its columns are left out without it), so it is not listed here; its
# version goes into the machine line all the same.
PEERS = ("torch", "transformers", "trl", "datasets")

EOS_ID = 0  # byte 0 never occurs in the task's text: the end (and padding) token of both sides


def _gpt2_byte_chars() -> list[str]:
  """GPT-2's printable stand-in character of each byte 0..255 (the ByteLevel alphabet)."""
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
               + list(range(ord("®"), ord("ÿ") + 1)))
  chars, extra = {}, 0
  for b in range(256):
    if b in printable:
      chars[b] = chr(b)
    else:
      chars[b] = chr(256 + extra)
      extra += 1
  return [chars[b] for b in range(256)]


def byte_tokenizer():
  """A ``PreTrainedTokenizerFast`` whose ids are the UTF-8 bytes (as ``ByteTokenizer``).

  A BPE model without merges over the 256 ByteLevel characters, id b for byte b; byte
  ``EOS_ID`` is its end and padding token (skipped when decoding with
  ``skip_special_tokens``).
  """
  import tokenizers
  import transformers

  chars = _gpt2_byte_chars()
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={c: b for b, c in enumerate(chars)},
                                                   merges=[]))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                           use_regex=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=chars[EOS_ID],
                                              pad_token=chars[EOS_ID], padding_side="left")


def _models(seed, preset):
  """Our random Llama of the shared LM's ``preset`` shape and its export opened by
  transformers: (model, params, folder, hf, the largest logit gap)."""
  import torch
  import transformers

  config = lm_lib.model_config(lm_lib.get_config(preset))
  model = transformer.Transformer(config)
  params = transformer.init_params(model, jax.random.PRNGKey(seed))
  folder = hf.save_hf_checkpoint(tempfile.mkdtemp(prefix="bench_adathink_"), params, config)
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
  tokens = np.random.default_rng(seed).integers(1, config.vocab_size, (2, 24))
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(tokens)))
  with torch.inference_mode():
    theirs = hf_model(torch.tensor(tokens)).logits.numpy()
  return model, params, folder, hf_model, float(np.max(np.abs(ours - theirs)))


def _cases(seed):
  """The prompt pool: the training split of the generated diagnostic task."""
  cases = data.make_task(seed).train
  assert all(EOS_ID not in ByteTokenizer().encode(c.prompt) for c in cases)
  return cases


def _reward(texts, cases):
  return [float(data.is_correct(t, c)) for t, c in zip(texts, cases)]


def _optimizer(lr):
  """Global-norm clip 1, then AdamW without weight decay (TRL's defaults)."""
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=0.0))


def _ours(model, params, cases, b, g, n, lr, kl_coef, seed):
  """Our (generate, step) callables: each runs GRPO step `s` and returns (seconds, tokens)."""
  tok = ByteTokenizer()
  encoded = [tok.encode(c.prompt) for c in cases]
  width = max(map(len, encoded))
  config = grpo.GRPOConfig(group_size=g, kl_coef=kl_coef)

  def prompt_fn(seed_, step):
    pick = np.random.default_rng([seed_, step]).choice(len(cases), b, replace=False)
    prompts, lengths = sampling.pad_prompts([encoded[i] for i in pick], EOS_ID, width)
    return prompts, lengths, [cases[i] for i in pick]

  def reward_fn(r, picked):
    texts = [tok.decode(c[c != EOS_ID]) for c in r.completions()]
    return np.asarray(_reward(texts, [c for c in picked for _ in range(g)]), np.float32)

  batch_fn = rollout.make_grpo_batch_fn(
      model, params if kl_coef else None, prompt_fn, reward_fn, config,
      max_new_tokens=n, eos_id=EOS_ID, pad_id=EOS_ID, rescore=False)
  loss_fn = grpo.make_loss_fn(lambda p, t, **kw: model.apply({"params": p}, t, **kw), config)
  optimizer = _optimizer(lr)
  mesh = sharding.make_mesh()
  state = [train_lib.init_train_state(jax.random.PRNGKey(seed), init_fn=lambda k: params,
                                      optimizer=optimizer, mesh=mesh)]
  key = jax.random.PRNGKey(seed)

  def generate(step):
    prompts, lengths, _ = prompt_fn(seed, step)
    prompts, lengths = jnp.repeat(prompts, g, axis=0), jnp.repeat(lengths, g)
    start = time.perf_counter()
    out = sampling.generate(model, state[0].params, prompts, rollout.rollout_key(seed, step),
                            max_new_tokens=n, temperature=1.0, top_p=1.0,
                            prompt_lengths=lengths, eos_id=EOS_ID, pad_id=EOS_ID,
                            return_info=True)
    tokens = int(jnp.sum(out.lengths))
    return time.perf_counter() - start, tokens

  def step(s):
    start = time.perf_counter()
    batch = sharding.shard_batch(batch_fn(seed, s, state[0].params), mesh)
    state[0], _, _ = train_lib.train_step(state[0], batch, key, loss_fn=loss_fn,
                                          optimizer=optimizer, mesh=mesh)
    jax.block_until_ready(state[0].params)
    return time.perf_counter() - start, int(jnp.sum(batch["lengths"]))

  return generate, step


def _timed_generate(hf_model, record):
  """Wraps ``hf_model.generate`` so that each call appends (seconds, completion tokens)."""
  import torch

  inner = hf_model.generate

  def generate(*args, **kwargs):
    start = time.perf_counter()
    out = inner(*args, **kwargs)
    seconds = time.perf_counter() - start
    completion = out[:, kwargs["input_ids"].shape[1]:]
    ended = completion == EOS_ID
    first = torch.where(ended.any(1), ended.int().argmax(1) + 1, completion.shape[1])
    record.append((seconds, int(first.sum())))
    return out

  hf_model.generate = generate


def _trainer(hf_model, folder, cases, b, g, n, lr, kl_coef, seed, steps, callback):
  """TRL's GRPOTrainer on the same model, prompts, G, N and reward; CPU float32."""
  import datasets
  import trl

  def correctness(completions, case, **kwargs):
    del kwargs
    return _reward(completions, [cases[i] for i in case])

  args = trl.GRPOConfig(
      output_dir=tempfile.mkdtemp(prefix="bench_adathink_trl_"), use_cpu=True, bf16=False,
      gradient_checkpointing=False, per_device_train_batch_size=b * g,
      gradient_accumulation_steps=1, num_generations=g, max_completion_length=n,
      temperature=1.0, top_p=1.0, top_k=0, beta=kl_coef, epsilon=0.2, epsilon_high=0.28,
      loss_type="dapo", learning_rate=lr, weight_decay=0.0, max_grad_norm=1.0,
      max_steps=steps, seed=seed, report_to="none", logging_strategy="no",
      save_strategy="no", disable_tqdm=True, log_completions=False,
      dataloader_pin_memory=False)
  dataset = datasets.Dataset.from_dict({"prompt": [c.prompt for c in cases],
                                        "case": list(range(len(cases)))})
  return trl.GRPOTrainer(model=hf_model, reward_funcs=correctness, args=args,
                         train_dataset=dataset, processing_class=byte_tokenizer(),
                         callbacks=[callback])


def _interleaved_callback(ours_generate, ours_step, measured):
  """A TrainerCallback timing TRL's steps and running our step s after TRL's step s."""
  import transformers

  class Interleave(transformers.TrainerCallback):

    def on_step_begin(self, args, state, control, **kwargs):
      self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
      measured["theirs_step"].append(time.perf_counter() - self.start)
      s = state.global_step - 1
      measured["ours_generate"].append(ours_generate(s))
      measured["ours_step"].append(ours_step(s))

  return Interleave()


def _tunix(folder, config, cases, b, g, n, lr, kl_coef, seed, steps):
  """tunix's GRPOLearner on the same checkpoint, prompts, G, N and reward (vanilla rollout).

  Returns {"tunix_generate": [(seconds, tokens)], "tunix_step": [seconds]}; a step is the
  time from one rollout's start to the next's (the last ends when ``train`` returns).
  """
  from tunix.models.llama3 import model as llama
  from tunix.models.llama3 import params as llama_params
  from tunix.rl import rl_cluster as rlc
  from tunix.rl.grpo import grpo_learner
  from tunix.rl.rollout import base_rollout

  mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  model_config = llama.ModelConfig(
      num_layers=config.num_layers, vocab_size=config.vocab_size, embed_dim=config.d_model,
      hidden_dim=config.d_ff, num_heads=config.num_heads, head_dim=config.dim_per_head,
      num_kv_heads=config.kv_heads, rope_theta=int(config.rope_theta),
      norm_eps=config.norm_eps)
  actor, ref = (llama_params.create_model_from_safe_tensors(folder, model_config, mesh)
                for _ in range(2))
  width = max(len(ByteTokenizer().encode(c.prompt)) for c in cases)
  rollout_config = base_rollout.RolloutConfig(
      max_tokens_to_generate=n, max_prompt_length=width, temperature=1.0, top_p=1.0,
      top_k=None, kv_cache_size=width + n + 16, eos_tokens=[EOS_ID])
  training = rlc.RLTrainingConfig(actor_optimizer=_optimizer(lr), eval_every_n_steps=10**9,
                                  max_steps=steps)
  cluster = rlc.RLCluster(
      actor=actor, reference=ref if kl_coef else None, tokenizer=byte_tokenizer(),
      cluster_config=rlc.ClusterConfig(
          role_to_mesh={r: mesh for r in (rlc.Role.ACTOR, rlc.Role.REFERENCE, rlc.Role.ROLLOUT)},
          rollout_engine="vanilla", training_config=training, rollout_config=rollout_config))

  def correctness(prompts, completions, case, **kwargs):
    del prompts, kwargs
    return _reward(completions, [cases[i] for i in case])

  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster, reward_fns=[correctness],
      algo_config=grpo_learner.GRPOConfig(num_generations=g, beta=kl_coef, epsilon=0.2,
                                          loss_agg_mode="token-mean"))
  measured, starts, inner = {"tunix_generate": []}, [], cluster.generate

  def generate(*args, **kwargs):
    starts.append(time.perf_counter())
    out = inner(*args, **kwargs)
    measured["tunix_generate"].append((time.perf_counter() - starts[-1],
                                       sum(len(t) for t in out.tokens)))
    return out

  cluster.generate = generate
  rng = np.random.default_rng([seed, 7])
  picks = [rng.choice(len(cases), b, replace=False) for _ in range(steps)]
  learner.train([{"prompts": np.array([cases[i].prompt for i in pick]), "case": pick}
                 for pick in picks])
  ends = starts[1:] + [time.perf_counter()]
  measured["tunix_step"] = [e - s for s, e in zip(starts, ends)]
  return measured


def _print_table(measured, warmup, b, g, n):
  """The markdown table of medians (after `warmup` steps) and ratios (> 1: ours faster)."""
  def value(x):
    return x[0] if isinstance(x, tuple) else x

  def tps(side):
    return statistics.median(t / s for s, t in measured[f"{side}_generate"][warmup:])

  def step(side):
    return statistics.median(value(x) for x in measured[f"{side}_step"][warmup:])

  peers = [("theirs", "TRL")] + [("tunix", "tunix")] * ("tunix_step" in measured)
  print()
  print("| measurement | ours (JAX) | " + " | ".join(
      f"{name} | ours / {name}" for _, name in peers) + " |")
  print("|---|---:|" + "---:|---:|" * len(peers))
  print(f"| rollout tokens/s, generation only ({b} prompts x G={g}, <= {n} tokens) | "
        f"{tps('ours'):,.0f} | " + " | ".join(
            f"{tps(p):,.0f} | {tps('ours') / tps(p):.2f}" for p, _ in peers) + " |")
  print(f"| one GRPO step (rollout + update), seconds | {step('ours'):.3f} | " + " | ".join(
      f"{step(p):.3f} | {step(p) / step('ours'):.2f}" for p, _ in peers) + " |")
  print()
  print("seconds per step ([warm-up] then timed): " + "; ".join(
      f"{k} [" + ", ".join(f"{value(x):.3f}" for x in v[:warmup]) + "] "
      + ", ".join(f"{value(x):.3f}" for x in v[warmup:]) for k, v in measured.items()))
  print("completion tokens per rollout (median): " + ", ".join(
      f"{k.split('_')[0]} {statistics.median(t for _, t in v[warmup:]):.0f}"
      for k, v in measured.items() if k.endswith("generate")) + f" (of {b * g * n} at most)")


def _versions(torch_threads):
  import flax
  return (f"flax {flax.__version__}, optax {optax.__version__}, torch {torch_threads} "
          f"threads")


def parse_flags(argv):
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  for name, minimum in (("repeats", 1), ("warmup", 1), ("prompts", 1), ("group_size", 2),
                        ("max_new_tokens", 1), ("torch_threads", 0)):
    if getattr(FLAGS, name) < minimum:
      config_lib.die(f"--{name} must be >= {minimum}, got {getattr(FLAGS, name)}")
  if not FLAGS.learning_rate > 0 or not FLAGS.kl_coef >= 0:
    config_lib.die(f"--learning_rate must be > 0 and --kl_coef >= 0, got "
                   f"{FLAGS.learning_rate} and {FLAGS.kl_coef}")
  return rest


def main(argv):
  del argv
  print(machine_line(PEERS + ("tunix",)), flush=True)
  if importlib.util.find_spec("trl") is None:
    config_lib.die("trl is not installed; run `make bench` (installs the bench extra) to run "
                   "this benchmark")
  import torch

  torch.set_num_threads(FLAGS.torch_threads or (1 if FLAGS.tiny else os.cpu_count()))
  torch.manual_seed(FLAGS.seed)
  seed = FLAGS.seed
  if FLAGS.tiny:
    b, g, n, warmup, repeats, preset = 2, 2, 4, 1, 1, "tiny"
  else:
    b, g, n = FLAGS.prompts, FLAGS.group_size, FLAGS.max_new_tokens
    warmup, repeats, preset = FLAGS.warmup, FLAGS.repeats, "quick"
  model, params, folder, hf_model, gap = _models(seed, preset)
  cases = _cases(seed)
  print("# AdaThink GRPO benchmark: ours vs TRL GRPOTrainer (and tunix), float32 CPU")
  with_tunix = importlib.util.find_spec("tunix") is not None
  print(_versions(torch.get_num_threads()))
  print(f"model: {transformer.num_params(params) / 1e6:.2f}M params ({model.config.d_model} "
        f"wide, {model.config.num_layers} layers); {len(cases)} prompts in the pool; "
        f"max |logit gap| ours vs transformers: {gap:.2e}")
  ours_generate, ours_step = _ours(model, params, cases, b, g, n, FLAGS.learning_rate,
                                   FLAGS.kl_coef, seed)
  measured = {"ours_generate": [], "theirs_generate": [], "ours_step": [], "theirs_step": []}
  _timed_generate(hf_model, measured["theirs_generate"])
  trainer = _trainer(hf_model, folder, cases, b, g, n, FLAGS.learning_rate, FLAGS.kl_coef,
                     seed, warmup + repeats,
                     _interleaved_callback(ours_generate, ours_step, measured))
  trainer.train()
  if with_tunix:
    measured.update(_tunix(folder, model.config, cases, b, g, n, FLAGS.learning_rate,
                           FLAGS.kl_coef, seed, warmup + repeats))
  _print_table(measured, warmup, b, g, n)
  sys.stdout.flush()


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
