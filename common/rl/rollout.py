"""On-policy GRPO rollouts: G sampled completions per prompt, scored, as `make_loss_fn`'s batch.

For B prompts q_1..q_B (left-padded to width T0) and a policy pi_theta, one rollout
samples G completions per prompt with the KV-cached ragged sampler,

    o_{i,g} ~ pi_theta(. | q_i) (temperature, top-p),  row i*G + g,  g = 0..G-1,

(each prompt's G rows contiguous, as `group_advantages` expects) and returns, on the
full sequences x = [q_i ; o_{i,g}] (B*G, T = T0 + N), everything aligned with the next-
token predictions (entry t scores x[:, t+1], width T-1):

    mask[b, t]     = 1 iff x[b, t+1] is a sampled token up to and including eos
    old_logp[b, t] = log softmax(z_t / temperature)[x[b, t+1]]   (z from one full forward
                     pass under theta, the convention `make_loss_fn` uses, so the first
                     update's ratio is 1 up to float rounding)

`make_grpo_batch_fn` turns (prompt_fn, reward_fn) into the on-policy
`batch_fn(seed, step, params)` of `common.train.train(..., on_policy=True)`:

    rollout -> rewards r (B*G,) -> A = group_advantages(r, G) -> ref_logp under pi_ref

Everything is a pure function of (seed, step, params), so a killed-and-resumed run
ends with the parameters of an uninterrupted one.

Example:
    >>> batch_fn = make_grpo_batch_fn(model, ref_params, prompt_fn, reward_fn,
    ...                               GRPOConfig(group_size=4), max_new_tokens=16, eos_id=2)
    >>> loss_fn = make_loss_fn(lambda p, t, **kw: model.apply({"params": p}, t, **kw),
    ...                        GRPOConfig(group_size=4))
    >>> train(init_fn=lambda k: ref_params, loss_fn=loss_fn, batch_fn=batch_fn,
    ...       optimizer=optax.adam(1e-5), config=config, workdir=w, on_policy=True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from common.models import logprobs as lm_logprobs
from common.models import sampling
from common.models.transformer import Transformer, check_token_ids
from common.rl.grpo import GRPOConfig, group_advantages

Array = jax.Array
_ROLLOUT_STREAM = 0x524F4C4C  # fold_in tag: the rollout keys are a stream of their own.


class Rollout(NamedTuple):
  """G completions of each of B prompts (rows i*G .. i*G+G-1 belong to prompt i).

  Attributes:
    tokens: (B*G, T0 + N) int32, left-padded prompt then completion (pad_id after eos).
    left_pad: (B*G,) int32 padding slots of each row (T0 - prompt length).
    prompt_lengths: (B*G,) int32.
    lengths: (B*G,) int32 completion lengths (up to and including eos).
    completion_mask: (B*G, N) bool, True on the counted completion tokens.
    mask: (B*G, T-1) float32, completion_mask aligned with the next-token predictions
      (entry t scores tokens[:, t+1]: columns T0-1 .. T-2).
    old_logp: (B*G, T-1) float32, log-probs of the sampled tokens from a full forward
      pass at the sampling temperature; 0 where mask is 0.
    sampler_logp: (B*G, T-1) float32, the sampler's own log-probs (temperature 1,
      cached decoding), same alignment; equal to old_logp up to rounding when
      temperature = 1 (a check on the cache, not used by the loss).
    entropies: (B*G, T-1) float32, entropy of softmax(z_t / temperature) at each
      scored prediction (full forward pass); 0 where mask is 0.
  """
  tokens: Array
  left_pad: Array
  prompt_lengths: Array
  lengths: Array
  completion_mask: Array
  mask: Array
  old_logp: Array
  sampler_logp: Array
  entropies: Array

  def completions(self) -> list[np.ndarray]:
    """Each row's completion token ids (host NumPy, eos included), B*G arrays."""
    tokens, lengths = jax.device_get((self.tokens, self.lengths))
    n = self.completion_mask.shape[1]
    return [row[row.shape[0] - n:][:length] for row, length in zip(tokens, lengths)]


def rollout_key(seed: int, step: int) -> Array:
  """The sampling key of step `step`: fold_in(fold_in(PRNGKey(seed), tag), step)."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), _ROLLOUT_STREAM),
                            step)


def _aligned(completion: Array, width: int) -> Array:
  """(R, N) completion values -> (R, T-1) prediction-aligned: N columns after T0-1 zeros."""
  zeros = jnp.zeros((completion.shape[0], width - 1), completion.dtype)
  return jnp.concatenate([zeros, completion], axis=1)


@functools.partial(jax.jit, static_argnames=("model", "group_size", "max_new_tokens",
                                             "temperature", "top_p", "eos_id", "pad_id",
                                             "rescore"))
def _rollout(model: Transformer, params: Any, prompts: Array, prompt_lengths: Array,
             key: Array, *, group_size: int, max_new_tokens: int, temperature: float,
             top_p: float, eos_id: int | None, pad_id: int, rescore: bool) -> Rollout:
  width = prompts.shape[1]
  prompts = jnp.repeat(prompts.astype(jnp.int32), group_size, axis=0)
  lengths = jnp.repeat(prompt_lengths.astype(jnp.int32), group_size)
  g = sampling.generate(model, params, prompts, key, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_p=top_p, prompt_lengths=lengths,
                        eos_id=eos_id, pad_id=pad_id, return_info=True)
  completion_mask = g.completion_mask
  mask = _aligned(completion_mask, width)
  sampler_logp = _aligned(g.logprobs, width)
  if rescore:
    stats = lm_logprobs.sequence_token_stats(model, params, g.tokens, g.left_pad,
                                             temperature=temperature)
    logp, entropies = stats.logprobs, stats.entropies
  else:  # temperature 1: the sampler's own log-probs and entropies are the same numbers.
    logp, entropies = sampler_logp, _aligned(g.entropies, width)
  return Rollout(tokens=g.tokens, left_pad=g.left_pad, prompt_lengths=g.prompt_lengths,
                 lengths=g.lengths, completion_mask=completion_mask,
                 mask=mask.astype(jnp.float32), old_logp=jnp.where(mask, logp, 0.0),
                 sampler_logp=sampler_logp, entropies=jnp.where(mask, entropies, 0.0))


def rollout(model: Transformer, params: Any, prompts: Array, prompt_lengths: Array,
            key: Array, *, group_size: int, max_new_tokens: int, temperature: float = 1.0,
            top_p: float = 1.0, eos_id: int | None, pad_id: int = 0,
            rescore: bool = True) -> Rollout:
  """Samples `group_size` completions of every prompt and scores them in one forward pass.

      x_{i,g} = [q_i ; o_{i,g}],  o_{i,g} ~ top_p(softmax(z / temperature)),  row i*G + g
      old_logp[b, t] = log softmax(z_t(x_b) / temperature)[x_b[t+1]] on completion tokens

  The sampler is `common.models.sampling.generate` (jit, KV cache, ragged rows, per-row
  stop at eos_id); old_logp is recomputed with `sequence_token_stats` under the same
  params and temperature, which is exactly what `make_loss_fn` computes (full vocabulary,
  no top-p truncation, as verl/EasyR1 recompute the old log-probs), and is also valid
  for temperature != 1 where the sampler's own log-probs (temperature 1) are not.

  Args:
    model: the `Transformer` (static).
    params: its parameters (the policy sampled from).
    prompts: (B, T0) int ids, left-padded (`sampling.pad_prompts`).
    prompt_lengths: (B,) ints in [1, T0], the real tokens of each prompt.
    key: PRNG key for sampling.
    group_size: G >= 1 completions per prompt.
    max_new_tokens: N >= 1.
    temperature: > 0, the sampling temperature (and the one old_logp is taken at).
    top_p: in (0, 1], nucleus sampling.
    eos_id: the end token (a row stops after it), or None (always N tokens).
    pad_id: the id of padding slots and of slots after a row's end.
    rescore: recompute old_logp and the entropies in one full forward pass (default).
      With False (temperature 1 only) they are the sampler's own, computed from the
      same logits during decoding (equal up to float rounding, about 2e-5), which saves
      that forward pass; the KV cache is then the only source of the old policy's
      numbers, as in TRL's single-update GRPO.

  Returns:
    A `Rollout` of B*G rows.

  Raises:
    ValueError: bad shapes or settings, naming the argument, before any work.

  Example:
    >>> prompts, lengths = sampling.pad_prompts([[5, 6], [1, 2, 3]])
    >>> r = rollout(model, params, prompts, lengths, key, group_size=4, max_new_tokens=8,
    ...             eos_id=2)
    >>> r.tokens.shape, r.mask.shape
    ((8, 11), (8, 10))
  """
  checks.positive_int("group_size", group_size)
  checks.positive_int("max_new_tokens", max_new_tokens)
  checks.scalar("temperature", temperature)
  checks.scalar("top_p", top_p)
  if not float(top_p) <= 1.0:
    raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
  prompts = jnp.asarray(prompts)
  if prompts.ndim != 2 or not jnp.issubdtype(prompts.dtype, jnp.integer):
    raise ValueError(f"prompts must be (B, T0) integer ids, got shape {prompts.shape} and "
                     f"dtype {prompts.dtype}")
  # The sampler's checks (ids in the vocabulary, lengths in [1, T0], eos/pad ids) run
  # here on concrete values, before the jitted rollout traces them away.
  vocab = model.config.vocab_size
  check_token_ids(prompts, vocab, "prompts")
  prompt_lengths = sampling.check_prompt_lengths(prompt_lengths, *prompts.shape)
  if eos_id is not None:
    sampling.check_id("eos_id", eos_id, vocab)
  sampling.check_id("pad_id", pad_id, vocab)
  if not rescore and float(temperature) != 1.0:
    raise ValueError(f"rescore=False needs temperature 1 (the sampler's log-probs are at "
                     f"temperature 1), got temperature={temperature!r}")
  return _rollout(model, params, prompts, prompt_lengths, key, group_size=int(group_size),
                  max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                  top_p=float(top_p), eos_id=None if eos_id is None else int(eos_id),
                  pad_id=int(pad_id), rescore=bool(rescore))


@functools.partial(jax.jit, static_argnames=("model", "temperature"))
def _reference_logprobs(model, ref_params, tokens, left_pad, mask, temperature):
  stats = lm_logprobs.sequence_token_stats(model, ref_params, tokens, left_pad,
                                           temperature=temperature)
  return jnp.where(mask > 0, stats.logprobs, 0.0)


def reference_logprobs(model: Transformer, ref_params: Any, batch: Rollout | Mapping[str, Any],
                       temperature: float = 1.0) -> Array:
  """The frozen reference policy's log-probs of a rollout's completion tokens.

      ref_logp[b, t] = log softmax(z_t^ref / temperature)[tokens[b, t+1]]  where mask = 1,
      0 elsewhere

  (one jitted forward pass; the reference sees the same ragged rows as the policy).

  Args:
    model: the `Transformer`.
    ref_params: the reference parameters (e.g. the policy's initial ones).
    batch: a `Rollout`, or a mapping with "tokens" (B, T), "left_pad" (B,) and "mask"
      (B, T-1), e.g. a GRPO batch.
    temperature: > 0, the temperature the policy's log-probs use.

  Returns:
    (B, T-1) float32, aligned like `Rollout.old_logp`.

  Example:
    >>> r = rollout(model, params, prompts, lengths, key, group_size=4, max_new_tokens=8,
    ...             eos_id=2)
    >>> ref_logp = reference_logprobs(model, ref_params, r)
  """
  checks.scalar("temperature", temperature)
  get = batch.__getitem__ if isinstance(batch, Mapping) else functools.partial(getattr, batch)
  tokens, left_pad, mask = (jnp.asarray(get(k)) for k in ("tokens", "left_pad", "mask"))
  if tokens.ndim != 2 or mask.shape != (tokens.shape[0], tokens.shape[1] - 1) \
      or left_pad.shape != tokens.shape[:1]:
    raise ValueError(f"batch must hold tokens (B, T), left_pad (B,) and mask (B, T-1), got "
                     f"{tokens.shape}, {left_pad.shape} and {mask.shape}")
  return _reference_logprobs(model, ref_params, tokens, left_pad, mask, float(temperature))


def make_grpo_batch_fn(model: Transformer, ref_params: Any | None,
                       prompt_fn: Callable[[int, int], tuple[Any, Any, Any]],
                       reward_fn: Callable[[Rollout, Any], Any], config: GRPOConfig, *,
                       max_new_tokens: int, eos_id: int | None, pad_id: int = 0,
                       temperature: float = 1.0, top_p: float = 1.0,
                       stateful_reward: bool = False, rescore: bool = True
                       ) -> Callable[..., Any]:
  """The on-policy `batch_fn(seed, step, params)` of GRPO for `train(..., on_policy=True)`.

      prompts, lengths, cases = prompt_fn(seed, step)              (B prompts)
      r   = rollout(model, params, prompts, lengths, rollout_key(seed, step), G, ...)
      R   = reward_fn(r, cases)                                    (B*G,)
      A   = group_advantages(R, G, config.adv_eps)
      ref = reference_logprobs(model, ref_params, r)

  and the batch is {"tokens", "left_pad", "mask", "old_logp", "ref_logp", "advantages"}
  (what `grpo.make_loss_fn` reads, see `grpo.check_batch`) plus "rewards" and "lengths"
  (B*G,) for logging. The loop's `config.batch_size` must be B*G.

  A reward with running statistics (AdaThink's EMA threshold and expected lengths)
  takes and returns them explicitly: with `stateful_reward=True`, reward_fn is
  `(rollout, cases, state) -> (rewards, state)` and the batch function is
  `batch_fn(seed, step, params, state) -> (batch, state)`, the carrying form of
  `train(..., on_policy=True, carry=initial_state)`, which checkpoints the state.

  Args:
    model: the `Transformer` (static).
    ref_params: the frozen reference parameters, or None when config.kl_coef == 0 (then
      ref_logp = old_logp, and the loss's "kl" metric is the k3 KL to the sampling policy).
    prompt_fn: `(seed, step) -> (prompts (B, T0) ints left-padded, prompt_lengths (B,),
      cases)`, a pure function; `cases` is anything reward_fn reads (e.g. the answers).
    reward_fn: `(rollout, cases) -> (B*G,)` rewards (host code is fine: it runs outside
      jit); row i*G + g is completion g of prompt i; `rollout.completions()` gives the
      token ids. With `stateful_reward`, `(rollout, cases, state) -> (rewards, state)`.
    config: the `GRPOConfig` (its group_size is G; its temperature-free loss settings
      are the loss function's business).
    max_new_tokens, eos_id, pad_id, temperature, top_p: the sampler's settings (see
      `rollout`); pass the same temperature to `make_loss_fn`.
    stateful_reward: whether reward_fn takes and returns a state (see above).
    rescore: see `rollout` (False: no rescoring forward pass; temperature 1 only).

  Returns:
    `batch_fn(seed, step, params) -> dict` of jax arrays with leading size B*G; with
    `stateful_reward`, `batch_fn(seed, step, params, state) -> (dict, state)`.

  Example:
    >>> batch_fn = make_grpo_batch_fn(model, params0, prompt_fn, reward_fn,
    ...                               GRPOConfig(group_size=4), max_new_tokens=8, eos_id=2)
    >>> batch = batch_fn(0, 0, params0)        # on-policy at params0
  """
  if not isinstance(config, GRPOConfig):
    raise TypeError(f"config must be a GRPOConfig, got {type(config).__name__}")
  for name, fn in (("prompt_fn", prompt_fn), ("reward_fn", reward_fn)):
    if not callable(fn):
      raise TypeError(f"{name} must be callable, got {fn!r}")
  if ref_params is None and config.kl_coef != 0:
    raise ValueError(f"ref_params is None but config.kl_coef = {config.kl_coef}; pass the "
                     "reference parameters or set kl_coef = 0")
  checks.positive_int("max_new_tokens", max_new_tokens)
  checks.scalar("temperature", temperature)
  group_size = config.group_size

  def batch_fn(seed: int, step: int, params: Any, *carry: Any) -> Any:
    prompts, prompt_lengths, cases = prompt_fn(seed, step)
    r = rollout(model, params, prompts, prompt_lengths, rollout_key(seed, step),
                group_size=group_size, max_new_tokens=max_new_tokens,
                temperature=temperature, top_p=top_p, eos_id=eos_id, pad_id=pad_id,
                rescore=rescore)
    if len(carry) != int(stateful_reward):
      raise TypeError(f"batch_fn takes {3 + int(stateful_reward)} arguments with "
                      f"stateful_reward={stateful_reward}, got {3 + len(carry)}")
    rewards, state = reward_fn(r, cases, *carry), None
    if stateful_reward:
      if not (isinstance(rewards, tuple) and len(rewards) == 2):
        raise TypeError("with stateful_reward=True, reward_fn must return (rewards, state), "
                        f"got {type(rewards).__name__}")
      rewards, state = rewards
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.shape != r.lengths.shape:
      raise ValueError(f"reward_fn returned shape {rewards.shape}; expected "
                       f"{r.lengths.shape} (one reward per completion, B*G)")
    checks.check_finite("reward_fn's rewards", rewards)
    ref_logp = r.old_logp if ref_params is None else reference_logprobs(
        model, ref_params, r, temperature)
    batch = {"tokens": r.tokens, "left_pad": r.left_pad, "mask": r.mask,
             "old_logp": r.old_logp, "ref_logp": ref_logp,
             "advantages": group_advantages(rewards, group_size, config.adv_eps),
             "rewards": rewards, "lengths": r.lengths}
    return (batch, state) if stateful_reward else batch

  return batch_fn
