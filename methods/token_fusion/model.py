"""The 1D-token fusion model: a frozen 2D pathway, a frozen 1D tokenizer as the global
appearance carrier, and Selective Token Editing between them.

For sources (A, B):

  F_2D = backbone(A, B)                                (the 2D pathway, frozen)
  Z_F  = q(E(F_2D)),  Z_A = q(E(A)),  Z_B = q(E(B))    (the frozen 1D tokenizer)
  Z~   = Z_F + M * Delta                               (STE, ``ste.edit``)
  F    = clip(F_2D + base(D(Z~) - D(Z_F)), 0, 1)

base is the Gaussian low-pass of ``fusion.base_layer``: the 1D tokens carry the
image-level appearance (brightness, contrast, tone: the base layer) and the 2D pathway
the local structure (the detail layer), as the paper factorises them. Our reading of
the recombination: the edit's effect on the decoded image, low-passed, is added to the
2D pathway's output, so the tokenizer's own reconstruction error (a 32-token
bottleneck) never enters F, and with no edit (M = 0) F is exactly F_2D. Only STE's
parameters train in the second stage, on the same unsupervised fusion objective as the
backbone (``fusion.fusion_loss``): no loss is added for it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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


def combine(edited, unedited, fused_2d, sigma: float):
  """F = clip(F_2D + base(edited - unedited), 0, 1): the decoded edit's low-pass
  added to the 2D pathway's image."""
  return jnp.clip(fused_2d + fusion.base_layer(edited - unedited, sigma), 0.0, 1.0)


class TokenInputs(NamedTuple):
  """What the frozen parts give STE for a batch of pairs: the sources, the 2D
  pathway's image, the codes of it and of the sources, and D(Z_F)."""
  a: jax.Array
  b: jax.Array
  f2d: jax.Array
  z_f: jax.Array
  z_a: jax.Array
  z_b: jax.Array
  d_f: jax.Array


def token_inputs(frozen: Frozen, a, b, spec: FusionSpec) -> TokenInputs:
  """The frozen parts' outputs for sources (n, S, S) (no gradients flow into them).
  The sources are tokenised only for the editor, which reads them; with the learned
  offset z_a and z_b repeat z_f."""
  frozen = jax.lax.stop_gradient(frozen)
  f2d = fusion.apply(frozen.backbone, a, b, spec.backbone)
  images = jnp.stack([f2d, a, b]) if spec.delta == "editor" else f2d[None]
  codes = tok.encode(frozen.tokenizer, images, spec.tokenizer).z_hat
  z_a, z_b = (codes[1], codes[2]) if spec.delta == "editor" else (codes[0], codes[0])
  return TokenInputs(a, b, f2d, codes[0], z_a, z_b,
                     tok.decode(frozen.tokenizer, codes[0], spec.tokenizer))


def precompute(frozen: Frozen, a, b, spec: FusionSpec, chunk: int = 64) -> TokenInputs:
  """``token_inputs`` of a whole pool of pairs, jitted, in chunks; numpy arrays (STE
  trains on them without running the frozen parts again)."""
  fn = jax.jit(lambda x, y: token_inputs(frozen, x, y, spec))
  parts = [fn(jnp.asarray(a[i:i + chunk]), jnp.asarray(b[i:i + chunk]))
           for i in range(0, len(a), chunk)]
  return TokenInputs(*(np.concatenate([np.asarray(p[j]) for p in parts])
                       for j in range(len(TokenInputs._fields))))


def fuse_inputs(tok_params, ste_params, inputs: TokenInputs, mask, spec: FusionSpec):
  """F from precomputed ``TokenInputs`` for a (K,) or (n, K) mask."""
  delta = ste.offsets(ste_params, inputs.z_f, inputs.z_a, inputs.z_b, spec.editor)
  edited = tok.decode(jax.lax.stop_gradient(tok_params), ste.edit(inputs.z_f, delta, mask),
                      spec.tokenizer)
  return combine(edited, inputs.d_f, inputs.f2d, spec.sigma)


def fuse(frozen: Frozen, ste_params, a, b, mask, spec: FusionSpec):
  """The fused image F of the module docstring for a (K,) or (n, K) mask.

  Example:
    >>> f = fuse(frozen, ste_params, a, b, ste.positions_mask([12, 18], 32), spec)
  """
  return fuse_inputs(frozen.tokenizer, ste_params, token_inputs(frozen, a, b, spec), mask,
                     spec)


def make_loss_fn(tok_params, spec: FusionSpec, budget: int = 0):
  """loss_fn(ste_params, batch, key) for ``common.train`` on batches of precomputed
  ``TokenInputs`` (as a dict): the fusion objective of F.

  A batch with a "mask" (B, K) edits those positions (the fixed masks of the edit runs
  travel with the batch, so every selection shares one compiled step); without it the
  mask is the probing run's Gumbel-top-``budget`` sample on ``ste_params["logits"]``.
  """
  def loss_fn(ste_params, batch, key):
    batch = dict(batch)
    m = batch.pop("mask", None)
    inputs = TokenInputs(**batch)
    if m is None:
      logits = ste_params["logits"]
      logits = jnp.broadcast_to(logits, inputs.a.shape[:1] + logits.shape)
      m = ste.gumbel_top_b_mask(key, logits, budget, spec.editor.temperature)
    f = fuse_inputs(tok_params, ste_params, inputs, m, spec)
    return fusion.fusion_loss(f, inputs.a, inputs.b, spec.weights)
  return loss_fn


def probed_positions(ste_params, budget: int) -> tuple[int, ...]:
  """P = top-b of the probing logits, sorted."""
  _, idx = jax.lax.top_k(ste_params["logits"], budget)
  return tuple(sorted(int(i) for i in idx))
