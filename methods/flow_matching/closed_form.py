"""Exact drifts for Gaussian and Gaussian-mixture targets, and the exact law of Euler chains.

Source X0 ~ N(0, I) independent of X1 ~ pi. Along the Brownian bridge path with
diffusion sigma (sigma = 0: the linear path), for a Gaussian target N(m, S),

    X_t ~ N(t m, Sigma_t),  Sigma_t = (1 - t)^2 I + t^2 S + sigma^2 t (1 - t) I,
    E[X1 | X_t = x] = m + t S Sigma_t^{-1} (x - t m),

and the Markovian drift of "Convergence of Brownian diffusion flow matching" (ICML
2026, abstract line 7) is

    b_t(x) = (E[X1 | X_t = x] - x) / (1 - t) = m + A_t (x - t m),
    A_t = (t S - (1 - t) I - sigma^2 t I) Sigma_t^{-1}   (= (t S Sigma_t^{-1} - I)/(1 - t)),

a form with no 1/(1 - t): it stays finite at t = 1 when S is nonsingular, so solvers
that evaluate the field at t = 1 (Heun, Dopri5) can use it.

For sigma = 0 this is the flow-matching velocity E[X1 - X0 | X_t = x] of the linear
path. For a mixture sum_k w_k N(m_k, S_k), E[X1 | X_t = x] = sum_k r_k(x) E_k[X1 | x]
with responsibilities r_k(x) proportional to w_k N(x; t m_k, Sigma_{t,k}), and
b_t(x) = sum_k r_k(x) b_{t,k}(x) with each component's drift in the form above.

Because b_t is affine for a Gaussian target, the Euler-Maruyama chain

    X_{k+1} = X_k + h b_{t_k}(X_k) + sigma sqrt(h) xi_k,   t_k = k h,  h = 1/N,

stays exactly Gaussian: mean mu_{k+1} = (I + h A) mu_k + h c, covariance
P_{k+1} = (I + h A) P_k (I + h A)^T + sigma^2 h I. ``euler_maruyama_law`` propagates
these, so the discretisation error of the chain's law is measured with no sampling
noise (sigma = 0 gives the Euler ODE scheme).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from common import checks

Array = jax.Array


class Gaussian(NamedTuple):
  mean: Array  # (d,)
  cov: Array   # (d, d)


class GaussianMixture(NamedTuple):
  weights: Array  # (K,) summing to 1
  means: Array    # (K, d)
  covs: Array     # (K, d, d)


def _check_mixture(name: str, target: "GaussianMixture") -> None:
  k, d = jnp.shape(target.means)[0], jnp.shape(target.means)[-1]
  if (jnp.ndim(target.means) != 2 or jnp.shape(target.weights) != (k,)
      or jnp.shape(target.covs) != (k, d, d)):
    raise ValueError(f"{name} must have weights (K,), means (K, d) and covs (K, d, d), got "
                     f"{jnp.shape(target.weights)}, {jnp.shape(target.means)} and "
                     f"{jnp.shape(target.covs)}")
  checks.weights(f"{name}.weights", target.weights)


def standard_normal(d: int, dtype=jnp.float32) -> Gaussian:
  """The source law N(0, I_d).

  Args:
    d: dimension.
    dtype: float dtype of the mean and covariance.

  Returns:
    ``Gaussian(zeros (d,), eye (d, d))``.

  Example:
    >>> standard_normal(2).cov   # [[1, 0], [0, 1]]
  """
  return Gaussian(jnp.zeros((d,), dtype), jnp.eye(d, dtype=dtype))


def bridge_marginal(target: Gaussian, t, sigma: float) -> Gaussian:
  """The law of X_t on the bridge from N(0, I) to N(m, S):

      X_t ~ N(t m, Sigma_t),   Sigma_t = (1 - t)^2 I + t^2 S + sigma^2 t (1 - t) I.

  Args:
    target: the Gaussian target N(m, S).
    t: time in [0, 1] (a scalar).
    sigma: the bridge's diffusion coefficient (0: the linear path).

  Returns:
    ``Gaussian(t m, Sigma_t)``.

  Example:
    >>> g = Gaussian(jnp.ones(2), 2.0 * jnp.eye(2))
    >>> bridge_marginal(g, 1.0, 1.0).cov   # S at t = 1
  """
  m, s = target
  eye = jnp.eye(m.shape[0], dtype=m.dtype)
  cov = (1 - t) ** 2 * eye + t ** 2 * s + sigma ** 2 * t * (1 - t) * eye
  return Gaussian(t * m, cov)


def gaussian_drift_coefficients(target: Gaussian, t, sigma: float) -> tuple[Array, Array]:
  """The affine drift of a Gaussian target: b_t(x) = A_t x + c_t, finite on [0, 1],

      A_t = (t S - (1 - t) I - sigma^2 t I) Sigma_t^{-1},   c_t = m - t A_t m.

  Args:
    target: the Gaussian target N(m, S).
    t: time in [0, 1] (a scalar, may be traced).
    sigma: diffusion coefficient.

  Returns:
    ``(A_t (d, d), c_t (d,))``.

  Example:
    >>> a, c = gaussian_drift_coefficients(Gaussian(jnp.zeros(2), jnp.eye(2)), 0.5, 0.0)
    >>> # S = I, sigma = 0: A_t = (2t - 1) / ((1-t)^2 + t^2) I = 0 at t = 1/2
  """
  m, s = target
  eye = jnp.eye(m.shape[0], dtype=m.dtype)
  cov_t = bridge_marginal(target, t, sigma).cov
  lhs = t * s - (1 - t) * eye - sigma ** 2 * t * eye
  a = jnp.linalg.solve(cov_t, lhs.T).T          # lhs Sigma_t^{-1} (Sigma_t symmetric)
  return a, m - t * a @ m


def gaussian_drift(target: Gaussian, t, x: Array, sigma: float) -> Array:
  """The exact DFM drift b_t(x) = E[(X1 - X_t) / (1 - t) | X_t = x] = A_t x + c_t.

  Args:
    target: the Gaussian target N(m, S).
    t: time in [0, 1].
    x: points (..., d).
    sigma: diffusion coefficient (0: the linear path's velocity field).

  Returns:
    b_t(x), the shape of x.

  Example:
    >>> g = Gaussian(jnp.ones(2), jnp.eye(2))
    >>> gaussian_drift(g, 0.0, jnp.zeros((1, 2)), 1.0)   # A_0 = -I, c_0 = m: [[1, 1]]
  """
  a, c = gaussian_drift_coefficients(target, t, sigma)
  return x @ a.T + c


def _component(m, s, t, x, sigma):
  """log N(x; t m, Sigma_t), E[X1 | X_t = x] and the drift b_t(x) of one component; x (d,)."""
  d = m.shape[0]
  eye = jnp.eye(d, dtype=m.dtype)
  cov_t = (1 - t) ** 2 * eye + t ** 2 * s + sigma ** 2 * t * (1 - t) * eye
  chol = jnp.linalg.cholesky(cov_t)
  r = x - t * m
  sol = jax.scipy.linalg.cho_solve((chol, True), r)
  logpdf = (-0.5 * r @ sol - jnp.sum(jnp.log(jnp.diag(chol)))
            - 0.5 * d * jnp.log(2 * jnp.pi))
  drift = m + (t * s - (1 - t) * eye - sigma ** 2 * t * eye) @ sol
  return logpdf, m + t * s @ sol, drift


def _responsibilities(target: GaussianMixture, t, x: Array, sigma: float):
  logp, post, drift = jax.vmap(_component, in_axes=(0, 0, None, None, None))(
      target.means, target.covs, t, x, sigma)
  return jax.nn.softmax(logp + jnp.log(target.weights)), post, drift


def mixture_posterior_mean(target: GaussianMixture, t, x: Array, sigma: float) -> Array:
  """E[X1 | X_t = x] = sum_k r_k(x) (m_k + t S_k Sigma_{t,k}^{-1} (x - t m_k)).

  Args:
    target: the mixture sum_k w_k N(m_k, S_k).
    t: time in [0, 1].
    x: one point (d,).
    sigma: diffusion coefficient.

  Returns:
    The posterior mean of X1, (d,).

  Example:
    >>> mix = GaussianMixture(jnp.ones(1), jnp.zeros((1, 2)), jnp.eye(2)[None])
    >>> mixture_posterior_mean(mix, 0.0, jnp.ones(2), 1.0)   # E[X1] = 0 at t = 0
  """
  resp, post, _ = _responsibilities(target, t, x, sigma)
  return resp @ post


def mixture_drift_single(target: GaussianMixture, t, x: Array, sigma: float) -> Array:
  """b_t(x) = sum_k r_k(x) b_{t,k}(x) for one point x (finite at t = 1), with
  r_k(x) ∝ w_k N(x; t m_k, Sigma_{t,k}).

  Args:
    target: the mixture.
    t: time in [0, 1].
    x: one point (d,).
    sigma: diffusion coefficient.

  Returns:
    b_t(x), (d,).

  Example:
    >>> mix = GaussianMixture(jnp.ones(1), jnp.ones((1, 2)), jnp.eye(2)[None])
    >>> mixture_drift_single(mix, 0.0, jnp.zeros(2), 1.0)   # = m = [1, 1]
  """
  resp, _, drift = _responsibilities(target, t, x, sigma)
  return resp @ drift


def mixture_drift(target: GaussianMixture, t, x: Array, sigma: float) -> Array:
  """b_t(x) = (E[X1 | X_t = x] - x) / (1 - t) for a mixture, on a batch.

  Args:
    target: the mixture sum_k w_k N(m_k, S_k).
    t: time in [0, 1].
    x: points (..., d).
    sigma: diffusion coefficient.

  Returns:
    b_t(x), the shape of x.

  Example:
    >>> mix = GaussianMixture(jnp.array([0.5, 0.5]), jnp.array([[-2.0], [2.0]]),
    ...                       jnp.full((2, 1, 1), 0.1))
    >>> mixture_drift(mix, 0.5, jnp.zeros((4, 1)), 1.0)   # 0 by symmetry
  """
  flat = x.reshape(-1, x.shape[-1])
  out = jax.vmap(mixture_drift_single, in_axes=(None, None, 0, None))(target, t, flat, sigma)
  return out.reshape(x.shape)


def mixture_sample(key: Array, target: GaussianMixture, n: int) -> Array:
  """n i.i.d. draws X = m_c + chol(S_c) eps, c ~ Categorical(w), eps ~ N(0, I).

  Args:
    key: PRNG key.
    target: the mixture.
    n: number of draws.

  Returns:
    Samples (n, d).

  Example:
    >>> mix = GaussianMixture(jnp.ones(1), jnp.zeros((1, 2)), jnp.eye(2)[None])
    >>> mixture_sample(jax.random.PRNGKey(0), mix, 5).shape   # (5, 2)
  """
  _check_mixture("target", target)
  checks.positive_int("n", n)
  k_comp, k_noise = jax.random.split(key)
  comp = jax.random.choice(k_comp, target.weights.shape[0], (n,), p=target.weights)
  chol = jnp.linalg.cholesky(target.covs)[comp]
  eps = jax.random.normal(k_noise, (n, target.means.shape[1]), target.means.dtype)
  return target.means[comp] + jnp.einsum("nij,nj->ni", chol, eps)


def euler_maruyama_law(target: Gaussian, sigma: float, num_steps: int,
                       source: Gaussian | None = None) -> Gaussian:
  """Exact law of the N-step Euler-Maruyama chain driven by the analytic drift:

      mu_{k+1} = (I + h A_k) mu_k + h c_k,
      P_{k+1} = (I + h A_k) P_k (I + h A_k)^T + sigma^2 h I,   t_k = k h,  h = 1/N.

  Starts from ``source`` (default N(0, I)); the drift is never evaluated at t = 1.

  Args:
    target: the Gaussian target N(m, S) (its drift drives the chain).
    sigma: diffusion coefficient (0: the Euler ODE scheme).
    num_steps: N (may be traced: one compilation serves every N).
    source: the law of X_0.

  Returns:
    ``Gaussian(mu_N, P_N)``, the law of the chain's last iterate.

  Example:
    >>> target = Gaussian(jnp.ones(2), jnp.eye(2))
    >>> law = euler_maruyama_law(target, 1.0, 64)   # close to target, error O(h)
  """
  checks.positive_int("num_steps", num_steps)
  checks.scalar("sigma", sigma, strict=False)
  target = Gaussian(checks.as_float("target.mean", target.mean),
                    checks.as_float("target.cov", target.cov))
  d = target.mean.shape[0]
  if target.mean.ndim != 1 or target.cov.shape != (d, d):
    raise ValueError(f"target must have mean (d,) and cov (d, d), got {target.mean.shape} "
                     f"and {target.cov.shape}")
  dtype = target.mean.dtype
  source = standard_normal(d, dtype) if source is None else source
  h = 1.0 / jnp.asarray(num_steps, dtype)
  eye = jnp.eye(d, dtype=dtype)

  def step(k, law):
    mu, p = law
    a, c = gaussian_drift_coefficients(target, k * h, sigma)
    f = eye + h * a
    p = f @ p @ f.T + sigma ** 2 * h * eye
    return (f @ mu + h * c, 0.5 * (p + p.T))

  # fori_loop: num_steps may be traced, so one compilation serves every N.
  mu, p = jax.lax.fori_loop(0, num_steps, step, tuple(source))
  return Gaussian(mu, p)


def conditional_mixture_velocity(means: Array, weights: Array, std: float,
                                 sigma: float = 0.0):
  """An exact class-conditional drift network with the ``apply(params, t, x, cond)`` signature.

  Class c's law is sum_k weights[c, k] N(means[c, k], std^2 I); the condition vector
  cond (B, C) (one-hot, or zeros for the unconditional branch) selects the target
  mixture: component (c, k) gets weight proportional to weights[c, k] cond[c], and
  the null condition gives the class-balanced marginal sum_c (1/C) law_c. ``params``
  is ignored. Used to separate discretisation/guidance effects from learning error.

  Args:
    means: (C, K, d) mode means of each class.
    weights: (C, K) mode weights of each class (rows sum to 1).
    std: the modes' standard deviation.
    sigma: diffusion coefficient (0: the linear path's velocity).

  Returns:
    ``apply(params, t, x, cond) -> (B, d)`` with t (B,) or scalar, x (B, d), cond (B, C).

  Example:
    >>> apply = conditional_mixture_velocity(jnp.zeros((2, 1, 2)), jnp.ones((2, 1)), 0.3)
    >>> apply(None, jnp.zeros(4), jnp.ones((4, 2)), jnp.eye(2)[jnp.array([0, 1, 0, 1])])
  """
  if jnp.ndim(means) != 3 or jnp.shape(weights) != jnp.shape(means)[:2]:
    raise ValueError(f"means must be (C, K, d) and weights (C, K), got {jnp.shape(means)} "
                     f"and {jnp.shape(weights)}")
  checks.weights("weights", weights)
  checks.scalar("std", std)
  checks.scalar("sigma", sigma, strict=False)
  num_c, num_k, d = means.shape
  flat_means = means.reshape(num_c * num_k, d)
  covs = jnp.broadcast_to(std ** 2 * jnp.eye(d, dtype=means.dtype), (num_c * num_k, d, d))

  def apply(params, t, x, cond):
    del params
    t = jnp.broadcast_to(jnp.asarray(t, x.dtype), x.shape[:1])
    is_null = jnp.sum(cond, axis=-1, keepdims=True) <= 0
    mix = jnp.where(is_null, jnp.full_like(cond, 1.0 / num_c), cond)     # (B, C)
    w = (mix[:, :, None] * weights[None]).reshape(x.shape[0], num_c * num_k)
    w = w / jnp.sum(w, axis=1, keepdims=True)

    def one(ti, xi, wi):
      return mixture_drift_single(GaussianMixture(wi, flat_means, covs), ti, xi, sigma)

    return jax.vmap(one)(t, x, w)

  return apply
