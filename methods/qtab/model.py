"""Q-Tab end to end: rows <-> token sequences, generation, conditional sampling.

A row's token sequence is [numeric codes for levels 1..L | one token per categorical
column] (no numeric codes when the table has no numeric column). Generation draws
every position with the generator's MaskGIT sampler and decodes the numeric codes
with the tokenizer's decoder; conditional generation and imputation fix the known
categorical tokens (and, when every numeric column is known, the numeric codes).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.qtab import generator as gen_lib
from methods.qtab import tokenizer as tok_lib


class QTabSpec(NamedTuple):
  """The static description of a Q-Tab model for one table."""
  tokenizer: tok_lib.TokenizerConfig
  generator: gen_lib.GeneratorConfig
  num_numeric: int
  cardinalities: tuple[int, ...]

  @property
  def numeric_positions(self) -> int:
    return self.tokenizer.levels if self.num_numeric else 0

  @property
  def vocab_sizes(self) -> tuple[int, ...]:
    return (self.tokenizer.vocab,) * self.numeric_positions + tuple(self.cardinalities)


class QTabParams(NamedTuple):
  tokenizer: dict
  generator: dict


def make_spec(tokenizer: tok_lib.TokenizerConfig, generator: gen_lib.GeneratorConfig,
              num_numeric: int, cardinalities: Sequence[int]) -> QTabSpec:
  tok_lib.check_config(tokenizer)
  cards = tuple(int(k) for k in cardinalities)
  if num_numeric < 0 or (num_numeric == 0 and not cards):
    raise ValueError(f"a table needs a numeric or a categorical column, got {num_numeric} "
                     f"numeric and {len(cards)} categorical")
  if any(k < 1 for k in cards):
    raise ValueError(f"cardinalities must be positive, got {list(cards)}")
  return QTabSpec(tokenizer, generator, int(num_numeric), cards)


def row_tokens(spec: QTabSpec, tok_params, x_num, x_cat):
  """(n, d_num) float, (n, C) int -> (n, P) int32 tokens."""
  x_cat = jnp.asarray(x_cat, jnp.int32)
  if not spec.num_numeric:
    return x_cat
  codes = tok_lib.tokenize(tok_params, jnp.asarray(x_num, jnp.float32), spec.tokenizer)
  return jnp.concatenate([codes, x_cat], axis=1)


def rows_from_tokens(spec: QTabSpec, tok_params, tokens):
  """(n, P) tokens -> ((n, d_num) float32 decoded numeric part, (n, C) int32)."""
  l = spec.numeric_positions
  x_cat = tokens[:, l:]
  if not spec.num_numeric:
    return jnp.zeros((tokens.shape[0], 0), jnp.float32), x_cat
  x_num = tok_lib.detokenize(tok_params, tokens[:, :l], spec.tokenizer, spec.num_numeric)
  return x_num, x_cat


def generate_tokens(spec: QTabSpec, gen_params, key, n: int, steps: int = 8,
                    temperature: float = 1.0, order: str = "random"):
  """n unconditional rows as (n, P) tokens."""
  p = len(spec.vocab_sizes)
  empty = jnp.zeros((n, p), jnp.int32)
  return gen_lib.sample(gen_params, key, empty, jnp.zeros((n, p), bool), spec.vocab_sizes,
                        spec.generator, steps, temperature, order)


def generate(spec: QTabSpec, params: QTabParams, key, n: int, **sampling):
  """n unconditional rows -> (x_num, x_cat, tokens)."""
  tokens = generate_tokens(spec, params.generator, key, n, **sampling)
  x_num, x_cat = rows_from_tokens(spec, params.tokenizer, tokens)
  return x_num, x_cat, tokens


def impute(spec: QTabSpec, params: QTabParams, key, x_num, x_cat, known_categorical,
           numeric_known: bool = True, **sampling):
  """Fills the categorical columns where ``known_categorical`` (n, C) is False (and the
  numeric part too when ``numeric_known`` is False), keeping everything known.

  Returns:
    (x_num, x_cat): known entries unchanged, the others sampled from the generator.
  """
  tokens = row_tokens(spec, params.tokenizer, x_num, x_cat)
  n, l = tokens.shape[0], spec.numeric_positions
  known = jnp.concatenate([jnp.full((n, l), bool(numeric_known)),
                           jnp.asarray(known_categorical, bool)], axis=1)
  filled = gen_lib.sample(params.generator, key, tokens, known, spec.vocab_sizes,
                          spec.generator, **sampling)
  new_num, new_cat = rows_from_tokens(spec, params.tokenizer, filled)
  x_num = jnp.asarray(x_num, jnp.float32) if numeric_known else new_num
  return x_num, new_cat


def reconstruction_error(spec: QTabSpec, tok_params, x_num) -> jax.Array:
  """Mean squared error of the numeric part through tokens and back (no corruption)."""
  if not spec.num_numeric:
    return jnp.zeros(())
  codes = tok_lib.tokenize(tok_params, x_num, spec.tokenizer)
  rec = tok_lib.detokenize(tok_params, codes, spec.tokenizer, spec.num_numeric)
  return jnp.mean((rec - x_num) ** 2)


def numeric_code_tuples(spec: QTabSpec, tokens) -> np.ndarray:
  """(n, L) the numeric codes of each row (what 'codes beyond the data' counts)."""
  return np.asarray(tokens)[:, :spec.numeric_positions]
