"""The 1D-token fusion model: a frozen 2D pathway, a frozen 1D tokenizer as the global
appearance carrier, and Selective Token Editing between them.

For sources (A, B):

  F_2D = backbone(A, B)                                (the 2D pathway, frozen)
  Z_F  = q(E(F_2D)),  Z_A = q(E(A)),  Z_B = q(E(B))    (the frozen 1D tokenizer)
  Z~   = Z_F + M * Delta                               (STE, ``ste.edit``)
  F    = clip(base(D(Z~)) + detail(F_2D), 0, 1)

base / detail are the Gaussian low-pass split of ``fusion.base_layer``: the 1D tokens
carry the image-level appearance (brightness, contrast, tone: the base map) and the 2D
pathway the local structure (the detail map), as the paper factorises them. Only STE's
parameters train in the second stage, on the same unsupervised fusion objective as the
backbone (``fusion.fusion_loss``): no loss is added for it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from methods.token_fusion import fusion
from methods.token_fusion import ste
from methods.token_fusion import tokenizer as tok


class FusionSpec(NamedTuple):
  """The frozen parts' configs, STE's editor config and delta kind, the base/detail
  split's sigma (pixels) and the loss weights."""
  tokenizer: tok.TokenizerConfig
  backbone: fusion.BackboneConfig
  editor: ste.EditorConfig = ste.EditorConfig()
  delta: str = "bias"
  sigma: float = 4.0
  weights: fusion.LossWeights = fusion.LossWeights()


class Frozen(NamedTuple):
  """Parameters of the frozen tokenizer and 2D backbone."""
  tokenizer: dict
  backbone: dict


def combine(base_image, fused_2d, sigma: float):
  """F = clip(base(base_image) + detail(fused_2d), 0, 1)."""
  return jnp.clip(fusion.base_layer(base_image, sigma) + fusion.detail_layer(fused_2d, sigma),
                  0.0, 1.0)


def token_inputs(frozen: Frozen, a, b, spec: FusionSpec):
  """(F_2D, Z_F, Z_A, Z_B): the frozen parts' outputs (no gradients flow into them)."""
  frozen = jax.lax.stop_gradient(frozen)
  f2d = fusion.apply(frozen.backbone, a, b, spec.backbone)
  codes = tok.encode(frozen.tokenizer, jnp.stack([f2d, a, b]), spec.tokenizer).z_hat
  return f2d, codes[0], codes[1], codes[2]


def fuse(frozen: Frozen, ste_params, a, b, mask, spec: FusionSpec):
  """The fused image F of the module docstring for a (K,) or (n, K) mask.

  Example:
    >>> f = fuse(frozen, ste_params, a, b, ste.positions_mask([12, 18], 32), spec)
  """
  f2d, z_f, z_a, z_b = token_inputs(frozen, a, b, spec)
  delta = ste.offsets(ste_params, z_f, z_a, z_b, spec.editor)
  z = ste.edit(z_f, delta, mask)
  return combine(tok.decode(jax.lax.stop_gradient(frozen.tokenizer), z, spec.tokenizer), f2d,
                 spec.sigma)


def make_loss_fn(frozen: Frozen, spec: FusionSpec, mask=None, budget: int = 0):
  """loss_fn(ste_params, batch, key) for ``common.train``: the fusion objective of F.

  With ``mask`` (K,) the edit positions are fixed; without it the mask is the probing
  run's Gumbel-top-``budget`` sample on ``ste_params["logits"]``.
  """
  def loss_fn(ste_params, batch, key):
    a, b = batch["a"], batch["b"]
    m = mask
    if m is None:
      logits = jnp.broadcast_to(ste_params["logits"], a.shape[:1] + ste_params["logits"].shape)
      m = ste.gumbel_top_b_mask(key, logits, budget, spec.editor.temperature)
    return fusion.fusion_loss(fuse(frozen, ste_params, a, b, m, spec), a, b, spec.weights)
  return loss_fn


def probed_positions(ste_params, budget: int) -> tuple[int, ...]:
  """P = top-b of the probing logits, sorted."""
  _, idx = jax.lax.top_k(ste_params["logits"], budget)
  return tuple(sorted(int(i) for i in idx))
