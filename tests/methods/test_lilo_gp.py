"""LILO's pairwise GP, exact GP and acquisition functions against closed forms,
brute force and Monte Carlo (methods/lilo/gp.py, methods/lilo/acquisition.py)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize
from scipy import stats

from methods.lilo import acquisition
from methods.lilo import gp


def _problem(n=6, m=10, d=2, seed=0):
  rng = np.random.default_rng(seed)
  X = rng.random((n, d))
  pairs = list(itertools.combinations(range(n), 2))
  chosen = rng.choice(len(pairs), m, replace=len(pairs) < m)
  # random labels (not consistent with any utility): a harder MAP than clean ones
  C = np.array([pairs[k] if rng.random() < 0.5 else pairs[k][::-1] for k in chosen])
  return X, C


def _dense_K(ls, s, X):
  sq = (((X[:, None, :] - X[None, :, :]) / ls) ** 2).sum(-1)
  return s * np.exp(-0.5 * sq) + gp.JITTER * np.eye(len(X))


def _numpy_S(f, Kinv, C):
  z = (f[C[:, 0]] - f[C[:, 1]]) / np.sqrt(2)
  return -stats.norm.logcdf(z).sum() + 0.5 * f @ Kinv @ f


def _numpy_lambda(f, C, n):
  z = (f[C[:, 0]] - f[C[:, 1]]) / np.sqrt(2)
  h = np.exp(stats.norm.logpdf(z) - stats.norm.logcdf(z))
  D = np.zeros((len(C), n))
  D[np.arange(len(C)), C[:, 0]] = 1.0
  D[np.arange(len(C)), C[:, 1]] = -1.0
  return D.T @ np.diag(h * (h + z) / 2) @ D


def test_map_matches_scipy(x64):
  X, C = _problem()
  ls, s = np.array([0.4, 0.7]), 2.0
  Kinv = np.linalg.inv(_dense_K(ls, s, X))
  brute = optimize.minimize(_numpy_S, np.zeros(len(X)), args=(Kinv, C), method="BFGS",
                            options=dict(gtol=1e-10, maxiter=10_000))
  f_hat = np.asarray(gp.map_utility(ls, s, X, C))
  np.testing.assert_allclose(f_hat, brute.x, atol=1e-5)
  assert _numpy_S(f_hat, Kinv, C) <= brute.fun + 1e-10


def test_log_marginal_value_and_gradient(x64):
  X, C = _problem()
  ls, s = jnp.array([0.4, 0.7]), jnp.asarray(2.0)
  # value: the dense Laplace formula -S(f_hat) - 1/2 log|I + K Lambda|
  f_hat = np.asarray(gp.map_utility(ls, s, X, C))
  K = _dense_K(np.asarray(ls), 2.0, X)
  lam = _numpy_lambda(f_hat, C, len(X))
  dense = -_numpy_S(f_hat, np.linalg.inv(K), C) - 0.5 * np.linalg.slogdet(
      np.eye(len(X)) + K @ lam)[1]
  lml = gp.laplace_log_marginal(ls, s, X, C)
  np.testing.assert_allclose(lml, dense, rtol=1e-9)

  grad_ls, grad_s = jax.grad(gp.laplace_log_marginal, argnums=(0, 1))(ls, s, X, C)
  # against central finite differences of the (re-solved) log marginal
  eps = 1e-5
  fd_ls = [(gp.laplace_log_marginal(ls.at[i].add(eps), s, X, C)
            - gp.laplace_log_marginal(ls.at[i].add(-eps), s, X, C)) / (2 * eps)
           for i in range(2)]
  fd_s = (gp.laplace_log_marginal(ls, s + eps, X, C)
          - gp.laplace_log_marginal(ls, s - eps, X, C)) / (2 * eps)
  np.testing.assert_allclose(grad_ls, fd_ls, rtol=1e-6, atol=1e-8)
  np.testing.assert_allclose(grad_s, fd_s, rtol=1e-6, atol=1e-8)

  # against backpropagation through 30 plain Newton steps from f = 0
  pairs = jnp.asarray(C)
  w, mask = jnp.ones(len(C)), jnp.ones(len(X))

  @jax.jit
  def unrolled(ls, s):
    Kj = gp._prior_cov(ls, s, jnp.asarray(X), mask)
    L = jnp.linalg.cholesky(Kj)
    alpha, f = jax.lax.fori_loop(
        0, 30, lambda _, af: gp._newton_step(af[1], Kj, L, pairs, w),
        (jnp.zeros(len(X)), jnp.zeros(len(X))))
    nll, _, lam = gp._likelihood(f, pairs, w)
    B = jnp.eye(len(X)) + L.T @ lam @ L
    return -(nll + 0.5 * alpha @ f) - jnp.sum(jnp.log(jnp.diag(jnp.linalg.cholesky(B))))

  full_ls, full_s = jax.grad(unrolled, argnums=(0, 1))(ls, s)
  np.testing.assert_allclose(grad_ls, full_ls, rtol=1e-8)
  np.testing.assert_allclose(grad_s, full_s, rtol=1e-8)


def _utility(x):
  return -np.sum((x - np.array([0.6, 0.4])) ** 2, axis=-1) + 0.3 * np.sin(4 * x[..., 0])


@pytest.fixture(scope="module")
def synthetic_fit():
  """A pairwise GP fitted to 40 noiseless comparisons of 30 points in 2-D (shared)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(5)
    X = rng.random((30, 2))
    u = _utility(X)
    pairs = list(itertools.combinations(range(30), 2))
    chosen = [pairs[k] for k in rng.choice(len(pairs), 40, replace=False)]
    C = np.array([(i, j) if u[i] > u[j] else (j, i) for i, j in chosen])
    return X, C, gp.fit_pairwise_gp(X, C)


def test_posterior_matches_dense_formula(x64, synthetic_fit):
  X, C, model = synthetic_fit
  ls, s = np.asarray(model.lengthscales), float(model.outputscale)
  f_hat = np.asarray(gp.map_utility(ls, s, X, C))
  np.testing.assert_allclose(model.f_map, f_hat, atol=1e-7)
  # the padded fit's log marginal equals the unpadded one
  np.testing.assert_allclose(model.log_marginal, gp.laplace_log_marginal(ls, s, X, C),
                             rtol=1e-9)
  Xs = np.random.default_rng(2).random((4, 2))
  K = _dense_K(ls, s, X)
  Kinv = np.linalg.inv(K)
  ks = s * np.exp(-0.5 * (((X[:, None] - Xs[None]) / ls) ** 2).sum(-1))
  kss = s * np.exp(-0.5 * (((Xs[:, None] - Xs[None]) / ls) ** 2).sum(-1))
  lam = _numpy_lambda(f_hat, C, len(X))
  post_f = np.linalg.inv(Kinv + lam)               # Laplace posterior covariance of f
  mean_dense = ks.T @ Kinv @ f_hat
  cov_dense = kss - ks.T @ Kinv @ ks + ks.T @ Kinv @ post_f @ Kinv @ ks
  mean, cov = gp.pairwise_posterior(model, Xs)
  np.testing.assert_allclose(mean, mean_dense, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(cov, cov_dense, rtol=1e-4, atol=1e-6)


def test_log_prior_matches_scipy(x64):
  ls = np.array([0.3, 0.52, 2.0])
  box = -np.log1p((100 - 0.01) / (np.sqrt(2 * np.pi) * 0.01)) + stats.norm.logpdf(0, 0, 0.01)
  gamma = stats.gamma.logpdf(ls, 2.4, scale=1 / 2.7).sum()
  np.testing.assert_allclose(gp.log_prior(ls, 5.0), gamma + box, rtol=1e-12)
  np.testing.assert_allclose(gp.log_prior(ls, 100.02),   # 2 sigma above the box
                             gamma + box - 2.0, rtol=1e-9)


def test_eubo_closed_form_and_monte_carlo(x64):
  mean = jnp.array([0.3, -0.2])
  cov = jnp.array([[1.0, 0.4], [0.4, 0.5]])
  value = float(acquisition.eubo_pair(mean, cov))
  s = np.sqrt(1.0 + 0.5 - 0.8)
  u = 0.5 / s
  closed = 0.3 * stats.norm.cdf(u) - 0.2 * stats.norm.cdf(-u) + s * stats.norm.pdf(u)
  np.testing.assert_allclose(value, closed, rtol=1e-12)
  draws = np.random.default_rng(0).multivariate_normal(mean, cov, size=1_000_000)
  mc = draws.max(axis=1)
  assert abs(value - mc.mean()) < 4 * mc.std() / 1e3


def test_top_eubo_pairs_brute_force(x64):
  rng = np.random.default_rng(3)
  A = rng.normal(size=(7, 7))
  cov, mean = A @ A.T / 7, rng.normal(size=7)
  top = np.asarray(acquisition.top_eubo_pairs(mean, cov, 4))
  values = {(i, j): float(acquisition.eubo_pair(mean[[i, j]], cov[np.ix_([i, j], [i, j])]))
            for i, j in itertools.combinations(range(7), 2)}
  expected = sorted(values, key=values.get, reverse=True)[:4]
  assert [tuple(p) for p in top] == expected
  assert acquisition.top_eubo_pairs(mean, cov, 100).shape == (21, 2)


def _known_posterior(Z):
  mean = jnp.sin(3.0 * Z[:, 0]) + Z[:, 1]
  sq = jnp.sum((Z[:, None] - Z[None]) ** 2, -1)
  return mean, 0.3 * jnp.exp(-sq / 0.5) + 0.05 * jnp.eye(Z.shape[0])


def test_q_log_nei_against_monte_carlo(x64):
  rng = np.random.default_rng(4)
  Xb, Xq = rng.random((5, 2)), rng.random((3, 2))
  nei = jax.jit(lambda Xb, X, key, tau: acquisition.q_log_nei(
      _known_posterior, Xb, X, key, num_samples=100_000, tau_max=tau))
  ei = jax.jit(lambda X, key: acquisition.q_log_ei(
      _known_posterior, 1.0, X, key, num_samples=100_000, tau_max=1e-3))
  mean, cov = (np.asarray(a) for a in _known_posterior(jnp.concatenate([Xb, Xq])))
  xi = rng.multivariate_normal(mean, cov, size=500_000)
  improvement = np.maximum(xi[:, 5:].max(1) - xi[:, :5].max(1), 0.0)
  np.testing.assert_allclose(nei(Xb, Xq, jax.random.PRNGKey(0), 1e-3),
                             np.log(improvement.mean()), atol=0.03)
  # qLogEI with a fixed incumbent: the same form
  np.testing.assert_allclose(ei(Xq, jax.random.PRNGKey(0)),
                             np.log(np.maximum(xi[:, 5:].max(1) - 1.0, 0).mean()), atol=0.03)
  # pruning the baseline to its sampled maxima leaves the value unchanged (up to MC)
  pruned = acquisition.prune_baseline(_known_posterior, Xb, jax.random.PRNGKey(2))
  assert 1 <= len(pruned) <= 5 and all(any(np.allclose(p, x) for x in Xb) for p in pruned)
  np.testing.assert_allclose(nei(pruned, Xq, jax.random.PRNGKey(0), 1e-3),
                             nei(Xb, Xq, jax.random.PRNGKey(0), 1e-3), atol=0.03)
  sure = lambda Z: (jnp.where(Z[:, 0] > 0.99, 10.0, 0.0), 1e-4 * jnp.eye(Z.shape[0]))
  Xs = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.5, 0.5]])
  np.testing.assert_array_equal(acquisition.prune_baseline(sure, Xs, jax.random.PRNGKey(0)),
                                Xs[1:2])
  # a candidate with a higher mean has a higher qLogNEI (same base samples)
  key = jax.random.PRNGKey(1)
  low = nei(Xb, jnp.array([[0.0, 0.0]]), key, 1e-2)
  high = nei(Xb, jnp.array([[0.5, 1.0]]), key, 1e-2)
  assert high > low


def test_optimize_acqf_finds_known_maximum(x64):
  def acq(X):   # one interior maximum near (0.7, 0.25), a local one at the far corner
    x = X[0]
    return (jnp.exp(-8.0 * jnp.sum((x - jnp.array([0.7, 0.25])) ** 2))
            + 0.5 * jnp.exp(-20.0 * jnp.sum((x - 0.0) ** 2)))

  best = acquisition.optimize_acqf(acq, 1, 2, jax.random.PRNGKey(0), raw_samples=64,
                                   restarts=4, steps=100)
  assert best.shape == (1, 2)
  truth = optimize.minimize(lambda x: -float(acq(jnp.asarray(x)[None])), [0.7, 0.25]).x
  np.testing.assert_allclose(best[0], truth, atol=2e-3)
  # a maximum on the boundary is reached exactly (projection, not a sigmoid)
  edge = acquisition.optimize_acqf(lambda X: jnp.sum(X), 2, 3, jax.random.PRNGKey(1),
                                   raw_samples=16, restarts=2, steps=60)
  np.testing.assert_allclose(edge, 1.0)


def test_pairwise_gp_ranks_like_true_utility(x64, synthetic_fit):
  X, C, model = synthetic_fit
  Xs = np.random.default_rng(6).random((200, 2))
  mean, _ = gp.pairwise_posterior(model, Xs)
  assert stats.spearmanr(mean, _utility(Xs)).statistic > 0.8
  assert np.all(model.lengthscales > 0) and 0.005 <= model.outputscale <= 200
  # a warm start from the fit stays at its optimum (same shapes: no recompilation)
  again = gp.fit_pairwise_gp(X, C, steps=5, init=model)
  assert again.log_marginal >= model.log_marginal - 1e-6


def test_exact_gp_recovers_smooth_function(x64):
  X = np.linspace(0.0, 1.0, 15)[:, None]
  g = lambda x: np.sin(6.0 * x) + 0.5 * x
  model = gp.fit_gp(X, 3.0 + 2.0 * g(X[:, 0]))
  grid = np.linspace(0.0, 1.0, 101)[:, None]
  mean, cov = gp.gp_posterior(model, grid)
  np.testing.assert_allclose(mean, 3.0 + 2.0 * g(grid[:, 0]), atol=0.05)
  assert np.all(np.diag(cov) > -1e-9) and np.max(np.diag(cov)) < 0.05
  assert model.noise >= gp.NOISE_FLOOR
  one = gp.fit_gp(X[:1], np.array([2.0]), steps=5)   # n = 1: scale 1, mean = y
  np.testing.assert_allclose(gp.gp_posterior(one, X[:1])[0], [2.0], atol=1e-2)


@pytest.mark.parametrize("X, C, message", [
    (np.zeros((10, 2)), np.array([[0, 1], [3, 12]]),
     "comparison 1 references point 12, but there are 10 points"),
    (np.zeros((10, 2)), np.array([[0, 1], [-1, 2]]),
     "comparison 1 references point -1, but there are 10 points"),
    (np.zeros((4, 2)), np.array([[2, 2]]), "comparison 0 compares point 2 with itself"),
    (np.array([[0.0, np.nan], [1.0, 1.0]]), np.array([[0, 1]]), "X has a non-finite value"),
    (np.zeros((4, 2)), np.zeros((0, 2), int), "comparisons must be a non-empty (m, 2)"),
    (np.zeros((4, 2)), np.array([[0.0, 1.0]]), "comparisons must hold integer"),
])
def test_bad_inputs_one_line(X, C, message):
  for call in (lambda: gp.fit_pairwise_gp(X, C),
               lambda: gp.map_utility(np.ones(2), 1.0, X, C),
               lambda: gp.laplace_log_marginal(np.ones(2), 1.0, X, C)):
    with pytest.raises(ValueError) as info:
      call()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_inputs_other(x64):
  with pytest.raises(ValueError, match="y has a non-finite value"):
    gp.fit_gp(np.zeros((3, 1)), np.array([0.0, np.inf, 1.0]))
  with pytest.raises(ValueError, match=r"y must have shape \(3,\)"):
    gp.fit_gp(np.zeros((3, 1)), np.zeros(4))
  with pytest.raises(ValueError, match="lengthscales must have shape"):
    gp.map_utility(np.ones(3), 1.0, np.zeros((2, 2)), np.array([[0, 1]]))
  with pytest.raises(ValueError, match="outputscale must be finite and > 0"):
    gp.laplace_log_marginal(np.ones(2), -1.0, np.zeros((2, 2)) + np.eye(2),
                            np.array([[0, 1]]))
  with pytest.raises(ValueError, match="restarts"):
    acquisition.optimize_acqf(jnp.sum, 1, 2, jax.random.PRNGKey(0), raw_samples=4,
                              restarts=5)
  with pytest.raises(ValueError, match="n >= 2"):
    acquisition.top_eubo_pairs(jnp.zeros(1), jnp.eye(1), 1)
