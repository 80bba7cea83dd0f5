"""Unit tests of TapSampling's pieces: windows and their labels, the merge rule, the
Action-VAE, the parameter EMA, the verifier, the samplers and MMD."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from methods import tap_sampling as ts
from methods.tap_sampling import metrics, sampler, training, windows


def _demos(lengths=(20, 30), t_max=30, a=2, o=3, seed=0):
  rng = np.random.default_rng(seed)
  e = len(lengths)
  return SimpleNamespace(obs=rng.normal(size=(e, t_max + 1, o)).astype(np.float32),
                         actions=rng.normal(size=(e, t_max, a)).astype(np.float32),
                         lengths=np.asarray(lengths))


# ---------------------------------------------------------------- windows and labels

def test_chunk_dataset_pads_past_the_end_with_zeros():
  d = _demos()
  data = windows.chunk_dataset(d, horizon=4, scale=2.0)
  assert data.obs.shape == (50, 3) and data.chunks.shape == (50, 4, 2)
  np.testing.assert_allclose(data.chunks[0], d.actions[0, :4] / 2.0)
  last = data.chunks[19]    # episode 0, t = 19: one real action, then padding
  np.testing.assert_allclose(last[0], d.actions[0, 19] / 2.0)
  np.testing.assert_array_equal(last[1:], 0.0)
  np.testing.assert_allclose(data.obs[20], d.obs[1, 0])


def test_resample_path_keeps_the_endpoints_and_a_straight_line():
  steps = np.tile([[1.0, -2.0]], (6, 1))
  out = windows.resample_path(steps, 10)
  np.testing.assert_allclose(out.sum(0), steps.sum(0))
  np.testing.assert_allclose(out, np.tile([[0.6, -1.2]], (10, 1)), atol=1e-12)
  same = windows.resample_path(np.arange(20.).reshape(10, 2), 10)
  np.testing.assert_allclose(same, np.arange(20.).reshape(10, 2))


def test_window_labels_forward_and_backward():
  np.testing.assert_allclose(windows.window_labels(5, 10, 20, 6), np.linspace(0.25, 0.5, 6))
  np.testing.assert_allclose(windows.window_labels(10, 5, 20, 6), np.linspace(0.5, 0.25, 6))


def test_progress_windows_labels_directions_and_reversed_actions():
  d = _demos(lengths=(30, 30))
  b = windows.progress_windows(d, 0, 1, batch_size=400, horizon=10, scale=1.0)
  assert b["chunks"].shape == (400, 10, 2) and b["labels"].shape == (400, 10)
  fwd, lab = b["forward"], b["labels"]
  assert 0.3 < fwd.mean() < 0.7
  assert np.all(np.diff(lab[fwd], axis=1) > 0) and np.all(np.diff(lab[~fwd], axis=1) < 0)
  assert lab.min() >= 0.0 and lab.max() <= 1.0
  # Each label rises or falls by l / L with l in [3, 12] (L = 30).
  span = np.round(np.abs(lab[:, -1] - lab[:, 0]) * 30, 4)
  np.testing.assert_allclose(span, np.round(span), atol=1e-4)
  assert span.min() == 3 and span.max() == 12
  # A window of length H = 10 replays the recorded (or negated reversed) actions exactly.
  assert windows.progress_windows(d, 0, 1, batch_size=400, horizon=10, scale=1.0)[
      "labels"].tobytes() == lab.tobytes()   # pure in (seed, step)
  ten = np.isclose(span, 10)
  i = int(np.argmax(ten & ~fwd))
  t = int(round(lab[i, 0] * 30))
  obs_match = np.flatnonzero(np.all(np.isclose(d.obs[:, t], b["obs"][i]), axis=1))
  e = int(obs_match[0])
  np.testing.assert_allclose(b["chunks"][i], -d.actions[e, t - 10:t][::-1], atol=1e-5)


def test_progress_windows_refuse_short_episodes():
  with pytest.raises(ValueError, match="episode 0 has 5 steps"):
    windows.progress_windows(_demos(lengths=(5, 30)), 0, 0, batch_size=4, horizon=10,
                             scale=1.0)


# ---------------------------------------------------------------- the merge rule

def test_thres_weighted_merge_hand_computed():
  chunks = jnp.array([[[0.0, 0.0]], [[1.0, 2.0]], [[3.0, -1.0]], [[9.0, 9.0]]])
  scores = jnp.array([0.2, 0.6, 0.9, 0.1])
  out = ts.thres_weighted_merge(chunks, scores, 0.5)
  expect = (0.6 * np.array([1.0, 2.0]) + 0.9 * np.array([3.0, -1.0])) / 1.5
  np.testing.assert_allclose(out[0], expect, rtol=1e-6)
  # Threshold 0: every candidate, weighted by its score.
  all_w = ts.thres_weighted_merge(chunks, scores, 0.0)
  np.testing.assert_allclose(all_w, jnp.tensordot(scores / scores.sum(), chunks, 1), rtol=1e-6)


def test_thres_weighted_merge_falls_back_to_the_argmax():
  chunks = jnp.array([[[0.0]], [[1.0]], [[5.0]]])
  out = ts.thres_weighted_merge(chunks, jnp.array([0.1, 0.3, 0.2]), 0.95)
  np.testing.assert_array_equal(out, [[1.0]])


def test_thres_weighted_merge_zero_scores_give_the_plain_mean_and_bad_threshold_fails():
  chunks = jnp.array([[[2.0]], [[4.0]], [[7.0]]])
  out = ts.thres_weighted_merge(chunks, jnp.array([0.0, 0.0, -1.0]), 0.0)
  np.testing.assert_allclose(out, [[3.0]])
  with pytest.raises(ValueError, match="threshold must be finite and in \\[0, 1\\], got 1.5"):
    ts.thres_weighted_merge(chunks, jnp.zeros(3), 1.5)


# ---------------------------------------------------------------- the Action-VAE

def _two_mode_chunks(n, key):
  k1, k2 = jax.random.split(key)
  t = jnp.linspace(0, 1, 10)
  sign = jnp.where(jax.random.bernoulli(k1, 0.5, (n, 1)), 1.0, -1.0)
  amp = jax.random.uniform(k2, (n, 1), minval=0.3, maxval=0.9)
  x = jnp.stack([sign * amp * jnp.sin(np.pi * t), amp * t], axis=-1)
  return x


def test_vae_reconstructs_better_than_the_mean_and_its_ema_tracks():
  vae = ts.ActionVAE(horizon=10, action_dim=2, latent_dim=4, width=64, depth=4)
  data = _two_mode_chunks(512, jax.random.PRNGKey(0))
  params = vae.init(jax.random.PRNGKey(1), data[:2], jax.random.PRNGKey(2))
  opt = ts.with_parameter_ema(optax.adam(3e-3), 0.9)
  state = opt.init(params)
  loss_fn = ts.vae_loss_fn(vae)

  @jax.jit
  def step(params, state, key):
    idx = jax.random.randint(key, (128,), 0, data.shape[0])
    (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(params, {"chunks": data[idx]}, key)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state

  for i in range(600):
    params, state = step(params, state, jax.random.PRNGKey(10 + i))
  test = _two_mode_chunks(256, jax.random.PRNGKey(99))
  rec = jnp.mean(jnp.square(ts.reconstruct(vae, params, test) - test))
  base = jnp.mean(jnp.square(jnp.mean(data, 0) - test))
  assert rec < 0.1 * base
  ema = ts.parameter_ema(state)
  rec_ema = jnp.mean(jnp.square(ts.reconstruct(vae, ema, test) - test))
  assert rec_ema < 0.2 * base
  # Resampling: M chunks of the right shape, near the proposals' modes.
  extra = ts.resample(vae, params, jax.random.PRNGKey(5), test[:4], 12)
  assert extra.shape == (12, 10, 2) and bool(jnp.all(jnp.abs(extra) <= 1.0))


def test_parameter_ema_is_the_exponential_average():
  opt = ts.with_parameter_ema(optax.sgd(1.0), 0.5)
  params = {"w": jnp.array(4.0)}
  state = opt.init(params)
  updates, state = opt.update({"w": jnp.array(2.0)}, state, params)   # w -> 2
  params = optax.apply_updates(params, updates)
  np.testing.assert_allclose(ts.parameter_ema(state)["w"], 0.5 * 4.0 + 0.5 * 2.0)
  with pytest.raises(ValueError, match="EMA decay must be in \\[0, 1\\), got 1.0"):
    ts.with_parameter_ema(optax.sgd(1.0), 1.0)


# ---------------------------------------------------------------- policies, verifier, sampler

def _models(policy="flow"):
  h, a, o = 10, 2, 3
  pol = ts.make_policy(policy, h, a, hidden=(16,), num_steps=3)
  vae = ts.ActionVAE(h, a, latent_dim=4, width=16, depth=3)
  ver = ts.ProgressVerifier(h, a, hidden=(16,))
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  return sampler.Models(pol, pol.init(keys[0], o), vae,
                        vae.init(keys[1], jnp.zeros((2, h, a)), keys[2]), ver,
                        ver.init(keys[2], o), 0.05)


@pytest.mark.parametrize("policy,methods", [
    ("gaussian", ("single", "tap", "best_of_k", "gaussian", "vae_random")),
    ("flow", ("single", "tap"))])   # the flow sampler's compile is the slow part
def test_every_method_returns_one_chunk_in_bounds(policy, methods):
  models = _models(policy)
  obs = jnp.ones(3)
  cfgs = [ts.SamplerConfig(m, num_policy=4, total=16, threshold=0.5) for m in methods]

  @jax.jit
  def run(key):
    return ([ts.act(models, c, key, obs) for c in cfgs],
            [ts.candidates(models, c, key, obs) for c in cfgs])

  chunks, cands = run(jax.random.PRNGKey(1))
  for method, out, cand in zip(methods, chunks, cands):
    assert out.shape == (10, 2) and bool(jnp.all(jnp.abs(out) <= 0.05 + 1e-7)), method
    assert cand.shape == ((1 if method == "single" else 16), 10, 2), method
  # TapSampling's first N candidates are the policy's own proposals.
  tap = cands[methods.index("tap")]
  again = models.policy.sample(models.policy_params, jax.random.split(
      jax.random.PRNGKey(1))[0], obs, 4)
  np.testing.assert_allclose(tap[:4], again, rtol=1e-5, atol=1e-6)


def test_oracle_picks_the_candidate_with_the_most_true_progress():
  env = SimpleNamespace(step=lambda s, a: s + a[0], progress=lambda s: -jnp.abs(s - 1.0))
  chunks = jnp.array([[[0.1]] * 4, [[0.3]] * 4, [[0.25]] * 4])
  from methods.tap_sampling import baselines
  prog = baselines.true_progress(env, jnp.array(0.0), chunks, 3)
  np.testing.assert_allclose(prog, [-0.7, -0.1, -0.25], atol=1e-6)


def test_sampler_config_errors_are_one_line():
  with pytest.raises(ValueError, match="total=3 must be >= num_policy \\(N\\) = 4"):
    sampler.check_config(ts.SamplerConfig("tap", num_policy=4, total=3))
  with pytest.raises(ValueError, match="unknown sampling method 'magic'"):
    sampler.check_config(ts.SamplerConfig("magic"))
  with pytest.raises(ValueError, match="threshold must be finite and in \\[0, 1\\], got -0.1"):
    sampler.check_config(ts.SamplerConfig("tap", threshold=-0.1))
  with pytest.raises(ValueError, match="unknown policy 'mlp'"):
    ts.make_policy("mlp", 10, 2)


def test_policies_learn_a_conditional_chunk():
  """Both base policies fit a chunk that depends on the observation's sign."""
  for name in ("flow", "gaussian"):
    pol = ts.make_policy(name, 4, 1, hidden=(64, 64), num_steps=8)
    obs = jnp.array([[1.0], [-1.0]] * 64)
    chunks = jnp.broadcast_to(0.5 * obs[:, :, None], (128, 4, 1))
    params = pol.init(jax.random.PRNGKey(0), 1)
    opt = optax.adam(3e-3)
    state = opt.init(params)

    @jax.jit
    def step(params, state, key):
      g = jax.grad(lambda p: pol.loss_fn(p, {"obs": obs, "chunks": chunks}, key)[0])(params)
      u, state = opt.update(g, state)
      return optax.apply_updates(params, u), state

    for i in range(400):
      params, state = step(params, state, jax.random.PRNGKey(i))
    x = pol.sample(params, jax.random.PRNGKey(7), jnp.array([-1.0]), 64)
    assert abs(float(jnp.mean(x)) + 0.5) < 0.1, name


def test_verifier_learns_forward_above_backward():
  d = _demos(lengths=(40, 40, 40), t_max=40, o=3)
  d.actions[:] = 0.5     # the demonstrator always moves the same way,
  d.obs[:, :, 0] = np.arange(41) / 40.0   # and the state shows how far it has come
  ver = ts.ProgressVerifier(10, 2, hidden=(64, 64))
  params = ver.init(jax.random.PRNGKey(0), 3)
  batch_fn = training.window_batch_fn(d, 256, 10, 1.0)
  opt = optax.adam(3e-3)
  state = opt.init(params)

  @jax.jit
  def step(params, state, batch):
    g = jax.grad(lambda p: ver.loss_fn(p, batch, None)[0])(params)
    u, state = opt.update(g, state)
    return optax.apply_updates(params, u), state

  for i in range(300):
    params, state = step(params, state, batch_fn(0, i))
  test = windows.progress_windows(d, 1, 0, batch_size=400, horizon=10, scale=1.0)
  fwd = test["forward"]
  obs, chunks = test["obs"][fwd], test["chunks"][fwd]
  ahead = ver.score(params, obs, chunks)
  back = ver.score(params, obs, windows.reverse_chunks(chunks))
  assert float(jnp.mean(ahead > back)) > 0.9     # same states, reversed motion scores lower
  pred = ver.predict(params, test["obs"], test["chunks"])
  assert float(metrics.pearson(pred, test["labels"])) > 0.5


# ---------------------------------------------------------------- MMD

def test_mmd2_matches_brute_force_and_is_unbiased_near_zero():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(6, 3)), rng.normal(size=(5, 3)) + 1.0
  k = lambda a, b: np.exp(-np.sum((a - b) ** 2) / 2.0)
  sxx = sum(k(x[i], x[j]) for i in range(6) for j in range(6) if i != j) / 30
  syy = sum(k(y[i], y[j]) for i in range(5) for j in range(5) if i != j) / 20
  sxy = sum(k(x[i], y[j]) for i in range(6) for j in range(5)) / 30
  np.testing.assert_allclose(metrics.mmd2(jnp.asarray(x), jnp.asarray(y), 1.0),
                             sxx + syy - 2 * sxy, rtol=1e-5)
  # Same law: the unbiased estimate averages to ~0 (its s.e. bounds the mean).
  keys = jax.random.split(jax.random.PRNGKey(0), 400)
  vals = jax.vmap(lambda kk: metrics.mmd2(*jnp.split(jax.random.normal(kk, (8, 2)), 2), 1.0))(keys)
  assert abs(float(vals.mean())) < 4 * float(vals.std()) / np.sqrt(400)
