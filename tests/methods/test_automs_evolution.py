"""AutoMS evolutionary operators (`methods.automs.evolution`) against pymoo 0.6.2.

pymoo is a test-only reference: the tests that compare with it skip without it.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from methods.automs import evolution as ev


def _pymoo():
  return pytest.importorskip("pymoo")


def _objectives(seed, p, m, integer):
  """Random (p, m) objectives; integer-valued ones have ties and duplicated rows."""
  rng = np.random.default_rng(seed)
  if integer:
    F = rng.integers(0, 4, size=(p, m)).astype(float)
    F[-2:] = F[:2]  # exact duplicates
    return F
  return rng.normal(size=(p, m))


def _hv2d(F, ref):
  """Hypervolume of 2-objective points (minimisation) below the reference point."""
  F = F[np.all(F < ref, axis=1)]
  hv, best = 0.0, ref[1]
  for f1, f2 in F[np.argsort(F[:, 0], kind="stable")]:
    if f2 < best:
      hv += (ref[0] - f1) * (best - f2)
      best = f2
  return hv


CASES = [(p, m, integer) for p in (7, 20, 50) for m in (2, 3) for integer in (True, False)]


@pytest.mark.parametrize("p,m,integer", CASES)
def test_ranks_and_crowding_match_pymoo(x64, p, m, integer):
  _pymoo()
  from pymoo.operators.survival.rank_and_crowding.metrics import (
      calc_crowding_distance, get_crowding_function)
  from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

  F = _objectives(100 * p + 10 * m + integer, p, m, integer)
  fronts, want = NonDominatedSorting().do(F, return_rank=True)
  ranks = np.asarray(ev.non_dominated_ranks(F))
  np.testing.assert_array_equal(ranks, want)
  cd = np.asarray(ev.crowding_distance(F, ranks))
  for front in fronts:  # ascending indices: pymoo's stable sort breaks ties by index
    ref = get_crowding_function("cd").do(F[front])
    if len(front) > 2:
      np.testing.assert_array_equal(ref, calc_crowding_distance(F[front]))
    np.testing.assert_array_equal(np.isinf(cd[front]), np.isinf(ref))
    np.testing.assert_allclose(cd[front], ref, rtol=1e-12, atol=1e-12)


def test_crowding_edge_cases():
  # A constant objective adds 0 (no inf at its ends); identical points get 0 everywhere.
  F = jnp.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [5.0, 5.0], [5.0, 5.0], [5.0, 5.0]])
  ranks = jnp.array([0, 0, 0, 1, 1, 1])
  np.testing.assert_allclose(ev.crowding_distance(F, ranks), [np.inf, 0.5, np.inf, 0, 0, 0])
  # Fronts of one or two points are all inf.
  cd = ev.crowding_distance(F[:3], jnp.array([0, 1, 1]))
  assert bool(jnp.all(jnp.isinf(cd)))


def test_constrained_ranks():
  rng = np.random.default_rng(1)
  F = rng.normal(size=(30, 2))
  cv = np.where(rng.random(30) < 0.4, rng.random(30), 0.0)
  cv[:2] = cv[2] = 0.7  # a tie among the infeasible
  ranks = np.asarray(ev.constrained_ranks(F, cv))
  feas = cv == 0
  assert ranks[feas].max() < ranks[~feas].min()  # feasible first
  np.testing.assert_array_equal(ranks[feas], ev.non_dominated_ranks(F[feas]))
  infeas = np.flatnonzero(~feas)
  levels = np.unique(cv[infeas], return_inverse=True)[1]  # one front per cv value
  np.testing.assert_array_equal(ranks[infeas], ranks[feas].max() + 1 + levels)
  np.testing.assert_array_equal(ev.constrained_ranks(F, np.zeros(30)),
                                ev.non_dominated_ranks(F))


def test_survival_matches_pymoo(x64):
  _pymoo()
  from pymoo.core.population import Population
  from pymoo.core.problem import Problem
  from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

  compared = 0
  for seed in range(24):
    rng = np.random.default_rng(seed)
    p, k, constrained = 30, (10, 22)[seed % 2], seed % 4 >= 2
    F = rng.normal(size=(p, 2 + seed % 2))  # two shapes: two compilations
    cv = np.where(rng.random(p) < 0.4, rng.random(p), 0.0) if constrained else np.zeros(p)
    idx, ranks, cd = (np.asarray(v) for v in ev._survive(F, cv, k))
    order = np.lexsort((np.arange(p), -cd, ranks))
    np.testing.assert_array_equal(idx, order[:k])
    np.testing.assert_array_equal(np.asarray(ev.survival(F, cv, k)), idx)
    a, b = order[k - 1], order[k]
    if ranks[a] == ranks[b] and cd[a] == cd[b]:
      continue  # pymoo breaks this crowding tie at random
    problem = Problem(n_var=1, n_obj=F.shape[1], n_ieq_constr=int(constrained), xl=0.0,
                      xu=1.0)
    pop = Population.new("X", np.zeros((p, 1)), "F", F, "G", cv[:, None])
    want = RankAndCrowding().do(problem, pop, n_survive=k, return_indices=True,
                                random_state=rng)
    assert set(idx.tolist()) == set(want), seed
    compared += 1
  assert compared >= 12


def test_binary_tournament_prefers_rank_then_crowding(rng):
  ranks = jnp.array([0, 1, 1])
  crowding = jnp.array([0.0, 2.0, 1.0])
  winners = np.asarray(ev.binary_tournament(rng, ranks, crowding, 3000))
  # 0 beats everyone, 1 beats 2, 2 never wins: P(0) = 2/3, P(1) = 1/3.
  counts = np.bincount(winners, minlength=3)
  assert counts[2] == 0
  assert abs(counts[0] / 3000 - 2 / 3) < 0.05


LOWER, UPPER = np.zeros(5), np.ones(5)
A = np.array([0.1, 0.5, 0.95, 0.3, 0.02])
B = np.array([0.3, 0.52, 0.99, 0.3, 0.6])  # variable 3: equal parents, never crossed
N = 20_000


def _pymoo_problem(lower, upper):
  from pymoo.core.problem import Problem
  return Problem(n_var=len(lower), n_obj=1, xl=lower, xu=upper)


def test_sbx_bounds_identity_and_symmetry(rng):
  k1, k2, k3 = jax.random.split(rng, 3)
  a = jax.random.uniform(k1, (500, 4))
  b = jax.random.uniform(k2, (500, 4))
  lo, up = jnp.zeros(4), jnp.ones(4)
  c1, c2 = ev.sbx(k3, a, b, lo, up, eta=2.0, prob=1.0, prob_var=1.0)
  assert bool(jnp.all((c1 >= 0) & (c1 <= 1) & (c2 >= 0) & (c2 <= 1)))
  assert not bool(jnp.allclose(c1, a))
  for kwargs in ({"prob": 0.0}, {"prob_var": 0.0}):
    c1, c2 = ev.sbx(k3, a, b, lo, up, **kwargs)
    np.testing.assert_array_equal(c1, a)
    np.testing.assert_array_equal(c2, b)
  # Far from the bounds alpha = 2, both children use the same beta_q: the mean is kept.
  c1, c2 = ev.sbx(k3, a, b, jnp.full(4, -100.0), jnp.full(4, 100.0), prob=1.0,
                  prob_var=1.0)
  np.testing.assert_allclose((c1 + c2) / 2, (a + b) / 2, atol=1e-6)


def test_sbx_matches_pymoo_distribution(x64, rng):
  _pymoo()
  from pymoo.core.population import Population
  from pymoo.operators.crossover.sbx import SBX

  c1, c2 = ev.sbx(rng, jnp.tile(A, (N, 1)), jnp.tile(B, (N, 1)), LOWER, UPPER,
                  eta=20.0, prob=0.8, prob_var=0.5)
  off = SBX(prob=0.8, eta=20, prob_var=0.5).do(
      _pymoo_problem(LOWER, UPPER), Population.new("X", np.stack([A, B])),
      parents=np.tile([0, 1], (N, 1)), random_state=np.random.default_rng(0)).get("X")
  np.testing.assert_array_equal(c1[:, 3], A[3])
  for ours, theirs, parent in ((np.asarray(c1), off[:N], A), (np.asarray(c2), off[N:], B)):
    for j in (0, 1, 2, 4):
      assert stats.ks_2samp(ours[:, j], theirs[:, j]).pvalue > 1e-3, j
      se = np.hypot(ours[:, j].std(), theirs[:, j].std()) / np.sqrt(N)
      assert abs(ours[:, j].mean() - theirs[:, j].mean()) < 5 * se + 1e-9, j
      # The crossed part alone (prob * prob_var = 0.4 of the draws) is the sharper test.
      moved, moved_ref = ours[:, j] != parent[j], theirs[:, j] != parent[j]
      assert abs(moved.mean() - 0.4) < 0.015, j
      assert stats.ks_2samp(ours[moved, j], theirs[moved_ref, j]).pvalue > 1e-3, j


def test_polynomial_mutation_bounds_and_identity(rng):
  x = jax.random.uniform(rng, (500, 4), minval=-1.0, maxval=2.0)
  lo, up = jnp.full(4, -1.0), jnp.array([2.0, 2.0, 2.0, -1.0 + 3.0])
  y = ev.polynomial_mutation(rng, x, lo, up, eta=1.0, prob=1.0)
  assert bool(jnp.all((y >= lo) & (y <= up)))
  assert float(jnp.mean(y != x)) > 0.99
  np.testing.assert_array_equal(ev.polynomial_mutation(rng, x, lo, up, prob=0.0), x)
  # A fixed variable (lower = upper) never moves.
  y = ev.polynomial_mutation(rng, jnp.ones((10, 2)), jnp.array([0.0, 1.0]),
                             jnp.array([2.0, 1.0]), prob=1.0)
  np.testing.assert_array_equal(y[:, 1], 1.0)


def test_polynomial_mutation_matches_pymoo_distribution(x64, rng):
  _pymoo()
  from pymoo.core.population import Population
  from pymoo.operators.mutation.pm import PM

  lower, upper = np.array([0.0, 0.0, 0.0, -2.0]), np.array([1.0, 1.0, 1.0, 3.0])
  x = np.array([0.05, 0.5, 0.97, 2.5])
  ours = np.asarray(ev.polynomial_mutation(rng, jnp.tile(x, (N, 1)), lower, upper,
                                           eta=20.0, prob=0.2))
  theirs = PM(prob=1.0, prob_var=0.2, eta=20).do(
      _pymoo_problem(lower, upper), Population.new("X", np.tile(x, (N, 1))),
      random_state=np.random.default_rng(0)).get("X")
  for j in range(4):
    assert abs(np.mean(ours[:, j] != x[j]) - 0.2) < 0.015, j
    assert stats.ks_2samp(ours[:, j], theirs[:, j]).pvalue > 1e-3, j
    moved_ours, moved_theirs = ours[ours[:, j] != x[j], j], theirs[theirs[:, j] != x[j], j]
    assert stats.ks_2samp(moved_ours, moved_theirs).pvalue > 1e-3, j
    np.testing.assert_allclose(np.quantile(moved_ours, [0.1, 0.5, 0.9]),
                               np.quantile(moved_theirs, [0.1, 0.5, 0.9]),
                               atol=0.02 * (upper[j] - lower[j]))


def _zdt1(X):
  """ZDT1 in numpy (the black box): f1 = x1, f2 = g (1 - sqrt(x1 / g))."""
  g = 1.0 + 9.0 * X[:, 1:].mean(axis=1)
  return np.stack([X[:, 0], g * (1.0 - np.sqrt(X[:, 0] / g))], axis=1), np.zeros(len(X))


def test_nsga2_improves_hypervolume_on_zdt1(rng):
  pop_size, generations = 20, 15
  before = ev._offspring._cache_size()
  h = ev.nsga2(_zdt1, rng, np.zeros(5), np.ones(5), pop_size=pop_size,
               generations=generations)
  assert ev._offspring._cache_size() - before <= 1  # one compiled generation step
  n = pop_size * (generations + 1)
  assert h.X.shape == (n, 5) and h.F.shape == (n, 2) and h.cv.shape == (n,)
  np.testing.assert_array_equal(h.generation, np.repeat(np.arange(generations + 1),
                                                        pop_size))
  np.testing.assert_allclose(h.F, _zdt1(np.asarray(h.X))[0], rtol=1e-5)
  assert len(set(np.asarray(h.final).tolist())) == pop_size
  ref = np.array([1.1, 11.0])
  hv0 = _hv2d(np.asarray(h.F[:pop_size]), ref)
  hv = _hv2d(np.asarray(h.F[h.final]), ref)
  assert hv > hv0 + 0.5, (hv0, hv)
  # The initial population can be given; constraints reorder the survivors.
  x0 = np.asarray(h.X[h.final])
  h2 = ev.nsga2(lambda X: (_zdt1(X)[0], np.maximum(X[:, 0] - 0.5, 0.0)), rng,
                np.zeros(5), np.ones(5), pop_size=pop_size, generations=1, initial=x0)
  np.testing.assert_array_equal(h2.X[:pop_size], x0)
  final_cv = np.asarray(h2.cv[h2.final])
  assert np.all(np.diff((final_cv > 0).astype(int)) >= 0)  # feasible first


def test_operators_trace_once(rng):
  lo, up = jnp.zeros(3), jnp.ones(3)
  ops = {
      "ranks": lambda k, F, cv, s: ev.non_dominated_ranks(F),
      "constrained": lambda k, F, cv, s: ev.constrained_ranks(F, cv),
      "crowding": lambda k, F, cv, s: ev.crowding_distance(F, ev.non_dominated_ranks(F)),
      "survival": lambda k, F, cv, s: ev.survival(F, cv, 4),
      "tournament": lambda k, F, cv, s: ev.binary_tournament(
          k, ev.constrained_ranks(F, cv), F[:, 0], 6),
      "sbx": lambda k, F, cv, s: ev.sbx(k, F, F[::-1], lo, up, eta=s, prob=s / 40),
      "pm": lambda k, F, cv, s: ev.polynomial_mutation(k, F, lo, up, eta=s, prob=s / 40),
  }
  for name, op in ops.items():
    jitted = jax.jit(chex.assert_max_traces(op, n=1))
    for seed in range(2):
      k = jax.random.PRNGKey(seed)
      F = jax.random.uniform(k, (8, 3))
      jax.block_until_ready(jitted(k, F, jnp.where(F[:, 1] > 0.5, F[:, 2], 0.0),
                                   10.0 + seed))
    # The public functions reuse their compiled cores across hyperparameter values.
  before = ev._sbx._cache_size()
  for eta in (5.0, 15.0, 25.0):
    ev.sbx(rng, jnp.zeros((4, 3)), jnp.ones((4, 3)), lo, up, eta=eta, prob=0.3)
  assert ev._sbx._cache_size() - before <= 1


def test_bad_input_names_the_argument(rng):
  F = jnp.zeros((4, 2))
  with pytest.raises(ValueError, match=r"cv must be finite and >= 0, got cv\[1\]"):
    ev.constrained_ranks(F, jnp.array([0.0, -1.0, 0.0, 0.0]))
  with pytest.raises(ValueError, match="k must be <= P = 4"):
    ev.survival(F, jnp.zeros(4), 5)
  with pytest.raises(ValueError, match=r"lower must be <= upper, got lower\[0\]"):
    ev.sbx(rng, jnp.zeros(2), jnp.ones(2), jnp.ones(2), jnp.zeros(2))
  with pytest.raises(ValueError, match="prob must be finite and in"):
    ev.polynomial_mutation(rng, jnp.zeros(2), jnp.zeros(2), jnp.ones(2), prob=1.5)
  with pytest.raises(ValueError, match=r"F must have shape \(P, M\)"):
    ev.non_dominated_ranks(jnp.zeros(3))
  with pytest.raises(ValueError, match="initial must have shape"):
    ev.nsga2(_zdt1, rng, jnp.zeros(5), jnp.ones(5), pop_size=4, initial=jnp.zeros((3, 5)))
