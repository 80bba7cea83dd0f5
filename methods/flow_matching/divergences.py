"""Distances between laws: closed forms for Gaussians and sample-based OT estimates.

* KL(N(m1, S1) || N(m2, S2)) = 1/2 [tr(S2^{-1} S1) + (m2 - m1)^T S2^{-1} (m2 - m1)
  - d + log det S2 - log det S1].
* W2^2(N(m1, S1), N(m2, S2)) = |m1 - m2|^2 + tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2}).
* Empirical W2 between two equal-size samples by an exact assignment (host-side,
  scipy's Hungarian solver), and the debiased Sinkhorn divergence
  S_eps(a, b) = OT_eps(a, b) - (OT_eps(a, a) + OT_eps(b, b)) / 2 with squared
  Euclidean cost (log-domain Sinkhorn, jit-able), an estimate of W2^2 for small eps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from methods.flow_matching.closed_form import Gaussian

Array = jax.Array


def sqrtm_psd(a: Array) -> Array:
  """Symmetric PSD square root via eigh."""
  w, v = jnp.linalg.eigh(0.5 * (a + a.T))
  return (v * jnp.sqrt(jnp.maximum(w, 0.0))) @ v.T


def gaussian_kl(p: Gaussian, q: Gaussian) -> Array:
  """KL(p || q) for multivariate normals."""
  d = p.mean.shape[0]
  lq = jnp.linalg.cholesky(q.cov)
  lp = jnp.linalg.cholesky(p.cov)
  sol = jax.scipy.linalg.cho_solve((lq, True), p.cov)
  diff = q.mean - p.mean
  maha = diff @ jax.scipy.linalg.cho_solve((lq, True), diff)
  logdet = 2 * (jnp.sum(jnp.log(jnp.diag(lq))) - jnp.sum(jnp.log(jnp.diag(lp))))
  return 0.5 * (jnp.trace(sol) + maha - d + logdet)


def gaussian_w2(p: Gaussian, q: Gaussian) -> Array:
  """2-Wasserstein distance between multivariate normals (not squared)."""
  rq = sqrtm_psd(q.cov)
  cross = sqrtm_psd(rq @ p.cov @ rq)
  w2sq = jnp.sum((p.mean - q.mean) ** 2) + jnp.trace(p.cov + q.cov - 2 * cross)
  return jnp.sqrt(jnp.maximum(w2sq, 0.0))


def empirical_gaussian(x: Array) -> Gaussian:
  """Sample mean and (unbiased) covariance of rows of x (n, d)."""
  mean = jnp.mean(x, axis=0)
  xc = x - mean
  return Gaussian(mean, xc.T @ xc / (x.shape[0] - 1))


def squared_distances(x: Array, y: Array) -> Array:
  """|x_i - y_j|^2, (n, m)."""
  return jnp.maximum(jnp.sum(x * x, 1)[:, None] + jnp.sum(y * y, 1)[None, :]
                     - 2 * x @ y.T, 0.0)


def exact_w2(x, y) -> float:
  """Empirical W2 between two equal-size samples (uniform weights): exact assignment."""
  from scipy.optimize import linear_sum_assignment  # host-side, not jit-able
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape:
    raise ValueError(f"exact_w2 needs equal-size samples, got {x.shape} and {y.shape}")
  cost = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
  rows, cols = linear_sum_assignment(cost)
  return float(np.sqrt(cost[rows, cols].mean()))


def sinkhorn_plan(cost: Array, eps: float, num_iters: int = 200) -> tuple[Array, Array]:
  """Entropic OT between uniform weights: (plan (n, m), transport cost <plan, cost>).

  Log-domain iterations f <- -eps LSE((g - C)/eps) + eps log(1/n), likewise g.
  """
  n, m = cost.shape
  log_a, log_b = -jnp.log(n) * jnp.ones(n), -jnp.log(m) * jnp.ones(m)
  log_a, log_b = log_a.astype(cost.dtype), log_b.astype(cost.dtype)

  def body(carry, _):
    f, g = carry
    f = -eps * jax.nn.logsumexp((g[None, :] - cost) / eps + log_b[None, :], axis=1)
    g = -eps * jax.nn.logsumexp((f[:, None] - cost) / eps + log_a[:, None], axis=0)
    return (f, g), None

  (f, g), _ = jax.lax.scan(body, (jnp.zeros(n, cost.dtype), jnp.zeros(m, cost.dtype)),
                           None, length=num_iters)
  log_plan = (f[:, None] + g[None, :] - cost) / eps + log_a[:, None] + log_b[None, :]
  plan = jnp.exp(log_plan)
  return plan, jnp.sum(plan * cost)


def sinkhorn_divergence(x: Array, y: Array, eps: float = 0.01,
                        num_iters: int = 200) -> Array:
  """Debiased Sinkhorn divergence with squared Euclidean cost (estimates W2^2)."""
  ot = lambda a, b: sinkhorn_plan(squared_distances(a, b), eps, num_iters)[1]
  return ot(x, y) - 0.5 * (ot(x, x) + ot(y, y))
