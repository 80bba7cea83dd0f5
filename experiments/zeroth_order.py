"""Experiment: zeroth-order fine-tuning of the shared LM with MeZO, LOZO and AGZO.

On the byte-level LM of `common.lm` and the English-vs-code verbaliser task of
`methods.zeroth_order.task`:

1. Gradient alignment: at the pretrained parameters and one task batch, the cosine
   between each estimator's update direction and jax.grad, averaged over draws,
   overall and per linear layer, with the theory beside it; and the control (one
   linear softmax layer with planted low-rank or isotropic inputs), where AGZO's
   advantage should appear and vanish.
2. Fine-tuning at equal forward passes through the common loop (`common.train`,
   gradient-free for the ZO methods): first order (Adam), MeZO, LOZO, AGZO for each
   rank; validation accuracy vs forward passes.
3. Memory: the compiled peak memory of one jitted, donating step of each.

Resumable: the alignment, control and memory stages are `cached_stage`s, each
fine-tuning run keeps its checkpoints under workdir/fine_tune/<fingerprint>/<method>
and its evaluation points in workdir/trials.jsonl.
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from common import config as config_lib
from common import lm as lm_lib
from common import report
from common import train as train_lib
from common import trials
from experiments.configs import zeroth_order as config_module
from experiments.plots import zeroth_order as plots
import methods.zeroth_order as zo
from methods.zeroth_order import recipes
from methods.zeroth_order import task as task_lib

TRIALS = "trials.jsonl"
# Loop keys that do not change what a fine-tuning run computes.
_LOOP_ONLY = tuple(f"train.{k}" for k in ("checkpoint_every", "keep_checkpoints", "log_every",
                                          "progress_bar", "distributed", "nan_guard",
                                          "mesh_shape", "mesh"))


class Setup(NamedTuple):
  """The tuned LM and the task, shared by every measurement."""
  params: Any                       # the trainable parameters
  frozen: Any                       # the rest (the full tree when trainable="linear")
  task: task_lib.Task
  losses: task_lib.ClassifierLosses  # over batches holding "frozen"
  names: list[str]
  num_params: int


def _fingerprint(config, keys: tuple[str, ...], exclude: tuple[str, ...] = ()) -> str:
  """The fingerprint of the config keys a stage reads."""
  return trials.config_fingerprint({k: config_lib.get(config, k) for k in keys},
                                   exclude=exclude, salt="/".join(keys))


def _batch(setup: Setup, config, split: str, seed: int, size: int) -> dict:
  return task_lib.labelled_batch(getattr(setup.task, split), seed, 0, size,
                                 config.task.window, setup.frozen)


def make_setup(config, workdir: str) -> Setup:
  trained = lm_lib.trained_lm(config.lm, workdir, lm_workdir=config.lm_workdir)
  params, frozen = task_lib.split_trainable(trained.params, config.trainable)
  losses = task_lib.verbaliser_losses(trained.model, [ord(v) for v in config.task.verbalisers])
  names = recipes.method_names(config.estimator.names, config.estimator.agzo_ranks)
  num_params = sum(x.size for x in jax.tree.leaves(trained.params))
  return Setup(params, frozen, task_lib.make_task(config.lm.validation_fraction), losses,
               names, int(num_params))


def lm_alignment(setup: Setup, config) -> dict:
  """Mean (and s.e.) cosine with jax.grad per ZO method, overall and per linear
  layer, and the theory for MeZO and AGZO."""
  loss_fn, loss_and_taps, _ = setup.losses
  params = setup.params
  batch = _batch(setup, config, "train", config.seed + 2, config.train.batch_size)
  grads = jax.jit(jax.grad(loss_fn))(params, batch)
  groups = zo.linear_layer_groups(params)
  key = jax.random.PRNGKey(config.seed + 7)
  out = {}
  for name in (n for n in setup.names if n != "first_order"):
    est = recipes.estimator(name, loss_fn, loss_and_taps, config.estimator)
    draws = jax.jit(lambda p, b, g, k, est=est: zo.alignment_draws(
        est, p, b, g, k, config.alignment.draws, groups))(params, batch, grads, key)
    mean, se = zo.mean_and_se(draws["overall"])
    row = {"overall": mean, "overall_se": se,
           "layers": {k: float(np.mean(v)) for k, v in draws.items() if k != "overall"}}
    if name == "mezo":
      row["theory"] = zo.isotropic_expected_cosine(recipes.perturbation_dimension(name, params))
    if name.startswith("agzo"):
      row["theory"] = zo.agzo_expected_cosine(
          params, loss_and_taps(params, batch)[1], grads, key, rank=recipes.agzo_rank(name),
          num_iters=config.estimator.power_iters,
          num_sketches=min(4, config.alignment.draws))
    out[name] = row
  return out


def control_alignment(config) -> dict:
  c = config.control
  return zo.planted_rank_control(
      jax.random.PRNGKey(config.seed + 11), d_in=c.d_in, d_out=c.d_out, num_rows=c.tokens,
      rank=c.rank, eps=config.estimator.eps, num_iters=config.estimator.power_iters,
      num_draws=c.draws)


def _optimizer(name: str, setup: Setup, config, estimator=None, frozen=None):
  """The method's optax chain, over batches holding "frozen" or with `frozen` bound."""
  loss_fn, loss_and_taps, _ = setup.losses
  if frozen is not None:
    loss_fn, loss_and_taps = (task_lib.with_frozen(loss_fn, frozen),
                              task_lib.with_frozen(loss_and_taps, frozen))
  lr = recipes.learning_rate(name, setup.params, config.fine_tune)
  return recipes.optimizer(name, loss_fn, loss_and_taps, lr, estimator or config.estimator,
                           key=jax.random.PRNGKey(config.train.seed + 1))


def step_memory(setup: Setup, config) -> dict:
  """Compiled peak bytes of one donating step per method, of a first-order SGD step
  and of a two-sided AGZO step (rank agzo_ranks[-1])."""
  batch = _batch(setup, config, "train", config.train.seed, config.train.batch_size)
  peak = lambda tx: recipes.step_peak_bytes(tx, setup.params, batch)
  out = {name: peak(_optimizer(name, setup, config)) for name in setup.names}
  mezo_lr = recipes.learning_rate("mezo", setup.params, config.fine_tune)
  out["first_order_sgd"] = peak(optax.chain(zo.first_order(setup.losses.loss_fn),
                                            optax.sgd(mezo_lr)))
  two_sided = config.estimator.copy_and_resolve_references()
  two_sided.agzo_two_sided = True
  out["agzo_two_sided"] = peak(_optimizer(f"agzo_r{config.estimator.agzo_ranks[-1]}", setup,
                                          config, estimator=two_sided))
  return out


def _trainer(name: str, setup: Setup, config, run_dir: str):
  """`params_after(num_steps)`: the method trained to `num_steps` updates through the
  common loop in `run_dir` (each call resumes from the previous one's checkpoint)."""
  loss_fn = task_lib.with_frozen(setup.losses.loss_fn, setup.frozen)
  gradient_free = name != "first_order"
  lr = recipes.learning_rate(name, setup.params, config.fine_tune)
  optimizer = (_optimizer(name, setup, config, frozen=setup.frozen) if gradient_free
               else optax.adam(lr))
  fns = dict(init_fn=lambda key: setup.params,
             loss_fn=lambda params, batch, key: (loss_fn(params, batch), {}),
             batch_fn=lambda seed, step: task_lib.task_batch(
                 setup.task.train, seed, step, config.train.batch_size, config.task.window))

  def params_after(num_steps: int):
    """(params, last logged loss, seconds in the loop) after `num_steps` updates."""
    if num_steps == 0:
      return setup.params, float("nan"), 0.0
    loop_config = config.train.copy_and_resolve_references()
    loop_config.num_steps = num_steps
    start = time.time()
    result = train_lib.train(**fns, optimizer=optimizer, config=loop_config, workdir=run_dir,
                             gradient_free=gradient_free)
    loss = result.history[-1]["loss"] if result.history else float("nan")
    return result.state.params, loss, time.time() - start

  return params_after


def fine_tune(name: str, setup: Setup, config, workdir: str, log: trials.TrialLog) -> dict:
  """One method to the forward budget, evaluated at `num_evals` points; each point is
  a row of `log`, so a rerun resumes after the last finished one."""
  ft = config.fine_tune
  cost = recipes.passes_per_step(name, ft.first_order_pass_cost,
                                 config.estimator.agzo_two_sided)
  num_steps = ft.forward_budget // cost
  evals = sorted({int(round(num_steps * (i + 1) / ft.num_evals)) for i in range(ft.num_evals)})
  rows = {row["step"]: row for row in log.rows if row["method"] == name}
  params_after = _trainer(name, setup, config,
                          os.path.join(workdir, "fine_tune", log.fingerprint, name))
  accuracy = jax.jit(setup.losses.accuracy)
  eval_batch = _batch(setup, config, "validation", config.seed + 1, config.task.eval_size)
  for step in [0] + [e for e in evals if e > 0]:
    if step not in rows:
      params, train_loss, seconds = params_after(step)
      acc, xent, se = map(float, accuracy(params, eval_batch))
      rows[step] = log.append(dict(method=name, step=step, accuracy=acc, loss=xent,
                                   loss_se=se, train_loss=train_loss, seconds=seconds))
  steps = sorted(rows)
  curve = [(s * cost, rows[s]["accuracy"], rows[s]["loss"], rows[s]["loss_se"]) for s in steps]
  # Speed from the chunks after the first, which also compiles the step.
  first = 1 if len(steps) > 2 else 0
  seconds = sum(rows[s]["seconds"] for s in steps[first + 1:])
  return dict(curve=curve, num_steps=num_steps,
              steps_per_s=(steps[-1] - steps[first]) / max(seconds, 1e-9),
              learning_rate=recipes.learning_rate(name, setup.params, ft))


def _final(tuned: dict, metric: str, n_eval: int) -> dict:
  """The fine-tuning comparison on one metric: final values, their standard errors,
  the best AGZO rank and ZO baseline, and sign = +1 where higher is better."""
  names = list(tuned)
  index, better = (1, max) if metric == "accuracy" else (2, min)
  last = {n: tuned[n]["curve"][-1][index] for n in names}
  if index == 1:  # binomial standard error of an accuracy over n_eval windows
    se = {n: float(np.sqrt(max(a * (1 - a), 1e-12) / n_eval)) for n, a in last.items()}
  else:
    se = {n: tuned[n]["curve"][-1][3] for n in names}
  best = better((n for n in names if n.startswith("agzo")), key=lambda n: last[n])
  base = better((n for n in ("mezo", "lozo") if n in names), key=lambda n: last[n])
  text = (", ".join(f"{n} {last[n]:.3f}" for n in names)
          + f" (start {tuned[names[0]]['curve'][0][index]:.3f}; s.e. of best AGZO "
          f"{se[best]:.3f})")
  return dict(last=last, se=se, best=best, base=base, text=text,
              sign=1.0 if better is max else -1.0)


def _memory_text(memory: dict, zo_names: list[str], two_sided_rank: int) -> str:
  mib = lambda b: f"{b / 2**20:.1f}"
  return (", ".join(f"{n} {mib(memory[n])}" for n in zo_names)
          + f" MiB; first order (SGD) {mib(memory['first_order_sgd'])} MiB"
          + (f", (Adam) {mib(memory['first_order'])} MiB" if "first_order" in memory else "")
          + f"; two-sided AGZO r={two_sided_rank} {mib(memory['agzo_two_sided'])} MiB")


def claims(align: dict, ctrl: dict, tuned: dict, memory: dict, config) -> list[report.Claim]:
  """The report's rows: the paper's claims with our thresholds."""
  names, ranks = list(tuned), tuple(config.estimator.agzo_ranks)
  agzo = [n for n in names if n.startswith("agzo")]
  zo_names = [n for n in names if n != "first_order"]
  rows = []
  if "mezo" in align and agzo:
    ratio = {n: align[n]["overall"] / align["mezo"]["overall"] for n in agzo}
    rows.append(report.Claim(
        "AGZO's update direction is better aligned with the true gradient than isotropic "
        "perturbations' (mean cosine with jax.grad, every rank, measured and theory)",
        "qualitative: provably higher cosine similarity than isotropic ZO",
        "AGZO/MeZO mean cosine " + ", ".join(f"r={recipes.agzo_rank(n)}: {v:.2f}"
                                             for n, v in ratio.items())
        + (f"; LOZO/MeZO {align['lozo']['overall'] / align['mezo']['overall']:.2f}"
           if "lozo" in align else "")
        + f" (MeZO {align['mezo']['overall']:.2e}, theory {align['mezo']['theory']:.2e})",
        ratio, ">", 1.0,
        also=[([align[n]["theory"] for n in agzo], ">", align["mezo"]["theory"])]))
  low, iso = ctrl["low_rank"]["ratio"], ctrl["isotropic"]["ratio"]
  rows.append(report.Claim(
      "AGZO's advantage comes from low-rank activations: large with planted low-rank inputs "
      "(AGZO/MeZO cosine > 2), gone with isotropic full-rank inputs (ratio within 0.67-1.5)",
      "qualitative: the gain needs activations concentrated in a subspace",
      f"low-rank {low:.2f}, isotropic {iso:.2f}", low, ">", 2.0,
      also=[(iso, ">", 0.67), (iso, "<", 1.5)]))
  if agzo and {"mezo", "lozo"} & set(names) and "first_order" in names:
    for metric in ("accuracy", "cross-entropy"):
      f = _final(tuned, metric, config.task.eval_size)
      last, se, best, sign = f["last"], f["se"], f["best"], f["sign"]
      rows.append(report.Claim(
          f"At equal forward passes AGZO (best of r in {ranks}) beats MeZO and LOZO (by > 2 "
          "standard errors) and narrows the gap to first-order fine-tuning (final "
          f"validation {metric})",
          "qualitative: AGZO > ZO baselines, closer to FT (Qwen3, Pangu)",
          f["text"] + f" after {config.fine_tune.forward_budget} forward passes"
          + ("" if metric == "accuracy" else f"; chance level ln 2 = {np.log(2):.3f}"),
          # Narrows the gap to first order, and beats each ZO baseline by > 2 s.e.
          sign * (last["first_order"] - last[best]), "<",
          sign * (last["first_order"] - last[f["base"]]),
          also=[(sign * (last[best] - last[n]), ">", 2.0 * np.hypot(se[best], se[n]))
                for n in ("mezo", "lozo") if n in names]))
  if zo_names:
    zo_max = max(memory[n] for n in zo_names)
    rows.append(report.Claim(
        f"ZO methods' compiled peak memory (AGZO included) within "
        f"{config.memory_tolerance:.0%} of each other and well below first order "
        f"(first-order SGD step >= {config.first_order_memory_factor:g}x the largest)",
        "qualitative: AGZO keeps almost the same peak memory as other ZO methods",
        _memory_text(memory, zo_names, ranks[-1]),
        zo_max / min(memory[n] for n in zo_names), "<=", 1.0 + config.memory_tolerance,
        also=[(memory["first_order_sgd"], ">=", config.first_order_memory_factor * zo_max)]))
  return rows


def figures(setup: Setup, align: dict, ctrl: dict, tuned: dict, memory: dict,
            config) -> dict[str, float]:
  """Every measured number, by name."""
  mib = 2.0**20
  out = {"num_params": float(setup.num_params),
         "num_trainable": float(sum(x.size for x in jax.tree.leaves(setup.params)))}
  for n, row in align.items():
    out[f"alignment/{n}/mean_cosine"] = row["overall"]
    if "theory" in row:
      out[f"alignment/{n}/theory_cosine"] = row["theory"]
  for kind, row in ctrl.items():
    out[f"control/{kind}/agzo_over_mezo"] = row["ratio"]
  for n, run in tuned.items():
    for when, point in (("initial", run["curve"][0]), ("final", run["curve"][-1])):
      out[f"fine_tune/{n}/{when}_accuracy"] = point[1]
      out[f"fine_tune/{n}/{when}_loss"] = point[2]
    out[f"fine_tune/{n}/learning_rate"] = run["learning_rate"]
    out[f"fine_tune/{n}/steps_per_s"] = run["steps_per_s"]
    out[f"memory/{n}/peak_MiB"] = memory[n] / mib
  out["memory/first_order_sgd/peak_MiB"] = memory["first_order_sgd"] / mib
  if "mezo" in align:
    out.update({f"alignment/{n}_over_mezo": align[n]["overall"] / align["mezo"]["overall"]
                for n in align if n.startswith("agzo")})
  names = list(tuned)
  if any(n.startswith("agzo") for n in names) and {"mezo", "lozo"} & set(names) \
      and "first_order" in names:
    for metric in ("accuracy", "cross-entropy"):
      f = _final(tuned, metric, config.task.eval_size)
      out[f"fine_tune/best_agzo_minus_best_baseline/{metric}"] = (
          f["last"][f["best"]] - f["last"][f["base"]])
  zo_mem = [memory[n] for n in names if n != "first_order"]
  if zo_mem:
    out["memory/zo_max_over_min"] = max(zo_mem) / min(zo_mem)
    out["memory/first_order_sgd_over_zo_max"] = memory["first_order_sgd"] / max(zo_mem)
    out["memory/agzo_two_sided/peak_MiB"] = memory["agzo_two_sided"] / mib
  return out


@report.register("zeroth_order",
                 title="AGZO: activation-guided zeroth-order fine-tuning (vs MeZO, LOZO)",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Alignment, control, memory and fine-tuning; returns the claims and figures."""
  setup = make_setup(config, workdir)
  lm_keys = ("seed", "lm", "trainable", "task", "estimator", "train.batch_size")
  ctrl = trials.cached_stage(workdir, "control", _fingerprint(
      config, ("seed", "estimator.eps", "estimator.power_iters", "control")),
      lambda: control_alignment(config))
  align = trials.cached_stage(workdir, "alignment", _fingerprint(
      config, (*lm_keys, "alignment")), lambda: lm_alignment(setup, config))
  memory = trials.cached_stage(workdir, "memory", _fingerprint(
      config, (*lm_keys, "fine_tune", "train.seed")), lambda: step_memory(setup, config))
  fine_tune_fp = _fingerprint(config, (*lm_keys[:-1], "fine_tune", "train"),
                              exclude=("estimator.names", "estimator.agzo_ranks", *_LOOP_ONLY))
  with trials.TrialLog(os.path.join(workdir, TRIALS), fine_tune_fp) as log:
    tuned = {n: fine_tune(n, setup, config, workdir, log) for n in setup.names}
  paths = [os.path.join(workdir, p) for p in plots.PLOTS]
  plots.plot_accuracy({n: t["curve"] for n, t in tuned.items()},
                      config.fine_tune.first_order_pass_cost, paths[0])
  plots.plot_alignment(align, ctrl, paths[1])
  plots.plot_memory(memory, setup.names, paths[2])
  return report.Result(claims=report.claims_table(claims(align, ctrl, tuned, memory, config)),
                       figures=figures(setup, align, ctrl, tuned, memory, config),
                       plots=list(plots.PLOTS))
