"""PPO with GAE: GAE against a numpy loop, the loss against a hand-computed case,
config errors, exact resume, and PPO solving an easy xminigrid task."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.rl import ppo


def _gae_numpy(r, v, d, last, gamma, lam):
  t_len, n = r.shape
  adv = np.zeros((t_len, n))
  nxt_adv = np.zeros(n)
  for t in reversed(range(t_len)):
    nxt_v = last if t == t_len - 1 else v[t + 1]
    delta = r[t] + gamma * nxt_v * (1 - d[t]) - v[t]
    nxt_adv = delta + gamma * lam * (1 - d[t]) * nxt_adv
    adv[t] = nxt_adv
  return adv, adv + v


def test_gae_matches_a_numpy_loop():
  rng = np.random.default_rng(0)
  r, v = rng.normal(size=(9, 3)), rng.normal(size=(9, 3))
  d, last = rng.random((9, 3)) < 0.3, rng.normal(size=3)
  adv, ret = ppo.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(d), jnp.asarray(last), 0.97,
                     0.9)
  want_adv, want_ret = _gae_numpy(r, v, d.astype(float), last, 0.97, 0.9)
  np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-6)


def test_ppo_loss_hand_computed():
  """Two samples, two actions. Sample 0: ratio e^0.5 = 1.65 > 1.2 with A > 0 -> clipped
  term 1.2 A; sample 1: ratio 1 with A < 0. Normalised advantages are (+1, -1)."""
  config = ppo.PPOConfig(num_envs=1, num_steps=2, num_minibatches=1, clip_eps=0.2,
                         vf_coef=0.5, ent_coef=0.01)
  logits = jnp.log(jnp.array([[0.5, 0.5], [0.5, 0.5]]))
  old_logp = jnp.array([math.log(0.5) - 0.5, math.log(0.5)])
  loss, m = ppo.ppo_loss(logits, jnp.array([1.0, 0.0]), jnp.array([0, 1]), old_logp,
                         jnp.array([0.5, 0.0]), jnp.array([2.0, 0.0]),
                         jnp.array([2.0, 1.0]), config)
  a = np.array([1.0, -1.0]) * (1 / (1 + 1e-8))
  policy = -np.mean([min(math.exp(0.5) * a[0], 1.2 * a[0]), a[1]])
  # value: sample 0: V=1, V_old=0.5, clipped to 0.7; R=2 -> max(1, 1.69) = 1.69; sample 1: 1.
  value = 0.5 * np.mean([1.69, 1.0])
  entropy = math.log(2.0)
  assert float(m["policy_loss"]) == pytest.approx(policy, rel=1e-5)
  assert float(m["value_loss"]) == pytest.approx(value, rel=1e-5)
  assert float(loss) == pytest.approx(policy + 0.5 * value - 0.01 * entropy, rel=1e-5)


def test_rollout_that_does_not_split_into_minibatches_is_refused():
  with pytest.raises(ValueError, match=r"num_envs x num_steps = 3 x 5 = 15 .* "
                                       r"num_minibatches=4"):
    ppo.PPOConfig(num_envs=3, num_steps=5, num_minibatches=4)


@pytest.fixture(scope="module")
def empty_task():
  from methods.glance import envs, networks
  env, spec = envs.make_env("MiniGrid-Empty-5x5")
  net = networks.ActorCritic(spec.num_actions)
  params = net.init(jax.random.PRNGKey(0), jnp.zeros((1,) + spec.obs_shape, jnp.uint8))["params"]
  return env, lambda p, o: net.apply({"params": p}, o), params


@pytest.fixture(scope="module")
def small_update(empty_task):
  """The small PPO setting of the resume, seeds and scan tests, with one `update`
  function between them, so that its jitted update compiles once, not once per test."""
  env, apply_fn, params = empty_task
  config = ppo.PPOConfig(num_envs=4, num_steps=16, update_epochs=1, num_minibatches=2)
  opt = ppo.make_optimizer(config, 4)
  update = ppo.make_update(env, apply_fn, config, opt)
  init = lambda k: ppo.init_runner(env, params, config, opt, k)
  return update, init


def test_ppo_solves_an_easy_xminigrid_task(empty_task, tmp_path):
  """MiniGrid-Empty-5x5 (reward on reaching the goal, more the sooner): a random policy
  reaches the goal in about 70% of its episodes within the time limit; PPO, after 24
  updates of 16 x 64 steps (25k steps), reaches it in every episode and needs a few steps.

  Two epochs of two minibatches per update: the epochs and minibatches are scanned, so
  the default 4 x 4 compiles as fast, but its 16 gradient steps per update cost this
  test 43% more CPU (28.7 s against 20.1 s for 2 x 2 before the scan, 21.1 s after;
  at 4 x 4 seed 1 also solves it). Rollouts of 64 steps, not 128: each update
  runs in half the time and learns as much. Measured at seeds 1-4: every episode a
  success from update 12-18 on (6-12 updates to spare; at 128 steps 11-13); from the
  first to the last update the episodes grow 19-33x (asserted: > 4x; at 128 steps
  14-21x) and the reward 27-52x (> 5x; at 128 steps 27-70x)."""
  env, apply_fn, params = empty_task
  config = ppo.PPOConfig(num_envs=16, num_steps=64, update_epochs=2, num_minibatches=2,
                         learning_rate=2.5e-3)
  opt = ppo.make_optimizer(config, 24)
  update = ppo.make_update(env, apply_fn, config, opt)
  result = ppo.train(update, lambda: ppo.init_runner(env, params, config, opt,
                                                     jax.random.PRNGKey(1)),
                     24, str(tmp_path), chunk=12)
  first, last = result.history[0], result.history[-1]
  assert ppo.episode_success_rate(result.history, 3) == 1.0
  assert last["episodes"] > 4 * first["episodes"]        # much shorter episodes
  assert last["reward"] > 5 * first["reward"]


def test_an_interrupted_run_resumes_exactly(small_update, tmp_path):
  update, init_from = small_update
  init = lambda: init_from(jax.random.PRNGKey(2))
  whole = ppo.train(update, init, 4, str(tmp_path / "a"), chunk=2)
  ppo.train(update, init, 2, str(tmp_path / "b"), chunk=2)            # "killed" after 2
  resumed = ppo.train(update, init, 4, str(tmp_path / "b"), chunk=2)
  for x, y in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert [r["reward"] for r in whole.history] == [r["reward"] for r in resumed.history]


def test_seeds_in_parallel_equal_separate_runs(small_update, tmp_path):
  update, init = small_update
  keys = jax.random.split(jax.random.PRNGKey(3), 2)
  both = ppo.train(update, lambda: jax.vmap(init)(keys), 2, str(tmp_path / "v"), chunk=2,
                   num_seeds=2)
  for i in range(2):
    alone = ppo.train(update, lambda: init(keys[i]), 2, str(tmp_path / f"s{i}"), chunk=2)
    for x, y in zip(jax.tree.leaves(alone.state.params), jax.tree.leaves(both.state.params)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y)[i], rtol=1e-4, atol=1e-5)
    assert both.history[-1][f"reward/{i}"] == pytest.approx(alone.history[-1]["reward"],
                                                            rel=1e-4, abs=1e-6)


def test_vmapped_scan_and_seed_by_seed_agree(small_update):
  """The accelerator path (vmapped seeds in one lax.scan) and the CPU path (one call per
  seed and update) compute the same runs."""
  update, init = small_update
  keys = jax.random.split(jax.random.PRNGKey(5), 2)
  a, ma = ppo.run_updates(update, jax.vmap(init)(keys), 2, scan=True, num_seeds=2)
  b, mb = ppo.run_updates(update, jax.vmap(init)(keys), 2, scan=False, num_seeds=2)
  for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)
  assert ma["reward"].shape == mb["reward"].shape == (2, 2)
  np.testing.assert_allclose(ma["reward"], mb["reward"], rtol=1e-4, atol=1e-6)


def test_epochs_scan_visits_each_permutation_in_order():
  """`_epochs` (two nested lax.scans): epoch e splits the key once and runs minibatch i
  on rows order_e[i B:(i + 1) B], order_e a fresh permutation of the N T rows, with
  the carry threaded through every step in order; the step is traced once, however
  many epochs x minibatches it runs (so compile time does not grow with them)."""
  traces = []

  def step(carry, mb):
    traces.append(None)
    return carry + 1, {"rows": mb["row"], "at": carry}

  def run(epochs, minibatches):
    config = ppo.PPOConfig(num_envs=3, num_steps=4, update_epochs=epochs,
                           num_minibatches=minibatches)
    batch = {"row": jnp.arange(12)}
    return jax.jit(lambda key: ppo._epochs(step, config, 0, batch, key))(
        jax.random.PRNGKey(7))

  carry, key, m = run(3, 4)
  assert len(traces) == 1
  want_key = jax.random.PRNGKey(7)
  for e in range(3):
    want_key, sub = jax.random.split(want_key)
    order = np.asarray(jax.random.permutation(sub, 12))
    np.testing.assert_array_equal(np.asarray(m["rows"][e]), order.reshape(4, 3))
  np.testing.assert_array_equal(np.asarray(key), np.asarray(want_key))
  assert int(carry) == 12 and np.asarray(m["at"]).ravel().tolist() == list(range(12))
  traces.clear()
  run(1, 1)
  assert len(traces) == 1
