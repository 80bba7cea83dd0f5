"""Experiment: AdaThink-Med's adaptive length reward in two-stage GRPO, against length baselines.

1. The base model (the shared byte LM, or an HF checkpoint in the paper preset) is
   fine-tuned with SFT on full reasoning chains of the generated diagnosis task, so
   that it always thinks (skipped for MedQA, which has no chains).
2. Stage 1: vanilla GRPO (0.9 accuracy + 0.1 format) from the SFT model.
3. Stage 2: from the stage-1 parameters, one GRPO run per variant (`config.variants`):
   vanilla continued (the reference), AdaThink (EMA threshold; fixed-threshold and
   sequence-mean-aggregation ablations), a uniform length penalty at two strengths,
   an LCPO-style target length and ShorterBetter. The AdaThink EMA state is the
   loop's carry, checkpointed with the parameters.
4. Every policy answers the held-out cases greedily: accuracy, response tokens and the
   fraction of empty think blocks per depth k, and the length histogram.

Resumable: SFT and each GRPO run keep orbax checkpoints under
workdir/runs/<fingerprint>/, each evaluation is a `cached_stage`.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from common import llm
from common import lm as lm_lib
from common import report
from common import train as train_lib
from common import trials
from common.models.transformer import Transformer
from common.rl import grpo as grpo_lib
from common.rl import rollout as rollout_lib
from experiments.configs import adathink as config_module
from experiments.plots import adathink as plots
from methods.adathink import data
from methods.adathink import reward as reward_lib
from methods.adathink import training


class Setup(NamedTuple):
  model: Transformer
  base_params: Any
  codec: training.Codec
  kb: data.KnowledgeBase | None   # None for MedQA questions (no chains, no SFT).
  train_cases: list
  test_cases: list
  prompt_width: int


def _fp(config, *keys: str) -> str:
  """The fingerprint of these top-level keys, without the loops' bookkeeping keys."""
  loops = [f"{k}.train.{b}" for k in ("lm", "sft", "grpo") for b in train_lib.BOOKKEEPING_KEYS]
  return trials.config_fingerprint({k: config[k] for k in keys}, exclude=loops)


def _hf_model(path: str) -> tuple[Transformer, Any, training.Codec]:
  model, params, tokenizer, eos = llm.load_checkpoint(path)
  return model, params, training.Codec(tokenizer, eos, eos)


def make_setup(config, workdir: str) -> Setup:
  if config.paper.hf_checkpoint:
    model, params, codec = _hf_model(config.paper.hf_checkpoint)
  else:
    trained = lm_lib.trained_lm(config.lm, workdir, lm_workdir=config.lm_workdir)
    model, params, codec = trained.model, trained.params, training.BYTES
  d = config.data
  if config.paper.medqa_path:
    questions = data.load_medqa_jsonl(config.paper.medqa_path)
    held = np.random.default_rng([d.seed, 18]).random(len(questions)) < d.holdout
    kb, train = None, [q for q, h in zip(questions, held) if not h]
    test = [q for q, h in zip(questions, held) if h]
  else:
    kb = data.make_knowledge_base(d.seed, d.num_findings, d.num_conditions, d.num_modifiers,
                                  d.num_diagnoses)
    task = data.make_task(d.seed, d.cases_per_k, d.max_k, d.holdout, kb=kb)
    train, test = task.train, task.test
  if not train or not test:
    raise ValueError(f"the task has {len(train)} training and {len(test)} held-out cases; "
                     "both must be non-empty (raise data.cases_per_k or change data.holdout)")
  width = training.prompt_width(train + test, codec)
  return Setup(model, params, codec, kb, train, test, width)


def _apply(model: Transformer):
  return lambda p, t, **kw: model.apply({"params": p}, t, **kw)


def sft(setup: Setup, config, workdir: str) -> Any:
  """The SFT warm-up on full chains, through the common loop (resumable)."""
  if setup.kb is None:
    return setup.base_params
  task = data.Task(setup.kb, setup.train_cases, setup.test_cases)
  width = training.sft_width(setup.kb, setup.train_cases, setup.codec)
  base = setup.base_params
  result = train_lib.train(
      init_fn=lambda key: base, loss_fn=training.sft_loss_fn(_apply(setup.model)),
      batch_fn=lambda seed, step: training.sft_batch(
          task, seed, step, config.sft.train.batch_size, width, setup.codec,
          config.sft.answer_only_fraction),
      optimizer=lm_lib.make_optimizer(config.sft), config=config.sft.train,
      workdir=os.path.join(workdir, "runs", _fp(config, "lm", "data", "sft", "paper"), "sft"))
  return result.state.params


def grpo_run(setup: Setup, config, init_params: Any, variant: str, num_steps: int,
             run_dir: str) -> Any:
  """One GRPO run of `num_steps` from `init_params` with the variant's reward; the
  reference policy of its KL is `init_params`; the reward state is the loop's carry."""
  spec, g = config.rewards[variant], config.grpo
  hparams = {k: v for k, v in spec.items() if k not in ("reward", "loss_agg")}
  if spec.reward == "adathink" and hparams.get("fixed_theta", -1.0) < 0:
    hparams["fixed_theta"] = None            # < 0 in the config: the EMA threshold.
  gconf = grpo_lib.GRPOConfig(group_size=g.group_size, clip_low=g.clip_low,
                              clip_high=g.clip_high, dual_clip=g.dual_clip,
                              kl_coef=g.kl_coef, loss_agg=spec.loss_agg)
  batch_fn = rollout_lib.make_grpo_batch_fn(
      setup.model, init_params,
      training.make_prompt_fn(setup.train_cases, g.prompts_per_step, setup.prompt_width,
                              setup.codec),
      training.make_reward_fn(spec.reward, g.group_size, setup.codec, **hparams), gconf,
      max_new_tokens=g.max_new_tokens, eos_id=setup.codec.eos_id, pad_id=setup.codec.pad_id,
      temperature=g.temperature, top_p=g.top_p, stateful_reward=True)
  loop = config.grpo.train.copy_and_resolve_references()
  loop.num_steps = num_steps
  optimizer = optax.chain(optax.clip_by_global_norm(g.grad_clip), optax.adam(g.learning_rate))
  result = train_lib.train(
      init_fn=lambda key: init_params,
      loss_fn=grpo_lib.make_loss_fn(_apply(setup.model), gconf, g.temperature),
      batch_fn=batch_fn, optimizer=optimizer, config=loop, workdir=run_dir, on_policy=True,
      carry=reward_lib.init_state())
  return result.state.params


def evaluate(setup: Setup, config, params: Any, workdir: str, name: str, fp: str) -> dict:
  """Greedy answers to the held-out cases (a cached stage): summary and per-case arrays."""
  def compute():
    ev = training.evaluate(setup.model, params, setup.test_cases,
                           max_new_tokens=config.grpo.max_new_tokens,
                           batch_size=config.eval_batch_size, width=setup.prompt_width,
                           codec=setup.codec)
    return {"summary": training.summarize(ev), "k": ev.k.tolist(),
            "tokens": ev.tokens.tolist(), "correct": ev.correct.astype(int).tolist(),
            "empty_think": ev.empty_think.astype(int).tolist(),
            "examples": ev.responses[:: max(1, len(ev.responses) // 8)]}
  return trials.cached_stage(workdir, f"eval_{name}", fp, compute)


def train_and_evaluate(setup: Setup, config, workdir: str) -> dict[str, dict]:
  """SFT, stage 1, every stage-2 variant; the evaluation of each policy by name."""
  base_fp = _fp(config, "lm", "data", "sft", "paper")
  params = sft(setup, config, workdir)
  evals = {"sft": evaluate(setup, config, params, workdir, "sft", base_fp)}
  stage1_fp = _fp(config, "lm", "data", "sft", "paper", "grpo", "stage1_steps")
  stage1_fp = trials.config_fingerprint({"s": stage1_fp, "vanilla": config.rewards.vanilla})
  root = os.path.join(workdir, "runs", stage1_fp)
  stage1 = grpo_run(setup, config, params, "vanilla", config.stage1_steps,
                    os.path.join(root, "stage1"))
  evals["stage1"] = evaluate(setup, config, stage1, workdir, "stage1", stage1_fp)
  for variant in config.variants:
    fp = trials.config_fingerprint({"s": stage1_fp, "n": config.stage2_steps,
                                    "v": config.rewards[variant]})
    tuned = grpo_run(setup, config, stage1, variant, config.stage2_steps,
                     os.path.join(root, f"{variant}-{fp}"))
    evals[variant] = evaluate(setup, config, tuned, workdir, variant, fp)
    del tuned
  return evals


def _depth_mean(ev: dict, key: str, ks) -> float:
  k, values = np.asarray(ev["k"]), np.asarray(ev[key], float)
  sel = np.isin(k, list(ks))
  return float(values[sel].mean()) if sel.any() else float("nan")


def _hard_accuracy_at(evals: dict, config, reduction: float) -> tuple[float, str]:
  """The uniform penalty's hard-case accuracy interpolated at AdaThink's reduction."""
  hard, base = range(config.hard_min_k, config.data.max_k + 1), evals["vanilla"]
  points = sorted((_tokens(base) / _tokens(evals[v]), _depth_mean(evals[v], "correct", hard))
                  for v in config.variants if config.rewards[v].reward == "uniform_length")
  if not points:
    return float("nan"), "no uniform-penalty row"
  xs, ys = zip(*points)
  inside = xs[0] <= reduction <= xs[-1]
  how = "interpolated" if inside else "nearest strength (outside the measured range)"
  return float(np.interp(reduction, xs, ys)), how


def _tokens(ev: dict) -> float:
  return ev["summary"]["all"]["tokens"]


def claims(evals: dict, config) -> list[report.Claim]:
  van, ada = evals["vanilla"], evals["adathink"]
  easy = range(0, config.easy_max_k + 1)
  hard = range(config.hard_min_k, config.data.max_k + 1)
  reduction = _tokens(van) / _tokens(ada)
  drop = van["summary"]["all"]["accuracy"] - ada["summary"]["all"]["accuracy"]
  gap = _depth_mean(ada, "empty_think", easy) - _depth_mean(ada, "empty_think", hard)
  ada_hard_drop = _depth_mean(van, "correct", hard) - _depth_mean(ada, "correct", hard)
  uni_hard, how = _hard_accuracy_at(evals, config, reduction)
  uni_hard_drop = _depth_mean(van, "correct", hard) - uni_hard
  return [
      report.Claim(f"AdaThink cuts response tokens vs vanilla GRPO by >= "
                   f"{config.min_token_reduction}x (byte tokens, greedy, held-out cases)",
                   "4.7x-6.4x fewer tokens", f"{reduction:.2f}x ({_tokens(van):.1f} -> "
                   f"{_tokens(ada):.1f} tokens)", reduction, ">=", config.min_token_reduction),
      report.Claim(f"...while losing at most {100 * config.max_accuracy_drop:.0f} points of "
                   "accuracy", "at most about 2 points", f"{100 * drop:+.1f} points lost",
                   drop, "<=", config.max_accuracy_drop),
      report.Claim(f"Lengths become bimodal without a router: the empty-think fraction on "
                   f"easy cases (k <= {config.easy_max_k}) exceeds that on hard ones "
                   f"(k >= {config.hard_min_k}) by >= {config.min_empty_think_gap}",
                   "answer-only on easy, full reasoning on hard", f"gap {gap:.2f}", gap, ">=",
                   config.min_empty_think_gap),
      report.Claim("At AdaThink's reduction, the uniform length penalty loses more accuracy "
                   f"on hard cases (k >= {config.hard_min_k})", "uniform penalty hurts hard "
                   "cases more", f"hard-case drop: uniform {100 * uni_hard_drop:+.1f} "
                   f"({how}) vs AdaThink {100 * ada_hard_drop:+.1f} points",
                   uni_hard_drop - ada_hard_drop, ">", 0.0),
  ]


def figures(evals: dict, config) -> dict[str, float]:
  out = {}
  for name, ev in evals.items():
    out[f"{name}_accuracy"] = ev["summary"]["all"]["accuracy"]
    out[f"{name}_tokens"] = ev["summary"]["all"]["tokens"]
    out[f"{name}_empty_think"] = ev["summary"]["all"]["empty_think"]
  out["token_reduction"] = _tokens(evals["vanilla"]) / _tokens(evals["adathink"])
  return out


@report.register("adathink", title="AdaThink-Med: adaptive thinking length via GRPO",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  setup = make_setup(config, workdir)
  evals = train_and_evaluate(setup, config, workdir)
  agg = {v: config.rewards[v].loss_agg for v in config.variants}
  files = [plots.length_histograms(workdir, evals, config.variants),
           plots.per_depth(workdir, evals, config.variants)]
  plots.write_table(workdir, evals, agg)
  return report.Result(claims=report.claims_table(claims(evals, config)),
                       figures=figures(evals, config), plots=files)
