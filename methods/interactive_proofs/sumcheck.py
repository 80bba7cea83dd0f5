"""The sum-check protocol (Lund, Fortnow, Karloff, Nisan 1992), as pure JAX functions.

The prover claims H = sum_{x in {0,1}^n} g(x) for g of degree <= d in each variable. In
round i it sends s_i(X) = sum_{x_{i+1..n}} g(r_1, .., r_{i-1}, X, x_{i+1..n}) as its values
at 0..d; the verifier checks s_1(0) + s_1(1) = H and s_i(0) + s_i(1) = s_{i-1}(r_{i-1}),
draws r_i uniformly from F, and at the end checks s_n(r_n) = g(r_1..r_n) with one
evaluation of g (oracle access). The verifier works O(n d); a false claim is accepted
with probability <= n d / |F| (Thaler, "Proofs, Arguments, and Zero-Knowledge", 4.1).

Statements. `ProductSum`: g = sum_t c_t prod_j f~_{t,j}, each f~ the multilinear
extension of a table of 2^n values, so the honest prover (`TableProver`) folds tables
and works O(T d^2 2^n) in all: linear in the table size. A black-box polynomial (any
function of field points of known degree, e.g. a low-degree oracle) gets
`OracleProver`, which evaluates g at (d + 1) 2^{n-i} points in round i.

The verifier's coins are drawn from its own key before the run; the prover sees r_i
only after sending s_i (the Python loop over rounds in `run`), which is equivalent to
drawing them round by round. Everything jit- and vmap-able: thousands of protocol
runs are one batched program.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from methods.interactive_proofs import polynomials as poly
from methods.interactive_proofs.field import PrimeField

# Verifier outcomes (reason codes in batched runs; `verify` names them).
ACCEPT = -1


class ProductSum(NamedTuple):
  """g(x) = sum_t coeffs[t] prod_j f~_{t,j}(x): tables (T, d, 2^n), coeffs (T,)."""
  tables: jax.Array
  coeffs: jax.Array

  @property
  def num_vars(self) -> int:
    return int(np.log2(self.tables.shape[-1]))

  @property
  def degree(self) -> int:
    return self.tables.shape[1]


class Transcript(NamedTuple):
  """What the verifier saw: the claim, the round messages (n, d+1), its coins (n,)."""
  claim: jax.Array
  messages: jax.Array
  challenges: jax.Array


def check_statement(statement: ProductSum, degree: int):
  """Raises a one-line ValueError unless the tables have a power-of-two length and a
  degree within the protocol's `degree`."""
  tables = statement.tables
  if tables.ndim != 3:
    raise ValueError(f"tables must be (terms, degree, 2^n), got shape {tables.shape}")
  size = tables.shape[-1]
  if size < 1 or size & (size - 1):
    raise ValueError(f"tables need 2^n entries, got {size}")
  if statement.degree > degree:
    raise ValueError(f"the polynomial has degree {statement.degree} in each variable; "
                     f"the protocol was set up for degree <= {degree}")
  if statement.coeffs.shape != tables.shape[:1]:
    raise ValueError(f"coeffs must be ({tables.shape[0]},), got {statement.coeffs.shape}")


def total(F: PrimeField, statement: ProductSum):
  """The true sum H = sum_x g(x)."""
  products = F.prod(statement.tables, axis=1)  # (T, 2^n)
  return F.dot(F.sum(products, axis=-1), statement.coeffs, axis=0)


def evaluate(F: PrimeField, statement: ProductSum, point):
  """g(point) = sum_t c_t prod_j f~_{t,j}(point): the verifier's one oracle evaluation."""
  values = poly.mle_eval(F, statement.tables, point)  # (T, d)
  return F.dot(F.prod(values, axis=1), statement.coeffs, axis=0)


class TableProver:
  """The honest linear-time prover for a `ProductSum` (mutable while tracing a run)."""

  def __init__(self, F: PrimeField, statement: ProductSum, degree: int):
    self.F, self.tables, self.coeffs, self.degree = F, statement.tables, statement.coeffs, degree

  def claim(self):
    return total(self.F, ProductSum(self.tables, self.coeffs))

  def message(self):
    """s_i at t = 0..d: fold the next variable to t, multiply, sum over the rest."""
    F, half = self.F, self.tables.shape[-1] // 2
    lo, hi = self.tables[..., :half], self.tables[..., half:]
    ts = jnp.arange(self.degree + 1, dtype=lo.dtype)[:, None, None, None]
    folded = F.add(lo[None], F.mul(ts, F.sub(hi, lo)[None]))  # (d+1, T, d', m)
    per_term = F.sum(F.prod(folded, axis=2), axis=-1)  # (d+1, T)
    return F.dot(per_term, self.coeffs[None], axis=-1)

  def bind(self, r):
    self.tables = poly.fold(self.F, self.tables, r)


class OracleProver:
  """The honest prover for a black-box g: F^n -> F of degree <= d per variable.

  `fn` maps points (P, n) to values (P,). Round i costs (d + 1) 2^{n-i} evaluations,
  about (d + 1) 2^n over the run: a constant factor of evaluating g on the cube.
  """

  def __init__(self, F: PrimeField, fn: Callable, num_vars: int, degree: int, claim=None):
    self.F, self.fn, self.n, self.degree = F, fn, num_vars, degree
    self.prefix = []
    self._claim = claim

  def claim(self):
    if self._claim is None:
      self._claim = self.F.sum(self.fn(cube(self.n)))
    return self._claim

  def message(self):
    rest = cube(self.n - len(self.prefix) - 1)  # (m, n - i - 1)
    m, d = rest.shape[0], self.degree
    ts = jnp.broadcast_to(jnp.arange(d + 1, dtype=jnp.int64)[:, None, None], (d + 1, m, 1))
    parts = [jnp.broadcast_to(jnp.stack(self.prefix), (d + 1, m, len(self.prefix)))
             ] if self.prefix else []
    points = jnp.concatenate(parts + [ts, jnp.broadcast_to(rest, (d + 1,) + rest.shape)],
                             axis=-1)
    values = self.fn(points.reshape(-1, self.n)).reshape(d + 1, m)
    return self.F.sum(values, axis=-1)

  def bind(self, r):
    self.prefix.append(r)


def cube(n: int):
  """The 2^n points of {0,1}^n as (2^n, n) int64 rows, big-endian."""
  j = np.arange(2**n)[:, None]
  return jnp.asarray((j >> np.arange(n - 1, -1, -1)) & 1, dtype=jnp.int64)


def run(prover, challenges, claim=None) -> Transcript:
  """Runs the rounds: message i is computed before the prover receives challenges[i]."""
  claim = prover.claim() if claim is None else claim
  messages = []
  for i in range(challenges.shape[0]):
    messages.append(prover.message())
    prover.bind(challenges[i])
  d1 = prover.degree + 1
  stacked = jnp.stack(messages) if messages else jnp.zeros((0, d1), jnp.int64)
  return Transcript(claim, stacked, challenges)


def check_rounds(F: PrimeField, transcript: Transcript, final_value):
  """The verifier's checks on a well-shaped transcript (jit/vmap-able).

  Returns:
    (accept, reason): reason is ACCEPT (-1), the first round i whose s_i(0) + s_i(1)
    disagrees with the running claim, or n when s_n(r_n) != g(r) (the final check).
  """
  claim, messages, challenges = transcript
  n = messages.shape[0]
  if n == 0:
    ok = claim == final_value
    return ok, jnp.where(ok, ACCEPT, 0)
  running = poly.lagrange_eval(F, messages, challenges)  # s_i(r_i), (n,)
  expected = jnp.concatenate([jnp.reshape(claim, (1,)), running[:-1]])
  sums = F.add(messages[:, 0], messages[:, 1])
  checks = jnp.concatenate([sums == expected, jnp.reshape(running[-1] == final_value, (1,))])
  accept = jnp.all(checks)
  return accept, jnp.where(accept, ACCEPT, jnp.argmin(checks))


# One compiled program per field and shape, instead of dispatching its ops one by one.
_check_rounds_jit = jax.jit(check_rounds, static_argnums=0)


def verify(F: PrimeField, transcript, num_vars: int, degree: int,
           final_value_fn: Callable) -> tuple:
  """The verifier on any transcript handed to it: never raises on malformed input.

  Args:
    transcript: (claim, messages, challenges), whatever their shapes.
    final_value_fn: challenges -> g(challenges), the verifier's oracle evaluation.
  Returns:
    (accepted, reason): a bool and a one-line reason.
  """
  try:
    claim, messages, challenges = (np.asarray(x) for x in transcript)
  except (TypeError, ValueError) as e:
    return False, f"rejected: the transcript is not (claim, messages, challenges): {e}"
  want = (num_vars, degree + 1)
  if messages.shape != want:
    return False, (f"rejected: messages have shape {messages.shape}, expected {want} "
                   f"({num_vars} rounds of a degree-{degree} polynomial's values)")
  if challenges.shape != (num_vars,) or claim.shape != ():
    return False, (f"rejected: challenges {challenges.shape} / claim {claim.shape}, "
                   f"expected ({num_vars},) / ()")
  for name, x in (("claim", claim), ("messages", messages), ("challenges", challenges)):
    if x.dtype.kind not in "iu" or np.any((x < 0) | (x >= F.p)):
      return False, f"rejected: {name} are not elements of F_{F.p}"
  t = Transcript(*(jnp.asarray(x, jnp.int64) for x in (claim, messages, challenges)))
  accept, reason = _check_rounds_jit(F, t, final_value_fn(t.challenges))
  if bool(accept):
    return True, "accepted"
  reason = int(reason)
  if reason == num_vars:
    return False, "rejected: the last round's polynomial disagrees with g at the challenge"
  return False, f"rejected: round {reason + 1}'s s(0) + s(1) differs from the running claim"
