"""FusionRoute's training on the common loop, its preference pairs, and evaluation.

- `mixture_batch`: windows drawn from several token streams with given weights, a pure
  function of (seed, step) as `common.train` requires.
- `frozen_experts`: an optax transformation that updates the router and leaves the
  experts' parameters untouched (`optax.multi_transform` with `set_to_zero`); the loss
  also stops their gradient, so no expert gradient is ever computed.
- `stage1_loss_fn`, `latent_loss_fn`: `loss_fn(params, batch, key)` for the common
  loop over params {"experts", "router"} (the losses of `combine`).
- `preference_pairs`: stage 2's pairs: for a prompt window x of the training mixture,
  chosen = its gold continuation, rejected = a continuation sampled from the stage-1
  combined policy by fused decoding.
- `policy_apply_fn`: the combined policy's logits for `common.rl.dpo` (CDPO: DPO on
  the router with the experts frozen; the reference is the stage-1 policy).
- `evaluate_stream`: per-token log-probs of every decoding rule, the experts' own
  log-probs and the routing scores on consecutive windows of a stream.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.data import text as text_lib
from common.models import transformer
from methods.fusion_route import combine as combine_lib
from methods.fusion_route import ensemble as ens_lib

Array = jax.Array


def transformer_config(spec, vocab_size: int = 256, max_seq_len: int = 256
                       ) -> transformer.TransformerConfig:
  """The `TransformerConfig` of a config's model spec (family, d_model, num_layers,
  num_heads, num_kv_heads, d_ff): the experts' and the router's architectures."""
  family = transformer.llama_config if spec.family == "llama" else transformer.neox_config
  return family(vocab_size=vocab_size, d_model=spec.d_model, num_layers=spec.num_layers,
                num_heads=spec.num_heads, num_kv_heads=spec.num_kv_heads, d_ff=spec.d_ff,
                max_seq_len=max(max_seq_len, 256))


def mixture_batch(streams: Sequence[np.ndarray], weights: Sequence[float], seed: int,
                  step: int, batch_size: int, seq_len: int) -> dict[str, np.ndarray]:
  """{"tokens": (batch_size, seq_len + 1)}: each row a window of stream k, drawn with
  probability weights[k] / sum(weights), at a uniform offset (numpy seeded (seed, step))."""
  w = np.asarray(weights, np.float64)
  if len(streams) != len(w) or not len(w) or np.any(w < 0) or w.sum() <= 0:
    raise ValueError(f"weights {list(weights)} must be >= 0, not all 0, one per stream "
                     f"({len(streams)} streams)")
  rng = np.random.default_rng((seed, step, 0x6D6978))
  which = rng.choice(len(streams), size=batch_size, p=w / w.sum())
  rows = []
  for k in range(len(streams)):
    n = int(np.sum(which == k))
    if n:
      rows.append(text_lib.window_batch(streams[k], seed * 1009 + k, step, n, seq_len)["tokens"])
  return {"tokens": np.concatenate(rows)}   # grouped by stream; the order does not matter


def frozen_experts(optimizer: optax.GradientTransformation) -> optax.GradientTransformation:
  """`optimizer` on params["router"]; params["experts"] never change."""
  def labels(params):
    return {"experts": jax.tree.map(lambda _: "frozen", params["experts"]),
            "router": jax.tree.map(lambda _: "train", params["router"])}
  return optax.multi_transform({"train": optimizer, "frozen": optax.set_to_zero()}, labels)


def _router_outputs(ensemble: ens_lib.Ensemble, params: Any, inputs: Array):
  scores, router_logits = ensemble.router.apply({"params": params["router"]}, inputs)
  lp = ens_lib.expert_logprobs(ensemble, params["experts"], inputs)
  return lp, scores, router_logits


def stage1_loss_fn(ensemble: ens_lib.Ensemble, *, margin: float, route_weight: float,
                   hard_weight: float, complementary: bool = True) -> Callable:
  """`loss_fn(params, batch, key)`: `combine.stage1_loss` on batch["tokens"] (B, T+1)."""
  def loss_fn(params, batch, key):
    del key
    tokens = batch["tokens"]
    lp, scores, router_logits = _router_outputs(ensemble, params, tokens[:, :-1])
    return combine_lib.stage1_loss(lp, scores, router_logits, tokens[:, 1:], margin=margin,
                                   route_weight=route_weight, hard_weight=hard_weight,
                                   complementary=complementary)
  return loss_fn


def latent_loss_fn(ensemble: ens_lib.Ensemble) -> Callable:
  """`loss_fn(params, batch, key)`: Co-LLM's latent routing loss (`combine`)."""
  def loss_fn(params, batch, key):
    del key
    tokens = batch["tokens"]
    lp, scores, _ = _router_outputs(ensemble, params, tokens[:, :-1])
    return combine_lib.latent_routing_loss(lp, scores, tokens[:, 1:])
  return loss_fn


def policy_apply_fn(ensemble: ens_lib.Ensemble, mode: str = "hard",
                    complementary: bool = True) -> Callable:
  """`apply_fn(params, tokens) -> logits`: the combined policy, for `common.rl.dpo`."""
  return lambda params, tokens: ens_lib.forward(ensemble, params, tokens, mode,
                                                complementary)[0]


def preference_pairs(ensemble: ens_lib.Ensemble, params: Any, prompts: np.ndarray,
                     completion_len: int, key: Array, temperature: float = 1.0,
                     batch_size: int = 64) -> dict[str, np.ndarray]:
  """DPO pairs from windows (N, P + C) of training text: chosen = the window (its gold
  continuation of C = completion_len tokens), rejected = the prompt (first P tokens)
  continued by C tokens sampled from the combined policy `params` (fused decoding).

  Returns:
    "chosen", "rejected" (N, P + C) int32; "chosen_mask", "rejected_mask" (N, P + C - 1),
    1 on the completion's predictions.
  """
  prompts = np.asarray(prompts, np.int32)
  p = prompts.shape[1] - completion_len
  if p < 1:
    raise ValueError(f"windows of {prompts.shape[1]} tokens leave no prompt before "
                     f"completion_len={completion_len}")
  rejected = []
  for i, start in enumerate(range(0, len(prompts), batch_size)):
    g = ens_lib.generate(ensemble, params, prompts[start:start + batch_size, :p],
                         jax.random.fold_in(key, i), max_new_tokens=completion_len,
                         temperature=temperature)
    rejected.append(np.asarray(g.tokens))
  mask = np.zeros((len(prompts), prompts.shape[1] - 1), np.float32)
  mask[:, p - 1:] = 1.0
  return {"chosen": prompts, "rejected": np.concatenate(rejected), "chosen_mask": mask,
          "rejected_mask": mask.copy()}


@functools.partial(jax.jit, static_argnames=("ensemble",))
def _ensemble_stats(ensemble, params, window):
  inputs, targets = window[:, :-1], window[:, 1:]
  lp, scores, router_logits = _router_outputs(ensemble, params, inputs)
  out = {"expert": combine_lib.gold_logprobs(lp, targets), "scores": scores}
  for name, mode, comp in (("hard", "hard", True), ("soft", "soft", True),
                           ("route_only", "hard", False)):
    logits, _ = combine_lib.combine(lp, scores, router_logits, mode, comp)
    out[name] = combine_lib.gold_logprobs(jax.nn.log_softmax(logits)[None], targets)[0]
  return out


@functools.partial(jax.jit, static_argnames=("model",))
def _model_stats(model, params, window):
  lp = jax.nn.log_softmax(model.apply({"params": params}, window[:, :-1]))
  return {"single": combine_lib.gold_logprobs(lp[None], window[:, 1:])[0]}


def evaluate_stream(tokens: np.ndarray, seq_len: int, batch_size: int, max_windows: int, *,
                    ensemble: ens_lib.Ensemble | None = None, params: Any = None,
                    model: Any = None) -> dict[str, np.ndarray]:
  """Per-token log-probs (nats) on consecutive windows of `tokens`.

  With an ensemble: "hard" (FusionRoute), "soft", "route_only" (hard routing, no z^r)
  (W, T), "expert" (E, W, T) each expert's own, "scores" (W, T, E). With a single
  `model`: "single" (W, T). Position t of a window scores its token t+1.
  """
  if (ensemble is None) == (model is None):
    raise ValueError("evaluate_stream needs exactly one of ensemble= or model=")
  parts = []
  for window in text_lib.eval_windows(tokens, seq_len, batch_size, max_windows):
    stats = (_ensemble_stats(ensemble, params, window) if ensemble is not None
             else _model_stats(model, params, window))
    parts.append(jax.tree.map(np.asarray, stats))
  axis = {"expert": 1}
  return {k: np.concatenate([p[k] for p in parts], axis=axis.get(k, 0)) for k in parts[0]}


def window_domains(domains: np.ndarray, seq_len: int, batch_size: int,
                   max_windows: int) -> np.ndarray:
  """The domain label of each scored token (W, T), aligned with `evaluate_stream`."""
  parts = [w[:, 1:] for w in text_lib.eval_windows(np.asarray(domains, np.int32), seq_len,
                                                   batch_size, max_windows)]
  return np.concatenate(parts)


def bits_per_byte(logp: np.ndarray, bytes_per_token: float = 1.0) -> float:
  """-mean(log p) / ln 2 / bytes_per_token."""
  return float(-np.mean(logp) / np.log(2.0) / bytes_per_token)
