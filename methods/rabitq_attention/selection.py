"""Adaptive top-p token selection from (estimated) attention scores.

Given scores s_j over the cache (exact for the attention sinks and the recent
full-precision window, RaBitQ estimates elsewhere) the attention weights are
a_j = softmax(s / sqrt(d))_j. Top-p keeps the forced tokens (sinks, recent window)
and then the most likely other tokens in decreasing order until the kept mass reaches
p: token (i) in that order is kept iff the mass of the tokens before it is below p,

    keep_(i) = forced_(i)  or  sum_{l < i} a_(l) < p,

which is the smallest such set (at least one token). The number of tokens therefore
adapts to how peaked the attention is, unlike top-k. Under jit the set is bounded by a
static `max_budget`: the top `max_budget` candidates (lax.top_k on the priority
+inf for forced, s_j otherwise) are taken and those past the cutoff marked invalid.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -jnp.inf


class Selection(NamedTuple):
  """indices: (..., K) token positions; keep: (..., K) bool; count: (...) kept tokens;
  mass: (...) attention mass of the kept tokens under the scores used to select."""
  indices: jax.Array
  keep: jax.Array
  count: jax.Array
  mass: jax.Array


def top_p_select(logits: jax.Array, valid: jax.Array, p: float | jax.Array, max_budget: int,
                 forced: jax.Array | None = None) -> Selection:
  """Adaptive top-p over the last axis of logits (..., S) (already scaled by 1/sqrt(d)).

  With a = softmax(logits) over the valid tokens and the candidates in decreasing
  priority (forced first, then by logit), candidate (i) is kept iff

      forced_(i)  or  sum_{l < i} a_(l) < p,

  the smallest set reaching mass p, truncated to the `max_budget` candidates.

  Args:
    logits: (..., S) attention logits (estimated or exact).
    valid: (..., S) or (S,) bool, positions that exist (e.g. < kv_length).
    p: target mass in (0, 1]; p >= 1 keeps every candidate.
    max_budget: K, the static number of candidates (K <= S).
    forced: (..., S) or (S,) bool positions always kept (sinks, recent window).

  Returns:
    Selection with K candidates; the kept ones are the smallest set reaching mass p
    (forced first), truncated to K.

  Example:
    >>> sel = top_p_select(jnp.log(jnp.array([0.5, 0.3, 0.2])), jnp.ones(3, bool), 0.7, 3)
    >>> sel.count                                          # 0.5 < 0.7, 0.8 >= 0.7
    Array(2, dtype=int32)
  """
  s = logits.shape[-1]
  if not isinstance(p, jax.core.Tracer) and not np.all(np.asarray(p) > 0):
    # p <= 0 or NaN would silently keep only the top token.
    raise ValueError(f"top_p_select: p={p!r}; expected a target mass > 0 (p >= 1 keeps all)")
  if not 1 <= max_budget <= s:
    raise ValueError(f"max_budget={max_budget} must be in [1, {s}] (the number of positions)")
  valid = jnp.broadcast_to(valid, logits.shape)
  forced = jnp.zeros_like(valid) if forced is None else jnp.broadcast_to(forced, logits.shape)
  forced = forced & valid
  logits = jnp.where(valid, logits.astype(jnp.float32), NEG_INF)
  log_z = jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  priority = jnp.where(forced, jnp.inf, logits)
  _, idx = jax.lax.top_k(priority, max_budget)
  cand_logit = jnp.take_along_axis(logits, idx, axis=-1)
  probs = jnp.exp(cand_logit - log_z)
  mass_before = jnp.cumsum(probs, axis=-1) - probs
  cand_valid = jnp.take_along_axis(valid, idx, axis=-1)
  cand_forced = jnp.take_along_axis(forced, idx, axis=-1)
  p = jnp.asarray(p, jnp.float32)
  keep = cand_valid & (cand_forced | (mass_before < p) | (p >= 1.0))
  keep = keep.at[..., 0].set(cand_valid[..., 0])          # at least one token
  mass = jnp.sum(jnp.where(keep, probs, 0.0), axis=-1)
  return Selection(idx, keep, jnp.sum(keep, axis=-1), mass)


def top_p_mask(logits: jax.Array, valid: jax.Array, p: float | jax.Array,
               forced: jax.Array | None = None) -> jax.Array:
  """Dense mask of the top-p set (`top_p_select` with max_budget = S, no cap).

  Args:
    logits: (..., S) attention logits.
    valid: (..., S) or (S,) bool positions that exist.
    p: target mass.
    forced: optional (..., S) or (S,) bool positions always kept.

  Returns:
    (..., S) bool.

  Example:
    >>> top_p_mask(jnp.log(jnp.array([0.5, 0.3, 0.2])), jnp.ones(3, bool), 0.7)
    Array([ True,  True, False], dtype=bool)
  """
  sel = top_p_select(logits, valid, p, logits.shape[-1], forced)
  return _scatter_mask(sel, logits.shape)


def top_k_mask(logits: jax.Array, valid: jax.Array, k: int,
               forced: jax.Array | None = None) -> jax.Array:
  """Dense mask of the forced tokens plus the k highest-scoring others (fixed budget):

      M = F  union  argtop_k {s_j : j valid, j not in F}.

  Args:
    logits: (..., S) scores.
    valid: (..., S) or (S,) bool.
    k: the budget of non-forced tokens (clipped to [1, S]).
    forced: optional (..., S) or (S,) bool positions always kept.

  Returns:
    (..., S) bool.

  Example:
    >>> top_k_mask(jnp.array([0.1, 0.9, 0.5]), jnp.ones(3, bool), 1)
    Array([False,  True, False], dtype=bool)
  """
  valid = jnp.broadcast_to(valid, logits.shape)
  forced = jnp.zeros_like(valid) if forced is None else jnp.broadcast_to(forced, logits.shape)
  forced = forced & valid
  free = jnp.where(valid & ~forced, logits, NEG_INF)
  k = max(1, min(int(k), logits.shape[-1]))
  vals, idx = jax.lax.top_k(free, k)
  chosen = jnp.zeros(logits.shape, bool)
  chosen = put_along(chosen, idx, vals > NEG_INF)
  return chosen | forced


def put_along(mask, idx, values):
  """mask (..., S) with mask[..., idx] |= values (idx, values (..., K)).

  Example:
    >>> put_along(jnp.zeros((1, 4), bool), jnp.array([[2, 0]]), jnp.array([[True, False]]))
    Array([[False, False,  True, False]], dtype=bool)
  """
  flat = mask.reshape(-1, mask.shape[-1])
  fi = idx.reshape(-1, idx.shape[-1])
  fv = values.reshape(-1, values.shape[-1])
  rows = jnp.arange(flat.shape[0])[:, None]
  return flat.at[rows, fi].max(fv).reshape(mask.shape)


def _scatter_mask(sel: Selection, shape) -> jax.Array:
  return put_along(jnp.zeros(shape, bool), sel.indices, sel.keep)


def attention_mass(exact_logits: jax.Array, valid: jax.Array, mask: jax.Array) -> jax.Array:
  """Recall of the true attention mass, sum_{j in M} softmax(s)_j over the valid tokens.

  Args:
    exact_logits: (..., S) exact logits s.
    valid: (..., S) or (S,) bool.
    mask: (..., S) bool selected tokens M.

  Returns:
    (...) the mass in [0, 1].

  Example:
    >>> attention_mass(jnp.zeros(4), jnp.ones(4, bool), jnp.array([1, 1, 0, 0], bool))
    Array(0.5, dtype=float32)
  """
  logits = jnp.where(jnp.broadcast_to(valid, exact_logits.shape), exact_logits, NEG_INF)
  probs = jax.nn.softmax(logits, axis=-1)
  return jnp.sum(jnp.where(mask, probs, 0.0), axis=-1)


def decode_masks(positions: jax.Array, length: int, num_sink: int,
                 recent_window: int) -> tuple[jax.Array, jax.Array]:
  """The valid and the forced tokens of decode queries at `positions`.

  For a query at position t over a cache of `length` tokens:

      valid_j = j <= t,    forced_j = valid_j and (j < num_sink or j > t - recent_window),

  the attention sinks and the recent window, which every selection method attends.

  Args:
    positions: (Q,) int query positions.
    length: S, the cache length.
    num_sink: the number of sink tokens.
    recent_window: the number of most recent tokens (the query's own included).

  Returns:
    (valid (Q, S), forced (Q, S)) bool.

  Example:
    >>> valid, forced = decode_masks(jnp.array([5]), 8, 1, 2)
    >>> forced
    Array([[ True, False, False, False,  True,  True, False, False]], dtype=bool)
  """
  j = jnp.arange(length)[None, :]
  pos = jnp.asarray(positions)[:, None]
  valid = j <= pos
  forced = valid & ((j < num_sink) | (j > pos - recent_window))
  return valid, forced
