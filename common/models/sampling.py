"""Autoregressive generation with a KV cache: prefill the prompt, then one token at a time.

Each new token is drawn from softmax(z / temperature) restricted to the top-p nucleus,
the smallest set of most-likely tokens whose probability reaches p (always at least the
most likely one); temperature 0 is greedy argmax. The whole loop (prefill + `lax.scan`
over the new tokens) is one jit-compiled function.

Example:
    >>> out = generate(model, params, prompt, jax.random.PRNGKey(0),
    ...                max_new_tokens=32, temperature=0.8, top_p=0.95)
    >>> out.shape == (prompt.shape[0], prompt.shape[1] + 32)
    True
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from common.models.transformer import KVCache, Transformer, init_cache


def top_p_logits(logits: jax.Array, top_p: float) -> jax.Array:
  """Sets logits outside the top-p nucleus to -inf (over the last axis).

  Sorting probabilities p_(1) >= p_(2) >= ..., token (i) is kept iff the mass before it,
  p_(1) + ... + p_(i-1), is below top_p; so the kept set is the smallest prefix with
  mass >= top_p, and the most likely token is always kept.
  """
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  sorted_probs = jnp.sort(probs, axis=-1)[..., ::-1]
  mass_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
  kept = mass_before < top_p
  # The smallest kept probability is the threshold; ties at it are kept too.
  threshold = jnp.min(jnp.where(kept, sorted_probs, jnp.inf), axis=-1, keepdims=True)
  return jnp.where(probs >= threshold, logits, -jnp.inf)


def sample_token(logits: jax.Array, key: jax.Array, temperature: float = 1.0,
                 top_p: float = 1.0) -> jax.Array:
  """Draws one token per row of logits (..., V); temperature 0 means argmax."""
  if temperature < 0 or not 0.0 < top_p <= 1.0:
    raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  logits = logits.astype(jnp.float32) / temperature
  if top_p < 1.0:
    logits = top_p_logits(logits, top_p)
  return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature", "top_p"))
def generate(model: Transformer, params, prompt: jax.Array, key: jax.Array, *,
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
             cache: KVCache | None = None) -> jax.Array:
  """Continues each prompt row by `max_new_tokens` sampled tokens.

  Args:
    model: the `Transformer` (static).
    params: its parameters.
    prompt: (B, T0) int tokens, all rows of the same length.
    key: PRNG key for sampling.
    max_new_tokens, temperature, top_p: static sampling settings.
    cache: an empty cache with room for T0 + max_new_tokens positions, for an
      attention_fn that keeps per-layer state in it; default `init_cache`.

  Returns:
    (B, T0 + max_new_tokens) int32 tokens: the prompt followed by the samples.
  """
  b, t0 = prompt.shape
  if cache is None:
    cache = init_cache(model.config, b, t0 + max_new_tokens)
  elif cache.k.shape[2] < t0 + max_new_tokens:
    raise ValueError(f"cache holds {cache.k.shape[2]} positions; generating needs "
                     f"{t0 + max_new_tokens}")
  logits, cache = model.apply({"params": params}, prompt, cache)

  def step(carry, step_key):
    cache, last = carry
    token = sample_token(last, step_key, temperature, top_p)
    logits, cache = model.apply({"params": params}, token[:, None], cache)
    return (cache, logits[:, -1]), token

  keys = jax.random.split(key, max_new_tokens)
  _, tokens = jax.lax.scan(step, (cache, logits[:, -1]), keys)
  return jnp.concatenate([prompt.astype(jnp.int32), tokens.T], axis=1)
