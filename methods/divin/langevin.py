"""DivIn: Langevin sampling of the initial noise from the guidance potential posterior.

The initial noise is drawn from

    p(z) proportional to N(z; 0, I) exp(-tau U(z))

(``potential.guidance_potential``), by Langevin dynamics on -log p(z) = |z|^2/2 +
tau U(z), started from z ~ N(0, I). Two discretisations of the Langevin diffusion
dz = -(z + tau grad U(z)) ds + sqrt(2) dB:

* "euler" (the update written in the paper's style, unadjusted Langevin):
      z <- z - eta (tau grad U(z) + z) + sqrt(2 eta) xi;
  with tau = 0 this is an AR(1) chain whose stationary variance is 1/(1 - eta/2),
  so N(0, I) is invariant only up to O(eta).
* "ou" (default, exponential integrator for the Gaussian part):
      z <- e^{-eta} z - (1 - e^{-eta}) tau grad U(z) + sqrt(1 - e^{-2 eta}) xi;
  it agrees with "euler" to first order in eta and, with tau = 0, leaves N(0, I)
  exactly invariant.

``num_steps`` updates, each vmapped over the batch (grad U is per sample).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from common import checks

Array = jax.Array
SCHEMES = ("ou", "euler")


def langevin_step(z: Array, grad_u: Array, xi: Array, *, tau, eta,
                  scheme: str = "ou") -> Array:
  """One Langevin update on -log p(z) = |z|^2/2 + tau U(z):

      euler: z - eta (tau grad U + z) + sqrt(2 eta) xi,
      ou:    e^{-eta} z - (1 - e^{-eta}) tau grad U + sqrt(1 - e^{-2 eta}) xi.

  Args:
    z: current noise (B, ...).
    grad_u: grad U(z), the shape of z.
    xi: standard normal draws, the shape of z.
    tau: inverse temperature.
    eta: step size.
    scheme: "ou" or "euler".

  Returns:
    The updated z.

  Example:
    >>> z = langevin_step(z, grad_fn(z, cond), jax.random.normal(key, z.shape), tau=0.1,
    ...                   eta=0.05)
  """
  checks.scalar("eta", eta)
  checks.scalar("tau", tau, strict=False)
  if scheme == "euler":
    return z - eta * (tau * grad_u + z) + jnp.sqrt(2.0 * eta) * xi
  if scheme == "ou":
    decay = jnp.exp(-eta)
    return decay * z - (1.0 - decay) * tau * grad_u + jnp.sqrt(1.0 - decay ** 2) * xi
  raise ValueError(f"unknown Langevin scheme {scheme!r}; expected one of {SCHEMES}")


def divin_init(key: Array, z: Array, cond: Array, grad_fn: Callable, *, tau, eta,
               num_steps: int, scheme: str = "ou") -> Array:
  """Runs ``num_steps`` Langevin updates of the initial noise z (B, ...) towards
  p(z) ∝ N(z; 0, I) exp(-tau U(z)); update k uses xi_k ~ N(0, I) from fold_in(key, k).

  Args:
    key: PRNG key for the Langevin noise.
    z: starting noise, typically N(0, I) draws.
    cond: (B, C) conditions passed to ``grad_fn``.
    grad_fn: (z, cond) -> grad U(z), per sample (e.g. ``potential.potential_grad``).
    tau: inverse temperature of the potential (0: the prior only).
    eta: step size.
    num_steps: number of updates.
    scheme: "ou" (exact at tau = 0) or "euler".

  Returns:
    The refined noise, same shape as z.

  Example:
    >>> grad_fn = potential.potential_grad(model.apply, params, 8)
    >>> z = divin_init(key, jax.random.normal(k0, (n, 2)), cond, grad_fn, tau=0.05,
    ...                eta=0.05, num_steps=30)
  """
  if scheme not in SCHEMES:
    raise ValueError(f"unknown Langevin scheme {scheme!r}; expected one of {SCHEMES}")
  checks.scalar("eta", eta)
  checks.scalar("tau", tau, strict=False)
  checks.positive_int("num_steps", num_steps, low=0)
  if jnp.ndim(z) < 1 or jnp.ndim(cond) < 1 or jnp.shape(z)[0] != jnp.shape(cond)[0]:
    raise ValueError(f"z (B, ...) and cond (B, C) must share the batch size B, got "
                     f"{jnp.shape(z)} and {jnp.shape(cond)}")

  def body(z, k):
    xi = jax.random.normal(jax.random.fold_in(key, k), z.shape, z.dtype)
    g = grad_fn(z, cond)
    return langevin_step(z, g, xi, tau=tau, eta=eta, scheme=scheme), None

  z, _ = jax.lax.scan(body, z, jnp.arange(num_steps))
  return z
