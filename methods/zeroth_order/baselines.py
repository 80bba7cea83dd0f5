"""The reference and upper bound: first-order fine-tuning with the same interface.

    g = grad_theta L(theta; B_t)        (one forward and one backward pass)

`first_order_gradient` has the estimators' signature and returns a `ZOEstimate`
(projected_grad = |g|), and `first_order(loss_fn)` is the head of an optax chain,
so `optax.chain(first_order(loss_fn), optax.adam(1e-3))` is ordinary fine-tuning
driven exactly like `optax.chain(mezo(loss_fn, key=key), optax.sgd(...))`. (Through
the common loop, first order needs no head: `common.train.train` computes the
gradient itself.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import optax

from methods.zeroth_order import perturbation
from methods.zeroth_order import transform


def first_order_gradient(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any,
                         key: jax.Array, step) -> perturbation.ZOEstimate:
  """The exact minibatch gradient g = grad L(theta; B), as a `ZOEstimate`.

  Args:
    loss_fn: (params, batch) -> scalar.
    params: theta.
    batch: the minibatch.
    key: unused (kept for the estimators' common signature).
    step: unused.

  Returns:
    `ZOEstimate(g, L(theta), |g|, num_forward=1)`.

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["w"] - b) ** 2)
      >>> first_order_gradient(loss_fn, {"w": jnp.zeros(3)}, jnp.ones(3), None, 0).grads
      {'w': Array([-2., -2., -2.], dtype=float32)}
  """
  del key, step
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  return perturbation.ZOEstimate(grads, loss, optax.tree.norm(grads), 1)


def first_order(loss_fn: Callable[[Any, Any], jax.Array]
                ) -> optax.GradientTransformationExtraArgs:
  """First-order gradients as the head of an optax chain: g_hat_t = grad L(theta; B_t).

  Args:
    loss_fn: (params, batch) -> scalar loss.

  Returns:
    An `optax.GradientTransformationExtraArgs` with `ZOState` (its key unused);
    `update(updates, state, params, batch=batch)` returns the gradient.

  Example:
      >>> tx = optax.chain(first_order(loss_fn), optax.adam(1e-3))
      >>> updates, state = tx.update(params, tx.init(params), params, batch=batch)
  """
  return transform.zeroth_order(functools.partial(first_order_gradient, loss_fn), key=None)
