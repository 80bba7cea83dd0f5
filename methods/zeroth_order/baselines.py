"""The reference and upper bound: first-order fine-tuning with the same interface.

    g = grad_theta L(theta; B_t)        (one forward and one backward pass)

`first_order_gradient` has the estimators' signature and returns a `ZOEstimate`
(projected_grad = |g|), and `first_order(loss_fn)` is the head of an optax chain,
so `optax.chain(first_order(loss_fn), optax.adam(1e-3))` is ordinary fine-tuning
driven exactly like `optax.chain(mezo(loss_fn), optax.sgd(...))`.
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
  """The exact minibatch gradient (key and step unused; kept for the common signature)."""
  del key, step
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  return perturbation.ZOEstimate(grads, loss, optax.global_norm(grads), 1)


def first_order(loss_fn: Callable[[Any, Any], jax.Array], *, seed: int = 0):
  """First-order gradients as the head of an optax chain."""
  return transform.zeroth_order(functools.partial(first_order_gradient, loss_fn), seed=seed)
