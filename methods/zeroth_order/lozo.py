"""LOZO: zeroth-order estimation with low-rank perturbations and lazily resampled V.

For every 2-D parameter X (m x n) the perturbation is Z = U V^T with U in R^{m x r}
Gaussian, redrawn every step, and V in R^{n x r} Gaussian, redrawn only every `interval`
steps (lazy sampling: V_t = V_{k * interval} for t in [k*interval, (k+1)*interval)).
1-D parameters (norm scales, biases) get z ~ N(0, I). With c the two-point difference
along Z (see `perturbation.finite_difference`),

    g_hat(X) = c * U V^T / r        (2-D),        g_hat(x) = c * z        (1-D).

Both U and V are pure functions of keys: U of fold_in(key, step), V of
fold_in(fold_in(key, -1 mod 2^31), step // interval), so nothing is stored between
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

from methods.zeroth_order import perturbation
from methods.zeroth_order import transform

_V_STREAM = 2**31 - 1


def lozo_direction(params: Any, key: jax.Array, step, *, rank: int, interval: int) -> Any:
  """Z: U V^T for 2-D leaves (r capped at min(m, n)), Gaussian for the others."""
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
  """One LOZO estimate (two-sided, 2 forward passes); 2-D leaves are divided by r."""
  sample = lambda: lozo_direction(params, key, step, rank=rank, interval=interval)
  est = perturbation.finite_difference(loss_fn, params, batch, sample, eps)
  grads = jax.tree.map(lambda g: g / min(rank, *g.shape) if g.ndim == 2 else g, est.grads)
  return est._replace(grads=grads)


def lozo(loss_fn: Callable[[Any, Any], jax.Array], eps: float = 1e-3, *, rank: int = 2,
         interval: int = 50, seed: int = 0):
  """LOZO as the head of an optax chain (see `transform.zeroth_order`)."""
  if not eps > 0 or rank < 1 or interval < 1:
    raise ValueError(f"lozo: eps={eps!r}, rank={rank!r}, interval={interval!r}; expected "
                     "eps > 0, rank >= 1, interval >= 1")
  return transform.zeroth_order(
      functools.partial(lozo_gradient, loss_fn, eps=eps, rank=rank, interval=interval),
      seed=seed)
