"""The guidance potential U(z) at the initial noise (DivIn, ICML 2026).

DivIn ("Diversity-inducing Initialization"; papers/icml2026-abstracts.txt, the
abstract mentioning "guidance potential posterior") measures how strongly
classifier-free guidance will pull a trajectory started at z by the squared gap
between the conditional and unconditional predictions of the clean sample:

    U(z) = | x1_hat(z; c) - x1_hat(z; null) |^2.

For a flow v(t, x, c) on the linear path, the one-shot clean-sample prediction at t
is x1_hat = x + (1 - t) v(t, x, c); at t = 0 it equals z + v(0, z, c). For a
flow trained with the independent coupling, v(0, z, c) = E[X1 | c] - z exactly, so
the one-shot U(z) = |E[X1|c] - E[X1]|^2 does not depend on z: the potential carries
no information at t = 0. We therefore let the prediction be a K-step Euler rollout
of each branch,

    x1_hat^K(z; c) = Phi_K(z; c),   Phi_K: K Euler steps of dx/dt = v(t, x, c) on [0, 1],

and K = 1 is exactly the one-shot prediction. This is our reading for flows; the
paper states the potential for diffusion and flow models alike.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from common import checks

Array = jax.Array


def clean_prediction(apply_fn: Callable, params, z: Array, cond: Array,
                     num_rollout_steps: int = 1) -> Array:
  """x1_hat^K(z; c) = Phi_K(z; c): x <- x + h v(k h, x, c), k = 0..K-1, h = 1/K, from x = z.

  K = 1 is the one-shot prediction z + v(0, z, c).

  Args:
    apply_fn: ``apply(params, t (B,), x (B, ...), cond (B, C))``.
    params: the network's parameters.
    z: initial noise (B, ...).
    cond: conditions (B, C) (zeros: the null condition).
    num_rollout_steps: K.

  Returns:
    The predicted clean samples, the shape of z.

  Example:
    >>> x1_hat = clean_prediction(model.apply, params, z, cond, num_rollout_steps=8)
  """
  checks.positive_int("num_rollout_steps", num_rollout_steps)
  h = 1.0 / num_rollout_steps
  x = z
  for k in range(num_rollout_steps):
    t = jnp.full(z.shape[:1], k * h, z.dtype)
    x = x + h * apply_fn(params, t, x, cond)
  return x


def guidance_potential(apply_fn: Callable, params, z: Array, cond: Array,
                       num_rollout_steps: int = 1) -> Array:
  """U(z) = |x1_hat^K(z; c) - x1_hat^K(z; null)|^2 per sample.

  Args:
    apply_fn: ``apply(params, t, x, cond)``.
    params: the network's parameters.
    z: initial noise (B, ...).
    cond: conditions (B, C).
    num_rollout_steps: K of ``clean_prediction``.

  Returns:
    U (B,).

  Example:
    >>> u = guidance_potential(model.apply, params, z, cond, 8)
  """
  gap = (clean_prediction(apply_fn, params, z, cond, num_rollout_steps)
         - clean_prediction(apply_fn, params, z, jnp.zeros_like(cond), num_rollout_steps))
  return jnp.sum(gap.reshape(z.shape[0], -1) ** 2, axis=1)


def potential_grad(apply_fn: Callable, params, num_rollout_steps: int = 1) -> Callable:
  """grad_z U(z; c) per sample, vmapped over the batch: (z (B, ...), c (B, C)) -> (B, ...).

  Args:
    apply_fn: ``apply(params, t, x, cond)``.
    params: the network's parameters.
    num_rollout_steps: K of ``clean_prediction``.

  Returns:
    ``grad_fn(z, cond)``, the ``grad_fn`` that ``langevin.divin_init`` takes.

  Example:
    >>> grad_fn = potential_grad(model.apply, params, 8)
    >>> z = divin_init(key, z, cond, grad_fn, tau=0.05, eta=0.05, num_steps=30)
  """
  def single(z, c):
    return guidance_potential(apply_fn, params, z[None], c[None], num_rollout_steps)[0]

  return jax.vmap(jax.grad(single))
