"""E frozen experts and a router as one model: the fused forward pass and fused decoding.

Parameters are one pytree {"experts": (p_1, ..., p_E), "router": p_r}; the modules
(`Ensemble`) are static. The experts may differ in size and family (each has its own
`Transformer`), but they and the router share one vocabulary.

Fused decoding (`generate`) is one jitted program: a prefill of every model, then a
`lax.while_loop` whose step combines the logits at the last position (`combine.combine`:
l_{e*} + z^r with e* = argmax w, by default), samples the next token, and feeds it to
every model, so the KV caches of all experts and of the router advance together.

The trade-off: only the router and the chosen expert's logits are needed per step,
but every expert's cache must hold every token, or a later switch to it would have to
catch up on the tokens it missed. Running all experts in the same program keeps the
caches current with no host round trip and no recompilation, at the cost of E expert
forward passes per token; on an accelerator the E small matmuls of a decoding step
are latency-bound, so that cost is well below E times one expert's
(`experiments/benchmarks/fusion_route.py` measures it). Rows of a batch may choose
different experts, which is a second reason to run them all.

Example:
    >>> ens = make_ensemble((expert_a, expert_b), router)
    >>> logits, choice, scores = forward(ens, params, tokens)
    >>> out = generate(ens, params, prompt, key, max_new_tokens=32, temperature=0.0)
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from common.models import sampling
from common.models.transformer import Transformer, check_token_ids, init_cache
from methods.fusion_route import combine as combine_lib
from methods.fusion_route.router import Router, check_smaller

Array = jax.Array


class Ensemble(NamedTuple):
  """The static modules: E expert `Transformer`s and the `Router`."""
  experts: tuple[Transformer, ...]
  router: Router

  @property
  def vocab_size(self) -> int:
    return self.router.config.vocab_size


class FusedGeneration(NamedTuple):
  """What `generate` returns.

  Attributes:
    tokens: (B, T0 + N) the prompt and the sampled tokens.
    choices: (B, N) the expert chosen at each decoding step (argmax w).
    logits: (B, N, V) the combined logits each token was drawn from, or None.
  """
  tokens: Array
  choices: Array
  logits: Array | None


def make_ensemble(experts, router: Router) -> Ensemble:
  """Checks and bundles the modules: E >= 2 experts, one shared vocabulary, and a
  router with one routing score per expert (one-line ValueErrors)."""
  experts = tuple(experts)
  if len(experts) < 2:
    raise ValueError(f"FusionRoute needs E >= 2 experts, got {len(experts)}")
  for i, e in enumerate(experts):
    if not isinstance(e, Transformer):
      raise TypeError(f"expert {i} is a {type(e).__name__}; expected a Transformer")
  vocab = {e.config.vocab_size for e in experts}
  if len(vocab) > 1:
    sizes = [e.config.vocab_size for e in experts]
    raise ValueError(f"the experts have different vocabularies (sizes {sizes}); "
                     "expected experts that share one tokenizer")
  if router.config.vocab_size != experts[0].config.vocab_size:
    raise ValueError(f"the router's vocabulary has {router.config.vocab_size} tokens, the "
                     f"experts' {experts[0].config.vocab_size}; expected one shared tokenizer")
  if router.num_experts != len(experts):
    raise ValueError(f"the router scores {router.num_experts} experts, but {len(experts)} "
                     "were given")
  return Ensemble(experts, router)


def check_params(ensemble: Ensemble, params: Any) -> None:
  """One-line errors for params that do not fit the ensemble, or a router that is not
  smaller than every expert."""
  if not isinstance(params, dict) or set(params) != {"experts", "router"}:
    raise ValueError("params must be {'experts': (one pytree per expert), 'router': ...}")
  if len(params["experts"]) != len(ensemble.experts):
    raise ValueError(f"params hold {len(params['experts'])} experts, the ensemble "
                     f"{len(ensemble.experts)}")
  check_smaller(params["router"], tuple(params["experts"]))


def expert_logprobs(ensemble: Ensemble, expert_params, tokens: Array) -> Array:
  """(E, B, T, V) log softmax of each expert's logits on tokens (B, T); no gradient."""
  out = [jax.nn.log_softmax(m.apply({"params": p}, tokens), axis=-1)
         for m, p in zip(ensemble.experts, expert_params)]
  return jax.lax.stop_gradient(jnp.stack(out))


def forward(ensemble: Ensemble, params: Any, tokens: Array, mode: str = "hard",
            complementary: bool = True) -> tuple[Array, Array, Array]:
  """Teacher-forced combined logits on tokens (B, T): (logits (B, T, V), choice (B, T),
  scores (B, T, E)); position t predicts tokens[:, t+1]. Differentiable in the router's
  parameters (not jitted here: jit the caller)."""
  scores, router_logits = ensemble.router.apply({"params": params["router"]}, tokens)
  lp = expert_logprobs(ensemble, params["experts"], tokens)
  logits, choice = combine_lib.combine(lp, scores, router_logits, mode, complementary)
  return logits, choice, scores


@functools.partial(jax.jit, static_argnames=("ensemble", "mode", "complementary"))
def token_logprobs(ensemble: Ensemble, params: Any, tokens: Array, mode: str = "hard",
                   complementary: bool = True) -> tuple[Array, Array, Array]:
  """(log p(tokens[:, t+1] | tokens[:, :t+1]) (B, T-1), choice (B, T-1), scores
  (B, T-1, E)) under the combined policy, jitted."""
  logits, choice, scores = forward(ensemble, params, tokens[:, :-1], mode, complementary)
  logp = jax.nn.log_softmax(logits, axis=-1)
  gold = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
  return gold, choice, scores


def generate(ensemble: Ensemble, params: Any, prompt: Array, key: Array, *,
             max_new_tokens: int, temperature: float = 1.0, mode: str = "hard",
             complementary: bool = True, return_logits: bool = False) -> FusedGeneration:
  """Fused, KV-cached decoding of prompt (B, T0) by N = max_new_tokens tokens.

  Step n draws y_n ~ softmax(c_n / temperature) (argmax at 0), where c_n is `combine`
  of the experts' and the router's logits after prompt + y_<n; all caches advance.

  Raises:
    ValueError: a prompt that is not (B, T0 >= 1) ids in the vocabulary, a negative
      max_new_tokens, a negative temperature, an unknown mode.
  """
  prompt = jnp.asarray(prompt)
  if prompt.ndim != 2 or prompt.shape[1] < 1:
    raise ValueError(f"prompt must be (batch, time) with time >= 1, got shape {prompt.shape}")
  check_token_ids(prompt, ensemble.vocab_size, "prompt")
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) \
      or max_new_tokens < 0:
    raise ValueError(f"max_new_tokens={max_new_tokens!r}; expected an int >= 0")
  if not temperature >= 0:
    raise ValueError(f"temperature={temperature!r}; expected a number >= 0")
  combine_lib._check_mode(mode)
  return _generate(ensemble, params, prompt.astype(jnp.int32), key,
                   max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                   mode=mode, complementary=bool(complementary),
                   return_logits=bool(return_logits))


def _step_logits(ensemble, params, tokens, caches, mode, complementary):
  """One cached call of every model on tokens (B, t): the combined logits at the last
  position, the choice there, and the new caches."""
  scores, z_r, router_cache = ensemble.router.apply({"params": params["router"]}, tokens,
                                                     caches[-1])
  lp, new = [], []
  for model, p, cache in zip(ensemble.experts, params["experts"], caches[:-1]):
    logits, cache = model.apply({"params": p}, tokens, cache)
    lp.append(jax.nn.log_softmax(logits[:, -1], axis=-1))
    new.append(cache)
  logits, choice = combine_lib.combine(jnp.stack(lp), scores[:, -1], z_r[:, -1], mode,
                                       complementary)
  return logits, choice, (*new, router_cache)


@functools.partial(jax.jit, static_argnames=("ensemble", "max_new_tokens", "temperature",
                                             "mode", "complementary", "return_logits"))
def _generate(ensemble, params, prompt, key, *, max_new_tokens, temperature, mode,
              complementary, return_logits):
  b, t0 = prompt.shape
  n = max_new_tokens
  models = (*ensemble.experts, ensemble.router)
  caches = tuple(init_cache(m.config, b, t0 + n) for m in models)
  logits, choice, caches = _step_logits(ensemble, params, prompt, caches, mode, complementary)
  keys = jax.random.split(key, max(n, 1))
  out = {"tokens": jnp.zeros((b, n), jnp.int32), "choices": jnp.zeros((b, n), jnp.int32)}
  if return_logits:
    out["logits"] = jnp.zeros((b, n, ensemble.vocab_size), jnp.float32)

  def body(i, carry):
    caches, logits, choice, out = carry
    token = sampling.sample_token(logits, keys[i], temperature)
    new = {"tokens": token, "choices": choice, "logits": logits}
    out = {k: out[k].at[:, i].set(new[k]) for k in out}
    logits, choice, caches = _step_logits(ensemble, params, token[:, None], caches, mode,
                                          complementary)
    return caches, logits, choice, out

  if n:
    _, _, _, out = jax.lax.fori_loop(0, n, body, (caches, logits, choice, out))
  return FusedGeneration(jnp.concatenate([prompt, out["tokens"]], axis=1), out["choices"],
                         out.get("logits"))
