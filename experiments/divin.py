"""Experiment: DivIn against CFG, CADS and particle guidance on the diversity-quality plane.

Toy case (2-D): a class-conditional flow (linear path, CFG dropout) is trained with
``common.train`` on Gaussian mixtures whose classes each have several unequal modes
(``methods.divin.data``), then sampled with Euler steps for every CFG weight w in
``config.toy.ws`` and every method strength (``methods.divin.sample_classes``). For
each (method, w, strength) point the per-class metrics are averaged over classes:
precision (share of samples within ``toy.mode_radius`` std of a mode of their
class), mode coverage, Vendi score and mean pairwise distance.

Checked claims (the DivIn abstract): (1) high w collapses onto dominant modes
(coverage and Vendi fall as w grows under plain CFG); (2) DivIn raises Vendi and
coverage at equal precision (same w, precision within ``toy.precision_tolerance``);
(3) DivIn+CADS extends the Pareto front beyond either: the (precision, Vendi)
hypervolume of its points exceeds that of DivIn's and that of CADS's.

Image case (``image.enabled``): the same sweep on the bundled 8x8 digits with
``common.models.cnn.ConditionalCNN``; quality is the k-NN density against the real
images of the class, diversity the Vendi score and k-NN coverage.

Trained parameters are checkpointed by the training loop in
``workdir/<case>_train-<fingerprint>`` (a changed config trains afresh); every finished point is appended to ``workdir/points.jsonl`` (a ``TrialLog`` keyed by
the fingerprint of the sub-configs the case reads) and skipped on a rerun, so an
interrupted run resumes. The samples drawn in the toy plot are a stage
(``workdir/stages/toy_samples.npz``).
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import metrics as metrics_lib
from common import report
from common import train as train_lib
from common import trials
from common.data import digits as digits_lib
from common.models.cnn import ConditionalCNN
from experiments.configs import divin as config_module
from experiments.plots import divin as plots
from methods import divin
from methods import flow_matching as fm

# Keys of a case that do not change what it computes (left out of its fingerprint).
_NOT_RESULTS = ("enabled", "train.progress_bar", "train.log_every", "train.checkpoint_every",
                "train.keep_checkpoints")


def _fingerprint(config, case: str) -> str:
  """The case's sub-config plus what the cases share (and the toy data for "toy")."""
  keyed = {"case": config[case], "seed": config.seed, "x64": config.x64,
           "p_uncond": config.p_uncond, "langevin": config.langevin, "cads": config.cads}
  if case == "toy":
    keyed["data"] = config.data
  return trials.config_fingerprint(keyed, exclude=[f"case.{k}" for k in _NOT_RESULTS],
                                   salt=case)


def train_flow(model, example_x, num_classes: int, batch_fn, case_config, p_uncond: float,
               workdir: str):
  """Trains (or restores) ``model`` with the CFM loss; returns (params, final loss)."""
  tconf = case_config.train
  loss_fn = fm.make_loss_fn(model.apply, path="linear", p_uncond=p_uncond)
  init_fn = lambda key: model.init(key, jnp.zeros((1,)), example_x, jnp.zeros((1, num_classes)))
  optimizer = optax.adam(optax.cosine_decay_schedule(case_config.learning_rate,
                                                     tconf.num_steps, alpha=0.05))
  result = train_lib.train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn,
                           optimizer=optimizer, config=tconf, workdir=workdir)
  logged = metrics_lib.read_metrics_jsonl(workdir)
  losses = [row["loss"] for row in logged if "loss" in row]
  return jax.device_get(result.state.params), (losses[-1] if losses else float("nan"))


def sweep_points(case_config) -> list[tuple]:
  """(method, w, strength index, tau, noise_scale, alpha) for every point of the sweep."""
  c = case_config
  pts = [("cfg", w, 0, 0.0, 0.0, 0.0) for w in c.ws]
  for w in c.ws:
    pts += [("divin", w, i, t, 0.0, 0.0) for i, t in enumerate(c.divin_taus)]
    pts += [("cads", w, i, 0.0, s, 0.0) for i, s in enumerate(c.cads_noise_scales)]
    pts += [("particle_guidance", w, i, 0.0, 0.0, a) for i, a in enumerate(c.pg_alphas)]
    pts += [("divin_cads", w, i, t, s, 0.0)
            for i, (t, s) in enumerate(zip(c.divin_taus, c.cads_noise_scales))]
  return pts


def _case_setup(case: str, config):
  """(model, example x, num_classes, batch_fn, sample shape, evaluate) of the case."""
  if case == "toy":
    data, c = config.data, config.toy
    means, weights = divin.ring_modes(data.num_classes, data.mode_weights, data.ring_radius)
    batch_fn = functools.partial(divin.mixture_batch, means=means, weights=weights,
                                 std=float(data.mode_std), batch_size=c.train.batch_size)
    evaluate = lambda s: divin.class_mode_metrics(s, means, float(data.mode_std),
                                                  c.mode_radius, c.vendi_lengthscale)
    return (fm.ConditionalMLP(hidden=tuple(c.hidden), dim=2), jnp.zeros((1, 2)),
            data.num_classes, batch_fn, (c.samples_per_class, 2), evaluate)
  c = config.image
  digits = digits_lib.load_digits()
  images = (2.0 * digits.images - 1.0)[..., None].astype(np.float32)   # [-1, 1], (n, 8, 8, 1)
  batch_fn = functools.partial(divin.dataset_batch, x=images, labels=digits.labels,
                               num_classes=10, batch_size=c.train.batch_size)
  real = [images[digits.labels == k] for k in range(10)]
  evaluate = lambda s: divin.class_density_metrics(s, real, c.nn_k, c.vendi_lengthscale)
  return (ConditionalCNN(channels=c.channels, num_blocks=c.blocks), jnp.zeros((1, 8, 8, 1)),
          10, batch_fn, (c.samples_per_class, 8, 8, 1), evaluate)


def _plotted(config) -> dict:
  """{(method, w, strength): name} of the toy samples drawn in toy_samples.png."""
  lo, hi, top = min(config.toy.ws), max(config.toy.ws), len(config.toy.divin_taus) - 1
  return {("cfg", lo, 0): f"cfg_w{lo:g}", ("cfg", hi, 0): f"cfg_w{hi:g}",
          ("divin", hi, top): f"divin_w{hi:g}"}


def run_case(case: str, config, workdir: str) -> tuple[list, float, dict]:
  """Trains (or restores) the case's flow and evaluates every sweep point.

  Returns (rows, final training loss, {name: samples} for the toy plot ({} for image)).
  """
  c, fingerprint = config[case], _fingerprint(config, case)
  model, example, num_classes, batch_fn, shape, evaluate = _case_setup(case, config)
  params, loss = train_flow(model, example, num_classes, batch_fn, c, config.p_uncond,
                            os.path.join(workdir, f"{case}_train-{fingerprint[:12]}"))
  key = jax.random.fold_in(jax.random.PRNGKey(config.seed + 7), 0 if case == "toy" else 1)

  def draw(point):
    method, w, _, tau, scale, alpha = point
    return divin.sample_classes(
        params, key, jnp.float32(w), jnp.float32(tau), jnp.float32(scale), jnp.float32(alpha),
        jnp.float32(config.langevin.eta), apply_fn=model.apply, method=method, shape=shape,
        num_classes=num_classes, num_steps=c.sample_steps, divin_steps=c.divin_steps,
        rollout_steps=c.rollout_steps, scheme=config.langevin.scheme,
        cads_t1=float(config.cads.t1), cads_t2=float(config.cads.t2))

  points = sweep_points(c)
  plotted = _plotted(config) if case == "toy" else {}
  kept, rows = {}, []
  with trials.TrialLog(os.path.join(workdir, "points.jsonl"), fingerprint) as log:
    done = {k: r["metrics"] for k, r in log.done(lambda r: tuple(r["point"][:3])).items()}
    for point in points:
      if point[:3] not in done:
        samples = draw(point)
        done[point[:3]] = log.append(dict(point=list(point[:3]),
                                          metrics=evaluate(samples)))["metrics"]
        if point[:3] in plotted:
          kept[plotted[point[:3]]] = np.asarray(samples)
      rows.append(dict(zip(("method", "w", "strength", "tau", "noise_scale", "alpha"), point),
                       **done[point[:3]]))
  by_key = {p[:3]: p for p in points}
  samples = trials.cached_stage(workdir, f"{case}_samples", fingerprint, lambda: {
      name: kept[name] if name in kept else np.asarray(draw(by_key[k]))
      for k, name in plotted.items()},
      kind="npz") if plotted else {}
  return rows, loss, samples


# ----------------------------------------------------------------------------- claims
def _get(rows, method, w, strength=None):
  return [r for r in rows if r["method"] == method and r["w"] == w and
          (strength is None or r["strength"] == strength)]


def divin_gains(rows, config) -> tuple[list, list, list, dict]:
  """DivIn against CFG at equal precision: for each w above the lowest, the DivIn point
  with the largest Vendi among those within ``toy.precision_tolerance`` of CFG's precision.

  Returns (Vendi gains, coverage gains, report texts, figures); a w without such a point
  has gain None (the claim fails there).
  """
  ws, tol = list(config.toy.ws), config.toy.precision_tolerance
  dvs, dcs, texts, figures = [], [], [], {}
  for w in ws:
    if w == min(ws):
      continue
    base = _get(rows, "cfg", w)[0]
    cands = [r for r in _get(rows, "divin", w) if r["precision"] >= base["precision"] - tol]
    if not cands:
      dvs.append(None), dcs.append(None)
      texts.append(f"w={w:g}: no DivIn point within precision tol")
      continue
    best = max(cands, key=lambda r: r["vendi"])
    for k in ("vendi", "coverage", "precision"):
      figures[f"toy/divin_minus_cfg/w={w:g}/{k}"] = best[k] - base[k]
    dvs.append(best["vendi"] - base["vendi"]), dcs.append(best["coverage"] - base["coverage"])
    texts.append(f"w={w:g}: Vendi {base['vendi']:.2f}->{best['vendi']:.2f}, coverage "
                 f"{base['coverage']:.2f}->{best['coverage']:.2f}, precision "
                 f"{base['precision']:.3f}->{best['precision']:.3f}")
  return dvs, dcs, texts, figures


def toy_claims(rows, config) -> tuple[list, dict]:
  """The toy claim table (collapse, equal-precision gains, Pareto hypervolume) and figures."""
  figures = {f"toy/{r['method']}/w={r['w']:g}/s={r['strength']}/{k}": r[k]
             for r in rows for k in ("precision", "coverage", "vendi")}
  lo, hi = min(config.toy.ws), max(config.toy.ws)
  cfg_lo, cfg_hi = _get(rows, "cfg", lo)[0], _get(rows, "cfg", hi)[0]
  dvs, dcs, texts, gain_figures = divin_gains(rows, config)
  figures.update(gain_figures)
  hv = {m: divin.hypervolume_2d(np.asarray([(r["precision"], r["vendi"]) for r in rows
                                            if r["method"] == m])) for m in divin.METHODS}
  figures.update({f"toy/hypervolume/{m}": v for m, v in hv.items()})
  claims = report.claims_table([
      report.Claim(
          "High CFG weight collapses onto dominant modes (mode coverage and Vendi "
          f"lower at w={hi:g} than at w={lo:g})",
          "qualitative: high w causes mode collapse",
          f"coverage {cfg_lo['coverage']:.2f} -> {cfg_hi['coverage']:.2f}, "
          f"Vendi {cfg_lo['vendi']:.2f} -> {cfg_hi['vendi']:.2f}",
          cfg_hi["coverage"], "<", cfg_lo["coverage"],
          also=[(cfg_hi["vendi"], "<", cfg_lo["vendi"])]),
      report.Claim(
          "DivIn raises Vendi and coverage at equal precision (same w, precision "
          f"within {config.toy.precision_tolerance:g}; 2-D mixtures)",
          "qualitative: higher diversity at comparable quality", "; ".join(texts),
          dvs, ">", 0.0, also=[(dcs, ">=", 0.0)]),
      report.Claim(
          "DivIn+CADS extends the Pareto front beyond either (hypervolume of "
          "(precision, Vendi) points larger than DivIn's and CADS's)",
          "qualitative: combination expands the diversity-quality frontier",
          f"HV DivIn+CADS {hv['divin_cads']:.3f}, DivIn {hv['divin']:.3f}, "
          f"CADS {hv['cads']:.3f}, CFG {hv['cfg']:.3f}",
          hv["divin_cads"], ">", max(hv["divin"], hv["cads"])),
  ])
  return claims, figures


def image_claims(rows, config) -> tuple[list, dict]:
  """The digits claim (DivIn's Vendi up at the highest w, density kept) and figures."""
  figures = {f"image/{r['method']}/w={r['w']:g}/{k}": r[k]
             for r in rows for k in ("density", "coverage", "vendi")}
  hi = max(config.image.ws)
  base = _get(rows, "cfg", hi)[0]
  dv = _get(rows, "divin", hi, len(config.image.divin_taus) - 1)[0]
  claims = report.claims_table([report.Claim(
      f"Digits 8x8: DivIn raises Vendi at w={hi:g} while keeping k-NN density "
      "(>= 90% of CFG's)",
      "qualitative: better diversity in class-to-image generation",
      f"Vendi {base['vendi']:.2f} -> {dv['vendi']:.2f}, density "
      f"{base['density']:.3f} -> {dv['density']:.3f}, coverage "
      f"{base['coverage']:.3f} -> {dv['coverage']:.3f}",
      dv["vendi"], ">", base["vendi"],
      also=[(dv["density"] / max(base["density"], 1e-12), ">=", 0.9)])])
  return claims, figures


@report.register("divin", title="DivIn: diversity-inducing initialization",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Runs the toy (and image) sweeps, writes the trade-off plots, returns the claims."""
  rows, loss, samples = run_case("toy", config, workdir)
  claims, figures = toy_claims(rows, config)
  figures["toy/final_train_loss"] = loss
  names = ["tradeoff_toy_vendi.png", "tradeoff_toy_coverage.png", "toy_samples.png"]
  path = lambda name: os.path.join(workdir, name)
  plots.tradeoff(rows, path(names[0]), "precision", "vendi", "2-D mixtures: precision vs Vendi")
  plots.tradeoff(rows, path(names[1]), "precision", "coverage",
                 "2-D mixtures: precision vs mode coverage")
  means, _ = divin.ring_modes(config.data.num_classes, config.data.mode_weights,
                              config.data.ring_radius)
  plots.samples(samples, means, path(names[2]))
  if config.image.enabled:
    img_rows, img_loss, _ = run_case("image", config, workdir)
    img_claims, img_figures = image_claims(img_rows, config)
    claims += img_claims
    figures.update(img_figures)
    figures["image/final_train_loss"] = img_loss
    names.append("tradeoff_digits.png")
    plots.tradeoff(img_rows, path(names[-1]), "density", "vendi",
                   "8x8 digits: k-NN density vs Vendi")
  return report.Result(claims=claims, figures=figures, plots=names)
