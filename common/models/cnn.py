"""A small convolutional velocity network for 8x8 images, conditioned on time and class.

No down/up-sampling (8x8 is small enough): conv stacks at full resolution, each
block adding a projection of the conditioning embedding e = MLP([phi(t), c]):

    h_0 = conv3x3(x),  h_{i+1} = h_i + conv3x3(gelu(GroupNorm(h_i) + Dense(e))),
    v = conv3x3(gelu(h_L)),

with phi(t) = [t, sin(2 pi k t), cos(2 pi k t)] and c a conditioning vector (class
one-hot, or zeros for the unconditional branch).

Example:
    >>> net = ConditionalCNN(channels=32, num_blocks=2)
    >>> x = jnp.zeros((4, 8, 8, 1)); t = jnp.zeros((4,)); c = jnp.zeros((4, 10))
    >>> params = net.init(jax.random.PRNGKey(0), t, x, c)
    >>> net.apply(params, t, x, c).shape
    (4, 8, 8, 1)
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def _time_features(t: jax.Array, num: int = 8) -> jax.Array:
  k = jnp.arange(1, num // 2 + 1, dtype=t.dtype)
  ang = 2 * jnp.pi * t[:, None] * k[None, :]
  return jnp.concatenate([t[:, None], jnp.sin(ang), jnp.cos(ang)], axis=1)


class ConditionalCNN(nn.Module):
  """v_theta(t, x, c) for images x (B, H, W, C_in); returns the same shape."""
  channels: int = 32
  num_blocks: int = 3
  embed_dim: int = 64

  @nn.compact
  def __call__(self, t: jax.Array, x: jax.Array, cond: jax.Array) -> jax.Array:
    if x.ndim != 4:
      raise ValueError(f"ConditionalCNN expects x of shape (B, H, W, C), got {x.shape}")
    t = jnp.broadcast_to(jnp.asarray(t, x.dtype), x.shape[:1])
    e = jnp.concatenate([_time_features(t), cond.astype(x.dtype)], axis=-1)
    e = nn.Dense(self.embed_dim)(nn.gelu(nn.Dense(self.embed_dim)(e)))
    h = nn.Conv(self.channels, (3, 3))(x)
    for _ in range(self.num_blocks):
      g = nn.GroupNorm(num_groups=min(8, self.channels))(h)
      g = g + nn.Dense(self.channels)(e)[:, None, None, :]
      h = h + nn.Conv(self.channels, (3, 3))(nn.gelu(g))
    return nn.Conv(x.shape[-1], (3, 3))(nn.gelu(h))
