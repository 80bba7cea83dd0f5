"""Acquisition for LILO: EUBO to pick the pairs shown, qLogNEI / qLogEI to pick points.

EUBO (expected utility of the best option; Lin et al. 2022) of a pair under a
Gaussian posterior (f_a, f_b) ~ N(mu, Sigma) is E[max(f_a, f_b)], in closed form

    EUBO = mu_b + s (phi(u) + u Phi(u)) = mu_a Phi(u) + mu_b Phi(-u) + s phi(u),
    u = (mu_a - mu_b) / s,  s = sqrt(Var_a + Var_b - 2 Cov_ab)  (clamped >= 1e-4),

as BoTorch's ``AnalyticExpectedUtilityOfBestOption``.

qLogNEI (Ament et al. 2023) of a batch X (q, d) given evaluated points X_b (b, d),
over N joint posterior samples xi_s of f at [X_b, X]:

    qLogNEI(X) = log (1/N) sum_s exp( fatmax_j^{tau_max}
                   log fatplus_{tau_relu}( xi_s(x_j) - max_b xi_s(x_b) ) )

with BoTorch's smooth pieces (``botorch/utils/safe_math.py``):

    fatplus_tau(z) = tau (softplus(z / tau) + 0.1 / (1 + (z / tau)^2))
    fatmax_tau(x)  = M + tau log sum_j pareto((M - x_j) / tau),  M = max_j x_j,
    pareto(y)      = (beta0 / (beta0 + beta1 y + y^2))^(alpha/2),
                     beta1 = alpha, beta0 = alpha^2 / 2   (alpha = 2)

and log-mean-exp over samples. qLogEI is the same with a fixed best_f in place of
max_b xi_s(x_b). As tau -> 0 both tend to log E[max(max_j xi(x_j) - best, 0)].

The samples are xi_s = mu + L eps_s, L L^T = Sigma (+ a small relative jitter), with
standard normal base samples eps drawn once from ``key``: a fixed key gives common
random numbers across the optimiser's steps, as BoTorch's QMC sampler fixes its base
samples (ours are pseudo-random normals, not scrambled Sobol points).

Examples assume ``import jax, jax.numpy as jnp`` and
``from methods.lilo import acquisition, gp``.

References:
  Z. J. Lin, R. Astudillo, P. I. Frazier, E. Bakshy. Preference exploration for
  efficient Bayesian optimization with multiple outcomes. AISTATS 2022.
  S. Ament, S. Daulton, D. Eriksson, M. Balandat, E. Bakshy. Unexpected improvements
  to expected improvement for Bayesian optimization. NeurIPS 2023.
  BoTorch ``acquisition/preference.py``, ``acquisition/logei.py``,
  ``utils/safe_math.py`` (forms only; no code is copied).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
from jax import lax
import jax.numpy as jnp
from jax.scipy import stats
import numpy as np
import optax

from common import checks

Array = jax.Array
PosteriorFn = Callable[[Array], tuple[Array, Array]]

EUBO_MIN_STD = 1e-4
FATPLUS_ALPHA = 0.1
FATMAX_ALPHA = 2.0
SAMPLE_JITTER = 1e-8


def eubo_pair(mean: Array, cov: Array) -> Array:
  """E[max(f_a, f_b)] for (f_a, f_b) ~ N(mean, cov), in closed form.

      u = (mu_a - mu_b) / s,  s = sqrt(max(Var_a + Var_b - 2 Cov_ab, 1e-8)),
      EUBO = mu_b + s (phi(u) + u Phi(u))

  Args:
    mean: (2,) posterior means of the two options.
    cov: (2, 2) their posterior covariance.

  Returns:
    The scalar EUBO.

  Example:
    >>> acquisition.eubo_pair(jnp.zeros(2), jnp.eye(2))   # sqrt(2) phi(0) = 1/sqrt(pi)
  """
  delta = mean[0] - mean[1]
  var = cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]
  s = jnp.sqrt(jnp.maximum(var, EUBO_MIN_STD ** 2))
  u = delta / s
  return mean[1] + s * (stats.norm.pdf(u) + u * stats.norm.cdf(u))


@functools.partial(jax.jit, static_argnames=("k",))
def _top_eubo_pairs(mean: Array, cov: Array, k: int) -> Array:
  i, j = np.triu_indices(mean.shape[0], k=1)
  means = jnp.stack([mean[i], mean[j]], axis=1)
  covs = jnp.stack([jnp.stack([cov[i, i], cov[i, j]], -1),
                    jnp.stack([cov[j, i], cov[j, j]], -1)], axis=1)
  values = jax.vmap(eubo_pair)(means, covs)
  _, top = lax.top_k(values, k)
  return jnp.stack([jnp.asarray(i)[top], jnp.asarray(j)[top]], axis=1)


def top_eubo_pairs(mean: Array, cov: Array, k: int) -> Array:
  """The k pairs (i < j) with the largest EUBO, best first (all pairs, vectorised).

      argtop-k_{i<j} EUBO(mean[[i, j]], cov[[i, j]][:, [i, j]])

  Args:
    mean: (n,) posterior mean at n candidate points (n >= 2).
    cov: (n, n) posterior covariance.
    k: number of pairs (>= 1); clipped to n (n - 1) / 2, the number of pairs.

  Returns:
    (min(k, n (n - 1) / 2), 2) int array of index pairs, i < j in each row.

  Example:
    >>> acquisition.top_eubo_pairs(jnp.array([0.0, 1.0, 2.0]), jnp.eye(3), 1)
    ... # [[1, 2]]
  """
  checks.positive_int("k", k)
  n = np.shape(mean)[0] if np.ndim(mean) == 1 else -1
  if n < 2 or np.shape(cov) != (n, n):
    raise ValueError(f"top_eubo_pairs needs mean (n,) with n >= 2 and cov (n, n), got "
                     f"{np.shape(mean)} and {np.shape(cov)}")
  return _top_eubo_pairs(jnp.asarray(mean), jnp.asarray(cov), min(int(k), n * (n - 1) // 2))


def log_fatplus(x: Array, tau: float) -> Array:
  """log fatplus_tau(x) = log(tau (softplus(x / tau) + 0.1 / (1 + (x / tau)^2))).

  A smooth, positive, monotone and convex upper bound of max(x, 0) whose log decays
  only polynomially (the Cauchy term) for x << 0, so gradients never vanish.

  Example:
    >>> acquisition.log_fatplus(jnp.array([-1.0, 0.0, 1.0]), 1e-2)
  """
  z = x / tau
  return math.log(tau) + jnp.log(jax.nn.softplus(z) + FATPLUS_ALPHA / (1.0 + z * z))


def fatmax(x: Array, axis: int, tau: float, alpha: float = FATMAX_ALPHA) -> Array:
  """Pareto-tailed smooth maximum over ``axis``.

      fatmax(x) = M + tau log sum_j pareto((M - x_j) / tau),  M = max_j x_j,
      pareto(y) = (beta0 / (beta0 + beta1 y + y^2))^(alpha / 2),
      beta1 = alpha, beta0 = alpha^2 / 2

  (pareto(0) = 1 with first and second derivatives -1 and 1 at 0, decaying as
  y^-alpha), so fatmax >= max and tends to it as tau -> 0.

  Example:
    >>> acquisition.fatmax(jnp.array([0.0, 1.0]), axis=0, tau=1e-2)   # ~1.0
  """
  a = alpha / 2.0
  beta1 = 2.0 * a
  beta0 = a * beta1
  M = jnp.max(x, axis=axis, keepdims=True)
  y = (M - x) / tau
  pareto = (beta0 / (beta0 + beta1 * y + y * y)) ** a
  return jnp.squeeze(M, axis) + tau * jnp.log(jnp.sum(pareto, axis=axis))


def logmeanexp(x: Array, axis: int = 0) -> Array:
  """log (1/N) sum exp(x) over ``axis``."""
  return jax.nn.logsumexp(x, axis=axis) - math.log(x.shape[axis])


def joint_samples(posterior_fn: PosteriorFn, Z: Array, key: Array,
                  num_samples: int) -> Array:
  """(num_samples, k) joint posterior samples at Z (k, d): mu + eps L^T.

  L is the Cholesky factor of Sigma + (1e-8 mean(diag Sigma) + 1e-12) I; eps are
  standard normals drawn from ``key`` (the same key gives the same base samples).
  """
  mean, cov = posterior_fn(Z)
  k = mean.shape[0]
  cov = 0.5 * (cov + cov.T)
  jitter = SAMPLE_JITTER * jnp.mean(jnp.diag(cov)) + 1e-12
  L = jnp.linalg.cholesky(cov + jitter * jnp.eye(k, dtype=cov.dtype))
  eps = jax.random.normal(key, (num_samples, k), dtype=mean.dtype)
  return lax.optimization_barrier(mean + eps @ L.T)


def prune_baseline(posterior_fn: PosteriorFn, X_baseline, key: Array,
                   num_samples: int = 2048) -> Array:
  """The baseline points that are the sampled maximum in at least one joint sample.

      keep = {b : exists s, b = argmax_b' xi_s(x_b')},   xi_s ~ posterior at X_baseline,

  most frequent first (BoTorch's ``prune_inferior_points``, which qLogNEI applies by
  default). A point never sampled as the maximum changes no sample's max, so qLogNEI
  over the kept points equals qLogNEI over all of them up to the sampling of the
  maximum, at a fraction of the cost (the joint posterior is over b + q points).
  Call it once per acquisition, outside ``optimize_acqf``: the kept count depends on
  the values, so this function is not traceable.

  Args:
    posterior_fn: Z (k, d) -> (mean (k,), cov (k, k)).
    X_baseline: (b, d) evaluated points.
    key: PRNG key of the samples.
    num_samples: number of joint samples.

  Returns:
    (b', d) kept points, 1 <= b' <= b.

  Example:
    >>> post = lambda Z: gp.pairwise_posterior(model, Z)
    >>> Xb = acquisition.prune_baseline(post, model.X, jax.random.PRNGKey(0))
  """
  checks.positive_int("num_samples", num_samples)
  X_baseline = jnp.asarray(X_baseline)
  xi = joint_samples(posterior_fn, X_baseline, key, num_samples)
  counts = np.bincount(np.asarray(jnp.argmax(xi, axis=1)), minlength=X_baseline.shape[0])
  order = np.argsort(-counts, kind="stable")
  return X_baseline[order[counts[order] > 0]]


def q_log_nei(posterior_fn: PosteriorFn, X_baseline: Array, X: Array, key: Array,
              num_samples: int = 256, tau_relu: float = 1e-6,
              tau_max: float = 1e-2) -> Array:
  """q log noisy expected improvement of the batch X over the baseline.

      qLogNEI(X) = logmeanexp_s fatmax_j^{tau_max}
                     log fatplus_{tau_relu}(xi_s(x_j) - max_b xi_s(x_b))

  xi_s: joint samples at [X_baseline; X] (see the module docstring). The baseline is
  used as given; pass it through ``prune_baseline`` first (as BoTorch does by
  default) to drop points that are never the sampled maximum, which is much cheaper
  when the baseline is large.

  Args:
    posterior_fn: Z (k, d) -> (mean (k,), cov (k, k)) of the utility GP, e.g.
      ``lambda Z: gp.pairwise_posterior(model, Z)``.
    X_baseline: (b, d) evaluated points.
    X: (q, d) candidate batch.
    key: PRNG key of the base samples (fix it across an optimisation).
    num_samples: N, the number of joint samples.
    tau_relu: temperature of fatplus.
    tau_max: temperature of fatmax over the batch.

  Returns:
    The scalar qLogNEI (differentiable in X).

  Example:
    >>> post = lambda Z: gp.pairwise_posterior(model, Z)
    >>> acquisition.q_log_nei(post, model.X, jnp.full((2, 2), 0.3), jax.random.PRNGKey(0))
  """
  b = np.shape(X_baseline)[0]
  Z = jnp.concatenate([jnp.asarray(X_baseline, jnp.asarray(X).dtype), X], axis=0)
  xi = joint_samples(posterior_fn, Z, key, num_samples)
  best = jnp.max(xi[:, :b], axis=1, keepdims=True)
  log_improvement = log_fatplus(xi[:, b:] - best, tau_relu)
  return logmeanexp(fatmax(log_improvement, axis=1, tau=tau_max), axis=0)


def q_log_ei(posterior_fn: PosteriorFn, best_f, X: Array, key: Array,
             num_samples: int = 256, tau_relu: float = 1e-6,
             tau_max: float = 1e-2) -> Array:
  """q log expected improvement over a fixed best value.

      qLogEI(X) = logmeanexp_s fatmax_j^{tau_max} log fatplus_{tau_relu}(xi_s(x_j) - best_f)

  Args:
    posterior_fn: Z (k, d) -> (mean (k,), cov (k, k)).
    best_f: the incumbent value (e.g. the best observed target).
    X: (q, d) candidate batch.
    key: PRNG key of the base samples.
    num_samples: N, the number of joint samples.
    tau_relu: temperature of fatplus.
    tau_max: temperature of fatmax over the batch.

  Returns:
    The scalar qLogEI.

  Example:
    >>> post = lambda Z: gp.gp_posterior(model, Z)
    >>> acquisition.q_log_ei(post, 1.0, jnp.full((1, 1), 0.5), jax.random.PRNGKey(0))
  """
  xi = joint_samples(posterior_fn, X, key, num_samples)
  log_improvement = log_fatplus(xi - best_f, tau_relu)
  return logmeanexp(fatmax(log_improvement, axis=1, tau=tau_max), axis=0)


def optimize_acqf(acq: Callable[..., Array], q: int, d: int, key: Array, *,
                  args: Any = None, raw_samples: int = 512, restarts: int = 10,
                  steps: int = 100, lr: float = 0.05) -> Array:
  """Maximises ``acq`` over batches X in [0, 1]^{q x d}: random search, then Adam.

    1. evaluate ``acq`` on ``raw_samples`` uniform random batches (vmapped);
    2. start ``restarts`` runs from the best of them;
    3. run projected Adam, X <- clip(X + Adam(grad acq), 0, 1), with the step size
       decayed from ``lr`` to lr / 100 (cosine), all restarts at once (vmapped);
    4. return the best batch seen on any run (starts included).

  BoTorch instead picks restarts by Boltzmann sampling of scrambled Sobol raw samples
  and polishes them with L-BFGS-B; the projection keeps boundary optima reachable as
  its box bounds do. The whole search is one ``jit``, cached on ``acq``: pass a
  module-level ``acq(X, args)`` and the changing data (a fitted GP, the baseline, the
  sample key) as the pytree ``args``, and a BO loop compiles once per shape. With
  ``args=None``, ``acq(X)`` may be a closure, compiled afresh on every call.

  Args:
    acq: X (q, d) [, args] -> scalar, differentiable (e.g. built on ``q_log_nei``).
    q: batch size.
    d: input dimension.
    key: PRNG key of the raw samples.
    args: the pytree passed to ``acq`` (None: ``acq`` takes X only).
    raw_samples: number of random starting batches.
    restarts: number of Adam runs (<= raw_samples).
    steps: Adam steps per run.
    lr: peak Adam step size (in units of the unit cube).

  Returns:
    The best (q, d) batch found, in [0, 1]^d.

  Example:
    >>> acquisition.optimize_acqf(lambda X: -jnp.sum((X - 0.3) ** 2), 1, 2,
    ...                           jax.random.PRNGKey(0))   # ~[[0.3, 0.3]]
  """
  for name, value in (("q", q), ("d", d), ("raw_samples", raw_samples),
                      ("restarts", restarts), ("steps", steps)):
    checks.positive_int(name, value)
  checks.scalar("lr", lr)
  if restarts > raw_samples:
    raise ValueError(f"restarts ({restarts}) must be <= raw_samples ({raw_samples})")
  if args is None:
    return _search(lambda X, _: acq(X), None, key, q=q, d=d, raw_samples=raw_samples,
                   restarts=restarts, steps=steps, lr=float(lr))
  return _search(acq, args, key, q=q, d=d, raw_samples=raw_samples, restarts=restarts,
                 steps=steps, lr=float(lr))


@functools.partial(jax.jit, static_argnames=("acq", "q", "d", "raw_samples", "restarts",
                                             "steps", "lr"))
def _search(acq, args, key, *, q, d, raw_samples, restarts, steps, lr):
  dtype = jnp.result_type(float)
  opt = optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=0.01))
  value_of = lambda x: acq(x, args)

  def run_one(x0):
    def step(carry, _):
      x, state, best_x, best_v = carry
      value, grad = jax.value_and_grad(value_of)(x)
      better = jnp.isfinite(value) & (value > best_v)
      best_x, best_v = jnp.where(better, x, best_x), jnp.where(better, value, best_v)
      updates, state = opt.update(jax.tree.map(jnp.negative, grad), state, x)
      x = jnp.clip(optax.apply_updates(x, updates), 0.0, 1.0)
      return (x, state, best_x, best_v), None

    init = (x0, opt.init(x0), x0, jnp.asarray(-jnp.inf, dtype))
    (x, _, best_x, best_v), _ = lax.scan(step, init, None, length=steps)
    value = value_of(x)
    better = jnp.isfinite(value) & (value > best_v)
    return jnp.where(better, x, best_x), jnp.where(better, value, best_v)

  raw = jax.random.uniform(key, (raw_samples, q, d), dtype=dtype)
  values = jax.vmap(value_of)(raw)
  values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
  _, top = lax.top_k(values, restarts)
  xs, vs = jax.vmap(run_one)(raw[top])
  best = jnp.argmax(vs)
  return jnp.where(vs[best] > values[top[0]], xs[best], raw[top[0]])
