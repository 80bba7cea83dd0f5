"""Zeroth-order estimators as the head of an optax chain, and a donating jitted step.

`zeroth_order(estimate_fn)` wraps a pure estimator

    estimate_fn(params, batch, key, step) -> ZOEstimate

into an `optax.GradientTransformationExtraArgs` whose state holds the run's key and
the step counter (explicit, checkpointable) plus the last loss and projected gradient
for logging. Its `update(updates, state, params, *, batch)` ignores the incoming
`updates` (pass the params or zeros: the estimate replaces them) and returns g_hat, so

    tx = optax.chain(zeroth_order(est), optax.clip_by_global_norm(1.0),
                     optax.sgd(optax.cosine_decay_schedule(1e-3, 1000)))

is ZO-SGD with clipping and a schedule, and any optax transformation can follow.
The first-order baseline (`baselines.first_order`) has the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class ZOState(NamedTuple):
  """key: the run's base key; step: updates done; loss, projected_grad: of the last one."""
  key: jax.Array
  step: jax.Array
  loss: jax.Array
  projected_grad: jax.Array


def zeroth_order(estimate_fn: Callable, *, seed: int = 0
                 ) -> optax.GradientTransformationExtraArgs:
  """The estimator `estimate_fn(params, batch, key, step) -> ZOEstimate` as an optax
  transformation; `update` needs `params` and the keyword `batch`."""

  def init(params):
    del params
    return ZOState(jax.random.PRNGKey(seed), jnp.zeros((), jnp.int32),
                   jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))

  def update(updates, state, params=None, *, batch=None, **extra):
    del updates, extra
    if params is None or batch is None:
      raise ValueError("a zeroth-order transformation needs update(..., params, batch=...)")
    est = estimate_fn(params, batch, state.key, state.step)
    return est.grads, ZOState(state.key, state.step + 1,
                              jnp.asarray(est.loss, jnp.float32),
                              jnp.asarray(est.projected_grad, jnp.float32))

  return optax.GradientTransformationExtraArgs(init, update)


def find_zo_state(opt_state) -> ZOState | None:
  """The first `ZOState` inside a (chained) optax state, or None."""
  for node in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, ZOState)):
    if isinstance(node, ZOState):
      return node
  return None


def make_step(tx: optax.GradientTransformation, *, donate: bool = True):
  """A jitted `step(params, opt_state, batch) -> (params, opt_state)`.

  With donate=True the params and optimizer state buffers are donated, so XLA may
  update them in place (peak memory ~ parameters + one forward pass for ZO methods).
  """

  def step(params, opt_state, batch):
    updates, opt_state = tx.update(params, opt_state, params, batch=batch)
    return optax.apply_updates(params, updates), opt_state

  return jax.jit(step, donate_argnums=(0, 1) if donate else ())
