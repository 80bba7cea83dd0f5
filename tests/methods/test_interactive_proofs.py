"""Unit tests of methods/interactive_proofs against Python integers and brute force."""

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


def test_is_prime_matches_trial_division():
  brute = [n for n in range(2000) if n > 1 and all(n % q for q in range(2, int(n**0.5) + 1))]
  assert [n for n in range(2000) if is_prime(n)] == brute
  assert is_prime(P) and not is_prime(2**31 - 3)


def test_field_needs_x64():
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match="x64"):
      PrimeField(97).element(3)


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


def test_table_and_oracle_provers_send_the_same_messages():
  F = PrimeField(P)

  @jax.jit  # one program: the statement is an argument, not a constant to fold
  def both(tables, coeffs, ch):
    st = sumcheck.ProductSum(tables, coeffs)
    fn = jax.vmap(lambda x: sumcheck.evaluate(F, st, x))
    return (sumcheck.run(sumcheck.TableProver(F, st, 3), ch),
            sumcheck.run(sumcheck.OracleProver(F, fn, 5, 3), ch), F.sum(fn(sumcheck.cube(5))))

  a, b, total = both(F.random(jax.random.PRNGKey(0), (2, 3, 32)),
                     F.random(jax.random.PRNGKey(1), (2,)), F.random(jax.random.PRNGKey(2), (5,)))
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
    honest = sumcheck.TableProver(F, st, d)
    liar = provers.Cheater(F, honest, F.add(honest.claim(), 5), "optimal")
    t = sumcheck.run(liar, challenges)
    return sumcheck.check_rounds(F, t, sumcheck.evaluate(F, st, challenges))[0]

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
  good = jax.jit(lambda st, r: sumcheck.run(sumcheck.TableProver(F, st, d), r))(
      st, F.random(jax.random.PRNGKey(1), (n,)))
  final = jax.jit(lambda r: sumcheck.evaluate(F, st, r))
  assert sumcheck.verify(F, good, n, d, final) == (True, "accepted")
  bad = {
      "messages have shape": good._replace(messages=good.messages[:2]),
      "messages have shape (3, 4)": good._replace(messages=jnp.zeros((3, 4), jnp.int64)),
      "not elements": good._replace(claim=jnp.int64(P)),
      "challenges": good._replace(challenges=good.challenges[:1]),
      "not (claim": ([1, 2], "x"),
      "round 1": good._replace(claim=F.add(good.claim, 1)),
  }
  for reason, transcript in bad.items():
    ok, why = sumcheck.verify(F, transcript, n, d, final)
    assert not ok and why.startswith("rejected") and reason in why, (reason, why)
  float_messages = good._replace(messages=np.asarray(good.messages, float))
  assert not sumcheck.verify(F, float_messages, n, d, final)[0]


def test_degree_above_the_protocol_is_an_error():
  F = PrimeField(P)
  st = sumcheck.ProductSum(F.random(jax.random.PRNGKey(0), (1, 4, 8)), jnp.ones((1,), jnp.int64))
  with pytest.raises(ValueError, match="degree 4 .* set up for degree <= 3"):
    sumcheck.check_statement(st, 3)
  with pytest.raises(ValueError, match="2\\^n entries"):
    sumcheck.check_statement(sumcheck.ProductSum(jnp.zeros((1, 2, 6), jnp.int64),
                                                 jnp.ones((1,), jnp.int64)), 3)
  with pytest.raises(ValueError, match="too small"):
    provers.root_polynomial(PrimeField(5), 3)


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
