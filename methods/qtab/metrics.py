"""How a synthetic table is scored against the real one (Q-Tab's evaluation).

Frames have the schema's columns (numeric float64, categorical str). sdmetrics (SDV)
is called for what it provides: ``fidelity`` / ``column_shape_scores``
(QualityReport), ``detection`` (LogisticDetection), ``dcr`` /
``distances_to_closest_record`` (DCROverfittingProtection, ``calculate_dcr``). Ours:
``mle`` (train on synthetic, test on real; TabSyn, Zhang et al. 2024),
``alpha_precision_beta_recall`` (Alaa et al. 2022, as synthcity and TabSyn compute it),
``imputation_accuracy``, ``distinct_codes``, ``unseen_mask``.

sdmetrics draws folds and subsamples from NumPy's global generator: each call here
seeds it with ``seed`` and restores it after, so results are deterministic and the
caller's stream is untouched.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any, Sequence

import numpy as np
import pandas as pd
from sklearn import ensemble, metrics as sk_metrics, neighbors, preprocessing

from common.data import tables


@functools.cache
def _sdmetrics() -> types.SimpleNamespace:
  """sdmetrics' modules, imported on first use: sdmetrics imports torch (over a second),
  which importing the method should not cost."""
  # pylint: disable=import-outside-toplevel
  from sdmetrics import reports, single_column, single_table
  from sdmetrics.single_table.privacy import dcr_utils
  return types.SimpleNamespace(reports=reports, single_column=single_column,
                               single_table=single_table, dcr_utils=dcr_utils)

_TABLE = "table"
_MAX_CATEGORIES = 255  # HistGradientBoosting's limit for a categorical feature.


def _check(columns: Sequence[str], **frames: pd.DataFrame) -> list[pd.DataFrame]:
  """Each frame restricted to ``columns`` (in order), index reset; a ValueError names a
  missing column or an empty frame."""
  out = []
  for name, frame in frames.items():
    missing = [c for c in columns if c not in frame.columns]
    if missing:
      raise ValueError(f"{name} lacks column {missing[0]!r} (has {list(frame.columns)})")
    if len(frame) == 0:
      raise ValueError(f"{name} has no rows")
    out.append(frame[list(columns)].reset_index(drop=True))
  return out


@contextlib.contextmanager
def _global_numpy_seed(seed: int):
  """Seeds np.random (which sdmetrics and pandas' .sample use) and restores it."""
  state = np.random.get_state()
  np.random.seed(seed)
  try:
    yield
  finally:
    np.random.set_state(state)


def fidelity(real: pd.DataFrame, synthetic: pd.DataFrame, schema,
             seed: int = 0) -> dict[str, float]:
  """Column shapes and pair trends of sdmetrics' QualityReport.

  shapes = (1/D) sum_j (1 - KS_j or 1 - TV_j), TV = (1/2) sum_k |p_k - q_k|;
  trends = (1/P) sum_{j<k} (1 - |rho_jk - rho'_jk| / 2 for numeric pairs, else 1 - TV
  of the joint of (j, k), numeric columns in 10 bins). Every pair counts (sdmetrics
  0.32 by default averages only pairs with real |rho| > 0.5 or association > 0.3;
  those thresholds are set to 0, as in TabSyn, Zhang et al. 2024).

  Args:
    real, synthetic: frames. schema: the table's Schema.
    seed: seeds sdmetrics' row subsampling of pairs (tables over 50,000 rows).

  Returns:
    {"column_shapes", "pair_trends"}: floats in [0, 1], 1 = identical.

  Example:
    >>> fidelity(df, df, schema)  # {'column_shapes': 1.0, 'pair_trends': 1.0}
  """
  real, synthetic = _check(schema.columns, real=real, synthetic=synthetic)
  report = _sdmetrics().reports.QualityReport()
  report.real_correlation_threshold = 0
  report.real_association_threshold = 0
  with _global_numpy_seed(seed):
    report.generate({_TABLE: real}, {_TABLE: synthetic},
                    {"tables": {_TABLE: tables.sdmetrics_metadata(schema)}}, verbose=False)
  scores = report.get_properties().set_index("Property")["Score"]
  return {"column_shapes": float(scores["Column Shapes"]),
          "pair_trends": float(scores["Column Pair Trends"])}


def column_shape_scores(real: pd.DataFrame, synthetic: pd.DataFrame,
                        schema) -> dict[str, float]:
  """S_j = 1 - KS_j (numeric, sdmetrics' KSComplement) or 1 - TV_j (categorical,
  TVComplement): the per-column terms of ``fidelity``'s column shapes.

  Returns:
    {column: S_j in [0, 1]} in schema order.

  Example:
    >>> column_shape_scores(df, df, schema)  # {'x': 1.0, 'c': 1.0, ...}
  """
  real, synthetic = _check(schema.columns, real=real, synthetic=synthetic)
  out = {}
  for c in schema.columns:
    metric = (_sdmetrics().single_column.KSComplement if c in schema.numeric
              else _sdmetrics().single_column.TVComplement)
    out[c] = float(metric.compute(real[c], synthetic[c]))
  return out


def detection(real: pd.DataFrame, synthetic: pd.DataFrame, schema,
              seed: int = 0) -> float:
  """sdmetrics' LogisticDetection: 1 - (1/3) sum_f (2 max(AUC_f, 1/2) - 1), AUC_f a
  logistic regression's telling real from synthetic on fold f of 3 (seeded).

  Returns:
    A float in [0, 1]: 1 = indistinguishable, 0 = separable.

  Example:
    >>> detection(df, df.sample(frac=1.0), schema)  # about 1
  """
  real, synthetic = _check(schema.columns, real=real, synthetic=synthetic)
  with _global_numpy_seed(seed):
    return float(_sdmetrics().single_table.LogisticDetection.compute(
        real, synthetic, tables.sdmetrics_metadata(schema)))


def distances_to_closest_record(reference: pd.DataFrame, query: pd.DataFrame,
                                schema) -> np.ndarray:
  """DCR(y) = min_{x in reference} (1/D) sum_j d_j(x_j, y_j) for each query row y.

  d_j = min(|x_j - y_j| / range_j, 1) for numeric (range_j over the reference rows;
  1[x_j != y_j] if it is 0), 1[x_j != y_j] for categorical: sdmetrics'
  ``calculate_dcr``, the distance of its DCR metrics (~1 s per 10^6 row pairs).

  Returns:
    (n_query,) float64 distances in [0, 1]; 0 for a copy of a reference row.

  Example:
    >>> distances_to_closest_record(train, train.iloc[:5], schema)  # zeros
  """
  reference, query = _check(schema.columns, reference=reference, query=query)
  distances = _sdmetrics().dcr_utils.calculate_dcr(query, reference,
                                                   tables.sdmetrics_metadata(schema))
  return distances.to_numpy(dtype=np.float64)


def dcr(train: pd.DataFrame, holdout: pd.DataFrame, synthetic: pd.DataFrame, schema,
        num_rows_subsample: int | None = None, num_iterations: int = 1,
        seed: int = 0) -> dict[str, float]:
  """sdmetrics' DCROverfittingProtection: which real split the synthetic rows sit near.

  share = (1/m) sum_i 1[DCR_train(y_i) < DCR_holdout(y_i)] (about 1/2 without
  memorisation, for equally large splits), score = min(2 (1 - share), 1).

  Args:
    train: rows the generator was fit on; a larger train is subsampled to the
      holdout's size (seeded), so both splits are equally large. holdout: real rows it
      never saw. synthetic: generated rows. schema: Schema.
    num_rows_subsample: rows drawn from each frame per iteration (sdmetrics' speed
      knob, cost is quadratic in rows); None, or >= the smallest frame, for all.
    num_iterations: iterations averaged when subsampling. seed: for the subsamples.

  Returns:
    {"share_closer_to_train": share, "score": score}, averaged over iterations.

  Example:
    >>> dcr(train, holdout, generated, schema)["share_closer_to_train"]  # ~0.5 ideal
  """
  train, holdout, synthetic = _check(schema.columns, train=train, holdout=holdout,
                                     synthetic=synthetic)
  if len(train) > len(holdout):  # equal splits, so that 1/2 is the no-memorisation share
    train = train.sample(len(holdout), random_state=seed).reset_index(drop=True)
  if num_rows_subsample is not None:
    smallest = min(len(train), len(holdout), len(synthetic))
    if num_rows_subsample >= smallest:
      num_rows_subsample, num_iterations = None, 1
  with _global_numpy_seed(seed):
    out = _sdmetrics().single_table.DCROverfittingProtection.compute_breakdown(
        train, synthetic, holdout, tables.sdmetrics_metadata(schema), None,
        num_rows_subsample=num_rows_subsample, num_iterations=num_iterations)
  return {"share_closer_to_train":
              float(out["synthetic_data_percentages"]["closer_to_training"]),
          "score": float(out["score"])}


def _features(train: pd.DataFrame, test: pd.DataFrame, schema):
  """Features for HistGradientBoosting: numeric as is, categorical ordinal-encoded on
  train (categories unseen in train become NaN, i.e. missing)."""
  numeric = [c for c in schema.numeric if c != schema.target]
  categorical = [c for c in schema.categorical if c != schema.target]
  blocks_train, blocks_test, is_cat = [train[numeric].to_numpy(float)], [
      test[numeric].to_numpy(float)], [False] * len(numeric)
  if categorical:
    encoder = preprocessing.OrdinalEncoder(handle_unknown="use_encoded_value",
                                           unknown_value=np.nan)
    blocks_train.append(encoder.fit_transform(train[categorical].astype(str)))
    blocks_test.append(encoder.transform(test[categorical].astype(str)))
    is_cat += [len(c) <= _MAX_CATEGORIES for c in encoder.categories_]
  return np.hstack(blocks_train), np.hstack(blocks_test), np.array(is_cat, bool)


def mle(train: pd.DataFrame, test: pd.DataFrame, schema, seed: int = 0) -> float:
  """Machine-learning efficiency (TabSyn, Zhang et al. 2024): fit f on ``train``,
  score it on real ``test``; HistGradientBoosting, native categorical features.

  Scores (higher is better): ROC AUC of P(y = larger label) (binary), macro-F1
  (multiclass), R^2 = 1 - sum (y - f)^2 / sum (y - ybar)^2 (regression; TabSyn
  reports RMSE). A one-class ``train`` target gives a constant predictor: 0.5 AUC
  (binary), the macro-F1 of always predicting that class (multiclass).

  Args:
    train: rows to fit on (synthetic, or real for the reference). test: real held-out
      rows (both classes of a binary target). schema: Schema. seed: random_state.

  Returns:
    The score as a float.

  Example:
    >>> mle(generated, real_test, schema)  # vs mle(real_train, real_test, schema)
  """
  train, test = _check(schema.columns, train=train, test=test)
  x_train, x_test, is_cat = _features(train, test, schema)
  y_train, y_test = train[schema.target], test[schema.target]
  if schema.task == "regression":
    model = ensemble.HistGradientBoostingRegressor(
        categorical_features=is_cat, random_state=seed).fit(x_train, y_train)
    return float(sk_metrics.r2_score(y_test, model.predict(x_test)))
  y_train, y_test = y_train.astype(str).to_numpy(), y_test.astype(str).to_numpy()
  labels = np.union1d(y_train, y_test)
  binary = len(labels) <= 2
  if binary and len(np.unique(y_test)) < 2:
    raise ValueError(f"test target {schema.target!r} has one class: AUC undefined")
  if len(np.unique(y_train)) < 2:
    if binary:
      return 0.5
    constant = np.full(len(y_test), y_train[0])
    return float(sk_metrics.f1_score(y_test, constant, average="macro"))
  model = ensemble.HistGradientBoostingClassifier(
      categorical_features=is_cat, random_state=seed).fit(x_train, y_train)
  if binary:
    positive = labels[-1]
    column = list(model.classes_).index(positive)
    return float(sk_metrics.roc_auc_score(
        y_test == positive, model.predict_proba(x_test)[:, column]))
  return float(sk_metrics.f1_score(y_test, model.predict(x_test), average="macro"))


def _embed(real: pd.DataFrame, synthetic: pd.DataFrame, schema):
  """Rows as vectors: numeric min-max scaled on real, categorical one-hot on real's
  categories (synthcity's naive AlphaPrecision embedding)."""
  blocks = [[], []]
  for cols, encoder in ((schema.numeric, preprocessing.MinMaxScaler()),
                        (schema.categorical, preprocessing.OneHotEncoder(
                            handle_unknown="ignore", sparse_output=False))):
    if cols:
      encoder.fit(real[list(cols)])
      blocks[0].append(encoder.transform(real[list(cols)]))
      blocks[1].append(encoder.transform(synthetic[list(cols)]))
  return np.hstack(blocks[0]), np.hstack(blocks[1])


def alpha_precision_beta_recall(real: pd.DataFrame, synthetic: pd.DataFrame, schema,
                                seed: int = 0,
                                num_alphas: int = 30) -> dict[str, float]:
  """Delta-alpha-precision and Delta-beta-recall (Alaa et al. 2022), naive embedding.

  Real rows X (center c), synthetic Y (center c'), alpha_k = k / (K - 1):
    P(a) = (1/m) sum_j 1[|y_j - c| <= r_a], r_a the a-quantile of |x_i - c|;
    R(b) = (1/n) sum_i 1[|x_i - y*_i| <= |x_i - x*_i|] 1[|y*_i - c'| <= s_b], y*_i /
      x*_i the nearest synthetic / other real row, s_b the b-quantile of |y*_i - c'|;
    Delta P = 1 - sum_k |P(alpha_k) - alpha_k| / sum_k alpha_k, the same for R.
  Rows are min-max scaled numeric + one-hot categorical (fit on real): synthcity's
  naive ``AlphaPrecision``, as TabSyn reports it (sum_k alpha_k = K/2 stands for the
  paper's 1/(2 dalpha)); here all columns count and n != m is allowed. A same-law
  sample covers ~1/2 of the real rows, so its Delta R is ~0.5; a copy gets 1.

  Args:
    real, synthetic: frames. schema: Schema. seed: unused (deterministic).
    num_alphas: K.

  Returns:
    {"alpha_precision": Delta P, "beta_recall": Delta R}, each <= 1, 1 = ideal.

  Example:
    >>> alpha_precision_beta_recall(real, fresh_sample, schema)  # ~0.95, ~0.5
  """
  del seed
  real, synthetic = _check(schema.columns, real=real, synthetic=synthetic)
  x, y = _embed(real, synthetic, schema)
  alphas = np.linspace(0.0, 1.0, num_alphas)
  center = x.mean(0)
  radii = np.quantile(np.linalg.norm(x - center, axis=1), alphas)
  precision = np.mean(np.linalg.norm(y - center, axis=1)[None, :] <= radii[:, None], 1)
  real_to_real = neighbors.NearestNeighbors(n_neighbors=2).fit(x).kneighbors(x)[0][:, 1]
  real_to_syn, nearest = neighbors.NearestNeighbors(n_neighbors=1).fit(y).kneighbors(x)
  nearest_to_center = np.linalg.norm(y[nearest[:, 0]] - y.mean(0), axis=1)
  syn_radii = np.quantile(nearest_to_center, alphas)
  covered = real_to_syn[:, 0] <= real_to_real
  recall = np.mean(covered[None, :] & (nearest_to_center[None, :] <= syn_radii[:, None]),
                   1)
  delta = lambda curve: float(1.0 - np.sum(np.abs(curve - alphas)) / np.sum(alphas))
  return {"alpha_precision": delta(precision), "beta_recall": delta(recall)}


def imputation_accuracy(true: pd.DataFrame, imputed: pd.DataFrame,
                        columns: Sequence[str], schema) -> dict[str, float]:
  """Per column: accuracy (1/n) sum_i 1[x_i = x^_i] (categorical) or
  R^2 = 1 - sum_i (x_i - x^_i)^2 / sum_i (x_i - xbar)^2 (numeric).

  Args:
    true, imputed: the masked rows only, aligned by position. columns: the imputed
      columns. schema: Schema.

  Returns:
    {column: score}.

  Example:
    >>> imputation_accuracy(truth, filled, ["c"], schema)  # {'c': 0.9}
  """
  unknown = [c for c in columns if c not in schema.columns]
  if unknown:
    raise ValueError(f"column {unknown[0]!r} is not in the schema {schema.columns}")
  true, imputed = _check(columns, true=true, imputed=imputed)
  if len(true) != len(imputed):
    raise ValueError(f"true has {len(true)} rows, imputed {len(imputed)}")
  out = {}
  for c in columns:
    if c in schema.numeric:
      out[c] = float(sk_metrics.r2_score(true[c].to_numpy(float),
                                         imputed[c].to_numpy(float)))
    else:
      out[c] = float(np.mean(true[c].astype(str).to_numpy()
                             == imputed[c].astype(str).to_numpy()))
  return out


def _tokens(name: str, tokens: Any) -> np.ndarray:
  tokens = np.asarray(tokens)
  if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
    raise ValueError(f"{name} must be an integer array (n, L), got {tokens.dtype} "
                     f"{tokens.shape}")
  return tokens


def distinct_codes(tokens) -> int:
  """|{t_i : i = 1..n}|: the number of distinct code tuples (rows) of ``tokens`` (n, L).

  Example:
    >>> distinct_codes(np.array([[1, 2], [1, 2], [3, 4]]))  # 2
  """
  return int(np.unique(_tokens("tokens", tokens), axis=0).shape[0])


def unseen_mask(tokens, train_tokens) -> np.ndarray:
  """m_i = 1[t_i not in {s_j}]: rows of ``tokens`` (n, L) whose code tuple occurs in no
  row of ``train_tokens`` (n', L).

  Returns:
    (n,) bool.

  Example:
    >>> unseen_mask(np.array([[1, 2], [5, 6]]), np.array([[1, 2]]))  # [False, True]
  """
  tokens, train_tokens = _tokens("tokens", tokens), _tokens("train_tokens", train_tokens)
  if tokens.shape[1] != train_tokens.shape[1]:
    raise ValueError(f"tokens have L={tokens.shape[1]}, train_tokens "
                     f"L={train_tokens.shape[1]}")
  both = np.concatenate([train_tokens, tokens]).astype(np.int64)
  _, ids = np.unique(both, axis=0, return_inverse=True)
  ids = ids.reshape(-1)
  return ~np.isin(ids[len(train_tokens):], ids[:len(train_tokens)])
