"""What DivIn is compared against (and combined with); each returns a vector field
``field(t, x)`` for ``flow_matching.sampling.sample_ode``.

* ``cfg_field``: classifier-free guidance v_w = v(., 0) + w (v(., c) - v(., 0)).
* ``cads_field``: condition-annealed sampling (Sadat et al., "CADS", ICLR 2024): the
  condition of the guided branch is corrupted early in sampling,

      c_hat = sqrt(gamma(t)) c + s sqrt(1 - gamma(t)) n,   n ~ N(0, I) fresh each step,

  optionally rescaled to c's mean/std and mixed back with weight psi; with flow
  time t (0 = noise, 1 = data), gamma(t) = 0 for t <= t1, 1 for t >= t2, linear in
  between (CADS's tau_1, tau_2 in diffusion time map to t = 1 - tau).
* ``particle_guidance_field``: particle guidance (Corso et al., ICLR 2024) with an
  RBF repulsion among the particles of one batch,

      v_i <- v_w(t, x_i) - alpha (1 - t) grad_{x_i} (1/B) sum_j k(x_i, x_j),
      k(x, y) = exp(-|x - y|^2 / (2 ell^2)),
      ell^2 = median_{i<j} |x_i - x_j|^2 / (2 log(B + 1)),

  so particles of the same condition push each other apart.
* DivIn combined with CADS is ``divin.langevin.divin_init`` followed by ``cads_field``.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from methods.flow_matching.sampling import guided_field

Array = jax.Array


def cfg_field(apply_fn: Callable, params, cond: Array, w) -> Callable:
  """Classifier-free guidance v_w = v(t, x, 0) + w (v(t, x, c) - v(t, x, 0)).

  Args:
    apply_fn: ``apply(params, t, x, cond)``.
    params: the network's parameters.
    cond: conditions (B, C).
    w: guidance weight.

  Returns:
    ``field(t, x)``.

  Example:
    >>> x1 = sample_ode(cfg_field(model.apply, params, cond, 7.0), z, num_steps=32)
  """
  return guided_field(apply_fn, params, cond, w)


def check_cads_window(t1, t2) -> None:
  """Raises a ValueError unless 0 <= t1 < t2 <= 1 (t1 = t2 divides by zero in gamma).

  Example:
    >>> check_cads_window(0.2, 0.6)
  """
  if not (checks.is_concrete(t1) and checks.is_concrete(t2)):
    return
  if not 0.0 <= float(t1) < float(t2) <= 1.0:
    raise ValueError(f"the CADS window (t1, t2) must satisfy 0 <= t1 < t2 <= 1, got "
                     f"({t1}, {t2})")


def cads_gamma(t, t1: float, t2: float):
  """CADS schedule in flow time: gamma(t) = clip((t - t1) / (t2 - t1), 0, 1).

  Args:
    t: flow time (0 = noise, 1 = data).
    t1, t2: the annealing window, t1 < t2.

  Returns:
    gamma(t) in [0, 1].

  Example:
    >>> cads_gamma(0.4, 0.2, 0.6)   # 0.5
  """
  check_cads_window(t1, t2)
  return jnp.clip((t - t1) / (t2 - t1), 0.0, 1.0)


def anneal_condition(key: Array, cond: Array, gamma, noise_scale: float,
                     psi: float = 1.0, rescale: bool = True) -> Array:
  """c_hat = sqrt(gamma) c + s sqrt(1 - gamma) n, n ~ N(0, I), then rescaled to c's
  per-row mean/std and mixed: psi c_hat_rescaled + (1 - psi) c_hat.

  Args:
    key: PRNG key of n.
    cond: conditions (B, C).
    gamma: the schedule's value in [0, 1].
    noise_scale: s.
    psi: the mixing weight of the rescaled condition.
    rescale: rescale (and mix) at all.

  Returns:
    The annealed conditions (B, C).

  Example:
    >>> anneal_condition(key, cond, 1.0, 0.5)   # = cond (gamma = 1)
  """
  n = jax.random.normal(key, cond.shape, cond.dtype)
  noisy = jnp.sqrt(gamma) * cond + noise_scale * jnp.sqrt(1.0 - gamma) * n
  if not rescale:
    return noisy
  mu_in, sd_in = jnp.mean(cond, -1, keepdims=True), jnp.std(cond, -1, keepdims=True)
  mu, sd = jnp.mean(noisy, -1, keepdims=True), jnp.std(noisy, -1, keepdims=True)
  rescaled = (noisy - mu) / (sd + 1e-6) * sd_in + mu_in
  return psi * rescaled + (1.0 - psi) * noisy


def cads_field(apply_fn: Callable, params, cond: Array, w, key: Array, *,
               num_steps: int, t1: float = 0.2, t2: float = 0.6,
               noise_scale: float = 0.25, psi: float = 1.0,
               rescale: bool = True) -> Callable:
  """CFG whose conditional branch sees the annealed condition c_hat(t).

  The noise n is redrawn at every grid step k = round(t N) (deterministic in key):

      v(t, x) = v(t, x, 0) + w (v(t, x, c_hat(t)) - v(t, x, 0)).

  Args:
    apply_fn: ``apply(params, t, x, cond)``.
    params: the network's parameters.
    cond: conditions (B, C).
    w: guidance weight.
    key: PRNG key of the condition noise.
    num_steps: the sampler's grid size N.
    t1, t2: the annealing window (``cads_gamma``).
    noise_scale, psi, rescale: as in ``anneal_condition``.

  Returns:
    ``field(t, x)``.

  Example:
    >>> field = cads_field(model.apply, params, cond, 7.0, key, num_steps=32, noise_scale=0.5)
  """
  check_cads_window(t1, t2)
  checks.positive_int("num_steps", num_steps)
  checks.scalar("noise_scale", noise_scale, strict=False)
  checks.scalar("psi", psi, low=-float("inf"))
  null = jnp.zeros_like(cond)

  def field(t, x):
    k = jnp.round(t * num_steps).astype(jnp.int32)
    c_hat = anneal_condition(jax.random.fold_in(key, k), cond,
                             cads_gamma(t, t1, t2), noise_scale, psi, rescale)
    tb = jnp.full(x.shape[:1], t, x.dtype)
    v_c = apply_fn(params, tb, x, c_hat)
    v_u = apply_fn(params, tb, x, null)
    return v_u + w * (v_c - v_u)

  return field


def rbf_repulsion(x: Array) -> Array:
  """-grad_{x_i} (1/B) sum_j k(x_i, x_j) = (1/B) sum_j k(x_i, x_j) (x_i - x_j) / ell^2,
  k(x, y) = exp(-|x - y|^2 / (2 ell^2)), ell^2 = median_{i<j} |x_i - x_j|^2 / (2 log(B + 1)).

  Args:
    x: particles (B, ...).

  Returns:
    The repulsion, the shape of x.

  Example:
    >>> rbf_repulsion(jnp.array([[0.0], [1.0]]))   # pushes the two points apart
  """
  if jnp.ndim(x) < 1 or jnp.shape(x)[0] < 2:
    raise ValueError(f"rbf_repulsion needs x (B, ...) with B >= 2 particles, got shape "
                     f"{jnp.shape(x)}")
  flat = x.reshape(x.shape[0], -1)
  diff = flat[:, None, :] - flat[None, :, :]
  sq = jnp.sum(diff ** 2, -1)
  b = x.shape[0]
  iu = np.triu_indices(b, 1)
  off = sq[iu]
  ell2 = jax.lax.stop_gradient(jnp.median(off) / (2.0 * jnp.log(b + 1.0)) + 1e-8)
  k = jnp.exp(-sq / (2 * ell2))
  rep = jnp.mean(k[:, :, None] * diff, axis=1) / ell2   # = -grad (1/B) sum_j k(x_i, x_j)
  return rep.reshape(x.shape)


def particle_guidance_field(apply_fn: Callable, params, cond: Array, w, *,
                            alpha: float) -> Callable:
  """v_i = v_w(t, x_i) + alpha (1 - t) rbf_repulsion(x)_i, CFG plus repulsion.

  Args:
    apply_fn: ``apply(params, t, x, cond)``.
    params: the network's parameters.
    cond: conditions (B, C).
    w: guidance weight.
    alpha: repulsion strength.

  Returns:
    ``field(t, x)`` (it couples the particles of the batch).

  Example:
    >>> field = particle_guidance_field(model.apply, params, cond, 7.0, alpha=20.0)
  """
  base = guided_field(apply_fn, params, cond, w)

  def field(t, x):
    return base(t, x) + alpha * (1.0 - t) * rbf_repulsion(x)

  return field
