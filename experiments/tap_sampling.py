"""Experiment: TapSampling on chunked manipulation policies, against single-shot,
best-of-K, Gaussian perturbation, the VAE without its verifier and a simulator oracle.

For every environment in `config.envs` and seed: the scripted expert's demonstrations
(and held-out ones) are collected; the base policies (`config.policies`), the
Action-VAE and the progress verifier are trained on them through `common.train` (each
run resumes from its checkpoints under `runs/<env>-s<seed>-<model>-<fp>`); then every
method is evaluated closed-loop for `config.episodes` episodes, one `TrialLog` row per
(env, seed, policy, method, K) in `evals.jsonl`, so an interrupted run resumes at the
next evaluation. Coverage (MMD of candidates to the expert's own chunks from the same
held-out states) and verifier quality (correlation, forward-vs-reversed AUC) are rows
of the same log.

Checked claims (the TapSampling abstract): (1) TapSampling raises each base policy's
success rate without fine-tuning it; (2) it beats best-of-K and Gaussian perturbation
at the same candidate count; (3) the VAE's candidates cover the expert's chunks better
than the policy's N proposals; (4) the verifier tracks true progress and scores
reversed chunks lower.
"""

from __future__ import annotations

import functools
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats
from sklearn import metrics as sk_metrics

from common import envs
from common import kernels
from common import report
from common import train as train_lib
from common import trials
from common.data import lerobot
from common.envs import pusht
from common.envs import rollout
from experiments.configs import tap_sampling as config_module
from experiments.plots import tap_sampling as plots
from methods import tap_sampling as ts
from methods.tap_sampling import baselines, metrics, sampler, training, windows

_NOT_RESULTS = ("preset", "envs", "policies", "methods", "num_seeds", "pusht", "lerobot_path")
# What the training data depends on (the models' own settings are fingerprinted apart).
_NOT_DATA = (*_NOT_RESULTS, "seed", "policy", "vae", "verifier", "sampling", "episodes",
             "coverage", "time_limits", "execute_steps", "x64")


def demonstrations(env, config, seed: int):
  """(training, held-out) expert demonstrations, pure functions of the seed."""
  key_train, key_held = jax.random.split(jax.random.PRNGKey(1000 + seed))
  return (rollout.collect_demos(env, key_train, config.demos.episodes),
          rollout.collect_demos(env, key_held, config.demos.heldout))


def _fit(name: str, workdir: str, init_fn, loss_fn, batch_fn, sub, data_fp: str, seed: int,
         ema: bool = False):
  """One model trained on the common loop, resumed from `runs/<name>-<fp>` (the
  fingerprint covers the model's sub-config and the data it is trained on)."""
  loop = sub.train.copy_and_resolve_references()
  with loop.unlocked():
    loop.seed = seed
  fp = trials.config_fingerprint(sub)[:8] + data_fp
  opt = training.optimizer(sub.learning_rate, loop.num_steps,
                           ema_decay=sub.ema_decay if ema else None)
  result = train_lib.train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=opt,
                           config=loop, workdir=os.path.join(workdir, "runs", f"{name}-{fp}"))
  state = result.state
  return ts.parameter_ema(state.opt_state) if ema else state.params


def train_models(env, demos, config, workdir: str, seed: int, data_salt: str = "") -> dict:
  """{policy name: sampler.Models} for every base policy, sharing one VAE and verifier
  (`data_salt` tells apart data that the config's own keys do not determine)."""
  h, a, s = config.horizon, env.action_dim, env.action_high
  data = windows.chunk_dataset(demos, h, s)
  tag = f"{env.name}-s{seed}"
  data_fp = trials.config_fingerprint(config, exclude=_NOT_DATA, salt=data_salt)[:8]
  vae = ts.ActionVAE(h, a, config.vae.latent_dim, config.vae.width, config.vae.depth)
  vae_batches = training.chunk_batch_fn(data, config.vae.train.batch_size)
  vae_params = _fit(
      f"{tag}-vae", workdir, lambda k: vae.init(k, data.chunks[:2], k),
      ts.vae_loss_fn(vae, config.vae.kl_weight),
      lambda sd, st: {"chunks": vae_batches(sd, st)["chunks"]}, config.vae, data_fp, seed,
      ema=True)
  ver = ts.ProgressVerifier(h, a, tuple(config.verifier.hidden))
  ver_params = _fit(
      f"{tag}-verifier", workdir, lambda k: ver.init(k, env.obs_dim), ver.loss_fn,
      training.window_batch_fn(demos, config.verifier.train.batch_size, h, s,
                               config.verifier.min_len, config.verifier.max_len),
      config.verifier, data_fp, seed)
  out = {}
  for name in config.policies:
    pol = ts.make_policy(name, h, a, hidden=tuple(config.policy.hidden),
                         num_steps=config.policy.ode_steps)
    params = _fit(f"{tag}-{name}", workdir, lambda k, p=pol: p.init(k, env.obs_dim),
                  pol.loss_fn, training.chunk_batch_fn(data, config.policy.train.batch_size),
                  config.policy, data_fp, seed)
    out[name] = sampler.Models(pol, params, vae, vae_params, ver, ver_params, s)
  return out


@functools.lru_cache(maxsize=None)
def _act_fn(env, policy, vae, verifier, scale, cfg: ts.SamplerConfig):
  """The control step as a stable function of (params, key, obs, state), so that
  `run_chunked` compiles once per (env, models' structure, method settings)."""
  def act(params, key, obs, state):
    models = sampler.Models(policy, params[0], vae, params[1], verifier, params[2], scale)
    return ts.act(models, cfg, key, obs, state, env)
  return act


def evaluate(env, models: sampler.Models, cfg: ts.SamplerConfig, config, seed: int):
  """Closed-loop rollouts of one method (`common.envs.rollout.Rollout`)."""
  act = _act_fn(env, models.policy, models.vae, models.verifier, models.scale, cfg)
  params = (models.policy_params, models.vae_params, models.verifier_params)
  return rollout.run_chunked(env, act, jax.random.PRNGKey(seed), config.episodes,
                             config.horizon, cfg.execute_steps, params=params,
                             with_state=True)


def plan(config, first_env: bool) -> list[tuple[str, int]]:
  """(method, K) pairs to evaluate: the sweep over K on the first environment."""
  s = config.sampling
  out = []
  for m in config.methods:
    if m == "single":
      out.append((m, 1))
    elif m in ("tap", "best_of_k", "gaussian") and first_env:
      out += [(m, k) for k in sorted(set(s.sweep) | {s.total})]
    else:
      out.append((m, s.total))
  return out


def sampler_config(config, method: str, total: int) -> ts.SamplerConfig:
  s = config.sampling
  n = min(s.num_policy, total)
  return ts.SamplerConfig(method, n, max(total, n), s.threshold, s.sigma, config.execute_steps)


def eval_env(name: str, config):
  """The task as evaluated: the registered env with the configured time limit (the
  demonstrations come from the env's own, longer horizon)."""
  return envs.make(name, max_steps=config.time_limits[name])


def eval_row(env, models, config, seed: int, policy: str, method: str, total: int) -> dict:
  out = evaluate(eval_env(env.name, config), models, sampler_config(config, method, total),
                 config, seed)
  return {"kind": "eval", "env": env.name, "seed": seed, "policy": policy, "method": method,
          "total": total, "success": float(np.mean(out.success)),
          "progress": float(np.mean(out.final_progress))}


def coverage_row(env, models, demos, config, seed: int, policy: str) -> dict:
  """Mean unbiased MMD^2 to the expert's chunks from the same held-out states: the N
  policy proposals vs the K - N chunks the VAE decodes from them."""
  c, s = config.coverage, config.sampling
  key_e, key_c = jax.random.split(jax.random.PRNGKey(2000 + seed))
  e, t = windows.sample_frames(demos, 2000 + seed, c.states)
  states = jax.tree.map(lambda x: x[e, t], demos.states)
  obs = jnp.asarray(demos.obs)[e, t]
  expert = rollout.expert_chunks(env, key_e, states, config.horizon,
                                 c.expert_samples) / env.action_high
  ell = _expert_lengthscale(expert)
  cfg = sampler_config(config, "tap", s.total)

  def one(key, o, y, state):
    cands = ts.candidates(models, cfg, key, o)
    n = cfg.num_policy
    score = models.verifier.score(models.verifier_params, o, cands)
    truth = baselines.true_progress(env, state, cands * models.scale, cfg.execute_steps)
    return metrics.mmd2(cands[:n], y, ell), metrics.mmd2(cands[n:], y, ell), score, truth

  keys = jax.random.split(key_c, c.states)
  proposals, decoded, score, truth = jax.jit(jax.vmap(one))(keys, obs, expert, states)
  return {"kind": "coverage", "env": env.name, "seed": seed, "policy": policy,
          "verifier_rank_corr": _within_state_spearman(score, truth),
          "mmd_policy": float(np.mean(proposals)), "mmd_vae": float(np.mean(decoded)),
          "mmd_policy_se": float(np.std(proposals) / np.sqrt(c.states)),
          "mmd_vae_se": float(np.std(decoded) / np.sqrt(c.states))}


def _within_state_spearman(score, truth) -> float:
  """Mean over states of the rank correlation between the verifier's scores and the
  simulator's progress of the same candidates (states where every candidate makes the
  same progress are skipped)."""
  rhos = [stats.spearmanr(s, t)[0] for s, t in zip(np.asarray(score), np.asarray(truth))
          if np.ptp(t) > 1e-6]
  return float(np.mean(rhos)) if rhos else float("nan")


def _expert_lengthscale(expert) -> float:
  """The median heuristic on the pooled expert chunks (one lengthscale per environment)."""
  flat = np.asarray(expert).reshape(-1, np.prod(expert.shape[2:]))
  return float(kernels.median_heuristic(flat, max_points=1000))


def verifier_row(env, models, demos, config, seed: int) -> dict:
  """Held-out windows: correlation of predicted and true progress; AUC of each forward
  window's score against its reversal's from the same state."""
  b = windows.progress_windows(demos, 3000 + seed, 0, batch_size=2000,
                               horizon=config.horizon, scale=env.action_high,
                               min_len=config.verifier.min_len,
                               max_len=config.verifier.max_len)
  pred = models.verifier.predict(models.verifier_params, b["obs"], b["chunks"])
  fwd = b["forward"]
  ahead = models.verifier.score(models.verifier_params, b["obs"][fwd], b["chunks"][fwd])
  back = models.verifier.score(models.verifier_params, b["obs"][fwd],
                               windows.reverse_chunks(b["chunks"][fwd]))
  scores = np.concatenate([np.asarray(ahead), np.asarray(back)])
  labels = np.concatenate([np.ones(len(ahead)), np.zeros(len(back))])
  return {"kind": "verifier", "env": env.name, "seed": seed,
          "pearson": float(metrics.pearson(pred, b["labels"])),
          "auc": float(sk_metrics.roc_auc_score(labels, scores))}


def _env_rows(env, config, workdir: str, seed: int, first: bool, log, done) -> tuple:
  """Every row of one (environment, seed), computing only those not yet logged."""
  rows, models = [], None
  wanted = [("verifier", None, None, None)]
  for policy in config.policies:
    wanted.append(("coverage", policy, None, None))
    wanted += [("eval", policy, m, k) for m, k in plan(config, first)]
  for kind, policy, method, total in wanted:
    key = (kind, env.name, seed, policy, method, total)
    row = done.get(key)
    if row is None:
      if models is None:
        demos, held = demonstrations(env, config, seed)
        models = train_models(env, demos, config, workdir, seed)
      if kind == "verifier":
        row = verifier_row(env, models[config.policies[0]], held, config, seed)
      elif kind == "coverage":
        row = coverage_row(env, models[policy], held, config, seed, policy)
      else:
        row = eval_row(env, models[policy], config, seed, policy, method, total)
      row = log.append(row)
    rows.append(row)
  return rows


def _row_key(r: dict) -> tuple:
  return (r["kind"], r["env"], r["seed"], r.get("policy"), r.get("method"), r.get("total"))


@report.register("tap_sampling", title="TapSampling: inference-time sampling for chunked "
                 "robot policies", validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  config_module.preflight(config)
  fp = trials.config_fingerprint(config, exclude=_NOT_RESULTS)
  rows = []
  with trials.TrialLog(os.path.join(workdir, "evals.jsonl"), fp) as log:
    done = log.done(_row_key)
    for i, name in enumerate(config.envs):
      env = envs.make(name)
      for seed in range(config.seed, config.seed + config.num_seeds):
        rows += _env_rows(env, config, workdir, seed, i == 0, log, done)
    if config.pusht.enabled:
      rows += _pusht_rows(config, workdir, log, done)
  files = [plots.success_vs_candidates(workdir, rows, config),
           plots.methods_bar(workdir, rows, config),
           rollout_plot(workdir, config)]
  return report.Result(claims=report.claims_table(claims(rows, config)),
                       figures=figures(rows, config), plots=files,
                       notes=[pusht_note(rows, config)] if config.pusht.enabled else [])


def _rate(rows, **where) -> tuple[float, float]:
  """Mean and standard error over seeds of the evaluation rows matching ``where``."""
  got = [r["success"] for r in rows if r["kind"] == "eval" and
         all(r.get(k) == v for k, v in where.items())]
  if not got:
    return float("nan"), float("nan")
  return float(np.mean(got)), float(np.std(got) / np.sqrt(len(got)))


def _cells(config):
  return [(e, p) for e in config.envs for p in config.policies]


def claims(rows: list[dict], config) -> list[report.Claim]:
  k = config.sampling.total
  n = f"{config.num_seeds} seeds x {config.episodes} episodes, K = {k}"
  rate = lambda e, p, m, kk=k: _rate(rows, env=e, policy=p, method=m, total=kk)[0]
  fmt = lambda e, p, m, kk=k: f"{e}/{p} {m} {100 * rate(e, p, m, kk):.0f}%"
  gains = [rate(e, p, "tap") - rate(e, p, "single", 1) for e, p in _cells(config)]
  out = [report.Claim(
      f"TapSampling raises every base policy's success rate by >= 5 points, no fine-tuning "
      f"({n})", "substantially improves multiple generalist policies",
      "; ".join(f"{fmt(e, p, 'single', 1)} -> {100 * rate(e, p, 'tap'):.0f}%"
                for e, p in _cells(config)), gains, ">=", 0.05)]
  peers = [m for m in ("best_of_k", "gaussian") if m in config.methods]
  if peers:
    out.append(report.Claim(
        f"TapSampling beats {' and '.join(peers)} at the same candidate count ({n})",
        "TapSampling > policy sampling and perturbation",
        "; ".join(fmt(e, p, m) for e, p in _cells(config) for m in ("tap", *peers)),
        [rate(e, p, "tap") - rate(e, p, m) for e, p in _cells(config) for m in peers],
        ">", 0.0))
  cov = {(r["env"], r["policy"]): r for r in _mean_rows(rows, "coverage")}
  out.append(report.Claim(
      "The VAE's candidates cover the expert's chunks better than the policy's N proposals "
      "(lower MMD^2 to held-out expert chunks from the same states)",
      "VAE samples approximate the true action distribution",
      "; ".join(f"{e}/{p} {c['mmd_policy']:.3f} -> {c['mmd_vae']:.3f}"
                for (e, p), c in cov.items()),
      [c["mmd_policy"] - c["mmd_vae"] for c in cov.values()], ">", 0.0))
  ver = {r["env"]: r for r in _mean_rows(rows, "verifier")}
  out.append(report.Claim(
      "The verifier's progress tracks the truth (Pearson r >= 0.5 on held-out windows) and "
      "scores reversed chunks lower (AUC >= 0.75)", "a semantically grounded verifier",
      "; ".join(f"{e} r {v['pearson']:.2f}, AUC {v['auc']:.2f}" for e, v in ver.items()),
      [v["pearson"] for v in ver.values()], ">=", 0.5,
      also=[([v["auc"] for v in ver.values()], ">=", 0.75)]))
  return out


def _mean_rows(rows, kind: str) -> list[dict]:
  """Rows of one kind averaged over seeds, per (env, policy)."""
  groups = {}
  for r in rows:
    if r["kind"] == kind:
      groups.setdefault((r["env"], r.get("policy")), []).append(r)
  out = []
  for (e, p), rs in groups.items():
    mean = {k: float(np.mean([r[k] for r in rs])) for k, v in rs[0].items()
            if isinstance(v, float)}
    out.append({"env": e, "policy": p, **mean})
  return out


def figures(rows: list[dict], config) -> dict[str, float]:
  out = {}
  for r in rows:
    if r["kind"] == "eval":
      mean, se = _rate(rows, env=r["env"], policy=r["policy"], method=r["method"],
                       total=r["total"])
      name = f"{r['env']}_{r['policy']}_{r['method']}_k{r['total']}"
      out[f"{name}_success"], out[f"{name}_success_se"] = mean, se
  for r in rows:
    if r["kind"] == "pusht":
      name = f"pusht_{r['policy']}_{r['method']}_k{r['total']}"
      out.update({f"{name}_{k}": r[k] for k in ("success", "coverage", "max_coverage")})
  for kind in ("coverage", "verifier"):
    for r in _mean_rows(rows, kind):
      tag = r["env"] if r["policy"] is None else f"{r['env']}_{r['policy']}"
      out.update({f"{tag}_{k}": v for k, v in r.items() if isinstance(v, float)
                  and k != "seed"})
  return out


def rollout_plot(workdir: str, config) -> str:
  """Single-shot and TapSampling rollouts of the first policy on the first environment."""
  env = envs.make(config.envs[0])
  demos, _ = demonstrations(env, config, config.seed)
  models = train_models(env, demos, config, workdir, config.seed)[config.policies[0]]
  env = eval_env(env.name, config)
  shown = {}
  for method, total in (("single", 1), ("tap", config.sampling.total)):
    out = evaluate(env, models, sampler_config(config, method, total), config, config.seed)
    shown[method] = jax.tree.map(lambda x: np.asarray(x)[:4], out)
  return plots.rollouts(workdir, env.name, shown)


# --- Push-T (gym-pusht): the same policies, VAE, verifier and sampler in the real simulator.

def pusht_features(obs):
  """(..., 5) Push-T state in pixels -> (..., 8): agent and block positions in [-1, 1],
  cos and sin of the block angle (it wraps at 2 pi), and block - agent."""
  xy = np.asarray(obs[..., :4], np.float32) / (pusht.WORKSPACE / 2) - 1.0
  angle = np.asarray(obs[..., 4:5], np.float32)
  return np.concatenate([xy, np.cos(angle), np.sin(angle), xy[..., 2:4] - xy[..., :2]], -1)


def pusht_demos(config, workdir: str, seed: int):
  """Push-T demonstrations as target displacements u_t = target_t - target_{t-1} (px,
  target_{-1} = the agent's start), from the planning expert or a LeRobot dataset."""
  p = config.pusht
  fp = trials.config_fingerprint({"pusht": p.to_dict(), "lerobot": config.lerobot_path,
                                  "seed": seed})

  def compute():
    if config.lerobot_path:
      d = lerobot.to_demos(lerobot.load_lerobot(config.lerobot_path), max_steps=p.max_steps)
    else:
      d = pusht.collect_demos(p.demos, seed=10_000 * (seed + 1), max_steps=p.max_steps)._asdict()
    obs, targets = np.asarray(d["obs"]), np.asarray(d["actions"])
    previous = np.concatenate([obs[:, :1, :2], targets[:, :-1]], axis=1)
    return {"obs": pusht_features(obs), "actions": (targets - previous).astype(np.float32),
            "lengths": np.asarray(d["lengths"]), "success": np.asarray(d["success"])}

  stage = trials.cached_stage(workdir, f"pusht-demos-s{seed}", fp, compute, kind="npz")
  return rollout.Demos(obs=stage["obs"], actions=stage["actions"], progress=None,
                       success=stage["success"], lengths=stage["lengths"], states=None)


def pusht_row(models, config, seed: int, policy: str, method: str, total: int) -> dict:
  """Closed-loop Push-T episodes: each chunk of displacements becomes absolute targets
  from the agent's position, target_i = agent + sum_{j <= i} u_j."""
  cfg = sampler_config(config, method, total)
  step = jax.jit(lambda key, o: ts.act(models, cfg, key, o))
  keys = iter(jax.random.split(jax.random.PRNGKey(20_000 + seed), 100_000))

  def act_fn(obs):
    chunk = np.asarray(step(next(keys), jnp.asarray(pusht_features(obs))))
    return np.clip(obs[:2] + np.cumsum(chunk, axis=0), 0.0, pusht.WORKSPACE)

  out = pusht.evaluate_chunked(act_fn, config.pusht.episodes, seed=30_000 + seed,
                               chunk_len=config.horizon, execute_steps=config.execute_steps,
                               max_steps=config.pusht.max_steps)
  return {"kind": "pusht", "env": "pusht", "seed": seed, "policy": policy, "method": method,
          "total": total, "success": float(np.mean(out.success)),
          "coverage": float(np.mean(out.coverage)),
          "max_coverage": float(np.mean(out.max_coverage))}


def _pusht_rows(config, workdir: str, log, done) -> list[dict]:
  rows, models = [], None
  seed = config.seed
  for policy in config.policies:
    for method, total in (("single", 1), ("tap", config.sampling.total),
                          ("best_of_k", config.sampling.total)):
      row = done.get(("pusht", "pusht", seed, policy, method, total))
      if row is None:
        if models is None:
          demos = pusht_demos(config, workdir, seed)
          task = types.SimpleNamespace(name="pusht", obs_dim=8, action_dim=2,
                                       action_high=config.pusht.action_scale)
          salt = json.dumps([config.pusht.to_dict(), config.lerobot_path], sort_keys=True)
          models = train_models(task, demos, config, workdir, seed, data_salt=salt)
        row = log.append(pusht_row(models[policy], config, seed, policy, method, total))
      rows.append(row)
  return rows


def pusht_note(rows: list[dict], config) -> str:
  """The Push-T rows as a table (seed `config.seed`; not a claim: too few episodes)."""
  p = config.pusht
  source = f"the LeRobot dataset at {config.lerobot_path}" if config.lerobot_path else (
      f"{p.demos} planning-expert demonstrations")
  lines = [f"Push-T in the real simulator (gym-pusht), trained on {source}, {p.episodes} "
           f"episodes of at most {p.max_steps} steps, seed {config.seed}; success is "
           f"coverage > 0.95:", "", "| policy | method | K | success | final coverage | "
           "best coverage |", "|---|---|---|---|---|---|"]
  for r in rows:
    if r["kind"] == "pusht":
      lines.append(f"| {r['policy']} | {r['method']} | {r['total']} | "
                   f"{100 * r['success']:.0f}% | {r['coverage']:.3f} | "
                   f"{r['max_coverage']:.3f} |")
  return "\n".join(lines)
