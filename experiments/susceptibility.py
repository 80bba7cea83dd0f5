"""Experiment: spectroscopy of a language model (SGLD, LLC, susceptibilities, clustering).

Three parts (`config.parts`), each a stage cached under workdir/stages/
(`common.trials.cached_stage`, keyed by the sub-configs it reads):

1. calibration: on linear regression (`methods.susceptibility.linear_regression`), a
   regular model whose learning coefficient is d / 2, SGLD from the least-squares
   solution with n_beta = m / ln m estimates lambda at every step size in
   `calibration.step_sizes` (one vmapped run); the claim is |lambda_hat - d/2| <= 10%
   at `calibration.step_size`, and the sweep shows the bias once eps is too large.
2. synthetic: a 2-layer attention-only transformer is trained with the common loop on
   the mechanism stream (`common.data.mechanisms`); per-token susceptibilities to every
   head, the embedding and the unembedding come from SGLD restricted to each
   component; a stratified probe of tokens is clustered (standardize -> kNN graph ->
   conductance sweep cuts) and scored by the adjusted Rand index against the
   generating mechanisms, next to the same clustering of projected per-token loss
   gradients and of final residual-stream vectors. The induction head is the head whose
   ablation hurts induction tokens most. Its stage is the npz of measured arrays.
3. lm: the shared byte-level LM (`common.lm.trained_lm`); attention and MLP of every
   layer, embedding and unembedding are the components; the clusters of validation
   tokens are written as a table of their most representative tokens in context.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import lm as lm_lib
from common import report
from common import train as train_lib
from common import trials
from common.data import mechanisms
from common.data import text
from common.models import transformer
from experiments.configs import susceptibility as config_module
from experiments.plots import susceptibility as plots
import methods.susceptibility as sus

# Train-loop keys that do not change the trained weights.
_NOT_WEIGHTS = tuple(f"train.{k}" for k in ("checkpoint_every", "keep_checkpoints", "log_every",
                                            "progress_bar", "distributed", "nan_guard",
                                            "mesh_shape", "mesh"))
_NUM_MECHANISMS = len(mechanisms.MECHANISMS)


def _n_beta(value: float, m: int) -> float:
  return float(value) if value > 0 else sus.default_n_beta(m)


def _cluster(config, features: np.ndarray) -> np.ndarray:
  c = config.cluster
  return sus.cluster_tokens(features, k=c.k, max_conductance=c.max_conductance,
                            min_size=c.min_size, max_clusters=c.max_clusters)


def _susceptibilities(model, params, pool, probe_tokens, masks, sgld, n_beta: float,
                      data_key, key, components_per_call=None):
  """(SusceptibilityResult, seconds) of SGLD restricted to each mask, minibatches of
  `sgld.batch` pool rows chosen by fold_in(data_key, step), probe losses observed."""

  def batch_fn(step):
    rows = jax.random.randint(jax.random.fold_in(data_key, step), (sgld.batch,), 0,
                              pool.shape[0])
    return pool[rows]

  start = time.time()
  result = sus.component_susceptibilities(
      lambda p, tokens: jnp.mean(sus.token_losses(model, p, tokens)),
      lambda p: sus.token_losses(model, p, probe_tokens).reshape(-1),
      params, batch_fn, list(masks), key, components_per_call=components_per_call,
      step_size=sgld.step_size, n_beta=n_beta, localization=sgld.localization,
      num_chains=sgld.chains, num_burnin=sgld.burnin, num_draws=sgld.draws, thin=sgld.thin)
  return jax.block_until_ready(result), time.time() - start


# ------------------------------------------------------------------ 1. calibration

def calibration(config, workdir: str) -> dict:
  """LLC vs step size on linear regression (cached stage "calibration")."""
  fp = trials.config_fingerprint({"seed": config.seed, "calibration": config.calibration},
                                 exclude=("calibration.tolerance",))
  return trials.cached_stage(workdir, "calibration", fp, lambda: _calibrate(config))


def _calibrate(config) -> dict:
  cal = config.calibration
  problem = sus.linear_regression(jax.random.PRNGKey(config.seed), cal.dim, cal.n,
                                  cal.batch_size, cal.noise)
  n_beta = sus.default_n_beta(cal.batch_size)
  loss0 = float(problem.loss_fn(problem.w0, (problem.x, problem.y)))
  eps = sorted(set(float(e) for e in cal.step_sizes) | {float(cal.step_size)})
  traces = np.asarray(sus.step_size_sweep(
      problem.loss_fn, problem.w0, problem.batch_fn, jax.random.PRNGKey(config.seed + 1),
      eps, n_beta=n_beta, localization=cal.localization, num_chains=cal.chains,
      num_burnin=cal.burnin, num_draws=cal.draws))            # (eps, chains, steps)
  rows = []
  for e, trace in zip(eps, traces):
    est = sus.estimate_llc(trace, loss0, n_beta, cal.burnin)
    diag = sus.diagnose(trace, loss0, n_beta, cal.burnin)
    rows.append(dict(step_size=e, llc=float(est.mean), stderr=float(est.stderr),
                     stability=sus.stability_number(e, n_beta, cal.localization,
                                                    problem.curvature),
                     healthy=diag["healthy"], drift_z=diag["max_drift_z"]))
  stride = max(1, traces.shape[2] // 400)   # chain 0 for the plot, at most 400 points
  return dict(true_llc=problem.true_llc, n_beta=n_beta, loss0=loss0, rows=rows,
              trace_stride=stride, traces={str(e): (traces[i, 0, ::stride] - loss0).tolist()
                                           for i, e in enumerate(eps)})


# -------------------------------------------------------------------- 2. synthetic

def _mechanism_batch(config, seed: int, step: int, batch_size: int) -> dict:
  return mechanisms.mechanism_batch(seed, step, batch_size, config.data.seq_len,
                                    p_pair=config.data.p_pair)


def train_synthetic(config, workdir: str):
  """(model, params): the attention-only model trained (or restored) by the common loop."""
  m, steps = config.model, config.train.num_steps
  model = transformer.Transformer(transformer.llama_config(
      vocab_size=mechanisms.vocab_size(), d_model=m.d_model, num_layers=m.num_layers,
      num_heads=m.num_heads, d_ff=1, use_mlp=False, max_seq_len=max(128, config.data.seq_len)))

  def loss_fn(params, batch, key):
    del key
    losses = sus.token_losses(model, params, batch["tokens"])
    by_mechanism = sus.loss_by_label(losses, batch["labels"][:, 1:], _NUM_MECHANISMS)
    return jnp.mean(losses), {f"loss_{name}": by_mechanism[i]
                              for i, name in enumerate(mechanisms.MECHANISMS)}

  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
      optax.warmup_cosine_decay_schedule(0.0, m.learning_rate, min(50, steps), steps,
                                         m.learning_rate / 10), b2=0.98, weight_decay=0.0))
  fp = trials.config_fingerprint({k: config[k] for k in ("data", "model", "train")},
                                 exclude=_NOT_WEIGHTS)
  result = train_lib.train(
      init_fn=lambda key: transformer.init_params(model, key), loss_fn=loss_fn,
      batch_fn=lambda seed, step: _mechanism_batch(config, seed, step, config.train.batch_size),
      optimizer=optimizer, config=config.train, workdir=os.path.join(workdir, f"train-{fp}"))
  return model, jax.device_get(result.state.params)


def synthetic(config, workdir: str) -> dict:
  """The synthetic part's measured arrays (cached npz stage "synthetic")."""
  fp = trials.config_fingerprint(
      {k: config[k] for k in ("seed", "data", "model", "train", "synthetic", "cluster")},
      exclude=(*_NOT_WEIGHTS, "synthetic.ari_margin"))
  return trials.cached_stage(workdir, "synthetic", fp, lambda: _measure_synthetic(config, workdir),
                             kind="npz")


def _measure_synthetic(config, workdir: str) -> dict:
  start = time.time()
  model, params = train_synthetic(config, workdir)
  train_seconds = time.time() - start
  s = config.synthetic
  pool = jnp.asarray(_mechanism_batch(config, config.seed + 1, 0, s.pool_size)["tokens"])
  probe = _mechanism_batch(config, config.seed + 2, 0, s.probe_seqs)
  probe_tokens = jnp.asarray(probe["tokens"])
  labels = probe["labels"][:, 1:].reshape(-1)
  names, masks = zip(*sus.head_masks(params, model.config))
  result, sgld_seconds = _susceptibilities(
      model, params, pool, probe_tokens, masks, s.sgld,
      _n_beta(s.sgld.n_beta, s.sgld.batch * config.data.seq_len),
      jax.random.PRNGKey(config.seed + 3), jax.random.PRNGKey(config.seed + 4))
  select = mechanisms.stratified_sample(labels, s.per_mechanism, config.seed)
  grads = np.asarray(sus.projected_gradient_features(
      lambda p, row: sus.token_losses(model, p, row[None])[0], params, probe_tokens,
      jax.random.PRNGKey(config.seed + 5), s.grad_dim))
  residual = np.asarray(sus.residual_features(
      lambda p, t: model.apply({"params": p}, t, mutable=["taps"]), params,
      probe_tokens[:, :-1], model.config.num_layers - 1))
  chi = np.asarray(result.chi)                            # (components, N)
  return dict(names=np.asarray(names), chi=chi, labels=labels, select=select,
              ours=_cluster(config, chi[:, select].T), grad=_cluster(config, grads[select]),
              resid=_cluster(config, residual[select]),
              loss_trace=np.asarray(result.trace.loss), phi=np.asarray(result.phi),
              init_losses=np.asarray(result.init_token_losses),
              ablation=sus.head_ablation(model, params, probe_tokens, probe["labels"],
                                         _NUM_MECHANISMS),
              train_seconds=train_seconds, sgld_seconds=sgld_seconds)


def synthetic_summary(config, arrays: dict) -> dict:
  """ARIs of the three feature sets, the induction heads by ablation and by |chi|."""
  names = [str(n) for n in arrays["names"]]
  labels, select = arrays["labels"], arrays["select"]
  truth = labels[select]
  z = sus.standardize(arrays["chi"][:, select].T)
  # Standardized (over probe tokens) mean |chi| of induction tokens, per component.
  response = np.mean(np.abs(z[truth == mechanisms.INDUCTION]), axis=0)
  num_heads = config.model.num_layers * config.model.num_heads
  return dict(
      names=names,
      ari_susceptibility=sus.adjusted_rand_index(truth, arrays["ours"]),
      ari_gradient=sus.adjusted_rand_index(truth, arrays["grad"]),
      ari_residual=sus.adjusted_rand_index(truth, arrays["resid"]),
      clusters_susceptibility=int(arrays["ours"].max() + 1),
      induction_head=names[int(np.argmax(arrays["ablation"][:, mechanisms.INDUCTION]))],
      induction_top_head=names[int(np.argmax(response[:num_heads]))],
      loss_by_mechanism=[float(arrays["init_losses"][labels == i].mean())
                         for i in range(_NUM_MECHANISMS)],
      train_seconds=float(arrays["train_seconds"]),
      sgld_seconds=float(arrays["sgld_seconds"]))


# --------------------------------------------------------------------------- 3. LM

def real_lm(config, workdir: str) -> dict:
  """Susceptibility clusters of the shared LM's validation tokens (cached stage "lm")."""
  fp = trials.config_fingerprint({"seed": config.seed, "lm": lm_lib.fingerprint(config.lm),
                                  "real_lm": config.real_lm, "cluster": config.cluster})
  return trials.cached_stage(workdir, "lm", fp, lambda: _measure_lm(config, workdir))


def _measure_lm(config, workdir: str) -> dict:
  trained = lm_lib.trained_lm(config.lm, workdir, lm_workdir=config.lm_workdir)
  model, params, corpus = trained.model, jax.device_get(trained.params), trained.corpus
  r, seq = config.real_lm, config.real_lm.seq_len
  pool = jnp.asarray(text.window_batch(corpus.train, config.seed, 0, r.pool_size, seq)["tokens"])
  # Windows at evenly spaced offsets over the validation split (English and code).
  starts = np.linspace(0, len(corpus.validation) - seq - 2, r.probe_windows).astype(int)
  probe = np.stack([corpus.validation[s:s + seq + 1] for s in starts]).astype(np.int32)
  names, masks = zip(*sus.block_masks(params, model.config))
  n_beta = _n_beta(r.sgld.n_beta, r.sgld.batch * seq)
  result, seconds = _susceptibilities(
      model, params, pool, jnp.asarray(probe), masks, r.sgld, n_beta,
      jax.random.PRNGKey(config.seed + 6), jax.random.PRNGKey(config.seed + 7),
      components_per_call=2)
  chi = np.asarray(result.chi)
  z = sus.standardize(chi.T)
  labels = _cluster(config, chi.T)
  # Drift of each component's chains, and its mean probe-loss increase phi (nats).
  diag = [sus.diagnose(np.asarray(trace), 0.0, 1.0, r.sgld.burnin) for trace in result.trace.loss]
  return dict(names=list(names), n_beta=n_beta, seconds=seconds,
              num_clusters=int(labels.max() + 1), tokens=int(len(labels)),
              rows=_cluster_rows(probe, z, labels, names, r.examples),
              finite=all(d["finite"] for d in diag), drift_z=[d["max_drift_z"] for d in diag],
              phi=np.asarray(result.phi).mean(axis=(1, 2)).tolist(),
              loss_trace=np.asarray(result.trace.loss).mean(axis=1).tolist(),
              mean_abs_z=np.mean(np.abs(z), axis=0).tolist())


def _cluster_rows(probe: np.ndarray, z: np.ndarray, labels: np.ndarray, names,
                  num_examples: int) -> list[dict]:
  """Per cluster: size, most frequent next bytes, strongest component, and its most
  representative tokens in context (closest to the cluster centre)."""
  seq = probe.shape[1] - 1
  targets = probe[:, 1:].reshape(-1)
  rows = []
  for c, profile in enumerate(sus.cluster_profiles(z, labels)):
    values, counts = np.unique(targets[profile.members], return_counts=True)
    top = values[np.argsort(-counts)][:5]
    examples = []
    for i in profile.members[:num_examples]:
      w, t = divmod(int(i), seq)
      examples.append(f"`{plots.show_bytes(probe[w, max(0, t - 15):t + 1])}"
                      f"[{plots.show_bytes([probe[w, t + 1]])}]`")
    strongest = int(np.argmax(np.abs(profile.centre)))
    rows.append(dict(cluster=c, size=int(len(profile.members)),
                     top_tokens=" ".join(f"`{plots.show_bytes([v])}`" for v in top),
                     strongest=f"{names[strongest]} ({profile.centre[strongest]:+.1f})",
                     examples="<br>".join(examples)))
  return rows


def _lm_name(lm_config) -> str:
  """The `common.lm` preset whose weights `lm_config` trains, or "custom"."""
  fp = lm_lib.fingerprint(lm_config)
  return next((p for p in lm_lib.PRESETS if lm_lib.fingerprint(lm_lib.get_config(p)) == fp),
              "custom")


# ----------------------------------------------------------------------------- run

def calibration_summary(config, cal: dict) -> dict:
  """`cal` plus the estimates at `calibration.step_size` ("chosen") and at the largest
  eps ("largest"), with their relative errors against d / 2 ("rel", "rel_large")."""
  by_eps = {r["step_size"]: r for r in cal["rows"]}
  chosen, largest = by_eps[float(config.calibration.step_size)], by_eps[max(by_eps)]
  true = cal["true_llc"]
  return dict(cal, chosen=chosen, largest=largest, rel=abs(chosen["llc"] - true) / true,
              rel_large=abs(largest["llc"] - true) / true)


def claims(config, cal: dict | None, syn: dict | None, lm: dict | None) -> list[report.Claim]:
  """The report rows of the parts that ran (`cal` from `calibration_summary`)."""
  c, margin, rows = config.calibration, config.synthetic.ari_margin, []
  if cal is not None:
    rows += [report.Claim(
        f"On linear regression (regular, d={c.dim}) the SGLD LLC estimate recovers d/2 "
        f"within {c.tolerance:.0%} at eps={c.step_size:g}, gamma={c.localization:g}, "
        "n_beta=m/ln m", f"lambda = d/2 = {cal['true_llc']:g} (theory)",
        f"{cal['chosen']['llc']:.3f} ± {cal['chosen']['stderr']:.3f} "
        f"(rel. error {cal['rel']:.1%})", cal["rel"], "<=", c.tolerance), report.Claim(
        "The estimate degrades when eps is too large (relative error at the largest "
        "eps exceeds the tolerance)", "qualitative (SGLD discretisation bias)",
        f"eps={cal['largest']['step_size']:g}: {cal['largest']['llc']:.2f} "
        f"(rel. error {cal['rel_large']:.0%})", cal["rel_large"], ">", c.tolerance)]
  if syn is not None:
    rows += [report.Claim(
        "Susceptibility clustering recovers the generating mechanisms of a synthetic "
        f"stream: ARI well above (by > {margin:g}) clustering raw per-token loss "
        "gradients or residual-stream embeddings",
        "qualitative (clusters match mechanisms / SAE features)",
        f"ARI {syn['ari_susceptibility']:.3f} vs gradient {syn['ari_gradient']:.3f}, "
        f"residual {syn['ari_residual']:.3f}", syn["ari_susceptibility"], ">",
        max(syn["ari_gradient"], syn["ari_residual"]) + margin), report.Claim(
        "Induction tokens show the largest susceptibility on the induction head (the "
        "head whose ablation hurts induction tokens most)", "qualitative",
        f"induction head {syn['induction_head']}; largest standardized |chi| of "
        f"induction tokens on {syn['induction_top_head']}",
        syn["induction_head"] == syn["induction_top_head"], "==", True)]
  if lm is not None:
    worst = lm["names"][int(np.argmax(lm["phi"]))]
    rows.append(report.Claim(
        "On the byte-level LM, susceptibility clustering splits validation tokens into "
        "several interpretable clusters (table in lm_clusters.md)", "510 clusters on Pythia-14M",
        f"{lm['num_clusters']} clusters of {lm['tokens']} tokens (see lm_clusters.md); SGLD "
        f"loss rise phi <= {max(lm['phi']):.2f} nats ({worst}), max drift z "
        f"{max(lm['drift_z']):.1f}", lm["num_clusters"], ">=", 3,
        also=((lm["finite"], "==", True),)))
  return rows


def figures(cal: dict | None, syn: dict | None, lm: dict | None) -> dict:
  """The named figures of the parts that ran."""
  out = {}
  if cal is not None:
    out.update({"calibration/true_llc": cal["true_llc"], "calibration/llc": cal["chosen"]["llc"],
                "calibration/llc_stderr": cal["chosen"]["stderr"],
                "calibration/relative_error": cal["rel"],
                "calibration/relative_error_largest_eps": cal["rel_large"]})
    out.update({f"calibration/llc_at_eps={r['step_size']:g}": r["llc"] for r in cal["rows"]})
  if syn is not None:
    out.update({f"synthetic/{k}": syn[v] for k, v in (
        ("ari_susceptibility", "ari_susceptibility"), ("ari_gradient_baseline", "ari_gradient"),
        ("ari_residual_baseline", "ari_residual"), ("clusters", "clusters_susceptibility"),
        ("train_seconds", "train_seconds"), ("sgld_seconds", "sgld_seconds"))})
    out.update({f"synthetic/loss_{name}": loss
                for name, loss in zip(mechanisms.MECHANISMS, syn["loss_by_mechanism"])})
  if lm is not None:
    out.update({"lm/clusters": lm["num_clusters"], "lm/tokens": lm["tokens"],
                "lm/sgld_seconds": lm["seconds"], "lm/n_beta": lm["n_beta"],
                "lm/max_drift_z": max(lm["drift_z"]), "lm/max_phi": max(lm["phi"])})
    out.update({f"lm/phi_{name}": phi for name, phi in zip(lm["names"], lm["phi"])})
  return out


@report.register("susceptibility",
                 title="Spectroscopy of a language model: SGLD susceptibilities and clustering",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Runs the configured parts, writes plots and tables, returns claims and figures."""
  path = lambda name: os.path.join(workdir, name)
  cal = syn = lm = None
  written = []
  if "calibration" in config.parts:
    cal = calibration_summary(config, calibration(config, workdir))
    written.append(plots.calibration(cal, config.calibration, path("calibration.png")))
  if "synthetic" in config.parts:
    arrays = synthetic(config, workdir)
    syn = synthetic_summary(config, arrays)
    written += [plots.synthetic_heatmap(syn, arrays, path("synthetic_heatmap.png")),
                plots.component_traces(syn["names"], arrays["loss_trace"].mean(axis=1),
                                       "SGLD restricted to each component: loss traces",
                                       path("synthetic_traces.png"))]
    plots.synthetic_table(syn, arrays, path("synthetic_clusters.md"))
  if "lm" in config.parts:
    lm = real_lm(config, workdir)
    written.append(plots.component_traces(
        lm["names"], lm["loss_trace"], "Byte-level LM: SGLD restricted to each component",
        path("lm_traces.png")))
    plots.lm_table(lm, _lm_name(config.lm), path("lm_clusters.md"))
  return report.Result(claims=report.claims_table(claims(config, cal, syn, lm)),
                       figures=figures(cal, syn, lm),
                       plots=[os.path.basename(p) for p in written])
