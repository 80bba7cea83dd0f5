"""LILO's environment: problems, the simulated DM, prompts, offline roles, translator."""

import itertools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common import llm
from methods.lilo import dm as dm_lib
from methods.lilo import problems
from methods.lilo import prompts
from methods.lilo import simulated
from methods.lilo import translator

PROBLEM_NAMES = sorted(problems.PROBLEMS)


def _arms(name: str, n: int, seed: int) -> tuple[dict[int, np.ndarray], np.ndarray]:
  p = problems.PROBLEMS[name]
  U = np.random.default_rng(seed).random((n, p.dim))
  Y = np.asarray(p.outcomes(problems.from_unit(p, U)), float)
  return dict(enumerate(Y)), Y


# --- problems ----------------------------------------------------------------------------

def test_dtlz2_pareto_front(x64):
  rng = np.random.default_rng(0)
  x = rng.random((64, 8))
  x[:, 3:] = 0.5                                        # g = 0: the Pareto front
  f = np.asarray(problems.dtlz2(jnp.asarray(x)))
  assert f.shape == (64, 4) and f.dtype == np.float64
  np.testing.assert_allclose((f ** 2).sum(axis=1), 1.0, atol=1e-12)
  assert np.all(f >= 0)
  x2 = rng.random((64, 8))                              # off the front: radius 1 + g
  g = ((x2[:, 3:] - 0.5) ** 2).sum(axis=1)
  f2 = np.asarray(problems.dtlz2(jnp.asarray(x2)))
  np.testing.assert_allclose(np.sqrt((f2 ** 2).sum(axis=1)), 1.0 + g, rtol=1e-12)
  # the corner x_0 = 0: all weight on f_1 (cos 0 = 1), f_2..f_4 = 0
  corner = np.asarray(problems.dtlz2(jnp.asarray(np.r_[0.0, 0.0, 0.0, [0.5] * 5][None])))
  np.testing.assert_allclose(corner, [[1.0, 0.0, 0.0, 0.0]], atol=1e-12)


def test_vehicle_safety_against_hand_values(x64):
  x = jnp.asarray([[1.0] * 5, [3.0] * 5, [1.0, 2.0, 3.0, 1.0, 2.0]])
  f = np.asarray(problems.vehicle_safety_raw(x))
  # the BoTorch formulas evaluated term by term in exact rational arithmetic
  np.testing.assert_allclose(f, [[1661.7078225, 8.3046, 0.0708],
                                 [1704.5588675, 10.5516, 0.1024],
                                 [1677.62353, 6.9088, 0.2052]], rtol=1e-12)
  y = np.asarray(problems.vehicle_safety(x))
  hi, lo = np.array(problems.VEHICLE_F_MAX), np.array(problems.VEHICLE_F_MIN)
  np.testing.assert_allclose(y, (f - lo) / (hi - lo), rtol=1e-12)
  # as released: y_1 rises with the raw mass (thicker members)
  assert y[1, 0] > y[0, 0]


def test_utility_matches_numpy_reference_and_is_continuous(x64):
  for name in PROBLEM_NAMES:
    p = problems.PROBLEMS[name]
    Y = np.random.default_rng(1).uniform(p.y_lower, p.y_upper, (50, p.num_outcomes))
    b1, b2, t = np.array(p.beta1), np.array(p.beta2), np.array(p.t)
    h = np.where(Y < t, b1 * Y + (b2 - b1) * t, b2 * Y)
    ref = 1.0 / (1.0 + np.exp(-(h.sum(1) - p.bias) / p.scale))
    np.testing.assert_allclose(np.asarray(problems.utility(p, Y)), ref, rtol=1e-12)
    np.testing.assert_allclose(problems.utility_np(p, Y), ref, rtol=1e-12)
    at = np.asarray(problems.utility(p, np.stack([t - 1e-9, t, t + 1e-9])))
    np.testing.assert_allclose(at, at[1], atol=1e-7)   # continuous at the thresholds
  # jit-compatible
  p = problems.PROBLEMS["vehicle_safety"]
  u = jax.jit(lambda y: problems.piecewise_linear_utility(y, p.beta1, p.beta2, p.t,
                                                          p.bias, p.scale))
  assert u(jnp.asarray([p.t])).shape == (1,)


def test_unit_round_trip_and_bad_inputs():
  p = problems.PROBLEMS["vehicle_safety"]
  U = np.random.default_rng(2).random((5, 5))
  np.testing.assert_allclose(np.asarray(problems.to_unit(p, problems.from_unit(p, U))), U,
                             atol=1e-6)
  with pytest.raises(ValueError, match="non-finite"):
    problems.dtlz2(np.full((1, 8), np.nan))
  with pytest.raises(ValueError, match="shape"):
    problems.vehicle_safety(np.ones((2, 4)))
  with pytest.raises(ValueError, match="non-finite"):
    problems.utility(p, np.array([[0.1, np.inf, 0.2]]))
  with pytest.raises(ValueError, match="shape"):
    problems.utility(p, np.ones((2, 4)))
  with pytest.raises(ValueError, match="unknown problem"):
    problems.utility("nope", np.ones((1, 3)))


# --- the simulated DM --------------------------------------------------------------------

@pytest.mark.parametrize("name", PROBLEM_NAMES)
def test_dm_goals_state_every_threshold_and_the_order(name):
  p = problems.PROBLEMS[name]
  outs = prompts.outcomes_of(p)
  for seed in range(12):
    st = simulated.read_statements([dm_lib.SimulatedDM(p, seed).goals()], outs)
    assert st.thresholds == {i: pytest.approx(t) for i, t in enumerate(p.t)}, seed
    assert list(np.argsort(-st.weights, kind="stable")) == list(np.argsort(-np.array(p.beta1)))


@pytest.mark.parametrize("name", PROBLEM_NAMES)
def test_dm_feedback_agrees_with_the_true_utility(name):
  p = problems.PROBLEMS[name]
  outs = prompts.outcomes_of(p)
  checked = 0
  for seed in range(15):
    dm = dm_lib.SimulatedDM(p, seed)
    arms, Y = _arms(name, 10, seed)
    U = dm.utility(Y)
    fb = [dm.feedback(arms, list(range(10)), rng_step=j) for j in range(3)]
    for message in fb:
      assert 2 <= len(simulated._sentences(message)) <= 4
    st = simulated.read_statements(fb, outs)
    for w, l in st.pairwise:
      assert U[w] > U[l]
    for w, group in st.best_of:
      assert all(U[w] > U[a] for a in group - {w})
    for a, lvl in st.verdicts.items():
      assert dm_lib.level(U[a]) == lvl
    for i, t in st.thresholds.items():
      assert t == pytest.approx(p.t[i], abs=5e-3)
    checked += len(st.pairwise) + len(st.best_of) + len(st.verdicts)
  assert checked >= 60


def test_dm_compare_and_rate_are_consistent():
  dm = dm_lib.SimulatedDM("vehicle_safety", seed=3)
  _, Y = _arms("vehicle_safety", 30, 3)
  U = dm.utility(Y)
  for a, b in itertools.combinations(range(30), 2):
    assert dm.compare(Y[a], Y[b]) == (0 if U[a] > U[b] else 1)
    assert dm.compare(Y[b], Y[a]) == 1 - dm.compare(Y[a], Y[b])
  ratings = np.array([dm.rate(y) for y in Y])
  assert set(ratings) <= set(range(1, 11))
  assert np.all(np.diff(ratings[np.argsort(U)]) >= 0)
  np.testing.assert_array_equal(ratings, np.rint(1 + 9 * U))
  tie = dm.compare(Y[0], Y[0])
  assert tie in (0, 1) and dm.compare(Y[0], Y[0]) == tie   # a seeded coin


def test_dm_phrasing_varies_with_the_seed():
  arms, _ = _arms("dtlz2", 8, 0)
  goals = {dm_lib.SimulatedDM("dtlz2", s).goals() for s in range(6)}
  feedback = {dm_lib.SimulatedDM("dtlz2", s).feedback(arms, [0, 1, 2, 3], 0) for s in range(6)}
  assert len(goals) == 6 and len(feedback) == 6
  dm = dm_lib.SimulatedDM("dtlz2", 1)
  assert dm.feedback(arms, [0, 1, 2], 5) == dm.feedback(arms, [0, 1, 2], 5)
  assert dm.feedback(arms, [0, 1, 2], 5) != dm.feedback(arms, [0, 1, 2], 6)
  with pytest.raises(ValueError, match="not among"):
    dm.feedback(arms, [0, 99])


# --- prompts -----------------------------------------------------------------------------

def test_prompt_round_trips():
  arms, Y = _arms("vehicle_safety", 6, 4)
  fb = ["I want y_1 to be at least 0.5.", "I prefer arm 2 to arm 4.\nIt is close."]
  text = prompts.translator_prompt("vehicle_safety", fb, arms, (4, 2))
  req = prompts.read_translator_prompt(text)
  assert req.outcomes == prompts.outcomes_of("vehicle_safety")
  assert req.feedback == ["I want y_1 to be at least 0.5.", "I prefer arm 2 to arm 4. It is close."]
  assert sorted(req.arms) == list(range(6))
  for i in arms:
    np.testing.assert_allclose(req.arms[i], arms[i], atol=1e-4)
  assert [a for a, _ in req.pair] == [4, 2]
  np.testing.assert_allclose(req.pair[0][1], arms[4], atol=1e-4)
  U = np.random.default_rng(5).random((6, 5))
  text = prompts.optimizer_prompt("vehicle_safety", fb, U, Y, 3)
  req = prompts.read_optimizer_prompt(text)
  np.testing.assert_allclose(req.X, U, atol=1e-4)
  np.testing.assert_allclose(req.Y, Y, atol=1e-4)
  assert req.n == 3 and len(req.feedback) == 2
  empty = prompts.read_optimizer_prompt(prompts.optimizer_prompt("dtlz2", [], [], [], 2))
  assert empty.X.shape == (0, 8) and empty.feedback == []
  with pytest.raises(ValueError, match="not a LILO prompt"):
    prompts.read_translator_prompt("hello")


def test_parse_translator_reply():
  good = {'```json\n{"reasoning": "a", "answer": 0}\n```': 0,
          'Thinking...\n```json\n{"reasoning": "b > a", "answer": 1}\n```': 1,
          '{"reasoning": "x", "answer": "1"}': 1,
          '```json\n{"reasoning": "uses \\(y_1\\)", "answer": 0}\n```': 0,
          'text {"answer": 2} then {"reasoning": "r", "answer": 1}': 1}
  for text, want in good.items():
    assert prompts.parse_translator_reply(text) == want, text
  bad = ["option_0", '{"reasoning": "r", "answer": 2}', '{"reasoning": "r", "answer": true}',
         '{"reasoning": "r"}', '```json\n{"reasoning": "r", "answer": ', "",
         '{"reasoning": "...", "answer": 0 or 1}', '[0]']
  for text in bad:
    assert prompts.parse_translator_reply(text) is None, text


def test_parse_optimizer_reply():
  ok = prompts.parse_optimizer_reply('```json\n{"0": [0.1, 2.0], "1": [-1, 0.5]}\n```', 2, 2)
  np.testing.assert_allclose(ok, [[0.1, 1.0], [0.0, 0.5]])
  for text in ('{"0": [0.1, 0.2]}', '{"0": [0.1], "1": [0.2, 0.3]}',
               '{"0": [0.1, "a"], "1": [0.2, 0.3]}', '{"0": [0.1, NaN], "1": [0.2, 0.3]}',
               '{"a": [0.1, 0.2], "b": [0.2, 0.3]}', "no json"):
    assert prompts.parse_optimizer_reply(text, 2, 2) is None, text


# --- offline roles and the translator ----------------------------------------------------

def _translator_accuracy(error_rate: float) -> float:
  """Pooled accuracy over both problems and two seeds: 25 random arms, the goals and
  three feedback rounds about five arms each, all 300 pairs."""
  hits = []
  for name in PROBLEM_NAMES:
    for seed in range(2):
      p = problems.PROBLEMS[name]
      dm = dm_lib.SimulatedDM(p, seed)
      arms, Y = _arms(name, 25, 100 + seed)
      fb = [dm.goals()] + [dm.feedback(arms, range(5 * j, 5 * j + 5), j) for j in range(3)]
      pairs = list(itertools.combinations(range(25), 2))
      t = translator.translate(simulated.OfflineTranslator(error_rate, seed=seed), p, fb,
                               arms, pairs, true_utility=dm.utility(Y))
      assert t.unparsed == 0 and len(t.comparisons) == len(pairs)
      hits.append(t.accuracy)
  return float(np.mean(hits))


def test_offline_translator_accuracy_and_error_rate():
  clean = _translator_accuracy(0.0)
  assert clean >= 0.9
  for e in (0.1, 0.2, 0.3):
    noisy = _translator_accuracy(e)
    # a flip with probability e: acc(e) = acc0 (1 - e) + (1 - acc0) e
    assert noisy == pytest.approx(clean * (1 - e) + (1 - clean) * e, abs=0.05), (e, noisy)
  assert 0.72 <= _translator_accuracy(0.2) / clean <= 0.9


def test_offline_roles_are_text_models():
  tr, pr = simulated.OfflineTranslator(), simulated.OfflineProposer()
  assert isinstance(tr, llm.TextModel) and isinstance(pr, llm.TextModel)
  with pytest.raises(ValueError, match="prompts"):
    tr.complete("one string", max_tokens=10)
  with pytest.raises(ValueError, match="max_tokens"):
    pr.complete(["x"], max_tokens=0)
  with pytest.raises(ValueError, match="error_rate"):
    simulated.OfflineTranslator(error_rate=1.5)
  assert prompts.parse_translator_reply(tr.complete(["what?"], max_tokens=50)[0]) is None


def test_offline_proposer_returns_points_in_the_unit_cube():
  arms, Y = _arms("dtlz2", 12, 7)
  U = np.random.default_rng(7).random((12, 8))
  dm = dm_lib.SimulatedDM("dtlz2", 0)
  text = prompts.optimizer_prompt("dtlz2", [dm.goals()], U, Y, 5)
  reply = simulated.OfflineProposer(seed=1).complete([text], max_tokens=2000)[0]
  X = prompts.parse_optimizer_reply(reply, 5, 8)
  assert X.shape == (5, 8) and np.all((X >= 0) & (X <= 1))
  assert reply == simulated.OfflineProposer(seed=1).complete([text], max_tokens=2000)[0]
  # perturbations of the best-scored points (sigma = 0.1 in 8 dimensions)
  best = U[np.argmax(dm.utility(Y))]
  assert np.linalg.norm(X[0] - best) < 0.6
  empty = prompts.optimizer_prompt("dtlz2", [], [], [], 3)
  X0 = prompts.parse_optimizer_reply(simulated.OfflineProposer().complete(
      [empty], max_tokens=2000)[0], 3, 8)
  assert X0.shape == (3, 8)


class _Garbage:
  def __init__(self):
    self.calls = 0

  def complete(self, prompts_, *, max_tokens, temperature=0.0, stop=()):
    self.calls += 1
    return ["I think the first one, probably."] * len(prompts_)


def test_translate_counts_garbage_and_checks_pairs(caplog):
  arms, Y = _arms("vehicle_safety", 4, 0)
  model = _Garbage()
  with caplog.at_level(logging.WARNING):
    t = translator.translate(model, "vehicle_safety", ["hi"], arms, [(0, 1), (2, 3)],
                             samples=2)
  assert t.unparsed == 4 and t.comparisons.shape == (0, 2) and np.isnan(t.accuracy)
  assert model.calls == 1 and "did not parse" in caplog.text
  with pytest.raises(ValueError, match="unknown arm 9"):
    translator.translate(model, "vehicle_safety", [], arms, [(0, 9)])
  bad = dict(arms)
  bad[2] = np.array([0.1, np.nan, 0.2])
  with pytest.raises(ValueError, match="non-finite"):
    translator.translate(model, "vehicle_safety", [], bad, [(0, 1)])
  assert model.calls == 1                     # the checks come before any call
  t = translator.translate(simulated.OfflineTranslator(), "vehicle_safety", [], arms,
                           np.zeros((0, 2), int))
  assert t.comparisons.shape == (0, 2)
