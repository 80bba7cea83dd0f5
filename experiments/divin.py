"""Experiment: DivIn against CFG, CADS and particle guidance on the diversity-quality plane.

Toy case (2-D): a class-conditional flow (linear path, CFG dropout) is trained with
``common.train`` on Gaussian mixtures whose classes each have several unequal modes,
then sampled with Euler steps for every CFG weight w in ``config.ws`` and every
method strength. For each (method, w, strength) point the per-class metrics are
averaged over classes: precision (share of samples within ``mode_radius`` std of a
mode of their class), mode coverage, Vendi score and mean pairwise distance.

Checked claims (the DivIn abstract): (1) high w collapses onto dominant modes
(coverage and Vendi fall as w grows under plain CFG); (2) DivIn raises Vendi and
coverage at equal precision (same w, precision within ``precision_tolerance``);
(3) DivIn+CADS extends the Pareto front beyond either: the (precision, Vendi)
hypervolume of its points exceeds that of DivIn's and that of CADS's.

Image case (``image_case``): the same sweep on the bundled 8x8 digits with
``common.models.cnn.ConditionalCNN``; quality is the k-NN density against the real
images of the class, diversity the Vendi score and k-NN coverage.

Trained parameters are checkpointed by the training loop (``workdir/<case>_train``);
every finished point is appended to ``workdir/points.jsonl`` and skipped on a rerun
with the same config, so an interrupted run resumes.
"""

from __future__ import annotations

import functools
import os
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import report
from common import trials as trials_lib
from common import train as train_lib
from common.data import digits as digits_lib
from common.models.cnn import ConditionalCNN
from common.plotting import plt
from experiments.configs import divin as config_module
from methods import divin
from methods import flow_matching as fm

METHODS = ("cfg", "cads", "particle_guidance", "divin", "divin_cads")
LABELS = {"cfg": "CFG", "cads": "CADS", "particle_guidance": "particle guidance",
          "divin": "DivIn", "divin_cads": "DivIn+CADS"}


# ----------------------------------------------------------------------------- data
def toy_modes(config):
  """(means (C, K, 2), weights (K,), std) of the interleaved ring of modes."""
  num_c, num_k = config.num_classes, len(config.mode_weights)
  total = num_c * num_k
  angles = 2 * np.pi * (np.arange(num_k)[None, :] * num_c + np.arange(num_c)[:, None]) / total
  means = config.ring_radius * np.stack([np.cos(angles), np.sin(angles)], -1)
  w = np.asarray(config.mode_weights, float)
  return means.astype(np.float32), (w / w.sum()).astype(np.float32), float(config.mode_std)


def toy_batch(seed: int, step: int, *, config) -> dict:
  """Training batch as a pure function of (seed, step): class-balanced mixture draws."""
  means, weights, std = toy_modes(config)
  rng = np.random.default_rng([seed, step])
  n = config.batch_size
  labels = rng.integers(0, config.num_classes, n)
  modes = rng.choice(len(weights), n, p=weights)
  x1 = means[labels, modes] + std * rng.standard_normal((n, 2))
  cond = np.eye(config.num_classes, dtype=np.float32)[labels]
  return {"x1": x1.astype(np.float32), "cond": cond}


def image_batch(seed: int, step: int, *, config, images, labels) -> dict:
  rng = np.random.default_rng([seed, step])
  idx = rng.integers(0, len(labels), config.image_batch_size)
  return {"x1": images[idx], "cond": np.eye(10, dtype=np.float32)[labels[idx]]}


def load_images():
  data = digits_lib.load_digits()
  x = (2.0 * data.images - 1.0)[..., None].astype(np.float32)   # [-1, 1], (n, 8, 8, 1)
  return x, data.labels


# ----------------------------------------------------------------------------- training
def _train(model, example_x, num_classes, batch_fn, steps, batch_size, lr, p_uncond, seed,
           workdir):
  apply_fn = model.apply
  loss_fn = fm.make_loss_fn(apply_fn, path="linear", p_uncond=p_uncond)
  tconf = train_lib.default_train_config()
  tconf.num_steps, tconf.batch_size, tconf.seed = steps, batch_size, seed
  tconf.checkpoint_every, tconf.log_every, tconf.progress_bar = max(steps // 2, 1), 250, False
  tconf.nan_guard = False
  init_fn = lambda key: model.init(key, jnp.zeros((1,)), example_x,
                                   jnp.zeros((1, num_classes)))
  optimizer = optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=0.05))
  result = train_lib.train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn,
                           optimizer=optimizer, config=tconf, workdir=workdir)
  final_loss = result.history[-1]["loss"] if result.history else float("nan")
  return jax.device_get(result.state.params), final_loss


# ----------------------------------------------------------------------------- sampling
@functools.partial(jax.jit, static_argnames=("apply_fn", "method", "shape", "num_classes",
                                             "num_steps", "divin_steps", "rollout_steps",
                                             "scheme", "cads_t1", "cads_t2"))
def sample_classes(params, key, w, tau, noise_scale, alpha, eta, *, apply_fn, method, shape,
                   num_classes, num_steps, divin_steps, rollout_steps, scheme, cads_t1,
                   cads_t2):
  """Samples (num_classes, *shape) with one method; vmapped over classes."""
  grad_fn = divin.potential_grad(apply_fn, params, rollout_steps)

  def one_class(c, key):
    k_z, k_l, k_c = jax.random.split(key, 3)
    cond = jnp.broadcast_to(jax.nn.one_hot(c, num_classes), (shape[0], num_classes))
    z = jax.random.normal(k_z, shape)
    if method in ("divin", "divin_cads"):
      z = divin.divin_init(k_l, z, cond, grad_fn, tau=tau, eta=eta, num_steps=divin_steps,
                           scheme=scheme)
    if method in ("cads", "divin_cads"):
      field = divin.cads_field(apply_fn, params, cond, w, k_c, num_steps=num_steps,
                               t1=cads_t1, t2=cads_t2, noise_scale=noise_scale)
    elif method == "particle_guidance":
      field = divin.particle_guidance_field(apply_fn, params, cond, w, alpha=alpha)
    else:
      field = divin.cfg_field(apply_fn, params, cond, w)
    return fm.sample_ode(field, z, num_steps=num_steps, solver="euler")

  return jax.vmap(one_class)(jnp.arange(num_classes), jax.random.split(key, num_classes))


def sweep_points(config, ws, taus, scales, alphas):
  """(method, w, strength-index, tau, noise_scale, alpha) for every point of the sweep."""
  pts = [("cfg", w, 0, 0.0, 0.0, 0.0) for w in ws]
  for w in ws:
    pts += [("divin", w, i, t, 0.0, 0.0) for i, t in enumerate(taus)]
    pts += [("cads", w, i, 0.0, s, 0.0) for i, s in enumerate(scales)]
    pts += [("particle_guidance", w, i, 0.0, 0.0, a) for i, a in enumerate(alphas)]
    pts += [("divin_cads", w, i, t, s, 0.0) for i, (t, s) in enumerate(zip(taus, scales))]
  return pts


def toy_metrics(samples, config) -> dict:
  means, weights, std = toy_modes(config)
  out = {"precision": [], "coverage": [], "vendi": [], "pairwise": []}
  for c in range(config.num_classes):
    x = samples[c]
    scales = jnp.full((means.shape[1],), std)
    out["precision"].append(divin.metrics.precision(x, means[c], scales, config.mode_radius))
    out["coverage"].append(divin.metrics.mode_coverage(x, means[c], scales,
                                                       config.mode_radius))
    out["vendi"].append(divin.metrics.vendi_score(x, config.vendi_lengthscale))
    out["pairwise"].append(divin.metrics.mean_pairwise_distance(x))
  return {k: float(np.mean(v)) for k, v in out.items()}


def image_metrics(samples, config, images, labels) -> dict:
  out = {"density": [], "coverage": [], "vendi": [], "pairwise": []}
  for c in range(10):
    real = images[labels == c]
    x = samples[c]
    dens, cov = divin.metrics.density_coverage(real, x, config.image_nn_k)
    out["density"].append(dens)
    out["coverage"].append(cov)
    out["vendi"].append(divin.metrics.vendi_score(x, config.image_vendi_lengthscale))
    out["pairwise"].append(divin.metrics.mean_pairwise_distance(x))
  return {k: float(np.mean(v)) for k, v in out.items()}


# ----------------------------------------------------------------------------- resume log
def run_case(case: str, config, workdir: str) -> tuple[list, dict]:
  """Trains (or restores) the case's flow and evaluates every sweep point."""
  seed = int(config.seed)
  if case == "toy":
    model = fm.ConditionalMLP(hidden=tuple(config.hidden), dim=2)
    example, num_classes = jnp.zeros((1, 2)), config.num_classes
    batch_fn = functools.partial(toy_batch, config=config)
    params, loss = _train(model, example, num_classes, batch_fn, config.train_steps,
                          config.batch_size, config.learning_rate, config.p_uncond, seed,
                          os.path.join(workdir, "toy_train"))
    shape = (config.samples_per_class, 2)
    pts = sweep_points(config, config.ws, config.divin_taus, config.cads_noise_scales,
                       config.pg_alphas)
    steps, rollout, lsteps = config.sample_steps, config.rollout_steps, config.divin_steps
    evaluate = lambda s: toy_metrics(s, config)
  else:
    images, labels = load_images()
    model = ConditionalCNN(channels=config.image_channels, num_blocks=config.image_blocks)
    example, num_classes = jnp.zeros((1, 8, 8, 1)), 10
    batch_fn = functools.partial(image_batch, config=config, images=images, labels=labels)
    params, loss = _train(model, example, num_classes, batch_fn, config.image_train_steps,
                          config.image_batch_size, config.image_learning_rate,
                          config.p_uncond, seed + 1, os.path.join(workdir, "image_train"))
    shape = (config.image_samples_per_class, 8, 8, 1)
    pts = sweep_points(config, config.image_ws, (config.image_divin_tau,),
                       (config.image_cads_noise_scale,), (config.image_pg_alpha,))
    steps, rollout = config.image_sample_steps, config.image_rollout_steps
    lsteps = config.image_divin_steps
    evaluate = lambda s: image_metrics(s, config, images, labels)
  fingerprint = trials_lib.config_fingerprint(config, salt=case)
  log = trials_lib.TrialLog(os.path.join(workdir, "points.jsonl"), fingerprint)
  done = {k: row["metrics"] for k, row in log.done(lambda r: tuple(r["point"][:3])).items()}
  rows = []
  with log:
    for method, w, i, tau, scale, alpha in pts:
      key3 = (method, w, i)
      if key3 not in done:
        key = jax.random.fold_in(jax.random.PRNGKey(seed + 7), 0 if case == "toy" else 1)
        samples = sample_classes(
            params, key, jnp.float32(w), jnp.float32(tau), jnp.float32(scale),
            jnp.float32(alpha), jnp.float32(config.divin_eta), apply_fn=model.apply,
            method=method, shape=shape, num_classes=num_classes, num_steps=steps,
            divin_steps=lsteps, rollout_steps=rollout,
            scheme=config.divin_scheme, cads_t1=float(config.cads_t1),
            cads_t2=float(config.cads_t2))
        metrics = evaluate(samples)
        log.append(dict(point=[method, w, i], metrics=metrics))
        done[key3] = metrics
        if case == "toy" and method == "cfg" and w in (min(config.ws), max(config.ws)):
          np.save(os.path.join(workdir, f"toy_samples_cfg_w{w:g}.npy"), np.asarray(samples))
        if case == "toy" and method == "divin" and w == max(config.ws) and i == len(
            config.divin_taus) - 1:
          np.save(os.path.join(workdir, f"toy_samples_divin_w{w:g}.npy"), np.asarray(samples))
      rows.append(dict(method=method, w=w, strength=i, tau=tau, noise_scale=scale,
                       alpha=alpha, **done[key3]))
  return rows, {"final_train_loss": loss}


# ----------------------------------------------------------------------------- summary
def _get(rows, method, w, strength=None):
  return [r for r in rows if r["method"] == method and r["w"] == w and
          (strength is None or r["strength"] == strength)]


def summarize_toy(rows, config) -> tuple[list, dict]:
  figures = {}
  ws = list(config.ws)
  for r in rows:
    tag = f"toy/{r['method']}/w={r['w']:g}/s={r['strength']}"
    for k in ("precision", "coverage", "vendi"):
      figures[f"{tag}/{k}"] = r[k]
  cfg = {w: _get(rows, "cfg", w)[0] for w in ws}
  lo, hi = min(ws), max(ws)
  collapse = (cfg[hi]["coverage"] < cfg[lo]["coverage"]) and (cfg[hi]["vendi"] < cfg[lo]["vendi"])
  # DivIn at equal precision: same w, precision within tolerance, strongest tau that qualifies.
  tol = config.precision_tolerance
  gains, ok = [], []
  for w in ws:
    if w == lo:
      continue
    base = cfg[w]
    cands = [r for r in _get(rows, "divin", w) if r["precision"] >= base["precision"] - tol]
    if not cands:
      gains.append(f"w={w:g}: no DivIn point within precision tol")
      ok.append(False)
      continue
    best = max(cands, key=lambda r: r["vendi"])
    dv, dc = best["vendi"] - base["vendi"], best["coverage"] - base["coverage"]
    figures[f"toy/divin_minus_cfg/w={w:g}/vendi"] = dv
    figures[f"toy/divin_minus_cfg/w={w:g}/coverage"] = dc
    figures[f"toy/divin_minus_cfg/w={w:g}/precision"] = best["precision"] - base["precision"]
    gains.append(f"w={w:g}: Vendi {base['vendi']:.2f}->{best['vendi']:.2f}, coverage "
                 f"{base['coverage']:.2f}->{best['coverage']:.2f}, precision "
                 f"{base['precision']:.3f}->{best['precision']:.3f}")
    ok.append(dv > 0 and dc >= 0)
  hv = {}
  for m in METHODS:
    pts = [(r["precision"], r["vendi"]) for r in rows if r["method"] == m]
    hv[m] = divin.metrics.hypervolume_2d(np.asarray(pts))
    figures[f"toy/hypervolume/{m}"] = hv[m]
  claims = [
      report.ClaimCheck(
          claim="High CFG weight collapses onto dominant modes (mode coverage and Vendi "
                f"lower at w={hi:g} than at w={lo:g})",
          paper_figure="qualitative: high w causes mode collapse",
          our_figure=f"coverage {cfg[lo]['coverage']:.2f} -> {cfg[hi]['coverage']:.2f}, "
                     f"Vendi {cfg[lo]['vendi']:.2f} -> {cfg[hi]['vendi']:.2f}",
          reproduced=bool(collapse)),
      report.ClaimCheck(
          claim="DivIn raises Vendi and coverage at equal precision (same w, precision "
                f"within {tol:g}; 2-D mixtures)",
          paper_figure="qualitative: higher diversity at comparable quality",
          our_figure="; ".join(gains), reproduced=bool(ok) and all(ok)),
      report.ClaimCheck(
          claim="DivIn+CADS extends the Pareto front beyond either (hypervolume of "
                "(precision, Vendi) points larger than DivIn's and CADS's)",
          paper_figure="qualitative: combination expands the diversity-quality frontier",
          our_figure=f"HV DivIn+CADS {hv['divin_cads']:.3f}, DivIn {hv['divin']:.3f}, "
                     f"CADS {hv['cads']:.3f}, CFG {hv['cfg']:.3f}",
          reproduced=bool(hv["divin_cads"] > max(hv["divin"], hv["cads"]))),
  ]
  return claims, figures


def summarize_image(rows, config) -> tuple[list, dict]:
  figures = {}
  for r in rows:
    tag = f"image/{r['method']}/w={r['w']:g}"
    for k in ("density", "coverage", "vendi"):
      figures[f"{tag}/{k}"] = r[k]
  hi = max(config.image_ws)
  base, dv = _get(rows, "cfg", hi)[0], _get(rows, "divin", hi)[0]
  rel = dv["density"] / max(base["density"], 1e-12)
  ok = dv["vendi"] > base["vendi"] and rel >= 0.9
  claims = [report.ClaimCheck(
      claim=f"Digits 8x8: DivIn raises Vendi at w={hi:g} while keeping k-NN density "
            "(>= 90% of CFG's)",
      paper_figure="qualitative: better diversity in class-to-image generation",
      our_figure=f"Vendi {base['vendi']:.2f} -> {dv['vendi']:.2f}, density "
                 f"{base['density']:.3f} -> {dv['density']:.3f}, coverage "
                 f"{base['coverage']:.3f} -> {dv['coverage']:.3f}",
      reproduced=bool(ok))]
  return claims, figures


# ----------------------------------------------------------------------------- plots
def plot_tradeoff(rows, path, xkey, ykey, title):
  fig, ax = plt.subplots(figsize=(5.6, 4.4))
  markers = {"cfg": "o", "cads": "s", "particle_guidance": "^", "divin": "D",
             "divin_cads": "*"}
  for m in METHODS:
    pts = sorted([(r[xkey], r[ykey], r["w"]) for r in rows if r["method"] == m])
    if not pts:
      continue
    xs, ys, w = zip(*pts)
    ax.plot(xs, ys, markers[m], label=LABELS[m], alpha=0.8, ms=7)
    if m == "cfg":
      for x, y, wv in pts:
        ax.annotate(f"w={wv:g}", (x, y), fontsize=7)
  ax.set_xlabel(xkey)
  ax.set_ylabel(ykey)
  ax.set_title(title)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_samples(workdir, config, path):
  names = [f for f in ("toy_samples_cfg_w%g.npy" % min(config.ws),
                       "toy_samples_cfg_w%g.npy" % max(config.ws),
                       "toy_samples_divin_w%g.npy" % max(config.ws))
           if os.path.exists(os.path.join(workdir, f))]
  if not names:
    return False
  means, _, _ = toy_modes(config)
  fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 4), squeeze=False)
  for ax, name in zip(axes[0], names):
    s = np.load(os.path.join(workdir, name))
    for c in range(s.shape[0]):
      ax.scatter(s[c, :, 0], s[c, :, 1], s=3, alpha=0.5)
    ax.scatter(means[..., 0].ravel(), means[..., 1].ravel(), c="k", marker="x")
    ax.set_title(name[len("toy_samples_"):-4])
    ax.set_aspect("equal")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return True


@report.register("divin", title="DivIn: diversity-inducing initialization")
def run(config, workdir: str) -> report.Result:
  """Runs the toy (and image) sweeps, writes the trade-off plots, returns claims."""
  config_module.validate(config)
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  with jax.enable_x64(bool(config.x64)):
    rows, extra = run_case("toy", config, workdir)
    claims, figures = summarize_toy(rows, config)
    figures["toy/final_train_loss"] = extra["final_train_loss"]
    plots = ["tradeoff_toy_vendi.png", "tradeoff_toy_coverage.png"]
    plot_tradeoff(rows, os.path.join(workdir, plots[0]), "precision", "vendi",
                  "2-D mixtures: precision vs Vendi")
    plot_tradeoff(rows, os.path.join(workdir, plots[1]), "precision", "coverage",
                  "2-D mixtures: precision vs mode coverage")
    if plot_samples(workdir, config, os.path.join(workdir, "toy_samples.png")):
      plots.append("toy_samples.png")
    if config.image_case:
      img_rows, img_extra = run_case("image", config, workdir)
      img_claims, img_figures = summarize_image(img_rows, config)
      claims += img_claims
      figures.update(img_figures)
      figures["image/final_train_loss"] = img_extra["final_train_loss"]
      plots.append("tradeoff_digits.png")
      plot_tradeoff(img_rows, os.path.join(workdir, plots[-1]), "density", "vendi",
                    "8x8 digits: k-NN density vs Vendi")
  logging.info("divin figures: %s", figures)
  return report.Result(claims=claims, figures=figures, plots=plots,
                       seconds=time.time() - start)
