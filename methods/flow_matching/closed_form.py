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

Array = jax.Array


class Gaussian(NamedTuple):
  mean: Array  # (d,)
  cov: Array   # (d, d)


class GaussianMixture(NamedTuple):
  weights: Array  # (K,) summing to 1
  means: Array    # (K, d)
  covs: Array     # (K, d, d)


def standard_normal(d: int, dtype=jnp.float32) -> Gaussian:
  return Gaussian(jnp.zeros((d,), dtype), jnp.eye(d, dtype=dtype))


def bridge_marginal(target: Gaussian, t, sigma: float) -> Gaussian:
  """The law N(t m, Sigma_t) of X_t on the bridge from N(0, I) to N(m, S)."""
  m, s = target
  eye = jnp.eye(m.shape[0], dtype=m.dtype)
  cov = (1 - t) ** 2 * eye + t ** 2 * s + sigma ** 2 * t * (1 - t) * eye
  return Gaussian(t * m, cov)


def gaussian_drift_coefficients(target: Gaussian, t, sigma: float) -> tuple[Array, Array]:
  """(A_t, c_t) with b_t(x) = A_t x + c_t for a Gaussian target (finite for t in [0, 1])."""
  m, s = target
  eye = jnp.eye(m.shape[0], dtype=m.dtype)
  cov_t = bridge_marginal(target, t, sigma).cov
  lhs = t * s - (1 - t) * eye - sigma ** 2 * t * eye
  a = jnp.linalg.solve(cov_t, lhs.T).T          # lhs Sigma_t^{-1} (Sigma_t symmetric)
  return a, m - t * a @ m


def gaussian_drift(target: Gaussian, t, x: Array, sigma: float) -> Array:
  """b_t(x) for x of shape (..., d)."""
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
  """E[X1 | X_t = x] for a mixture target; x (d,)."""
  resp, post, _ = _responsibilities(target, t, x, sigma)
  return resp @ post


def mixture_drift_single(target: GaussianMixture, t, x: Array, sigma: float) -> Array:
  """b_t(x) = sum_k r_k(x) b_{t,k}(x) for one point x (d,) (finite at t = 1)."""
  resp, _, drift = _responsibilities(target, t, x, sigma)
  return resp @ drift


def mixture_drift(target: GaussianMixture, t, x: Array, sigma: float) -> Array:
  """b_t(x) = (E[X1 | X_t = x] - x) / (1 - t) for a mixture; x (..., d)."""
  flat = x.reshape(-1, x.shape[-1])
  out = jax.vmap(mixture_drift_single, in_axes=(None, None, 0, None))(target, t, flat, sigma)
  return out.reshape(x.shape)


def mixture_sample(key: Array, target: GaussianMixture, n: int) -> Array:
  """n draws from the mixture."""
  k_comp, k_noise = jax.random.split(key)
  comp = jax.random.choice(k_comp, target.weights.shape[0], (n,), p=target.weights)
  chol = jnp.linalg.cholesky(target.covs)[comp]
  eps = jax.random.normal(k_noise, (n, target.means.shape[1]), target.means.dtype)
  return target.means[comp] + jnp.einsum("nij,nj->ni", chol, eps)


def euler_maruyama_law(target: Gaussian, sigma: float, num_steps: int,
                       source: Gaussian | None = None) -> Gaussian:
  """Exact law of the N-step Euler-Maruyama chain driven by the analytic drift.

  Starts from ``source`` (default N(0, I)); grid t_k = k / N, k = 0..N-1, so the
  drift is never evaluated at t = 1.
  """
  d = target.mean.shape[0]
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
  """
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
