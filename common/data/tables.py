"""Mixed-type tables (numeric + categorical columns) for tabular generators such as Q-Tab.

A ``Table`` is a pandas frame whose columns follow its ``Schema``: numeric columns as
float64, then categorical columns as strings (object dtype), no missing values. The
bundled tables need no download; ``load_csv`` and ``load_tabsyn`` read the user's own
files (TabSyn's processed layout ``data/<name>/{info.json, train.csv, test.csv}``).
``TableEncoder`` turns a frame into model inputs (quantile-normalised numerics,
integer category codes) and back, as TabDDPM and TabSyn preprocess.

Bundled tables (rows; target; integer codes become the strings "1", "2", ...):
- ``iris`` (150; categorical ``species``): the 4 measurements numeric.
- ``wine`` (178; categorical ``cultivar``): 13 numeric.
- ``breast_cancer`` (569; categorical ``diagnosis``): 30 numeric.
- ``diabetes`` (442; numeric ``progression``, unscaled): age, bmi, bp, s1..s6 numeric,
  ``sex`` categorical.
- ``fair`` (6366; categorical ``affair`` = "yes" if affairs > 0, the raw ``affairs``
  column dropped): age, yrs_married, children numeric; rate_marriage, religious, educ,
  occupation, occupation_husb categorical (coded levels).
- ``randhie`` (20190; numeric ``mdvis``): lncoins (5 plan levels, but a log coinsurance
  rate used as a regressor), lpi, fmde, physlm, disea numeric; the binary idp, hlthg,
  hlthf, hlthp categorical.
- ``modechoice`` (840; categorical ``choice``): ttme, invc, invt, gc, hinc, psize
  numeric; ``mode`` categorical; the id ``individual`` dropped.
- ``anes96`` (944; categorical ``vote``): popul, TVnews (days a week), age, income
  numeric; PID, educ, selfLR, ClinLR, DoleLR categorical (ordinal codes); ``logpopul``
  (= log(popul + 0.1)) dropped.
- ``mixed`` (3000, generated with a fixed numpy seed; categorical ``churn``):
      region ~ Cat(north .4, south .3, east .2, west .1)
      age ~ UniformInt[18, 80]
      income = exp(N(m_region, 0.5)), m = (north 3.0, south 2.6, east 3.3, west 2.8)
      spending = sqrt(income) (1 + 0.5 sin(age / 8)) + 0.3 N(0, 1)
      plan ~ softmax(0, 0.05 (age - 50), log(income) - 3) over (basic, plus, premium)
      churn = "yes" w.p. sigmoid(1 - 0.35 spending + 0.03 (age - 50) + 1.5 [west]).

scikit-learn's other bundled tables (digits, linnerud) have numeric features only, and
sdmetrics bundles one 215-row demo table with missing values and dates; no installed
dependency bundles more categorical-heavy real tables than statsmodels' above.

Example:
    >>> train, test = split(load_table("fair"), test_fraction=0.2, seed=0)
    >>> encoder = TableEncoder.fit(train)
    >>> enc = encoder.encode(train.frame)   # Encoded(numeric (n, 3), categorical (n, 6))
    >>> frame = encoder.decode(enc)         # equals train.frame
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import NamedTuple

import numpy as np
import pandas as pd

TABLES = ("iris", "wine", "breast_cancer", "diabetes", "fair", "randhie",
          "modechoice", "anes96", "mixed")
TABSYN_TASKS = ("binclass", "multiclass", "regression")


@dataclasses.dataclass(frozen=True)
class Schema:
  """Column roles of a table; ``columns`` (numeric, then categorical) is the order."""
  numeric: tuple[str, ...]
  categorical: tuple[str, ...]
  target: str

  def __post_init__(self):
    object.__setattr__(self, "numeric", tuple(self.numeric))
    object.__setattr__(self, "categorical", tuple(self.categorical))
    seen = set()
    for c in self.columns:
      if not isinstance(c, str):
        raise ValueError(f"column names must be strings, got {c!r}")
      if c in seen:
        raise ValueError(f"column {c!r} is listed twice in the schema")
      seen.add(c)
    if self.target not in seen:
      raise ValueError(f"target {self.target!r} is not among the numeric or categorical "
                       f"columns ({', '.join(self.columns)})")

  @property
  def task(self) -> str:
    return "classification" if self.target in self.categorical else "regression"

  @property
  def columns(self) -> tuple[str, ...]:
    return self.numeric + self.categorical


class Table(NamedTuple):
  """A named frame (columns == schema.columns; numeric float64, categorical str)."""
  name: str
  frame: pd.DataFrame
  schema: Schema


def _as_category(values: pd.Series) -> pd.Series:
  """Strings for a categorical column; integer-valued numbers as "1", not "1.0"."""
  if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
    x = values.to_numpy(np.float64)
    if np.all(x == np.round(x)):
      return pd.Series(x.astype(np.int64).astype(str), index=values.index, dtype=object)
  return values.astype(str).astype(object)


def _make_table(name: str, frame: pd.DataFrame, schema: Schema) -> Table:
  out = pd.DataFrame(index=range(len(frame)))
  for c in schema.numeric:
    out[c] = frame[c].to_numpy(np.float64)
  for c in schema.categorical:
    out[c] = _as_category(frame[c].reset_index(drop=True))
  if out.isna().to_numpy().any():
    raise ValueError(f"table {name!r} has missing values")
  return Table(name, out, schema)


_SKLEARN_TARGETS = {"iris": "species", "wine": "cultivar",
                    "breast_cancer": "diagnosis", "diabetes": "progression"}
_STATSMODELS_SCHEMAS = {  # name: (numeric, categorical, target)
    "fair": (("age", "yrs_married", "children"), ("rate_marriage", "religious", "educ",
             "occupation", "occupation_husb", "affair"), "affair"),
    "randhie": (("lncoins", "lpi", "fmde", "physlm", "disea", "mdvis"),
                ("idp", "hlthg", "hlthf", "hlthp"), "mdvis"),
    "modechoice": (("ttme", "invc", "invt", "gc", "hinc", "psize"),
                   ("mode", "choice"), "choice"),
    "anes96": (("popul", "TVnews", "age", "income"),
               ("PID", "educ", "selfLR", "ClinLR", "DoleLR", "vote"), "vote"),
}


def _sklearn_table(name: str):
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  target = _SKLEARN_TARGETS[name]
  kwargs = {"scaled": False} if name == "diabetes" else {}
  bunch = getattr(datasets, f"load_{name}")(as_frame=True, **kwargs)
  frame = bunch.frame.rename(columns={"target": target})
  if name == "diabetes":
    numeric = [c for c in frame.columns if c != "sex"]
    return frame, Schema(tuple(numeric), ("sex",), target)
  frame[target] = np.asarray(bunch.target_names)[bunch.target.to_numpy()]
  return frame, Schema(tuple(c for c in frame.columns if c != target), (target,), target)


def _statsmodels_table(name: str):
  import statsmodels.api as sm  # pylint: disable=g-import-not-at-top
  frame = getattr(sm.datasets, name).load_pandas().data.copy()
  if name == "fair":
    frame["affair"] = np.where(frame["affairs"] > 0, "yes", "no")
  return frame, Schema(*_STATSMODELS_SCHEMAS[name])


def _mixed_table(n: int = 3000, seed: int = 0):
  rng = np.random.default_rng(seed)
  region = rng.choice(["north", "south", "east", "west"], size=n, p=[.4, .3, .2, .1])
  age = rng.integers(18, 81, size=n).astype(np.float64)
  mean = pd.Series(region).map({"north": 3.0, "south": 2.6, "east": 3.3, "west": 2.8})
  income = np.exp(rng.normal(mean.to_numpy(), 0.5))
  spending = np.sqrt(income) * (1 + 0.5 * np.sin(age / 8)) + 0.3 * rng.normal(size=n)
  logits = np.stack([np.zeros(n), 0.05 * (age - 50), np.log(income) - 3], axis=1)
  probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  plan = np.array(["basic", "plus", "premium"])[
      (rng.random((n, 1)) > probs.cumsum(1)).sum(1)]
  churn_logit = 1 - 0.35 * spending + 0.03 * (age - 50) + 1.5 * (region == "west")
  churn = np.where(rng.random(n) < 1 / (1 + np.exp(-churn_logit)), "yes", "no")
  frame = pd.DataFrame({"age": age, "income": income, "spending": spending,
                        "region": region, "plan": plan, "churn": churn})
  return frame, Schema(("age", "income", "spending"), ("region", "plan", "churn"),
                       "churn")


def load_table(name: str, max_rows: int | None = None, seed: int = 0) -> Table:
  """Loads a bundled table (see the module docstring).

  Args:
    name: one of ``TABLES``.
    max_rows: keep a random subset of at most this many rows (in the original order).
    seed: the subset's seed.

  Example:
    >>> load_table("iris").frame.shape
    (150, 5)
  """
  if name not in TABLES:
    raise ValueError(f"unknown table {name!r}; expected one of {', '.join(TABLES)}")
  if name in _SKLEARN_TARGETS:
    frame, schema = _sklearn_table(name)
  elif name == "mixed":
    frame, schema = _mixed_table()
  else:
    frame, schema = _statsmodels_table(name)
  table = _make_table(name, frame, schema)
  if max_rows is not None and max_rows < len(table.frame):
    if max_rows < 1:
      raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    rows = np.random.default_rng(seed).choice(len(table.frame), max_rows, replace=False)
    table = table._replace(frame=table.frame.iloc[np.sort(rows)].reset_index(drop=True))
  return table


def _read_csv(path: str, schema: Schema, name: str, names=None) -> Table:
  """Reads a CSV (header row, or ``names`` for a headerless file) into a Table."""
  if not os.path.isfile(path):
    raise ValueError(f"table file not found: {path}")
  try:
    raw = pd.read_csv(path, dtype=str, keep_default_na=False,
                      header=None if names else "infer", names=names)
  except pd.errors.EmptyDataError:
    raise ValueError(f"table file {path} is empty") from None
  for c in schema.columns:
    if c not in raw.columns:
      raise ValueError(f"column {c!r} named by the schema is not in {path} "
                       f"(columns: {', '.join(map(str, raw.columns))})")
  frame = pd.DataFrame(index=range(len(raw)))
  for c in schema.numeric:
    x = pd.to_numeric(raw[c].str.strip(), errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
      row = int(bad[0])
      raise ValueError(f"numeric column {c!r} of {path} has the non-numeric value "
                       f"{raw[c].iloc[row]!r} in row {row} (file line {row + 1 + (not names)})")
    frame[c] = x
  for c in schema.categorical:
    frame[c] = raw[c].astype(object).to_numpy()
  return Table(name, frame, schema)


def load_csv(path: str | os.PathLike, schema: Schema, name: str | None = None) -> Table:
  """Reads the schema's columns from a CSV file with a header row (other columns are
  ignored; categorical cells are kept as written). ``name`` defaults to the file's
  stem. A missing file or column, or a non-numeric cell in a numeric column, raises
  a one-line ValueError naming it.

  Example:
    >>> write_csv(load_table("iris"), "/tmp/iris.csv")
    >>> load_csv("/tmp/iris.csv", load_table("iris").schema).frame.shape
    (150, 5)
  """
  path = os.fspath(path)
  name = name or os.path.splitext(os.path.basename(path))[0]
  return _read_csv(path, schema, name)


def write_csv(table: Table, path: str | os.PathLike) -> None:
  """Writes ``table.frame`` (header row, no index) so that ``load_csv`` reads it back."""
  path = os.fspath(path)
  if os.path.dirname(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
  table.frame.to_csv(path, index=False)


def _tabsyn_files(directory: str, info: dict) -> list[tuple[str, bool]]:
  """(path, processed) for train and test: ``<dir>/{train,test}.csv``, else the raw
  info["data_path"] / info["test_path"] (relative to the folder or the cwd)."""
  files = []
  for default, key in (("train.csv", "data_path"), ("test.csv", "test_path")):
    path, processed = os.path.join(directory, default), True
    if not os.path.isfile(path) and info.get(key):
      in_dir = os.path.join(directory, info[key])
      path, processed = (in_dir if os.path.isfile(in_dir) else info[key]), False
    if not os.path.isfile(path):
      raise ValueError(f"TabSyn table file not found: {path}")
    files.append((path, processed))
  return files


def load_tabsyn(directory: str | os.PathLike, name: str | None = None
                ) -> tuple[Table, Table]:
  """Reads (train, test) from TabSyn's layout (github.com/amazon-science/tabsyn).

  ``<dir>/info.json`` holds "task_type" (binclass | multiclass | regression),
  "column_names" (null: the CSV header), and "num_col_idx", "cat_col_idx",
  "target_col_idx" (one index) into the columns. Rows come from ``<dir>/train.csv``
  and ``<dir>/test.csv`` (what TabSyn's process_dataset.py writes), else from the raw
  "data_path" / "test_path" CSVs ("header": null means no header row). The target is
  categorical for binclass/multiclass, numeric for regression.

  Example:
    >>> train, test = load_tabsyn("tabsyn/data/adult")  # doctest: +SKIP
  """
  directory = os.fspath(directory)
  info_path = os.path.join(directory, "info.json")
  if not os.path.isfile(info_path):
    raise ValueError(f"TabSyn info file not found: {info_path}")
  with open(info_path) as f:
    info = json.load(f)
  task = info.get("task_type")
  if task not in TABSYN_TASKS:
    raise ValueError(f"{info_path}: task_type must be one of {', '.join(TABSYN_TASKS)}, "
                     f"got {task!r}")
  files = _tabsyn_files(directory, info)
  names = info.get("column_names") or list(pd.read_csv(files[0][0], nrows=0).columns)
  idx = {k: list(info.get(k) or []) for k in ("num_col_idx", "cat_col_idx",
                                                "target_col_idx")}
  for k, v in idx.items():
    if any(not isinstance(i, int) or not 0 <= i < len(names) for i in v):
      raise ValueError(f"{info_path}: {k} {v} must index the {len(names)} columns")
  if len(idx["target_col_idx"]) != 1:
    raise ValueError(f"{info_path}: target_col_idx must hold one index, got "
                     f"{idx['target_col_idx']}")
  numeric = [names[i] for i in idx["num_col_idx"]]
  categorical = [names[i] for i in idx["cat_col_idx"]]
  target = names[idx["target_col_idx"][0]]
  (numeric if task == "regression" else categorical).append(target)
  schema = Schema(tuple(numeric), tuple(categorical), target)
  name = name or info.get("name") or os.path.basename(os.path.normpath(directory))
  headerless = "header" in info and info["header"] is None
  return tuple(_read_csv(path, schema, name, names if headerless and not done else None)
               for path, done in files)


def split(table: Table, test_fraction: float, seed: int) -> tuple[Table, Table]:
  """Splits rows into (train, test), stratified by the target for classification."""
  from sklearn import model_selection  # pylint: disable=g-import-not-at-top
  if not 0 < test_fraction < 1:
    raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
  stratify = (table.frame[table.schema.target]
              if table.schema.task == "classification" else None)
  train, test = model_selection.train_test_split(
      np.arange(len(table.frame)), test_size=test_fraction, random_state=seed,
      stratify=stratify)
  return tuple(table._replace(frame=table.frame.iloc[np.sort(rows)]
                              .reset_index(drop=True)) for rows in (train, test))


def check_rows(table: Table, batch_size: int) -> None:
  """Raises ValueError when the table has fewer rows than one batch."""
  n = len(table.frame)
  if n < batch_size:
    raise ValueError(f"table {table.name!r} has {n} rows, fewer than the batch size "
                     f"{batch_size}")


def sdmetrics_metadata(schema: Schema) -> dict:
  """sdmetrics' single-table metadata: {"columns": {name: {"sdtype": ...}}}."""
  columns = {c: {"sdtype": "numerical"} for c in schema.numeric}
  columns.update({c: {"sdtype": "categorical"} for c in schema.categorical})
  return {"columns": columns}


class Encoded(NamedTuple):
  """Model inputs: numeric (n, n_numeric) float32 ~N(0, 1); categorical (n, n_cat) int32."""
  numeric: np.ndarray
  categorical: np.ndarray


def _category_key(value: str):
  try:
    x = float(value)
  except ValueError:
    return (1, 0.0, value)
  return (0, x, value) if math.isfinite(x) else (1, 0.0, value)


class TableEncoder:
  """Quantile-normalises numeric columns and indexes categories, fitted on a table.

  Numerics go through sklearn's QuantileTransformer (normal output), as TabDDPM and
  TabSyn do. Like theirs, it sends every training value tied with a column's minimum
  (maximum) to about -5.2 (+5.2), so a discrete column with many tied extremes
  (fair's children, randhie's mdvis) is far from N(0, 1); continuous ones are close.

  Attributes:
    schema: the fitted table's schema.
    categories: per categorical column, its sorted category strings.
    cardinalities: per categorical column, its number of categories.
  """

  def __init__(self, schema: Schema, categories, transformer, low, high, integer):
    self.schema = schema
    self.categories = tuple(tuple(c) for c in categories)
    self.cardinalities = tuple(len(c) for c in self.categories)
    self._transformer, self._low, self._high, self._integer = (
        transformer, low, high, integer)

  @classmethod
  def fit(cls, table: Table, max_categories: int = 64, n_quantiles: int = 1000,
          seed: int = 0) -> "TableEncoder":
    """Fits the encoder: one QuantileTransformer (normal output) over numeric columns.

    Example:
      >>> encoder = TableEncoder.fit(load_table("fair"))
      >>> encoder.cardinalities
      (5, 4, 6, 6, 6, 2)
    """
    from sklearn import preprocessing  # pylint: disable=g-import-not-at-top
    frame, schema = table.frame, table.schema
    if not len(frame):
      raise ValueError(f"table {table.name!r} has no rows to fit an encoder on")
    categories = []
    for c in schema.categorical:
      values = sorted(set(frame[c].astype(str)), key=_category_key)
      if len(values) > max_categories:
        raise ValueError(f"column {c!r} has {len(values)} categories, more than "
                         f"max_categories={max_categories}")
      categories.append(values)
    x = frame[list(schema.numeric)].to_numpy(np.float64).reshape(len(frame), -1)
    transformer = None
    if schema.numeric:
      transformer = preprocessing.QuantileTransformer(
          output_distribution="normal", n_quantiles=min(n_quantiles, len(frame)),
          subsample=10**9, random_state=seed).fit(x)
    return cls(schema, categories, transformer, x.min(0), x.max(0),
               np.all(x == np.round(x), axis=0))

  def encode(self, frame: pd.DataFrame) -> Encoded:
    """Frame -> Encoded; an unseen category raises ValueError naming it."""
    missing = [c for c in self.schema.columns if c not in frame.columns]
    if missing:
      raise ValueError(f"column {missing[0]!r} of the schema is not in the frame")
    n = len(frame)
    numeric = np.zeros((n, 0), np.float32)
    if self.schema.numeric:
      numeric = self._transformer.transform(
          frame[list(self.schema.numeric)].to_numpy(np.float64)).astype(np.float32)
    codes = np.zeros((n, len(self.schema.categorical)), np.int32)
    for j, (c, cats) in enumerate(zip(self.schema.categorical, self.categories)):
      values = frame[c].astype(str).to_numpy()
      codes[:, j] = pd.Categorical(values, categories=cats).codes
      if (codes[:, j] < 0).any():
        i = int(np.argmax(codes[:, j] < 0))
        raise ValueError(f"column {c!r} has the category {values[i]!r} (row {i}), not "
                         "seen when the encoder was fitted")
    return Encoded(numeric, codes)

  def decode(self, encoded: Encoded) -> pd.DataFrame:
    """Encoded -> frame in schema order (numerics clipped, integer columns rounded)."""
    numeric, codes = np.asarray(encoded.numeric), np.asarray(encoded.categorical)
    n, widths = len(numeric), (len(self.schema.numeric), len(self.schema.categorical))
    if (numeric.shape, codes.shape) != ((n, widths[0]), (n, widths[1])):
      raise ValueError(f"encoded shapes {numeric.shape}, {codes.shape} do not match "
                       f"the (n, {widths[0]}), (n, {widths[1]}) columns of the schema")
    out = pd.DataFrame(index=range(n))
    if self.schema.numeric:
      x = self._transformer.inverse_transform(numeric.astype(np.float64))
      x = np.clip(x, self._low, self._high)
      x = np.where(self._integer, np.round(x), x)
      for j, c in enumerate(self.schema.numeric):
        out[c] = x[:, j]
    for j, (c, cats) in enumerate(zip(self.schema.categorical, self.categories)):
      if n and not 0 <= codes[:, j].min() <= codes[:, j].max() < len(cats):
        raise ValueError(f"column {c!r} has category indices outside [0, {len(cats)})")
      out[c] = np.asarray(cats, dtype=object)[codes[:, j]]
    return out
