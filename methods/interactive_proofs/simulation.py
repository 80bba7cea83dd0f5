"""One protocol run on a random statement as a pure function of a key: vmap it over
keys and jit it, and 10^5 runs are one program (completeness and soundness rates).

Example:
  >>> F = PrimeField(97)
  >>> run = jax.jit(jax.vmap(lambda k: sumcheck_trial(F, k, 4, 3, 1, "optimal")))
  >>> rate = run(jax.random.split(key, 100_000)).mean()   # ~ 1 - (1 - 3/97)^4
"""

from typing import Optional

import jax
import jax.numpy as jnp

from methods.interactive_proofs import gkr, oracles, provers, spot_check, sumcheck
from methods.interactive_proofs.field import PrimeField


def sumcheck_trial(F: PrimeField, key, num_vars: int, degree: int, terms: int,
                   strategy: Optional[str] = None):
  """A random `ProductSum` (terms x degree tables of 2^num_vars entries), proved by the
  honest prover (strategy None) or a cheater claiming H + 1 with `strategy`.

  Returns:
    (accept, reason) of the verifier.
  """
  k_tab, k_coef, k_coins, k_lie = jax.random.split(key, 4)
  statement = sumcheck.ProductSum(F.random(k_tab, (terms, degree, 2**num_vars)),
                                  F.random(k_coef, (terms,)))
  honest = sumcheck.TableProver.create(F, statement, degree)
  prover = honest if strategy is None else provers.Cheater.create(
      F, honest, F.add(honest.claim(), 1), strategy, k_lie)
  coins = sumcheck.draw_coins(F, k_coins, num_vars)
  transcript = sumcheck.run(prover, coins)
  return sumcheck.check_rounds(F, transcript, coins, sumcheck.evaluate(F, statement, coins))


def cp_oracle(F: PrimeField, cp: oracles.CPPolynomial) -> gkr.Oracle:
  return gkr.Oracle(lambda p: oracles.cp_eval(F, cp, p), cp.num_vars, cp.degree)


def gkr_trial(F: PrimeField, key, ops, log2_inputs: int, oracle_degree: Optional[int] = None,
              oracle_rank: int = 4, cheat: bool = False, test_lines: int = 1):
  """GKR on random inputs: a table (oracle_degree None) or a random low-degree CP
  oracle. Returns (accept, reason)."""
  k_in, k_coins = jax.random.split(key)
  coins = gkr.draw_coins(F, k_coins, ops, log2_inputs)
  if oracle_degree is None:
    inputs = F.random(k_in, (2**log2_inputs,))
    transcript = gkr.prove(F, ops, coins, inputs=inputs, cheat=cheat)
    return gkr.check(F, ops, transcript, coins, inputs=inputs)
  oracle = cp_oracle(F, oracles.random_cp(F, k_in, log2_inputs, oracle_degree, oracle_rank))
  transcript = gkr.prove(F, ops, coins, oracle=oracle, cheat=cheat)
  return gkr.check(F, ops, transcript, coins, oracle=oracle, test_lines=test_lines)


def spot_trial(key, truth, kind: str, k: int, delta: float, num_lies: int = 0):
  """Spot-checks a claim about `truth` (N answers) that lies on `num_lies` items (0:
  honest). Returns (accept, reason)."""
  k_lie, k_check = jax.random.split(key)
  claim = (spot_check.honest_claim(truth, kind) if num_lies == 0 else
           spot_check.lying_claim(truth, kind, num_lies, k_lie))
  return spot_check.check(claim, lambda idx: truth[idx], k, k_check, kind, delta)


def majority_answers(key, n: int, ones_fraction: float):
  """N answers with round(ones_fraction N) ones at random positions."""
  ones = round(ones_fraction * n)
  return jnp.zeros((n,), jnp.int32).at[jax.random.permutation(key, n)[:ones]].set(1)
