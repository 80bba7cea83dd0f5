"""What susceptibility clustering is compared against: per-token features at w0 alone.

Both baselines give an (N, F) feature matrix per probe token that goes through the same
`clustering.cluster_tokens` pipeline as the susceptibility vectors:

  * `projected_gradient_features`: the raw per-token loss gradient grad_w l_xy(w0),
    projected to `dim` coordinates by a fixed Gaussian matrix R (P, dim) / sqrt(dim)
    (Johnson-Lindenstrauss, so inner products and cosines are approximately kept);
  * `residual_features`: the model's final residual-stream vector at the context
    position (the "embedding" of x that predicts y), from the LM stack's taps.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def projected_gradient_features(sequence_loss_fn: Callable[[Any, jax.Array], jax.Array],
                                params: Any, sequences: jax.Array, key: jax.Array,
                                dim: int = 64) -> jax.Array:
  """(B * T, dim) projected per-token gradients R^T grad_w l_t(w0).

  Args:
    sequence_loss_fn: (params, one sequence) -> (T,) per-token losses of it.
    params: w0.
    sequences: (B, ...) inputs, one row per sequence (mapped over, one at a time).
    key: the projection's PRNG key.
    dim: projection width.
  """
  flat, unravel = ravel_pytree(params)
  projection = jax.random.normal(key, (flat.shape[0], dim), flat.dtype) / jnp.sqrt(dim)

  @jax.jit
  def one(row):
    jac = jax.jacrev(lambda f: sequence_loss_fn(unravel(f), row))(flat)   # (T, P)
    return jac @ projection

  feats = jax.lax.map(one, sequences)
  return feats.reshape(-1, dim)


def residual_features(apply_with_taps: Callable[[Any, jax.Array], tuple[Any, Any]],
                      params: Any, tokens: jax.Array, layer: int) -> jax.Array:
  """(B * T, d_model) residual stream of `layer` at every position of `tokens` (B, T).

  `apply_with_taps(params, tokens)` is `model.apply({"params": p}, tokens,
  mutable=["taps"])` of a `common.models.transformer.Transformer`.
  """
  _, state = apply_with_taps(params, tokens)
  residual = state["taps"][f"layer_{layer}"]["residual"]
  return residual.reshape(-1, residual.shape[-1])
