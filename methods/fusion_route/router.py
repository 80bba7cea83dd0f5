"""FusionRoute's router: a small decoder LM with a routing head and its own LM head.

On the router's final hidden state h_t (`Transformer(..., return_hidden=True)`):

    w_t = W h_t + b                 (E,)   scores of the E experts (the routing head)
    z^r_t = lm_head(h_t)            (V,)   the complementary logits

The routing head starts at zero (uniform routing), so a router made from a pretrained
LM (an HF checkpoint, `from_lm_params`) starts as that LM plus an untrained head.

Example:
    >>> router = Router(lm_config, num_experts=3)
    >>> params = init_router(router, jax.random.PRNGKey(0))
    >>> scores, logits = router.apply({"params": params}, tokens)   # (B, T, 3), (B, T, V)
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from common import checks
from common.models.transformer import KVCache, Transformer, TransformerConfig, init_params


class Router(nn.Module):
  """The router (module docstring).

  Call: `apply({"params": p}, tokens)` -> (scores (B, T, E), logits (B, T, V));
  with a `KVCache`, (scores, logits, new_cache), as `Transformer`.

  Attributes:
    config: the router LM's `TransformerConfig`.
    num_experts: E >= 2.
  """
  config: TransformerConfig
  num_experts: int

  @nn.compact
  def __call__(self, tokens: jax.Array, cache: KVCache | None = None,
               left_pad: jax.Array | None = None):
    out = Transformer(self.config, name="lm")(tokens, cache, left_pad, return_hidden=True)
    hidden = out[-1]
    scores = nn.Dense(self.num_experts, kernel_init=nn.initializers.zeros,
                      dtype=jnp.float32, name="route_head")(hidden)
    return (scores, *out[:-1])


def init_router(router: Router, key: jax.Array) -> Any:
  """Fresh router parameters {"lm": ..., "route_head": ...} (routing head at zero), as
  plain arrays (the LM's logical axis names unboxed)."""
  checks.positive_int("Router.num_experts", router.num_experts, low=2)
  return init_params(router, key)


def from_lm_params(router: Router, lm_params: Any, key: jax.Array) -> Any:
  """Router parameters whose LM is `lm_params` (a trained or HF-loaded `Transformer` of
  `router.config`) and whose routing head is fresh (zero)."""
  params = init_router(router, key)
  expected = jax.tree.map(jnp.shape, params["lm"])
  got = jax.tree.map(jnp.shape, lm_params)
  if expected != got:
    raise ValueError("lm_params do not match the router's TransformerConfig (parameter "
                     "shapes differ); load them with the config they were saved with")
  return {"lm": lm_params, "route_head": params["route_head"]}


def count(params: Any) -> int:
  return int(sum(x.size for x in jax.tree.leaves(params)))


def check_smaller(router_params: Any, expert_params: tuple) -> None:
  """Raises a one-line ValueError unless the router has fewer parameters than every
  expert (the paper's router is a small model beside large experts)."""
  n = count(router_params)
  sizes = [count(p) for p in expert_params]
  if n >= min(sizes):
    i = sizes.index(min(sizes))
    raise ValueError(f"the router has {n} parameters, not fewer than expert {i}'s "
                     f"{sizes[i]}; expected a router smaller than every expert")

