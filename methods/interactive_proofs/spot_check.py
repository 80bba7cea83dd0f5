"""Robust oracle-aided computations, verified by spot checks.

The computation aggregates N oracle answers y_i in {0, 1} (model judgments, votes): the
fraction q = mean(y), or the majority [q > 1/2]. It is delta-robust when its output does
not change if at most delta N answers are wrong: the fraction, stated as "within delta",
always is; the majority is when its margin |q - 1/2| exceeds delta.

The protocol. The prover sends its claimed answers y~ and the output. The verifier
(1) recomputes the output from y~ (no oracle calls) and, for the majority, checks the
margin, and (2) queries the oracle on k indices drawn uniformly with replacement and
rejects on any disagreement. A prover whose claims differ from the oracle on a fraction
f of the items is accepted with probability exactly (1 - f)^k; a false statement needs
f > delta, so it is accepted with probability < (1 - delta)^k, while the verifier makes
k oracle calls instead of N.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

AGGREGATES = ("fraction", "majority")
# Reason codes: -1 accept, 0 output differs from the claimed answers, 1 margin <= delta,
# 2 a spot check disagreed.
ACCEPT, WRONG_OUTPUT, NOT_ROBUST, CAUGHT = -1, 0, 1, 2


class Claim(NamedTuple):
  answers: jax.Array  # (N,) claimed oracle answers in {0, 1}
  output: jax.Array  # the claimed fraction (float) or majority (0/1)


def aggregate(answers, kind: str):
  q = jnp.mean(answers.astype(jnp.float32))
  return q if kind == "fraction" else (q > 0.5).astype(jnp.int32)


def honest_claim(answers, kind: str) -> Claim:
  return Claim(answers, aggregate(answers, kind))


def lying_claim(answers, kind: str, num_lies: int, key) -> Claim:
  """Flips the answers on `num_lies` items drawn without replacement and reports the
  output of the flipped answers (consistent, so only spot checks can catch it)."""
  n = answers.shape[0]
  flip = jnp.zeros((n,), bool).at[jax.random.permutation(key, n)[:num_lies]].set(True)
  claimed = jnp.where(flip, 1 - answers, answers)
  return Claim(claimed, aggregate(claimed, kind))


def check(claim: Claim, truth_at: Callable, k: int, key, kind: str, delta: float):
  """The verifier. `truth_at(indices)` is the oracle (k calls).

  Returns:
    (accept, reason) with the codes above.
  """
  n = claim.answers.shape[0]
  idx = jax.random.randint(key, (k,), 0, n)
  caught = jnp.any(truth_at(idx) != claim.answers[idx])
  q = jnp.mean(claim.answers.astype(jnp.float32))
  consistent = jnp.all(aggregate(claim.answers, kind) == claim.output)
  robust = (jnp.abs(q - 0.5) > delta) if kind == "majority" else jnp.bool_(True)
  reason = jnp.where(~consistent, WRONG_OUTPUT, jnp.where(~robust, NOT_ROBUST,
                                                          jnp.where(caught, CAUGHT, ACCEPT)))
  return reason == ACCEPT, reason


def acceptance_probability(num_lies: int, n: int, k: int) -> float:
  """Exact probability that k uniform draws with replacement miss all the lies."""
  return float(((n - num_lies) / n) ** k)


def binomial_interval(successes: int, trials: int, confidence: float = 0.95):
  """Clopper-Pearson interval for a binomial proportion (via scipy's beta quantiles)."""
  from scipy import stats  # pylint: disable=import-outside-toplevel

  alpha = 1.0 - confidence
  lo = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes, trials - successes + 1)
  hi = 1.0 if successes == trials else stats.beta.ppf(1 - alpha / 2, successes + 1,
                                                       trials - successes)
  return float(lo), float(hi)


def bonferroni_z(alpha: float, cells: int) -> float:
  """The two-sided z bar that keeps the family-wise error of `cells` tests at `alpha`."""
  from scipy import stats  # pylint: disable=import-outside-toplevel

  return float(stats.norm.ppf(1 - alpha / (2 * cells)))


def check_answers(answers) -> np.ndarray:
  """The answers as a 0/1 int32 array; raises one line for other values."""
  a = np.asarray(answers)
  if a.ndim != 1 or a.size == 0 or not np.isin(a, (0, 1)).all():
    raise ValueError(f"answers must be a non-empty 1-D array of 0/1, got shape {a.shape}")
  return a.astype(np.int32)
