"""Experiment (work in progress, unregistered until it has results; renaming it to
experiments/fgr.py registers it): FGR against CE, focal, DFL, label smoothing, mixup,
PCGrad, low-pass filtering only and projection only, each with and without
temperature scaling, under corruption and style shift.

For each run (a method of `config.methods`, plus "fgr_<filter>" for every filter in
`config.fgr.extra_filters`) and each of `config.seeds` seeds: train the same network for
the same epochs (methods/fgr/training.py: one jitted `lax.scan` per epoch; the epoch
loop, the per-epoch validation ECE and the orbax checkpoints are here), keep the
parameters of the epoch with the lowest validation ECE (among epochs >= select_from),
fit a temperature on the validation split, and measure accuracy, ECE, adaptive ECE,
classwise ECE, NLL and Brier with and without it: on the clean ID test split, on each
corruption x severity of it, and on the style-shift split (configs/fgr.py). Claims
compare seed means, with the standard error of the difference of two means.

Resumable: each (run, seed) keeps orbax checkpoints (every `schedule.checkpoint_every`
epochs) under workdir/runs/<run>-s<seed>-<fp>/; its evaluation is a `cached_stage`
(workdir/stages/eval_<run>_s<seed>.json), so a rerun with the same config trains and
evaluates nothing. Plots (experiments/plots/fgr.py): ece_vs_severity.png and
reliability.png.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from common import checkpoint
from common import report
from common import trials
from common.data import cifar, corruptions, digits
from common.models.classifier import ResNet, SmallCNN
from experiments.configs import fgr as config_module
from experiments.plots import fgr as plots
from methods.fgr import filters, losses, metrics, training

NOT_TRAINING = ("preset", "methods", "seeds", "claims", "shift", "fgr.extra_filters")
BASELINES = ("ce", "focal", "dfl")                       # claim 1's rivals
TS_BASELINES = ("ce", "focal", "dfl", "label_smoothing", "mixup")   # claim 4's


# ----------------------------------------------------------------------------- data


class Data(NamedTuple):
  """(images NHWC float32 in [0, 1], labels) pairs; `style` is None without one."""
  train: tuple
  val: tuple
  test: tuple
  style: tuple | None
  num_classes: int


def _take(x, y, idx) -> tuple:
  idx = np.sort(np.asarray(idx, int))
  return np.asarray(x[idx], np.float32), np.asarray(y[idx], np.int32)


def load_digits_splits(data_config, seed: int) -> Data:
  """The ink split (configs/fgr.py): per class, the lightest `id_quantile` of the
  images by total ink are ID (stratified test / val / train), the rest the style set."""
  d = digits.load_digits()
  x, y = d.images[..., None], d.labels
  rng = np.random.default_rng(seed)
  parts = {k: [] for k in ("train", "val", "test", "style")}
  for c in range(digits.NUM_CLASSES):
    idx = np.flatnonzero(y == c)
    idx = idx[np.argsort(x[idx].sum(axis=(1, 2, 3)), kind="stable")]
    n_id = int(round(data_config.id_quantile * len(idx)))
    parts["style"] += list(idx[n_id:])
    pool = rng.permutation(idx[:n_id])
    n_test = int(round(data_config.test_fraction * n_id))
    n_val = int(round(data_config.val_fraction * (n_id - n_test)))
    parts["test"] += list(pool[:n_test])
    parts["val"] += list(pool[n_test:n_test + n_val])
    parts["train"] += list(pool[n_test + n_val:])
  split = {k: _take(x, y, v) for k, v in parts.items()}
  return Data(split["train"], split["val"], split["test"],
              split["style"] if parts["style"] else None, digits.NUM_CLASSES)


def load_cifar_splits(data_config, seed: int) -> Data:
  """CIFAR-10 from `data.cifar_root`: a seeded train / val split of the 50k training
  images (val_fraction, the paper's 45k / 5k at 0.1) and the 10k test images."""
  train, test = cifar.load_cifar10(data_config.cifar_root)
  order = np.random.default_rng(seed).permutation(len(train.labels))
  n_val = int(round(data_config.val_fraction * len(order)))
  x = cifar.to_float(train.images)
  return Data(_take(x, train.labels, order[n_val:]), _take(x, train.labels, order[:n_val]),
              (cifar.to_float(test.images), np.asarray(test.labels, np.int32)), None, 10)


def load_data(config) -> Data:
  if config.data.dataset == "cifar10":
    return load_cifar_splits(config.data, config.seed)
  return load_digits_splits(config.data, config.seed)


def shift_loader(config, data: Data) -> Callable[[str, int], tuple]:
  """`(corruption, severity) -> (images, labels)`: our JAX corruptions of the ID test
  split (digits, cached), or the released CIFAR-10-C arrays (read on demand)."""
  if config.data.dataset == "cifar10":
    def load(name, severity):
      s = cifar.load_cifar_c(config.data.cifar_c_root, name, severity)
      return cifar.to_float(np.asarray(s.images)), np.asarray(s.labels, np.int32)
    return load
  x, y = data.test
  key = jax.random.PRNGKey(config.seed + 1)

  @functools.lru_cache(maxsize=None)
  def corrupt(name, severity):
    k = jax.random.fold_in(jax.random.fold_in(key, corruptions.CORRUPTIONS.index(name)),
                           severity)
    return np.asarray(corruptions.corrupt(k, jnp.asarray(x), name, severity)), y
  return corrupt


# ----------------------------------------------------------------------------- training


def run_names(config) -> list[str]:
  extra = [f"fgr_{f}" for f in config.fgr.extra_filters] if "fgr" in config.methods else []
  return list(config.methods) + extra


def _method_and_filter(config, run: str) -> tuple[str, str]:
  return ("fgr", run[len("fgr_"):]) if run.startswith("fgr_") else (run, config.fgr.filter)


class Trainer(NamedTuple):
  """One run's compiled pieces (built once, shared by its seeds)."""
  spec: training.MethodSpec
  init: Callable      # key -> TrainState
  epoch: Callable     # the jitted epoch of methods/fgr/training.py
  views: Callable     # (key, images, active) -> (images, clean)
  logits: Callable    # (params, images) -> logits, jitted, in chunks


def make_trainer(config, run: str, data: Data) -> Trainer:
  method, kind = _method_and_filter(config, run)
  spec = training.SPECS[method]
  if config.model.name == "resnet":
    model = ResNet(data.num_classes, tuple(config.model.stage_sizes), tuple(config.model.widths))
  else:
    model = SmallCNN(data.num_classes, tuple(config.model.channels), config.model.dense)
  s, o = config.schedule, config.optim
  steps = len(data.train[1]) // s.batch_size
  tx = training.make_optimizer(
      spec, learning_rate=o.lr, boundaries=[m * steps for m in s.milestones], decay=s.decay,
      momentum=o.momentum, weight_decay=o.weight_decay, clip_norm=o.clip_norm,
      scope=config.fgr.scope, per_layer=config.fgr.per_layer)
  loss_fn = training.make_loss_fn(model.apply, spec, data.num_classes,
                                   **config.losses.to_dict())
  filter_fn = filters.make_filter(kind, tuple(config.fgr.severities))
  apply = jax.jit(model.apply)
  x0 = jnp.asarray(data.train[0][:1])

  def logits(params, images, chunk=2048):
    return jnp.concatenate([apply(params, jnp.asarray(images[i:i + chunk]))
                            for i in range(0, len(images), chunk)])

  return Trainer(
      spec, lambda key: training.init_state(key, lambda k: model.init(k, x0), tx),
      training.make_epoch_fn(loss_fn, tx, spec, s.batch_size),
      lambda key, images, active: training.epoch_views(key, images, spec, config.fgr.rho,
                                                       active, filter_fn),
      logits)


HISTORY = ("loss", "calibration", "conflict", "val_ece", "val_soft_ece", "val_acc")


def _validation(trainer: Trainer, params, val) -> dict:
  z = trainer.logits(params, val[0])
  y = jnp.asarray(val[1])
  probs = jax.nn.softmax(z, axis=-1)
  return dict(val_ece=metrics.ece(probs, y), val_soft_ece=losses.soft_binned_ece(z, y),
              val_acc=metrics.accuracy(probs, y))


def train_epoch(trainer: Trainer, carry: dict, epoch: int, key, train: tuple, val: tuple,
                schedule) -> dict:
  """One epoch: views, the jitted updates, validation, best-val-ECE bookkeeping
  (`train`: the training images and labels as device arrays)."""
  active = epoch >= schedule.fgr_start
  k_views, k_epoch = jax.random.split(jax.random.fold_in(key, epoch))
  images, clean = trainer.views(k_views, train[0], active)
  state, m = trainer.epoch(carry["state"], images, train[1], clean, k_epoch,
                           jnp.float32(active))
  m = {**m, **_validation(trainer, state.params, val)}
  history = {k: carry["history"][k].at[epoch].set(m[k]) for k in HISTORY}
  better = (epoch >= schedule.select_from) & (m["val_ece"] < carry["best_ece"])
  pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(better, a, b), new, old)
  return dict(state=state, history=history, epoch=jnp.int32(epoch + 1),
              best=pick(state.params, carry["best"]),
              best_ece=jnp.where(better, m["val_ece"], carry["best_ece"]),
              best_epoch=jnp.where(better, epoch, carry["best_epoch"]))


def train_run(trainer: Trainer, seed: int, data: Data, schedule, run_dir: str) -> dict:
  """Trains one (run, seed), resuming from its newest checkpoint; returns the final
  carry (best params, history, best epoch)."""
  k_init, k_train = jax.random.split(jax.random.PRNGKey(seed))
  state = trainer.init(k_init)
  carry = dict(state=state, best=state.params, best_ece=jnp.float32(np.inf),
               best_epoch=jnp.int32(-1), epoch=jnp.int32(0),
               history={k: jnp.zeros((schedule.epochs,), jnp.float32) for k in HISTORY})
  manager = checkpoint.make_manager(os.path.join(run_dir, "checkpoints"), keep=2,
                                    async_save=False)
  try:
    _, restored = checkpoint.restore_newest(manager, carry)
    carry = carry if restored is None else restored
    train = tuple(jnp.asarray(a) for a in data.train)
    for epoch in range(int(carry["epoch"]), schedule.epochs):
      carry = train_epoch(trainer, carry, epoch, k_train, train, data.val, schedule)
      if (epoch + 1) % schedule.checkpoint_every == 0 or epoch + 1 == schedule.epochs:
        checkpoint.save(manager, epoch + 1, carry)
  finally:
    manager.close()
  return carry


# ----------------------------------------------------------------------------- evaluation


def reliability_bins(logits, labels, n_bins: int = 15) -> dict:
  """Per equal-width confidence bin: count, mean confidence, accuracy (for the plot)."""
  probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
  conf, correct = probs.max(-1), (probs.argmax(-1) == np.asarray(labels)).astype(float)
  b = np.asarray(metrics.equal_width_bins(jnp.asarray(conf), n_bins))
  count = np.bincount(b, minlength=n_bins).astype(float)
  mean = lambda v: np.bincount(b, v, minlength=n_bins) / np.maximum(count, 1)
  return dict(count=count.tolist(), conf=mean(conf).tolist(), acc=mean(correct).tolist())


def evaluate(config, trainer: Trainer, carry: dict, data: Data, shifts: Callable) -> dict:
  """Every metric with and without temperature scaling on ID, each shift set and the
  style set; reliability bins ID and pooled over the corruptions."""
  params = carry["best"]
  temperature = metrics.fit_temperature(trainer.logits(params, data.val[0]),
                                        jnp.asarray(data.val[1]))
  sets = {"id": lambda: data.test}
  sets.update({f"{c}/{s}": functools.partial(shifts, c, s)
               for c in config.shift.corruptions for s in config.shift.severities})
  if data.style is not None:
    sets["style"] = lambda: data.style
  out = dict(temperature=temperature, plain={}, ts={}, reliability={})
  pooled = []
  for name, load in sets.items():
    x, y = load()
    z = trainer.logits(params, x)
    out["plain"][name] = metrics.calibration_metrics(z, jnp.asarray(y))
    out["ts"][name] = metrics.calibration_metrics(z, jnp.asarray(y), temperature=temperature)
    if "/" in name:
      pooled.append((np.asarray(z), y))
  out["reliability"]["id"] = reliability_bins(trainer.logits(params, data.test[0]),
                                              data.test[1])
  if pooled:
    out["reliability"]["shift"] = reliability_bins(np.concatenate([p[0] for p in pooled]),
                                                   np.concatenate([p[1] for p in pooled]))
  out["history"] = {k: np.asarray(v).tolist() for k, v in carry["history"].items()}
  out["best_epoch"] = int(carry["best_epoch"])
  return out


def run_seeds(config, run: str, data: Data, shifts: Callable, workdir: str) -> list[dict]:
  """Every seed of one run: trained (resumably) and evaluated, or read from its stage."""
  trainer = make_trainer(config, run, data)
  method, kind = _method_and_filter(config, run)
  base = trials.config_fingerprint(config, exclude=NOT_TRAINING,
                                   salt=f"{method}/{kind if training.SPECS[method].views else ''}")
  out = []
  for i in range(config.seeds):
    seed = config.seed + i
    fp = trials.config_fingerprint({"train": base, "shift": config.shift, "seed": seed})
    run_dir = os.path.join(workdir, "runs", f"{run}-s{seed}-{base}")

    def compute():
      logging.info("fgr: training %s, seed %d", run, seed)
      carry = train_run(trainer, seed, data, config.schedule, run_dir)
      return evaluate(config, trainer, carry, data, shifts)

    out.append(trials.cached_stage(workdir, f"eval_{run}_s{seed}", fp, compute))
  return out


# ----------------------------------------------------------------------------- summary


def shift_keys(config) -> list[str]:
  return [f"{c}/{s}" for c in config.shift.corruptions for s in config.shift.severities]


def per_seed(results: dict, run: str, group: str, metric: str, keys) -> np.ndarray:
  """(seeds,) the mean of `metric` over `keys` (e.g. all shift sets) per seed."""
  return np.array([np.mean([r[group][k][metric] for k in keys]) for r in results[run]])


def difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
  """mean(a) - mean(b) and its standard error (Welch; NaN with one seed)."""
  se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if min(len(a), len(b)) > 1 \
      else np.nan
  return float(a.mean() - b.mean()), float(se)


def z_score(a: np.ndarray, b: np.ndarray) -> float:
  """(mean(a) - mean(b)) / s.e. of the difference (+-inf when the s.e. is 0)."""
  d, se = difference(a, b)
  if not np.isfinite(se):
    return float("nan")
  return d / se if se > 0 else (float("inf") if d > 0 else float("-inf") if d < 0 else 0.0)


def summary_figures(results: dict, config) -> dict:
  """Seed means (and s.e. of the ECEs) per run: ID, mean over shift sets, style."""
  groups = {"id": ["id"], "shift": shift_keys(config)}
  if "style" in next(iter(results.values()))[0]["plain"]:
    groups["style"] = ["style"]
  figures = {}
  for run in results:
    for where, keys in groups.items():
      for metric in metrics.METRICS:
        for group, tag in (("plain", ""), ("ts", "_ts")):
          v = per_seed(results, run, group, metric, keys)
          figures[f"{run}/{where}_{metric}{tag}"] = float(v.mean())
          if metric == "ece":
            figures[f"{run}/{where}_ece{tag}_se"] = float(
                v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    for s in config.shift.severities:
      keys = [f"{c}/{s}" for c in config.shift.corruptions]
      figures[f"{run}/shift_ece_severity{s}"] = float(
          per_seed(results, run, "plain", "ece", keys).mean())
    figures[f"{run}/temperature"] = float(np.mean([r["temperature"] for r in results[run]]))
  return figures


def _fmt(results, run, group, keys) -> str:
  v = per_seed(results, run, group, "ece", keys)
  se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
  return f"{run} {v.mean():.4f} +- {se:.4f}"


def claims(results: dict, config) -> list[report.Claim]:
  return [_claim_shift(results, config), _claim_id(results, config),
          _claim_ablation(results, config), _claim_ts(results, config)]


def _missing(results, runs) -> str:
  gone = [r for r in runs if r not in results]
  return f"not run: {', '.join(gone)}" if gone else ""


def _claim_shift(results, config) -> report.Claim:
  keys, k = shift_keys(config), config.claims.beats_se
  rivals = [m for m in BASELINES if m in results]
  ece = lambda m: per_seed(results, m, "plain", "ece", keys)
  z = [z_score(ece(m), ece("fgr")) for m in rivals] if "fgr" in results else []
  text = "; ".join(_fmt(results, m, "plain", keys) for m in rivals + ["fgr"] if m in results)
  return report.Claim(
      f"FGR lowers the mean ECE under shift (mean over {len(config.shift.corruptions)} "
      f"corruptions x {len(config.shift.severities)} severities, {config.seeds} seeds) "
      f"against CE, focal and DFL: lower by more than {k:g} standard errors of the "
      "difference of seed means", "lower corrupted ECE than CE / focal / DFL (CIFAR-10-C)",
      "; ".join(filter(None, [text, _missing(results, BASELINES + ("fgr",))])),
      min(z) if z and len(rivals) == len(BASELINES) else float("nan"), ">", k)


def _claim_id(results, config) -> report.Claim:
  k, pts = config.claims.within_se, config.claims.acc_points
  if not {"fgr", "dfl"} <= set(results):
    return report.Claim("FGR keeps ID calibration (vs DFL)", "no worse ID ECE",
                        _missing(results, ("fgr", "dfl")), float("nan"), "<=", k)
  ece = lambda m: per_seed(results, m, "plain", "ece", ["id"])
  acc = lambda m: per_seed(results, m, "plain", "accuracy", ["id"])
  d_acc = 100 * (acc("fgr").mean() - acc("dfl").mean())
  return report.Claim(
      f"ID calibration does not get worse: FGR's ID ECE exceeds DFL's by at most {k:g} "
      f"standard error(s) of the difference, and its ID accuracy is within {pts:g} point(s)",
      "ID ECE and accuracy on par with DFL",
      f"ID ECE {_fmt(results, 'fgr', 'plain', ['id'])} vs {_fmt(results, 'dfl', 'plain', ['id'])}"
      f"; accuracy {d_acc:+.2f} points", z_score(ece("fgr"), ece("dfl")), "<=", k,
      also=[(abs(d_acc), "<=", pts)])


def _claim_ablation(results, config) -> report.Claim:
  k, keys = config.claims.gap_se, shift_keys(config)
  need = ("fgr", "filter_only", "projection_only")
  if not set(need) <= set(results):
    return report.Claim("Both parts are needed", "ablation", _missing(results, need),
                        float("nan"), ">", k)
  ece = lambda m, ks: per_seed(results, m, "plain", "ece", ks)
  return report.Claim(
      f"Both parts are needed: filtering alone has a higher ID ECE than FGR, and "
      f"projection alone a higher mean ECE under shift (each by more than {k:g} standard "
      "error(s) of the difference)", "filter-only hurts ID calibration; projection-only "
      "gains less under shift",
      f"ID: {_fmt(results, 'filter_only', 'plain', ['id'])} vs "
      f"{_fmt(results, 'fgr', 'plain', ['id'])}; shift: "
      f"{_fmt(results, 'projection_only', 'plain', keys)} vs {_fmt(results, 'fgr', 'plain', keys)}",
      z_score(ece("filter_only", ["id"]), ece("fgr", ["id"])), ">", k,
      also=[(z_score(ece("projection_only", keys), ece("fgr", keys)), ">", k)])


def _claim_ts(results, config) -> report.Claim:
  k, keys = config.claims.within_se, shift_keys(config)
  rivals = [m for m in TS_BASELINES if m in results]
  ece = lambda m: per_seed(results, m, "ts", "ece", keys)
  z = [z_score(ece("fgr"), ece(m)) for m in rivals] if "fgr" in results else []
  text = "; ".join(_fmt(results, m, "ts", keys) for m in rivals + ["fgr"] if m in results)
  return report.Claim(
      "FGR stays compatible with temperature scaling (fit on the ID validation split): "
      "FGR + TS has a mean ECE under shift no higher than each baseline + TS (CE, focal, "
      f"DFL, label smoothing, mixup) by more than {k:g} standard error(s) of the difference",
      "FGR + TS better than or equal to baseline + TS",
      "; ".join(filter(None, [text, _missing(results, TS_BASELINES + ("fgr",))])),
      max(z) if z and len(rivals) == len(TS_BASELINES) else float("nan"), "<=", k)


def plot_inputs(results: dict, config) -> tuple[dict, dict]:
  """(ECE vs severity per run, mean and s.e. over seeds; seed 0's reliability bins)."""
  curves = {}
  for run in results:
    for group in ("plain", "ts"):
      rows = [per_seed(results, run, group, "ece", ["id"])]
      rows += [per_seed(results, run, group, "ece",
                        [f"{c}/{s}" for c in config.shift.corruptions])
               for s in config.shift.severities]
      v = np.stack(rows)       # (1 + severities, seeds)
      se = v.std(1, ddof=1) / np.sqrt(v.shape[1]) if v.shape[1] > 1 else 0 * v[:, 0]
      curves.setdefault(run, {})[group] = (v.mean(1).tolist(), se.tolist())
  diagrams = {run: results[run][0]["reliability"] for run in results}
  return curves, diagrams


@report.register("fgr", title="FGR: frequency-aware gradient rectification for calibration "
                 "under shift", validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  data = load_data(config)
  shifts = shift_loader(config, data)
  results = {}
  for name in run_names(config):
    results[name] = run_seeds(config, name, data, shifts, workdir)
    jax.clear_caches()
  curves, diagrams = plot_inputs(results, config)
  files = [plots.ece_vs_severity(workdir, curves, [0, *config.shift.severities]),
           plots.reliability(workdir, diagrams)]
  return report.Result(claims=report.claims_table(claims(results, config)),
                       figures=summary_figures(results, config), plots=files)
