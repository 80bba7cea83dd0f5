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
  in closed form, with no sampling noise, over N in ``gaussian.num_steps`` and d in
  ``gaussian.dims``. Reported: the fitted log-log slope of each error in h (per d)
  and its growth exponent in d at h = 1/gaussian.fixed_steps, next to the bound's.
* Gaussian-mixture targets: W2(law_N, law_ref) <= (E|X^N - X^ref|^2)^{1/2} for chains
  driven by the same Brownian path (synchronous coupling), reference with
  ``mixture.ref_steps`` steps; plus a debiased Sinkhorn estimate against exact
  mixture draws at the coarsest and the reference step.
* A sample check: the diffrax Euler-Maruyama sampler (sampling.sample_sde) matches
  the exact law's mean and covariance.

Cheap (closed forms and short scans), so it recomputes on rerun; nothing trains.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from common import plotting
from common import report
from experiments.configs import dfm_convergence as config_module
from experiments.plots import dfm_convergence as plots
from methods import flow_matching as fm


def _gaussian_target(key, d: int, config) -> fm.Gaussian:
  g = config.gaussian
  return fm.rotated_gaussian(key, d, mean_scale=g.mean_scale, cov_min=g.cov_min,
                             cov_max=g.cov_max)


def gaussian_errors(config) -> dict:
  """{"kl"|"w2": array (len(dims), len(num_steps))} plus the fixed-h errors vs d."""
  g = config.gaussian
  kl = np.zeros((len(g.dims), len(g.num_steps)))
  w2 = np.zeros_like(kl)
  fixed = {"kl": [], "w2": []}

  @jax.jit
  def errors(target, n):
    law = fm.euler_maruyama_law(target, config.sigma, n)
    return fm.gaussian_kl(target, law), fm.gaussian_w2(law, target)

  for i, d in enumerate(g.dims):
    target = _gaussian_target(jax.random.fold_in(jax.random.PRNGKey(config.seed), d), d, config)
    for j, n in enumerate(g.num_steps):
      kl[i, j], w2[i, j] = map(float, errors(target, n))
    for name, v in zip(("kl", "w2"), errors(target, g.fixed_steps)):
      fixed[name].append(float(v))
  return {"kl": kl, "w2": w2, "fixed_kl": np.array(fixed["kl"]),
          "fixed_w2": np.array(fixed["w2"])}


def mixture_errors(config) -> dict:
  """Coupling W2 bounds (len(mixture.dims), len(mixture.steps)) and Sinkhorn checks."""
  mix = config.mixture
  bounds = np.zeros((len(mix.dims), len(mix.steps)))
  sink = {}
  for i, d in enumerate(mix.dims):
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed + 1), d)
    k_t, k_x, k_w, k_s = jax.random.split(key, 4)
    target = fm.sphere_mixture(k_t, d, num_components=mix.components, radius=mix.radius,
                               std=mix.std)
    drift = lambda t, x: fm.mixture_drift(target, t, x, config.sigma)
    x0 = jax.random.normal(k_x, (mix.samples, d))
    dw = fm.brownian_increments(k_w, mix.ref_steps, x0.shape, x0.dtype)
    run = jax.jit(lambda inc: fm.euler_maruyama_with_increments(
        drift, x0, inc, sigma=config.sigma))
    ref = run(dw)
    chains = {}
    for j, n in enumerate(mix.steps):
      chains[n] = run(fm.coarsen_increments(dw, n))
      bounds[i, j] = float(fm.coupling_w2_bound(chains[n], ref))
    m, n0 = mix.sinkhorn_samples, min(mix.steps)
    exact = fm.mixture_sample(k_s, target, m)
    sink[d] = {f"N={n}": float(fm.sinkhorn_divergence(x[:m], exact, mix.sinkhorn_eps))
               for n, x in ((n0, chains[n0]), (mix.ref_steps, ref))}
  return {"bounds": bounds, "sinkhorn": sink}


def sampler_check(config) -> float:
  """Max abs error of the diffrax EM sampler's mean/cov against the exact EM law."""
  d, n = config.check.dim, config.check.steps
  target = _gaussian_target(jax.random.PRNGKey(config.seed + 2), d, config)
  law = fm.euler_maruyama_law(target, config.sigma, n)
  key_x, key_w = jax.random.split(jax.random.PRNGKey(config.seed + 3))
  x0 = jax.random.normal(key_x, (config.check.samples, d))
  drift = lambda t, x: fm.gaussian_drift(target, t, x, config.sigma)
  x1 = jax.jit(lambda x, k: fm.sample_sde(drift, x, k, sigma=config.sigma,
                                          num_steps=n))(x0, key_w)
  emp = fm.empirical_gaussian(x1)
  return float(max(jnp.max(jnp.abs(emp.mean - law.mean)), jnp.max(jnp.abs(emp.cov - law.cov))))


def slopes(gauss: dict, mix: dict, config) -> dict:
  """The fitted exponents: {"kl"|"w2": [slope in h per d], "d_kl"|"d_w2": exponent in d,
  "mixture": {d: slope in h of the coupling bound}}."""
  hs = 1.0 / np.asarray(config.gaussian.num_steps, float)
  dims = np.asarray(config.gaussian.dims, float)
  mh = 1.0 / np.asarray(config.mixture.steps, float)
  out = {name: [plotting.loglog_slope(hs, row) for row in gauss[name]] for name in ("kl", "w2")}
  for name in ("kl", "w2"):
    out[f"d_{name}"] = plotting.loglog_slope(dims, gauss[f"fixed_{name}"])
  out["mixture"] = {d: plotting.loglog_slope(mh, row)
                    for d, row in zip(config.mixture.dims, mix["bounds"])}
  return out


def figures(gauss: dict, mix: dict, check: float, fit: dict, config) -> dict:
  """The named figures of result.json."""
  g = config.gaussian
  out = {}
  for i, d in enumerate(g.dims):
    for name in ("kl", "w2"):
      out[f"gaussian/{name}/slope_in_h/d={d}"] = fit[name][i]
    out[f"gaussian/kl/N={g.num_steps[0]}/d={d}"] = float(gauss["kl"][i, 0])
    out[f"gaussian/kl/N={g.num_steps[-1]}/d={d}"] = float(gauss["kl"][i, -1])
  for name in ("kl", "w2"):
    out[f"gaussian/{name}/d_exponent_at_N={g.fixed_steps}"] = fit[f"d_{name}"]
  for d in config.mixture.dims:
    out[f"mixture/w2_coupling_bound/slope_in_h/d={d}"] = fit["mixture"][d]
    for k, v in mix["sinkhorn"][d].items():
      out[f"mixture/sinkhorn_w2sq_vs_exact/d={d}/{k}"] = v
  out["sampler_check/max_abs_moment_error"] = check
  return out


def claims(fit: dict, config) -> list[report.ClaimCheck]:
  """The claim table: slopes in h at least the bound's, d-exponents at most the bound's."""
  b, n = config.bound, config.gaussian.fixed_steps
  tol, bh = b.tolerance, b.h_exponent
  per_d = lambda xs: ", ".join(f"d={d}: {s:.2f}" for d, s in zip(config.gaussian.dims, xs))
  return report.claims_table([
      report.Claim(
          "KL(target || EM chain law) with the exact drift vanishes at least "
          f"linearly in the step h (log-log slope in h >= {bh:g} - {tol:g}, every d)",
          f"KL bound O(h): slope >= {bh:g}", "slopes " + per_d(fit["kl"]),
          fit["kl"], ">=", bh - tol),
      report.Claim(
          "W2 between the EM chain law and the target vanishes at least linearly "
          f"in h (slope >= {bh:g} - {tol:g}, every d)",
          f"W2 bound O(h): slope >= {bh:g}", "slopes " + per_d(fit["w2"]),
          fit["w2"], ">=", bh - tol),
      report.Claim(
          f"KL grows with dimension no faster than the bound (exponent in d at h = 1/{n})",
          f"bound exponent {b.d_exponent_kl:g} (our reading)", f"{fit['d_kl']:.3f}",
          fit["d_kl"], "<=", b.d_exponent_kl + tol),
      report.Claim(
          f"W2 grows with dimension no faster than the bound (exponent in d at h = 1/{n})",
          f"bound exponent {b.d_exponent_w2:g} (our reading)", f"{fit['d_w2']:.3f}",
          fit["d_w2"], "<=", b.d_exponent_w2 + tol),
      report.Claim(
          "Gaussian-mixture targets (not log-concave): the W2 coupling bound "
          f"vanishes at least linearly in h (slope >= {bh:g} - {tol:g})",
          "W2 bound O(h) under weak log-concavity",
          ", ".join(f"d={d}: {s:.2f}" for d, s in fit["mixture"].items()),
          fit["mixture"], ">=", bh - tol),
  ])


@report.register("dfm_convergence", title="Brownian diffusion flow matching: discretisation error",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Measures the error sweeps, writes the two plots and returns the claims."""
  gauss, mix, check = gaussian_errors(config), mixture_errors(config), sampler_check(config)
  fit = slopes(gauss, mix, config)
  names = ["error_vs_h.png", "error_vs_d.png"]
  plots.error_vs_h(os.path.join(workdir, names[0]), gauss, mix, config)
  plots.error_vs_d(os.path.join(workdir, names[1]), gauss, config)
  return report.Result(claims=claims(fit, config),
                       figures=figures(gauss, mix, check, fit, config), plots=names)
