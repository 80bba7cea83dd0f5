"""Per-token log-probabilities, entropies and sequence log-likelihoods of an LM's logits.

For logits z_t (over the vocabulary) at position t and next token y_{t+1}:

    log p(y_{t+1} | y_{<=t}) = z_t[y_{t+1}] - logsumexp(z_t)
    H_t = -sum_v p_t(v) log p_t(v)
    log p(y_{s..T} | y_{<s}) = sum_{t >= s-1} mask_t log p(y_{t+1} | y_{<=t})

Everything is in nats; divide by ln 2 for bits. All functions are jit/vmap/grad-safe.

`sequence_token_stats` runs the model itself, also on ragged (left-padded) batches:
row b's predictions from padding slots t < left_pad[b] are masked out (set to 0).

Example:
    >>> logits = jnp.zeros((1, 4, 8))          # a uniform model over 8 tokens
    >>> float(next_token_loss(logits, jnp.zeros((1, 4), jnp.int32)))  # ln 8
    2.079...
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.models.transformer import Transformer, check_token_ids


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


class TokenStats(NamedTuple):
  """Per-prediction statistics of a sequence batch, all (B, T-1); entry t is about
  predicting tokens[:, t+1] from tokens[:, :t+1].

  Attributes:
    logprobs: log p(tokens[:, t+1] | prefix), 0 where mask is False.
    entropies: entropy of the predictive distribution at t, 0 where mask is False.
    mask: True where position t is a real token (t >= left_pad[b]), i.e. the
      prediction has a real context.
  """
  logprobs: jax.Array
  entropies: jax.Array
  mask: jax.Array


def prediction_mask(left_pad: jax.Array | None, batch: int, length: int) -> jax.Array:
  """(B, T-1) bool: True where t >= left_pad[b] (all True when left_pad is None)."""
  t = jnp.arange(length - 1)[None, :]
  if left_pad is None:
    return jnp.ones((batch, length - 1), bool)
  return t >= jnp.asarray(left_pad)[:, None]


def sequence_token_stats(model: Transformer, params, tokens: jax.Array,
                         left_pad: jax.Array | None = None,
                         temperature: float = 1.0) -> TokenStats:
  """Per-token log-probs and entropies from one full forward pass, ragged or not.

  With z_t the logits at slot t (rows left-padded by left_pad[b] slots, each row's
  real tokens at positions 0..L_b - 1, padding never attended to) and
  p_t = softmax(z_t / temperature):

      logprobs[b, t] = log p_t(tokens[b, t+1]),  entropies[b, t] = -sum_v p_t log p_t,

  both for t >= left_pad[b] and 0 elsewhere.

  Args:
    model: the `Transformer`.
    params: its parameters.
    tokens: (B, T) int ids, T >= 2, e.g. a `Generation.tokens`.
    left_pad: None or (B,) ints, the padding slots of each row (`Generation.left_pad`).
    temperature: divides the logits (> 0; 1 is the model itself).

  Returns:
    `TokenStats` of (B, T-1) arrays. A completion of N tokens after a width-T0 prompt
    is the slice [:, T0-1:], which matches `Generation.logprobs` /
    `Generation.entropies` (mask it with `Generation.completion_mask`).

  Example:
    >>> g = sampling.generate(model, params, prompt, key, max_new_tokens=8,
    ...                       prompt_lengths=lengths, eos_id=2, return_info=True)
    >>> stats = sequence_token_stats(model, params, g.tokens, g.left_pad)
    >>> old_logp = stats.logprobs[:, prompt.shape[1] - 1:] * g.completion_mask
  """
  if not hasattr(tokens, "ndim"):
    tokens = jnp.asarray(tokens)
  if tokens.ndim != 2 or tokens.shape[1] < 2:
    raise ValueError(f"tokens must be (batch, time) with time >= 2, got shape {tokens.shape}")
  if isinstance(temperature, (int, float)) and not 0 < temperature < math.inf:
    raise ValueError(f"temperature={temperature!r}; expected a finite number > 0")
  logits = model.apply({"params": params}, tokens, left_pad=left_pad)
  logits = logits[:, :-1] / temperature
  mask = prediction_mask(left_pad, *tokens.shape)
  lp = token_logprobs(logits, tokens[:, 1:], "tokens[:, 1:]")
  ent = token_entropy(logits)
  return TokenStats(jnp.where(mask, lp, 0.0), jnp.where(mask, ent, 0.0), mask)


def nats_to_bits(nats):
  """Converts nats to bits (divides by ln 2)."""
  return nats / math.log(2.0)
