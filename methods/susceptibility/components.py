"""Components of a `common.models.Transformer`: masks, per-token losses, ablations.

A component C is a 0/1 pytree like the params; SGLD restricted to it
(`sgld.run_chains(..., mask=m_C)`) moves only C's weights, and its susceptibilities
(`susceptibilities.component_susceptibilities`) measure how C responds to each token.
The spectroscopy paper probes attention heads and whole blocks:

  * `head_masks`: every attention head (its q/k/v columns and o_proj rows, from
    `transformer.component_mask`), plus the embedding and the unembedding;
  * `block_masks`: the attention and the MLP of every layer (each with its norm), plus
    the embedding and the unembedding.

`token_losses` is the per-token loss l_t = -log p(x_{t+1} | x_{<=t}) that the
susceptibilities are covariances of; `head_ablation` zeroes one head at a time and
reports the loss increase per token label (which head a mechanism relies on).

Example:
    >>> model = transformer.Transformer(transformer.llama_config(
    ...     vocab_size=16, d_model=8, num_layers=1, num_heads=2, d_ff=16))
    >>> params = transformer.init_params(model, jax.random.PRNGKey(0))
    >>> [name for name, _ in head_masks(params, model.config)]
    ['L0H0', 'L0H1', 'embed', 'lm_head']
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from common.models import logprobs
from common.models import transformer


def token_losses(model: transformer.Transformer, params: Any, tokens: jax.Array) -> jax.Array:
  """(B, T) per-token losses of (B, T + 1) tokens:

      l[b, t] = -log p_params(tokens[b, t + 1] | tokens[b, :t + 1])

  Args:
    model: the Transformer; params: its parameters; tokens: int (B, T + 1).

  Returns:
    float32 (B, T) losses in nats.

  Example:
    >>> token_losses(model, params, jnp.zeros((2, 5), jnp.int32)).shape
    (2, 4)
  """
  logits = model.apply({"params": params}, tokens[:, :-1])
  return -logprobs.token_logprobs(logits, tokens[:, 1:])


def loss_by_label(losses: jax.Array, labels: jax.Array, num_labels: int) -> jax.Array:
  """(num_labels,) mean loss of the positions with each label:

      out[i] = sum_t l_t [label_t = i] / max(#{t : label_t = i}, 1)

  Positions with a label outside 0..num_labels-1 (e.g. -1) are ignored.

  Args:
    losses: per-position losses; labels: ints of the same shape.
    num_labels: how many labels.

  Returns:
    (num_labels,) means (0 for a label with no positions).

  Example:
    >>> loss_by_label(jnp.array([1., 2., 4.]), jnp.array([0, 1, 1]), 3)
    Array([1., 3., 0.], dtype=float32)
  """
  return jnp.stack([jnp.sum(losses * (labels == i)) / jnp.maximum(jnp.sum(labels == i), 1)
                    for i in range(num_labels)])


def subtree_mask(params: Any, prefixes: Sequence[tuple[str, ...]]) -> Any:
  """The 0/1 pytree like `params` that is 1 on every leaf under one of `prefixes`.

      m[path] = 1 if path starts with some prefix else 0

  Args:
    params: a nested-dict parameter pytree.
    prefixes: key paths, e.g. [("embed",), ("layer_0", "attn")].

  Returns:
    A pytree of `ones_like` / `zeros_like` leaves.

  Example:
    >>> subtree_mask({"a": {"b": jnp.ones(2), "c": jnp.ones(1)}}, [("a", "b")])
    {'a': {'b': Array([1., 1.], dtype=float32), 'c': Array([0.], dtype=float32)}}
  """
  prefixes = [tuple(p) for p in prefixes]

  def leaf(path, x):
    keys = tuple(getattr(k, "key", k) for k in path)
    selected = any(keys[:len(p)] == p for p in prefixes)
    return jnp.ones_like(x) if selected else jnp.zeros_like(x)

  return jax.tree_util.tree_map_with_path(leaf, params)


def _embeddings(params: Any) -> list[tuple[str, Any]]:
  return [(name, subtree_mask(params, [(name,)])) for name in ("embed", "lm_head")
          if name in params]


def head_masks(params: Any, config: transformer.TransformerConfig) -> list[tuple[str, Any]]:
  """[(name, mask)]: "L{layer}H{head}" for every attention head, then "embed" and
  "lm_head" (when the model has an untied unembedding).

  Args:
    params: the Transformer's params; config: its `TransformerConfig`.

  Returns:
    (name, 0/1 mask pytree) pairs, heads in (layer, head) order.

  Example:
    >>> len(head_masks(params, model.config))   # 1 layer x 2 heads + 2
    4
  """
  heads = [(f"L{layer}H{head}", transformer.component_mask(params, config, layer, head))
           for layer in range(config.num_layers) for head in range(config.num_heads)]
  return heads + _embeddings(params)


def block_masks(params: Any, config: transformer.TransformerConfig) -> list[tuple[str, Any]]:
  """[(name, mask)]: "L{layer}.attn" (attention + its norm) and "L{layer}.mlp" (MLP +
  its norm) for every layer, then "embed" and "lm_head" (when present).

  Args:
    params: the Transformer's params; config: its `TransformerConfig`.

  Returns:
    (name, 0/1 mask pytree) pairs.

  Example:
    >>> [name for name, _ in block_masks(params, model.config)]
    ['L0.attn', 'L0.mlp', 'embed', 'lm_head']
  """
  blocks = []
  for layer in range(config.num_layers):
    name = f"layer_{layer}"
    for part in ("attn", "mlp"):
      blocks.append((f"L{layer}.{part}",
                     subtree_mask(params, [(name, part), (name, f"{part}_norm")])))
  return blocks + _embeddings(params)


def head_ablation(model: transformer.Transformer, params: Any, tokens: jax.Array,
                  labels: jax.Array, num_labels: int) -> np.ndarray:
  """Loss increase per label when one attention head is zeroed:

      out[h, i] = loss_by_label(l(params with head h zeroed))[i] - loss_by_label(l(params))[i]

  Args:
    model: the Transformer; params: its params.
    tokens: int (B, T + 1) sequences; labels: (B, T + 1) the label of every token
      (the label of tokens[:, t + 1] goes with the prediction made at t).
    num_labels: how many labels.

  Returns:
    (layers * heads, num_labels) loss increases in nats, heads in (layer, head) order.

  Example:
    >>> head_ablation(model, params, jnp.zeros((1, 5), jnp.int32),
    ...               jnp.zeros((1, 5), jnp.int32), 1).shape
    (2, 1)
  """
  config = model.config
  targets = labels[:, 1:]
  base = loss_by_label(token_losses(model, params, tokens), targets, num_labels)
  rows = []
  for layer in range(config.num_layers):
    for head in range(config.num_heads):
      mask = transformer.component_mask(params, config, layer, head)
      ablated = jax.tree.map(lambda p, m: p * (1 - m), params, mask)
      rows.append(loss_by_label(token_losses(model, ablated, tokens), targets, num_labels)
                  - base)
  return np.asarray(jnp.stack(rows))
