"""The agent's networks over xminigrid's symbolic view (tile id, colour id per cell).

- `GridEncoder`: embeds tile and colour ids (16 + 16 dims), then two 2x2 convolutions
  and a dense layer: the visual encoder (online; its EMA copy is the target).
- `ActorCritic`: a `GridEncoder`, then separate policy-logit and value MLP heads.

Example:
    >>> net = ActorCritic(num_actions=6)
    >>> params = net.init(key, obs)["params"]
    >>> logits, value = net.apply({"params": params}, obs)    # (N, 6), (N,)
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

NUM_TILES = 16
NUM_COLOURS = 16


class GridEncoder(nn.Module):
  features: int = 128

  @nn.compact
  def __call__(self, obs):
    obs = obs.astype(jnp.int32)
    x = jnp.concatenate([nn.Embed(NUM_TILES, 16, name="tile")(obs[..., 0]),
                         nn.Embed(NUM_COLOURS, 16, name="colour")(obs[..., 1])], axis=-1)
    x = nn.relu(nn.Conv(32, (2, 2), padding="VALID", name="conv1")(x))
    x = nn.relu(nn.Conv(64, (2, 2), padding="VALID", name="conv2")(x))
    x = x.reshape(x.shape[:-3] + (-1,))
    return nn.relu(nn.Dense(self.features, name="dense")(x))


class ActorCritic(nn.Module):
  num_actions: int
  hidden: int = 64

  @nn.compact
  def __call__(self, obs):
    h = GridEncoder(name="encoder")(obs)
    pi = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01),
                  name="policy_out")(nn.tanh(nn.Dense(self.hidden, name="policy_hidden")(h)))
    v = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0),
                 name="value_out")(nn.tanh(nn.Dense(self.hidden, name="value_hidden")(h)))
    return pi, v[..., 0]
