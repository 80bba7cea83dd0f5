"""A compact 1D image tokenizer in the style of TiTok (Yu et al. 2024, "An Image is
Worth 32 Tokens for Reconstruction and Generation").

Encoder: the image's p x p patches, embedded, are concatenated with K learnable latent
tokens and passed through a ViT; only the K latent outputs are kept and projected to b
dimensions, z_k in R^b. They are L2-normalised and quantised with lookup-free
quantisation (``common.models.lfq``, the quantiser Q-Tab's column tokenizer uses) at
scale 1 / sqrt(b), so every code c_k = sign(z_k) / sqrt(b) is itself a unit vector:
the image becomes K discrete tokens in [0, 2^b).

Decoder: the K quantised codes, embedded, are concatenated with (H/p)(W/p) copies of a
learned mask token (plus position embeddings); a ViT maps the mask positions to
patches, which are reassembled into the image.

Training (once, on crops of real photos; the tokenizer is then frozen) minimises

  L = ||D(q(z)) - x||^2 + 0.1 L_entropy + 0.25 ||z - sg(q(z))||^2,

the reconstruction (on the [-1, 1] pixel scale the networks see; images are in [0, 1]
outside), MAGVIT-v2's entropy term and TiTok's commitment weight 0.25 on the unit-norm
codes, with straight-through gradients through q.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from common.models import lfq
from common.models import vit


class TokenizerConfig(NamedTuple):
  """Image side (square images), patch size p, K latent tokens, b bits per token
  (vocabulary 2^b), the ViTs' width / depth / heads, and the LFQ loss weights."""
  image_size: int = 64
  patch_size: int = 8
  num_tokens: int = 32
  bits: int = 10
  width: int = 128
  depth: int = 2
  heads: int = 4
  mlp_ratio: int = 4
  entropy_weight: float = 0.1
  commit_weight: float = 0.25

  @property
  def num_patches(self) -> int:
    return (self.image_size // self.patch_size) ** 2

  @property
  def scale(self) -> float:
    """The LFQ scale that makes every code a unit vector."""
    return float(self.bits) ** -0.5


def check_config(config: TokenizerConfig) -> None:
  """One-line ValueErrors naming the bad field."""
  vit.check_patch_size((config.image_size, config.image_size), config.patch_size)
  for name in ("num_tokens", "bits", "width", "depth", "heads", "mlp_ratio"):
    if getattr(config, name) < 1:
      raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
  if config.bits > lfq.MAX_ENTROPY_BITS:
    raise ValueError(f"bits must be <= {lfq.MAX_ENTROPY_BITS} (the entropy term enumerates "
                     f"2^bits codes), got {config.bits}")
  if config.width % config.heads:
    raise ValueError(f"width {config.width} is not a multiple of heads {config.heads}")


def check_images(images, config: TokenizerConfig) -> None:
  """Images must be (..., S, S) with S = config.image_size (divisible by the patch)."""
  shape = tuple(images.shape)
  if len(shape) < 2:
    raise ValueError(f"images must have shape (..., H, W), got {shape}")
  vit.check_patch_size(shape, config.patch_size)
  if shape[-2:] != (config.image_size, config.image_size):
    raise ValueError(f"images are {shape[-2]}x{shape[-1]}, the tokenizer was built for "
                     f"{config.image_size}x{config.image_size}")


def _positions(module: nn.Module, name: str, n: int, width: int):
  # Unit-scale embeddings: at ViT's usual 0.02 the mask tokens of the decoder are
  # nearly identical and a small model learns little beyond each image's mean.
  return module.param(name, nn.initializers.normal(1.0), (n, width))


class TiTok(nn.Module):
  """encode: images (n, S, S) -> z (n, K, b) unit vectors; decode: codes (n, K, b) ->
  images (n, S, S)."""
  config: TokenizerConfig

  def setup(self):
    c = self.config
    blocks = lambda: [vit.Block(c.width, c.heads, c.mlp_ratio) for _ in range(c.depth)]
    self.patch_embed = nn.Dense(c.width)
    self.enc_blocks, self.dec_blocks = blocks(), blocks()
    self.enc_norm, self.dec_norm = nn.LayerNorm(), nn.LayerNorm()
    self.to_code = nn.Dense(c.bits)
    self.code_embed = nn.Dense(c.width)
    self.to_patch = nn.Dense(c.patch_size ** 2)
    self.latents = _positions(self, "latents", c.num_tokens, c.width)
    self.enc_patch_pos = _positions(self, "enc_patch_pos", c.num_patches, c.width)
    self.dec_patch_pos = _positions(self, "dec_patch_pos", c.num_patches, c.width)
    self.dec_token_pos = _positions(self, "dec_token_pos", c.num_tokens, c.width)
    self.mask_token = self.param("mask_token", nn.initializers.normal(0.02), (c.width,))

  def encode(self, images):
    c = self.config
    patches = vit.patchify(2.0 * images - 1.0, c.patch_size)
    h = self.patch_embed(patches) + self.enc_patch_pos
    latents = jnp.broadcast_to(self.latents, (*h.shape[:-2], *self.latents.shape))
    h = jnp.concatenate([h, latents], axis=-2)
    for block in self.enc_blocks:
      h = block(h)
    z = self.to_code(self.enc_norm(h[..., c.num_patches:, :]))
    return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-6)

  def decode(self, codes):
    c = self.config
    tokens = self.code_embed(codes) + self.dec_token_pos
    masks = jnp.broadcast_to(self.mask_token + self.dec_patch_pos,
                             (*tokens.shape[:-2], c.num_patches, c.width))
    h = jnp.concatenate([masks, tokens], axis=-2)
    for block in self.dec_blocks:
      h = block(h)
    patches = self.to_patch(self.dec_norm(h[..., :c.num_patches, :]))
    return 0.5 + 0.5 * vit.unpatchify(patches, c.patch_size, c.image_size, c.image_size)

  def __call__(self, images):
    return self.decode(self.encode(images))


def init(key, config: TokenizerConfig):
  """Parameters of the tokenizer.

  Example:
    >>> params = init(jax.random.key(0), TokenizerConfig(image_size=32))
  """
  check_config(config)
  return TiTok(config).init(key, jnp.zeros((1, config.image_size, config.image_size)))


def encode(params, images, config: TokenizerConfig) -> lfq.Quantized:
  """Images (..., S, S) -> the quantised latents: ``z_hat`` (..., K, b) (unit-norm codes,
  straight-through), ``indices`` (..., K, 1) the tokens."""
  check_images(images, config)
  z = TiTok(config).apply(params, images, method=TiTok.encode)
  return lfq.quantize(z, 1, config.scale)


def quantize(z, config: TokenizerConfig) -> jax.Array:
  """Continuous latents (..., K, b) -> the nearest codes (straight-through): the L2
  direction's signs at scale 1/sqrt(b). Edited tokens pass through this, so the
  decoder only ever sees valid codes."""
  return lfq.quantize(z, 1, config.scale).z_hat


def decode(params, codes, config: TokenizerConfig) -> jax.Array:
  """Codes (..., K, b) -> images (..., S, S)."""
  return TiTok(config).apply(params, codes, method=TiTok.decode)


def tokens(params, images, config: TokenizerConfig) -> jax.Array:
  """Images (..., S, S) -> int32 tokens (..., K) in [0, 2^b)."""
  return encode(params, images, config).indices[..., 0]


def detokenize(params, tokens_, config: TokenizerConfig) -> jax.Array:
  """int tokens (..., K) -> images (..., S, S)."""
  return decode(params, lfq.dequantize(tokens_[..., None], config.bits, config.scale), config)


def reconstruct(params, images, config: TokenizerConfig) -> jax.Array:
  """D(q(E(x))): the image through the token bottleneck."""
  return decode(params, encode(params, images, config).z_hat, config)


def loss(params, images, config: TokenizerConfig):
  """The training loss of the module docstring -> (loss, metrics)."""
  model = TiTok(config)
  z = model.apply(params, images, method=TiTok.encode)
  q = lfq.quantize(z, 1, config.scale)
  recon = 4.0 * jnp.mean((model.apply(params, q.z_hat, method=TiTok.decode) - images) ** 2)
  reg = lfq.lfq_losses(z, q, config.scale, entropy_weight=config.entropy_weight,
                       commit_weight=config.commit_weight)
  return recon + reg["total"], {"recon": recon, "entropy": reg["entropy"],
                                "commitment": reg["commitment"]}


def make_loss_fn(config: TokenizerConfig):
  """loss_fn(params, batch, key) for ``common.train``; batch = {"images": (B, S, S)}."""
  check_config(config)

  def loss_fn(params, batch, key):
    del key
    return loss(params, batch["images"], config)
  return loss_fn
