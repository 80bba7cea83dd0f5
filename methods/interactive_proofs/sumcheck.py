"""The sum-check protocol (Lund, Fortnow, Karloff, Nisan 1992), as pure JAX functions.

The prover claims H = sum_{x in {0,1}^n} g(x) for g of degree <= d in each variable. In
round i it sends s_i(X) = sum_{x_{i+1..n}} g(r_1, .., r_{i-1}, X, x_{i+1..n}) as its values
at 0..d; the verifier checks s_1(0) + s_1(1) = H and s_i(0) + s_i(1) = s_{i-1}(r_{i-1}),
draws r_i uniformly from F, and at the end checks s_n(r_n) = g(r_1..r_n) with one
evaluation of g (oracle access). The verifier works O(n d); a false claim is accepted
with probability <= n d / |F| (Thaler, "Proofs, Arguments, and Zero-Knowledge", 4.1),
because the verifier's r_i is independent of s_i: a prover that chose r_i could pick a
root of its lie s_i - h_i and survive every round.

The verifier's coins. `draw_coins(F, key, n)` draws r_1..r_n from the verifier's own key
(as `gkr.draw_coins` does for GKR). `run` hands the prover r_i only after it has sent
s_i, which is equivalent to drawing them round by round; `verify` and `check_rounds`
take the coins and reject a transcript whose challenges are not them. The
non-interactive variant (Fiat and Shamir 1986; Thaler 5.2), `prove_fiat_shamir` /
`verify_fiat_shamir`, derives r_i from SHA-256 of the transcript so far.

Statements. `ProductSum`: g = sum_t c_t prod_j f~_{t,j}, each f~ the multilinear
extension of a table of 2^n values, so the honest prover (`TableProver`) folds tables
and works O(T d^2 2^n) in all: linear in the table size. A black-box polynomial (any
function of field points of known degree, e.g. a low-degree oracle) gets
`OracleProver`, which evaluates g at (d + 1) 2^{n-i} points in round i.

Provers are immutable pytrees (flax.struct): `message()` is s_i, a function of
r_1..r_{i-1} only, and `bind(sent, r)` the state after the challenge. `rounds` runs
them over `segments(n)`: rounds starting at 0, 1, 2, 4, 8, ..., each segment one
`lax.scan` (a single round is called directly) with the prover's arrays cut to the
segment's first round (`compact`), and the segment whose tables hold <= 2^6 entries
running to the end. At most floor(log2 n) + 2 round bodies are compiled for any n,
for at most 1.15x the work and oracle calls of exact per-round shapes: 2^n (1 + 1/2 +
2/4 + 4/16 + 8/256 + ...) = 2.28 2^n table entries read where 2 2^n are needed, plus
<= n 2^6 in the last segment. Everything jit- and vmap-able: thousands of protocol
runs are one batched program.
"""

import hashlib
from typing import Callable, NamedTuple, Optional

from flax import struct
import jax
import jax.numpy as jnp
import numpy as np

from methods.interactive_proofs import polynomials as poly
from methods.interactive_proofs.field import PrimeField

# Verifier outcomes (reason codes in batched runs; `verify` names them).
ACCEPT = -1
FOREIGN_COINS = -2  # the transcript's challenges are not the verifier's coins
SMALL_LOG2 = 6  # `segments`: a last segment of <= 2^6 entries costs <= n 2^6 reads
FIAT_SHAMIR_DOMAIN = b"methods.interactive_proofs.sumcheck/fiat-shamir/v1"


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
  """Raises a one-line ValueError unless the tables have a power-of-two length, at
  least one table per term and a degree within the protocol's `degree`."""
  tables = statement.tables
  if tables.ndim != 3:
    raise ValueError(f"tables must be (terms, degree, 2^n), got shape {tables.shape}")
  size = tables.shape[-1]
  if size < 1 or size & (size - 1):
    raise ValueError(f"tables need 2^n entries, got {size}")
  if statement.degree > degree:
    raise ValueError(f"the polynomial has degree {statement.degree} in each variable; "
                     f"the protocol was set up for degree <= {degree}")
  if statement.degree < 1:
    raise ValueError(f"each term needs at least one table, got shape {tables.shape}")
  if statement.coeffs.shape != tables.shape[:1]:
    raise ValueError(f"coeffs must be ({tables.shape[0]},), got {statement.coeffs.shape}")


def check_degree(F: PrimeField, degree: int):
  """Raises one line unless 0 <= degree < p: a round polynomial travels as its values
  at 0..d, which are d + 1 distinct points of F_p only then."""
  if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 0:
    raise ValueError(f"the degree must be an integer >= 0, got {degree!r}")
  if degree >= F.p:
    raise ValueError(f"degree {degree} needs {degree + 1} distinct points 0..{degree}, "
                     f"but F_{F.p} has {F.p}: use degree < p")


def total(F: PrimeField, statement: ProductSum):
  """The true sum H = sum_x g(x)."""
  products = F.prod(statement.tables, axis=1)  # (T, 2^n)
  return F.dot(F.sum(products, axis=-1), statement.coeffs, axis=0)


def evaluate(F: PrimeField, statement: ProductSum, point):
  """g(point) = sum_t c_t prod_j f~_{t,j}(point): the verifier's one oracle evaluation."""
  values = poly.mle_eval(F, statement.tables, point)  # (T, d)
  return F.dot(F.prod(values, axis=1), statement.coeffs, axis=0)


@struct.dataclass
class TableProver:
  """The honest linear-time prover for a `ProductSum` (Thaler, chapter 4; Cormode,
  Mitzenmacher and Thaler 2012):

    s_i(t) = sum_x sum_k c_k prod_j (f_{k,j}(0, x) + t (f_{k,j}(1, x) - f_{k,j}(0, x)))

  over the tables bound so far, and binding r folds each table to
  f(r, x) = f(0, x) + r (f(1, x) - f(0, x)).

  Fixed shapes. A bound table keeps its buffer of M entries: folding pairs (j, j + M/2),
  the M/2 results go to the even entries and zeros to the odd ones, so after i rounds
  the live entries sit at multiples of 2^i, big-endian in x_{i+1..n}, and the pairs of
  the next variable are again (j, j + M/2). Zeros add nothing to s_i (every product
  has a table factor). `compact` keeps the live entries between `rounds`' scans.
  Make one with `TableProver.create(F, statement, degree)`.
  """
  tables: jax.Array  # (T, d', M): live entries every 2^(rounds since compact), zeros between
  coeffs: jax.Array  # (T,)
  F: PrimeField = struct.field(pytree_node=False)
  degree: int = struct.field(pytree_node=False)
  num_vars: int = struct.field(pytree_node=False)

  @classmethod
  def create(cls, F: PrimeField, statement: ProductSum, degree: int) -> "TableProver":
    """Raises one line (before any work) for a malformed statement, a statement of
    degree above `degree`, or degree >= p."""
    check_degree(F, degree)
    check_statement(statement, degree)
    return cls(statement.tables, statement.coeffs, F, degree, statement.num_vars)

  def claim(self):
    """H, the sum of g over the cube (before round 1)."""
    F = self.F
    return F.dot(F.sum(F.prod(self.tables, axis=1), axis=-1), self.coeffs, axis=0)

  def message(self):
    """s_i at t = 0..d: fold the next variable to t, multiply, sum over the rest."""
    F, half = self.F, self.tables.shape[-1] // 2
    lo, hi = self.tables[..., :half], self.tables[..., half:]
    ts = jnp.arange(self.degree + 1, dtype=lo.dtype)[:, None, None, None]
    folded = F.add(lo[None], F.mul(ts, F.sub(hi, lo)[None]))  # (d+1, T, d', M/2)
    per_term = F.sum(F.prod(folded, axis=2), axis=-1)  # (d+1, T)
    return F.dot(per_term, self.coeffs[None], axis=-1)

  def bind(self, sent, r) -> "TableProver":
    del sent  # the honest state depends on r alone
    folded = poly.fold(self.F, self.tables, r)
    spread = jnp.stack([folded, jnp.zeros_like(folded)], axis=-1)
    return self.replace(tables=spread.reshape(self.tables.shape))

  def compact(self, rounds_left: int) -> "TableProver":
    """Keeps the 2^rounds_left live entries of each table (at a segment's start)."""
    stride = self.tables.shape[-1] // 2**rounds_left
    return self.replace(tables=self.tables[..., ::stride])


@struct.dataclass
class OracleProver:
  """The honest prover for a black-box g: F^n -> F of degree <= d per variable.

  `fn` maps points (P, n) to values (P,). Round i evaluates g at the (d + 1) 2^{n-i-1}
  points (r_1..r_{i-1}, t, x) for t = 0..d and x in {0,1}^{n-i-1}, about (d + 1) 2^n
  over the run: a constant factor of evaluating g on the cube. Within a segment of
  `rounds` the points are padded to the segment's first round (`width` free bits) and
  the padding's values masked out. Make one with `OracleProver.create`.
  """
  prefix: jax.Array  # (n,) r_1..r_{i-1}, then zeros
  round: jax.Array  # i - 1, the rounds bound so far
  claimed: Optional[jax.Array]
  F: PrimeField = struct.field(pytree_node=False)
  fn: Callable = struct.field(pytree_node=False)
  num_vars: int = struct.field(pytree_node=False)
  degree: int = struct.field(pytree_node=False)
  width: int = struct.field(pytree_node=False)

  @classmethod
  def create(cls, F: PrimeField, fn: Callable, num_vars: int, degree: int,
             claim=None) -> "OracleProver":
    """`claim`: H if known (else `claim()` sums g over the cube). Raises one line for
    degree >= p."""
    check_degree(F, degree)
    return cls(jnp.zeros((num_vars,), jnp.int64), jnp.zeros((), jnp.int32), claim, F, fn,
               num_vars, degree, max(num_vars - 1, 0))

  def claim(self):
    if self.claimed is None:
      return self.F.sum(self.fn(cube(self.num_vars)))
    return self.claimed

  def message(self):
    """s_i at t = 0..d: g summed over the points (r_1..r_{i-1}, t, x), padding masked."""
    n, d, i = self.num_vars, self.degree, self.round
    rows = jnp.arange(2**self.width, dtype=jnp.int64)[:, None]
    col = jnp.arange(n)[None, :]
    free = jnp.where(col < i, self.prefix[None], (rows >> (n - 1 - col)) & 1)
    ts = jnp.arange(d + 1, dtype=jnp.int64)[:, None, None]
    points = jnp.where(col[None] == i, ts, free[None])  # (d + 1, 2^width, n)
    values = self.fn(points.reshape(-1, n)).reshape(d + 1, -1)
    live = rows[:, 0] < jnp.left_shift(jnp.int64(1), n - 1 - i)
    return self.F.sum(jnp.where(live[None], values, 0), axis=-1)

  def bind(self, sent, r) -> "OracleProver":
    del sent  # the honest state depends on r alone
    return self.replace(prefix=self.prefix.at[self.round].set(r), round=self.round + 1)

  def compact(self, rounds_left: int) -> "OracleProver":
    """Pads the points of the next rounds to 2^(rounds_left - 1) free bits."""
    return self.replace(width=rounds_left - 1)


def oracle_evaluations(num_vars: int, degree: int) -> int:
  """Points at which `OracleProver` evaluates g over a run of `rounds` (padding
  included): (d + 1) 2^{n - 1 - start} per round of each segment."""
  return sum((stop - start) * (degree + 1) * 2**(num_vars - 1 - start)
             for start, stop in segments(num_vars))


def cube(n: int):
  """The 2^n points of {0,1}^n as (2^n, n) int64 rows, big-endian."""
  j = np.arange(2**n)[:, None]
  return jnp.asarray((j >> np.arange(n - 1, -1, -1)) & 1, dtype=jnp.int64)


def segments(n: int) -> list:
  """The rounds [start, stop) that `rounds` runs with one shape: starts 0, 1, 2, 4, 8,
  ..., and the segment whose tables hold <= 2^SMALL_LOG2 entries runs to the end."""
  starts = [0]
  while n - starts[-1] > SMALL_LOG2 and max(1, 2 * starts[-1]) < n:
    starts.append(max(1, 2 * starts[-1]))
  return [(a, b) for a, b in zip(starts, starts[1:] + [n]) if a < n]


def _round(prover, r):
  sent = prover.message()  # computed before the prover sees r
  return prover.bind(sent, r), sent


def rounds(prover, challenges):
  """The n rounds of `prover` (a pytree with message / bind / compact) on the
  verifier's challenges (n,): message i is computed before the prover receives
  challenges[i]. A `lax.scan` per segment, so compiling does not grow with n.

  Returns:
    (the prover after the last round, messages (n, d + 1)).
  """
  n = challenges.shape[0]
  if n != prover.num_vars:
    raise ValueError(f"{n} challenges for a {prover.num_vars}-variable sum: one per round")
  parts = [jnp.zeros((0, prover.degree + 1), jnp.int64)]
  for start, stop in segments(n):
    prover = prover.compact(n - start)
    if stop - start == 1:  # one round: no loop to pay for
      prover, part = _round(prover, challenges[start])
      part = part[None]
    else:
      prover, part = jax.lax.scan(_round, prover, challenges[start:stop])
    parts.append(part)
  return prover, jnp.concatenate(parts)


def run(prover, challenges, claim=None) -> Transcript:
  """The transcript of `rounds` on the verifier's challenges (`draw_coins`)."""
  claim = prover.claim() if claim is None else claim
  return Transcript(claim, rounds(prover, challenges)[1], challenges)


def draw_coins(F: PrimeField, key, num_vars: int):
  """The verifier's challenges r_1..r_n (n,), uniform on F, from its own key."""
  return F.random(key, (num_vars,))


def check_rounds(F: PrimeField, transcript: Transcript, coins, final_value):
  """The verifier's checks on a well-shaped transcript (jit/vmap-able).

  Args:
    coins: the verifier's challenges (n,); final_value: g(coins).
  Returns:
    (accept, reason): reason is ACCEPT (-1), FOREIGN_COINS (-2) when the transcript's
    challenges are not `coins`, the first round i whose s_i(0) + s_i(1) disagrees with
    the running claim, or n when s_n(r_n) != g(r) (the final check).
  """
  claim, messages, challenges = transcript
  own = jnp.all(challenges == coins)
  if messages.shape[0] == 0:
    ok = claim == final_value
    return ok & own, jnp.where(own, jnp.where(ok, ACCEPT, 0), FOREIGN_COINS)
  running = poly.lagrange_eval(F, messages, coins)  # s_i(r_i), (n,)
  expected = jnp.concatenate([jnp.reshape(claim, (1,)), running[:-1]])
  sums = F.add(messages[:, 0], messages[:, 1])
  checks = jnp.concatenate([sums == expected, jnp.reshape(running[-1] == final_value, (1,))])
  accept = own & jnp.all(checks)
  reason = jnp.where(jnp.all(checks), ACCEPT, jnp.argmin(checks))
  return accept, jnp.where(own, reason, FOREIGN_COINS)


# One compiled program per field and shape, instead of dispatching its ops one by one.
_check_rounds_jit = jax.jit(check_rounds, static_argnums=0)


def _in_field(F: PrimeField, x) -> bool:
  return x.dtype.kind in "iu" and not np.any((x < 0) | (x >= F.p))


def _problem(F: PrimeField, transcript, coins, degree) -> Optional[str]:
  """A one-line reason why `transcript` cannot be checked against `coins`, or None."""
  try:
    check_degree(F, degree)
  except ValueError as e:
    return f"the verifier cannot check it: {e}"
  coins = np.asarray(coins)
  if coins.ndim != 1 or not _in_field(F, coins):
    return (f"the verifier's coins must be (n,) elements of F_{F.p}, got shape "
            f"{coins.shape} of dtype {coins.dtype}")
  try:
    claim, messages, challenges = (np.asarray(x) for x in transcript)
  except (TypeError, ValueError) as e:
    return f"the transcript is not (claim, messages, challenges): {e}"
  want = (coins.shape[0], degree + 1)
  if messages.shape != want:
    return (f"messages have shape {messages.shape}, expected {want} "
            f"({want[0]} rounds of a degree-{degree} polynomial's values)")
  if challenges.shape != coins.shape or claim.shape != ():
    return (f"challenges {challenges.shape} / claim {claim.shape}, "
            f"expected {coins.shape} / ()")
  for name, x in (("claim", claim), ("messages", messages), ("challenges", challenges)):
    if not _in_field(F, x):
      return f"{name} are not elements of F_{F.p}"
  foreign = np.flatnonzero(challenges != coins)
  if foreign.size:
    return (f"the transcript's challenges are not the verifier's coins (round "
            f"{foreign[0] + 1} has {challenges[foreign[0]]}, the verifier drew "
            f"{coins[foreign[0]]})")
  return None


def verify(F: PrimeField, transcript, coins, degree: int, final_value_fn: Callable) -> tuple:
  """The verifier on any transcript handed to it: never raises.

  Args:
    transcript: (claim, messages, challenges), whatever their shapes.
    coins: the verifier's own challenges (n,) from its key (`draw_coins`), the ones
      `run` handed the prover; a transcript with other challenges is rejected.
    degree: the protocol's degree d (0 <= d < p, else every transcript is rejected).
    final_value_fn: coins -> g(coins), the verifier's oracle evaluation.
  Returns:
    (accepted, reason): a bool and a one-line reason.
  """
  problem = _problem(F, transcript, coins, degree)
  if problem:
    return False, f"rejected: {problem}"
  t = Transcript(*(jnp.asarray(x, jnp.int64) for x in transcript))
  coins = jnp.asarray(coins, jnp.int64)
  accept, reason = _check_rounds_jit(F, t, coins, final_value_fn(coins))
  if bool(accept):
    return True, "accepted"
  reason = int(reason)
  if reason == coins.shape[0]:
    return False, "rejected: the last round's polynomial disagrees with g at the challenge"
  return False, f"rejected: round {reason + 1}'s s(0) + s(1) differs from the running claim"


def _words(values) -> bytes:
  """Field elements as canonical 8-byte big-endian words."""
  return np.asarray(values, dtype=np.int64).reshape(-1).astype(">i8").tobytes()


def fiat_shamir_start(F: PrimeField, num_vars: int, degree: int, claim,
                      context: bytes = b"") -> bytes:
  """H_0 = SHA-256(domain, p, n, d, len(context), context, claim): binds the field, the
  shape, the statement (`context`, e.g. its tables' bytes) and the claim."""
  head = _words([F.p, num_vars, degree, len(context)])
  return hashlib.sha256(FIAT_SHAMIR_DOMAIN + head + bytes(context) + _words([claim])).digest()


def fiat_shamir_next(F: PrimeField, digest: bytes, message) -> tuple:
  """(H_i, r_i): H_i = SHA-256(H_{i-1}, s_i), r_i = H_i mod p (a 256-bit integer
  reduced mod p < 2^31: within 2^-225 of uniform)."""
  digest = hashlib.sha256(digest + _words(message)).digest()
  return digest, int.from_bytes(digest, "big") % F.p


def fiat_shamir_coins(F: PrimeField, claim, messages, context: bytes = b""):
  """The challenges r_1..r_n (n,) that the transcript so far hashes to, round by round."""
  messages = np.asarray(messages)
  digest = fiat_shamir_start(F, messages.shape[0], messages.shape[1] - 1, claim, context)
  coins = []
  for message in messages:
    digest, r = fiat_shamir_next(F, digest, message)
    coins.append(r)
  return np.asarray(coins, dtype=np.int64)


_message_jit = jax.jit(lambda prover: prover.message())
_bind_jit = jax.jit(lambda prover, sent, r: prover.bind(sent, r))


def prove_fiat_shamir(prover, context: bytes = b"", claim=None) -> Transcript:
  """The non-interactive prover: r_i = `fiat_shamir_next` of s_i, hashed on the host
  after s_i is computed (one jitted message and bind per round, a program per
  segment). A prover that wants a particular r_i must find an s_i hashing to it: about
  p / d hash evaluations per round survived.

  Args:
    prover: an honest or cheating prover (`TableProver`, `OracleProver`, `Cheater`).
    context: bytes naming the statement, hashed into H_0 (`fiat_shamir_start`).
  """
  claim = prover.claim() if claim is None else claim
  n = prover.num_vars
  digest = fiat_shamir_start(prover.F, n, prover.degree, claim, context)
  messages, coins = [jnp.zeros((0, prover.degree + 1), jnp.int64)], []
  for start, stop in segments(n):
    prover = prover.compact(n - start)
    for _ in range(start, stop):
      sent = _message_jit(prover)
      digest, r = fiat_shamir_next(prover.F, digest, sent)
      prover = _bind_jit(prover, sent, jnp.int64(r))
      messages.append(sent[None])
      coins.append(r)
  return Transcript(jnp.asarray(claim, jnp.int64), jnp.concatenate(messages),
                    jnp.asarray(coins, jnp.int64).reshape(n))


def verify_fiat_shamir(F: PrimeField, transcript, num_vars: int, degree: int,
                       final_value_fn: Callable, context: bytes = b"") -> tuple:
  """The non-interactive verifier: its coins are the transcript's own hashes
  (`fiat_shamir_coins`), so a transcript whose challenges are anything else is
  rejected. Never raises; returns (accepted, reason) as `verify`."""
  if isinstance(num_vars, bool) or not isinstance(num_vars, (int, np.integer)) or num_vars < 0:
    return False, f"rejected: num_vars must be an integer >= 0, got {num_vars!r}"
  if not isinstance(context, bytes):
    return False, f"rejected: the context must be bytes, got {type(context).__name__}"
  hashable = False
  try:
    check_degree(F, degree)
    claim, messages, _ = (np.asarray(x) for x in transcript)
    hashable = (claim.shape == () and messages.shape == (num_vars, degree + 1)
                and _in_field(F, claim) and _in_field(F, messages))
  except (TypeError, ValueError):
    pass  # `verify` names what is wrong
  coins = (fiat_shamir_coins(F, int(claim), messages, context) if hashable
           else np.zeros((num_vars,), np.int64))  # never compared: `verify` rejects first
  return verify(F, transcript, coins, degree, final_value_fn)
