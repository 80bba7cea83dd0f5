"""The conditional velocity/drift network for vectors: common.models.MLP on [x, t-features, c].

``apply(params, t, x, cond) -> (B, d)`` with t (B,), x (B, d) and cond (B, C) a
conditioning vector: a class one-hot, or zeros for the unconditional ("null")
branch of classifier-free guidance. Because cond is a continuous vector, condition
annealing (CADS) can add noise to it. The image network with the same signature is
``common.models.cnn.ConditionalCNN``.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from common.models import MLP


def time_features(t: jax.Array, num: int = 8) -> jax.Array:
  """phi(t) = [t, sin(2 pi k t), cos(2 pi k t)] for k = 1..num//2.

  Args:
    t: times (B,).
    num: number of Fourier features (even).

  Returns:
    (B, 1 + num) features.

  Example:
    >>> time_features(jnp.zeros(3)).shape   # (3, 9)
  """
  k = jnp.arange(1, num // 2 + 1, dtype=t.dtype)
  ang = 2 * jnp.pi * t[:, None] * k[None, :]
  return jnp.concatenate([t[:, None], jnp.sin(ang), jnp.cos(ang)], axis=1)


class ConditionalMLP(nn.Module):
  """v_theta(t, x, c) = MLP([x, phi(t), c]) with output width ``dim``.

  Attributes:
    hidden: widths of the hidden layers.
    dim: output width (the data dimension).

  Example:
    >>> model = ConditionalMLP(hidden=(64, 64), dim=2)
    >>> params = model.init(key, jnp.zeros((1,)), jnp.zeros((1, 2)), jnp.zeros((1, 3)))
    >>> model.apply(params, t, x, cond)   # (B, 2)
  """
  hidden: Sequence[int]
  dim: int

  @nn.compact
  def __call__(self, t: jax.Array, x: jax.Array, cond: jax.Array) -> jax.Array:
    if x.ndim != 2 or cond.ndim != 2 or cond.shape[0] != x.shape[0]:
      raise ValueError(f"ConditionalMLP takes x (B, d) and cond (B, C), got x {x.shape} "
                       f"and cond {cond.shape}")
    if jnp.ndim(t) > 1 or (jnp.ndim(t) == 1 and jnp.shape(t)[0] not in (1, x.shape[0])):
      raise ValueError(f"ConditionalMLP takes t as a scalar or ({x.shape[0]},), got "
                       f"{jnp.shape(t)}")
    t = jnp.broadcast_to(jnp.asarray(t, x.dtype), x.shape[:1])
    h = jnp.concatenate([x, time_features(t), cond.astype(x.dtype)], axis=-1)
    return MLP(tuple(self.hidden) + (self.dim,), name="mlp")(h)
