"""Per-token log-probabilities, entropies and sequence log-likelihoods of an LM's logits.

For logits z_t (over the vocabulary) at position t and next token y_{t+1}:

    log p(y_{t+1} | y_{<=t}) = z_t[y_{t+1}] - logsumexp(z_t)
    H_t = -sum_v p_t(v) log p_t(v)
    log p(y_{s..T} | y_{<s}) = sum_{t >= s-1} mask_t log p(y_{t+1} | y_{<=t})

Everything is in nats; divide by ln 2 for bits. All functions are jit/vmap/grad-safe.

Example:
    >>> logits = jnp.zeros((1, 4, 8))          # a uniform model over 8 tokens
    >>> float(next_token_loss(logits, jnp.zeros((1, 4), jnp.int32)))  # ln 8
    2.079...
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from common.models.transformer import check_token_ids


def token_logprobs(logits: jax.Array, targets: jax.Array, name: str = "targets") -> jax.Array:
  """log softmax(logits)[targets]: (..., V) logits and (...) int targets -> (...).

  Targets outside [0, V) raise a ValueError when they are concrete (outside jit);
  `take_along_axis` would otherwise return NaN for them.
  """
  if logits.shape[:-1] != targets.shape:
    raise ValueError(f"logits {logits.shape} and {name} {targets.shape} must agree on all "
                     "but the last (vocabulary) axis")
  check_token_ids(targets, logits.shape[-1], name)
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def token_entropy(logits: jax.Array) -> jax.Array:
  """Entropy in nats of softmax(logits) over the last axis: (..., V) -> (...)."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def next_token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
  """log p(tokens[:, t+1] | tokens[:, :t+1]) for logits (B, T, V) of tokens (B, T) -> (B, T-1)."""
  if logits.shape[:-1] != tokens.shape:
    raise ValueError(f"logits {logits.shape} and tokens {tokens.shape} must agree on (B, T)")
  check_token_ids(tokens, logits.shape[-1], "tokens")
  return token_logprobs(logits[:, :-1], tokens[:, 1:], "tokens[:, 1:]")


def _masked(lp: jax.Array, mask: jax.Array) -> jax.Array:
  """mask (B, T-1) as lp's dtype; a mask of another shape would broadcast silently."""
  if mask.shape != lp.shape:
    raise ValueError(f"mask has shape {mask.shape}; expected {lp.shape} (one entry per "
                     "next-token prediction, i.e. (B, T-1))")
  return mask.astype(lp.dtype)


def sequence_logprob(logits: jax.Array, tokens: jax.Array,
                     mask: jax.Array | None = None) -> jax.Array:
  """Sum over t of mask[:, t] * log p(tokens[:, t+1] | prefix): (B, T, V), (B, T) -> (B,).

  `mask` (B, T-1) selects which next-token predictions count (e.g. only the
  completion after a prompt); None counts all of them.
  """
  lp = next_token_logprobs(logits, tokens)
  if mask is not None:
    lp = lp * _masked(lp, mask)
  return jnp.sum(lp, axis=-1)


def next_token_loss(logits: jax.Array, tokens: jax.Array,
                    mask: jax.Array | None = None) -> jax.Array:
  """Mean next-token cross-entropy in nats (over the masked predictions)."""
  lp = next_token_logprobs(logits, tokens)
  if mask is None:
    return -jnp.mean(lp)
  mask = _masked(lp, mask)
  return -jnp.sum(lp * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def nats_to_bits(nats):
  """Converts nats to bits (divides by ln 2)."""
  return nats / math.log(2.0)
