"""The Push-T adapter over gym-pusht, its planning expert, demos and chunked evaluation."""

import math
import subprocess
import sys

import numpy as np
import pytest

from common.envs import pusht


def test_import_is_lazy_and_missing_package_is_one_line(monkeypatch):
  code = ("import sys, common.envs.pusht; "
          "assert not {'gym_pusht', 'gymnasium', 'pygame', 'pymunk'} & set(sys.modules)")
  subprocess.run([sys.executable, "-c", code], check=True)
  monkeypatch.setitem(sys.modules, "gym_pusht", None)
  with pytest.raises(ImportError, match="pip install gym-pusht") as err:
    pusht.PushT()
  assert "\n" not in str(err.value)


def test_normalize_maps_the_documented_ranges_to_unit_box():
  obs = np.array([[0, 0, 0, 0, 0], [512, 512, 512, 512, 2 * math.pi]], np.float32)
  np.testing.assert_allclose(pusht.normalize_obs(obs), [[-1] * 5, [1] * 5], atol=1e-6)
  action = np.array([256.0, 128.0])
  np.testing.assert_allclose(pusht.normalize_action(action), [0.0, -0.5])
  np.testing.assert_allclose(pusht.unnormalize_action(pusht.normalize_action(action)), action)
  np.testing.assert_allclose(pusht.unnormalize_obs(pusht.normalize_obs(obs)), obs, atol=1e-4)


def _need_gym_pusht():
  pytest.importorskip("gym_pusht", reason="gym-pusht is not installed (pip install gym-pusht)")


@pytest.fixture(scope="module")
def env():
  _need_gym_pusht()
  return pusht.PushT()


@pytest.fixture(scope="module")
def expert():
  _need_gym_pusht()
  return pusht.PushTExpert()


def test_reset_and_step(env):
  obs = env.reset(seed=0)
  assert obs.shape == (5,) and obs.dtype == np.float32
  np.testing.assert_array_equal(env.reset(seed=0), obs)          # seeded
  assert not np.array_equal(env.reset(seed=1), obs)
  assert env.success_threshold == 0.95 and env.steps == 0
  obs2, progress, success = env.step(obs[:2] + np.array([20.0, 0.0]))
  assert obs2.shape == (5,) and env.steps == 1 and 0.0 <= progress <= 1.0
  assert progress == pytest.approx(min(env.coverage / 0.95, 1.0))
  assert isinstance(success, bool)
  with pytest.raises(ValueError, match=r"shape \(3,\); expected a finite \(2,\)"):
    env.step(np.zeros(3))


def test_state_obs_matches_the_simulator(env):
  env.reset(seed=5)
  for _ in range(3):
    obs, _, _ = env.step(np.array([256.0, 256.0]))
  s = env.state()
  np.testing.assert_allclose(obs[:2], tuple(env.sim.agent.position), rtol=1e-6)
  np.testing.assert_allclose(obs[:2], s.agent_pos, rtol=1e-6)
  np.testing.assert_allclose(obs[2:4], s.block_pose[:2], rtol=1e-6)
  assert obs[4] == pytest.approx(s.block_pose[2] % (2 * math.pi), abs=1e-5)
  np.testing.assert_allclose(s.goal_pose, [256.0, 256.0, math.pi / 4])
  np.testing.assert_allclose(s.agent_vel, tuple(env.sim.agent.velocity))


def test_expert_model_of_the_physics_matches_the_env(env, expert):
  """The planner's private simulator copy reproduces env.step from the same state."""
  env.reset(seed=0)
  expert.reset()
  block_err, moved = [], 0.0
  for _ in range(40):
    s = env.state()
    action = expert(s)
    expert._load(expert._sim, s.agent_pos, s.agent_vel, s.block_pose)
    expert._sim_step(expert._sim, action)
    env.step(action)
    s2, b = env.state(), expert._sim.block
    np.testing.assert_allclose(tuple(expert._sim.agent.position), s2.agent_pos, atol=1e-9)
    block_err.append(np.abs(np.array([*b.position, b.angle]) - s2.block_pose).max())
    moved = max(moved, np.abs(s2.block_pose - s.block_pose).max())
  assert moved > 1.0 and max(block_err) < 1.5     # contact caching differs slightly


def test_expert_beats_random_policy(env, expert):
  rng = np.random.default_rng(0)
  scores = {"expert": [], "random": []}
  for seed in range(3):
    for name in scores:
      env.reset(seed=100 + seed)
      expert.reset()
      best = env.coverage
      while env.steps < 100 and not env.success:
        action = expert(env.state()) if name == "expert" else rng.uniform(0, 512, 2)
        env.step(action)
        best = max(best, env.coverage)
      scores[name].append(best)
  expert_cov, random_cov = np.mean(scores["expert"]), np.mean(scores["random"])
  assert expert_cov > 0.8 and expert_cov > random_cov + 0.3, scores
  assert expert.cost(env.state().goal_pose, env.state().goal_pose) == 0.0


def test_collect_demos_layout(expert):
  demos = pusht.collect_demos(num_episodes=2, seed=3, max_steps=40, expert=expert)
  assert demos._fields == ("obs", "actions", "progress", "success", "lengths")
  assert demos.obs.shape == (2, 41, 5) and demos.obs.dtype == np.float32
  assert demos.actions.shape == (2, 40, 2) and demos.progress.shape == (2, 41)
  assert demos.success.dtype == bool and demos.lengths.dtype == np.int32
  assert np.all((demos.lengths >= 1) & (demos.lengths <= 40))
  env = pusht.PushT()
  np.testing.assert_array_equal(demos.obs[1, 0], env.reset(seed=4))
  for a in demos.actions[1, :5]:                 # replaying the actions reproduces obs
    obs, progress, _ = env.step(a)
  np.testing.assert_allclose(demos.obs[1, 5], obs, atol=1e-3)
  assert demos.progress[1, 5] == pytest.approx(progress, abs=1e-6)
  assert np.all((demos.progress >= 0) & (demos.progress <= 1))


def test_evaluate_chunked_with_the_expert_as_chunk_policy(expert):
  res = pusht.evaluate_chunked(lambda o: expert.plan_chunk(o, 8), num_episodes=2, seed=0,
                               chunk_len=8, execute_steps=4, max_steps=60)
  assert res.success.shape == res.coverage.shape == res.lengths.shape == (2,)
  assert np.all(res.max_coverage >= res.coverage) and np.all(res.lengths <= 60)
  for traj, n, cov in zip(res.trajectories, res.lengths, res.coverage):
    assert traj.obs.shape == (n + 1, 5) and traj.actions.shape == (n, 2)
    assert traj.coverage[-1] == cov and traj.coverage[0] < res.max_coverage.max()
  with pytest.raises(ValueError, match=r"execute_steps=9 exceeds chunk_len=8"):
    pusht.evaluate_chunked(lambda o: np.zeros((8, 2)), 1, chunk_len=8, execute_steps=9)
  with pytest.raises(ValueError, match=r"chunk of shape \(4, 2\); expected \(8, 2\)"):
    pusht.evaluate_chunked(lambda o: np.zeros((4, 2)), 1, chunk_len=8, execute_steps=4)
