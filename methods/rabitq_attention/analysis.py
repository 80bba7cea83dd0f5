"""Measuring RaBitQ attention: estimator error statistics, selection quality, and
instrumented runs of a `Transformer` (recorded queries, teacher-forced decoding).

- Estimator: `estimator_trials` draws rotations and roundings for fixed unit pairs
  (o, q) and returns every estimate of <o, q>; `error_stats` summarises them (RMSE,
  the bias t-statistic, the fraction inside the RaBitQ bound).
- Selection: for a mask M over the cache, `selection_metrics` gives the tokens
  touched |M|, the recall of the true attention mass sum_{j in M} softmax(s)_j and the
  relative output error ||attn_M(q) - attn(q)|| / ||attn(q)||; `tokens_at_recall`
  reads off a budget curve how many tokens reach a target recall.
- Models: `record_queries` runs a model with `recording_attention_fn` to collect
  every layer's queries, keys and values; `teacher_forced_decode` prefills a prompt
  and then feeds the true next token one step at a time through the cache.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common.models import transformer
from methods.rabitq_attention import baselines
from methods.rabitq_attention import estimator
from methods.rabitq_attention import quantization
from methods.rabitq_attention import selection


class EstimatorTrials(NamedTuple):
  """Estimates of <o, q> (R rotations, N pairs) and the bound of each.

  float: (R, N) with the exact rotated query; randomized, deterministic: (R, N) with
  the 4-bit query (randomised / nearest rounding); bound: (R, N) `error_bound`.
  """
  float: jax.Array
  randomized: jax.Array
  deterministic: jax.Array
  bound: jax.Array


def estimator_trials(o: jax.Array, q: jax.Array, key: jax.Array, num_rotations: int,
                     eps0: float = estimator.EPS0) -> EstimatorTrials:
  """The RaBitQ estimates of <o_i, q_i> over independent rotations and roundings.

  For each of `num_rotations` draws of a Haar rotation P (and of the rounding
  noise u per pair), every pair's key o_i is quantised alone and estimated against
  q_i three ways: <x_bar, P^T q>/<o_bar, o> (float query), and with the randomised
  and the round-to-nearest 4-bit query codes.

  Args:
    o: (N, D) unit keys (D a multiple of 32).
    q: (N, D) unit queries.
    key: PRNG key of the rotations and roundings.
    num_rotations: R.
    eps0: the bound's confidence parameter.

  Returns:
    `EstimatorTrials` of (R, N) arrays.

  Example:
    >>> trials = estimator_trials(o, q, jax.random.PRNGKey(0), 100)
    >>> error_stats(trials.randomized, jnp.sum(o * q, -1), trials.bound)["bias_t_rms"]
  """
  if o.ndim != 2 or o.shape != q.shape:
    raise ValueError(f"estimator_trials: o {o.shape} and q {q.shape} must both be (N, D)")
  if (isinstance(num_rotations, bool) or not isinstance(num_rotations, numbers.Integral)
      or num_rotations < 1):
    raise ValueError(f"estimator_trials: num_rotations={num_rotations!r}; expected an int >= 1")
  n, d = o.shape

  def pair_estimates(codes, q_rot, round_key):
    flt = estimator.estimate_unit_float(codes, q_rot)
    rnd = estimator.estimate_unit(codes, quantization.quantize_query(q_rot, round_key,
                                                                     randomized=True))
    det = estimator.estimate_unit(codes, quantization.quantize_query(q_rot, randomized=False))
    return flt, rnd, det

  @jax.jit
  def one(rkey):
    rot_key, round_key = jax.random.split(rkey)
    p = quantization.random_rotation(rot_key, d)
    codes = quantization.quantize_keys(o[:, None, :], p)   # one key per pair: (n, 1, ...)
    flt, rnd, det = jax.vmap(pair_estimates)(codes, q @ p, jax.random.split(round_key, n))
    bound = estimator.error_bound(codes.ip_correction[:, 0], d, eps0)
    return flt[:, 0], rnd[:, 0], det[:, 0], bound

  return EstimatorTrials(*jax.lax.map(one, jax.random.split(key, num_rotations)))


def error_stats(estimates: jax.Array, exact: jax.Array, bound: jax.Array) -> dict:
  """Error statistics of estimates (R, N) of exact (N,) over R independent draws.

  With e_ri = estimate_ri - exact_i, mean_i = (1/R) sum_r e_ri and se_i its standard
  error s_i / sqrt(R):

      rmse = sqrt(mean_ri e_ri^2),   bias_t_rms = sqrt(mean_i (mean_i / se_i)^2),
      mean_abs_bias = mean_i |mean_i|,   inside_bound = mean_ri [|e_ri| <= bound_ri].

  For an unbiased estimator mean_i / se_i ~ N(0, 1), so bias_t_rms is about 1.

  Args:
    estimates: (R, N).
    exact: (N,).
    bound: (R, N).

  Returns:
    {"rmse", "bias_t_rms", "mean_abs_bias", "inside_bound"} as floats.

  Example:
    >>> error_stats(jnp.array([[1.1, 2.0], [0.9, 2.2]]), jnp.array([1.0, 2.0]),
    ...             jnp.full((2, 2), 0.15))["inside_bound"]
    0.75
  """
  err = np.asarray(estimates - exact[None, :])
  mean = err.mean(axis=0)
  se = err.std(axis=0, ddof=1) / math.sqrt(err.shape[0])
  return dict(rmse=float(np.sqrt(np.mean(err ** 2))),
              bias_t_rms=float(np.sqrt(np.mean((mean / se) ** 2))),
              mean_abs_bias=float(np.mean(np.abs(mean))),
              inside_bound=float(np.mean(np.abs(err) <= np.asarray(bound))))


def selection_metrics(q, k, v, logits, valid, full, mask):
  """Tokens touched, recall of the true attention mass and relative output error.

      tokens = |M|,   recall = sum_{j in M} softmax(s)_j,
      out_err = ||attn_M(q) - attn(q)|| / ||attn(q)||,

  with s the exact logits and attn_M exact attention restricted to M.

  Args:
    q: (Q, D) queries; k, v: (S, D) the cache.
    logits: (Q, S) exact logits q.k / sqrt(D).
    valid: (Q, S) bool positions that exist.
    full: (Q, D) full attention output (`baselines.masked_attention` over `valid`).
    mask: (Q, S) bool selected tokens.

  Returns:
    (tokens (Q,), recall (Q,), out_err (Q,)).

  Example:
    >>> tokens, recall, err = selection_metrics(q, k, v, logits, valid, full, mask)
  """
  out = baselines.masked_attention(q[:, None, :], k[None], v[None], mask[:, None, :])[:, 0]
  return (jnp.sum(mask, axis=-1), selection.attention_mass(logits, valid, mask),
          jnp.linalg.norm(out - full, axis=-1) / jnp.linalg.norm(full, axis=-1))


def tokens_at_recall(tokens, recall, target: float) -> float:
  """Tokens needed to reach mean recall `target` on a budget curve.

  The points (tokens_i, recall_i) are sorted by tokens, recall made non-decreasing
  (a larger budget can always keep the smaller one's tokens), and log(tokens)
  interpolated linearly between the two points around `target`.

  Args:
    tokens: the curve's token counts.
    recall: the curve's recalls, one per point.
    target: the recall to reach.

  Returns:
    The interpolated number of tokens; nan if the curve never reaches `target`.

  Example:
    >>> tokens_at_recall([10, 100], [0.5, 0.9], 0.7)     # sqrt(10 * 100)
    31.62...
  """
  t, r = np.asarray(tokens, float), np.asarray(recall, float)
  order = np.argsort(t)
  t, r = t[order], np.maximum.accumulate(r[order])
  if r[-1] < target:
    return float("nan")
  i = int(np.argmax(r >= target))
  if i == 0:
    return float(t[0])
  frac = (target - r[i - 1]) / max(r[i] - r[i - 1], 1e-12)
  return float(np.exp(np.log(t[i - 1]) + frac * (np.log(t[i]) - np.log(t[i - 1]))))


def attention_entropy(logits: jax.Array, valid: jax.Array) -> jax.Array:
  """The entropy H = -sum_j a_j log a_j of a = softmax(logits) over the valid tokens.

  Args:
    logits: (..., S) attention logits.
    valid: (..., S) bool.

  Returns:
    (...) entropies in nats (log S for uniform attention, 0 for one token).

  Example:
    >>> attention_entropy(jnp.zeros((4,)), jnp.ones((4,), bool))   # log 4
    Array(1.3862944, dtype=float32)
  """
  pr = jax.nn.softmax(jnp.where(valid, logits, -jnp.inf), axis=-1)
  return -jnp.sum(jnp.where(pr > 0, pr * jnp.log(pr), 0.0), -1)


def recording_attention_fn(q, k, v, *, q_positions, kv_length, layer, state):
  """A `Transformer` attention_fn that is exact attention and records the queries.

  `state` is the layer's (B, S, H, D) buffer in `KVCache.state`; the call's queries
  q (B, T, H, D) are written at positions q_positions[0] .. + T. Returns
  (dot_product_attention(q, k, v), the updated buffer).

  Example:
    >>> model = Transformer(config, attention_fn=recording_attention_fn)
  """
  out = transformer.dot_product_attention(q, k, v, q_positions=q_positions,
                                          kv_length=kv_length, layer=layer)
  return out, jax.lax.dynamic_update_slice(state, q.astype(state.dtype),
                                           (0, q_positions[0], 0, 0))


def record_queries(model: transformer.Transformer, params, tokens, chunk: int) -> list:
  """Every layer's queries, keys and values of a prefill of `tokens`.

  Runs the model with `recording_attention_fn` over tokens (B, S) in prefill calls of
  `chunk` tokens through a KV cache (so each chunk attends to all earlier ones).

  Args:
    model: a `Transformer` (its attention_fn is replaced).
    params: its parameters.
    tokens: (B, S) int tokens; S a multiple of `chunk`.
    chunk: tokens per prefill call.

  Returns:
    One (q (B, S, H, D), k (B, S, KV, D), v (B, S, KV, D)) per layer (q rotated by
    the positional encoding, as attention sees it).

  Example:
    >>> (q, k, v), = record_queries(model, params, tokens, chunk=256)   # one layer
  """
  c = model.config
  b, s = tokens.shape
  rec = transformer.Transformer(c, attention_fn=recording_attention_fn)
  cache = transformer.init_cache(c, b, s)
  cache = cache._replace(state=tuple(jnp.zeros((b, s, c.num_heads, c.dim_per_head))
                                     for _ in range(c.num_layers)))
  step = jax.jit(lambda p, t, cc: rec.apply({"params": p}, t, cc))
  for start in range(0, s, chunk):
    _, cache = step(params, jnp.asarray(tokens[:, start:start + chunk]), cache)
  return [(cache.state[i], cache.k[i], cache.v[i]) for i in range(c.num_layers)]


def teacher_forced_decode(model: transformer.Transformer, params, tokens: jax.Array,
                          prefill: int, cache: transformer.KVCache):
  """Prefills tokens[:, :prefill], then feeds the true tokens one decode step at a time.

  Args:
    model: a `Transformer` (e.g. with `make_attention_fn`).
    params: its parameters.
    tokens: (B, L) int tokens.
    prefill: the prompt length P (1 <= P < L).
    cache: an empty cache of length >= L (`init_cache` for RaBitQ, whose
      `LayerState.last_count` gives the tokens attended per step).

  Returns:
    (logits (B, L - P, V) predicting tokens[:, P:], the mean over steps, layers,
    batch and heads of the tokens attended; 0 for a cache without RaBitQ state).

  Example:
    >>> decode = jax.jit(lambda c: teacher_forced_decode(model, params, tokens, 32, c))
    >>> logits, tokens_per_step = decode(ra.init_cache(rcfg, model.config, b, l, key))
  """
  logits0, cache = model.apply({"params": params}, tokens[:, :prefill], cache)

  def step(cache, tok):
    logits, cache = model.apply({"params": params}, tok[:, None], cache)
    count = (jnp.mean(jnp.stack([s.last_count for s in cache.state]).astype(jnp.float32))
             if cache.state is not None else jnp.float32(0))
    return cache, (logits[:, 0], count)

  _, (logits, counts) = jax.lax.scan(step, cache, tokens[:, prefill:-1].T)
  logits = jnp.concatenate([logits0[:, -1:], jnp.swapaxes(logits, 0, 1)], axis=1)
  return logits, jnp.mean(counts)
