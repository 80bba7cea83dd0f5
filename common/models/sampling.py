"""Autoregressive generation with a KV cache: prefill the prompt, then one token at a time.

Each new token is drawn from softmax(z / temperature) restricted to the top-p nucleus,
the smallest set of most-likely tokens whose probability reaches p (always at least the
most likely one); temperature 0 is greedy argmax. The whole loop (prefill + a
`lax.while_loop` over the new tokens) is one jit-compiled function.

Ragged batches: prompts of different lengths are left-padded to one width T0
(`pad_prompts`), and `prompt_lengths` tells `generate` how many of each row's slots
are real; every row's real tokens get rotary positions 0..len_b - 1 and padding is
masked out of attention, in the prefill and in every cached decoding step (see
`Transformer`'s `left_pad`). With `eos_id`, a row stops at its first end token: the
slots after it hold `pad_id`, and the loop ends early once every row has stopped.
`return_info=True` gives a `Generation` with the per-row completion lengths and the
log-probability and entropy of every sampled token under the model's logits (what
GRPO's old-policy ratio needs).

Example:
    >>> out = generate(model, params, prompt, jax.random.PRNGKey(0),
    ...                max_new_tokens=32, temperature=0.8, top_p=0.95)
    >>> out.shape == (prompt.shape[0], prompt.shape[1] + 32)
    True
    >>> tokens, lengths = pad_prompts([[5, 6], [1, 2, 3]])   # ragged, left-padded
    >>> g = generate(model, params, tokens, key, max_new_tokens=8, prompt_lengths=lengths,
    ...              eos_id=2, return_info=True)
    >>> g.tokens.shape, g.lengths.shape, g.logprobs.shape
    ((2, 11), (2,), (2, 8))
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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


class Generation(NamedTuple):
  """What `generate(..., return_info=True)` returns.

  Attributes:
    tokens: (B, T0 + N) int32: each left-padded prompt (padding slots set to pad_id
      when prompt_lengths is given) followed by its N = max_new_tokens new slots;
      slots after a row's end token hold pad_id.
    prompt_lengths: (B,) int32, the real tokens of each prompt (T0 when not ragged).
    lengths: (B,) int32, each row's completion length: the number of sampled tokens up
      to and including its first eos_id, or N when it never emits one.
    logprobs: (B, N) float32, log softmax(z_t)[y_t] of each sampled token y_t under the
      model's logits z_t (temperature 1, whole vocabulary); 0 after the row's end.
    entropies: (B, N) float32, -sum_v p_t(v) log p_t(v) of softmax(z_t); 0 after the end.
    logits: (B, N, V) float32 model logits z_t of each step with return_logits=True
      (0 after the end), else None.
  """
  tokens: jax.Array
  prompt_lengths: jax.Array
  lengths: jax.Array
  logprobs: jax.Array
  entropies: jax.Array
  logits: jax.Array | None = None

  @property
  def completion_mask(self) -> jax.Array:
    """(B, N) bool: True on the sampled tokens that count (index < lengths[b])."""
    n = self.logprobs.shape[1]
    return jnp.arange(n)[None, :] < self.lengths[:, None]

  @property
  def left_pad(self) -> jax.Array:
    """(B,) int32 padding slots of each row: T0 - prompt_lengths (for `Transformer`)."""
    t0 = self.tokens.shape[1] - self.logprobs.shape[1]
    return (t0 - self.prompt_lengths).astype(jnp.int32)


def pad_prompts(prompts: Sequence[Sequence[int]], pad_id: int = 0,
                width: int | None = None) -> tuple[jax.Array, jax.Array]:
  """Left-pads token lists to one width: row b is [pad_id] * (T0 - len_b) + prompts[b].

  Args:
    prompts: B non-empty sequences of token ids.
    pad_id: the filler id (never attended to).
    width: T0 (default: the longest prompt); must be >= every length.

  Returns:
    (tokens (B, T0) int32, lengths (B,) int32), the `prompt` and `prompt_lengths` of
    `generate`.

  Example:
    >>> tokens, lengths = pad_prompts([[5, 6], [1, 2, 3]], pad_id=0)
    >>> tokens.tolist(), lengths.tolist()
    ([[0, 5, 6], [1, 2, 3]], [2, 3])
  """
  if len(prompts) == 0 or any(len(p) == 0 for p in prompts):
    raise ValueError("prompts must be a non-empty list of non-empty token sequences")
  lengths = np.array([len(p) for p in prompts], np.int32)
  width = int(lengths.max()) if width is None else width
  if width < lengths.max():
    raise ValueError(f"width={width} is shorter than the longest prompt ({lengths.max()})")
  tokens = np.full((len(prompts), width), pad_id, np.int32)
  for b, p in enumerate(prompts):
    tokens[b, width - len(p):] = np.asarray(p, np.int32)
  return jnp.asarray(tokens), jnp.asarray(lengths)


def check_id(name: str, value, vocab_size: int) -> None:
  """One-line ValueError unless `value` is an int token id in [0, vocab_size)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
      or not 0 <= value < vocab_size:
    raise ValueError(f"{name}={value!r}; expected a token id (int) in [0, {vocab_size})")


def check_prompt_lengths(prompt_lengths, batch: int, width: int) -> jax.Array:
  """`prompt_lengths` as int32 after one-line checks: shape (batch,), integers, and (when
  concrete) every length in [1, width]."""
  if not hasattr(prompt_lengths, "ndim"):
    prompt_lengths = jnp.asarray(prompt_lengths)
  if prompt_lengths.shape != (batch,) or not jnp.issubdtype(prompt_lengths.dtype, jnp.integer):
    raise ValueError(f"prompt_lengths must be ({batch},) integers (one per prompt row), got "
                     f"shape {prompt_lengths.shape} and dtype {prompt_lengths.dtype}")
  if is_concrete(prompt_lengths):
    lengths = np.asarray(prompt_lengths)
    bad = (lengths < 1) | (lengths > width)
    if bad.any():
      i = int(np.argmax(bad))
      raise ValueError(f"prompt_lengths[{i}] = {int(lengths[i])}; expected lengths in "
                       f"[1, {width}] (the prompt's width)")
  return prompt_lengths.astype(jnp.int32)


def generate(model: Transformer, params, prompt: jax.Array, key: jax.Array, *,
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
             cache: KVCache | None = None, prompt_lengths: jax.Array | None = None,
             eos_id: int | None = None, pad_id: int = 0, return_info: bool = False,
             return_logits: bool = False) -> jax.Array | Generation:
  """Continues each prompt row by up to `max_new_tokens` sampled tokens.

  Row b's prompt is its last L_b = prompt_lengths[b] slots (left padding before them);
  its real tokens get positions 0..L_b - 1 and padding is never attended to, so a
  padded row continues exactly as it would alone. Step t draws
  y_t ~ softmax(top_p(z_t / temperature)) (argmax at temperature 0) from the logits
  z_t = f(prompt_b, y_<t), until the row emits eos_id or N = max_new_tokens tokens.

  Args:
    model: the `Transformer` (static).
    params: its parameters.
    prompt: (B, T0) int tokens; with prompt_lengths, left-padded (`pad_prompts`).
    key: PRNG key for sampling (step t uses split(key, N)[t], for every batch shape).
    max_new_tokens, temperature, top_p: static sampling settings.
    cache: an empty cache with room for T0 + max_new_tokens positions, for an
      attention_fn that keeps per-layer state in it, or one placed sharded over
      batch and kv heads (`common.partitioning.shard_cache`, called under
      `partitioning.axis_rules(mesh)` so every step keeps that layout); default
      `init_cache`.
    prompt_lengths: None (every row is T0 long: the equal-length path, unchanged), or
      (B,) ints in [1, T0], the real tokens of each row.
    eos_id: None (always N tokens), or the end token id (static): a row stops after
      it, later slots hold pad_id.
    pad_id: the id written in padding slots and after a row's end (static).
    return_info: return a `Generation` (tokens, lengths, log-probs, entropies)
      instead of the tokens alone.
    return_logits: with return_info, also keep every step's logits (B, N, V).

  Returns:
    (B, T0 + max_new_tokens) int32 tokens: the prompt followed by the samples; or,
    with return_info, a `Generation`.

  Raises:
    ValueError / TypeError, before tracing: a prompt that is not (B, T0 >= 1) integer
    ids in [0, vocab_size) (ids are checked when the prompt is concrete, i.e. outside
    an enclosing jit), a negative max_new_tokens, a temperature that is negative or
    NaN, top_p outside (0, 1], a cache without room for T0 + max_new_tokens
    positions after its filled ones (or a filled one with prompt_lengths),
    prompt_lengths that are not (B,) ints in [1, T0], eos_id or pad_id outside the
    vocabulary, or return_logits without return_info.

  Example:
    >>> tokens, lengths = pad_prompts([[5, 6], [1, 2, 3]])
    >>> g = generate(model, params, tokens, key, max_new_tokens=8, temperature=0.0,
    ...              prompt_lengths=lengths, eos_id=2, return_info=True)
    >>> completion = g.tokens[:, 3:] * g.completion_mask   # (2, 8)
  """
  prompt = jnp.asarray(prompt) if not hasattr(prompt, "ndim") else prompt
  if prompt.ndim != 2 or prompt.shape[1] < 1:
    raise ValueError(f"prompt must be (batch, time) with time >= 1, got shape {prompt.shape}")
  check_token_ids(prompt, model.config.vocab_size, "prompt")
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) \
      or max_new_tokens < 0:
    raise ValueError(f"max_new_tokens={max_new_tokens!r}; expected an int >= 0")
  _check_sampling(temperature, top_p)
  vocab = model.config.vocab_size
  if eos_id is not None:
    check_id("eos_id", eos_id, vocab)
  check_id("pad_id", pad_id, vocab)
  if return_logits and not return_info:
    raise ValueError("return_logits=True needs return_info=True (the logits live in the "
                     "Generation)")
  left_pad = None
  if prompt_lengths is not None:
    left_pad = prompt.shape[1] - check_prompt_lengths(prompt_lengths, *prompt.shape)
  if cache is not None:
    need = prompt.shape[1] + max_new_tokens
    filled = int(cache.length) if is_concrete(cache.length) else 0
    if filled + need > cache.k.shape[2]:
      raise ValueError(f"cache holds {cache.k.shape[2]} positions with {filled} filled; "
                       f"generating needs {filled} + {prompt.shape[1]} + {max_new_tokens}")
    if left_pad is not None and (filled or cache.left_pad is not None):
      raise ValueError(f"prompt_lengths needs an empty cache (a ragged prefill starts at "
                       f"slot 0), got one with {filled} filled positions")
  out = _generate(model, params, prompt, key, left_pad, max_new_tokens=int(max_new_tokens),
                  temperature=temperature, top_p=top_p, cache=cache,
                  eos_id=None if eos_id is None else int(eos_id), pad_id=int(pad_id),
                  info=bool(return_info), return_logits=bool(return_logits))
  return out if return_info else out.tokens


def _split_layers(cache: KVCache):
  """(per-layer keys, per-layer values, the cache's other fields) of a KVCache."""
  return tuple(cache.k), tuple(cache.v), tuple(cache[2:])


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature", "top_p",
                                             "eos_id", "pad_id", "info", "return_logits"))
def _generate(model: Transformer, params, prompt: jax.Array, key: jax.Array,
              left_pad: jax.Array | None, *, max_new_tokens: int, temperature: float,
              top_p: float, cache: KVCache | None, eos_id: int | None, pad_id: int,
              info: bool, return_logits: bool) -> Generation:
  """`generate` after its checks: one jit-compiled prefill + `lax.while_loop`.

  Without info, the Generation carries only tokens (the other fields are zeros).
  """
  b, t0 = prompt.shape
  n = max_new_tokens
  vocab = model.config.vocab_size
  if cache is None:
    cache = init_cache(model.config, b, t0 + n)
  prompt = prompt.astype(jnp.int32)
  if left_pad is None:
    logits, cache = model.apply({"params": params}, prompt, cache, logits_to_keep=1)
    prompt_lengths = jnp.full((b,), t0, jnp.int32)
  else:
    prompt = jnp.where(jnp.arange(t0)[None, :] < left_pad[:, None], pad_id, prompt)
    logits, cache = model.apply({"params": params}, prompt, cache, left_pad=left_pad,
                                logits_to_keep=1)
    prompt_lengths = t0 - left_pad
  keys = jax.random.split(key, n)

  def cond(carry):
    i, done = carry[0], carry[3]
    return (i < n) if eos_id is None else (i < n) & ~jnp.all(done)

  # The loop carries the cache's keys and values as one buffer per layer, stacked into a
  # KVCache only around the model call (XLA folds that stack and the model's per-layer
  # slices away): each step then writes its slot into each layer's buffer in place,
  # where a carried (L, ...) stack is sliced, updated and restacked, i.e. copied.
  def body(carry):
    i, (ks, vs, rest), last, done, out = carry
    cache = KVCache(jnp.stack(ks), jnp.stack(vs), *rest)
    token = sample_token(last, keys[i], temperature, top_p)
    if eos_id is not None:
      token = jnp.where(done, pad_id, token)
    new = {"tokens": token}
    if info:
      logp = jax.nn.log_softmax(last, axis=-1)
      lp = jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
      ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
      new["logprobs"] = jnp.where(done, 0.0, lp)
      new["entropies"] = jnp.where(done, 0.0, ent)
      if return_logits:
        new["logits"] = jnp.where(done[:, None], 0.0, last)
    out = {name: out[name].at[:, i].set(value) for name, value in new.items()}
    if eos_id is not None:
      done = done | (token == eos_id)
    logits, cache = model.apply({"params": params}, token[:, None], cache)
    return i + 1, _split_layers(cache), logits[:, -1], done, out

  out = {"tokens": jnp.full((b, n), pad_id, jnp.int32)}
  if info:
    out["logprobs"] = jnp.zeros((b, n), jnp.float32)
    out["entropies"] = jnp.zeros((b, n), jnp.float32)
    if return_logits:
      out["logits"] = jnp.zeros((b, n, vocab), jnp.float32)
  carry = (jnp.zeros((), jnp.int32), _split_layers(cache), logits[:, -1],
           jnp.zeros((b,), bool), out)
  if n:  # (with n = 0 there is no step to trace: keys[i] would index an empty array)
    *_, out = jax.lax.while_loop(cond, body, carry)
  tokens = out["tokens"]
  if eos_id is None:
    lengths = jnp.full((b,), n, jnp.int32)
  else:
    is_end = tokens == eos_id
    ends_before = jnp.cumsum(is_end, axis=1) - is_end  # end tokens strictly before slot t
    lengths = jnp.sum(ends_before == 0, axis=1, dtype=jnp.int32)
  zeros = jnp.zeros((b, n), jnp.float32)
  return Generation(jnp.concatenate([prompt, tokens], axis=1), prompt_lengths, lengths,
                    out.get("logprobs", zeros), out.get("entropies", zeros), out.get("logits"))
