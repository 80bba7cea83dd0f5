"""Tests of Q-Tab's runtime baselines: the SDV Gaussian copula and TabDDPM."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from common.data.tables import Schema
from common.train import default_train_config, train
from methods.qtab import copula
from methods.qtab import diffusion


# ------------------------------------------------------------------------ copula

_FREQS = {"red": 0.6, "green": 0.3, "blue": 0.1}


def _frame(n=800, seed=0):
  rng = np.random.default_rng(seed)
  a = rng.normal(size=n)
  b = 0.8 * a + 0.6 * rng.normal(size=n)
  c = rng.choice(list(_FREQS), p=list(_FREQS.values()), size=n)
  return pd.DataFrame({"a": np.exp(a), "b": b, "c": c})


@pytest.fixture(scope="module")
def fitted_copula():
  schema = Schema(("a", "b"), ("c",), "c")
  frame = _frame()
  return copula.GaussianCopula(schema).fit(frame), frame


def test_copula_sample_keeps_columns_categories_frequencies_and_correlation(fitted_copula):
  model, frame = fitted_copula
  out = model.sample(3000, seed=1)
  assert list(out.columns) == ["a", "b", "c"]
  assert out["a"].dtype == np.float64 and out["b"].dtype == np.float64
  assert out["c"].dtype == object and all(isinstance(v, str) for v in out["c"])
  assert set(out["c"]) <= set(frame["c"])
  freq = out["c"].value_counts(normalize=True)
  for category, p in frame["c"].value_counts(normalize=True).items():
    assert abs(freq.get(category, 0.0) - p) < 0.03
  assert np.corrcoef(out["a"], out["b"])[0, 1] > 0.5
  assert out["a"].min() >= frame["a"].min() and out["a"].max() <= frame["a"].max()


def test_copula_sampling_is_deterministic_given_the_seed(fitted_copula):
  model, _ = fitted_copula
  state = np.random.get_state()[1].copy()
  first, again, other = (model.sample(200, seed=s) for s in (3, 3, 4))
  pd.testing.assert_frame_equal(first, again)
  assert not first.equals(other)
  np.testing.assert_array_equal(np.random.get_state()[1], state)  # Global RNG restored.


def test_copula_rejects_an_unknown_distribution_and_sampling_before_fit():
  schema = Schema(("a",), (), "a")
  with pytest.raises(ValueError, match="numerical_distribution"):
    copula.GaussianCopula(schema, numerical_distribution="weibull")
  with pytest.raises(ValueError, match="before fit"):
    copula.GaussianCopula(schema).sample(3)


def test_uniform_encoder_intervals_and_exact_round_trip():
  values = np.array(["b", "a", "b", "c", "b", "a"])
  codes = copula.uniform_fit(values)
  assert list(codes.categories) == ["b", "a", "c"]     # By decreasing frequency.
  np.testing.assert_allclose(np.diff(codes.edges), [3 / 6, 2 / 6, 1 / 6])
  u = copula.uniform_encode(codes, np.repeat(values, 500), np.random.default_rng(0))
  assert u.min() >= 0.0 and u.max() < 1.0
  np.testing.assert_array_equal(copula.uniform_decode(codes, u), np.repeat(values, 500))
  edges = copula.uniform_encode(codes, ["c"], np.random.default_rng(1))
  assert codes.edges[2] <= edges[0] < 1.0


# --------------------------------------------------------------------- diffusion

def _brute_force_posterior(betas, x0, xt, t, k):
  """q(x_{t-1} | x_t, x_0) by Bayes over the K x K transition matrices."""
  q_step = lambda beta: (1 - beta) * np.eye(k) + beta / k
  qbar_prev = np.eye(k)
  for s in range(t):
    qbar_prev = qbar_prev @ q_step(betas[s])
  joint = q_step(betas[t])[:, xt] * qbar_prev[x0]  # q(x_t | x_{t-1}=.) q(x_{t-1}=. | x_0)
  return joint / joint.sum()


@pytest.mark.parametrize("kind", diffusion.SCHEDULES)
def test_multinomial_posterior_matches_bayes(kind):
  num_timesteps, cards = 25, (3, 5)
  schedule = diffusion.make_schedule(num_timesteps, kind)
  betas = diffusion.beta_schedule(num_timesteps, kind)
  rng = np.random.default_rng(0)
  t = np.arange(num_timesteps)
  x0 = np.stack([rng.integers(0, k, num_timesteps) for k in cards], 1)
  xt = np.stack([rng.integers(0, k, num_timesteps) for k in cards], 1)
  log_post = diffusion.multinomial_posterior(
      schedule, diffusion.log_onehot(jnp.asarray(x0), cards), jnp.asarray(xt),
      jnp.asarray(t), cards)
  post = np.exp(np.asarray(log_post, np.float64))
  for i in t:
    for j, k in enumerate(cards):
      np.testing.assert_allclose(post[i, j, :k],
                                 _brute_force_posterior(betas, x0[i, j], xt[i, j], i, k),
                                 atol=2e-5)
      np.testing.assert_allclose(post[i, j, k:], 0.0)


def test_gaussian_marginal_matches_the_step_by_step_chain():
  num_timesteps, n = 30, 40000
  betas = diffusion.beta_schedule(num_timesteps, "cosine")
  schedule = diffusion.make_schedule(num_timesteps, "cosine")
  rng = np.random.default_rng(0)
  x0 = np.full((n, 1), 1.5)
  chain = x0.copy()
  for t in range(num_timesteps):     # x_t = sqrt(1 - beta_t) x_{t-1} + sqrt(beta_t) z
    chain = np.sqrt(1 - betas[t]) * chain + np.sqrt(betas[t]) * rng.normal(size=(n, 1))
    if t in (0, 10, 20, num_timesteps - 1):
      abar = np.prod(1 - betas[:t + 1])
      xt = np.asarray(diffusion.gaussian_q_sample(
          schedule, jnp.asarray(x0, jnp.float32), jnp.full((n,), t),
          jax.random.normal(jax.random.PRNGKey(t), (n, 1))))
      for draws in (xt, chain):
        assert abs(draws.mean() - np.sqrt(abar) * 1.5) < 0.02
        assert abs(draws.var() - (1 - abar)) < 0.02 + 0.03 * (1 - abar)


def test_beta_schedules_and_bad_config():
  linear = diffusion.beta_schedule(1000, "linear")
  np.testing.assert_allclose(linear[[0, -1]], [1e-4, 0.02])
  cosine = diffusion.beta_schedule(100, "cosine")
  assert np.all(np.diff(cosine) >= 0) and cosine.max() <= 0.999 and cosine.min() > 0
  with pytest.raises(ValueError, match="schedule"):
    diffusion.beta_schedule(10, "sigmoid")
  with pytest.raises(ValueError, match="num_timesteps > 20"):
    diffusion.beta_schedule(20, "linear")
  with pytest.raises(ValueError, match="cardinalities"):
    diffusion.init(jax.random.PRNGKey(0), diffusion.DiffusionConfig(), 1, (0,))


def test_loss_is_finite_traces_once_and_has_finite_grads():
  config = diffusion.DiffusionConfig(num_timesteps=20, hidden=16, depth=1, dim_t=8)
  cards = (3, 4)
  params = diffusion.init(jax.random.PRNGKey(0), config, 2, cards)
  loss_fn = diffusion.make_loss_fn(config, 2, cards)
  step = jax.jit(jax.value_and_grad(chex.assert_max_traces(loss_fn, n=1), has_aux=True))
  rng = np.random.default_rng(0)
  for i in range(3):
    batch = (rng.normal(size=(8, 2)).astype(np.float32),
             np.stack([rng.integers(0, k, 8) for k in cards], 1).astype(np.int32))
    (value, metrics), grads = step(params, batch, jax.random.PRNGKey(i))
    assert np.isfinite(value) and set(metrics) == {"loss_num", "loss_cat"}
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  plain = diffusion.loss(params, batch, jax.random.PRNGKey(2), config, cards)
  np.testing.assert_allclose(plain, value, rtol=1e-5)


@pytest.mark.parametrize("d_num,cards", [(0, (3, 2)), (2, ())])
def test_sample_and_loss_when_one_part_is_empty(d_num, cards):
  config = diffusion.DiffusionConfig(num_timesteps=5, hidden=8, depth=1, dim_t=8)
  params = diffusion.init(jax.random.PRNGKey(0), config, d_num, cards)
  x_num, x_cat = diffusion.sample(params, jax.random.PRNGKey(1), 7, config, d_num, cards)
  assert x_num.shape == (7, d_num) and x_num.dtype == jnp.float32
  assert x_cat.shape == (7, len(cards)) and x_cat.dtype == jnp.int32
  if cards:
    assert np.all(np.asarray(x_cat) < np.asarray(cards)) and np.all(np.asarray(x_cat) >= 0)
  batch = (np.zeros((4, d_num), np.float32), np.zeros((4, len(cards)), np.int32))
  assert np.isfinite(diffusion.loss(params, batch, jax.random.PRNGKey(2), config, cards))


def test_short_fit_learns_a_skewed_categorical_and_a_bimodal_numeric(tmp_path):
  rng = np.random.default_rng(0)
  n, probs = 2000, np.array([0.6, 0.3, 0.1])
  x_cat = rng.choice(3, p=probs, size=(n, 1)).astype(np.int32)
  x_num = np.where(rng.random(n) < 0.5, -1.2, 1.2) + 0.3 * rng.normal(size=n)
  x_num = ((x_num - x_num.mean()) / x_num.std())[:, None].astype(np.float32)
  config = diffusion.DiffusionConfig(num_timesteps=50, hidden=64, depth=2, dim_t=32)
  train_config = default_train_config(num_steps=400, batch_size=256, progress_bar=False,
                                      checkpoint_every=0, log_every=100)
  params = train(init_fn=lambda k: diffusion.init(k, config, 1, (3,)),
                 loss_fn=diffusion.make_loss_fn(config, 1, (3,)),
                 batch_fn=diffusion.make_batch_fn(x_num, x_cat, 256),
                 optimizer=diffusion.optimizer(config, 400), config=train_config,
                 workdir=tmp_path / "run").state.params
  s_num, s_cat = diffusion.sample(params, jax.random.PRNGKey(0), 2000, config, 1, (3,))
  s_num, s_cat = np.asarray(s_num), np.asarray(s_cat)
  np.testing.assert_allclose(np.bincount(s_cat[:, 0], minlength=3) / 2000, probs, atol=0.1)
  assert abs(s_num.mean()) < 0.2 and abs(s_num.std() - 1.0) < 0.2
  assert np.mean(np.abs(s_num) > 0.5) > 0.6     # Most mass in the two modes, not at 0.
