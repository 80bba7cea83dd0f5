"""Experiment: certified unlearning in continual learning on split digits.

For each model ("logistic": multinomial logistic regression, trained stage by stage
with Newton's method; "mlp": a small MLP, trained stage by stage with Adam on the
shared loop `common.train`), the five split-digits tasks are learnt in sequence on the
stage objective (1) (methods/unlearning/objective.py). Then each task k in
`config.forget_tasks` is forgotten in turn (all of its training examples) by:

  * the retrain oracle (refit tasks k..T without task k, from the checkpoint theta_{k-1}),
  * each unlearning method of `config.methods` (a per-task plan of stage updates), whose
    output is released with Gaussian noise calibrated by the propagated bound (2).

Per (model, k, method) we record: the distance to the retrained weights, the expected
unlearning loss E||theta~ - theta'||^2 = ||theta_hat - theta'||^2 + d sigma^2, the
certificate (B, sigma, epsilon, delta), the excess risk on the retained tasks and its
decomposition, the task-incremental accuracy on the forgotten task's held-out split
(argmax over the task's two classes), a loss-threshold membership-inference AUC (the
forgotten training examples against the task's held-out ones), the stored bytes and the
wall time (compiled code, after one untimed warm-up) against the retrain's. The
noisy metrics (risk, accuracies, MIA AUC) are means over `certificate.noise_draws`
releases.

Rows go to ``workdir/trials.jsonl`` as each (model, k) finishes; a rerun with the
same config skips those (the MLP's stage trainings also resume from their checkpoints
under ``workdir/mlp_stages``, deleted once every row is written). Plots (in
experiments/plots/unlearning.py): ``loss_vs_task.png`` (unlearning loss vs task index
per method) and ``storage_vs_loss.png`` (the storage / unlearning-loss picture).
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from typing import Any, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import report
from common import trials as trials_lib
from common.data import digits
from common.models.mlp import MLP
from experiments.configs import unlearning as config_module
from experiments.plots import unlearning as plots
from methods import unlearning as ul

NUM_TASKS = 5
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))


# ----------------------------------------------------------------------------- setup


def load_tasks(config, dtype) -> tuple[list[ul.Task], list[ul.Task]]:
  """(train tasks, test tasks), each padded to one size; pixels average-pooled by
  `config.data.image_pool` (1: the full 8x8 images)."""
  train, test = digits.split_digits(config.data.test_fraction, config.seed)
  pool = int(config.data.image_pool)
  side = digits.IMAGE_SHAPE[0] // pool

  def features(t):
    images = t.images.reshape(-1, side, pool, side, pool).mean(axis=(2, 4))
    return images.reshape(len(images), -1).astype(dtype)

  return tuple(ul.pad_tasks([(features(t), t.labels) for t in digits.pair_tasks(split, PAIRS)])
               for split in (train, test))


class Setup(NamedTuple):
  """One model's trained sequence and how to refit it."""
  obj: ul.Objective
  refit: Any        # fit_stage for the timed retrain oracle (fresh, nothing reused)
  train: list
  test: list
  anchors: tuple    # theta_0..theta_T
  smoothness: str   # "linear" (a certificate) or "power" (a heuristic)


def setup(model: str, config, workdir: str) -> Setup:
  """The objective, data and checkpoints theta_0..theta_T of `model`."""
  dtype = np.float64 if model == "logistic" else np.float32
  train, test = load_tasks(config, dtype)
  hidden = () if model == "logistic" else tuple(config.mlp.hidden)
  net = MLP((*hidden, 10))
  obj = ul.Objective(net.apply, "softmax_ce", float(config.objective.lam),
                     float(config.objective.mu))
  init = net.init(jax.random.PRNGKey(config.seed), train[0].x[:1])
  if model == "logistic":
    init = jax.tree.map(lambda a: jnp.zeros(a.shape, dtype), init)
    fit = refit = functools.partial(ul.fit_stage_newton, obj, gauss_newton=True,
                                    tol=float(config.newton.tol),
                                    max_iters=int(config.newton.max_iters))
  else:
    keyed = {"mlp": config.mlp, "train": config.train, "objective": config.objective}
    root = os.path.join(workdir, "mlp_stages", trials_lib.config_fingerprint(keyed))
    fit = ul.loop_stage_fitter(obj, optax.adam(config.mlp.lr), config.train, root)
    refit = fit.fresh()
  return Setup(obj, refit, train, test, ul.train_sequence(fit, init, train),
               "linear" if model == "logistic" else "power")


def unlearn_config(config, smoothness: str) -> ul.UnlearnConfig:
  u = config.unlearn
  return ul.UnlearnConfig(grad_steps=int(u.grad_steps), newton_steps=int(u.newton_steps),
                          smoothness=smoothness, cg_iters=int(u.cg_iters),
                          lissa_depth=int(u.lissa_depth))


# ----------------------------------------------------------------------------- trials


def _timed(fn, *args, **kwargs):
  start = time.perf_counter()
  out = fn(*args, **kwargs)
  jax.block_until_ready(jax.tree.leaves(out))
  return out, time.perf_counter() - start


def _accuracies(obj, params, test, k) -> dict:
  """Task-incremental accuracy (argmax over the task's two classes): on the forgotten
  task k, and the mean over the others."""
  acc = [ul.metrics.accuracy(obj, params, t, classes=PAIRS[j]) for j, t in enumerate(test)]
  return dict(forgot_acc=acc[k], retained_acc=float(np.mean(acc[:k] + acc[k + 1:])))


def reference_row(s: Setup, model: str, k: int, config) -> tuple[dict, Any, list]:
  """(the row's retrain / original entries, theta'_T, the retained tasks but k)."""
  retained = ul.forget_task(s.train, k)
  target, retrain_s = _timed(ul.baselines.retrain, s.refit, s.anchors, retained, k)
  kept = [t for j, t in enumerate(retained) if j != k]
  risk = ul.metrics.joint_risk(s.obj, target, kept)
  members, original = ul.only(s.train[k], s.train[k].w > 0), s.anchors[-1]
  acc, acc0 = _accuracies(s.obj, target, s.test, k), _accuracies(s.obj, original, s.test, k)
  row = dict(model=model, k=k, retrain_s=retrain_s, d=ul.objective.num_params(target),
             retrain=dict(forgot_acc=acc["forgot_acc"],
                          mia_auc=ul.metrics.mia_auc(s.obj, target, members, s.test[k]),
                          retained_acc=acc["retained_acc"], risk=risk),
             original=dict(forgot_acc=acc0["forgot_acc"],
                           mia_auc=ul.metrics.mia_auc(s.obj, original, members, s.test[k]),
                           dist=float(np.sqrt(ul.metrics.squared_distance(original, target)))),
             methods={})
  if model == "logistic":
    row["retrain"]["cl_excess_risk"] = risk - ul.metrics.joint_minimum(
        s.obj, kept, s.anchors[0], tol=float(config.newton.tol),
        max_iters=int(config.newton.max_iters))
  return row, target, kept


def method_row(s: Setup, k: int, i: int, plan, state, target, kept, risk: float,
               config) -> dict:
  """One method's entry for the request "forget task k" (i: the method's index)."""
  key = jax.random.PRNGKey(config.seed)
  out, seconds = _timed(ul.unlearn, s.obj, state, ul.forget_task(s.train, k), k, plan,
                        config=unlearn_config(config, s.smoothness), key=key)
  c = config.certificate
  cert = ul.certificate.certify(out.bound, c.epsilon, c.delta, convex=s.smoothness == "linear")
  members = ul.only(s.train[k], s.train[k].w > 0)
  draws = []
  for draw in range(int(c.noise_draws)):
    noise = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, 1000 + k), i), draw)
    released = ul.certificate.release(noise, out.params, cert.sigma)
    acc = _accuracies(s.obj, released, s.test, k)
    draws.append(dict(risk_gap=ul.metrics.joint_risk(s.obj, released, kept) - risk,
                      forgot_acc=acc["forgot_acc"],
                      mia_auc=ul.metrics.mia_auc(s.obj, released, members, s.test[k]),
                      retained_acc=acc["retained_acc"]))
  storage = ul.accounting.state_bytes(state)
  return dict(
      dist=float(np.sqrt(ul.metrics.squared_distance(out.params, target))),
      bound=out.bound, sigma=cert.sigma, certified=cert.convex,
      unlearning_loss=ul.metrics.expected_unlearning_loss(out.params, target, cert.sigma),
      risk_gap_noiseless=ul.metrics.joint_risk(s.obj, out.params, kept) - risk,
      **{name: float(np.mean([d[name] for d in draws])) for name in draws[0]},
      bytes=storage.total, curvature_bytes=storage.curvature, seconds=seconds,
      residuals=list(out.residuals))


def evaluate_request(s: Setup, model: str, k: int, states: dict, plans: dict, config) -> dict:
  """All methods for one request (forget task k): a JSON-able row."""
  row, target, kept = reference_row(s, model, k, config)
  for i, (method, plan) in enumerate(plans.items()):
    row["methods"][method] = method_row(s, k, i, plan, states[method], target, kept,
                                        row["retrain"]["risk"], config)
  return row


def run_model(model: str, todo: list, config, workdir: str, log) -> None:
  """Trains `model`'s sequence and logs one row per forgotten task in `todo`."""
  s = setup(model, config, workdir)
  plans = {m: ul.method_plan(m, NUM_TASKS, linear=model == "logistic",
                             num_full=config.unlearn.hybrid_full_tasks,
                             rest=config.unlearn.hybrid_rest)
           for m in config.methods if not (m == "hessian_lissa" and model == "mlp")}
  states = ul.build_states(s.obj, s.anchors, s.train, plans)
  # Warm-up (compilation, untimed): one request through every stage and method.
  for method, plan in plans.items():
    ul.unlearn(s.obj, states[method], ul.forget_task(s.train, 0), 0, plan,
               config=unlearn_config(config, s.smoothness), key=jax.random.PRNGKey(config.seed))
  for k in todo:
    logging.info("unlearning: %s, forgetting task %d", model, k)
    log.append(evaluate_request(s, model, k, states, plans, config))


def run_trials(config, workdir: str) -> dict:
  """{model: {k: row}} for every model and forgotten task of the config."""
  fingerprint = trials_lib.config_fingerprint(config,
                                              exclude=("preset", "forget_tasks", "models"))
  with trials_lib.TrialLog(os.path.join(workdir, "trials.jsonl"), fingerprint) as log:
    for model in config.models:
      done = log.done(lambda r: (r["model"], r["k"]))
      todo = [k for k in config.forget_tasks if (model, k) not in done]
      if todo:
        run_model(model, todo, config, workdir, log)
    done = log.done(lambda r: (r["model"], r["k"]))
  return {model: {k: done[(model, k)] for k in config.forget_tasks} for model in config.models}


# ----------------------------------------------------------------------------- summary


def _geomean(values) -> float:
  v = np.asarray(values, float)
  v = v[np.isfinite(v) & (v > 0)]
  return float(np.exp(np.mean(np.log(v)))) if v.size else float("nan")


def _mean(per_k, ks, *path) -> float:
  """The mean over ks of per_k[k][path[0]][path[1]]... ."""
  return float(np.mean([functools.reduce(lambda d, p: d[p], path, per_k[k]) for k in ks]))


def method_figures(model: str, per_k: dict) -> dict:
  """Per method: its loss per task, bytes, mean loss, speed-up, MIA AUC and accuracies."""
  ks = sorted(per_k)
  nontrivial = [k for k in ks if k < NUM_TASKS - 1]   # forgetting task T is exact for all
  out = {}
  for m in per_k[ks[0]]["methods"]:
    for k in ks:
      out[f"{model}/{m}/unlearning_loss/task{k + 1}"] = per_k[k]["methods"][m]["unlearning_loss"]
    out[f"{model}/{m}/bytes"] = per_k[ks[0]]["methods"][m]["bytes"]
    out[f"{model}/{m}/mean_unlearning_loss"] = (
        _mean(per_k, nontrivial, "methods", m, "unlearning_loss") if nontrivial else 0.0)
    out[f"{model}/{m}/median_speedup_vs_retrain"] = float(np.median(
        [per_k[k]["retrain_s"] / per_k[k]["methods"][m]["seconds"] for k in nontrivial]))
    for name in ("mia_auc", "forgot_acc", "retained_acc"):
      out[f"{model}/{m}/mean_{name}"] = _mean(per_k, ks, "methods", m, name)
  return out


def reference_figures(model: str, per_k: dict) -> dict:
  """The retrain oracle's and the original model's figures, and the method ratios."""
  ks = sorted(per_k)
  nontrivial = [k for k in ks if k < NUM_TASKS - 1]
  methods = first = per_k[ks[0]]["methods"]
  out = {f"{model}/{who}/mean_{name}": _mean(per_k, ks, who, name) for who, name in (
      ("retrain", "forgot_acc"), ("retrain", "mia_auc"), ("retrain", "retained_acc"),
      ("original", "forgot_acc"), ("original", "mia_auc"))}
  out[f"{model}/retrain/median_seconds"] = float(np.median(
      [per_k[k]["retrain_s"] for k in nontrivial])) if nontrivial else float("nan")
  if model == "logistic":
    out[f"{model}/retrain/mean_cl_excess_risk"] = _mean(per_k, ks, "retrain", "cl_excess_risk")
  loss = lambda m, k: per_k[k]["methods"][m]["unlearning_loss"]
  if {"hessian", "gradient"} <= set(methods) and nontrivial:
    for name, k in (("oldest", min(nontrivial)), ("most_recent", max(nontrivial))):
      out[f"{model}/gradient_over_hessian/loss_ratio_{name}"] = (
          loss("gradient", k) / max(loss("hessian", k), 1e-300))
    out[f"{model}/gradient_over_hessian/bytes_ratio"] = (
        first["gradient"]["bytes"] / first["hessian"]["bytes"])
  if {"hessian", "hybrid"} <= set(methods) and nontrivial:
    out[f"{model}/hybrid_over_hessian/loss_geomean_ratio"] = _geomean(
        [loss("hybrid", k) / loss("hessian", k) for k in nontrivial])
    out[f"{model}/hybrid_over_hessian/bytes_ratio"] = (
        first["hybrid"]["bytes"] / first["hessian"]["bytes"])
  return out


def summary_figures(rows: dict) -> dict:
  """The named figures of result.json, model by model."""
  figures = {}
  for model, per_k in rows.items():
    figures.update(method_figures(model, per_k))
    figures.update(reference_figures(model, per_k))
  return figures


def claims(rows: dict, figures: dict) -> list[report.ClaimCheck]:
  """The report rows: the paper's claims, our measurements and the thresholds."""
  f = lambda m, name: figures[f"{m}/{name}"]
  compared = [m for m in rows if f"{m}/gradient_over_hessian/bytes_ratio" in figures]
  hybrid = [m for m in rows if f"{m}/hybrid_over_hessian/bytes_ratio" in figures]
  timed = [m for m in rows if any(k < NUM_TASKS - 1 for k in rows[m])]
  audited = [m for m in rows if "hessian" in rows[m][min(rows[m])]["methods"]]
  storage = {m: f(m, "gradient_over_hessian/bytes_ratio") for m in compared}
  speed = {m: min(v for name, v in figures.items()
                  if name.startswith(f"{m}/") and name.endswith("/median_speedup_vs_retrain"))
           for m in timed}
  fmt = lambda d, spec: "; ".join(f"{k}: " + spec.format(v) for k, v in d.items())
  table = [_lower_loss_claim(m, rows[m]) for m in compared]
  table += [report.Claim(
      f"[{m}] The Hessian advantage is clearest for recent tasks (gradient/Hessian loss "
      f"ratio larger for the most recent non-trivial task than for the oldest)",
      "qualitative: most clearly for recent tasks",
      f"most recent {f(m, 'gradient_over_hessian/loss_ratio_most_recent'):.3g} vs oldest "
      f"{f(m, 'gradient_over_hessian/loss_ratio_oldest'):.3g}",
      f(m, "gradient_over_hessian/loss_ratio_most_recent"), ">",
      f(m, "gradient_over_hessian/loss_ratio_oldest")) for m in compared]
  table += [report.Claim(
      "The gradient-based method stores almost nothing (total stored bytes <= 1% of the "
      "Hessian-based method's)", "qualitative: nearly zero storage overhead",
      "bytes ratio gradient/Hessian: " + fmt(storage, "{:.2%}"), storage, "<=", 0.01)
  ] if compared else []
  table += [report.Claim(
      f"[{m}] The hybrid gets close to Hessian quality at a fraction of its storage "
      f"(geometric-mean loss ratio hybrid/Hessian over k < T <= 2 with <= 50% of the bytes)",
      "qualitative: reduces storage while maintaining performance",
      f"loss x{f(m, 'hybrid_over_hessian/loss_geomean_ratio'):.3g} at "
      f"{f(m, 'hybrid_over_hessian/bytes_ratio'):.0%} of the bytes",
      f(m, "hybrid_over_hessian/loss_geomean_ratio"), "<=", 2.0,
      also=[(f(m, "hybrid_over_hessian/bytes_ratio"), "<=", 0.5)]) for m in hybrid]
  table += [report.Claim(
      "Every unlearning method is far faster than retraining (median speed-up >= 10x over "
      "the forgotten tasks k < T, for the slowest method)",
      "qualitative: far cheaper than retraining",
      "slowest method's median speed-up: " + fmt(speed, "{:.3g}x"), speed, ">=", 10)
  ] if speed else []
  table += [_indistinguishable_claim(m, rows[m]) for m in audited]
  return report.claims_table(table)


def _lower_loss_claim(model: str, per_k: dict) -> report.Claim:
  """Hessian < gradient unlearning loss for every forgotten task k < T."""
  ks = [k for k in sorted(per_k) if k < NUM_TASKS - 1]
  h = {k: per_k[k]["methods"]["hessian"]["unlearning_loss"] for k in ks}
  g = {k: per_k[k]["methods"]["gradient"]["unlearning_loss"] for k in ks}
  note = ("" if model == "logistic" else
          " (non-convex: the bound (2) is a heuristic here, not a certificate)")
  return report.Claim(
      f"[{model}] The Hessian-based method has lower unlearning loss (E||theta~ - "
      f"theta'||^2, noise included) than the gradient-based one for every forgotten "
      f"task k < T{note}",
      "qualitative: gradient-based is less effective at minimizing unlearning loss",
      "gradient/Hessian loss ratio per task: " + ", ".join(
          f"task {k + 1}: {g[k] / max(h[k], 1e-300):.3g}" for k in ks),
      {k: bool(h[k] < g[k]) for k in ks}, "==", True)


def _indistinguishable_claim(model: str, per_k: dict) -> report.Claim:
  """MIA AUC near 0.5 and forgotten-task accuracy as retrained, after Hessian unlearning."""
  hessian = {k: row["methods"]["hessian"] for k, row in per_k.items()}
  auc_dev = max(abs(r["mia_auc"] - 0.5) for r in hessian.values())
  acc_dev = max(abs(r["forgot_acc"] - per_k[k]["retrain"]["forgot_acc"])
                for k, r in hessian.items())
  return report.Claim(
      f"[{model}] After Hessian-based unlearning, the loss-threshold MIA AUC on the "
      f"forgotten data is near 0.5 (|AUC - 0.5| <= 0.1 for every k) and the "
      f"forgotten-task accuracy matches the retrained model's (within 0.1)",
      "qualitative: forgotten data indistinguishable",
      f"max|AUC-0.5| {auc_dev:.3f}, max|acc gap| {acc_dev:.3f}",
      auc_dev, "<=", 0.1, also=[(acc_dev, "<=", 0.1)])


@report.register("unlearning", title="Certified unlearning in continual learning",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Runs the study, writes the two plots and returns the claims and figures."""
  rows = run_trials(config, workdir)
  # Every row is in trials.jsonl now: the MLP stage checkpoints (kept only so that an
  # interrupted run resumes) are no longer needed.
  shutil.rmtree(os.path.join(workdir, "mlp_stages"), ignore_errors=True)
  figures = summary_figures(rows)
  paths = [plots.loss_vs_task(rows, NUM_TASKS, os.path.join(workdir, "loss_vs_task.png")),
           plots.storage_vs_loss(rows, NUM_TASKS, os.path.join(workdir, "storage_vs_loss.png"))]
  return report.Result(claims=claims(rows, figures), figures=figures,
                       plots=[os.path.basename(p) for p in paths])
