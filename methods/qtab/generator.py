"""Q-Tab's generator: a BERT-style masked transformer over a row's tokens.

A row is P = L + C tokens: the L residual-LFQ codes of its numeric part (one per
level, vocabulary 2^b each) and one token per categorical column (its category,
vocabulary K_j). Position p has its own vocabulary V_p plus a [MASK] token (id V_p),
and its own learned column embedding. A bidirectional transformer (pre-LN blocks,
full attention) predicts every position's distribution p_theta(x_p | x_visible).

Training is masked language modelling at a random mask rate, as in TabMT's masked
generation (Gulati & Roysdon 2023): per row r ~ U(0, 1), each position is masked
with probability r (at least one per row), and the loss is the cross-entropy on the
masked positions,

  L = E_r E_M [ sum_{p in M} -log p_theta(x_p | x_{not M}) / |M| ].

Sampling is MaskGIT's iterative unmasking (Chang et al. 2022): start from the row
with every free position masked; at step t = 1..T sample every masked position at
temperature tau, keep the n_t = floor(n_0 cos(pi t / 2T)) least confident ones
masked (confidence = the sampled token's log-probability plus Gumbel noise annealed
by (1 - t/T); ``order="random"`` uses a random order instead, TabMT's), and commit
the rest. Positions given as known are never masked, so the same sampler does
conditional generation and imputation.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.models.vit import Block

ORDERS = ("confidence", "random")


class GeneratorConfig(NamedTuple):
  width: int = 128
  depth: int = 4
  heads: int = 4
  mlp_ratio: int = 4


class MaskedTableTransformer(nn.Module):
  """tokens (B, P) int (id V_p = [MASK] at position p) -> logits (B, P, max V_p),
  entries past V_p at -inf."""
  vocab_sizes: Sequence[int]
  config: GeneratorConfig

  @nn.compact
  def __call__(self, tokens):
    sizes = np.asarray(self.vocab_sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]])
    c, p = self.config, len(sizes)
    h = nn.Embed(int(np.sum(sizes + 1)), c.width)(tokens + jnp.asarray(offsets))
    h = h + self.param("columns", nn.initializers.normal(0.02), (p, c.width))
    for _ in range(c.depth):
      h = Block(c.width, c.heads, c.mlp_ratio)(h)
    h = nn.LayerNorm()(h)
    vmax = int(sizes.max())
    w = self.param("head", nn.initializers.normal(0.02), (p, c.width, vmax))
    b = self.param("head_bias", nn.initializers.zeros, (p, vmax))
    logits = jnp.einsum("bpw,pwv->bpv", h, w) + b
    return jnp.where(valid_mask(self.vocab_sizes), logits, -1e9)


def valid_mask(vocab_sizes: Sequence[int]) -> np.ndarray:
  """(P, max V) True where token v exists at position p."""
  sizes = np.asarray(vocab_sizes)
  return np.arange(sizes.max())[None, :] < sizes[:, None]


def check_vocab_sizes(vocab_sizes: Sequence[int]) -> tuple[int, ...]:
  sizes = tuple(int(v) for v in vocab_sizes)
  if not sizes or min(sizes) < 1:
    raise ValueError(f"vocab_sizes must be a non-empty sequence of positive ints, got "
                     f"{list(vocab_sizes)}")
  return sizes


def init(key, vocab_sizes: Sequence[int], config: GeneratorConfig):
  sizes = check_vocab_sizes(vocab_sizes)
  model = MaskedTableTransformer(sizes, config)
  return model.init(key, jnp.zeros((1, len(sizes)), jnp.int32))


def apply(params, tokens, vocab_sizes: Sequence[int], config: GeneratorConfig):
  return MaskedTableTransformer(tuple(vocab_sizes), config).apply(params, tokens)


def mask_tokens(tokens, mask, vocab_sizes: Sequence[int]):
  """tokens with position p set to its [MASK] id V_p where mask."""
  return jnp.where(mask, jnp.asarray(vocab_sizes, tokens.dtype), tokens)


def random_mask(key, batch: int, positions: int):
  """(B, P) bool: rate r ~ U(0, 1) per row, each position masked w.p. r, and at least
  one masked position per row (TabMT's masked-generation recipe)."""
  k_rate, k_bits, k_one = jax.random.split(key, 3)
  rate = jax.random.uniform(k_rate, (batch, 1))
  mask = jax.random.uniform(k_bits, (batch, positions)) < rate
  one = jax.nn.one_hot(jax.random.randint(k_one, (batch,), 0, positions), positions) > 0
  return mask | (one & ~jnp.any(mask, axis=1, keepdims=True))


def mlm_loss(params, tokens, key, vocab_sizes: Sequence[int], config: GeneratorConfig):
  """Cross-entropy on the masked positions -> (loss, {"accuracy"})."""
  mask = random_mask(key, *tokens.shape)
  logits = apply(params, mask_tokens(tokens, mask, vocab_sizes), vocab_sizes, config)
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
  w = mask.astype(nll.dtype)
  per_row = jnp.sum(nll * w, axis=1) / jnp.sum(w, axis=1)
  correct = (jnp.argmax(logits, axis=-1) == tokens).astype(nll.dtype)
  accuracy = jnp.sum(correct * w) / jnp.sum(w)
  return jnp.mean(per_row), {"accuracy": accuracy}


def make_loss_fn(vocab_sizes: Sequence[int], config: GeneratorConfig):
  """`loss_fn(params, batch, key)` for ``common.train.train``; batch = {"tokens": (B, P)}."""
  sizes = check_vocab_sizes(vocab_sizes)

  def loss_fn(params, batch, key):
    return mlm_loss(params, batch["tokens"], key, sizes, config)
  return loss_fn


def cosine_schedule(step, steps):
  """Fraction of the free positions still masked after `step` (1-based) of `steps`."""
  return jnp.cos(0.5 * math.pi * step / steps)


def sample(params, key, tokens, known, vocab_sizes: Sequence[int], config: GeneratorConfig,
           steps: int = 8, temperature: float = 1.0, order: str = "confidence",
           noise: float = 1.0):
  """MaskGIT unmasking of the positions where ``known`` is False.

  Args:
    tokens: (B, P) int32; values at unknown positions are ignored.
    known: (B, P) bool; these positions are kept as given.
    steps: T unmasking steps (>= 1).
    temperature: tau of the token draws.
    order: "confidence" (MaskGIT) or "random" (TabMT).
    noise: scale of the Gumbel noise on the confidences, annealed by (1 - t/T).

  Returns:
    (B, P) int32 tokens, equal to ``tokens`` where ``known``.
  """
  if order not in ORDERS:
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  return _sample(params, key, jnp.asarray(tokens, jnp.int32), jnp.asarray(known, bool),
                 check_vocab_sizes(vocab_sizes), config, int(steps), temperature, order, noise)


@functools.partial(jax.jit, static_argnames=("sizes", "config", "steps", "order"))
def _sample(params, key, tokens, known, sizes, config, steps, temperature, order, noise):
  mask0 = ~known
  n0 = jnp.sum(mask0, axis=1, keepdims=True)

  def body(t, carry):
    tokens, mask, key = carry
    key, k_draw, k_noise = jax.random.split(key, 3)
    logits = apply(params, mask_tokens(tokens, mask, sizes), sizes, config)
    logp = jax.nn.log_softmax(logits / temperature, axis=-1)
    drawn = jax.random.categorical(k_draw, logp, axis=-1).astype(jnp.int32)
    gumbel = jax.random.gumbel(k_noise, drawn.shape)
    if order == "confidence":
      chosen = jnp.take_along_axis(logp, drawn[..., None], axis=-1)[..., 0]
      conf = chosen + noise * (1.0 - (t + 1) / steps) * gumbel
    else:
      conf = gumbel
    conf = jnp.where(mask, conf, jnp.inf)
    n_masked = jnp.sum(mask, axis=1, keepdims=True)
    keep = jnp.floor(n0 * cosine_schedule(t + 1, steps)).astype(jnp.int32)
    keep = jnp.clip(keep, 0, jnp.maximum(n_masked - 1, 0))
    rank = jnp.argsort(jnp.argsort(conf, axis=1), axis=1)
    still = mask & (rank < keep)
    tokens = jnp.where(mask & ~still, drawn, tokens)
    return tokens, still, key

  tokens, _, _ = jax.lax.fori_loop(0, steps, body, (tokens, mask0, key))
  return tokens
