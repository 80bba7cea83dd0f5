"""LOZO: zeroth-order estimation with low-rank perturbations and lazily resampled V.

For every 2-D parameter X (m x n) the perturbation is Z = U V^T with U in R^{m x r}
Gaussian, redrawn every step, and V in R^{n x r} Gaussian, redrawn only every `interval`
steps (lazy sampling: V_t = V_{k * interval} for t in [k*interval, (k+1)*interval)).
1-D parameters (norm scales, biases) get z ~ N(0, I). With c the two-point difference
along Z (see `perturbation.finite_difference`),

    g_hat(X) = c * U V^T / r        (2-D),        g_hat(x) = c * z        (1-D).

Both U and V are pure functions of keys: U of fold_in(key, step), V of
fold_in(fold_in(key, 2^31 - 1), step // interval), so nothing is stored between
steps and a resumed run reproduces them exactly. The layout does not matter for LOZO:
our kernels are (in, out), so m = d_in and n = d_out.

References:
  Chen et al., "Enhancing Zeroth-order Fine-tuning for Language Models with Low-rank
  Structures" (LOZO), ICLR 2025.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import optax

from methods.zeroth_order import perturbation
from methods.zeroth_order import transform

_V_STREAM = 2**31 - 1


def lozo_direction(params: Any, key: jax.Array, step, *, rank: int, interval: int) -> Any:
  """Z: U V^T for 2-D leaves, z ~ N(0, I) for the others.

      U ~ N(0, 1)^{m x r}  from fold_in(key, step)                           (every step)
      V ~ N(0, 1)^{n x r}  from fold_in(fold_in(key, 2^31 - 1), step // interval)  (lazy)

  with r = min(rank, m, n).

  Args:
    params: the pytree whose structure, shapes and dtypes Z takes.
    key: the run's base key.
    step: the step index.
    rank: r (>= 1).
    interval: V is redrawn every `interval` steps.

  Returns:
    Z, a pytree like `params`.

  Example:
      >>> z = lozo_direction({"k": jnp.zeros((6, 5))}, jax.random.PRNGKey(0), 3,
      ...                    rank=2, interval=4)
      >>> int(jnp.linalg.matrix_rank(z["k"]))
      2
  """
  u_keys = perturbation.leaf_keys(params, jax.random.fold_in(key, step))
  v_base = jax.random.fold_in(jax.random.fold_in(key, _V_STREAM), step // interval)
  v_keys = perturbation.leaf_keys(params, v_base)

  def leaf(p, ku, kv):
    if p.ndim != 2:
      return jax.random.normal(ku, p.shape, p.dtype)
    r = min(rank, *p.shape)
    u = jax.random.normal(ku, (p.shape[0], r), p.dtype)
    v = jax.random.normal(kv, (p.shape[1], r), p.dtype)
    return u @ v.T

  return jax.tree.map(leaf, params, u_keys, v_keys)


def lozo_gradient(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any,
                  key: jax.Array, step, *, eps: float = 1e-3, rank: int = 2,
                  interval: int = 50) -> perturbation.ZOEstimate:
  """One LOZO estimate (two-sided, 2 forward passes).

      c = (L(theta + eps Z) - L(theta - eps Z)) / (2 eps),   Z = lozo_direction(...)
      g_hat(X) = c U V^T / r  (2-D leaves),     g_hat(x) = c z  (others)

  Args:
    loss_fn: (params, batch) -> scalar.
    params: theta.
    batch: the minibatch, passed to loss_fn.
    key: the run's base key (V's lazy stream is derived from it, so it must be
      the same at every step).
    step: the step index.
    eps: perturbation size.
    rank: r.
    interval: V is redrawn every `interval` steps.

  Returns:
    `ZOEstimate` (num_forward = 2).

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["k"] - b) ** 2)
      >>> est = lozo_gradient(loss_fn, {"k": jnp.zeros((6, 5))}, jnp.ones((6, 5)),
      ...                     jax.random.PRNGKey(0), 0, rank=2, interval=4)
  """
  sample = lambda: lozo_direction(params, key, step, rank=rank, interval=interval)
  est = perturbation.finite_difference(loss_fn, params, batch, sample, eps)
  grads = jax.tree.map(lambda g: g / min(rank, *g.shape) if g.ndim == 2 else g, est.grads)
  return est._replace(grads=grads)


def lozo(loss_fn: Callable[[Any, Any], jax.Array], eps: float = 1e-3, *, key: jax.Array,
         rank: int = 2, interval: int = 50) -> optax.GradientTransformationExtraArgs:
  """LOZO's estimator as the head of an optax chain.

      g_hat_t(X) = c_t U_t V_{floor(t / interval)}^T / r,
      c_t = (L(theta + eps Z_t; B_t) - L(theta - eps Z_t; B_t)) / (2 eps)

  Args:
    loss_fn: (params, batch) -> scalar loss.
    eps: perturbation size (> 0).
    key: the run's base PRNG key (kept in `ZOState`).
    rank: r >= 1 of the low-rank perturbations.
    interval: V is redrawn every `interval` >= 1 steps (lazy sampling).

  Returns:
    An `optax.GradientTransformationExtraArgs`; `update(updates, state, params,
    batch=batch)` returns g_hat.

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["k"] - b) ** 2)
      >>> tx = optax.chain(lozo(loss_fn, 1e-3, key=jax.random.PRNGKey(0), rank=2),
      ...                  optax.sgd(1e-2))
      >>> params = {"k": jnp.zeros((6, 5))}
      >>> updates, state = tx.update(params, tx.init(params), params,
      ...                            batch=jnp.ones((6, 5)))

  References:
    Chen et al., "Enhancing Zeroth-order Fine-tuning for Language Models with
    Low-rank Structures" (LOZO), ICLR 2025.
  """
  perturbation.check_eps("lozo", eps)
  perturbation.check_positive_int("lozo", rank=rank, interval=interval)
  return transform.zeroth_order(
      functools.partial(lozo_gradient, loss_fn, eps=eps, rank=rank, interval=interval),
      key=key)
