"""MeZO: SPSA with isotropic Gaussian perturbations of every parameter.

At step t with key k_t = fold_in(key, t) and z ~ N(0, I_D) regenerated from k_t:

    c_t = (L(theta + eps z; B_t) - L(theta - eps z; B_t)) / (2 eps)
    g_hat_t = c_t z,           E_z[g_hat_t] = grad L(theta) + O(eps^2)

(for a quadratic the expectation is exactly the gradient, since the odd terms cancel
and E[z z^T] = I). The update is whatever optax chain follows, e.g. ZO-SGD
theta <- theta - lr_t g_hat_t. Only the key is kept between uses of z.

References:
  Malladi et al., "Fine-Tuning Language Models with Just Forward Passes", NeurIPS 2023.
  Spall, "Multivariate stochastic approximation using a simultaneous perturbation
  gradient approximation", IEEE TAC 1992.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import optax

from methods.zeroth_order import perturbation
from methods.zeroth_order import transform


def spsa_gradient(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any,
                  key: jax.Array, step, *, eps: float = 1e-3,
                  two_sided: bool = True) -> perturbation.ZOEstimate:
  """One MeZO estimate g_hat = c z, z ~ N(0, I) drawn from fold_in(key, step).

      c = (L(theta + eps z) - L(theta - eps z)) / (2 eps)     (two-sided)
      c = (L(theta + eps z) - L(theta)) / eps                 (one-sided)

  Args:
    loss_fn: (params, batch) -> scalar.
    params: theta.
    batch: the minibatch, passed to loss_fn.
    key: the run's base key.
    step: the step index (int or int32 scalar).
    eps: perturbation size.
    two_sided: central difference (2 forward passes); else forward difference from
      L(theta) (also 2 passes).

  Returns:
    `ZOEstimate` (grads, loss, projected_grad, num_forward=2).

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["w"] - b) ** 2)
      >>> est = spsa_gradient(loss_fn, {"w": jnp.zeros(3)}, jnp.ones(3),
      ...                     jax.random.PRNGKey(0), 0)
      >>> est.grads["w"].shape, est.num_forward
      ((3,), 2)
  """
  step_key = jax.random.fold_in(key, step)
  sample = lambda: perturbation.gaussian_direction(params, step_key)
  if two_sided:
    return perturbation.finite_difference(loss_fn, params, batch, sample, eps)
  base = loss_fn(params, batch)
  return perturbation.finite_difference(loss_fn, params, batch, sample, eps, two_sided=False,
                                        base_loss=base, base_forward=1)


def mezo(loss_fn: Callable[[Any, Any], jax.Array], eps: float = 1e-3, *, key: jax.Array,
         two_sided: bool = True) -> optax.GradientTransformationExtraArgs:
  """MeZO's estimator as the head of an optax chain.

      g_hat_t = c_t z_t,  z_t ~ N(0, I) from fold_in(key, t),
      c_t = (L(theta + eps z_t; B_t) - L(theta - eps z_t; B_t)) / (2 eps)

  Followed by `optax.sgd(lr)` this is MeZO's ZO-SGD, theta <- theta - lr g_hat_t.

  Args:
    loss_fn: (params, batch) -> scalar loss.
    eps: perturbation size (> 0).
    key: the run's base PRNG key (kept in `ZOState`).
    two_sided: central (default) or forward difference (see `spsa_gradient`).

  Returns:
    An `optax.GradientTransformationExtraArgs`; `update(updates, state, params,
    batch=batch)` returns g_hat (the incoming updates are ignored).

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["w"] - b) ** 2)
      >>> tx = optax.chain(mezo(loss_fn, 1e-3, key=jax.random.PRNGKey(0)), optax.sgd(1e-2))
      >>> params = {"w": jnp.zeros(3)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state, params, batch=jnp.ones(3))
      >>> params = optax.apply_updates(params, updates)

  References:
    Malladi et al., "Fine-Tuning Language Models with Just Forward Passes",
    NeurIPS 2023.
  """
  perturbation.check_eps("mezo", eps)
  return transform.zeroth_order(
      functools.partial(spsa_gradient, loss_fn, eps=eps, two_sided=two_sided), key=key)
