"""Cheating sum-check provers: each claims a false sum and tries to survive the rounds.

A cheater holds a claim v that may be false. In a round where it lies, it sends
s = h + delta, where h is the honest round polynomial and delta(0) + delta(1) =
v - (h(0) + h(1)), so the verifier's consistency check passes; after the challenge r its
new claim is s(r), which is true exactly when delta(r) = 0. Once its claim is true it is
honest from then on (and accepted). Strategies:

- "optimal": in every round, delta = c prod_{k=1}^{d} (X - a_k) with d distinct roots
  a_k outside {0, 1}: s agrees with h at the most points a degree-d lie can, so each
  round is survived with probability exactly d / |F| and the run is accepted with
  probability 1 - (1 - d/|F|)^n <= n d / |F|, the soundness bound (met with near
  equality).
- "one_round": the optimal lie in round 1 only, honest messages afterwards: accepted
  with probability d / |F|.
- "random": in every round a delta with random values at 1..d (and delta(0) fixed by
  the sum): a lie that does not aim at agreement.
- "constant": delta = (v - h(0) - h(1)) / 2 in round 1, then honest: a constant lie has
  no roots, so it is never accepted.
"""

from typing import Any

from flax import struct
import jax
import jax.numpy as jnp

from methods.interactive_proofs import polynomials as poly
from methods.interactive_proofs.field import PrimeField

STRATEGIES = ("optimal", "one_round", "random", "constant")


def root_polynomial(F: PrimeField, degree: int):
  """Values at 0..d of q(X) = prod_{k=1}^{d} (X - (k + 1)), scaled so q(0) + q(1) = 1.

  Raises:
    ValueError: p <= d + 2, where the roots 2..d+1 would not be distinct and nonzero
      outside {0, 1}, or q(0) + q(1) = 0.
  """
  if F.p <= degree + 2:
    raise ValueError(f"F_{F.p} is too small for a degree-{degree} lie: need p > {degree + 2}")
  values = []
  for t in range(degree + 1):
    v = 1
    for k in range(1, degree + 1):
      v = v * (t - k - 1) % F.p
    values.append(v)
  scale = F.inv_int((values[0] + values[1]) % F.p)
  return jnp.asarray([v * scale % F.p for v in values], dtype=jnp.int64)


@struct.dataclass
class Cheater:
  """An honest prover (`sumcheck.TableProver` / `OracleProver`) wrapped with a lying
  strategy: a pytree like the provers it wraps, so `sumcheck.rounds` scans it.

  Make one with `Cheater.create(F, honest, claim, strategy, key)`:
    honest: the honest prover for the true statement.
    claim: the (false) value the cheater starts from.
    strategy: one of STRATEGIES.
    key: randomness of the "random" strategy.
  """
  honest: Any
  held: jax.Array  # the claim the cheater must now defend
  key: jax.Array
  round: jax.Array
  F: PrimeField = struct.field(pytree_node=False)
  strategy: str = struct.field(pytree_node=False)

  @classmethod
  def create(cls, F: PrimeField, honest, claim, strategy: str, key=None) -> "Cheater":
    """Raises one line for an unknown strategy or a field too small for the lie."""
    if strategy not in STRATEGIES:
      raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    root_polynomial(F, honest.degree)
    key = jax.random.PRNGKey(0) if key is None else key
    return cls(honest, jnp.asarray(claim, jnp.int64), key, jnp.zeros((), jnp.int32), F,
               strategy)

  @property
  def degree(self) -> int:
    return self.honest.degree

  @property
  def num_vars(self) -> int:
    return self.honest.num_vars

  def claim(self):
    return self.held

  def message(self):
    """s = h + delta with delta(0) + delta(1) = held - (h(0) + h(1)) (see above)."""
    F, h = self.F, self.honest.message()
    gap = F.sub(self.held, F.add(h[0], h[1]))  # 0 once the held claim is true
    if self.strategy in ("optimal", "one_round"):
      delta = F.mul(gap, root_polynomial(F, self.degree))
    elif self.strategy == "constant":
      delta = jnp.full_like(h, F.mul(gap, F.inv_int(2)))
    else:
      upper = F.random(jax.random.split(self.key)[1], (self.degree,))
      delta = jnp.where(gap == 0, 0, jnp.concatenate([F.sub(gap, upper[:1]), upper]))
    lies_now = self.strategy in ("optimal", "random") or self.round == 0
    return jnp.where(lies_now, F.add(h, delta), h)

  def bind(self, sent, r) -> "Cheater":
    key = jax.random.split(self.key)[0] if self.strategy == "random" else self.key
    return self.replace(honest=self.honest.bind(sent, r),
                        held=poly.lagrange_eval(self.F, sent, r), key=key,
                        round=self.round + 1)

  def compact(self, rounds_left: int) -> "Cheater":
    return self.replace(honest=self.honest.compact(rounds_left))
