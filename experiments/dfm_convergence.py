"""Experiment: discretisation error of Brownian diffusion flow matching (Euler-Maruyama).

"Convergence of Brownian diffusion flow matching" (ICML 2026, abstract line 7 of
papers/icml2026-abstracts.txt) bounds the KL and W2 distance between the target and
the law of the Euler-Maruyama discretisation of the DFM SDE

    dX_t = b_t(X_t) dt + sigma dW_t,   X_0 ~ N(0, I),   b_t(x) = E[(X1 - X_t)/(1 - t) | X_t = x],

with errors vanishing (at least) linearly in the step h and improved dimension
dependence. We use the exact (analytic) drift so only the discretisation error
remains:

* Gaussian targets: the chain's law is exactly Gaussian (closed_form.euler_maruyama_law),
  so KL(target || law) (the direction a Girsanov bound controls) and W2 are computed
  in closed form, with no sampling noise, over N in ``num_steps`` and d in ``dims``. Reported: the fitted log-log slope of each error in
  h (per d) and its growth exponent in d at h = 1/fixed_steps, next to the bound's.
* Gaussian-mixture targets: W2(law_N, law_ref) <= (E|X^N - X^ref|^2)^{1/2} for chains
  driven by the same Brownian path (synchronous coupling), reference with
  ``mixture_ref_steps`` steps; plus a debiased Sinkhorn estimate against exact
  mixture draws at the coarsest and the reference step.
* A sample check: the diffrax Euler-Maruyama sampler (sampling.sample_sde) matches
  the exact law's mean and covariance.

Cheap (closed forms and short scans), so it recomputes on rerun; nothing trains.
"""

from __future__ import annotations

import os
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from common import plotting
from common import report
from common.plotting import plt
from experiments.configs import dfm_convergence as config_module
from methods import flow_matching as fm
from methods.flow_matching import closed_form
from methods.flow_matching import divergences
from methods.flow_matching import sampling


def gaussian_target(key, d: int, config) -> fm.Gaussian:
  """N(m, Q diag(s) Q^T), s log-spaced in [cov_min, cov_max], Q a random rotation."""
  s = jnp.exp(jnp.linspace(jnp.log(config.cov_min), jnp.log(config.cov_max), d))
  q, r = jnp.linalg.qr(jax.random.normal(key, (d, d)))
  q = q * jnp.sign(jnp.diag(r))[None, :]
  return fm.Gaussian(config.mean_scale * jnp.ones((d,)), (q * s[None, :]) @ q.T)


def mixture_target(key, d: int, config) -> fm.GaussianMixture:
  k = config.mixture_components
  dirs = jax.random.normal(key, (k, d))
  means = config.mixture_radius * dirs / jnp.linalg.norm(dirs, axis=1, keepdims=True)
  w = jnp.arange(k, 0, -1, dtype=means.dtype)
  covs = jnp.broadcast_to(config.mixture_std ** 2 * jnp.eye(d), (k, d, d))
  return fm.GaussianMixture(w / w.sum(), means, covs)


def gaussian_errors(config) -> dict:
  """{"kl"|"w2": array (len(dims), len(num_steps))} plus the fixed-h errors vs d."""
  kl = np.zeros((len(config.dims), len(config.num_steps)))
  w2 = np.zeros_like(kl)
  fixed = {"kl": [], "w2": []}

  @jax.jit
  def errors(target, n):
    law = closed_form.euler_maruyama_law(target, config.sigma, n)
    return divergences.gaussian_kl(target, law), divergences.gaussian_w2(law, target)

  for i, d in enumerate(config.dims):
    target = gaussian_target(jax.random.fold_in(jax.random.PRNGKey(config.seed), d), d, config)
    for j, n in enumerate(config.num_steps):
      kl[i, j], w2[i, j] = map(float, errors(target, n))
    for name, v in zip(("kl", "w2"), errors(target, config.fixed_steps)):
      fixed[name].append(float(v))
  return {"kl": kl, "w2": w2, "fixed_kl": np.array(fixed["kl"]),
          "fixed_w2": np.array(fixed["w2"])}


def mixture_errors(config) -> dict:
  """Coupling W2 bounds (len(mixture_dims), len(mixture_steps)) and Sinkhorn checks."""
  bounds = np.zeros((len(config.mixture_dims), len(config.mixture_steps)))
  sink = {}
  for i, d in enumerate(config.mixture_dims):
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed + 1), d)
    k_t, k_x, k_w, k_s = jax.random.split(key, 4)
    target = mixture_target(k_t, d, config)
    drift = lambda t, x: closed_form.mixture_drift(target, t, x, config.sigma)
    x0 = jax.random.normal(k_x, (config.mixture_samples, d))
    dw = sampling.brownian_increments(k_w, config.mixture_ref_steps, x0.shape, x0.dtype)
    run = jax.jit(lambda inc: sampling.euler_maruyama_with_increments(
        drift, x0, inc, sigma=config.sigma))
    ref = run(dw)
    chains = {}
    for j, n in enumerate(config.mixture_steps):
      chains[n] = run(sampling.coarsen_increments(dw, n))
      bounds[i, j] = float(jnp.sqrt(jnp.mean(jnp.sum((chains[n] - ref) ** 2, axis=1))))
    m = config.sinkhorn_samples
    exact = closed_form.mixture_sample(k_s, target, m)
    n0 = min(config.mixture_steps)
    sink[d] = {
        f"N={n0}": float(divergences.sinkhorn_divergence(chains[n0][:m], exact,
                                                         config.sinkhorn_eps)),
        f"N={config.mixture_ref_steps}": float(divergences.sinkhorn_divergence(
            ref[:m], exact, config.sinkhorn_eps)),
    }
  return {"bounds": bounds, "sinkhorn": sink}


def sampler_check(config) -> float:
  """Max abs error of the diffrax EM sampler's mean/cov against the exact EM law."""
  d, n = config.check_dim, config.check_steps
  target = gaussian_target(jax.random.PRNGKey(config.seed + 2), d, config)
  law = closed_form.euler_maruyama_law(target, config.sigma, n)
  key_x, key_w = jax.random.split(jax.random.PRNGKey(config.seed + 3))
  x0 = jax.random.normal(key_x, (config.check_samples, d))
  drift = lambda t, x: closed_form.gaussian_drift(target, t, x, config.sigma)
  x1 = jax.jit(lambda x, k: sampling.sample_sde(drift, x, k, sigma=config.sigma,
                                                num_steps=n))(x0, key_w)
  emp = divergences.empirical_gaussian(x1)
  return float(max(jnp.max(jnp.abs(emp.mean - law.mean)), jnp.max(jnp.abs(emp.cov - law.cov))))


def summarize(gauss: dict, mix: dict, check: float, config) -> tuple[list, dict]:
  hs = 1.0 / np.asarray(config.num_steps, float)
  dims = np.asarray(config.dims, float)
  figures = {}
  slopes = {"kl": [], "w2": []}
  for i, d in enumerate(config.dims):
    for name in ("kl", "w2"):
      s = plotting.loglog_slope(hs, gauss[name][i])
      slopes[name].append(s)
      figures[f"gaussian/{name}/slope_in_h/d={d}"] = s
    figures[f"gaussian/kl/N={config.num_steps[0]}/d={d}"] = float(gauss["kl"][i, 0])
    figures[f"gaussian/kl/N={config.num_steps[-1]}/d={d}"] = float(gauss["kl"][i, -1])
  d_exp = {name: plotting.loglog_slope(dims, gauss[f"fixed_{name}"]) for name in ("kl", "w2")}
  for name in ("kl", "w2"):
    figures[f"gaussian/{name}/d_exponent_at_N={config.fixed_steps}"] = d_exp[name]
  mh = 1.0 / np.asarray(config.mixture_steps, float)
  mix_slopes = {}
  for i, d in enumerate(config.mixture_dims):
    mix_slopes[d] = plotting.loglog_slope(mh, mix["bounds"][i])
    figures[f"mixture/w2_coupling_bound/slope_in_h/d={d}"] = mix_slopes[d]
    for k, v in mix["sinkhorn"][d].items():
      figures[f"mixture/sinkhorn_w2sq_vs_exact/d={d}/{k}"] = v
  figures["sampler_check/max_abs_moment_error"] = check
  tol, bh = config.exponent_tolerance, config.bound_h_exponent
  fmt = lambda xs: ", ".join(f"d={d}: {s:.2f}" for d, s in zip(config.dims, xs))
  claims = [
      report.ClaimCheck(
          claim="KL(target || EM chain law) with the exact drift vanishes at least "
                f"linearly in the step h (log-log slope in h >= {bh:g} - {tol:g}, every d)",
          paper_figure=f"KL bound O(h): slope >= {bh:g}",
          our_figure="slopes " + fmt(slopes["kl"]),
          reproduced=bool(min(slopes["kl"]) >= bh - tol)),
      report.ClaimCheck(
          claim="W2 between the EM chain law and the target vanishes at least linearly "
                f"in h (slope >= {bh:g} - {tol:g}, every d)",
          paper_figure=f"W2 bound O(h): slope >= {bh:g}",
          our_figure="slopes " + fmt(slopes["w2"]),
          reproduced=bool(min(slopes["w2"]) >= bh - tol)),
      report.ClaimCheck(
          claim="KL grows with dimension no faster than the bound (exponent in d at "
                f"h = 1/{config.fixed_steps})",
          paper_figure=f"bound exponent {config.bound_d_exponent_kl:g} (our reading)",
          our_figure=f"{d_exp['kl']:.3f}",
          reproduced=bool(d_exp["kl"] <= config.bound_d_exponent_kl + tol)),
      report.ClaimCheck(
          claim="W2 grows with dimension no faster than the bound (exponent in d at "
                f"h = 1/{config.fixed_steps})",
          paper_figure=f"bound exponent {config.bound_d_exponent_w2:g} (our reading)",
          our_figure=f"{d_exp['w2']:.3f}",
          reproduced=bool(d_exp["w2"] <= config.bound_d_exponent_w2 + tol)),
      report.ClaimCheck(
          claim="Gaussian-mixture targets (not log-concave): the W2 coupling bound "
                f"vanishes at least linearly in h (slope >= {bh:g} - {tol:g})",
          paper_figure="W2 bound O(h) under weak log-concavity",
          our_figure=", ".join(f"d={d}: {s:.2f}" for d, s in mix_slopes.items()),
          reproduced=bool(min(mix_slopes.values()) >= bh - tol)),
  ]
  return claims, figures


def plot(gauss, mix, config, path_h, path_d):
  hs = 1.0 / np.asarray(config.num_steps, float)
  fig, axes = plt.subplots(1, 3, figsize=(14, 4))
  for ax, name, label in ((axes[0], "kl", "KL(target || EM law)"),
                          (axes[1], "w2", "W2(EM law, target)")):
    for i, d in enumerate(config.dims):
      s = plotting.loglog_slope(hs, gauss[name][i])
      ax.loglog(hs, gauss[name][i], "o-", ms=3, label=f"d={d} (slope {s:.2f})")
    ax.set_xlabel("step h = 1/N")
    ax.set_ylabel(label)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  mh = 1.0 / np.asarray(config.mixture_steps, float)
  for i, d in enumerate(config.mixture_dims):
    s = plotting.loglog_slope(mh, mix["bounds"][i])
    axes[2].loglog(mh, mix["bounds"][i], "s-", ms=3, label=f"mixture d={d} (slope {s:.2f})")
  axes[2].set_xlabel("step h = 1/N")
  axes[2].set_ylabel("W2 coupling bound vs fine chain")
  axes[2].grid(True, which="both", alpha=0.3)
  axes[2].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path_h, dpi=110)
  plt.close(fig)
  dims = np.asarray(config.dims, float)
  fig, ax = plt.subplots(figsize=(5, 4))
  for name in ("kl", "w2"):
    v = gauss[f"fixed_{name}"]
    ax.loglog(dims, v, "o-", label=f"{name} (exponent {plotting.loglog_slope(dims, v):.2f})")
  ax.set_xlabel("dimension d")
  ax.set_ylabel(f"error at h = 1/{config.fixed_steps}")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path_d, dpi=110)
  plt.close(fig)


@report.register("dfm_convergence", title="Brownian diffusion flow matching: discretisation error")
def run(config, workdir: str) -> report.Result:
  """Measures the error sweeps, writes the two plots and returns the claims."""
  config_module.validate(config)
  start = time.time()
  os.makedirs(workdir, exist_ok=True)
  with jax.enable_x64(bool(config.x64)):
    gauss = gaussian_errors(config)
    mix = mixture_errors(config)
    check = sampler_check(config)
  claims, figures = summarize(gauss, mix, check, config)
  plots = ["error_vs_h.png", "error_vs_d.png"]
  plot(gauss, mix, config, os.path.join(workdir, plots[0]), os.path.join(workdir, plots[1]))
  logging.info("dfm_convergence figures: %s", figures)
  return report.Result(claims=claims, figures=figures, plots=plots,
                       seconds=time.time() - start)
