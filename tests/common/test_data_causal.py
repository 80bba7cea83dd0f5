"""Synthetic dose-response designs and the CSV loader."""

import jax.numpy as jnp
import numpy as np
import pytest

from common.data import causal


def test_overlap_design_matches_its_definition(rng):
  data = causal.overlap_design(rng, 20000, overlap=0.3)
  s = data.x[:, 0]
  assert data.x.shape == (20000, 1)
  e = data.t - jnp.sin(jnp.pi * s)
  assert float(jnp.abs(e).max()) <= 0.3 + 1e-6
  resid = data.y - causal.overlap_effect(data.t) - 10 * s
  assert abs(float(resid.mean())) < 0.05 and abs(float(resid.std()) - 1.0) < 0.05


def test_colangelo_lee_effect_is_the_covariate_average(rng):
  # theta(t) = E_X[mu(t, X)] with mu(t, x) = 1.2 t + t^2 + t x1 + 1.2 x'beta; E[X] = 0.
  data = causal.colangelo_lee_design(rng, 20000, p=10)
  assert data.x.shape == (20000, 10)
  cov = np.cov(np.asarray(data.x).T)
  np.testing.assert_allclose(np.diag(cov), 1.0, atol=0.05)
  np.testing.assert_allclose(np.diag(cov, 1), 0.5, atol=0.05)
  beta = 1.0 / np.arange(1, 11) ** 2
  t0 = 0.7
  mu = 1.2 * t0 + t0**2 + t0 * data.x[:, 0] + 1.2 * data.x @ beta
  assert abs(float(mu.mean()) - float(causal.colangelo_lee_effect(t0))) < 0.05


def test_designs_reject_bad_values(rng):
  with pytest.raises(ValueError, match="n must be"):
    causal.overlap_design(rng, 1)
  with pytest.raises(ValueError, match="overlap must be > 0, got -1"):
    causal.overlap_design(rng, 10, overlap=-1)
  with pytest.raises(ValueError, match="rho"):
    causal.colangelo_lee_design(rng, 10, rho=0.9)


def test_csv_loader_round_trip_and_errors(tmp_path):
  path = tmp_path / "obs.csv"
  rows = np.random.default_rng(0).normal(size=(6, 4))
  np.savetxt(path, rows, delimiter=",", header="t,a,b,y", comments="")
  data = causal.load_dose_response_csv(path, treatment="t", outcome="y")
  np.testing.assert_allclose(data.t, rows[:, 0])
  np.testing.assert_allclose(data.x, rows[:, 1:3])
  np.testing.assert_allclose(data.y, rows[:, 3])
  with pytest.raises(ValueError, match=r"columns \['dose'\]"):
    causal.load_dose_response_csv(path, treatment="dose", outcome="y")
  with pytest.raises(ValueError, match="not found"):
    causal.load_dose_response_csv(tmp_path / "missing.csv", treatment="t", outcome="y")
  bad = tmp_path / "bad.csv"
  bad.write_text("t,a,y\n1,2,3\n1,,3\n")
  with pytest.raises(ValueError, match="non-numeric or missing"):
    causal.load_dose_response_csv(bad, treatment="t", outcome="y")


def test_csv_loader_names_the_bad_cell_and_rejects_empty_tables(tmp_path):
  bad = tmp_path / "bad.csv"
  bad.write_text("dose,y,age\n1,2,3\n2,nan,4\n3,4,5\n")
  with pytest.raises(ValueError, match=r"non-finite value nan in column 'y' at data row 2"):
    causal.load_dose_response_csv(bad, "dose", "y")
  empty = tmp_path / "empty.csv"
  empty.write_text("dose,y,age\n")
  with pytest.raises(ValueError, match="has 0 data rows; expected at least 2"):
    causal.load_dose_response_csv(empty, "dose", "y")
  with pytest.raises(ValueError, match="is a directory; expected a CSV file"):
    causal.load_dose_response_csv(tmp_path, "dose", "y")


def test_designs_reject_non_integer_n_and_non_finite_noise():
  import jax
  with pytest.raises(ValueError, match="sample size n must be an integer >= 2, got 10.5"):
    causal.overlap_design(jax.random.PRNGKey(0), 10.5)
  with pytest.raises(ValueError, match="noise must be finite and >= 0, got nan"):
    causal.overlap_design(jax.random.PRNGKey(0), 10, noise=float("nan"))
