"""Combining E experts' next-token distributions with a router: decoding rules, routing
labels and the training losses.

Notation at one position t: expert log-probs l_e = log softmax(z_e) (V,), routing
scores w (E,), routing weights pi = softmax(w), complementary logits z^r (V,), gold
next token y.

Decoding rules (`combine`):

    hard (FusionRoute):  logits = l_{e*} + z^r,  e* = argmax_e w_e
    soft (ablation):     logits = sum_e pi_e l_e + z^r
    complementary=False drops z^r (pure routing: Co-LLM style, or the ablation).

Adding l_{e*} (a log-probability) or z_{e*} (raw logits) gives the same softmax; the
log-probs make the soft rule independent of each expert's logit offset.

Routing labels (`routing_labels`): the expert that gives the gold token the highest
probability, e_t = argmax_e l_e[y_t], counted only on informative tokens, where the
experts disagree about the best choice: the best expert's gold log-prob exceeds the
runner-up's by more than `margin` nats (where two experts are about equally good,
either choice is right and the label would be noise).

Stage-1 loss (`stage1_loss`), per token, averaged:

    L = (1 - a) NLL(soft) + a NLL(hard) + lambda * 1[informative] CE(pi, e_t)

The soft term lets the routing learn through the expert log-probs weighted by pi; the
hard term trains z^r against the expert the decoder will actually pick (the argmax is
not differentiated); the cross-entropy is the token-level routing supervision.

Co-LLM's latent-deferral objective (`latent_routing_loss`), generalised from two
models to E: the choice of expert is a latent variable with prior pi,

    L = -log sum_e pi_e p_e(y_t) = -logsumexp_e [log pi_e + l_e[y_t]]

(E = 2 with pi = (sigma(-z), sigma(z)) is Co-LLM's -logsumexp[log sigma(-z) +
log p_base(y), log sigma(z) + log p_ref(y)]).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from common import checks

Array = jax.Array
MODES = ("hard", "soft")


def _check_mode(mode: str) -> None:
  if mode not in MODES:
    raise ValueError(f"mode={mode!r}; expected one of {MODES}")


def select_expert(expert_logp: Array, choice: Array) -> Array:
  """expert_logp (E, ..., V) at each position's chosen expert choice (...) -> (..., V)."""
  index = choice[None, ..., None].astype(jnp.int32)
  return jnp.take_along_axis(expert_logp, index, axis=0)[0]


def combine(expert_logp: Array, scores: Array, router_logits: Array | None,
            mode: str = "hard", complementary: bool = True) -> tuple[Array, Array]:
  """The combined next-token logits and each position's chosen expert.

  Args:
    expert_logp: (E, ..., V) experts' log-probs (log_softmax of their logits).
    scores: (..., E) routing scores w.
    router_logits: (..., V) complementary logits z^r (None or unused when
      complementary is False).
    mode: "hard" (argmax expert) or "soft" (pi-weighted expert log-probs).
    complementary: add z^r.

  Returns:
    (logits (..., V), choice (...) int32 = argmax_e w_e).

  Example:
    >>> lp = jax.nn.log_softmax(jnp.array([[0., 1.], [2., 0.]]))   # E=2, V=2
    >>> logits, choice = combine(lp, jnp.array([0., 5.]), jnp.zeros(2))
    >>> int(choice)
    1
  """
  _check_mode(mode)
  if expert_logp.shape[0] != scores.shape[-1] or expert_logp.shape[1:-1] != scores.shape[:-1]:
    raise ValueError(f"expert_logp {expert_logp.shape} and scores {scores.shape} disagree: "
                     "expected (E, ..., V) and (..., E)")
  choice = jnp.argmax(scores, axis=-1).astype(jnp.int32)
  if mode == "hard":
    logits = select_expert(expert_logp, choice)
  else:
    pi = jax.nn.softmax(scores, axis=-1)
    logits = jnp.einsum("...e,e...v->...v", pi, expert_logp)
  if complementary:
    if router_logits is None or router_logits.shape != logits.shape:
      raise ValueError(f"router_logits must be {logits.shape} with complementary=True, got "
                       f"{None if router_logits is None else router_logits.shape}")
    logits = logits + router_logits
  return logits, choice


def gold_logprobs(expert_logp: Array, targets: Array) -> Array:
  """l_e[y_t]: (E, ..., V) and targets (...) -> (E, ...)."""
  index = jnp.broadcast_to(targets[None, ..., None], expert_logp.shape[:-1] + (1,))
  return jnp.take_along_axis(expert_logp, index.astype(jnp.int32), axis=-1)[..., 0]


def routing_labels(gold: Array, margin: float = 0.693) -> tuple[Array, Array]:
  """Token-level routing labels from the experts' gold log-probs gold (E, ...).

      label_t = argmax_e gold[e, t]
      informative_t = gold[label_t, t] - max_{e != label_t} gold[e, t] > margin

  Returns:
    (labels (...) int32, informative (...) bool).

  Example:
    >>> labels, informative = routing_labels(jnp.log(jnp.array([[0.9, 0.5], [0.1, 0.5]])))
    >>> labels.tolist(), informative.tolist()
    ([0, 0], [True, False])
  """
  checks.scalar("margin", margin, strict=False)
  labels = jnp.argmax(gold, axis=0).astype(jnp.int32)
  top2 = jax.lax.top_k(jnp.moveaxis(gold, 0, -1), 2)[0]
  informative = (top2[..., 0] - top2[..., 1]) > margin
  return labels, informative


def _nll(logits: Array, targets: Array) -> Array:
  logp = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def stage1_loss(expert_logp: Array, scores: Array, router_logits: Array, targets: Array, *,
                margin: float = 0.693, route_weight: float = 1.0, hard_weight: float = 0.5,
                complementary: bool = True) -> tuple[Array, dict[str, Array]]:
  """FusionRoute's supervised stage-1 loss (module docstring), averaged over tokens.

  Args:
    expert_logp: (E, B, T, V) frozen experts' log-probs.
    scores: (B, T, E) routing scores; router_logits: (B, T, V).
    targets: (B, T) gold next tokens.
    margin, route_weight, hard_weight: as in the module docstring (a, lambda).
    complementary: False trains the no-complementary-logit ablation (z^r = 0).

  Returns:
    (loss, metrics): "nll_soft", "nll_hard", "route_ce", "informative" (share of
    informative tokens), "route_accuracy" (argmax w = label on informative tokens).
  """
  expert_logp = jax.lax.stop_gradient(expert_logp)
  z_r = router_logits if complementary else None
  soft, _ = combine(expert_logp, scores, z_r, "soft", complementary)
  choice = jax.lax.stop_gradient(jnp.argmax(scores, axis=-1))
  hard = select_expert(expert_logp, choice) + (router_logits if complementary else 0.0)
  nll_soft, nll_hard = jnp.mean(_nll(soft, targets)), jnp.mean(_nll(hard, targets))
  labels, informative = routing_labels(gold_logprobs(expert_logp, targets), margin)
  weight = informative.astype(jnp.float32)
  ce = _nll(scores, labels)
  route_ce = jnp.sum(ce * weight) / jnp.maximum(jnp.sum(weight), 1.0)
  loss = (1.0 - hard_weight) * nll_soft + hard_weight * nll_hard + route_weight * route_ce
  hits = (choice == labels).astype(jnp.float32)
  return loss, {"nll_soft": nll_soft, "nll_hard": nll_hard, "route_ce": route_ce,
                "informative": jnp.mean(weight),
                "route_accuracy": jnp.sum(hits * weight) / jnp.maximum(jnp.sum(weight), 1.0)}


def latent_routing_loss(expert_logp: Array, scores: Array, targets: Array
                        ) -> tuple[Array, dict[str, Array]]:
  """Co-LLM's latent-deferral loss over E experts (module docstring), averaged over tokens."""
  gold = gold_logprobs(jax.lax.stop_gradient(expert_logp), targets)       # (E, B, T)
  log_pi = jax.nn.log_softmax(scores, axis=-1)                            # (B, T, E)
  loss = -jnp.mean(jax.nn.logsumexp(jnp.moveaxis(log_pi, -1, 0) + gold, axis=0))
  return loss, {"marginal_nll": loss}
