"""Unit tests of the susceptibility method: SGLD, LLC, covariance, clustering, the data.

The transformer-component helpers, the calibration problem and the experiment's
plots and config are tested in test_susceptibility_parts.py."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import methods.susceptibility as sus
from common.data import mechanisms


def test_sgld_without_data_samples_the_localizing_gaussian():
  # With no data term the target is N(w0, 1/gamma); the Euler chain's exact stationary
  # variance is 1 / (gamma (1 - eps gamma / 4)), 1% above 1/gamma here.
  gamma, eps = 4.0, 0.01
  w0 = {"a": jnp.full((4,), 0.5), "b": jnp.full((2, 2), -1.0)}
  trace = sus.run_chains(lambda w, batch: 0.0 * sum(jnp.sum(x) for x in jax.tree.leaves(w)),
                         w0, lambda s: None, jax.random.PRNGKey(0), step_size=eps,
                         n_beta=10.0, localization=gamma, num_chains=64, num_burnin=200,
                         num_draws=60, thin=50, observe_fn=lambda w: w)
  draws = jnp.concatenate([(trace.observations["a"] - 0.5).reshape(-1),
                           (trace.observations["b"] + 1.0).reshape(-1)])
  n = draws.size                                    # 64 chains x 60 draws x 8 coordinates
  var = float(jnp.var(draws))
  # Draws 50 steps apart have autocorrelation (1 - eps gamma / 2)^50 = 0.36; allow for it.
  assert abs(float(jnp.mean(draws))) < 4 * np.sqrt(var / n * 2.2)
  assert var == pytest.approx(1 / (gamma * (1 - eps * gamma / 4)), rel=0.05)
  assert var != pytest.approx(1 / (2 * gamma), rel=0.3)  # the test can tell wrong scales


def test_sgld_mask_freezes_other_parameters_and_composes_with_optax():
  w0 = {"a": jnp.ones(3), "b": jnp.zeros(2)}
  mask = {"a": jnp.array([1.0, 0.0, 1.0]), "b": jnp.zeros(2)}
  opt = optax.chain(optax.identity(), sus.sgld(1e-2, 5.0, 1.0, key=jax.random.PRNGKey(1),
                                               mask=mask))
  state = opt.init(w0)
  grads = {"a": jnp.ones(3), "b": jnp.ones(2)}

  @jax.jit
  def step(w, state):
    updates, state = opt.update(grads, state, w)
    return optax.apply_updates(w, updates), state

  w = w0
  for _ in range(5):
    w, state = step(w, state)
  assert float(w["a"][1]) == 1.0 and np.all(np.asarray(w["b"]) == 0.0)
  assert float(w["a"][0]) != 1.0 and w["a"].dtype == jnp.float32
  with pytest.raises(ValueError, match="step_size"):
    sus.sgld(0.0, 1.0, 1.0, key=jax.random.PRNGKey(0))


def test_noise_free_sgld_is_localized_gradient_descent():
  opt = sus.sgld(0.1, 2.0, 1.0, key=jax.random.PRNGKey(0), noise_scale=0.0)
  w0 = jnp.array([1.0, -2.0])
  state = opt.init(w0)
  w = w0 + 0.5
  updates, _ = opt.update(jnp.array([3.0, 4.0]), state, w)
  expected = -(0.1 / 2) * (2.0 * jnp.array([3.0, 4.0]) + 1.0 * (w - w0))
  np.testing.assert_allclose(updates, expected, rtol=1e-6)


def test_llc_recovers_half_the_dimension_on_linear_regression():
  problem = sus.linear_regression(jax.random.PRNGKey(0), dim=4, n=2048, batch_size=128,
                                  noise=1.0)
  n_beta = sus.default_n_beta(128)
  trace = sus.run_chains(problem.loss_fn, problem.w0, problem.batch_fn,
                         jax.random.PRNGKey(3), step_size=1e-3, n_beta=n_beta,
                         localization=1.0, num_chains=6, num_burnin=200, num_draws=1500)
  loss0 = problem.loss_fn(problem.w0, (problem.x, problem.y))
  est = sus.estimate_llc(trace.loss, loss0, n_beta, num_burnin=200)
  assert problem.true_llc == 2.0
  assert float(est.mean) == pytest.approx(2.0, rel=0.1), (est.mean, est.stderr)
  assert 0 < float(est.stderr) < 0.2
  assert sus.diagnose(trace.loss, loss0, n_beta, 200)["finite"]


def test_estimate_llc_and_diagnostics_on_fixed_traces():
  trace = np.array([[1.0, 1.2, 1.4], [1.0, 1.6, 1.8]])
  est = sus.estimate_llc(trace, 1.0, n_beta=10.0, num_burnin=1)
  np.testing.assert_allclose(est.per_chain, [3.0, 7.0], rtol=1e-6)
  assert float(est.mean) == pytest.approx(5.0)
  assert float(est.stderr) == pytest.approx(np.std([3.0, 7.0], ddof=1) / np.sqrt(2), rel=1e-5)
  ramp = np.linspace(0.0, 1.0, 400)[None, :] + 1e-3 * np.random.default_rng(0).normal(
      size=(2, 400))
  assert sus.diagnose(ramp, 0.0, 1.0)["drifting"]
  flat = 0.5 + 0.1 * np.random.default_rng(1).normal(size=(2, 400))
  assert sus.diagnose(flat, 0.0, 1.0)["healthy"]
  assert sus.diagnose(flat, 1.0, 1.0)["negative_llc"]
  assert not sus.diagnose(np.array([[0.0, np.nan]]), 0.0, 1.0)["healthy"]


def test_pooled_covariance_matches_numpy_on_fixed_draws():
  rng = np.random.default_rng(0)
  phi = rng.normal(size=(3, 7))
  losses = rng.normal(size=(3, 7, 5)) + phi[..., None] * np.array([1, -1, 0, 2, 0.5])
  got = np.asarray(sus.pooled_covariance(jnp.asarray(phi), jnp.asarray(losses)))
  for j in range(5):
    one_chain = np.cov(phi[0], losses[0, :, j])[0, 1]
    np.testing.assert_allclose(
        np.asarray(sus.pooled_covariance(phi[:1], losses[:1]))[j], one_chain, rtol=1e-5)
    pooled = np.mean([np.cov(phi[c], losses[c, :, j])[0, 1] for c in range(3)])
    np.testing.assert_allclose(got[j], pooled, rtol=1e-5)
  chi = np.asarray(sus.susceptibilities(jnp.asarray(phi), jnp.asarray(losses)))
  centred = losses - losses.mean(axis=-1, keepdims=True)
  expected = -np.array([np.mean([np.cov(phi[c], centred[c, :, j])[0, 1] for c in range(3)])
                        for j in range(5)])
  np.testing.assert_allclose(chi, expected, rtol=1e-5, atol=1e-6)


def _planted(n_per=20, p_in=0.8, p_out=0.05, seed=0):
  rng = np.random.default_rng(seed)
  n = 2 * n_per
  truth = np.repeat([0, 1], n_per)
  p = np.where(truth[:, None] == truth[None, :], p_in, p_out)
  upper = np.triu(rng.random((n, n)) < p, 1).astype(float)
  return upper + upper.T, truth


def test_conductance_of_a_planted_two_cluster_graph():
  w, truth = _planted()
  s = truth == 0
  degrees = w.sum(axis=1)
  expected = w[s][:, ~s].sum() / min(degrees[s].sum(), degrees[~s].sum())
  assert sus.conductance(w, s) == pytest.approx(expected)
  cut = sus.sweep_cut(w, min_size=2)
  assert sus.adjusted_rand_index(truth, cut.in_set.astype(int)) == 1.0
  assert cut.conductance == pytest.approx(expected)
  labels = sus.conductance_clustering(w, max_conductance=0.3, min_size=5)
  assert sus.adjusted_rand_index(truth, labels) == 1.0 and labels.max() == 1


def test_sweep_cut_is_optimal_on_a_small_graph_against_brute_force():
  w, _ = _planted(n_per=5, p_in=0.9, p_out=0.1, seed=3)
  n = w.shape[0]
  best = min(sus.conductance(w, np.isin(np.arange(n), subset))
             for r in range(1, n // 2 + 1) for subset in itertools.combinations(range(n), r))
  cut = sus.sweep_cut(w)
  assert cut.conductance == pytest.approx(sus.conductance(w, cut.in_set))
  assert cut.conductance == pytest.approx(best)


def test_clustering_recovers_planted_feature_clusters_and_ari_matches_sklearn():
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(3, 6)) * 4
  truth = np.repeat(np.arange(3), 40)
  feats = centres[truth] + rng.normal(size=(120, 6))
  labels = sus.cluster_tokens(feats, k=8, max_conductance=0.1, min_size=10)
  assert sus.adjusted_rand_index(truth, labels) > 0.95
  metrics = pytest.importorskip("sklearn.metrics")
  a, b = rng.integers(0, 4, 200), rng.integers(0, 3, 200)
  assert sus.adjusted_rand_index(a, b) == pytest.approx(metrics.adjusted_rand_score(a, b))
  assert sus.adjusted_rand_index(truth, labels) == pytest.approx(
      metrics.adjusted_rand_score(truth, labels))


def test_mechanism_stream_is_pure_and_labels_are_right():
  a = mechanisms.mechanism_batch(3, 7, 16, 64)
  b = mechanisms.mechanism_batch(3, 7, 16, 64)
  np.testing.assert_array_equal(a["tokens"], b["tokens"])
  assert not np.array_equal(a["tokens"], mechanisms.mechanism_batch(3, 8, 16, 64)["tokens"])
  tokens, labels = a["tokens"], a["labels"]
  assert tokens.max() < mechanisms.vocab_size()
  assert set(np.unique(labels)) <= {-1, 0, 1, 2, 3}
  closers = np.isin(tokens, mechanisms.CLOSERS)
  np.testing.assert_array_equal(closers, labels == mechanisms.BRACKET)
  continuations = mechanisms.ngram_continuations()
  successors, _ = mechanisms.markov_chain()
  for row_t, row_l in zip(tokens, labels):
    for t in np.flatnonzero(row_l == mechanisms.INDUCTION):
      trigger = row_t[t - 1]
      assert trigger in mechanisms.COPY_TRIGGERS
      earlier = [i for i in range(t - 1) if row_t[i] == trigger]
      assert earlier and row_t[earlier[0] + 1] == row_t[t]
    for t in np.flatnonzero(np.isin(row_t, mechanisms.TRIGGERS)):
      k = mechanisms.TRIGGERS.index(row_t[t])
      end = min(len(row_t), t + 1 + mechanisms.NGRAM_LENGTH)
      np.testing.assert_array_equal(row_t[t + 1:end], continuations[k][:end - t - 1])
    for t in np.flatnonzero(row_l == mechanisms.BIGRAM):
      prev = [v for v in row_t[:t] if v < mechanisms.NUM_TEXT][-1]
      assert row_t[t] in successors[prev]
  with pytest.raises(ValueError, match="seq_len"):
    mechanisms.mechanism_batch(0, 0, 2, 1)


def test_chains_share_minibatches_unless_independent():
  def run(independent):
    return np.asarray(sus.run_chains(
        lambda w, b: 0.0 * w + b, jnp.zeros(()), lambda s: s.astype(jnp.float32),
        jax.random.PRNGKey(0), step_size=1e-3, n_beta=1.0, localization=1.0, num_chains=3,
        num_burnin=1, num_draws=2, thin=2, independent_batches=independent).loss)
  np.testing.assert_array_equal(run(False), np.tile(np.arange(5.0), (3, 1)))
  np.testing.assert_array_equal(run(True), np.arange(15.0).reshape(3, 5))
