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
  """(B * T, dim) projected per-token gradients:

      feature[b * T + t] = R^T grad_w l_{b, t}(w0),   R ~ N(0, 1)^{P x dim} / sqrt(dim)

  Args:
    sequence_loss_fn: (params, one sequence) -> (T,) per-token losses of it.
    params: w0.
    sequences: (B, ...) inputs, one row per sequence (mapped over, one at a time).
    key: the projection's PRNG key.
    dim: projection width.

  Returns:
    (B * T, dim) features, sequence-major (row b * T + t is token t of sequence b).

  Example:
    >>> loss = lambda w, row: (w["v"][row] - 1.0) ** 2          # (T,) per-token losses
    >>> projected_gradient_features(loss, {"v": jnp.zeros(4)}, jnp.array([[0, 1, 2]]),
    ...                             jax.random.PRNGKey(0), dim=2).shape
    (3, 2)
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

      feature[b * T + t] = h_layer[b, t]   (the residual stream after block `layer`)

  Args:
    apply_with_taps: `(params, tokens) -> (logits, state)`, i.e.
      `lambda p, t: model.apply({"params": p}, t, mutable=["taps"])` of a
      `common.models.transformer.Transformer`.
    params: w0; tokens: int (B, T); layer: which block's residual stream.

  Returns:
    (B * T, d_model) features.

  Example:
    >>> feats = residual_features(
    ...     lambda p, t: model.apply({"params": p}, t, mutable=["taps"]), params,
    ...     tokens, layer=model.config.num_layers - 1)
  """
  _, state = apply_with_taps(params, tokens)
  residual = state["taps"][f"layer_{layer}"]["residual"]
  return residual.reshape(-1, residual.shape[-1])
