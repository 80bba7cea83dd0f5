"""Direct preference optimisation (DPO) of any policy whose logits a function gives.

For a prompt x with a preferred completion y_w and a dispreferred one y_l, a policy
pi_theta and a frozen reference pi_ref (Rafailov et al., 2023):

    h = beta * [(log pi_theta(y_w|x) - log pi_ref(y_w|x)) - (log pi_theta(y_l|x) - log pi_ref(y_l|x))]
    L = -(1 - eps) log sigma(h) - eps log sigma(-h)       (eps: label smoothing, cDPO)
        + lambda * (-log pi_theta(y_w|x) / |y_w|)          (optional NLL of y_w, RPO-style)

where log pi(y|x) = sum_t mask_t log softmax(z_t)[y_{t+1}] over the completion tokens.
The policy is anything with logits: `apply_fn(params, tokens) -> (B, T, V)`, the same
convention as `common.rl.grpo.make_loss_fn`, and the per-token log-probs come from the
same `common.models.logprobs` code, so a combined multi-model policy (FusionRoute's
router on frozen experts) trains through this module unchanged.

A DPO batch holds chosen and rejected sequences of one width, their completion masks
and the reference's sequence log-probs (computed once, before training, with
`reference_logprobs`):

    "chosen", "rejected"            (B, T) int   prompt + completion
    "chosen_mask", "rejected_mask"  (B, T-1)     1 where tokens[:, t+1] is a completion token
    "ref_chosen", "ref_rejected"    (B,)         log pi_ref of each completion

Example:
    >>> apply_fn = lambda p, t: model.apply({"params": p}, t)
    >>> batch = reference_logprobs(apply_fn, ref_params, pairs)
    >>> loss_fn = make_loss_fn(apply_fn, DPOConfig(beta=0.1))
    >>> loss, metrics = loss_fn(params, batch, key)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from common import checks
from common.models import logprobs as lm_logprobs

Array = jax.Array
PAIR_KEYS = ("chosen", "rejected", "chosen_mask", "rejected_mask")
BATCH_KEYS = PAIR_KEYS + ("ref_chosen", "ref_rejected")


@dataclasses.dataclass(frozen=True)
class DPOConfig:
  """DPO hyperparameters (frozen and hashable).

  Fields:
    beta: > 0, the inverse temperature of the implicit reward beta log(pi / pi_ref).
    label_smoothing: eps in [0, 0.49], the assumed rate of flipped preferences (cDPO).
    sft_weight: lambda >= 0, the weight of the per-token NLL of the chosen completion.
  """
  beta: float = 0.1
  label_smoothing: float = 0.0
  sft_weight: float = 0.0

  def __post_init__(self):
    checks.scalar("DPOConfig.beta", self.beta)
    checks.scalar("DPOConfig.label_smoothing", self.label_smoothing, strict=False, high=0.49)
    checks.scalar("DPOConfig.sft_weight", self.sft_weight, strict=False)


def dpo_loss(chosen_logp: Array, rejected_logp: Array, ref_chosen_logp: Array,
             ref_rejected_logp: Array, config: DPOConfig = DPOConfig()
             ) -> tuple[Array, dict[str, Array]]:
  """The mean DPO loss over B pairs of sequence log-probs (each (B,)).

      h_i = beta [(c_i - c_i^ref) - (r_i - r_i^ref)]
      L = mean_i -(1 - eps) log sigma(h_i) - eps log sigma(-h_i)

  Returns:
    (loss, metrics): metrics "reward_accuracy" (share of pairs with h > 0),
    "reward_margin" (mean h), "chosen_reward" and "rejected_reward" (mean
    beta (logp - logp_ref)).

  Example:
    >>> loss, _ = dpo_loss(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))
    >>> float(loss)  # log 2 when the policy is the reference
    0.693...
  """
  arrays = (chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp)
  shape = jnp.shape(chosen_logp)
  if len(shape) != 1 or any(jnp.shape(a) != shape for a in arrays):
    raise ValueError("chosen_logp, rejected_logp, ref_chosen_logp and ref_rejected_logp must "
                     f"all be (B,), got shapes {[jnp.shape(a) for a in arrays]}")
  chosen = config.beta * (chosen_logp - ref_chosen_logp)
  rejected = config.beta * (rejected_logp - ref_rejected_logp)
  h = chosen - rejected
  eps = config.label_smoothing
  per_pair = -(1.0 - eps) * jax.nn.log_sigmoid(h) - eps * jax.nn.log_sigmoid(-h)
  sg = jax.lax.stop_gradient
  metrics = {"reward_accuracy": jnp.mean((sg(h) > 0).astype(jnp.float32)),
             "reward_margin": jnp.mean(sg(h)), "chosen_reward": jnp.mean(sg(chosen)),
             "rejected_reward": jnp.mean(sg(rejected))}
  return jnp.mean(per_pair), metrics


def check_batch(batch: Any, keys: tuple[str, ...] = BATCH_KEYS) -> None:
  """Checks a DPO batch's keys and shapes (see the module docstring); one-line errors."""
  if not isinstance(batch, Mapping):
    raise TypeError(f"batch must be a dict with keys {list(keys)}, got a "
                    f"{type(batch).__name__}")
  missing = [k for k in keys if k not in batch]
  if missing:
    raise ValueError(f"batch is missing keys {missing}: expected keys {list(keys)}, got "
                     f"keys {sorted(map(str, batch))}")
  shape = jnp.shape(batch["chosen"])
  if len(shape) != 2 or shape[1] < 2:
    raise ValueError(f"batch['chosen'] must be (B, T) with T >= 2, got shape {shape}")
  expected = {"rejected": shape, "chosen_mask": (shape[0], shape[1] - 1),
              "rejected_mask": (shape[0], shape[1] - 1), "ref_chosen": shape[:1],
              "ref_rejected": shape[:1]}
  for k in keys[1:]:
    if jnp.shape(batch[k]) != expected[k]:
      raise ValueError(f"batch[{k!r}] has shape {jnp.shape(batch[k])}; expected "
                       f"{expected[k]} (batch['chosen'] is {shape})")
  for k in ("chosen", "rejected"):
    if not jnp.issubdtype(jnp.result_type(batch[k]), jnp.integer):
      raise TypeError(f"batch[{k!r}] must be integer token ids, got dtype "
                      f"{jnp.result_type(batch[k])}")


def _pair_logprobs(apply_fn: Callable[..., Array], params: Any, batch: Mapping[str, Array]
                   ) -> tuple[Array, Array, Array]:
  """(chosen, rejected) sequence log-probs (B,) and the chosen per-token NLL, in one
  forward pass over the 2B stacked rows."""
  tokens = jnp.concatenate([batch["chosen"], batch["rejected"]])
  mask = jnp.concatenate([batch["chosen_mask"], batch["rejected_mask"]]).astype(jnp.float32)
  logits = apply_fn(params, tokens[:, :-1])
  lp = lm_logprobs.token_logprobs(logits, tokens[:, 1:], "tokens[:, 1:]") * mask
  seq = jnp.sum(lp, axis=-1)
  b = batch["chosen"].shape[0]
  nll = -jnp.sum(lp[:b]) / jnp.maximum(jnp.sum(mask[:b]), 1.0)
  return seq[:b], seq[b:], nll


def reference_logprobs(apply_fn: Callable[..., Array], ref_params: Any,
                       pairs: Mapping[str, Any]) -> dict[str, Array]:
  """`pairs` plus "ref_chosen" and "ref_rejected": the frozen reference's sequence
  log-probs of each completion, log pi_ref(y|x) = sum_t mask_t log p_ref(y_{t+1} | y_<=t).

  Args:
    apply_fn: `(params, tokens) -> logits`, jit it for speed.
    ref_params: the reference policy's parameters.
    pairs: "chosen", "rejected", "chosen_mask", "rejected_mask" (module docstring).
  """
  check_batch(pairs, PAIR_KEYS)
  chosen, rejected, _ = _pair_logprobs(apply_fn, ref_params, pairs)
  return {**pairs, "ref_chosen": jax.lax.stop_gradient(chosen),
          "ref_rejected": jax.lax.stop_gradient(rejected)}


def make_loss_fn(apply_fn: Callable[..., Array], config: DPOConfig = DPOConfig()
                 ) -> Callable[[Any, Mapping[str, Array], Array], tuple[Array, dict[str, Array]]]:
  """`loss_fn(params, batch, key) -> (loss, metrics)` for `common.train.train`.

  loss = dpo_loss(log pi(y_w), log pi(y_l), ref_chosen, ref_rejected) + sft_weight * NLL(y_w),
  with the policy's log-probs from one forward pass `apply_fn(params, tokens)` over the
  chosen and rejected rows together. Metrics: `dpo_loss`'s plus "dpo" and "chosen_nll".

  Example:
    >>> loss_fn = make_loss_fn(lambda p, t: model.apply({"params": p}, t))  # doctest: +SKIP
  """
  if not callable(apply_fn):
    raise TypeError(f"apply_fn must be callable, got {type(apply_fn).__name__}")
  if not isinstance(config, DPOConfig):
    raise TypeError(f"config must be a DPOConfig, got {type(config).__name__}")

  def loss_fn(params, batch, key):
    del key
    check_batch(batch)
    chosen, rejected, nll = _pair_logprobs(apply_fn, params, batch)
    loss, metrics = dpo_loss(chosen, rejected, batch["ref_chosen"], batch["ref_rejected"],
                             config)
    metrics.update(dpo=loss, chosen_nll=jax.lax.stop_gradient(nll))
    return loss + config.sft_weight * nll, metrics

  return loss_fn
