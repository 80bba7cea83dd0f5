"""Zeroth-order estimators as the head of an optax chain, and a jitted step (donation opt-in).

`zeroth_order(estimate_fn, key=key)` wraps a pure estimator

    estimate_fn(params, batch, key, step) -> ZOEstimate

into an `optax.GradientTransformationExtraArgs` whose state holds the run's key and
the step counter (explicit, checkpointable) plus the last loss and projected gradient
for logging. Its `update(updates, state, params, *, batch)` ignores the incoming
`updates` (pass the params or zeros: the estimate replaces them) and returns g_hat, so

    tx = optax.chain(zeroth_order(est, key=key), optax.clip_by_global_norm(1.0),
                     optax.sgd(optax.cosine_decay_schedule(1e-3, 1000)))

is ZO-SGD with clipping and a schedule, and any optax transformation can follow.
The first-order baseline (`baselines.first_order`) has the same shape. The same
chain trains through the common loop,
`common.train.train(..., optimizer=tx, gradient_free=True)`, which passes the batch
as an extra argument and logs `ZOState.loss`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from methods.zeroth_order import perturbation

class ZOState(NamedTuple):
  """The state of a zeroth-order head.

  Attributes:
    key: the run's base key; step t's perturbation comes from (key, t).
    step: int32, the number of estimates made so far.
    loss: float32, the loss the last estimate measured (`ZOEstimate.loss`); the
      common loop logs it.
    projected_grad: float32, the last estimate's scalar c.
  """
  key: jax.Array
  step: jax.Array
  loss: jax.Array
  projected_grad: jax.Array


def zeroth_order(estimate_fn: Callable, *, key: jax.Array | None
                 ) -> optax.GradientTransformationExtraArgs:
  """A gradient estimator as the head of an optax chain.

      g_hat_t = estimate_fn(params, batch_t, key, t).grads,   t = state.step

  The incoming updates are replaced by g_hat_t; the transformations after it in a
  chain (clipping, schedules, SGD, Adam) see g_hat_t as the gradient.

  Args:
    estimate_fn: `(params, batch, key, step) -> ZOEstimate`, e.g.
      `functools.partial(spsa_gradient, loss_fn, eps=1e-3)`.
    key: the run's base PRNG key, kept in the state (a raw `jax.random.PRNGKey`
      checkpoints with orbax); None for a deterministic estimator (first order).

  Returns:
    An `optax.GradientTransformationExtraArgs` with `ZOState`; its
    `update(updates, state, params, *, batch, **extra)` needs `params` and the
    keyword `batch` and ignores other extra arguments.

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["w"] - b) ** 2)
      >>> est = functools.partial(spsa_gradient, loss_fn, eps=1e-3)
      >>> tx = optax.chain(zeroth_order(est, key=jax.random.PRNGKey(0)), optax.sgd(0.1))
      >>> params = {"w": jnp.zeros(3)}
      >>> updates, state = tx.update(params, tx.init(params), params, batch=jnp.ones(3))
  """
  perturbation.check_key("zeroth_order", key, allow_none=True)
  base_key = jnp.zeros((2,), jnp.uint32) if key is None else key

  def init(params):
    del params
    return ZOState(base_key, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32),
                   jnp.zeros((), jnp.float32))

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
  """The first `ZOState` inside a (chained) optax state, or None.

  Example:
      >>> find_zo_state(state).loss   # the loss of the last step
  """
  for node in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, ZOState)):
    if isinstance(node, ZOState):
      return node
  return None


def make_step(tx: optax.GradientTransformation, *, donate: bool = False):
  """A jitted `step(params, opt_state, batch) -> (params, opt_state)`:

      updates, opt_state = tx.update(params, opt_state, params, batch=batch)
      params = params + updates

  For a loop with checkpoints, metrics and sharding use `common.train.train(...,
  gradient_free=True)`; this bare step is what the memory measurements compile.

  Donation is opt-in, as in optax (which never donates): by default the arrays
  passed in stay valid, so the same initial params can start several optimisers.
  With `donate=True` XLA may reuse the params' and optimizer state's buffers for
  the outputs (peak memory ~ parameters + one forward pass for ZO methods, the
  figure the memory comparisons report); the arrays passed in are then deleted, and
  using them again raises "Array has been deleted". Pass a copy
  (`jax.tree.map(jnp.copy, params)`) if you need the originals.

  Args:
    tx: a chain headed by a zeroth-order (or first-order) head.
    donate: donate the params and optimizer state buffers (default False).

  Returns:
    The jitted step (`.lower(params, opt_state, batch).compile()` gives its
    compiled memory analysis).

  Example:
      >>> step = make_step(tx)                       # params stay usable
      >>> new_params, state = step(params, tx.init(params), batch)
      >>> fast = make_step(tx, donate=True)          # in place; params are consumed
      >>> params, state = fast(jax.tree.map(jnp.copy, params), tx.init(params), batch)
  """
  if not isinstance(tx, optax.GradientTransformation):
    raise TypeError(f"make_step: tx={tx!r}; expected an optax GradientTransformation "
                    "(e.g. optax.chain(mezo(...), optax.sgd(lr)))")

  def step(params, opt_state, batch):
    updates, opt_state = tx.update(params, opt_state, params, batch=batch)
    return optax.apply_updates(params, updates), opt_state

  return jax.jit(step, donate_argnums=(0, 1) if donate else ())
