"""AdaThink-Med's uncertainty-shaped length reward, and the length rewards it is compared with.

Transcribed from the paper's public code (shaohao011/AdaThinkMed,
``verl/workers/reward/length_reward_func.py``, ``entropy_length_reward_question_level``)
as pure functions over arrays. A batch holds P questions x G rollouts, the rollouts of
one question contiguous (row b belongs to question b // G), as ``common.rl`` samples them.

    u_b   = mean of the top max(1, floor(top_frac L_b)) token entropies of response b
    e_b   = clip((log(1+u_b) - min_b' log(1+u_b')) / (max - min + eps), 0, 1)   (over the batch)
    c_b   = 1 - e_b                                                           (confidence)
    d_q   = 1 - mean_{b in q} y_b (alpha (1 - e_b) + (1 - alpha))             (difficulty)
    theta <- q_0.7(d) on the first batch, then 0.9 theta + 0.1 q_0.7(d)        (threshold)
    easy  = d_q < theta;  L_exp = EMA-before-this-batch of mean length in the bin (easy/hard),
            or L_b itself while the bin has no EMA yet; plus 1e-6
    s_b   = max(0, 1 - L_b / L_exp (0.5 + 0.5 c_b))   if correct and easy
            min(1, L_b / L_exp (0.5 + 0.5 c_b) - 1)   if wrong and hard
            0                                          otherwise
    rep_b = -0.05 (number of tokens inside a repeated 40-gram) / L_b
    R_b   = y_b + 0.5 format_b + 0.5 (s_b + rep_b), placed on token L_b - 1.

The EMA state (theta, L_exp per bin) is the explicit ``LengthRewardState``; every
function returns the new state instead of keeping it anywhere.

Every reward in ``REWARDS`` has the signature
``fn(inputs: RewardInputs, state: LengthRewardState, *, group_size, **hparams)
-> (rewards (B,), state, info dict)``; ``get_reward(name)`` looks one up.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common import checks

Array = jax.Array

EASY, HARD = 0, 1


class LengthRewardState(NamedTuple):
  """The running statistics of the adaptive length reward (a pytree of scalars).

  Attributes:
    theta: the EMA difficulty threshold.
    theta_set: whether theta has been set (the first batch sets it without averaging).
    l_exp: (2,) the EMA of the mean response length in the easy (0) and hard (1) bins;
      0 means "not set yet", as in the public code.
  """
  theta: Array
  theta_set: Array
  l_exp: Array


def init_state() -> LengthRewardState:
  """The state before the first batch: no threshold, no expected lengths.

  Example:
    >>> init_state().l_exp
    Array([0., 0.], dtype=float32)
  """
  return LengthRewardState(theta=jnp.zeros((), jnp.float32),
                           theta_set=jnp.zeros((), jnp.bool_),
                           l_exp=jnp.zeros((2,), jnp.float32))


class RewardInputs(NamedTuple):
  """One batch of B = P G scored rollouts.

  Attributes:
    correct: (B,) accuracy y_b (bool or 0/1; a value > 0 counts as correct).
    format_ok: (B,) format score (0/1).
    mask: (B, T) response mask, 1 on the L_b response tokens (a prefix of the row).
    entropies: (B, T) per-token entropies of the sampling policy (only AdaThink reads them).
    tokens: (B, T) response token ids (only the repetition penalty reads them).
  """
  correct: Any
  format_ok: Any
  mask: Any
  entropies: Any = None
  tokens: Any = None


# ----------------------------------------------------------------------------- checks


def _check_group(name: str, batch: int, group_size: int) -> None:
  checks.positive_int("group_size", group_size, low=2)
  if batch % group_size:
    raise ValueError(f"{name} has {batch} rows, not a multiple of group_size={group_size}")


def _check_rows(name: str, a: Any, rows: int | None = None, ndim: int = 1) -> None:
  if jnp.ndim(a) != ndim or (rows is not None and jnp.shape(a)[0] != rows):
    want = f"({rows if rows is not None else 'B'}{', T' if ndim == 2 else ',)'}"
    want = want if ndim == 1 else want + ")"
    raise ValueError(f"{name} must have shape {want}, got {jnp.shape(a)}")


def _check_fraction(name: str, value: Any, strict_low: bool = True) -> None:
  checks.scalar(name, value, low=0.0, strict=strict_low, high=1.0)


# ----------------------------------------------------------------------------- pieces


def lengths_from_mask(mask: Array) -> Array:
  """L_b = sum_t mask[b, t] as int32 (B,)."""
  return jnp.sum(jnp.asarray(mask) > 0, axis=-1).astype(jnp.int32)


def uncertainty(entropies: Array, mask: Array, top_frac: float = 0.2) -> Array:
  """u_b = mean of the k_b largest masked token entropies, k_b = max(1, floor(top_frac L_b)).

  An empty response (L_b = 0) has u_b = 0.

  Args:
    entropies: (B, T) token entropies (nats).
    mask: (B, T) response mask (bool or 0/1).
    top_frac: the fraction of tokens kept, in (0, 1] (0.2 in the paper's runs).

  Returns:
    (B,) uncertainties.

  Example:
    >>> uncertainty(jnp.array([[1., 2., 3., 4., 5.]]), jnp.ones((1, 5)), 0.4)
    Array([4.5], dtype=float32)
  """
  _check_rows("entropies", entropies, ndim=2)
  checks.same_shape("entropies and mask", entropies, mask)
  _check_fraction("top_frac", top_frac)
  checks.check_finite("entropies", entropies)
  entropies = checks.as_float("entropies", entropies)
  valid = jnp.asarray(mask) > 0
  lengths = jnp.sum(valid, axis=-1)
  k = jnp.maximum(1, jnp.floor(lengths * top_frac).astype(jnp.int32))
  ranked = -jnp.sort(jnp.where(valid, -entropies, jnp.inf), axis=-1)  # descending, -inf pad
  ranked = jnp.where(jnp.isfinite(ranked), ranked, 0.0)
  top_sum = jnp.take_along_axis(jnp.cumsum(ranked, axis=-1), (k - 1)[:, None], axis=-1)[:, 0]
  return jnp.where(lengths > 0, top_sum / k, 0.0)


def normalize_log_minmax(u: Array, eps: float = 1e-8) -> Array:
  """e = clip((log(1+u) - min log(1+u)) / (max log(1+u) - min log(1+u) + eps), 0, 1).

  The public code's 'log_minmax' normalisation, over the whole batch.

  Args:
    u: (B,) uncertainties (>= 0).
    eps: the denominator guard (1e-8).

  Returns:
    (B,) normalised uncertainties in [0, 1]; all 0 when every u is equal.

  Example:
    >>> normalize_log_minmax(jnp.array([0.0, jnp.e - 1.0]))
    Array([0., 1.], dtype=float32)
  """
  _check_rows("u", u)
  checks.scalar("eps", eps)
  checks.check_finite("u", u)
  log_u = jnp.log1p(checks.as_float("u", u))
  low, high = jnp.min(log_u), jnp.max(log_u)
  return jnp.clip((log_u - low) / (high - low + eps), 0.0, 1.0)


def confidence(entropies: Array, mask: Array, top_frac: float = 0.2,
               eps: float = 1e-8) -> tuple[Array, Array]:
  """(e, c) with e = normalize_log_minmax(uncertainty(...)) and c = 1 - e, each (B,).

  Example:
    >>> e, c = confidence(entropies, mask)
  """
  e = normalize_log_minmax(uncertainty(entropies, mask, top_frac), eps)
  return e, 1.0 - e


def difficulty(correct: Array, e: Array, group_size: int, alpha: float = 0.5) -> Array:
  """d_q = 1 - (1/G) sum_{b in q} y_b (alpha (1 - e_b) + (1 - alpha)), per question.

  e is the *normalised uncertainty* (not the confidence): a question answered correctly
  and confidently by every rollout has d = 0; one never answered correctly has d = 1.

  Args:
    correct: (B,) accuracy (> 0 counts as correct), B = P G.
    e: (B,) normalised uncertainties in [0, 1].
    group_size: G >= 2 rollouts per question (contiguous rows).
    alpha: weight of the confidence term, in [0, 1] (0.5 in the paper's runs).

  Returns:
    (P,) difficulties in [0, 1].

  Example:
    >>> difficulty(jnp.array([1, 0]), jnp.array([0.0, 0.0]), 2)
    Array([0.5], dtype=float32)
  """
  _check_rows("correct", correct)
  _check_rows("e", e, rows=jnp.shape(correct)[0])
  _check_group("correct", jnp.shape(correct)[0], group_size)
  _check_fraction("alpha", alpha, strict_low=False)
  y = (jnp.asarray(correct) > 0).astype(jnp.float32)
  per_rollout = y * (alpha * (1.0 - checks.as_float("e", e)) + (1.0 - alpha))
  return 1.0 - jnp.mean(per_rollout.reshape(-1, group_size), axis=-1)


def update_theta(state: LengthRewardState, difficulties: Array, quantile: float = 0.7,
                 momentum: float = 0.9, fixed_theta: float | None = None) -> LengthRewardState:
  """theta <- q (first batch), then theta <- momentum theta + (1 - momentum) q.

  q is the ``quantile`` (linear interpolation, as numpy) of this batch's question
  difficulties. With ``fixed_theta`` (the ablation) theta is that constant instead.

  Args:
    state: the reward state.
    difficulties: (P,) question difficulties of this batch.
    quantile: in [0, 1] (0.7 in the paper's runs: ``difficulty_threshold``).
    momentum: EMA momentum in [0, 1) (0.9).
    fixed_theta: a constant threshold, or None for the EMA.

  Returns:
    The state with the new theta (l_exp untouched).

  Example:
    >>> update_theta(init_state(), jnp.array([0.0, 1.0]), quantile=0.5).theta
    Array(0.5, dtype=float32)
  """
  _check_rows("difficulties", difficulties)
  _check_fraction("quantile", quantile, strict_low=False)
  checks.scalar("momentum", momentum, low=0.0, strict=False, high=1.0)
  if fixed_theta is not None:
    checks.scalar("fixed_theta", fixed_theta, low=0.0, strict=False, high=1.0)
    return state._replace(theta=jnp.asarray(fixed_theta, jnp.float32),
                          theta_set=jnp.ones((), jnp.bool_))
  q = jnp.quantile(checks.as_float("difficulties", difficulties), quantile)
  theta = jnp.where(state.theta_set, momentum * state.theta + (1.0 - momentum) * q, q)
  return state._replace(theta=theta.astype(jnp.float32), theta_set=jnp.ones((), jnp.bool_))


def expected_length(state: LengthRewardState, hard: Array, lengths: Array) -> Array:
  """L_exp_b = l_exp[bin_b] if that bin's EMA is set (> 0) else L_b; plus 1e-6.

  Uses the EMA from *before* this batch (the public code updates it afterwards).

  Args:
    state: the reward state.
    hard: (B,) bin of each rollout (True/1 = hard: its question has d >= theta).
    lengths: (B,) response lengths.

  Returns:
    (B,) expected lengths.
  """
  l_bin = state.l_exp[jnp.asarray(hard).astype(jnp.int32)]
  lengths = checks.as_float("lengths", lengths)
  return jnp.where(l_bin > 0, l_bin, lengths) + 1e-6


def update_lengths(state: LengthRewardState, hard: Array, lengths: Array,
                   momentum: float = 0.9) -> LengthRewardState:
  """l_exp[j] <- mean_{b in bin j} L_b if unset, else momentum l_exp[j] + (1 - momentum) mean.

  A bin without rollouts in this batch keeps its value.

  Args:
    state: the reward state.
    hard: (B,) bin of each rollout (True/1 = hard).
    lengths: (B,) response lengths.
    momentum: EMA momentum in [0, 1) (0.9).

  Returns:
    The state with the new l_exp.

  Example:
    >>> update_lengths(init_state(), jnp.array([0, 1]), jnp.array([4, 10])).l_exp
    Array([ 4., 10.], dtype=float32)
  """
  _check_rows("hard", hard)
  _check_rows("lengths", lengths, rows=jnp.shape(hard)[0])
  checks.scalar("momentum", momentum, low=0.0, strict=False, high=1.0)
  one_hot = jax.nn.one_hot(jnp.asarray(hard).astype(jnp.int32), 2)          # (B, 2)
  counts = one_hot.sum(0)
  means = (one_hot * checks.as_float("lengths", lengths)[:, None]).sum(0) / jnp.maximum(counts, 1)
  blended = jnp.where(state.l_exp == 0, means, momentum * state.l_exp + (1 - momentum) * means)
  l_exp = jnp.where(counts > 0, blended, state.l_exp)
  return state._replace(l_exp=l_exp.astype(jnp.float32))


def length_score(correct: Array, easy: Array, lengths: Array, l_exp: Array,
                 confidence: Array) -> Array:
  """s = max(0, 1 - r) if correct & easy;  min(1, r - 1) if wrong & hard;  0 otherwise,

  with r = (L / L_exp)(0.5 + 0.5 c). "Wrong and hard" is not clipped below: a short wrong
  answer to a hard question scores down to -1 (the public code's ``min(1, ...)``).

  Args:
    correct: (B,) accuracy (> 0 counts as correct; == 0 as wrong).
    easy: (B,) whether the rollout's question is easy (d < theta).
    lengths: (B,) response lengths L.
    l_exp: (B,) expected lengths (``expected_length``).
    confidence: (B,) c in [0, 1].

  Returns:
    (B,) length scores in [-1, 1].

  Example:
    >>> length_score(jnp.array([1]), jnp.array([True]), jnp.array([5]), jnp.array([10.]),
    ...              jnp.array([1.0]))
    Array([0.5], dtype=float32)
  """
  _check_rows("correct", correct)
  b = jnp.shape(correct)[0]
  for name, a in (("easy", easy), ("lengths", lengths), ("l_exp", l_exp),
                  ("confidence", confidence)):
    _check_rows(name, a, rows=b)
  ratio = checks.as_float("lengths", lengths) / l_exp * (0.5 + 0.5 * confidence)
  y = jnp.asarray(correct)
  easy = jnp.asarray(easy).astype(jnp.bool_)
  return jnp.where((y > 0) & easy, jnp.maximum(0.0, 1.0 - ratio),
                   jnp.where((y == 0) & ~easy, jnp.minimum(1.0, ratio - 1.0), 0.0))


def repetition_penalty(tokens: Array, mask: Array, n: int = 40, per_token: float = 0.05,
                       only_start: bool = True) -> Array:
  """rep_b = -per_token |{t < L_b: t inside a marked repeated n-gram}| / L_b (0 if L_b = 0).

  The n-gram starting at j (j + n <= L_b) is *repeated* if the same n tokens start at an
  earlier position. With ``only_start`` (the public code's default) a repeated start is
  marked only when it lies beyond the end of the previous repeated n-gram (j > j' + n,
  j' the last repeated start, marked or not), so a long repeated run marks its first n
  tokens; without it every repeated start marks its n tokens. Exact (no hashing):
  O(n T^2) work per row, jit- and vmap-friendly.

  Args:
    tokens: (B, T) token ids.
    mask: (B, T) response mask; the response is the first L_b = sum(mask) tokens.
    n: n-gram size (40 in the public code).
    per_token: penalty per marked token (0.05).
    only_start: the public code's ``repetition_only_start`` (True).

  Returns:
    (B,) penalties <= 0.

  Example:
    >>> repetition_penalty(jnp.array([[1, 2, 1, 2]]), jnp.ones((1, 4)), n=2, per_token=1.0)
    Array([-0.5], dtype=float32)
  """
  _check_rows("tokens", tokens, ndim=2)
  checks.same_shape("tokens and mask", tokens, mask)
  checks.positive_int("n", n)
  checks.scalar("per_token", per_token, low=0.0, strict=False)
  tokens = jnp.asarray(tokens)
  lengths = lengths_from_mask(mask)
  t_len = tokens.shape[1]
  if n > t_len:
    return jnp.zeros(tokens.shape[:1], jnp.float32)
  return jax.vmap(functools.partial(_row_repetition, n=n, only_start=only_start))(
      tokens, lengths) * -per_token


def _row_repetition(tokens: Array, length: Array, *, n: int, only_start: bool) -> Array:
  """Fraction of the first ``length`` tokens inside marked repeated n-grams (one row)."""
  t_len = tokens.shape[0]
  s = t_len - n + 1                                            # candidate starts
  eq = tokens[:, None] == tokens[None, :]                      # (T, T)

  def body(k, acc):
    return acc & jax.lax.dynamic_slice(eq, (k, k), (s, s))
  same = jax.lax.fori_loop(0, n, body, jnp.ones((s, s), jnp.bool_))   # same[i, j]: windows equal
  starts = jnp.arange(s)
  earlier = starts[:, None] < starts[None, :]                  # i < j
  repeated = jnp.any(same & earlier, axis=0) & (starts + n <= length)

  def sweep(curr_end, j):
    mark = repeated[j] & (jnp.logical_not(only_start) | (j > curr_end))
    return jnp.where(repeated[j], j + n, curr_end), mark
  _, marked = jax.lax.scan(sweep, jnp.asarray(-1, jnp.int32), starts.astype(jnp.int32))
  delta = jnp.zeros(t_len + 1, jnp.int32).at[starts].add(marked.astype(jnp.int32))
  delta = delta.at[starts + n].add(-marked.astype(jnp.int32))
  inside = jnp.cumsum(delta)[:t_len] > 0
  count = jnp.sum(inside & (jnp.arange(t_len) < length))
  return jnp.where(length > 0, count / jnp.maximum(length, 1), 0.0).astype(jnp.float32)


def reward_on_last_token(rewards: Array, mask: Array) -> Array:
  """(B, T) token rewards: R_b at token L_b - 1, 0 elsewhere (and everywhere when L_b = 0).

  Example:
    >>> reward_on_last_token(jnp.array([2.0]), jnp.array([[1, 1, 0]]))
    Array([[0., 2., 0.]], dtype=float32)
  """
  _check_rows("rewards", rewards)
  _check_rows("mask", mask, rows=jnp.shape(rewards)[0], ndim=2)
  lengths = lengths_from_mask(mask)
  t = jnp.arange(jnp.shape(mask)[1])
  place = (t[None, :] == (lengths - 1)[:, None])
  return jnp.where(place, checks.as_float("rewards", rewards)[:, None], 0.0)


# ----------------------------------------------------------------------------- rewards


def _common_inputs(inputs: RewardInputs, group_size: int) -> tuple[Array, Array, Array]:
  _check_rows("correct", inputs.correct)
  b = jnp.shape(inputs.correct)[0]
  _check_rows("format_ok", inputs.format_ok, rows=b)
  _check_rows("mask", inputs.mask, rows=b, ndim=2)
  _check_group("correct", b, group_size)
  y = (jnp.asarray(inputs.correct) > 0).astype(jnp.float32)
  return y, checks.as_float("format_ok", inputs.format_ok), lengths_from_mask(inputs.mask)


def adathink_reward(inputs: RewardInputs, state: LengthRewardState, *, group_size: int,
                    alpha: float = 0.5, top_frac: float = 0.2, quantile: float = 0.7,
                    theta_momentum: float = 0.9, len_momentum: float = 0.9,
                    eps: float = 1e-8, format_weight: float = 0.5, length_weight: float = 0.5,
                    ngram: int = 40, repetition: float = 0.05, only_start: bool = True,
                    fixed_theta: float | None = None
                    ) -> tuple[Array, LengthRewardState, dict[str, Array]]:
  """R = y + format_weight format + length_weight (s + rep), in the public code's order.

  1. e, c from the top-``top_frac`` entropies (``confidence``); 2. d per question
  (``difficulty``); 3. theta updated with this batch (``update_theta``); 4. easy = d < theta;
  5. s against the *previous* L_exp (``expected_length``, ``length_score``); 6. rep
  (``repetition_penalty``); 7. L_exp updated with this batch (``update_lengths``).

  Args:
    inputs: ``RewardInputs`` with entropies and tokens.
    state: the ``LengthRewardState`` (``init_state()`` at the start of stage 2).
    group_size: G >= 2.
    alpha, top_frac, quantile, theta_momentum, len_momentum, eps: see the pieces.
    format_weight, length_weight: lambda_f, lambda_t (0.5, 0.5).
    ngram, repetition, only_start: the repetition penalty's n, per-token penalty, mode.
    fixed_theta: a constant threshold (the ablation) instead of the EMA.

  Returns:
    (rewards (B,), new state, info) with info: uncertainty, confidence, difficulty (B,),
    easy, length_score, repetition, theta, batch_theta.

  Example:
    >>> r, state, info = adathink_reward(inputs, init_state(), group_size=8)
  """
  y, fmt, lengths = _common_inputs(inputs, group_size)
  if inputs.entropies is None or inputs.tokens is None:
    raise ValueError("adathink_reward needs inputs.entropies and inputs.tokens, got None")
  u = uncertainty(inputs.entropies, inputs.mask, top_frac)
  e = normalize_log_minmax(u, eps)
  conf = 1.0 - e
  d = difficulty(y, e, group_size, alpha)
  batch_theta = jnp.quantile(d, quantile)
  state = update_theta(state, d, quantile, theta_momentum, fixed_theta)
  d_rollout = jnp.repeat(d, group_size)
  hard = d_rollout >= state.theta
  l_exp = expected_length(state, hard, lengths)
  s = length_score(y, ~hard, lengths, l_exp, conf)
  rep = repetition_penalty(inputs.tokens, inputs.mask, ngram, repetition, only_start)
  state = update_lengths(state, hard, lengths, len_momentum)
  rewards = y + format_weight * fmt + length_weight * (s + rep)
  info = dict(uncertainty=u, confidence=conf, difficulty=d_rollout, easy=~hard,
              length_score=s, repetition=rep, theta=state.theta, batch_theta=batch_theta)
  return rewards, state, info


def vanilla_reward(inputs: RewardInputs, state: LengthRewardState | None = None, *,
                   group_size: int, accuracy_weight: float = 0.9, format_weight: float = 0.1
                   ) -> tuple[Array, Any, dict[str, Array]]:
  """R = accuracy_weight y + format_weight format (stage 1, plain GRPO).

  The defaults are the public code's stage-1 reward (``examples/reward_function/box.py``:
  0.9 accuracy + 0.1 format), not "accuracy + format".

  Example:
    >>> r, _, _ = vanilla_reward(inputs, group_size=8)
  """
  y, fmt, _ = _common_inputs(inputs, group_size)
  return accuracy_weight * y + format_weight * fmt, state, {}


def _length_baseline(inputs, group_size, format_weight, length_weight, term_fn):
  y, fmt, lengths = _common_inputs(inputs, group_size)
  budget = float(jnp.shape(inputs.mask)[1])
  s = term_fn(y, checks.as_float("lengths", lengths), budget)
  return y + format_weight * fmt + length_weight * s, dict(length_score=s)


def uniform_length_reward(inputs: RewardInputs, state: Any = None, *, group_size: int,
                          format_weight: float = 0.5, length_weight: float = 0.5
                          ) -> tuple[Array, Any, dict[str, Array]]:
  """R = y + format_weight format - length_weight L / T: the same length penalty for every
  question and outcome (T = the generation budget, the mask's width).

  Example:
    >>> r, _, info = uniform_length_reward(inputs, group_size=8, length_weight=0.2)
  """
  r, info = _length_baseline(inputs, group_size, format_weight, length_weight,
                             lambda y, length, budget: -length / budget)
  return r, state, info


def lcpo_reward(inputs: RewardInputs, state: Any = None, *, group_size: int,
                target_length: Any = 64, format_weight: float = 0.5, length_weight: float = 0.5
                ) -> tuple[Array, Any, dict[str, Array]]:
  """R = y + format_weight format - length_weight |L - L_target| / T (L1-Exact / LCPO).

  Aggarwal & Welleck (2025) use y - a |L - L_target| with a per token; here a =
  length_weight / T, T the generation budget, so the weights compare across rewards.

  Args:
    target_length: a scalar or (B,) per-rollout target length.

  Example:
    >>> r, _, _ = lcpo_reward(inputs, group_size=8, target_length=32)
  """
  checks.scalar("target_length", target_length, low=0.0, strict=False)

  def term(y, length, budget):
    return -jnp.abs(length - jnp.asarray(target_length, jnp.float32)) / budget
  r, info = _length_baseline(inputs, group_size, format_weight, length_weight, term)
  return r, state, info


def shorter_better_reward(inputs: RewardInputs, state: Any = None, *, group_size: int,
                          format_weight: float = 0.5, length_weight: float = 0.5
                          ) -> tuple[Array, Any, dict[str, Array]]:
  """R = y + format_weight format - length_weight |L - SOL_q| / T (ShorterBetter).

  SOL_q, the sample optimal length of question q, is the length of its shortest correct
  rollout, or the mean rollout length when none is correct (Yi et al., 2025); they use
  alpha y - beta |L - SOL| with a per-token beta; here beta = length_weight / T.

  Example:
    >>> r, _, info = shorter_better_reward(inputs, group_size=8)
  """
  def term(y, length, budget):
    yg, lg = y.reshape(-1, group_size), length.reshape(-1, group_size)
    shortest = jnp.min(jnp.where(yg > 0, lg, jnp.inf), axis=-1)
    sol = jnp.where(jnp.any(yg > 0, axis=-1), shortest, lg.mean(-1))
    return -jnp.abs(length - jnp.repeat(sol, group_size)) / budget
  r, info = _length_baseline(inputs, group_size, format_weight, length_weight, term)
  return r, state, info


REWARDS: dict[str, Callable[..., tuple[Array, Any, dict[str, Array]]]] = {
    "adathink": adathink_reward,
    "vanilla": vanilla_reward,
    "uniform_length": uniform_length_reward,
    "lcpo": lcpo_reward,
    "shorter_better": shorter_better_reward,
}


def get_reward(name: str) -> Callable[..., tuple[Array, Any, dict[str, Array]]]:
  """The reward registered as ``name``; an unknown name is a one-line ValueError.

  Example:
    >>> fn = get_reward("adathink")
  """
  if name not in REWARDS:
    raise ValueError(f"unknown reward {name!r}; expected one of {sorted(REWARDS)}")
  return REWARDS[name]
