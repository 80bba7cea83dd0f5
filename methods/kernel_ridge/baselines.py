"""What the two-stage estimator is compared against; each returns an EffectFunction.

- ``naive``: KRR of Y on T alone. Under confounding it estimates E[Y | T=t], not
  theta(t) = E_X[mu(t, X)], and stays biased as n grows.
- ``plug_in``: the kernel plug-in of Singh, Xu & Gretton ("Kernel methods for causal
  functions", 2023): stage-1 KRR of Y on (T, X) with ridge by leave-one-out, then
  theta_hat(t) = (1/n) sum_j mu_hat(t, X_j), with no second stage.
- ``doubly_robust``: the pseudo-outcome estimator of Kennedy, Ma, McHugh & Small
  (2017), which *does* estimate the conditional treatment density pi(t | x):
      xi_i = (Y_i - mu_hat(T_i, X_i)) * varpi_hat(T_i) / pi_hat(T_i | X_i) + m_hat(T_i),
  with m_hat(t) = (1/n) sum_j mu_hat(t, X_j) and varpi_hat the marginal density of T,
  then KRR of xi on T. Here pi_hat(t | x) is a location model: a KRR fit of T on X
  plus a Gaussian kernel density estimate of its residuals, and varpi_hat is a
  Gaussian KDE of T (Silverman bandwidths). Weak overlap makes pi_hat small where
  data are scarce and the weights explode, which is what the two-stage estimator
  avoids.

Lengthscales are the median heuristic times the given scales; ridges by exact
leave-one-out (on a subsample of ``max_n`` rows when given, drawn with ``key``, then
refitted on all rows), as in the references. Exact (Cholesky/eigendecomposition)
solves. A ``key`` is needed only when a fit has more than ``max_n`` rows.

Examples assume ``import jax, jax.numpy as jnp`` and ``from common.data import causal``.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from common import kernels
from methods.kernel_ridge import krr
from methods.kernel_ridge import selection
from methods.kernel_ridge import two_stage

Array = jax.Array
DEFAULT_LAMS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


def _krr_on_t(t: Array, target: Array, lams: Sequence[float], scales: Sequence[float],
              kernel_t: str, max_n: int | None, key: Array | None
              ) -> two_stage.EffectFunction:
  h_t = kernels.median_heuristic(t)
  cands = [kernels.Kernel(s * h_t, kernel_t) for s in scales]
  best = selection.loo_select(cands, t, target, lams, max_n=max_n, key=key)
  return two_stage.EffectFunction(kernel=cands[best.scale_index], centers=t,
                                  weights=best.alphas)


def naive(t: Array, x: Array, y: Array, *, key: Array | None = None,
          lams: Sequence[float] = DEFAULT_LAMS, scales: Sequence[float] = (0.5, 1.0, 2.0),
          kernel_t: str = "rbf", max_n: int | None = None) -> two_stage.EffectFunction:
  """KRR of Y on T alone, ignoring the covariates: it estimates E[Y | T = t], not theta.

      theta_hat(t) = sum_i alpha_i k_T(t, T_i),  (K_T + n lambda I) alpha = Y,

  lengthscale and lambda by exact leave-one-out.

  Args:
    t, x, y: the sample (x is only shape-checked).
    key: PRNG key of the leave-one-out subsample; required when n > max_n.
    lams: candidate ridges; scales: candidate lengthscales (x median heuristic).
    kernel_t: kernel name; max_n: the largest leave-one-out sample, or None.

  Returns:
    An ``EffectFunction``.

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 100)
    >>> theta_hat = naive(data.t, data.x, data.y)
  """
  t, _, y = two_stage.check_inputs(t, x, y)
  return _krr_on_t(t, y, lams, scales, kernel_t, max_n, key)


def stage1_loo(t: Array, x: Array, y: Array, *, key: Array | None = None,
               lams: Sequence[float] = DEFAULT_LAMS, scales_t: Sequence[float] = (1.0,),
               scales_x: Sequence[float] = (1.0,), kernel_t: str = "rbf",
               kernel_x: str = "rbf", max_n: int | None = None
               ) -> tuple[krr.KRRFit, kernels.ProductKernel]:
  """Stage-1 KRR of Y on (T, X) with the product kernel k_T k_X:

      mu_hat(t, x) = sum_i c_i k_T(t, T_i) k_X(x, X_i),  (K + n lambda I) c = Y,

  median-heuristic lengthscales (times the scales), ridge by exact leave-one-out.

  Args:
    t, x, y: the sample.
    key: PRNG key of the leave-one-out subsample; required when n > max_n.
    lams: candidate ridges; scales_t, scales_x: candidate lengthscale multiples.
    kernel_t, kernel_x: kernel names; max_n: the largest leave-one-out sample.

  Returns:
    (mu_hat as a ``KRRFit`` over (t, x), its ``ProductKernel``).

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 100)
    >>> mu_hat, k = stage1_loo(data.t, data.x, data.y)
  """
  t, x, y = two_stage.check_inputs(t, x, y)
  h_t, h_x = selection.base_lengthscales(t, x)
  cands = [two_stage.product_kernel(kernel_t, kernel_x, st * h_t, sx * h_x)
           for st in scales_t for sx in scales_x]
  best = selection.loo_select(cands, (t, x), y, lams, max_n=max_n, key=key)
  return krr.KRRFit(centers=(t, x), weights=best.alphas), cands[best.scale_index]


def plug_in(t: Array, x: Array, y: Array, **stage1_kwargs) -> two_stage.EffectFunction:
  """Singh-Xu-Gretton plug-in: theta_hat(t) = (1/n) sum_j mu_hat(t, X_j).

  Args:
    t, x, y: the sample.
    **stage1_kwargs: passed to ``stage1_loo`` (key, lams, scales_t, scales_x,
      kernel_t, kernel_x, max_n).

  Returns:
    An ``EffectFunction`` (``two_stage.marginalize`` of the stage-1 fit).

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 100)
    >>> theta_hat = plug_in(data.t, data.x, data.y, lams=(1e-4, 1e-2))
  """
  t, x, y = two_stage.check_inputs(t, x, y)
  fit, k = stage1_loo(t, x, y, **stage1_kwargs)
  return two_stage.marginalize(fit, k, x, chunk_size=2048)


def silverman_bandwidth(v: Array) -> Array:
  """Silverman's rule h = 0.9 min(std, IQR / 1.34) n^(-1/5) for a 1-D Gaussian KDE.

  Args:
    v: (n,) sample.

  Returns:
    The bandwidth h (a scalar array).

  Example:
    >>> h = silverman_bandwidth(jnp.linspace(-1.0, 1.0, 50))
  """
  n = v.shape[0]
  q75, q25 = jnp.percentile(v, 75), jnp.percentile(v, 25)
  spread = jnp.minimum(jnp.std(v), (q75 - q25) / 1.34)
  return 0.9 * jnp.maximum(spread, 1e-12) * n ** (-0.2)


def gaussian_kde(points: Array, data: Array, bandwidth: Array) -> Array:
  """p_hat(u_i) = (1/n) sum_k N(u_i - data_k; 0, h^2) at each point u_i.

  Args:
    points: (q,) where to evaluate; data: (n,) sample; bandwidth: h.

  Returns:
    (q,) density values.

  Example:
    >>> density = gaussian_kde(jnp.zeros(1), jnp.linspace(-1.0, 1.0, 50), 0.2)
  """
  z = (points[:, None] - data[None, :]) / bandwidth
  return jnp.mean(jnp.exp(-0.5 * z * z), axis=1) / (bandwidth * jnp.sqrt(2.0 * jnp.pi))


def conditional_density(t: Array, x: Array, *, key: Array | None = None,
                        lams: Sequence[float] = DEFAULT_LAMS, kernel_x: str = "rbf",
                        max_n: int | None = None):
  """Fits the location model pi_hat(t | x) = p_hat(t - m_hat(x)): m_hat by KRR of T on
  X (ridge by leave-one-out), p_hat a Gaussian KDE of the residuals T_i - m_hat(X_i).

  Args:
    t: (n,) treatments; x: (n, p) covariates.
    key: PRNG key of the leave-one-out subsample; required when n > max_n.
    lams: candidate ridges; kernel_x: kernel name; max_n: the largest LOO sample.

  Returns:
    A function ``density(t_query, x_query) -> (n_query,)``.

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 100)
    >>> density = conditional_density(data.t, data.x)
    >>> density(data.t[:3], data.x[:3]).shape
    (3,)
  """
  t, x, _ = two_stage.check_inputs(t, x)
  k_x = kernels.Kernel(kernels.median_heuristic(x), kernel_x)
  best = selection.loo_select([k_x], x, t, lams, max_n=max_n, key=key)
  mean_model = krr.KRRFit(centers=x, weights=best.alphas)
  residuals = t - krr.predict(k_x, mean_model, x)
  bw = silverman_bandwidth(residuals)

  def density(t_query: Array, x_query: Array) -> Array:
    shifted = t_query - krr.predict(k_x, mean_model, x_query)
    return gaussian_kde(shifted, residuals, bw)

  return density


def doubly_robust(t: Array, x: Array, y: Array, *, key: Array,
                  subsample_key: Array | None = None, num_folds: int = 2,
                  lams: Sequence[float] = DEFAULT_LAMS,
                  scales: Sequence[float] = (0.5, 1.0, 2.0), kernel_t: str = "rbf",
                  kernel_x: str = "rbf", max_n: int | None = None,
                  density_floor: float = 1e-6) -> two_stage.EffectFunction:
  """Kennedy et al. doubly-robust pseudo-outcomes, cross-fitted, regressed on T by KRR:

      xi_i = (Y_i - mu_hat(T_i, X_i)) varpi_hat(T_i) / pi_hat(T_i | X_i) + m_hat(T_i).

  The nuisances (mu_hat, pi_hat) used for the pseudo-outcome of row i are fitted
  on the other ``num_folds - 1`` folds, as the reference prescribes; m_hat(t)
  averages each fold's mu_hat over all covariates. ``density_floor`` only guards
  against division by an exact zero; there is no trimming.

  Args:
    t, x, y: the sample.
    key: PRNG key of the random fold assignment.
    subsample_key: PRNG key of every leave-one-out subsample (nuisances and the
      final regression); required when n > max_n.
    num_folds: cross-fitting folds, in [2, n/2].
    lams, scales, kernel_t, kernel_x, max_n: as in ``naive`` and ``stage1_loo``.
    density_floor: the smallest pi_hat divided by.

  Returns:
    An ``EffectFunction``.

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 100)
    >>> theta_hat = doubly_robust(data.t, data.x, data.y, key=jax.random.PRNGKey(1))
  """
  t, x, y = two_stage.check_inputs(t, x, y)
  n = t.shape[0]
  if not 2 <= num_folds <= n // 2:
    raise ValueError(f"num_folds must lie in [2, n/2], got {num_folds} for n={n}")
  if max_n is not None and n > max_n and subsample_key is None:
    raise ValueError(f"doubly_robust with n={n} > max_n={max_n} needs a subsample_key")
  folds = jnp.array_split(jax.random.permutation(key, n), num_folds)
  varpi_hat = gaussian_kde(t, t, silverman_bandwidth(t))
  xi = jnp.zeros_like(y)
  for f, held in enumerate(folds):
    rest = jnp.concatenate([g for j, g in enumerate(folds) if j != f])
    fit, k = stage1_loo(t[rest], x[rest], y[rest], key=subsample_key, lams=lams,
                        kernel_t=kernel_t, kernel_x=kernel_x, max_n=max_n)
    density = conditional_density(t[rest], x[rest], key=subsample_key, lams=lams,
                                  kernel_x=kernel_x, max_n=max_n)
    th, xh = t[held], x[held]
    mu = krr.predict(k, fit, (th, xh), chunk_size=2048)
    m_hat = two_stage.marginalize(fit, k, x, chunk_size=2048)(th)
    pi = jnp.maximum(density(th, xh), density_floor)
    xi = xi.at[held].set((y[held] - mu) * varpi_hat[held] / pi + m_hat)
  return _krr_on_t(t, xi, lams, scales, kernel_t, max_n, subsample_key)
