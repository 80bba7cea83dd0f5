"""Vision-transformer pieces shared by bidirectional token models.

``Block`` is the pre-LN transformer block with full (bidirectional) self-attention,

  h <- h + MHA(LN(h)),   h <- h + W_2 gelu(W_1 LN(h)),

used by Q-Tab's masked table transformer and by the 1D image tokenizer of token
fusion (TiTok's ViT encoder and decoder). ``patchify`` / ``unpatchify`` move between
images (..., H, W) and rows of non-overlapping p x p patches (..., (H/p)(W/p), p^2) in
row-major patch order, as a ViT's patch embedding reads them.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class Block(nn.Module):
  """Pre-LN transformer block with full (bidirectional) self-attention."""
  width: int
  heads: int
  mlp_ratio: int

  @nn.compact
  def __call__(self, h):
    a = nn.LayerNorm()(h)
    h = h + nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.width)(a, a)
    m = nn.LayerNorm()(h)
    m = nn.Dense(self.mlp_ratio * self.width)(m)
    return h + nn.Dense(self.width)(nn.gelu(m))


def check_patch_size(shape, patch_size: int) -> None:
  """One-line ValueError unless the patch size divides both image sides."""
  h, w = shape[-2], shape[-1]
  if patch_size < 1 or h % patch_size or w % patch_size:
    raise ValueError(f"image size {h}x{w} is not divisible by the patch size {patch_size}")


def patchify(images: jax.Array, patch_size: int) -> jax.Array:
  """(..., H, W) -> (..., (H/p)(W/p), p^2), patches in row-major order.

  Example:
    >>> patchify(jnp.zeros((2, 8, 8)), 4).shape
    (2, 4, 16)
  """
  check_patch_size(images.shape, patch_size)
  *lead, h, w = images.shape
  p = patch_size
  x = images.reshape(*lead, h // p, p, w // p, p)
  x = jnp.moveaxis(x, -3, -2)
  return x.reshape(*lead, (h // p) * (w // p), p * p)


def unpatchify(patches: jax.Array, patch_size: int, height: int, width: int) -> jax.Array:
  """The inverse of ``patchify``: (..., (H/p)(W/p), p^2) -> (..., H, W)."""
  *lead, _, _ = patches.shape
  p = patch_size
  x = patches.reshape(*lead, height // p, width // p, p, p)
  x = jnp.moveaxis(x, -2, -3)
  return x.reshape(*lead, height, width)
