"""Distances between laws: closed forms for Gaussians and sample-based OT estimates.

* KL(N(m1, S1) || N(m2, S2)) = 1/2 [tr(S2^{-1} S1) + (m2 - m1)^T S2^{-1} (m2 - m1)
  - d + log det S2 - log det S1].
* W2^2(N(m1, S1), N(m2, S2)) = |m1 - m2|^2 + tr(S1 + S2 - 2 (S2^{1/2} S1 S2^{1/2})^{1/2}).
* Empirical W2 between two equal-size samples by an exact assignment (host-side,
  scipy's Hungarian solver), and the debiased Sinkhorn divergence
  S_eps(a, b) = OT_eps(a, b) - (OT_eps(a, a) + OT_eps(b, b)) / 2 with squared
  Euclidean cost (log-domain Sinkhorn, jit-able), an estimate of W2^2 for small eps.
* The coupling bound W2(law X, law Y) <= (E|X - Y|^2)^{1/2} for paired draws.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from methods.flow_matching.closed_form import Gaussian


def _check_pair(p: Gaussian, q: Gaussian) -> None:
  for name, g in (("p", p), ("q", q)):
    d = jnp.shape(g.mean)
    if len(d) != 1 or jnp.shape(g.cov) != d + d:
      raise ValueError(f"{name} must have mean (d,) and cov (d, d), got {d} and "
                       f"{jnp.shape(g.cov)}")
  if jnp.shape(p.mean) != jnp.shape(q.mean):
    raise ValueError(f"p and q must have the same dimension, got {jnp.shape(p.mean)[0]} "
                     f"and {jnp.shape(q.mean)[0]}")


def _check_samples(names: str, x, y) -> None:
  if jnp.ndim(x) != 2 or jnp.ndim(y) != 2 or jnp.shape(x)[1] != jnp.shape(y)[1]:
    raise ValueError(f"{names} must be (n, d) and (m, d) samples, got {jnp.shape(x)} and "
                     f"{jnp.shape(y)}")

Array = jax.Array


def sqrtm_psd(a: Array) -> Array:
  """A^{1/2} = V diag(sqrt(max(lambda, 0))) V^T for symmetric PSD A = V diag(lambda) V^T.

  Args:
    a: a (d, d) symmetric PSD matrix (symmetrised first).

  Returns:
    Its PSD square root, (d, d).

  Example:
    >>> sqrtm_psd(jnp.diag(jnp.array([4.0, 9.0])))   # diag(2, 3)
  """
  w, v = jnp.linalg.eigh(0.5 * (a + a.T))
  return (v * jnp.sqrt(jnp.maximum(w, 0.0))) @ v.T


def gaussian_kl(p: Gaussian, q: Gaussian) -> Array:
  """KL(p || q) = 1/2 [tr(S_q^{-1} S_p) + (m_q - m_p)^T S_q^{-1} (m_q - m_p) - d
  + log det S_q - log det S_p] for multivariate normals.

  Args:
    p, q: ``Gaussian``s of the same dimension (positive-definite covariances).

  Returns:
    The scalar KL divergence.

  Example:
    >>> gaussian_kl(Gaussian(jnp.zeros(1), jnp.eye(1)), Gaussian(jnp.ones(1), jnp.eye(1)))  # 0.5
  """
  _check_pair(p, q)
  d = p.mean.shape[0]
  lq = jnp.linalg.cholesky(q.cov)
  lp = jnp.linalg.cholesky(p.cov)
  sol = jax.scipy.linalg.cho_solve((lq, True), p.cov)
  diff = q.mean - p.mean
  maha = diff @ jax.scipy.linalg.cho_solve((lq, True), diff)
  logdet = 2 * (jnp.sum(jnp.log(jnp.diag(lq))) - jnp.sum(jnp.log(jnp.diag(lp))))
  return 0.5 * (jnp.trace(sol) + maha - d + logdet)


def gaussian_w2(p: Gaussian, q: Gaussian) -> Array:
  """W2(p, q) = (|m_p - m_q|^2 + tr(S_p + S_q - 2 (S_q^{1/2} S_p S_q^{1/2})^{1/2}))^{1/2}.

  Args:
    p, q: ``Gaussian``s of the same dimension.

  Returns:
    The scalar W2 distance (not squared).

  Example:
    >>> gaussian_w2(Gaussian(jnp.zeros(1), jnp.eye(1)), Gaussian(jnp.zeros(1), 4 * jnp.eye(1)))  # 1
  """
  _check_pair(p, q)
  rq = sqrtm_psd(q.cov)
  cross = sqrtm_psd(rq @ p.cov @ rq)
  w2sq = jnp.sum((p.mean - q.mean) ** 2) + jnp.trace(p.cov + q.cov - 2 * cross)
  return jnp.sqrt(jnp.maximum(w2sq, 0.0))


def empirical_gaussian(x: Array) -> Gaussian:
  """The moment-matched Gaussian of a sample: mean x_bar, cov sum (x_i - x_bar)(x_i - x_bar)^T / (n - 1).

  Args:
    x: samples (n, d).

  Returns:
    ``Gaussian(mean (d,), cov (d, d))``.

  Example:
    >>> empirical_gaussian(jax.random.normal(key, (10000, 2))).cov   # ~ I
  """
  if jnp.ndim(x) != 2 or jnp.shape(x)[0] < 2:
    raise ValueError(f"x must be (n, d) samples with n >= 2, got shape {jnp.shape(x)}")
  mean = jnp.mean(x, axis=0)
  xc = x - mean
  return Gaussian(mean, xc.T @ xc / (x.shape[0] - 1))


def squared_distances(x: Array, y: Array) -> Array:
  """Squared Euclidean distances |x_i - y_j|^2 = |x_i|^2 + |y_j|^2 - 2 x_i . y_j (>= 0).

  Args:
    x: (n, d) points.
    y: (m, d) points.

  Returns:
    (n, m) squared distances.

  Example:
    >>> squared_distances(jnp.zeros((1, 2)), jnp.ones((1, 2)))   # [[2.]]
  """
  return jnp.maximum(jnp.sum(x * x, 1)[:, None] + jnp.sum(y * y, 1)[None, :]
                     - 2 * x @ y.T, 0.0)


def exact_w2(x, y) -> float:
  """Empirical W2 = (min_perm (1/n) sum_i |x_i - y_perm(i)|^2)^{1/2}, by exact assignment.

  Host-side (scipy's Hungarian solver), not jit-able.

  Args:
    x, y: equal-size samples (n, d) with uniform weights.

  Returns:
    The W2 distance between the two empirical measures (a Python float).

  Example:
    >>> exact_w2(np.zeros((3, 1)), np.ones((3, 1)))   # 1.0
  """
  from scipy.optimize import linear_sum_assignment  # host-side, not jit-able
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape:
    raise ValueError(f"exact_w2 needs equal-size samples, got {x.shape} and {y.shape}")
  cost = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
  rows, cols = linear_sum_assignment(cost)
  return float(np.sqrt(cost[rows, cols].mean()))


def sinkhorn_plan(cost: Array, eps: float, num_iters: int = 200) -> tuple[Array, Array]:
  """Entropic OT between uniform weights: (plan (n, m), transport cost <plan, cost>).

  Log-domain Sinkhorn iterations from f = g = 0,

      f_i <- -eps LSE_j((g_j - C_ij) / eps + log b_j),
      g_j <- -eps LSE_i((f_i - C_ij) / eps + log a_i),   plan_ij = a_i b_j e^{(f_i + g_j - C_ij)/eps}.

  Args:
    cost: (n, m) cost matrix.
    eps: entropic regularisation.
    num_iters: iterations (a ``lax.scan``).

  Returns:
    ``(plan (n, m), sum(plan * cost))``.

  Example:
    >>> plan, cost = sinkhorn_plan(squared_distances(x, y), 0.05)
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
  """Debiased Sinkhorn divergence S_eps(x, y) = OT_eps(x, y) - (OT_eps(x, x) + OT_eps(y, y)) / 2
  with squared Euclidean cost; an estimate of W2^2 for small eps.

  Args:
    x: samples (n, d).
    y: samples (m, d).
    eps: entropic regularisation.
    num_iters: Sinkhorn iterations per OT problem.

  Returns:
    The scalar divergence.

  Example:
    >>> sinkhorn_divergence(x, x + 1.0, eps=0.01)   # ~ d = W2^2 of a unit shift
  """
  checks.scalar("eps", eps)
  checks.positive_int("num_iters", num_iters)
  _check_samples("x and y", x, y)
  ot = lambda a, b: sinkhorn_plan(squared_distances(a, b), eps, num_iters)[1]
  return ot(x, y) - 0.5 * (ot(x, x) + ot(y, y))


def coupling_w2_bound(x: Array, y: Array) -> Array:
  """The coupling bound W2(law X, law Y) <= (E|X - Y|^2)^{1/2}, estimated on paired draws.

  Any joint draw of (X, Y) is a coupling, so the root mean squared distance of
  paired samples bounds W2 of their laws from above (up to Monte Carlo error); for
  two chains driven by one Brownian path it is the synchronous coupling bound.

  Args:
    x: draws of X (n, d).
    y: the paired draws of Y (n, d).

  Returns:
    The scalar (1/n sum_i |x_i - y_i|^2)^{1/2}.

  Example:
    >>> coupling_w2_bound(jnp.zeros((4, 2)), jnp.ones((4, 2)))   # sqrt(2)
  """
  if jnp.ndim(x) != 2 or jnp.shape(x) != jnp.shape(y):
    raise ValueError(f"x and y must be paired (n, d) draws of the same shape, got "
                     f"{jnp.shape(x)} and {jnp.shape(y)}")
  return jnp.sqrt(jnp.mean(jnp.sum((x - y) ** 2, axis=1)))
