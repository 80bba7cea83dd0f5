"""Two-stage kernel ridge: solvers against closed forms, pseudo-outcomes against brute
force, a property test of the permutation pseudo-outcomes, explicit keys, and the
metrics. The tiny claim test is in test_kernel_ridge_claim.py."""

import chex
from hypothesis import given, settings, strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common import kernels
from common.data import causal
from methods import kernel_ridge as kr
from methods.kernel_ridge import krr
from methods.kernel_ridge import two_stage


def _problem(n=60, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.uniform(-2, 2, size=(n, 2))
  y = np.sin(x[:, 0]) + 0.3 * x[:, 1] ** 2 + 0.1 * rng.normal(size=n)
  return jnp.asarray(x), jnp.asarray(y)


def test_cholesky_and_cg_match_closed_form(x64):
  x, y = _problem()
  k, lam, n = kernels.Kernel(0.8), 1e-3, x.shape[0]
  gram = np.asarray(k(x, x))
  alpha = np.linalg.solve(gram + n * lam * np.eye(n), np.asarray(y))
  np.testing.assert_allclose(krr.fit(k, x, y, lam).weights, alpha, rtol=1e-8)
  cg = krr.fit(k, x, y, lam, solver="cg", chunk_size=16)
  np.testing.assert_allclose(krr.predict(k, cg, x), gram @ alpha, atol=1e-5)


def test_spectral_path_matches_solves_and_brute_force_loo(x64):
  x, y = _problem(n=30)
  k, n = kernels.Kernel(0.8), 30
  lams = jnp.array([1e-4, 1e-2])
  path = krr.spectral_path(k(x, x), y, lams)
  for i, lam in enumerate(lams):
    np.testing.assert_allclose(path.alphas[i], krr.fit(k, x, y, lam).weights, rtol=1e-6)
    loo = []
    for j in range(n):
      keep = np.arange(n) != j
      # Leave-one-out refits keep the ridge n*lambda of the full problem.
      alpha = np.linalg.solve(np.asarray(k(x[keep], x[keep])) + n * lam * np.eye(n - 1),
                              np.asarray(y[keep]))
      loo.append(float(y[j] - (np.asarray(k(x[j:j + 1], x[keep])) @ alpha)[0]))
    np.testing.assert_allclose(path.loo_mse[i], np.mean(np.square(loo)), rtol=1e-6)


def test_nystrom_with_all_points_is_exact_and_close_with_fewer(x64, rng):
  x, y = _problem(n=80)
  k, lam = kernels.Kernel(1.0), 1e-3
  exact = krr.predict(k, krr.fit(k, x, y, lam), x)
  full = krr.fit(k, x, y, lam, solver="nystrom", key=rng, num_landmarks=80, chunk_size=32)
  np.testing.assert_allclose(krr.predict(k, full, x), exact, atol=1e-4)
  part = krr.fit(k, x, y, lam, solver="nystrom", key=rng, num_landmarks=40, chunk_size=32)
  rel = jnp.linalg.norm(krr.predict(k, part, x) - exact) / jnp.linalg.norm(exact)
  assert float(rel) < 0.02


def test_chunked_rows_handles_ragged_sizes():
  z = (jnp.arange(10.0), jnp.arange(20.0).reshape(10, 2))
  out = krr.chunked_rows(lambda r: r[0] + r[1].sum(1), z, chunk_size=3)
  np.testing.assert_allclose(out, z[0] + z[1].sum(1))


def _toy_stage1(n=25, seed=1):
  rng = np.random.default_rng(seed)
  t, x = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=(n, 2)))
  k = two_stage.product_kernel("rbf", "matern32", 0.9, 1.3)
  return t, x, k, krr.KRRFit(centers=(t, x), weights=jnp.asarray(rng.normal(size=n)))


def test_average_pseudo_outcomes_equal_brute_force_covariate_average(x64):
  t, x, k, fit = _toy_stage1()
  tn, xn, w = np.asarray(t), np.asarray(x), np.asarray(fit.weights)

  def mu(ti, xj):  # mu(t, x) = sum_l w_l rbf(t, t_l; 0.9) matern32(x, x_l; 1.3)
    r = np.sqrt(3) * np.linalg.norm(xj - xn, axis=1) / 1.3
    return np.sum(w * np.exp(-0.5 * (ti - tn) ** 2 / 0.81) * (1 + r) * np.exp(-r))

  brute = [np.mean([mu(ti, xj) for xj in xn]) for ti in tn]
  np.testing.assert_allclose(two_stage.marginalize(fit, k, x)(t), brute, rtol=1e-10)


def test_two_stage_recovers_theta_exactly_when_mu_is_separable(x64):
  # If mu(t, x) = f(t) g(x) with f, g in the RKHSs, the plug-in effect of the true mu is
  # f(t) * mean_j g(X_j): check the pipeline pieces reproduce it for a known mu.
  t, x, k, _ = _toy_stage1()
  weights = jnp.zeros(t.shape[0]).at[3].set(2.0)        # mu = 2 k_T(t, t3) k_X(x, x3)
  fit = krr.KRRFit(centers=(t, x), weights=weights)
  k_t, k_x = k.factors
  theta = 2.0 * k_t(t, t[3:4])[:, 0] * jnp.mean(k_x(x, x[3:4]))
  np.testing.assert_allclose(two_stage.marginalize(fit, k, x)(t), theta, rtol=1e-12)


_permuted = jax.jit(two_stage.permuted_pseudo_outcomes, static_argnums=(5, 6))


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_permuted_pseudo_outcomes_are_unbiased_for_the_average(seed):
  # For a uniformly random permutation, X_{pi(i)} is uniform over the sample, so
  # E_pi[mu(T_i, X_pi(i))] is exactly the covariate average. Check the Monte Carlo
  # mean over R permutations lies within 5 standard errors.
  with jax.enable_x64(True):
    t, x, k, fit = _toy_stage1(n=12, seed=seed % 7)
    exact = two_stage.marginalize(fit, k, x)(t)
    mean = _permuted(fit, k, t, x, jax.random.PRNGKey(seed), 400, None)
    mus = k.factors[0](t, t) @ (fit.weights[:, None] * k.factors[1](x, x))  # (i, j): mu(T_i, X_j)
    se = jnp.std(mus, axis=1) / jnp.sqrt(400.0)
    assert bool(jnp.all(jnp.abs(mean - exact) <= 5 * se + 1e-9))


def test_fit_two_stage_solvers_agree_and_trace_once(x64, rng):
  data = causal.overlap_design(rng, 120)
  hyper = kr.TwoStageHyper(1.0, 0.5, 1e-3, 1.0, 1e-3)
  grid = jnp.linspace(-1, 1, 9)
  exact = kr.fit_two_stage(data.t, data.x, data.y, hyper)  # draws nothing: no key needed
  nys = kr.fit_two_stage(data.t, data.x, data.y, hyper, solver="nystrom",
                         num_landmarks=120, key=rng)
  np.testing.assert_allclose(nys.effect(grid), exact.effect(grid), atol=1e-3)
  # With "average" pseudo-outcomes the targets are the plug-in at the observed T.
  np.testing.assert_allclose(exact.pseudo_outcomes, exact.plug_in(data.t), rtol=1e-10)
  traced = chex.assert_max_traces(two_stage._fit_two_stage.__wrapped__, n=1)
  jitted = jax.jit(traced, static_argnums=tuple(range(5, 12)))
  args = ("rbf", "rbf", "average", "cholesky", 16, None, 2)
  cast = kr.TwoStageHyper(*(jnp.asarray(v) for v in hyper))
  for seed in range(3):
    d = causal.overlap_design(jax.random.PRNGKey(seed), 120)
    out = jitted(d.t, d.x, d.y, cast, rng, *args)
    assert bool(jnp.all(jnp.isfinite(out.effect(grid))))
    if seed == 0:  # the data of `exact`: a key changes nothing when nothing is drawn
      np.testing.assert_allclose(out.effect(grid), exact.effect(grid), rtol=1e-12)


def test_gradients_flow_through_the_fit(x64, rng):
  data = causal.overlap_design(rng, 50)
  def loss(log_ell):
    hyper = kr.TwoStageHyper(jnp.exp(log_ell), 0.5, 1e-3, 1.0, 1e-3)
    return jnp.sum(kr.fit_two_stage(data.t, data.x, data.y, hyper).effect(data.t) ** 2)
  assert np.isfinite(jax.grad(loss)(0.0))


def test_bad_inputs_raise_before_work(rng):
  data = causal.overlap_design(rng, 20)
  hyper = kr.TwoStageHyper(1.0, 1.0, 1e-3, 1.0, 1e-3)
  with pytest.raises(ValueError, match="lam1 must be > 0, got -1"):
    kr.fit_two_stage(data.t, data.x, data.y, hyper._replace(lam1=-1.0))
  with pytest.raises(ValueError, match=r"outcome y must have shape \(20,\)"):
    kr.fit_two_stage(data.t, data.x, data.y[:5], hyper)
  with pytest.raises(ValueError, match="unknown solver 'svd'"):
    kr.fit_two_stage(data.t, data.x, data.y, hyper, solver="svd")
  with pytest.raises(ValueError, match="unknown pseudo-outcome rule"):
    kr.fit_two_stage(data.t, data.x, data.y, hyper, pseudo="mean")
  with pytest.raises(ValueError, match="val_fraction"):
    kr.select_two_stage(data.t, data.x, data.y, rng, kr.SelectionGrid(val_fraction=1.5))
  with pytest.raises(ValueError, match="ridge lambda must be > 0"):
    krr.fit(kernels.Kernel(1.0), data.x, data.y, 0.0)


def test_randomness_needs_an_explicit_key(rng):
  data = causal.overlap_design(rng, 20)
  hyper = kr.TwoStageHyper(1.0, 1.0, 1e-3, 1.0, 1e-3)
  with pytest.raises(ValueError, match="needs a PRNG key to choose landmarks"):
    krr.fit(kernels.Kernel(1.0), data.x, data.y, 1e-3, solver="nystrom")
  for kwargs in (dict(solver="nystrom"), dict(pseudo="permute")):
    with pytest.raises(ValueError, match="draws random numbers: pass a PRNG key"):
      kr.fit_two_stage(data.t, data.x, data.y, hyper, **kwargs)
  with pytest.raises(ValueError, match="subsample of max_n=10 of n=20 rows needs a PRNG key"):
    kr.loo_select([kernels.Kernel(1.0)], data.t, data.y, (1e-3,), max_n=10)
  with pytest.raises(ValueError, match="subsample of max_n=10 of n=20 rows needs a PRNG key"):
    kr.baselines.naive(data.t, data.x, data.y, max_n=10)
  with pytest.raises(ValueError, match="n=20 > max_n=10 needs a subsample_key"):
    kr.baselines.doubly_robust(data.t, data.x, data.y, key=rng, max_n=10)


def test_loo_select_on_a_subsample_refits_on_all_rows(x64, rng):
  x, y = _problem()
  cands = [kernels.Kernel(0.5), kernels.Kernel(1.0)]
  best = kr.loo_select(cands, x, y, (1e-4, 1e-2), max_n=30, key=rng)
  again = kr.loo_select(cands, x, y, (1e-4, 1e-2), max_n=30, key=rng)
  assert best.loo_mse == again.loo_mse and best.lam in (1e-4, 1e-2)
  k = cands[best.scale_index]
  np.testing.assert_allclose(best.alphas, krr.fit(k, x, y, best.lam).weights, rtol=1e-8)


def test_evaluation_grid_and_integrated_squared_error(x64, rng):
  t = jax.random.normal(rng, (501,))
  lo, hi = np.quantile(np.asarray(t), [0.1, 0.9])
  np.testing.assert_allclose(kr.evaluation_grid(t, 0.1, 7), np.linspace(lo, hi, 7),
                             rtol=1e-12)
  grid = jnp.linspace(-1.0, 1.0, 11)
  ise = kr.integrated_squared_error(grid ** 2 + 0.5 * grid, grid ** 2)
  assert float(ise) == pytest.approx(float(jnp.mean((0.5 * grid) ** 2)))
  with pytest.raises(ValueError, match="same shape"):
    kr.integrated_squared_error(grid, grid[:3])
  with pytest.raises(ValueError, match="quantile must lie in"):
    kr.evaluation_grid(t, 0.5, 7)


def test_selection_returns_grid_values_and_finite_scores(x64, rng):
  # The sizes of the tiny claim run's selection (n = 150, its grid), so a session
  # compiles them once for both tests.
  data = causal.overlap_design(rng, 150, overlap=0.2)
  grid = kr.SelectionGrid(scales_t=(1.0,), scales_x=(0.5, 1.0), max_n=150)
  chosen = kr.select_two_stage(data.t, data.x, data.y, rng, grid)
  assert chosen.scores.shape == (1, 2, 4, 4, 5)
  assert np.isfinite(chosen.scores).all() and chosen.score == chosen.scores.min()
  assert chosen.hyper.lam1 in grid.lams1 and chosen.hyper.lam2 in grid.lams2


# Issue 17, item 1: integer treatments gave all-NaN fits; NaN inputs flowed through.

def test_integer_treatments_are_promoted_to_float_not_nan(rng):
  data = causal.overlap_design(rng, 40)
  doses = np.arange(40) % 5
  hyper = kr.TwoStageHyper(1.0, 0.5, 1e-3, 1.0, 1e-3)
  fit_int = kr.fit_two_stage(doses, data.x, data.y, hyper)
  fit_float = kr.fit_two_stage(doses.astype(np.float32), data.x, data.y, hyper)
  grid = jnp.arange(5.0)
  assert np.isfinite(fit_int.effect(grid)).all()
  np.testing.assert_allclose(fit_int.effect(grid), fit_float.effect(grid), rtol=1e-5)
  # Integer outcomes cast the ridge grid to int (lambda -> 0) in loo_select.
  x = jnp.linspace(-2.0, 2.0, 20)
  y_int = np.round(3 * np.sin(np.asarray(x))).astype(np.int32)
  best_int = kr.loo_select([kernels.Kernel(0.5)], x, y_int, (1e-2, 1e-1))
  best_float = kr.loo_select([kernels.Kernel(0.5)], x, y_int.astype(np.float32), (1e-2, 1e-1))
  assert best_int.loo_mse == pytest.approx(best_float.loo_mse, rel=1e-5)
  assert kr.evaluation_grid(np.arange(100), 0.05, 3).dtype == jnp.result_type(float)


def test_select_two_stage_with_integer_doses_gives_usable_hyperparameters(rng):
  data = causal.overlap_design(rng, 40)
  doses = np.arange(40) % 5
  grid = kr.SelectionGrid(scales_t=(1.0,), scales_x=(1.0,), lams1=(1e-3,),
                          scales_t2=(1.0,), lams2=(1e-4, 1e-3))
  chosen = kr.select_two_stage(doses, data.x, data.y, rng, grid)
  fit = kr.fit_two_stage(doses, data.x, data.y, chosen.hyper)
  assert np.isfinite(chosen.score) and np.isfinite(fit.effect(jnp.arange(5.0))).all()


@pytest.mark.parametrize("which, name", [("t", "treatment t"), ("x", "covariates x"),
                                         ("y", "outcome y")])
def test_non_finite_sample_values_are_rejected_with_name_and_index(rng, which, name):
  data = causal.overlap_design(rng, 20)._asdict()
  bad = np.array(data[which])
  bad[(7,) + (0,) * (bad.ndim - 1)] = np.nan if which != "x" else np.inf
  data[which] = bad
  hyper = kr.TwoStageHyper(1.0, 1.0, 1e-3, 1.0, 1e-3)
  with pytest.raises(ValueError, match=rf"{name} has a non-finite value .* at index \(?7"):
    kr.fit_two_stage(data["t"], data["x"], data["y"], hyper)
  with pytest.raises(ValueError, match=rf"{name} has a non-finite value"):
    kr.select_two_stage(data["t"], data["x"], data["y"], rng)


def test_sweep_bad_hyperparameters_and_degenerate_samples(rng):
  data = causal.overlap_design(rng, 20)
  hyper = kr.TwoStageHyper(1.0, 1.0, 1e-3, 1.0, 1e-3)
  with pytest.raises(ValueError, match="lengthscale_t2 must be finite, got inf"):
    kr.fit_two_stage(data.t, data.x, data.y, hyper._replace(lengthscale_t2=float("inf")))
  with pytest.raises(ValueError, match="chunk_size must be None or an int >= 1, got 0"):
    kr.fit_two_stage(data.t, data.x, data.y, hyper, chunk_size=0)
  with pytest.raises(ValueError, match=r"selection grid lams1 must be .* got \(nan,\)"):
    kr.select_two_stage(data.t, data.x, data.y, rng, kr.SelectionGrid(lams1=(float("nan"),)))
  with pytest.raises(ValueError, match="treatment t has median pairwise distance 0"):
    kr.select_two_stage(np.ones(20), data.x, data.y, rng)
  with pytest.raises(TypeError, match="needs a PRNG key"):
    kr.select_two_stage(data.t, data.x, data.y, None)
  with pytest.raises(ValueError, match="lams must be non-empty, > 0 and finite"):
    kr.loo_select([kernels.Kernel(1.0)], data.t, data.y, (0.0, 1e-3))
  with pytest.raises(ValueError, match="treatments t has a non-finite value nan at index 0"):
    kr.evaluation_grid(np.array([np.nan, 1.0, 2.0]))
  with pytest.raises(ValueError, match="targets y has a non-finite value"):
    krr.fit(kernels.Kernel(1.0), data.x, np.full(20, np.nan), 1e-3)


# Issue 30: "auto" switches from the exact solve to Nystrom at krr.NYSTROM_MIN_N rows,
# with m = landmark_rule(n); the Nystrom fit must keep the exact fit's error.
def test_auto_solver_switches_to_nystrom_at_the_threshold():
  at = krr.NYSTROM_MIN_N
  assert krr.resolve_solver("auto", at - 1, None) == ("cholesky", krr.landmark_rule(at - 1))
  assert krr.resolve_solver("auto", at, None) == ("nystrom", krr.landmark_rule(at))
  assert krr.resolve_solver("cholesky", 10 * at, 7) == ("cholesky", 7)
  assert krr.landmark_rule(100) == 47  # ceil(sqrt(100) log 100) = ceil(46.05)
  assert krr.landmark_rule(10, scale=10.0) == 10 and krr.landmark_rule(10 ** 7) == krr.MAX_LANDMARKS
  with pytest.raises(ValueError, match="num_landmarks must be None or >= 1, got 0"):
    krr.resolve_solver("nystrom", 100, 0)


def test_select_and_fit_default_to_nystrom_above_the_threshold(x64, rng, monkeypatch):
  # A threshold of 100 rows stands in for the real one so the test runs in seconds; the
  # selection call has the sizes of test_selection_returns_grid_values_and_finite_scores
  # (and of the tiny claim run), so its programs are compiled once per session.
  monkeypatch.setattr(krr, "NYSTROM_MIN_N", 100)
  data = causal.overlap_design(rng, 150, overlap=0.2)
  grid = kr.SelectionGrid(scales_t=(1.0,), scales_x=(0.5, 1.0), max_n=150)
  chosen = kr.select_two_stage(data.t, data.x, data.y, rng, grid)
  assert (chosen.solver, chosen.num_landmarks) == ("nystrom", krr.landmark_rule(150))
  assert chosen.fit_kwargs() == dict(solver="nystrom", num_landmarks=62)
  hyper = kr.TwoStageHyper(1.0, 0.5, 1e-3, 1.0, 1e-3)
  for n, centres in ((99, 99), (150, 62)):
    fit = kr.fit_two_stage(data.t[:n], data.x[:n], data.y[:n], hyper, key=rng)  # "auto"
    assert fit.effect.centers.shape == (centres,)
  with pytest.raises(ValueError, match="solver='nystrom' .* at n=150 draws random numbers"):
    kr.fit_two_stage(data.t, data.x, data.y, hyper)


def test_nystrom_at_the_landmark_rule_keeps_the_exact_error(x64, rng):
  # The benchmark's estimator on a small sample: Nystrom with landmark_rule(n)
  # landmarks (n = 500: m = 139) must reach the exact solver's integrated squared
  # error to within 5%, for every landmark draw tried.
  n = 500
  data = causal.overlap_design(rng, n, overlap=1.0)
  hyper = kr.TwoStageHyper(1.0, 0.5, 1e-4, 1.0, 1e-4)
  grid = jnp.linspace(-1.0, 1.0, 100)
  truth = causal.overlap_effect(grid)
  exact = kr.fit_two_stage(data.t, data.x, data.y, hyper, solver="cholesky")
  ise_exact = float(kr.integrated_squared_error(exact.effect(grid), truth))
  for seed in range(3):
    nys = kr.fit_two_stage(data.t, data.x, data.y, hyper, solver="nystrom",
                           key=jax.random.PRNGKey(seed), chunk_size=256)
    ise = float(kr.integrated_squared_error(nys.effect(grid), truth))
    assert abs(ise / ise_exact - 1.0) < 0.05, (seed, ise, ise_exact)


def test_mean_embedding_in_population_blocks_matches_one_block(x64):
  x = jnp.linspace(-2.0, 2.0, 23)[:, None]
  k_x = kernels.Kernel(0.7)
  np.testing.assert_allclose(two_stage.mean_embedding(k_x, x[:5], x, chunk_size=4),
                             jnp.mean(k_x(x[:5], x), axis=1), rtol=1e-12)
