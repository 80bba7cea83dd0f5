"""Selective Token Editing (STE): a sparse additive edit of a few critical tokens.

With Z in R^{K x b} the frozen tokenizer's codes of the 2D pathway's fused image, STE
edits the tokens at a fixed set P of |P| = budget positions (the mask M in {0, 1}^K,
one at P),

  Z~ = Z + M * Delta,                                                  (paper, Eq. 8)

and leaves every other token exactly as it was. As in the paper, Delta is a learnable
K x b offset (``delta="bias"``), trained with the fusion objective and nothing else
while the tokenizer and the 2D backbone stay frozen; ``delta="editor"`` instead
computes Delta per image with a light transformer over (Z_F, Z_A, Z_B), the fused and
the two source images' tokens.

The positions come from an offline probing run (paper, Eqs. 6-7): learnable logits
a in R^K, a Gumbel-top-b mask on a + g (g ~ Gumbel(0, 1)), hard in the forward pass and
relaxed in the backward pass through sigmoid((a + g - t) / tau) with t between the b-th
and (b+1)-th perturbed logits, trained jointly with Delta on the same objective; then
P = top-b(a) is fixed. Baselines with the same machinery (``SELECTIONS``): ``random``
(b positions drawn once, uniformly), ``all`` (M = 1) and ``none`` (M = 0).
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.models import vit

SELECTIONS = ("probe", "random", "all", "none")
DELTAS = ("bias", "editor")


class EditorConfig(NamedTuple):
  width: int = 64
  depth: int = 1
  heads: int = 4
  mlp_ratio: int = 2
  temperature: float = 0.5


class TokenEditor(nn.Module):
  """(Z_F, Z_A, Z_B) (n, K, b) each -> (scores (n, K), Delta (n, K, b))."""
  config: EditorConfig

  @nn.compact
  def __call__(self, z_f, z_a, z_b):
    c = self.config
    k, bits = z_f.shape[-2:]
    h = nn.Dense(c.width)(jnp.concatenate([z_f, z_a, z_b, z_a - z_f, z_b - z_f], axis=-1))
    h = h + self.param("positions", nn.initializers.normal(0.02), (k, c.width))
    for _ in range(c.depth):
      h = vit.Block(c.width, c.heads, c.mlp_ratio)(h)
    h = nn.LayerNorm()(h)
    scores = nn.Dense(1)(h)[..., 0]
    delta = nn.Dense(bits, kernel_init=nn.initializers.zeros)(h)
    return scores, delta


def check_budget(budget: int, num_tokens: int) -> None:
  """One-line ValueError unless 0 <= budget <= K."""
  if not 0 <= int(budget) <= num_tokens:
    raise ValueError(f"token budget {budget} must be in [0, K = {num_tokens}]")


def top_b_mask(scores, budget: int):
  """(..., K) -> (..., K) float mask with ones at the ``budget`` largest scores."""
  if budget == 0:
    return jnp.zeros_like(scores)
  _, idx = jax.lax.top_k(scores, budget)
  return jnp.sum(jax.nn.one_hot(idx, scores.shape[-1], dtype=scores.dtype), axis=-2)


def gumbel_top_b_mask(key, scores, budget: int, temperature: float):
  """Hard Gumbel-top-b in the forward pass, sigmoid relaxation in the backward pass."""
  perturbed = scores + jax.random.gumbel(key, scores.shape, scores.dtype)
  hard = top_b_mask(jax.lax.stop_gradient(perturbed), budget)
  k = scores.shape[-1]
  if budget in (0, k):
    return hard
  ordered = jnp.sort(jax.lax.stop_gradient(perturbed), axis=-1)[..., ::-1]
  t = 0.5 * (ordered[..., budget - 1] + ordered[..., budget])
  soft = jax.nn.sigmoid((perturbed - t[..., None]) / temperature)
  return hard + (soft - jax.lax.stop_gradient(soft))


def positions_mask(positions, num_tokens: int):
  """(K,) float mask with ones at ``positions``."""
  m = np.zeros(num_tokens, np.float32)
  m[np.asarray(positions, dtype=np.int64)] = 1.0
  return jnp.asarray(m)


def random_positions(seed: int, num_tokens: int, budget: int) -> tuple[int, ...]:
  """``budget`` distinct positions drawn uniformly (the random-selection baseline)."""
  check_budget(budget, num_tokens)
  rng = np.random.default_rng(seed)
  return tuple(sorted(int(p) for p in rng.choice(num_tokens, budget, replace=False)))


def fixed_mask(selection: str, num_tokens: int, budget: int, positions=()):
  """M for a fixed selection: the probed (or random) ``positions``, all or none."""
  if selection not in SELECTIONS:
    raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
  check_budget(budget, num_tokens)
  if selection == "all":
    return jnp.ones(num_tokens)
  if selection == "none":
    return jnp.zeros(num_tokens)
  if len(positions) != budget:
    raise ValueError(f"{selection} selection needs {budget} positions, got {list(positions)}")
  return positions_mask(positions, num_tokens)


def init(key, config: EditorConfig, num_tokens: int, bits: int, delta: str = "bias"):
  """STE parameters: {"logits": (K,) probing logits, "delta": (K, b) offset} with
  ``delta="bias"``, or {"logits", "editor": TokenEditor params} with ``"editor"``."""
  if delta not in DELTAS:
    raise ValueError(f"delta must be one of {DELTAS}, got {delta!r}")
  params = {"logits": jnp.zeros(num_tokens)}
  if delta == "bias":
    params["delta"] = jnp.zeros((num_tokens, bits))
  else:
    z = jnp.zeros((1, num_tokens, bits))
    params["editor"] = TokenEditor(config).init(key, z, z, z)
  return params


def offsets(params, z_f, z_a, z_b, config: EditorConfig):
  """Delta, broadcast to z_f's shape: the learned offset, or the editor's output."""
  if "delta" in params:
    return jnp.broadcast_to(params["delta"], z_f.shape)
  return TokenEditor(config).apply(params["editor"], z_f, z_a, z_b)[1]


def edit(z, delta, mask):
  """Z~ = Z + M * Delta (mask (..., K) broadcast over the code dimension).

  Example:
    >>> z = jnp.zeros((4, 3)); m = positions_mask([1], 4)
    >>> edit(z, jnp.ones((4, 3)), m)[:, 0].tolist()
    [0.0, 1.0, 0.0, 0.0]
  """
  return z + mask[..., None] * delta
