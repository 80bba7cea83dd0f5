"""Experiment: FusionRoute vs expert-only, routing-only, merging and fine-tuning baselines.

1. Data: four domains (stdlib prose, code, docstrings, generated arithmetic) and mixed
   documents interleaving them (`methods/fusion_route/data.py`).
2. Models (quick/tiny): a base LM of the expert size on the union; one expert per
   domain fine-tuned from it; the direct fine-tuning baseline (the base on the union,
   as many steps as all experts); a router LM, smaller than any expert, pretrained on
   the union. The paper preset loads experts, router LM and base from HF folders.
3. Routers on the frozen experts: FusionRoute stage 1, then CDPO (stage 2), the
   no-complementary-logit ablation, Co-LLM's latent routing; and the coverage case
   (FusionRoute and its ablation with ROT13 prose in the mixture).
4. Bits per byte of every method on each domain's held-out split, the mixed split and
   the ROT13 split; the routing pattern by domain and character class.

Resumable: every training run keeps orbax checkpoints under workdir/runs/<name>-<fp>/;
the preference pairs and the evaluation are `cached_stage`s.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import numpy as np

from common import lm as lm_lib
from common import report
from common import train as train_lib
from common import trials
from common.data import text as text_lib
from common.data.tokenizers import ByteTokenizer
from common.models import hf
from common.models.transformer import Transformer, init_params
from common.rl import dpo
from experiments.configs import fusion_route as config_module
from experiments.plots import fusion_route as plots
from methods.fusion_route import baselines, data, merging, training
from methods.fusion_route import ensemble as ens_lib
from methods.fusion_route.router import Router, from_lm_params

ROUTERS = ("fusion", "no_complementary", "co_llm")
COVERAGE = ("fusion_cov", "no_complementary_cov")


class Models(NamedTuple):
  experts: tuple[Transformer, ...]
  router: Router
  base: Transformer | None      # the experts' common base (None: not available)
  names: tuple[str, ...]        # each expert's name (its domain, or its folder)
  loaded: dict | None           # the paper preset's loaded parameters


def _fp(*parts) -> str:
  """Fingerprint of config parts without the loops' bookkeeping keys."""
  def plain(p):
    if hasattr(p, "to_dict"):
      p = p.to_dict()
    if isinstance(p, dict):
      return {k: plain(v) for k, v in p.items() if k not in train_lib.BOOKKEEPING_KEYS}
    return p
  return trials.config_fingerprint({str(i): plain(p) for i, p in enumerate(parts)})


def make_models(config) -> tuple[Models, Any]:
  """The modules (and, in the paper preset, the loaded weights) and the tokenizer;
  every bad-input check happens here, before any training."""
  p = config.paper
  if p.expert_checkpoints:
    cks = [hf.load_hf_checkpoint(path) for path in p.expert_checkpoints]
    router_ck = hf.load_hf_checkpoint(p.router_checkpoint)
    base_ck = hf.load_hf_checkpoint(p.base_checkpoint) if p.base_checkpoint else None
    experts = tuple(Transformer(c.config) for c in cks)
    router = Router(router_ck.config, len(experts))
    if cks[0].tokenizer is None:
      raise FileNotFoundError(f"{p.expert_checkpoints[0]}: no tokenizer.json; the data are "
                              "tokenized with the experts' tokenizer")
    tok = cks[0].tokenizer
    loaded = {"experts": tuple(c.params for c in cks), "router_lm": router_ck.params,
              "base": None if base_ck is None else base_ck.params}
    ens_lib.check_params(ens_lib.make_ensemble(experts, router),
                         {"experts": loaded["experts"], "router": loaded["router_lm"]})
    names = tuple(os.path.basename(os.path.normpath(x)) for x in p.expert_checkpoints)
    base = None if base_ck is None else Transformer(base_ck.config)
    return Models(experts, router, base, names, loaded), tok
  max_len = max(config.seq_len, config.stage2.prompt_len + config.stage2.completion_len)
  expert = Transformer(training.transformer_config(config.expert, 256, max_len))
  experts = tuple(expert for _ in config.experts)
  router = Router(training.transformer_config(config.router, 256, max_len), len(experts))
  ens = ens_lib.make_ensemble(experts, router)
  key = jax.random.PRNGKey(0)
  shapes = jax.eval_shape(lambda: {"experts": tuple(init_params(expert, key) for _ in experts),
                                   "router": from_lm_params(router, init_params(
                                       Transformer(router.config), key), key)})
  ens_lib.check_params(ens, shapes)
  return Models(experts, router, expert, tuple(config.experts), None), ByteTokenizer()


def make_domains(config, tokenizer) -> data.Domains:
  d = config.data

  def encode(text: str) -> np.ndarray:
    return np.asarray(getattr(tokenizer, "encode_array", tokenizer.encode)(text), np.int32)

  return data.make_domains(d.seed, d.validation_fraction, d.arithmetic_docs,
                           (d.mixed_train_segments, d.mixed_validation_segments),
                           d.segment_bytes, encode)


def _union(domains: data.Domains, config, extra=()) -> tuple[list, list]:
  streams = [domains.train[d] for d in data.DOMAINS] + [domains.mixed_train.tokens]
  weights = [1.0] * len(data.DOMAINS) + [config.data.mixed_weight]
  for stream, weight in extra:
    streams.append(stream)
    weights.append(weight)
  return streams, weights


def train_lm(model: Transformer, init: Any, streams, weights, sub, run_dir: str,
             seq_len: int, num_steps: int | None = None) -> Any:
  """Next-token training of one LM on a weighted mixture of streams (common loop)."""
  loop = sub.train.copy_and_resolve_references()
  if num_steps is not None:
    loop.num_steps = num_steps
  opt_config = sub.copy_and_resolve_references()
  opt_config.train.num_steps = loop.num_steps
  result = train_lib.train(
      init_fn=(lambda key: init) if init is not None else (
          lambda key: init_params(model, key)),
      loss_fn=lm_lib.lm_loss(model),
      batch_fn=lambda seed, step: training.mixture_batch(streams, weights, seed, step,
                                                         loop.batch_size, seq_len),
      optimizer=lm_lib.make_optimizer(opt_config), config=loop, workdir=run_dir)
  return result.state.params


def _run_dir(workdir: str, name: str, fp: str) -> str:
  return os.path.join(workdir, "runs", f"{name}-{fp}")


def train_models(models: Models, domains: data.Domains, config, workdir: str) -> dict:
  """Base, experts, direct fine-tuning and the router LM (quick/tiny), or the loaded
  paper checkpoints; {"experts", "base", "direct", "router_lm"} and their fingerprints."""
  fp_data = _fp(config.data, config.seq_len, config.paper)
  union = _union(domains, config)
  if models.loaded is not None:
    out = dict(models.loaded, direct=None, fp=fp_data)
    if out["base"] is not None:
      out["direct"] = train_lm(models.base, out["base"], *union, config.expert_train,
                               _run_dir(workdir, "direct", fp_data), config.seq_len,
                               len(models.experts) * config.expert_train.train.num_steps)
    return out
  fp_base = _fp(fp_data, config.expert, config.base_train)
  base = train_lm(models.base, None, *union, config.base_train,
                  _run_dir(workdir, "base", fp_base), config.seq_len)
  fp_exp = _fp(fp_base, config.expert_train)
  experts = tuple(train_lm(models.base, base, [domains.train[d]], [1.0], config.expert_train,
                           _run_dir(workdir, f"expert_{d}", fp_exp), config.seq_len)
                  for d in config.experts)
  direct = train_lm(models.base, base, *union, config.expert_train,
                    _run_dir(workdir, "direct", _fp(fp_exp, config.experts)), config.seq_len,
                    len(experts) * config.expert_train.train.num_steps)
  router_lm_model = Transformer(models.router.config)
  fp_router = _fp(fp_data, config.router, config.router_pretrain)
  router_lm = train_lm(router_lm_model, None, *union, config.router_pretrain,
                       _run_dir(workdir, "router_lm", fp_router), config.seq_len)
  return {"experts": experts, "base": base, "direct": direct, "router_lm": router_lm,
          "fp": _fp(fp_exp, fp_router, config.experts)}


def train_router(models: Models, trained: dict, streams, weights, config, variant: str,
                 run_dir: str, num_steps: int | None = None) -> Any:
  """One stage-1 router run on the frozen experts (common loop, resumable)."""
  ens = ens_lib.make_ensemble(models.experts, models.router)
  s = config.stage1
  if variant == "co_llm":
    loss_fn = training.latent_loss_fn(ens)
  else:
    loss_fn = training.stage1_loss_fn(ens, margin=s.margin, route_weight=s.route_weight,
                                      hard_weight=s.hard_weight,
                                      complementary=variant.startswith("fusion"))
  loop = s.train.copy_and_resolve_references()
  opt = s.copy_and_resolve_references()
  if num_steps is not None:
    loop.num_steps = opt.train.num_steps = num_steps
  init = {"experts": tuple(trained["experts"]),
          "router": from_lm_params(models.router, trained["router_lm"], jax.random.PRNGKey(0))}
  result = train_lib.train(
      init_fn=lambda key: init, loss_fn=loss_fn,
      batch_fn=lambda seed, step: training.mixture_batch(streams, weights, seed, step,
                                                         loop.batch_size, config.seq_len),
      optimizer=training.frozen_experts(lm_lib.make_optimizer(opt)), config=loop,
      workdir=run_dir)
  return result.state.params


def train_routers(models: Models, trained: dict, domains: data.Domains, config,
                  workdir: str) -> dict:
  """Stage 1 of every router variant, the coverage case, and stage 2 (CDPO)."""
  union = _union(domains, config)
  cover = _union(domains, config, [(domains.rot13_train, config.coverage.rot13_weight)])
  routers = {}
  for variant in ROUTERS:
    fp = _fp(trained["fp"], config.stage1, variant)
    routers[variant] = train_router(models, trained, *union, config, variant,
                                    _run_dir(workdir, variant, fp))
  for variant in COVERAGE:
    fp = _fp(trained["fp"], config.stage1, config.coverage, variant)
    routers[variant] = train_router(models, trained, *cover, config, variant,
                                    _run_dir(workdir, variant, fp), config.coverage.steps)
  fp1 = _fp(trained["fp"], config.stage1, "fusion")
  routers["fusion_stage1"] = routers["fusion"]
  routers["fusion"] = cdpo(models, routers["fusion_stage1"], domains, config, workdir, fp1)
  return routers


def cdpo(models: Models, stage1: Any, domains: data.Domains, config, workdir: str,
         fp1: str) -> Any:
  """Stage 2: DPO of the combined policy (experts frozen) on (gold, sampled) pairs."""
  ens = ens_lib.make_ensemble(models.experts, models.router)
  s = config.stage2
  apply_fn = training.policy_apply_fn(ens)
  fp = _fp(fp1, s)

  def pairs():
    width = s.prompt_len + s.completion_len
    windows = training.mixture_batch(*_union(domains, config), config.data.seed + 7919, 0,
                                     s.num_pairs, width - 1)["tokens"]
    made = training.preference_pairs(ens, stage1, windows, s.completion_len,
                                     jax.random.PRNGKey(config.data.seed), s.temperature)
    ref = jax.jit(lambda p, b: dpo.reference_logprobs(apply_fn, p, b))(stage1, made)
    return {k: np.asarray(v) for k, v in ref.items()}

  batch = trials.cached_stage(workdir, "preference_pairs", fp, pairs, kind="npz")
  loop = s.train

  def batch_fn(seed, step):
    rows = np.random.default_rng((seed, step)).choice(s.num_pairs, loop.batch_size)
    return {k: v[rows] for k, v in batch.items()}

  config_dpo = dpo.DPOConfig(beta=s.beta, label_smoothing=s.label_smoothing,
                             sft_weight=s.sft_weight)
  result = train_lib.train(
      init_fn=lambda key: stage1, loss_fn=dpo.make_loss_fn(apply_fn, config_dpo),
      batch_fn=batch_fn, optimizer=training.frozen_experts(lm_lib.make_optimizer(s)),
      config=loop, workdir=_run_dir(workdir, "cdpo", fp))
  return result.state.params


CHAR_CLASSES = ("letter", "digit", "space", "symbol")


def char_classes(tokens: np.ndarray) -> np.ndarray:
  """The class index (CHAR_CLASSES) of each byte token."""
  t = np.asarray(tokens)
  letter = ((t >= 65) & (t <= 90)) | ((t >= 97) & (t <= 122))
  digit = (t >= 48) & (t <= 57)
  space = np.isin(t, (9, 10, 13, 32))
  return np.select([letter, digit, space], [0, 1, 2], 3)


def _bpb(logp, bpt) -> float:
  return training.bits_per_byte(logp, bpt)


def _single_models(models: Models, trained: dict, domains: data.Domains, config, ev) -> dict:
  """name -> (module, params) of the one-model baselines that apply: weight merging when
  the experts share one architecture (task arithmetic also needs their base), direct
  fine-tuning when there is a base; and the chosen task-arithmetic scale."""
  out, model = {}, models.experts[0]
  same = len({m.config for m in models.experts}) == 1
  if same:
    out["weight_average"] = (model, merging.average(trained["experts"]))
  scale = None
  if same and trained["base"] is not None and models.base.config == model.config:
    tune = domains.mixed_train.tokens
    scores = {}
    for s in config.task_arithmetic_scales:
      params = merging.task_arithmetic(trained["base"], trained["experts"], s)
      scores[s] = -np.mean(ev(tune, model=model, params=params)["single"])
    scale = min(scores, key=scores.get)
    out["task_arithmetic"] = (model, merging.task_arithmetic(trained["base"],
                                                             trained["experts"], scale))
  if trained["direct"] is not None:
    out["direct_finetune"] = (models.base, trained["direct"])
  return out, scale


def _ensemble_rows(stats: dict, models: Models, config) -> dict:
  """method -> per-token log-probs on one split, from the routers' evaluations."""
  f = stats["fusion"]
  rows = {"fusion_route": f["hard"], "fusion_route_stage1": stats["fusion_stage1"]["hard"],
          "soft_routing": f["soft"], "no_complementary": stats["no_complementary"]["route_only"],
          "co_llm": stats["co_llm"]["route_only"],
          "sequence_routing": baselines.sequence_routing(f["expert"], f["scores"],
                                                         config.seq_route_prefix)[0],
          "oracle_token_routing": baselines.best_expert_per_token(f["expert"])}
  for i, name in enumerate(models.names):
    rows[f"expert_{name}"] = f["expert"][i]
  return rows


def evaluate(models: Models, trained: dict, routers: dict, domains: data.Domains, config,
             workdir: str) -> dict:
  """Bits per byte of every method on every split, and the routing pattern (cached)."""
  ens = ens_lib.make_ensemble(models.experts, models.router)
  e = config.eval

  def ev(tokens, **kw):
    return training.evaluate_stream(tokens, config.seq_len, e.batch_size, e.max_windows, **kw)

  def compute():
    splits = {**{d: domains.validation[d] for d in data.DOMAINS},
              "mixed": domains.mixed_validation.tokens}
    singles, scale = _single_models(models, trained, domains, config, ev)
    bpb, mixed_stats = {}, None
    for split, tokens in splits.items():
      stats = {r: ev(tokens, ensemble=ens, params=routers[r]) for r in
               ("fusion", "fusion_stage1", "no_complementary", "co_llm")}
      rows = _ensemble_rows(stats, models, config)
      for name, (model, params) in singles.items():
        rows[name] = ev(tokens, model=model, params=params)["single"]
      bpt = domains.bytes_per_token[split]
      for name, logp in rows.items():
        bpb.setdefault(name, {})[split] = _bpb(logp, bpt)
      if split == "mixed":
        mixed_stats = stats["fusion"]
    return {"bpb": bpb, "coverage": _coverage(ens, routers, domains, ev, models),
            "task_arithmetic_scale": scale,
            **_pattern(mixed_stats, domains, config, models)}

  fp = _fp(trained["fp"], config.stage1, config.stage2, config.coverage, config.eval,
           config.task_arithmetic_scales, config.seq_route_prefix)
  return trials.cached_stage(workdir, "evaluation", fp, compute)


def _coverage(ens, routers: dict, domains: data.Domains, ev, models: Models) -> dict:
  """Bits per byte on held-out ROT13 prose: the coverage routers and each expert."""
  bpt = domains.bytes_per_token["rot13"]
  fusion = ev(domains.rot13_validation, ensemble=ens, params=routers["fusion_cov"])
  plain = ev(domains.rot13_validation, ensemble=ens, params=routers["no_complementary_cov"])
  out = {"fusion_route": _bpb(fusion["hard"], bpt),
         "no_complementary": _bpb(plain["route_only"], bpt)}
  for i, name in enumerate(models.names):
    out[f"expert_{name}"] = _bpb(fusion["expert"][i], bpt)
  return out


def _pattern(stats: dict, domains: data.Domains, config, models: Models) -> dict:
  """Share of each domain's (and character class's) tokens routed to each expert on the
  mixed split, and a routed text sample."""
  e = config.eval
  choice = np.argmax(stats["scores"], axis=-1)
  labels = training.window_domains(domains.mixed_validation.domains, config.seq_len,
                                   e.batch_size, e.max_windows)
  windows = np.concatenate(list(text_lib.eval_windows(
      domains.mixed_validation.tokens, config.seq_len, e.batch_size, e.max_windows)))
  classes = char_classes(windows[:, 1:])
  n = len(models.experts)

  def shares(groups, count):
    return [[float(np.mean(choice[groups == g] == k)) if np.any(groups == g) else 0.0
             for k in range(n)] for g in range(count)]

  rows = min(8, len(windows))
  return {"by_domain": shares(labels, len(data.DOMAINS)),
          "by_char_class": shares(classes, len(CHAR_CLASSES)),
          "sample_tokens": windows[:rows, 1:].reshape(-1).tolist(),
          "sample_choices": choice[:rows].reshape(-1).tolist(),
          "sample_domains": labels[:rows].reshape(-1).tolist()}


BASELINES = ("sequence_routing", "co_llm", "weight_average", "task_arithmetic",
             "direct_finetune")


def agreement(ev: dict, models: Models) -> float:
  """Mean over experts named after a domain of the share of that domain's mixed-split
  tokens routed to it (nan when no expert is named after a domain)."""
  vals = [ev["by_domain"][data.DOMAINS.index(n)][i] for i, n in enumerate(models.names)
          if n in data.DOMAINS]
  return float(np.mean(vals)) if vals else float("nan")


def claims(ev: dict, models: Models, config) -> list[report.Claim]:
  bpb, cov = ev["bpb"], ev["coverage"]
  fr = bpb["fusion_route"]["mixed"]
  rivals = {k: bpb[k]["mixed"] for k in bpb
            if k in BASELINES or (k.startswith("expert_"))}
  best = min(rivals, key=rivals.get)
  gaps = {n: bpb["fusion_route"][n] / bpb[f"expert_{n}"][n] - 1.0 for n in models.names
          if n in data.DOMAINS}
  worst = max(gaps, key=gaps.get) if gaps else "none"
  nocomp = bpb["no_complementary"]["mixed"] - fr
  gain = 1.0 - cov["fusion_route"] / cov["no_complementary"]
  agree = agreement(ev, models)
  return [
      report.Claim("On the mixed split FusionRoute has lower bits/byte than every baseline "
                   "(each expert, sequence-level routing, Co-LLM routing, weight averaging, "
                   "task arithmetic, direct fine-tuning)",
                   "beats sequence- and token-level collaboration, merging and direct "
                   "fine-tuning", f"{fr:.3f} vs best baseline {best} {rivals[best]:.3f}",
                   rivals[best] - fr, ">", 0.0),
      report.Claim(f"In each domain FusionRoute is within {100 * config.max_domain_gap:.0f}% "
                   "of that domain's expert (bits/byte)", "competitive with domain experts",
                   ", ".join(f"{n} {100 * g:+.1f}%" for n, g in gaps.items()),
                   gaps.get(worst, float("nan")), "<=", config.max_domain_gap),
      report.Claim("The complementary logit matters: without it the mixed split is worse, and "
                   "on a token class no expert covers (ROT13 prose) it cuts bits/byte by >= "
                   f"{100 * config.min_coverage_gain:.0f}%", "pure expert routing cannot "
                   "realise the optimal policy without global coverage",
                   f"mixed: {bpb['no_complementary']['mixed']:.3f} vs {fr:.3f}; ROT13: "
                   f"{cov['no_complementary']:.3f} -> {cov['fusion_route']:.3f} "
                   f"({100 * gain:.0f}% lower)", gain, ">=", config.min_coverage_gain,
                   also=((nocomp, ">", 0.0),)),
      report.Claim("Routing pattern: the router sends most of each domain's tokens in mixed "
                   f"documents to that domain's expert (mean share >= "
                   f"{config.min_routing_agreement})", "token-level expert selection "
                   "(routing plot and routed text sample)", f"mean share {agree:.2f} "
                   f"(chance {1 / len(models.experts):.2f})", agree, ">=",
                   config.min_routing_agreement),
  ]


def figures(ev: dict) -> dict[str, float]:
  out = {f"{m}_{s}": v for m, splits in ev["bpb"].items() for s, v in splits.items()}
  out.update({f"rot13_{m}": v for m, v in ev["coverage"].items()})
  if ev["task_arithmetic_scale"] is not None:
    out["task_arithmetic_scale"] = ev["task_arithmetic_scale"]
  return out


def routed_note(ev: dict, models: Models, decode) -> str:
  """The routed sample as text: each run of tokens sent to one expert is prefixed by
  that expert's name in brackets."""
  tokens, choices = ev["sample_tokens"], ev["sample_choices"]
  parts, start = [], 0
  for i in range(1, len(tokens) + 1):
    if i == len(tokens) or choices[i] != choices[start]:
      parts.append(f"[{models.names[choices[start]]}]" + decode(tokens[start:i]))
      start = i
  table = ["| mixed-split tokens of | " + " | ".join(models.names) + " |",
           "|---|" + "---|" * len(models.names)]
  for d, row in zip(data.DOMAINS, ev["by_domain"]):
    table.append(f"| {d} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
  return ("Share of each domain's tokens routed to each expert (FusionRoute, mixed "
          "split):\n\n" + "\n".join(table) + "\n\nA routed sample (`[expert]` marks "
          "where the router switches):\n\n```\n" + "".join(parts) + "\n```")


@report.register("fusion_route", title="FusionRoute: token-level routing with a "
                 "complementary logit", validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  models, tokenizer = make_models(config)
  domains = make_domains(config, tokenizer)
  trained = train_models(models, domains, config, workdir)
  routers = train_routers(models, trained, domains, config, workdir)
  ev = evaluate(models, trained, routers, domains, config, workdir)
  files = [plots.bits_per_byte(workdir, ev["bpb"]),
           plots.routing_pattern(workdir, ev["by_domain"], ev["by_char_class"],
                                 models.names, data.DOMAINS, CHAR_CLASSES),
           plots.coverage(workdir, ev["coverage"])]
  if models.loaded is None:
    files.append(plots.routed_sample(workdir, ev["sample_tokens"], ev["sample_choices"],
                                     models.names))
  return report.Result(claims=report.claims_table(claims(ev, models, config)),
                       figures=figures(ev), plots=files,
                       notes=[routed_note(ev, models, tokenizer.decode)])
