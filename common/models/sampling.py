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
import math
import numbers

import jax
import jax.numpy as jnp

from common.checks import is_concrete
from common.models.transformer import KVCache, Transformer, check_token_ids, init_cache


def _check_sampling(temperature, top_p) -> None:
  """temperature >= 0 and 0 < top_p <= 1 when they are Python numbers (NaN fails both)."""
  if isinstance(temperature, numbers.Real) and not 0 <= temperature < math.inf:
    raise ValueError(f"temperature={temperature!r}; expected a finite number >= 0 (0 = greedy)")
  if isinstance(top_p, numbers.Real) and not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p={top_p!r}; expected a number in (0, 1]")


def top_p_logits(logits: jax.Array, top_p: float) -> jax.Array:
  """Sets logits outside the top-p nucleus to -inf (over the last axis).

  Sorting probabilities p_(1) >= p_(2) >= ..., token (i) is kept iff the mass before it,
  p_(1) + ... + p_(i-1), is below top_p; so the kept set is the smallest prefix with
  mass >= top_p, and the most likely token is always kept.

  Raises:
    ValueError: a Python-number top_p outside (0, 1] (0 would keep nothing).
  """
  _check_sampling(0.0, top_p)
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
  _check_sampling(temperature, top_p)
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  logits = logits.astype(jnp.float32) / temperature
  if top_p < 1.0:
    logits = top_p_logits(logits, top_p)
  return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


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

  Raises:
    ValueError / TypeError, before tracing: a prompt that is not (B, T0 >= 1) integer
    ids in [0, vocab_size) (ids are checked when the prompt is concrete, i.e. outside
    an enclosing jit), a negative max_new_tokens, a temperature that is negative or
    NaN, top_p outside (0, 1], or a cache without room for T0 + max_new_tokens
    positions after its filled ones.
  """
  prompt = jnp.asarray(prompt) if not hasattr(prompt, "ndim") else prompt
  if prompt.ndim != 2 or prompt.shape[1] < 1:
    raise ValueError(f"prompt must be (batch, time) with time >= 1, got shape {prompt.shape}")
  check_token_ids(prompt, model.config.vocab_size, "prompt")
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) \
      or max_new_tokens < 0:
    raise ValueError(f"max_new_tokens={max_new_tokens!r}; expected an int >= 0")
  _check_sampling(temperature, top_p)
  if cache is not None:
    need = prompt.shape[1] + max_new_tokens
    filled = int(cache.length) if is_concrete(cache.length) else 0
    if filled + need > cache.k.shape[2]:
      raise ValueError(f"cache holds {cache.k.shape[2]} positions with {filled} filled; "
                       f"generating needs {filled} + {prompt.shape[1]} + {max_new_tokens}")
  return _generate(model, params, prompt, key, max_new_tokens=int(max_new_tokens),
                   temperature=temperature, top_p=top_p, cache=cache)


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature", "top_p"))
def _generate(model: Transformer, params, prompt: jax.Array, key: jax.Array, *,
              max_new_tokens: int, temperature: float, top_p: float,
              cache: KVCache | None) -> jax.Array:
  """`generate` after its checks: one jit-compiled prefill + `lax.scan`."""
  b, t0 = prompt.shape
  if cache is None:
    cache = init_cache(model.config, b, t0 + max_new_tokens)
  logits, cache = model.apply({"params": params}, prompt, cache)

  def step(carry, step_key):
    cache, last = carry
    token = sample_token(last, step_key, temperature, top_p)
    logits, cache = model.apply({"params": params}, token[:, None], cache)
    return (cache, logits[:, -1]), token

  keys = jax.random.split(key, max_new_tokens)
  _, tokens = jax.lax.scan(step, (cache, logits[:, -1]), keys)
  return jnp.concatenate([prompt.astype(jnp.int32), tokens.T], axis=1)
