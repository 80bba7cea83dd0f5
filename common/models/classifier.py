"""Image classifiers whose last layer is a Dense named `head` (NHWC inputs, logits out).

Methods that treat the classifier layer apart (FGR projects its rectified gradient on
the head; fine-tuning variants freeze the body) find it as the params subtree
`params["params"]["head"]`.

* `SmallCNN`: two 3x3 conv blocks (ReLU, 2x2 max-pool after each but the last at
  sides < 8), a hidden Dense layer and the head; ~40k parameters on 8x8 digits.
* `ResNet`: the CIFAR ResNet of He et al. (2016): a 3x3 stem, stages of basic blocks
  (two 3x3 convs, identity or 1x1 projection shortcut), global average pooling and
  the head. Normalisation is GroupNorm, so the model is a pure function of its
  params (no batch statistics to carry); the paper's code uses BatchNorm.

Example:
    >>> net = SmallCNN(num_classes=10)
    >>> params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))
    >>> net.apply(params, jnp.zeros((4, 8, 8, 1))).shape
    (4, 10)
    >>> sorted(params["params"])[-1]
    'head'
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def _check_nhwc(x: jax.Array, name: str) -> None:
  if x.ndim != 4:
    raise ValueError(f"{name} expects images of shape (B, H, W, C), got {x.shape}")


class SmallCNN(nn.Module):
  """conv3x3(c_1) -> ReLU -> pool -> ... -> Dense(dense) -> ReLU -> head (logits)."""
  num_classes: int = 10
  channels: Sequence[int] = (16, 32)
  dense: int = 64

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    _check_nhwc(x, "SmallCNN")
    for c in self.channels:
      x = nn.relu(nn.Conv(c, (3, 3))(x))
      if min(x.shape[1:3]) >= 4:
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Dense(self.dense)(x.reshape(x.shape[0], -1)))
    return nn.Dense(self.num_classes, name="head")(x)


class BasicBlock(nn.Module):
  """y = relu(x' + GN(conv3x3(relu(GN(conv3x3_s(x)))))), x' = x or a 1x1 projection."""
  channels: int
  stride: int = 1

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    groups = min(8, self.channels)
    h = nn.Conv(self.channels, (3, 3), strides=self.stride, use_bias=False)(x)
    h = nn.relu(nn.GroupNorm(num_groups=groups)(h))
    h = nn.Conv(self.channels, (3, 3), use_bias=False)(h)
    h = nn.GroupNorm(num_groups=groups)(h)
    if self.stride != 1 or x.shape[-1] != self.channels:
      x = nn.Conv(self.channels, (1, 1), strides=self.stride, use_bias=False)(x)
      x = nn.GroupNorm(num_groups=groups)(x)
    return nn.relu(x + h)


class ResNet(nn.Module):
  """CIFAR ResNet: stem, `stage_sizes[i]` blocks of `widths[i]` channels (stride 2 at
  the start of every stage but the first), global average pool, head.
  ResNet-20: stage_sizes (3, 3, 3), widths (16, 32, 64); ResNet-110: (18, 18, 18)."""
  num_classes: int = 10
  stage_sizes: Sequence[int] = (3, 3, 3)
  widths: Sequence[int] = (16, 32, 64)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    _check_nhwc(x, "ResNet")
    if len(self.stage_sizes) != len(self.widths):
      raise ValueError(f"stage_sizes {tuple(self.stage_sizes)} and widths "
                       f"{tuple(self.widths)} must have the same length")
    x = nn.Conv(self.widths[0], (3, 3), use_bias=False)(x)
    x = nn.relu(nn.GroupNorm(num_groups=min(8, self.widths[0]))(x))
    for i, (blocks, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for j in range(blocks):
        x = BasicBlock(width, stride=2 if (i > 0 and j == 0) else 1)(x)
    return nn.Dense(self.num_classes, name="head")(jnp.mean(x, axis=(1, 2)))
