"""Unit tests of methods/interactive_proofs against Python integers and brute force."""

import functools
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods.interactive_proofs import gkr, judges, oracles, polynomials as poly
from methods.interactive_proofs import provers, simulation, spot_check, sumcheck
from methods.interactive_proofs.field import PrimeField, is_prime

P = 2**31 - 1


@pytest.fixture(autouse=True)
def _x64(x64):
  yield


# ---- the field -------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(a=st.integers(0, P - 1), b=st.integers(0, P - 1),
       p=st.sampled_from([2, 3, 97, 65521, P]))
def test_field_ops_match_python_integers(a, b, p):
  F = PrimeField(p)
  a, b = a % p, b % p
  x, y = F.element(a), F.element(b)
  assert int(F.add(x, y)) == (a + b) % p
  assert int(F.sub(x, y)) == (a - b) % p
  assert int(F.neg(x)) == (-a) % p
  assert int(F.mul(x, y)) == a * b % p
  assert int(F.pow(x, 37)) == pow(a, 37, p)
  if a:
    assert int(F.inv(x)) == pow(a, -1, p)
    assert int(F.mul(F.inv(x), x)) == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, P - 1), min_size=3, max_size=3))
def test_field_axioms(values):
  F = PrimeField(P)
  a, b, c = (F.element(v) for v in values)
  assert F.mul(a, F.add(b, c)) == F.add(F.mul(a, b), F.mul(a, c))
  assert F.mul(F.mul(a, b), c) == F.mul(a, F.mul(b, c))
  assert F.add(a, F.neg(a)) == 0 and F.mul(a, 1) == a


def test_reductions_match_python_integers():
  F = PrimeField(P)
  rng = np.random.default_rng(0)
  a, b = rng.integers(0, P, 1000), rng.integers(0, P, 1000)
  assert int(F.sum(F.element(a))) == sum(int(v) for v in a) % P
  assert int(F.dot(F.element(a), F.element(b))) == sum(int(u) * int(v) for u, v in zip(a, b)) % P
  prod = 1
  for v in a[:37]:
    prod = prod * int(v) % P
  assert int(F.prod(F.element(a[:37]))) == prod
  assert int(F.element(-5)) == P - 5 and int(F.element(3 * P + 2)) == 2


@pytest.mark.parametrize("p, match", [(91, "not prime"), (2**31 + 11, "too large"),
                                      (1, "too large"), (7.0, "integer"),
                                      (True, "integer")])
def test_bad_primes_are_one_line_errors(p, match):
  with pytest.raises(ValueError, match=match):
    PrimeField(p)


def test_is_prime_on_the_field_sizes():
  assert is_prime(P) and not is_prime(2**31 - 3)


def test_field_needs_x64():
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match="x64"):
      PrimeField(97).element(3)


@pytest.mark.parametrize("p", [2, 3, 97, P])
def test_zero_has_inverse_zero_in_every_field(p):
  # F_2's Fermat exponent p - 2 is 0, and 0^0 = 1 would make 0 its own "inverse" 1.
  F = PrimeField(p)
  assert int(F.inv(F.element(0))) == 0 and int(F.inv(F.element(1))) == 1
  np.testing.assert_array_equal(F.mul(F.inv(F.element(np.arange(1, min(p, 50)))),
                                      F.element(np.arange(1, min(p, 50)))), 1)


@pytest.mark.parametrize("value, named", [(2.5, "2.5"), (2.0, "2.0"), (True, "True"),
                                          ([1, 2.5], "2.5"), (np.asarray([0.5]), "0.5"),
                                          (jnp.asarray([1.5]), "float")])
def test_non_integers_are_one_line_errors(value, named):
  with pytest.raises(ValueError, match=f"elements are integers, got .*{named}") as e:
    PrimeField(97).element(value)
  assert "\n" not in str(e.value)


def test_integers_of_every_kind_are_elements():
  F = PrimeField(97)
  assert int(F.element(2**100)) == 2**100 % 97 and int(F.element(-1)) == 96
  for x in (np.asarray([-1, 100], np.int8), np.asarray([2**64 - 1], np.uint64),
            jnp.asarray([-1, 200], jnp.int32), [2**70, -3]):
    want = [int(v) % 97 for v in np.asarray(x, dtype=object).reshape(-1)]
    assert [int(v) for v in F.element(x).reshape(-1)] == want


# Composites that pass Miller-Rabin to every base up to the one named (OEIS A014233):
# a test that tried fewer bases would call them prime.
STRONG_PSEUDOPRIMES = {7: (3215031751, 151), 11: (2152302898747, 6763),
                       13: (3474749660383, 1303), 23: (3825123056546413051, 149491),
                       37: (318665857834031151167461, 399165290221)}


def _passes_miller_rabin(n: int, base: int) -> bool:
  d, s = n - 1, 0
  while d % 2 == 0:
    d, s = d // 2, s + 1
  x = pow(base, d, n)
  return x in (1, n - 1) or any(pow(x, 2**j, n) == n - 1 for j in range(1, s))


def test_is_prime_rejects_strong_pseudoprimes():
  bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
  for last, (n, factor) in STRONG_PSEUDOPRIMES.items():
    assert n % factor == 0 and 1 < factor < n  # composite, by its known factor
    assert all(_passes_miller_rabin(n, a) for a in bases if a <= last)  # a liar to those
    assert not is_prime(n), n


def test_is_prime_matches_trial_division_around_the_pseudoprimes():
  sieve = np.ones(70_000, bool)
  sieve[:2] = False
  for q in range(2, 265):
    sieve[q * q::q] = False
  primes = np.flatnonzero(sieve)  # every prime below 70,000 > sqrt(3.3e9)

  def brute(n):
    return n > 1 and all(n % q for q in primes[primes * primes <= n])

  window = range(3215031751 - 300, 3215031751 + 300)
  assert [n for n in window if is_prime(n)] == [n for n in window if brute(n)]
  spsp2 = [2047, 3277, 4033, 4681, 8321, 15841, 29341, 42799, 49141, 52633, 65281]
  assert all(_passes_miller_rabin(n, 2) and not sieve[n] and not is_prime(n) for n in spsp2)
  assert [n for n in range(2**16) if is_prime(n)] == list(primes[primes < 2**16])


# ---- polynomials -----------------------------------------------------------------

def _brute_mle(table, point, p):
  n = len(point)
  total = 0
  for j, x in enumerate(itertools.product((0, 1), repeat=n)):
    w = 1
    for r, xi in zip(point, x):
      w = w * (r * xi + (1 - r) * (1 - xi)) % p
    total = (total + w * int(table[j])) % p
  return total


def test_mle_agrees_on_the_cube_and_with_the_eq_sum():
  F = PrimeField(P)
  table = F.random(jax.random.PRNGKey(0), (16,))
  for j, x in enumerate(itertools.product((0, 1), repeat=4)):
    assert int(poly.mle_eval(F, table, jnp.asarray(x, jnp.int64))) == int(table[j])
  point = F.random(jax.random.PRNGKey(1), (4,))
  assert int(poly.mle_eval(F, table, point)) == _brute_mle(np.asarray(table),
                                                           [int(v) for v in point], P)
  eq = poly.eq_table(F, point)
  assert int(F.dot(eq, table)) == int(poly.mle_eval(F, table, point))
  cube = sumcheck.cube(4)
  np.testing.assert_array_equal(eq, jax.vmap(lambda x: poly.eq_eval(F, point, x))(cube))


def test_lagrange_eval_matches_horner():
  F = PrimeField(P)
  coeffs = F.random(jax.random.PRNGKey(2), (5, 4))  # 5 cubics
  values = poly.values_from_coefficients(F, coeffs, 3)
  r = F.random(jax.random.PRNGKey(3), (5,))
  np.testing.assert_array_equal(poly.lagrange_eval(F, values, r), poly.horner(F, coeffs, r))


# ---- sum-check --------------------------------------------------------------------

@pytest.mark.parametrize("n, d, terms", [(1, 1, 1), (5, 3, 2), (8, 2, 3)])
def test_sumcheck_is_complete_on_random_polynomials(n, d, terms):
  F = PrimeField(P)
  accept, reason = jax.jit(jax.vmap(lambda k: simulation.sumcheck_trial(F, k, n, d, terms)))(
      jax.random.split(jax.random.PRNGKey(n), 50))
  assert bool(jnp.all(accept)) and bool(jnp.all(reason == sumcheck.ACCEPT))


@pytest.mark.parametrize("n", [5, 9])  # one scan; four segments (padded, masked points)
def test_table_and_oracle_provers_send_the_same_messages(n):
  F = PrimeField(P)

  @jax.jit  # one program: the statement is an argument, not a constant to fold
  def both(tables, coeffs, ch):
    st = sumcheck.ProductSum(tables, coeffs)
    fn = jax.vmap(lambda x: sumcheck.evaluate(F, st, x))
    return (sumcheck.run(sumcheck.TableProver.create(F, st, 3), ch),
            sumcheck.run(sumcheck.OracleProver.create(F, fn, n, 3), ch),
            F.sum(fn(sumcheck.cube(n))))

  a, b, total = both(F.random(jax.random.PRNGKey(0), (2, 3, 2**n)),
                     F.random(jax.random.PRNGKey(1), (2,)), F.random(jax.random.PRNGKey(2), (n,)))
  np.testing.assert_array_equal(a.messages, b.messages)
  assert int(a.claim) == int(b.claim) == int(total)


@pytest.fixture(scope="module")
def cheater_verdicts():
  """(accept, reason) of each strategy's run on one statement and key (PRNGKey(5)): one
  compiled program for the four (the statement's draws are shared), not four."""
  F = PrimeField(P)
  run = jax.jit(lambda k: {s: simulation.sumcheck_trial(F, k, 4, 3, 2, s)
                           for s in provers.STRATEGIES})
  with jax.enable_x64(True):  # module fixtures set up before the per-test `x64`
    return run(jax.random.PRNGKey(5))


@pytest.mark.parametrize("strategy, reason", [("optimal", 4), ("one_round", 1),
                                              ("random", 4), ("constant", 1)])
def test_verifier_rejects_each_cheater_with_its_reason(cheater_verdicts, strategy, reason):
  # On the large field a cheater survives a round w.p. <= 3 / p: these keys reject.
  accept, got = cheater_verdicts[strategy]
  assert not bool(accept) and int(got) == reason


def test_optimal_cheater_acceptance_is_exact_over_all_challenges():
  """Enumerates every challenge pair on F_13: the optimal liar survives a round exactly
  when r hits one of its d roots, so it is accepted on p^2 - (p - d)^2 pairs."""
  F, n, d = PrimeField(13), 2, 2
  st = sumcheck.ProductSum(F.random(jax.random.PRNGKey(0), (1, d, 2**n)),
                           jnp.ones((1,), jnp.int64))

  def accepted(challenges):
    honest = sumcheck.TableProver.create(F, st, d)
    liar = provers.Cheater.create(F, honest, F.add(honest.claim(), 5), "optimal")
    t = sumcheck.run(liar, challenges)
    return sumcheck.check_rounds(F, t, challenges, sumcheck.evaluate(F, st, challenges))[0]

  grid = jnp.asarray(list(itertools.product(range(13), repeat=n)), jnp.int64)
  count = int(jnp.sum(jax.jit(jax.vmap(accepted))(grid)))
  assert count == 13**2 - (13 - d)**2


def test_soundness_rates_match_the_exact_probabilities():
  F, n, d, runs = PrimeField(97), 4, 3, 40_000
  keys = jax.random.split(jax.random.PRNGKey(9), runs)
  exact = {"optimal": 1 - (1 - d / 97)**n, "one_round": d / 97}
  # Both strategies on the same keys in one program (the statements' draws are shared).
  accepted = jax.jit(jax.vmap(lambda k: {s: simulation.sumcheck_trial(F, k, n, d, 1, s)[0]
                                         for s in exact}))(keys)
  for strategy, exact in exact.items():
    lo, hi = spot_check.binomial_interval(int(accepted[strategy].sum()), runs, 0.999)
    assert lo <= exact <= hi <= n * d / 97 + 0.01, (strategy, lo, exact, hi)


def test_verify_rejects_malformed_transcripts_with_a_reason():
  F, n, d = PrimeField(P), 3, 2
  st = sumcheck.ProductSum(F.random(jax.random.PRNGKey(0), (1, d, 8)), jnp.ones((1,), jnp.int64))
  coins = sumcheck.draw_coins(F, jax.random.PRNGKey(1), n)
  good = jax.jit(lambda st, r: sumcheck.run(sumcheck.TableProver.create(F, st, d), r))(st, coins)
  final = jax.jit(lambda r: sumcheck.evaluate(F, st, r))
  assert sumcheck.verify(F, good, coins, d, final) == (True, "accepted")
  bad = {
      "messages have shape": good._replace(messages=good.messages[:2]),
      "messages have shape (3, 4)": good._replace(messages=jnp.zeros((3, 4), jnp.int64)),
      "not elements": good._replace(claim=jnp.int64(P)),
      "challenges": good._replace(challenges=good.challenges[:1]),
      "not (claim": ([1, 2], "x"),
      "round 1": good._replace(claim=F.add(good.claim, 1)),
      "round 2 has": good._replace(challenges=good.challenges.at[1].add(1)),
  }
  for reason, transcript in bad.items():
    ok, why = sumcheck.verify(F, transcript, coins, d, final)
    assert not ok and why.startswith("rejected") and reason in why, (reason, why)
  float_messages = good._replace(messages=np.asarray(good.messages, float))
  assert not sumcheck.verify(F, float_messages, coins, d, final)[0]
  ok, why = sumcheck.verify(F, good, coins[None], d, final)  # the verifier's own mistake
  assert not ok and "the verifier's coins must be (n,)" in why, why


def test_degree_above_the_protocol_is_an_error():
  F = PrimeField(P)
  st = sumcheck.ProductSum(F.random(jax.random.PRNGKey(0), (1, 4, 8)), jnp.ones((1,), jnp.int64))
  with pytest.raises(ValueError, match="degree 4 .* set up for degree <= 3"):
    sumcheck.check_statement(st, 3)
  with pytest.raises(ValueError, match="degree 4 .* set up for degree <= 3"):
    sumcheck.TableProver.create(F, st, 3)  # before any round is run
  with pytest.raises(ValueError, match="2\\^n entries"):
    sumcheck.check_statement(sumcheck.ProductSum(jnp.zeros((1, 2, 6), jnp.int64),
                                                 jnp.ones((1,), jnp.int64)), 3)
  with pytest.raises(ValueError, match="too small"):
    provers.root_polynomial(PrimeField(5), 3)
  with pytest.raises(ValueError, match="2 challenges for a 3-variable sum"):
    sumcheck.run(sumcheck.TableProver.create(F, st, 4), F.element([1, 2]))


def test_degree_at_or_above_p_is_rejected_not_raised():
  # Values at 0..d name a degree-d polynomial only with d + 1 distinct points: d < p.
  F = PrimeField(3)
  t = sumcheck.Transcript(jnp.int64(0), jnp.zeros((2, 4), jnp.int64), jnp.zeros((2,), jnp.int64))
  ok, why = sumcheck.verify(F, t, jnp.zeros((2,), jnp.int64), 3, lambda r: jnp.int64(0))
  assert not ok and "degree 3 needs 4 distinct points 0..3, but F_3 has 3" in why, why
  ok, why = sumcheck.verify_fiat_shamir(F, t, 2, 3, lambda r: jnp.int64(0))
  assert not ok and "F_3 has 3" in why, why
  st = sumcheck.ProductSum(jnp.zeros((1, 3, 4), jnp.int64), jnp.ones((1,), jnp.int64))
  with pytest.raises(ValueError, match="degree 3 needs 4 distinct points"):
    sumcheck.TableProver.create(F, st, 3)
  F2, ops = PrimeField(2), ("mul", "add")
  inputs = F2.element([1, 0, 1, 1])
  t = gkr.Transcript(F2.element([0]), (gkr.LayerMessages(jnp.zeros((0, 4), jnp.int64), 0, 0),
                                       gkr.LayerMessages(jnp.zeros((1, 4), jnp.int64), 0, 0)))
  coins = gkr.draw_coins(F2, jax.random.PRNGKey(0), ops, 2)
  ok, why = gkr.verify(F2, ops, t, coins, inputs=inputs)
  assert not ok and "degree-3 rounds need 4 distinct points, but F_2 has 2" in why, why


@functools.partial(jax.jit, static_argnums=(0, 2))
def _lying_transcript(F, st, d, challenges):
  honest = sumcheck.TableProver.create(F, st, d)
  liar = provers.Cheater.create(F, honest, F.add(honest.claim(), 1), "optimal")
  return sumcheck.run(liar, challenges)


def test_a_prover_that_picks_its_challenges_is_rejected():
  """Issue 50: the optimal liar's lie s_i - h_i vanishes at 2 (`root_polynomial`), so a
  prover that chooses r_i = 2 survives every round. The verifier draws its own coins."""
  F, n, d = PrimeField(P), 6, 2
  st = sumcheck.ProductSum(F.random(jax.random.PRNGKey(0), (1, d, 2**n)),
                           jnp.ones((1,), jnp.int64))
  g = jax.jit(lambda r: sumcheck.evaluate(F, st, r))
  check = jax.jit(lambda t, coins: sumcheck.check_rounds(F, t, coins, g(coins)))
  chosen = jnp.full((n,), 2, jnp.int64)
  t = _lying_transcript(F, st, d, chosen)
  assert int(t.claim) != int(sumcheck.total(F, st))
  assert bool(check(t, chosen)[0])  # the lie is consistent on the prover's own challenges
  coins = sumcheck.draw_coins(F, jax.random.PRNGKey(1), n)
  ok, why = sumcheck.verify(F, t, coins, d, g)
  assert not ok and "challenges are not the verifier's coins (round 1" in why, why
  accept, reason = check(t, coins)
  assert not bool(accept) and int(reason) == sumcheck.FOREIGN_COINS
  ok, why = sumcheck.verify(F, _lying_transcript(F, st, d, coins), coins, d, g)
  assert not ok and ("rejected: round" in why or "last round" in why), why


def _lagrange_weights(d: int, r: int, p: int) -> list:
  """l_t(r) = prod_{k != t} (r - k) / (t - k): s(r) = sum_t s(t) l_t(r), in Python ints."""
  weights = []
  for t in range(d + 1):
    num = den = 1
    for k in range(d + 1):
      if k != t:
        num, den = num * (r - k) % p, den * (t - k) % p
    weights.append(num * pow(den, -1, p) % p)
  return weights


def _grind(F, honest, claim, context, attempts):
  """A liar under Fiat-Shamir: in each round it tries `attempts` optimal lies (roots
  a + 2, ..., a + d + 1 for a = 0, 1, ...) and sends the first whose hashed challenge
  is one of its roots; once its claim is true it is honest."""
  n, d, p = honest.num_vars, honest.degree, F.p
  digest, held = sumcheck.fiat_shamir_start(F, n, d, claim, context), claim
  message, bind = jax.jit(lambda h: h.message()), jax.jit(lambda h, r: h.bind(None, r))
  messages, coins = [], []
  for _ in range(n):
    h = [int(v) for v in message(honest)]
    gap = (held - h[0] - h[1]) % p
    for a in range(attempts):
      roots = [a + 2 + k for k in range(d)]
      q = [int(np.prod([t - x for x in roots], dtype=object)) % p for t in range(d + 1)]
      if (q[0] + q[1]) % p == 0:
        continue  # this q cannot carry the gap
      s = [(v + gap * q_t * pow(q[0] + q[1], -1, p)) % p for v, q_t in zip(h, q)]
      step, r = sumcheck.fiat_shamir_next(F, digest, s)
      if gap == 0 or r in roots:
        break
    digest, held = step, sum(v * w for v, w in zip(s, _lagrange_weights(d, r, p))) % p
    honest = bind(honest, jnp.int64(r))
    messages.append(s)
    coins.append(r)
  return sumcheck.Transcript(jnp.int64(claim), jnp.asarray(messages), jnp.asarray(coins))


@pytest.mark.parametrize("p, accepted", [(97, True), (P, False)])
def test_fiat_shamir_grinding_needs_about_p_over_d_hashes(p, accepted):
  """Fiat-Shamir: an honest proof verifies, a transcript with chosen challenges does not,
  and a liar that grinds 90 lies per round wins on F_97 (90 tries at 3/97 each) but not
  on F_(2^31 - 1), where a round costs about p / d = 7e8 hashes."""
  F, n, d = PrimeField(p), 4, 3
  st = sumcheck.ProductSum(F.random(jax.random.PRNGKey(0), (1, d, 2**n)),
                           jnp.ones((1,), jnp.int64))
  g, context = jax.jit(lambda r: sumcheck.evaluate(F, st, r)), b"statement 0"
  honest = sumcheck.prove_fiat_shamir(sumcheck.TableProver.create(F, st, d), context)
  np.testing.assert_array_equal(honest.challenges, sumcheck.fiat_shamir_coins(
      F, int(honest.claim), honest.messages, context))
  assert sumcheck.verify_fiat_shamir(F, honest, n, d, g, context) == (True, "accepted")
  assert not sumcheck.verify_fiat_shamir(F, honest, n, d, g, b"statement 1")[0]
  chosen = _lying_transcript(F, st, d, jnp.full((n,), 2, jnp.int64))
  ok, why = sumcheck.verify_fiat_shamir(F, chosen, n, d, g, context)
  assert not ok and "not the verifier's coins" in why, why
  lie = (int(sumcheck.total(F, st)) + 1) % p
  ground = _grind(F, sumcheck.TableProver.create(F, st, d), lie, context, attempts=90)
  assert sumcheck.verify_fiat_shamir(F, ground, n, d, g, context)[0] == accepted


def _textbook_messages(tables, challenges, degree: int, p: int) -> list:
  """The sum-check prover for f~ g~ on Python integers, halving the tables."""
  messages = []
  for r in challenges:
    half = len(tables[0]) // 2
    lines = [[(f[i], f[half + i] - f[i]) for i in range(half)] for f in tables]
    messages.append([sum((a + t * da) * (b + t * db) for (a, da), (b, db) in zip(*lines)) % p
                     for t in range(degree + 1)])
    tables = [[(a + r * da) % p for a, da in line] for line in lines]
  return messages


def test_scanned_prover_matches_the_textbook_prover():
  """n = 9: single rounds, a scan after compacting, and the small last segment."""
  F, n, d = PrimeField(P), 9, 2
  assert sumcheck.segments(n) == [(0, 1), (1, 2), (2, 4), (4, 9)]
  tables = F.random(jax.random.PRNGKey(n), (d, 2**n))
  ch = F.random(jax.random.PRNGKey(n + 1), (n,))
  st = sumcheck.ProductSum(tables[None], jnp.ones((1,), jnp.int64))
  got = jax.jit(lambda st, ch: sumcheck.run(sumcheck.TableProver.create(F, st, d), ch))(
      st, ch).messages
  want = _textbook_messages([[int(v) for v in f] for f in tables], [int(r) for r in ch], d, P)
  assert [[int(v) for v in m] for m in got] == want


def test_compiling_does_not_grow_with_the_rounds():
  """18 and 32 rounds run as the same six segments (two single rounds, four scans): the
  traced programs have the same size, where unrolled rounds would nearly double it."""
  F = PrimeField(P)

  def program_size(n):
    st = jax.ShapeDtypeStruct((1, 3, 2**n), jnp.int64)
    fn = lambda t, r: sumcheck.run(sumcheck.TableProver.create(
        F, sumcheck.ProductSum(t, jnp.ones((1,), jnp.int64)), 3), r)
    return len(jax.make_jaxpr(fn)(st, jax.ShapeDtypeStruct((n,), jnp.int64)).eqns)

  assert len(sumcheck.segments(18)) == len(sumcheck.segments(32)) == 6
  assert program_size(18) == program_size(32)


def test_segments_cover_the_rounds_with_bounded_padding():
  for n in range(0, 65):
    segs = sumcheck.segments(n)
    bounds = [0] + [b for _, b in segs]
    assert [a for a, _ in segs] == bounds[:-1] and bounds[-1] == n  # contiguous, 0..n
    assert len(segs) <= max(n, 1).bit_length() + 1
    padded = sum((b - a) * 2**(n - a) for a, b in segs)
    assert padded <= 1.15 * sum(2**(n - i) for i in range(n)) + n * 2**sumcheck.SMALL_LOG2


# ---- GKR and oracles --------------------------------------------------------------

@pytest.mark.parametrize("ops", [("mul", "add", "add"), ("add", "mul")])
def test_gkr_output_matches_direct_evaluation_and_is_accepted(ops):
  F, m = PrimeField(P), 5
  inputs = F.random(jax.random.PRNGKey(0), (2**m,))
  coins = gkr.draw_coins(F, jax.random.PRNGKey(1), ops, m)

  @jax.jit  # one program (the inputs an argument): the honest and the cheating run
  def runs(inputs, c):
    t, lie = (gkr.prove(F, ops, c, inputs=inputs, cheat=cheat) for cheat in (False, True))
    return t.output, gkr.check(F, ops, t, c, inputs=inputs), gkr.check(F, ops, lie, c,
                                                                         inputs=inputs)

  output, honest, cheater = runs(inputs, coins)
  direct = np.asarray(inputs, dtype=object)
  for op in ops:
    direct = [(a + b) % P if op == "add" else a * b % P for a, b in zip(direct[0::2], direct[1::2])]
  assert [int(v) for v in output] == [int(v) for v in direct]
  accept, reason = honest
  assert bool(accept) and int(reason) == gkr.ACCEPT
  accept, reason = cheater
  assert not bool(accept) and int(reason) == 2 * len(ops)  # caught at the input


@pytest.mark.parametrize("ops", [("add", "mul", "add"), ("mul", "add", "mul")])
def test_gkr_rejects_a_changed_output_gate_of_a_one_output_circuit(ops):
  """With one output (L = m) the top layer has no sum-check rounds: only the layer-end
  check op(a, b) = output ties the claimed output to the layer below."""
  F, m = PrimeField(P), len(ops)
  inputs = F.random(jax.random.PRNGKey(0), (2**m,))
  coins = gkr.draw_coins(F, jax.random.PRNGKey(1), ops, m)
  t = jax.jit(lambda i, c: gkr.prove(F, ops, c, inputs=i))(inputs, coins)
  assert t.output.shape == (1,) and t.layers[0].messages.shape[0] == 0
  assert gkr.verify(F, ops, t, coins, inputs=inputs) == (True, "accepted")
  changed = t._replace(output=F.add(t.output, 1))
  ok, why = gkr.verify(F, ops, changed, coins, inputs=inputs)
  assert (ok, why) == (False, "rejected: a layer-end value check failed in layer 0 "
                              "(from the top)")


def test_gkr_over_a_low_degree_oracle():
  F, m, ops = PrimeField(P), 4, ("mul", "add", "add")
  cp = oracles.random_cp(F, jax.random.PRNGKey(0), m, 2, 3)
  coins = gkr.draw_coins(F, jax.random.PRNGKey(1), ops, m)

  @jax.jit  # one program (the oracle's coefficients an argument) for the runs and checks
  def runs(cp, c):
    oracle = simulation.cp_oracle(F, cp)
    corrupted = gkr.Oracle(oracles.corrupt(F, oracle.fn, 0.5), m, 2)
    check = lambda t, o: gkr.check(F, ops, t, c, oracle=o, test_lines=4)[0]
    t, lie = (gkr.prove(F, ops, c, oracle=oracle, cheat=cheat) for cheat in (False, True))
    direct = gkr.evaluate(F, ops, oracles.cp_eval(F, cp, sumcheck.cube(m)))[-1]
    return t.output, direct, check(t, oracle), check(lie, oracle), check(t, corrupted)

  output, direct, honest, cheater, corrupted = runs(cp, coins)
  assert int(output[0]) == int(direct[0])
  assert bool(honest)
  assert not bool(cheater)
  assert not bool(corrupted)
  assert gkr.verifier_queries(simulation.cp_oracle(F, cp), 1) == 2 + m * 2 + 2


def test_cp_eval_and_line_test_against_brute_force():
  F, m, d = PrimeField(P), 3, 2
  cp = oracles.random_cp(F, jax.random.PRNGKey(0), m, d, 2)
  x = F.random(jax.random.PRNGKey(1), (4, m))
  coeffs, factors = np.asarray(cp.coeffs), np.asarray(cp.factors)  # read on the host
  want = []
  for point in np.asarray(x):
    total = 0
    for r in range(2):
      term = int(coeffs[r])
      for j in range(m):
        term = term * sum(int(factors[r, j, k]) * pow(int(point[j]), k, P)
                          for k in range(d + 1)) % P
      total = (total + term) % P
    want.append(total)

  @jax.jit  # one program (cp an argument): the values at x and the three line tests
  def run(cp, x, key):
    fn = lambda pts: oracles.cp_eval(F, cp, pts)
    return (fn(x), oracles.line_test(F, fn, m, m * d, key, 5),
            oracles.line_test(F, fn, m, m * d - 1, key, 5),  # degree too low for O
            oracles.line_test(F, oracles.corrupt(F, fn, 0.2), m, m * d, key, 5))

  values, passes, too_low, corrupted = run(cp, x, jax.random.PRNGKey(2))
  assert [int(v) for v in values] == want
  assert bool(passes)
  assert not bool(too_low)
  assert not bool(corrupted)


@pytest.mark.parametrize("ops, n", [(("nand",), 4), (("add",) * 3, 4), (("add",), 6)])
def test_bad_circuits_are_one_line_errors(ops, n):
  with pytest.raises(ValueError):
    gkr.check_circuit(ops, n)


# ---- spot checks ------------------------------------------------------------------

def test_spot_check_acceptance_matches_the_exact_binomial():
  n, lies, k, runs = 10, 3, 4, 20_000
  truth = simulation.majority_answers(jax.random.PRNGKey(0), n, 0.8)
  acc, _ = jax.jit(jax.vmap(lambda key: simulation.spot_trial(key, truth, "fraction", k, 0.1,
                                                              lies)))(
      jax.random.split(jax.random.PRNGKey(1), runs))
  exact = spot_check.acceptance_probability(lies, n, k)
  # Enumerate every index tuple: the same probability.
  wrong = set(range(lies))
  hits = sum(all(i not in wrong for i in t) for t in itertools.product(range(n), repeat=k))
  assert exact == pytest.approx(hits / n**k)
  lo, hi = spot_check.binomial_interval(int(acc.sum()), runs, 0.999)
  assert lo <= exact <= hi


def test_spot_check_reasons():
  truth = simulation.majority_answers(jax.random.PRNGKey(0), 100, 0.55)
  key = jax.random.PRNGKey(1)
  honest = spot_check.honest_claim(truth, "majority")
  assert int(spot_check.check(honest, lambda i: truth[i], 8, key, "majority", 0.1)[1]) == \
      spot_check.NOT_ROBUST  # margin 0.05 <= delta
  assert int(spot_check.check(honest, lambda i: truth[i], 8, key, "majority", 0.01)[1]) == \
      spot_check.ACCEPT
  wrong = honest._replace(output=1 - honest.output)
  assert int(spot_check.check(wrong, lambda i: truth[i], 8, key, "majority", 0.01)[1]) == \
      spot_check.WRONG_OUTPUT
  liar = spot_check.lying_claim(truth, "fraction", 100, key)  # lies everywhere
  assert int(spot_check.check(liar, lambda i: truth[i], 1, key, "fraction", 0.1)[1]) == \
      spot_check.CAUGHT
  with pytest.raises(ValueError, match="0/1"):
    spot_check.check_answers([0, 2])


def test_lm_judge_matches_the_direct_log_likelihood(tiny_lm):
  windows = np.asarray(tiny_lm.corpus.validation[:33 * 20]).reshape(20, 33)
  scores = np.asarray(judges.mean_loglik(tiny_lm.model, tiny_lm.params, jnp.asarray(windows)))
  threshold = float(np.median(scores))
  judge = judges.lm_judge(tiny_lm.model, tiny_lm.params, windows, threshold, chunk=7)
  np.testing.assert_array_equal(judge(np.arange(20)), (scores > threshold).astype(np.int32))
  np.testing.assert_array_equal(judge([3, 3, 11]), judge(np.arange(20))[[3, 3, 11]])


def test_gkr_verify_rejects_malformed_transcripts_with_a_reason():
  F, m, ops = PrimeField(P), 4, ("mul", "add", "add")
  inputs = F.random(jax.random.PRNGKey(0), (2**m,))
  coins = gkr.draw_coins(F, jax.random.PRNGKey(1), ops, m)
  t = jax.jit(lambda c: gkr.prove(F, ops, c, inputs=inputs))(coins)
  assert gkr.verify(F, ops, t, coins, inputs=inputs) == (True, "accepted")
  top = t.layers[0]
  bad = {
      "output has shape": t._replace(output=jnp.zeros((3,), jnp.int64)),
      "2 layer messages": t._replace(layers=t.layers[:2]),
      "layer 0 (from the top) has messages": t._replace(
          layers=(top._replace(messages=top.messages[:, :2]),) + t.layers[1:]),
      "not an element": t._replace(output=t.output + P),
      "not (output, layers)": "garbage",
      "layer 0": t._replace(output=F.add(t.output, 1)),
  }
  for reason, transcript in bad.items():
    ok, why = gkr.verify(F, ops, transcript, coins, inputs=inputs)
    assert not ok and why.startswith("rejected") and reason in why, (reason, why)
