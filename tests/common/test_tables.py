"""Mixed-type tables: bundled loaders, CSV and TabSyn readers, the encoder."""

import json

import numpy as np
import pandas as pd
import pytest

from common.data import tables


@pytest.fixture(scope="module")
def loaded():
  return {name: tables.load_table(name) for name in tables.TABLES}


def _small_table():
  frame = pd.DataFrame({"x": [0.5, 1.25, -3.0, 2.0], "n": [1.0, 2.0, 3.0, 4.0],
                        "c": ["a", "b, with comma", "a", "1"], "y": ["0", "1", "0", "1"]})
  return tables.Table("small", frame, tables.Schema(("x", "n"), ("c", "y"), "y"))


def test_every_table_loads_with_schema_order_dtypes_and_no_nan(loaded):
  rows = {"iris": 150, "wine": 178, "breast_cancer": 569, "diabetes": 442, "fair": 6366,
          "randhie": 20190, "modechoice": 840, "anes96": 944, "mixed": 3000}
  for name, table in loaded.items():
    frame, schema = table.frame, table.schema
    assert table.name == name and len(frame) == rows[name], name
    assert tuple(frame.columns) == schema.columns
    assert all(frame[c].dtype == np.float64 for c in schema.numeric), name
    assert all(frame[c].dtype == object for c in schema.categorical), name
    assert all(isinstance(v, str) for c in schema.categorical for v in frame[c]), name
    assert not frame.isna().to_numpy().any(), name
  assert loaded["diabetes"].schema.task == "regression"
  assert loaded["fair"].schema.task == "classification"
  assert set(loaded["fair"].frame["rate_marriage"]) == {"1", "2", "3", "4", "5"}
  assert set(loaded["fair"].frame["affair"]) == {"yes", "no"}
  assert "affairs" not in loaded["fair"].frame and "logpopul" not in loaded["anes96"].frame


def test_max_rows_is_a_seeded_subset(loaded):
  a = tables.load_table("fair", max_rows=100, seed=1)
  b = tables.load_table("fair", max_rows=100, seed=1)
  assert len(a.frame) == 100
  pd.testing.assert_frame_equal(a.frame, b.frame)
  assert not a.frame.equals(tables.load_table("fair", max_rows=100, seed=2).frame)
  with pytest.raises(ValueError, match="unknown table 'adult'"):
    tables.load_table("adult")


def test_mixed_table_has_its_dependencies(loaded):
  frame = loaded["mixed"].frame
  log_income = np.log(frame["income"]).groupby(frame["region"]).mean()
  assert log_income["east"] > log_income["north"] > log_income["west"] > log_income["south"]
  churn = (frame["churn"] == "yes").groupby(frame["region"]).mean()
  assert churn["west"] > churn.drop("west").max()


@pytest.mark.parametrize("name", tables.TABLES)
def test_encoder_round_trip(loaded, name):
  table = loaded[name]
  schema = table.schema
  encoder = tables.TableEncoder.fit(table)
  encoded = encoder.encode(table.frame)
  n = len(table.frame)
  assert encoded.numeric.shape == (n, len(schema.numeric))
  assert encoded.numeric.dtype == np.float32 and encoded.categorical.dtype == np.int32
  assert encoded.categorical.shape == (n, len(schema.categorical))
  assert encoder.cardinalities == tuple(table.frame[c].nunique() for c in schema.categorical)
  assert np.all(encoded.categorical < np.array(encoder.cardinalities, dtype=np.int32))
  decoded = encoder.decode(encoded)
  assert tuple(decoded.columns) == schema.columns
  pd.testing.assert_frame_equal(decoded[list(schema.categorical)],
                                table.frame[list(schema.categorical)])
  for c in schema.numeric:
    x, y = table.frame[c].to_numpy(), decoded[c].to_numpy()
    assert y.dtype == np.float64
    if np.all(x == np.round(x)):
      np.testing.assert_array_equal(y, x, err_msg=c)
    else:
      np.testing.assert_allclose(y, x, rtol=0, atol=1e-4 * np.ptp(x), err_msg=c)


def test_encoded_numerics_are_roughly_standard_normal(loaded):
  encoder = tables.TableEncoder.fit(loaded["mixed"])
  z = encoder.encode(loaded["mixed"].frame).numeric[:, 1:]  # continuous income, spending
  np.testing.assert_allclose(z.mean(0), 0.0, atol=0.05)
  np.testing.assert_allclose(z.std(0), 1.0, atol=0.05)


def test_decode_clips_and_rounds_generated_values(loaded):
  table = loaded["mixed"]
  encoder = tables.TableEncoder.fit(table)
  n = 50
  rng = np.random.default_rng(0)
  generated = tables.Encoded(rng.normal(size=(n, 3)).astype(np.float32) * 3,
                             rng.integers(0, 2, size=(n, 3)).astype(np.int32))
  frame = encoder.decode(generated)
  assert frame["age"].between(18, 80).all() and np.all(frame["age"] % 1 == 0)
  assert frame["income"].between(table.frame["income"].min(),
                                 table.frame["income"].max()).all()
  with pytest.raises(ValueError, match="'plan'"):
    encoder.decode(generated._replace(categorical=generated.categorical + [0, 3, 0]))


def test_encoder_handles_tables_without_numeric_or_categorical_columns():
  frame = pd.DataFrame({"a": ["x", "y", "x"], "b": ["1", "2", "2"]})
  only_cat = tables.Table("cat", frame, tables.Schema((), ("a", "b"), "b"))
  encoder = tables.TableEncoder.fit(only_cat)
  encoded = encoder.encode(frame)
  assert encoded.numeric.shape == (3, 0) and encoder.cardinalities == (2, 2)
  pd.testing.assert_frame_equal(encoder.decode(encoded), frame)
  numbers = pd.DataFrame({"u": [0.1, 0.7, 0.3], "v": [1.0, 2.0, 3.0]})
  only_num = tables.Table("num", numbers, tables.Schema(("u", "v"), (), "v"))
  encoder = tables.TableEncoder.fit(only_num)
  encoded = encoder.encode(numbers)
  assert encoded.categorical.shape == (3, 0) and encoder.categories == ()
  np.testing.assert_allclose(encoder.decode(encoded), numbers, atol=1e-6)


def test_encoder_errors_name_the_column():
  table = _small_table()
  with pytest.raises(ValueError, match=r"column 'c' has 3 categories, more than "
                                       r"max_categories=2"):
    tables.TableEncoder.fit(table, max_categories=2)
  encoder = tables.TableEncoder.fit(table)
  assert encoder.categories[0] == ("1", "a", "b, with comma")
  unseen = table.frame.assign(c=["a", "a", "zzz", "a"])
  with pytest.raises(ValueError, match=r"column 'c' has the category 'zzz' \(row 2\)"):
    encoder.encode(unseen)


def test_csv_round_trip(tmp_path, loaded):
  for table in (_small_table(), loaded["anes96"]):
    path = tmp_path / f"{table.name}.csv"
    tables.write_csv(table, path)
    back = tables.load_csv(path, table.schema)
    assert back.name == table.name
    pd.testing.assert_frame_equal(back.frame, table.frame)


def test_csv_errors_name_the_column(tmp_path):
  table = _small_table()
  path = tmp_path / "small.csv"
  tables.write_csv(table, path)
  wrong = tables.Schema(("x", "n"), ("c", "label"), "label")
  with pytest.raises(ValueError, match=r"column 'label' named by the schema is not in "
                                       r".*small.csv \(columns: x, n, c, y\)"):
    tables.load_csv(path, wrong)
  bad = tmp_path / "bad.csv"
  bad.write_text("x,n,c,y\n1,2,a,0\n3,four,b,1\n")
  with pytest.raises(ValueError, match=r"column 'n' .*'four' in row 1") as err:
    tables.load_csv(bad, table.schema)
  assert "\n" not in str(err.value)
  bad.write_text("x,n,c,y\n1,2,a,0\n,3,b,1\n")
  with pytest.raises(ValueError, match=r"column 'x' .*'' in row 1"):
    tables.load_csv(bad, table.schema)
  with pytest.raises(ValueError, match="not found"):
    tables.load_csv(tmp_path / "missing.csv", table.schema)


def test_schema_errors():
  with pytest.raises(ValueError, match="target 'z' is not among"):
    tables.Schema(("a",), ("b",), "z")
  with pytest.raises(ValueError, match="column 'a' is listed twice"):
    tables.Schema(("a",), ("a", "b"), "b")
  schema = tables.Schema(["a"], ["b"], "a")
  assert schema.columns == ("a", "b") and schema.task == "regression"
  assert tables.sdmetrics_metadata(schema) == {
      "columns": {"a": {"sdtype": "numerical"}, "b": {"sdtype": "categorical"}}}


def test_check_rows():
  tables.check_rows(_small_table(), 4)
  with pytest.raises(ValueError, match="table 'small' has 4 rows, fewer than the batch "
                                       "size 64"):
    tables.check_rows(_small_table(), 64)


def _write_tabsyn(directory, task="binclass", column_names=True):
  directory.mkdir()
  info = {"name": "toy", "task_type": task, "header": "infer",
          "column_names": ["age", "job", "hours", "income"] if column_names else None,
          "num_col_idx": [0, 2], "cat_col_idx": [1], "target_col_idx": [3],
          "data_path": "data/toy/toy.data", "test_path": None}
  (directory / "info.json").write_text(json.dumps(info))
  low, high = ("1.5", "2.5") if task == "regression" else (" <=50K", " >50K")
  (directory / "train.csv").write_text(
      f"age,job,hours,income\n39.0, State-gov,40.0,{low}\n50.0, Private,13.0,{high}\n")
  (directory / "test.csv").write_text(f"age,job,hours,income\n25.0, Private,40.0,{low}\n")


def test_load_tabsyn(tmp_path):
  _write_tabsyn(tmp_path / "toy")
  train, test = tables.load_tabsyn(tmp_path / "toy")
  assert train.name == "toy" and train.schema == test.schema
  assert train.schema == tables.Schema(("age", "hours"), ("job", "income"), "income")
  assert train.schema.task == "classification"
  assert list(train.frame["job"]) == [" State-gov", " Private"]
  np.testing.assert_array_equal(test.frame["hours"], [40.0])
  _write_tabsyn(tmp_path / "reg", task="regression", column_names=False)
  train, _ = tables.load_tabsyn(tmp_path / "reg", name="reg")
  assert train.name == "reg" and train.schema.task == "regression"
  assert train.schema.columns == ("age", "hours", "income", "job")
  np.testing.assert_array_equal(train.frame["income"], [1.5, 2.5])


def test_load_tabsyn_errors(tmp_path):
  with pytest.raises(ValueError, match="info.json"):
    tables.load_tabsyn(tmp_path)
  _write_tabsyn(tmp_path / "toy")
  (tmp_path / "toy" / "test.csv").unlink()
  with pytest.raises(ValueError, match=r"not found: .*test.csv"):
    tables.load_tabsyn(tmp_path / "toy")


def test_split_is_stratified_and_disjoint(loaded):
  table = loaded["fair"]
  train, test = tables.split(table, test_fraction=0.2, seed=0)
  assert len(train.frame) + len(test.frame) == len(table.frame)
  assert abs(len(test.frame) - 0.2 * len(table.frame)) <= 1
  rate = lambda f: (f["affair"] == "yes").mean()
  assert abs(rate(train.frame) - rate(test.frame)) < 0.002
  joined = pd.concat([train.frame, test.frame]).sort_values(list(table.schema.columns))
  expected = table.frame.sort_values(list(table.schema.columns))
  pd.testing.assert_frame_equal(joined.reset_index(drop=True),
                                expected.reset_index(drop=True))
  reg_train, reg_test = tables.split(loaded["diabetes"], 0.25, seed=0)
  assert len(reg_train.frame) + len(reg_test.frame) == 442


def test_load_tabsyn_reads_raw_headerless_files(tmp_path):
  directory = tmp_path / "raw"
  directory.mkdir()
  info = {"name": "raw", "task_type": "multiclass", "header": None,
          "column_names": ["a", "b", "label"], "num_col_idx": [0], "cat_col_idx": [1],
          "target_col_idx": [2], "data_path": "raw.data", "test_path": "raw.test"}
  (directory / "info.json").write_text(json.dumps(info))
  (directory / "raw.data").write_text("1.5,u,p\n2.5,v,q\n")
  (directory / "raw.test").write_text("3.5,u,r\n")
  train, test = tables.load_tabsyn(directory)
  assert train.schema.columns == ("a", "b", "label")
  assert list(train.frame["label"]) == ["p", "q"] and list(test.frame["a"]) == [3.5]
  (directory / "raw.test").write_text("x,u,r\n")
  with pytest.raises(ValueError, match=r"column 'a' .*'x' in row 0 \(file line 1\)"):
    tables.load_tabsyn(directory)


@pytest.mark.filterwarnings("ignore:The single table quality report is deprecated")
def test_sdmetrics_accepts_the_metadata(loaded):
  from sdmetrics.reports.single_table import QualityReport  # pylint: disable=g-import-not-at-top
  table = loaded["iris"]
  train, test = tables.split(table, 0.5, seed=0)
  report = QualityReport()
  report.generate(train.frame, test.frame, tables.sdmetrics_metadata(table.schema),
                  verbose=False)
  assert 0.5 < report.get_score() <= 1.0
