"""The 2D fusion pathway: a CNN backbone, the unsupervised fusion losses, and the
base/detail split the 1D pathway recombines with.

Backbone: F = sigmoid(CNN([A, B])), a stack of 3x3 residual conv blocks on the two
stacked sources (a local operator: its receptive field is 2 + 4 * blocks pixels).

Losses (the standard unsupervised image-fusion objective, as in CDDFuse and SwinFusion):

  L = w_int ||F - max(A, B)||_1 + w_grad || |grad F| - max(|grad A|, |grad B|) ||_1
      + w_ssim (1 - (SSIM(F, A) + SSIM(F, B)) / 2),

with |grad| = |Sobel_x| + |Sobel_y| and the 11x11 Gaussian SSIM.

Base/detail split: base(x) = G_sigma * x (a Gaussian low-pass with reflected borders),
detail(x) = x - base(x).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.data import fusion_images
from methods.token_fusion import metrics


class BackboneConfig(NamedTuple):
  features: int = 32
  blocks: int = 3


class LossWeights(NamedTuple):
  intensity: float = 1.0
  gradient: float = 1.0
  ssim: float = 1.0


class FusionCNN(nn.Module):
  """(A, B) (n, H, W) each -> F (n, H, W) in (0, 1)."""
  config: BackboneConfig

  @nn.compact
  def __call__(self, a, b):
    c = self.config
    h = nn.gelu(nn.Conv(c.features, (3, 3))(jnp.stack([a, b], axis=-1)))
    for _ in range(c.blocks):
      r = nn.gelu(nn.Conv(c.features, (3, 3))(h))
      h = h + nn.Conv(c.features, (3, 3))(r)
    return jax.nn.sigmoid(nn.Conv(1, (3, 3))(nn.gelu(h))[..., 0])


def init(key, config: BackboneConfig, image_size: int):
  """Backbone parameters (any image size works once initialised)."""
  x = jnp.zeros((1, image_size, image_size))
  return FusionCNN(config).init(key, x, x)


def apply(params, a, b, config: BackboneConfig):
  """The 2D pathway's fused image; the sources must have the same shape."""
  fusion_images.check_pair(a, b)
  return FusionCNN(config).apply(params, a, b)


def _filter2d(x, kernel):
  """Same-size correlation of (..., H, W) with a small 2-D kernel, reflected borders."""
  kh, kw = kernel.shape
  lead = x.shape[:-2]
  x = x.reshape((-1, 1) + x.shape[-2:])
  x = jnp.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)), mode="reflect")
  y = jax.lax.conv_general_dilated(x, kernel[None, None].astype(x.dtype), (1, 1), "VALID")
  return y.reshape(lead + y.shape[-2:])


_SOBEL_X = np.array([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])


def gradient_magnitude(x):
  """|Sobel_x * x| + |Sobel_y * x| (the fusion loss's gradient), (..., H, W)."""
  k = jnp.asarray(_SOBEL_X)
  return jnp.abs(_filter2d(x, k)) + jnp.abs(_filter2d(x, k.T))


def gaussian_kernel(sigma: float) -> np.ndarray:
  """A normalised 1-D Gaussian of radius ceil(3 sigma)."""
  r = max(1, int(np.ceil(3 * sigma)))
  t = np.arange(-r, r + 1, dtype=np.float64)
  g = np.exp(-0.5 * (t / sigma) ** 2)
  return g / g.sum()


@functools.lru_cache(maxsize=16)
def _blur_matrix(n: int, sigma: float) -> np.ndarray:
  """(n, n) G with (G v)_i = sum_j g_j v_reflect(i + j): the 1-D Gaussian filter with
  reflected borders as a matrix (a wide Gaussian is one matmul per axis, much faster
  than a long convolution on CPU)."""
  g = gaussian_kernel(sigma)
  r = len(g) // 2
  if r >= n:
    raise ValueError(f"base-layer sigma {sigma} is too wide for an image side of {n}")
  eye = np.pad(np.eye(n), ((r, r), (0, 0)), mode="reflect")
  return np.stack([g @ eye[i:i + 2 * r + 1] for i in range(n)])


def base_layer(x, sigma: float):
  """base(x) = G_sigma * x, separable, reflected borders; (..., H, W)."""
  gh = jnp.asarray(_blur_matrix(x.shape[-2], float(sigma)), x.dtype)
  gw = jnp.asarray(_blur_matrix(x.shape[-1], float(sigma)), x.dtype)
  return jnp.einsum("ij,...jk,lk->...il", gh, x, gw)


def detail_layer(x, sigma: float):
  """detail(x) = x - base(x)."""
  return x - base_layer(x, sigma)


def fusion_loss(f, a, b, weights: LossWeights = LossWeights()):
  """The unsupervised fusion loss of the module docstring, averaged over the batch ->
  (loss, {"intensity", "gradient", "ssim"})."""
  intensity = jnp.mean(jnp.abs(f - jnp.maximum(a, b)))
  ga, gb, gf = (gradient_magnitude(x) for x in (a, b, f))
  gradient = jnp.mean(jnp.abs(gf - jnp.maximum(ga, gb)))
  ssim = jnp.mean(jax.vmap(lambda p, q, r: 0.5 * (metrics.ssim(p, r) + metrics.ssim(q, r)))(
      a.reshape((-1,) + a.shape[-2:]), b.reshape((-1,) + b.shape[-2:]),
      f.reshape((-1,) + f.shape[-2:])))
  total = (weights.intensity * intensity + weights.gradient * gradient
           + weights.ssim * (1.0 - ssim))
  return total, {"intensity": intensity, "gradient": gradient, "ssim": ssim}


def make_loss_fn(config: BackboneConfig, weights: LossWeights = LossWeights()):
  """loss_fn(params, batch, key) for ``common.train``; batch = {"a", "b"} (B, H, W)."""
  def loss_fn(params, batch, key):
    del key
    a, b = batch["a"], batch["b"]
    return fusion_loss(apply(params, a, b, config), a, b, weights)
  return loss_fn
