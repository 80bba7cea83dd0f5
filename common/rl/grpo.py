"""GRPO as pure functions: group advantages, the clipped-ratio loss, the k3 KL, aggregation.

For a prompt q with G sampled responses o_1..o_G, scalar rewards r_i, per-token
log-probs log pi(o_{i,t}) under the policy being trained, log pi_old under the
policy that sampled them and log pi_ref under a frozen reference:

    A_i       = (r_i - mean_j r_j) / (std_j r_j + eps)          (std with ddof=1)
    rho_{i,t} = exp(log pi(o_{i,t}) - log pi_old(o_{i,t}))
    l_{i,t}   = max(-A_i rho_{i,t}, -A_i clip(rho_{i,t}, 1 - eps_low, 1 + eps_high))
    l_{i,t}   = min(l_{i,t}, -A_i c)                            if A_i < 0 (dual clip)
    k3_{i,t}  = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1
    L         = agg(l, mask) + beta agg(k3, mask)

with `agg` one of the token aggregations of `aggregate`. These follow the EasyR1
loss that the AdaThink-Med code trains with (`compute_grpo_outcome_advantage`,
`compute_policy_loss`, `compute_kl(..., "low_var_kl")`, the KL added as a loss
term, its "token" average; verl's `agg_loss` names the modes). The defaults are
that code's run settings: eps_low = 0.2, eps_high = 0.28 and G = 8 (its launch
scripts), c = 3 (EasyR1's default), beta = 1e-2 (its GRPO config), token-mean
(EasyR1's default). TRL's `GRPOTrainer` computes the same per-token clipped term
and k3 (without the dual clip).

Every function here is jit/vmap/grad-safe; argument checks on values run only on
concrete inputs (tracers skip them), and shape/mode checks run once per trace.
`make_loss_fn` turns an LM's `apply_fn` into the `(params, batch, key) -> (loss,
metrics)` that `common.train.train` expects; the rollout that fills the batch lives
elsewhere.

References:
  Shao et al. 2024 (DeepSeekMath, GRPO); Yu et al. 2025 (DAPO, clip-higher and token-mean);
  Ye et al. 2019 (dual-clip PPO); J. Schulman, "Approximating KL divergence" (2020, k3).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from common import checks
from common.models import logprobs as lm_logprobs

Array = jax.Array

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
BATCH_KEYS = ("tokens", "mask", "old_logp", "ref_logp", "advantages")
LOG_RATIO_BOUND = 20.0   # |log rho| and |log pi_ref - log pi| are clamped here before exp
KL_BOUND = 10.0          # EasyR1 clamps the k3 value to at most 10


def _check_number(name: str, value: Any, ok: Callable[[float], bool], expected: str,
                  in_range: str) -> None:
  """One-line ValueError unless the (concrete) value is a number and `ok(value)`."""
  if not checks.is_concrete(value):
    return
  try:
    v = float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a number {expected}, got {value!r}") from None
  if not ok(v):
    raise ValueError(f"{name} must be {in_range}, got {value!r}")


def _check_open_unit(name: str, value: Any) -> None:
  _check_number(name, value, lambda v: 0.0 < v < 1.0, "in (0, 1)", "in (0, 1)")


def _check_dual_clip(name: str, value: Any) -> None:
  _check_number(name, value, lambda v: math.isfinite(v) and v > 1.0, "> 1", "finite and > 1")


def _check_mode(name: str, mode: Any) -> None:
  if mode not in LOSS_AGG_MODES:
    raise ValueError(f"{name} must be one of {LOSS_AGG_MODES}, got {mode!r}")


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """The GRPO loss hyperparameters (frozen and hashable, so a static jit argument).

  Fields:
    group_size: G, responses per prompt (>= 2: the group std uses ddof=1).
    clip_low: eps_low, the ratio's lower clip 1 - eps_low, in (0, 1).
    clip_high: eps_high, the ratio's upper clip 1 + eps_high, in (0, 1) (DAPO's
      clip-higher when eps_high > eps_low).
    dual_clip: c > 1, the dual-clip bound on the loss of negative-advantage tokens.
    kl_coef: beta >= 0, the weight of the k3 KL to the reference policy.
    loss_agg: one of `LOSS_AGG_MODES` (see `aggregate`).
    adv_eps: eps in the advantage's denominator std + eps.

  Build it from an ml_collections sub-config with `GRPOConfig(**config.grpo)`.
  Bad values raise a one-line ValueError naming the field.

  Example:
    >>> GRPOConfig(group_size=8, loss_agg="seq-mean-token-mean").clip_high
    0.28
  """
  group_size: int = 8
  clip_low: float = 0.2
  clip_high: float = 0.28
  dual_clip: float = 3.0
  kl_coef: float = 1e-2
  loss_agg: str = "token-mean"
  adv_eps: float = 1e-6

  def __post_init__(self):
    checks.positive_int("GRPOConfig.group_size", self.group_size, low=2)
    _check_open_unit("GRPOConfig.clip_low", self.clip_low)
    _check_open_unit("GRPOConfig.clip_high", self.clip_high)
    _check_dual_clip("GRPOConfig.dual_clip", self.dual_clip)
    checks.scalar("GRPOConfig.kl_coef", self.kl_coef, low=0.0, strict=False)
    _check_mode("GRPOConfig.loss_agg", self.loss_agg)
    checks.scalar("GRPOConfig.adv_eps", self.adv_eps, low=0.0, strict=False)


def group_advantages(rewards: Array, group_size: int, eps: float = 1e-6) -> Array:
  """GRPO's outcome advantage, normalised inside each group of G rollouts.

      A_i = (r_i - mean_g r) / (std_g r + eps),   std_g r = sqrt(sum_g (r - mean_g r)^2 / (G - 1))

  with the unbiased std (ddof=1, as EasyR1's `torch.std`). A group whose rewards
  are all equal has A = 0 exactly (no signal, no NaN, and no rounding residue of
  r - mean divided by a near-zero std).

  Args:
    rewards: (B * G,) rewards with each prompt's G rollouts contiguous
      (rows i*G .. i*G+G-1 belong to prompt i), or (B, G).
    group_size: G >= 2 (a Python int; it fixes shapes).
    eps: added to the std.

  Returns:
    The advantages, with the shape and float dtype of `rewards`.

  Example:
    >>> group_advantages(jnp.array([1.0, 0.0, 1.0, 1.0]), 2)
    Array([ 0.7071..., -0.7071...,  0. ,  0. ], dtype=float32)
  """
  checks.positive_int("group_size", group_size, low=2)
  checks.scalar("eps", eps, low=0.0, strict=False)
  rewards = checks.as_float("rewards", rewards)
  shape = rewards.shape
  if rewards.ndim == 1:
    if shape[0] % group_size:
      raise ValueError(f"rewards has {shape[0]} entries, not a multiple of group_size "
                       f"{group_size} (expected (B * G,) with groups contiguous)")
  elif rewards.ndim == 2:
    if shape[1] != group_size:
      raise ValueError(f"rewards has shape {shape}; expected (B, group_size={group_size})")
  else:
    raise ValueError(f"rewards must be (B * G,) or (B, G), got shape {shape}")
  r = rewards.reshape(-1, group_size)
  mean = jnp.mean(r, axis=-1, keepdims=True)
  constant = jnp.all(r == r[:, :1], axis=-1, keepdims=True)
  var = jnp.sum(jnp.square(r - mean), axis=-1, keepdims=True) / (group_size - 1)
  std = jnp.sqrt(jnp.where(constant, 1.0, var))           # no sqrt(0) in the backward pass
  adv = jnp.where(constant, 0.0, (r - mean) / (std + eps))
  return adv.reshape(shape)


def kl_k3(logp: Array, ref_logp: Array, bound: float = KL_BOUND) -> Array:
  """The low-variance k3 estimate of KL(pi || pi_ref), per token.

      d  = clip(log pi_ref - log pi, -20, 20)
      k3 = clip(exp(d) - d - 1, 0, bound)

  For tokens sampled from pi, E[k3] = KL(pi || pi_ref); each term is >= 0 and 0
  exactly where log pi = log pi_ref. It is computed as expm1(d) - d, and the lower
  clamp at 0 only removes float rounding below 0 (EasyR1 clamps to [-10, 10], whose
  lower end never binds). Above `bound` (EasyR1: 10) the value is clamped, so such
  tokens pass no gradient.

  Args:
    logp: per-token log-probs under the policy, any shape.
    ref_logp: the reference policy's log-probs, the same shape.
    bound: the upper clamp of the estimate.

  Returns:
    k3 per token, the shape of `logp`.

  Example:
    >>> kl_k3(jnp.log(jnp.array([0.5, 0.2])), jnp.log(jnp.array([0.5, 0.4])))
    Array([0.        , 0.30685...], dtype=float32)
  """
  checks.same_shape("logp and ref_logp", logp, ref_logp)
  checks.scalar("bound", bound)
  logp = checks.as_float("logp", logp)
  ref_logp = checks.as_float("ref_logp", ref_logp)
  d = jnp.clip(ref_logp - logp, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
  return jnp.clip(jnp.expm1(d) - d, 0.0, bound)


def _token_advantages(advantages: Array, logp: Array) -> Array:
  """Advantages (B,) or (B, T) broadcast to logp's (B, T)."""
  a_shape, shape = jnp.shape(advantages), jnp.shape(logp)
  if a_shape == shape:
    return advantages
  if a_shape == shape[:-1]:
    return advantages[..., None]
  raise ValueError(f"advantages has shape {a_shape}; expected {shape[:-1]} (one per "
                   f"response) or {shape} (one per token) for logp of shape {shape}")


def _check_mask(mask: Array, shape: tuple) -> None:
  if jnp.shape(mask) != tuple(shape):
    raise ValueError(f"mask has shape {jnp.shape(mask)}; expected {tuple(shape)} (one entry "
                     "per response token, 1 where the token counts)")


def _masked_mean(x: Array, mask: Array) -> Array:
  return jnp.sum(jnp.where(mask > 0, x, 0.0) * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def policy_loss(logp: Array, old_logp: Array, advantages: Array, mask: Array,
                clip_low: float = 0.2, clip_high: float = 0.28,
                dual_clip: float = 3.0) -> tuple[Array, dict[str, Array]]:
  """The clipped importance-ratio loss per token, asymmetric clip and dual clip.

      rho  = exp(clip(log pi - log pi_old, -20, 20))
      l1   = -A rho,   l2 = -A clip(rho, 1 - clip_low, 1 + clip_high),   l3 = -A dual_clip
      l    = max(l1, l2)                   if A >= 0
      l    = min(max(l1, l2), l3)          if A < 0

  (EasyR1's `compute_policy_loss`, after PPO, DAPO's clip-higher and dual-clip
  PPO.) The max is PPO's pessimistic bound; the min caps the loss of a
  negative-advantage token whose ratio has grown large at dual_clip * |A|.

  Args:
    logp: log pi per token under the policy being trained, (B, T).
    old_logp: log pi_old, the sampling policy's log-probs (constants), (B, T).
    advantages: (B,) per response or (B, T) per token.
    mask: (B, T), 1 on the response tokens that count (used for the metrics only;
      `aggregate` applies it to the loss).
    clip_low, clip_high: in (0, 1).
    dual_clip: > 1.

  Returns:
    (l, metrics): the per-token loss (B, T) (not masked), and masked token means:
    "clip_frac" (the clipped branch l2 is active: A > 0 with rho > 1 + clip_high,
    or A < 0 with rho < 1 - clip_low), "clip_frac_high" and "clip_frac_low" (those
    two cases), "dual_clip_frac" (A < 0 and l3 binds), "approx_kl" (the k1 estimate
    mean(log pi_old - log pi), EasyR1's `ppo_kl`) and "ratio_mean".

  Example:
    >>> l, m = policy_loss(jnp.log(jnp.array([[0.5, 0.9]])), jnp.log(jnp.array([[0.5, 0.5]])),
    ...                    jnp.array([1.0]), jnp.ones((1, 2)))
    >>> l                                   # ratio 1.8 is clipped at 1.28
    Array([[-1.  , -1.28]], dtype=float32)
  """
  _check_open_unit("clip_low", clip_low)
  _check_open_unit("clip_high", clip_high)
  _check_dual_clip("dual_clip", dual_clip)
  checks.same_shape("logp and old_logp", logp, old_logp)
  if jnp.ndim(logp) < 1:
    raise ValueError(f"logp must be (..., T) per-token log-probs, got shape {jnp.shape(logp)}")
  _check_mask(mask, jnp.shape(logp))
  logp = checks.as_float("logp", logp)
  old_logp = checks.as_float("old_logp", old_logp)
  adv = _token_advantages(checks.as_float("advantages", advantages), logp).astype(logp.dtype)
  mask = jnp.asarray(mask).astype(logp.dtype)

  log_ratio = jnp.clip(logp - old_logp, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
  ratio = jnp.exp(log_ratio)
  clipped_ratio = jnp.exp(jnp.clip(log_ratio, math.log1p(-clip_low), math.log1p(clip_high)))
  l1 = -adv * ratio
  l2 = -adv * clipped_ratio
  l3 = -adv * dual_clip
  pessimistic = jnp.maximum(l1, l2)
  negative = adv < 0
  loss = jnp.where(negative, jnp.minimum(pessimistic, l3), pessimistic)

  clipped = l1 < l2
  sg = jax.lax.stop_gradient
  metrics = {
      "clip_frac": _masked_mean(clipped, mask),
      "clip_frac_high": _masked_mean(clipped & (adv > 0), mask),
      "clip_frac_low": _masked_mean(clipped & negative, mask),
      "dual_clip_frac": _masked_mean((pessimistic > l3) & negative, mask),
      "approx_kl": _masked_mean(sg(old_logp - logp), mask),
      "ratio_mean": _masked_mean(sg(ratio), mask),
  }
  return loss, metrics


def aggregate(per_token: Array, mask: Array, mode: str = "token-mean") -> Array:
  """Reduces a per-token loss (..., T) to a scalar, over the masked tokens.

  With n_i = sum_t m_{i,t} tokens in response i (rows are every index but the last)
  and N the number of rows:

      "token-mean":          sum_{i,t} m l / max(sum_i n_i, 1)
          every token weighs the same: DAPO's token-level loss, EasyR1's "token"
          (its default, which AdaThink-Med trains with), TRL's "bnpo".
      "seq-mean-token-mean": (1/N) sum_i [sum_t m l / max(n_i, 1)]
          every response weighs the same: the original GRPO (DeepSeekMath),
          EasyR1's "seq", TRL's "grpo"; a long response's tokens weigh less.
      "seq-mean-token-sum":  (1/N) sum_i sum_t m l
          no length normalisation: Dr. GRPO up to a constant factor (verl's
          "seq-mean-token-sum-norm" divides the same sum by T instead of N).

  An all-masked row contributes 0 (and still counts in N for the seq modes). Masked
  entries are selected away (not multiplied by 0), so a NaN there does not leak in.

  Args:
    per_token: the per-token values, (..., T).
    mask: the same shape, 1 on tokens that count (bool or float).
    mode: one of `LOSS_AGG_MODES` (a Python string).

  Returns:
    A scalar.

  Example:
    >>> l, m = jnp.array([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]]), jnp.array([[1, 1, 1], [1, 0, 0]])
    >>> [float(aggregate(l, m, k)) for k in LOSS_AGG_MODES]
    [1.75, 2.5, 3.5]
  """
  _check_mode("mode", mode)
  per_token = checks.as_float("per_token", per_token)
  if per_token.ndim < 1:
    raise ValueError(f"per_token must be (..., T), got shape {per_token.shape}")
  _check_mask(mask, per_token.shape)
  mask = jnp.asarray(mask).astype(per_token.dtype)
  masked = jnp.where(mask > 0, per_token, 0.0) * mask
  if mode == "token-mean":
    return jnp.sum(masked) / jnp.maximum(jnp.sum(mask), 1.0)
  seq_sum = jnp.sum(masked, axis=-1)
  if mode == "seq-mean-token-mean":
    return jnp.mean(seq_sum / jnp.maximum(jnp.sum(mask, axis=-1), 1.0))
  return jnp.mean(seq_sum)


def grpo_loss(logp: Array, old_logp: Array, ref_logp: Array | None, advantages: Array,
              mask: Array, config: GRPOConfig = GRPOConfig()
              ) -> tuple[Array, dict[str, Array]]:
  """The GRPO objective: the clipped policy loss plus the k3 KL to the reference.

      L = agg(l, mask) + kl_coef agg(k3(log pi, log pi_ref), mask)

  with l from `policy_loss`, k3 from `kl_k3` and agg = `aggregate(., ., loss_agg)`
  (EasyR1 adds the KL the same way, as a loss term rather than a reward penalty).

  Args:
    logp: log pi per token, (B, T) (differentiate through this one).
    old_logp: the sampling policy's log-probs, (B, T).
    ref_logp: the reference policy's log-probs, (B, T); None is allowed when
      `config.kl_coef == 0`.
    advantages: (B,) or (B, T), e.g. from `group_advantages`.
    mask: (B, T), 1 on the response tokens.
    config: a `GRPOConfig`.

  Returns:
    (loss, metrics): the scalar loss and scalar metrics "pg_loss", "kl" (the
    aggregated k3, 0 without a reference), "response_tokens" (mean masked tokens per
    row) and those of `policy_loss`.

  Example:
    >>> lp = jnp.log(jnp.full((2, 3), 0.5))
    >>> loss, m = grpo_loss(lp, lp, lp, jnp.array([1.0, -1.0]), jnp.ones((2, 3)))
    >>> float(loss), float(m["kl"])       # on-policy, at the reference: -mean(A) = 0
    (0.0, 0.0)
  """
  if not isinstance(config, GRPOConfig):
    raise TypeError(f"config must be a GRPOConfig, got {type(config).__name__}")
  if ref_logp is None and config.kl_coef != 0:
    raise ValueError(f"ref_logp is None but config.kl_coef = {config.kl_coef}; pass the "
                     "reference log-probs or set kl_coef = 0")
  per_token, metrics = policy_loss(logp, old_logp, advantages, mask, config.clip_low,
                                   config.clip_high, config.dual_clip)
  pg_loss = aggregate(per_token, mask, config.loss_agg)
  if ref_logp is None:
    kl = jnp.zeros((), pg_loss.dtype)
  else:
    checks.same_shape("logp and ref_logp", logp, ref_logp)
    kl = aggregate(kl_k3(logp, ref_logp), mask, config.loss_agg)
  loss = pg_loss + config.kl_coef * kl
  mask_f = jnp.asarray(mask).astype(pg_loss.dtype)
  return loss, {"pg_loss": pg_loss, "kl": kl,
                "response_tokens": jnp.mean(jnp.sum(mask_f, axis=-1)), **metrics}


def check_batch(batch: Any) -> None:
  """Checks a GRPO update batch's keys and shapes (works on tracers: once per trace).

  Expected: "tokens" (B, T) int (prompt + response); "mask", "old_logp",
  "ref_logp" (B, T-1), aligned with the next-token predictions (entry t scores
  tokens[:, t+1]); "advantages" (B,) or (B, T-1); optionally "left_pad" (B,) ints,
  the padding slots of left-padded (ragged) rows.

  Example:
    >>> check_batch({"tokens": jnp.zeros((2, 4), jnp.int32), "mask": jnp.ones((2, 3)),
    ...              "old_logp": jnp.zeros((2, 3)), "ref_logp": jnp.zeros((2, 3)),
    ...              "advantages": jnp.zeros(2)})
  """
  expected = list(BATCH_KEYS)
  if not isinstance(batch, Mapping):
    raise TypeError(f"batch must be a dict with keys {expected}, got a {type(batch).__name__}")
  missing = [k for k in BATCH_KEYS if k not in batch]
  if missing:
    raise ValueError(f"batch is missing keys {missing}: expected keys {expected}, got keys "
                     f"{sorted(map(str, batch))}")
  shape = jnp.shape(batch["tokens"])
  if len(shape) != 2 or shape[1] < 2:
    raise ValueError(f"batch['tokens'] must be (B, T) with T >= 2, got shape {shape}")
  if not jnp.issubdtype(jnp.result_type(batch["tokens"]), jnp.integer):
    raise TypeError(f"batch['tokens'] must be integer token ids, got dtype "
                    f"{jnp.result_type(batch['tokens'])}")
  per_token = (shape[0], shape[1] - 1)
  for k in ("mask", "old_logp", "ref_logp"):
    if jnp.shape(batch[k]) != per_token:
      raise ValueError(f"batch[{k!r}] has shape {jnp.shape(batch[k])}; expected {per_token} "
                       "(one entry per next-token prediction, (B, T-1))")
  if jnp.shape(batch["advantages"]) not in (per_token, per_token[:1]):
    raise ValueError(f"batch['advantages'] has shape {jnp.shape(batch['advantages'])}; "
                     f"expected {per_token[:1]} or {per_token}")
  if "left_pad" in batch and jnp.shape(batch["left_pad"]) != per_token[:1]:
    raise ValueError(f"batch['left_pad'] has shape {jnp.shape(batch['left_pad'])}; "
                     f"expected {per_token[:1]} (padding slots per row)")


def make_loss_fn(apply_fn: Callable[..., Array], config: GRPOConfig = GRPOConfig(),
                 temperature: float = 1.0
                 ) -> Callable[[Any, Mapping[str, Array], Array], tuple[Array, dict[str, Array]]]:
  """`loss_fn(params, batch, key) -> (loss, metrics)` for `common.train.train`.

      z = apply_fn(params, tokens[:, :-1]) / temperature
      log pi_t = log softmax(z_t)[tokens[:, t+1]]
      (loss, metrics) = grpo_loss(log pi, old_logp, ref_logp, advantages, mask, config)

  The per-token log-probs and entropies come from `common.models.logprobs`
  (`token_logprobs`, `token_entropy`); the metrics add "entropy", the masked token
  mean of the policy's entropy (nats, no gradient), and "reward", the batch's mean
  reward, when the batch holds "rewards" (as `make_grpo_batch_fn`'s do). `key` is unused (the forward
  pass is deterministic). A batch with "left_pad" (ragged, left-padded rows) calls
  `apply_fn(params, tokens[:, :-1], left_pad=left_pad)`; its mask must be 0 on the
  padding.

  Args:
    apply_fn: `(params, tokens (B, T'), **kw) -> logits (B, T', V)`, e.g.
      `lambda p, t, **kw: model.apply({"params": p}, t, **kw)` for
      `common.models.Transformer`.
    config: a `GRPOConfig`.
    temperature: the sampling temperature that `old_logp` was computed at (> 0);
      the policy's log-probs use the same one.

  Returns:
    loss_fn, taking the batch described in `check_batch`.

  Example:
    >>> loss_fn = make_loss_fn(lambda p, t: model.apply({"params": p}, t))  # doctest: +SKIP
    >>> loss, metrics = loss_fn(params, batch, jax.random.PRNGKey(0))       # doctest: +SKIP
  """
  if not callable(apply_fn):
    raise TypeError(f"apply_fn must be callable, got {type(apply_fn).__name__}")
  if not isinstance(config, GRPOConfig):
    raise TypeError(f"config must be a GRPOConfig, got {type(config).__name__}")
  checks.scalar("temperature", temperature)

  def loss_fn(params, batch, key):
    del key
    check_batch(batch)
    tokens = batch["tokens"]
    kwargs = {"left_pad": batch["left_pad"]} if "left_pad" in batch else {}
    logits = apply_fn(params, tokens[:, :-1], **kwargs)
    if temperature != 1.0:
      logits = logits / temperature
    logp = lm_logprobs.token_logprobs(logits, tokens[:, 1:], "tokens[:, 1:]")
    loss, metrics = grpo_loss(logp, batch["old_logp"], batch["ref_logp"], batch["advantages"],
                              batch["mask"], config)
    entropy = jax.lax.stop_gradient(lm_logprobs.token_entropy(logits))
    metrics["entropy"] = _masked_mean(entropy, jnp.asarray(batch["mask"]).astype(entropy.dtype))
    if "rewards" in batch:
      metrics["reward"] = jnp.mean(batch["rewards"])
    return loss, metrics

  return loss_fn
