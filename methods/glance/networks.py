"""The agent's networks over xminigrid's symbolic view (tile id, colour id per cell).

- `GridEncoder`: embeds tile and colour ids (16 + 16 dims), then two 2x2 convolutions
  (`PatchConv`) and a dense layer: the visual encoder (online; its EMA copy is the
  target).
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


class PatchConv(nn.Module):
  """A stride-1 VALID convolution written as its patches times the kernel:

      y[b, i, j] = concat_{u < kh, v < kw}(x[b, i + u, j + v]) @ K.reshape(kh kw C, F) + bias

  the same parameters (names, shapes, initialisers) and values as `nn.Conv(F, (kh, kw),
  padding="VALID")`. Why not `nn.Conv`: XLA:CPU's `ConvCanonicalization` pass, which
  rewrites a convolution into the form its fast (Eigen) kernels take, visits only a
  program's entry computation, so the gradient convolutions of PPO's scanned minibatch
  steps (a loop body) ran through the naive loop emitter, 10x slower (2.1 s against
  0.2 s for 4 steps, measured); slices and one matmul are fast anywhere.
  """
  features: int
  kernel_size: tuple[int, int] = (2, 2)

  @nn.compact
  def __call__(self, x):   # x (..., H, W, C) -> (..., H - kh + 1, W - kw + 1, features)
    kh, kw = self.kernel_size
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (kh, kw, x.shape[-1], self.features))
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
    h, w = x.shape[-3] - kh + 1, x.shape[-2] - kw + 1
    patches = jnp.concatenate([x[..., u:u + h, v:v + w, :] for u in range(kh)
                               for v in range(kw)], axis=-1)
    return patches @ kernel.reshape(-1, self.features) + bias


class GridEncoder(nn.Module):
  features: int = 128

  @nn.compact
  def __call__(self, obs):
    obs = obs.astype(jnp.int32)
    x = jnp.concatenate([nn.Embed(NUM_TILES, 16, name="tile")(obs[..., 0]),
                         nn.Embed(NUM_COLOURS, 16, name="colour")(obs[..., 1])], axis=-1)
    x = nn.relu(PatchConv(32, name="conv1")(x))
    x = nn.relu(PatchConv(64, name="conv2")(x))
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
