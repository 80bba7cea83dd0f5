"""Tests of methods/qtab/metrics.py: sdmetrics wrappers, MLE, alpha-precision /
beta-recall, imputation and code-tuple helpers, on small generated tables."""

import warnings

import numpy as np
import pandas as pd
import pytest
import threadpoolctl
from sdmetrics import single_table as sd_single_table

from common.data.tables import Schema, sdmetrics_metadata
from methods.qtab import metrics


SCHEMA = Schema(numeric=("x1", "x2"), categorical=("c", "y"), target="y")


def _table(n, seed, shift=0.0, independent_target=False):
  """x1 ~ N(shift, 1), x2 = x1 + N(0, 0.5^2), c in {a, b, c} depends on x1, and
  y = 1[x1 + 0.5 1[c = a] + noise > 0] (or a fair coin)."""
  rng = np.random.default_rng(seed)
  x1 = rng.normal(shift, 1.0, n)
  x2 = x1 + 0.5 * rng.normal(size=n)
  c = np.where(x1 + 0.5 * rng.normal(size=n) > 0.5, "a",
               np.where(rng.random(n) < 0.5, "b", "c"))
  logit = x1 + 0.5 * (c == "a") + 0.3 * rng.normal(size=n)
  y = rng.random(n) < 0.5 if independent_target else logit > 0.25
  return pd.DataFrame({"x1": x1, "x2": x2, "c": c, "y": np.where(y, "1", "0")})


def _independent_columns(frame, seed):
  """Each column permuted on its own: the same marginals, no dependence."""
  rng = np.random.default_rng(seed)
  return pd.DataFrame({c: frame[c].to_numpy()[rng.permutation(len(frame))]
                       for c in frame.columns})


@pytest.fixture(scope="module", autouse=True)
def _one_openmp_thread():
  """HistGradientBoosting's OpenMP threads on a tiny table cost more than they save
  (10x slower on a busy 2-core machine)."""
  with threadpoolctl.threadpool_limits(1, user_api="openmp"):
    yield


@pytest.fixture(scope="module")
def real():
  return _table(300, 0)


def test_fidelity_identity_vs_broken_dependence_and_shift(real):
  same = metrics.fidelity(real, real, SCHEMA)
  assert same["column_shapes"] == pytest.approx(1.0)
  assert same["pair_trends"] == pytest.approx(1.0)
  shuffled = metrics.fidelity(real, _independent_columns(real, 1), SCHEMA)
  assert shuffled["column_shapes"] == pytest.approx(1.0)  # marginals kept
  assert shuffled["pair_trends"] < 0.85
  shifted = metrics.fidelity(real, _table(300, 2, shift=1.5), SCHEMA)
  assert shifted["column_shapes"] < 0.7
  fresh = metrics.fidelity(real, _table(300, 3), SCHEMA)
  assert fresh["column_shapes"] > 0.85 and fresh["pair_trends"] > 0.85


def test_column_shape_scores_average_to_fidelity(real):
  other = _table(300, 2, shift=0.5)
  per_column = metrics.column_shape_scores(real, other, SCHEMA)
  assert list(per_column) == list(SCHEMA.columns)
  assert per_column["x1"] < 0.9
  assert np.mean(list(per_column.values())) == pytest.approx(
      metrics.fidelity(real, other, SCHEMA)["column_shapes"])


def test_detection_same_distribution_high_shifted_low(real):
  assert metrics.detection(real, _table(300, 4), SCHEMA) > 0.7
  assert metrics.detection(real, _table(300, 4, shift=2.0), SCHEMA) < 0.3
  a = metrics.detection(real, _table(300, 4), SCHEMA, seed=3)
  assert a == metrics.detection(real, _table(300, 4), SCHEMA, seed=3)


def _brute_force_dcr(reference, query):
  """min over reference rows of the mean per-column distance, in plain numpy."""
  num = list(SCHEMA.numeric)
  rng_ = reference[num].max().to_numpy() - reference[num].min().to_numpy()
  qn, rn = query[num].to_numpy(), reference[num].to_numpy()
  d_num = np.minimum(np.abs(qn[:, None, :] - rn[None, :, :]) / rng_, 1.0).sum(-1)
  cat = list(SCHEMA.categorical)
  d_cat = (query[cat].to_numpy()[:, None, :]
           != reference[cat].to_numpy()[None, :, :]).sum(-1)
  return ((d_num + d_cat) / len(SCHEMA.columns)).min(1)


def test_distances_to_closest_record_zero_for_copies_and_brute_force(real):
  train = real.iloc[:40]
  copies = train.iloc[[3, 7, 7, 11]]
  np.testing.assert_allclose(
      metrics.distances_to_closest_record(train, copies, SCHEMA), 0.0, atol=1e-12)
  query = _table(15, 5, shift=0.7)
  got = metrics.distances_to_closest_record(train, query, SCHEMA)
  assert got.shape == (15,)
  np.testing.assert_allclose(got, _brute_force_dcr(train, query), atol=1e-12)


def test_dcr_share_matches_per_row_distances_and_memorisation(real):
  train, holdout = real.iloc[:150], real.iloc[150:]
  fresh = _table(120, 6)
  out = metrics.dcr(train, holdout, fresh, SCHEMA)
  to_train = metrics.distances_to_closest_record(train, fresh, SCHEMA)
  to_holdout = metrics.distances_to_closest_record(holdout, fresh, SCHEMA)
  share = np.mean(to_train < to_holdout)
  assert out["share_closer_to_train"] == pytest.approx(share)
  assert out["score"] == pytest.approx(min(2 * (1 - share), 1.0))
  assert 0.3 < share < 0.7
  memorised = metrics.dcr(train, holdout, train.iloc[:100], SCHEMA)
  assert memorised["share_closer_to_train"] == 1.0 and memorised["score"] == 0.0
  sub = metrics.dcr(train, holdout, fresh, SCHEMA, num_rows_subsample=60,
                    num_iterations=2, seed=1)
  assert sub == metrics.dcr(train, holdout, fresh, SCHEMA, num_rows_subsample=60,
                            num_iterations=2, seed=1)


def test_mle_learnable_chance_single_class_and_regression(real):
  test = _table(400, 7)
  assert metrics.mle(real, test, SCHEMA) > 0.85
  noise = metrics.mle(_table(300, 8, independent_target=True),
                      _table(400, 9, independent_target=True), SCHEMA)
  assert abs(noise - 0.5) < 0.1
  one_class = real.assign(y="1")
  assert metrics.mle(one_class, test, SCHEMA) == 0.5
  unseen = test.assign(c=np.where(np.arange(400) % 5 == 0, "zzz", test["c"]))
  assert metrics.mle(real, unseen, SCHEMA) > 0.8  # unseen categories do not crash
  reg = Schema(numeric=("x1", "x2"), categorical=("c", "y"), target="x2")
  assert reg.task == "regression"
  assert metrics.mle(real, test, reg) > 0.6


def test_mle_multiclass_macro_f1(real):
  multi = Schema(numeric=("x1", "x2"), categorical=("c", "y"), target="c")
  test = _table(400, 10)
  score = metrics.mle(real, test, multi)
  assert 0.4 < score <= 1.0
  constant = metrics.mle(real.assign(c="a"), test, multi)
  share_a = np.mean(test["c"] == "a")
  assert constant == pytest.approx(2 * share_a / (1 + share_a) / 3)


def test_alpha_precision_beta_recall_directions(real):
  """synthcity's beta-recall counts a real row as covered when its nearest synthetic
  row is closer than its nearest other real row: about 1/2 of the rows for an
  independent sample of the same size, so Delta-beta is about 0.5 there (TabSyn's
  best beta-recalls are below 0.5 too) and 1 only for a copy."""
  fresh = metrics.alpha_precision_beta_recall(real, _table(300, 11), SCHEMA)
  assert fresh["alpha_precision"] > 0.8 and 0.4 < fresh["beta_recall"] < 0.7
  copy = metrics.alpha_precision_beta_recall(real, real, SCHEMA)
  assert copy["alpha_precision"] > 0.95 and copy["beta_recall"] > 0.95
  shifted = metrics.alpha_precision_beta_recall(real, _table(300, 11, shift=1.5), SCHEMA)
  assert shifted["alpha_precision"] < fresh["alpha_precision"] - 0.3
  big = _table(1000, 12)
  collapsed = big[big["c"] == "a"].iloc[:300]  # modes b and c dropped
  dropped = metrics.alpha_precision_beta_recall(real, collapsed, SCHEMA)
  assert dropped["alpha_precision"] < fresh["alpha_precision"] - 0.3
  assert dropped["beta_recall"] < fresh["beta_recall"] - 0.1


def test_beta_recall_drops_when_half_the_support_is_covered(real):
  numeric = Schema(numeric=("x1", "x2"), categorical=(), target="x2")
  real = real[["x1", "x2"]]
  big = _table(1000, 12)[["x1", "x2"]]
  fresh = metrics.alpha_precision_beta_recall(real, big.iloc[:300], numeric)
  half = metrics.alpha_precision_beta_recall(real, big[big["x1"] > 0].iloc[:300],
                                             numeric)
  assert half["beta_recall"] < fresh["beta_recall"] - 0.1


def test_alpha_precision_against_direct_formula():
  """On numeric-only data the precision curve is the share of synthetic rows inside
  each real alpha-quantile ball (min-max scaled), checked with a loop."""
  schema = Schema(numeric=("x1", "x2"), categorical=(), target="x2")
  real = _table(200, 13)[["x1", "x2"]]
  syn = _table(200, 14, shift=0.5)[["x1", "x2"]]
  lo, hi = real.min().to_numpy(), real.max().to_numpy()
  x, y = (real.to_numpy() - lo) / (hi - lo), (syn.to_numpy() - lo) / (hi - lo)
  alphas = np.linspace(0, 1, 30)
  center = x.mean(0)
  dx, dy = np.linalg.norm(x - center, axis=1), np.linalg.norm(y - center, axis=1)
  curve = [np.mean(dy <= np.quantile(dx, a)) for a in alphas]
  expected = 1 - np.sum(np.abs(np.array(curve) - alphas)) / np.sum(alphas)
  got = metrics.alpha_precision_beta_recall(real, syn, schema)["alpha_precision"]
  assert got == pytest.approx(expected)


def test_imputation_accuracy_brute_force():
  rng = np.random.default_rng(15)
  true = _table(50, 15)
  imputed = true.copy()
  flip = rng.random(50) < 0.3
  imputed.loc[flip, "c"] = "b"
  imputed["x1"] = true["x1"] + 0.3 * rng.normal(size=50)
  got = metrics.imputation_accuracy(true, imputed, ["c", "x1"], SCHEMA)
  acc = sum(a == b for a, b in zip(true["c"], imputed["c"])) / 50
  t, p = true["x1"].to_numpy(), imputed["x1"].to_numpy()
  r2 = 1 - np.sum((t - p) ** 2) / np.sum((t - t.mean()) ** 2)
  assert got == pytest.approx({"c": acc, "x1": r2})
  with pytest.raises(ValueError, match="'zz'"):
    metrics.imputation_accuracy(true, imputed, ["zz"], SCHEMA)


def test_distinct_codes_and_unseen_mask_against_sets():
  rng = np.random.default_rng(16)
  tokens = rng.integers(0, 3, (200, 3))
  train = rng.integers(0, 3, (40, 3))
  assert metrics.distinct_codes(tokens) == len({tuple(t) for t in tokens})
  seen = {tuple(t) for t in train}
  expected = np.array([tuple(t) not in seen for t in tokens])
  np.testing.assert_array_equal(metrics.unseen_mask(tokens, train), expected)
  assert metrics.unseen_mask(train, train).sum() == 0
  with pytest.raises(ValueError, match="L=3"):
    metrics.unseen_mask(tokens, train[:, :2])
  with pytest.raises(ValueError, match="integer"):
    metrics.distinct_codes(tokens.astype(float))


@pytest.mark.parametrize("fn", [metrics.fidelity, metrics.detection,
                                metrics.column_shape_scores,
                                metrics.alpha_precision_beta_recall, metrics.mle])
def test_bad_frames_raise(real, fn):
  with pytest.raises(ValueError, match="'x2'"):
    fn(real, real.drop(columns=["x2"]), SCHEMA)
  with pytest.raises(ValueError, match="no rows"):
    fn(real, real.iloc[:0], SCHEMA)


def test_sdmetrics_calls_are_quiet_and_leave_global_rng_alone(real, capsys):
  state = np.random.get_state()[1].copy()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    metrics.fidelity(real, _table(300, 17), SCHEMA)
    metrics.detection(real, _table(300, 17), SCHEMA)
  assert capsys.readouterr().out == ""
  np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_dcr_agrees_with_sdmetrics_directly(real):
  """The wrapper passes the frames to DCROverfittingProtection in the right order."""
  train, holdout, syn = real.iloc[:150], real.iloc[150:], _table(80, 18)
  score = sd_single_table.DCROverfittingProtection.compute(
      train, syn, holdout, sdmetrics_metadata(SCHEMA), None)
  assert metrics.dcr(train, holdout, syn, SCHEMA)["score"] == pytest.approx(score)
