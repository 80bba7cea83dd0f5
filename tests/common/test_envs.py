"""Tests of common/envs: the push and reach tasks (what their dynamics conserve), the
scripted experts (reliable and multimodal), the registry, and the rollouts."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common import envs
from common.envs import push, reach, rollout

NUM_DEMOS = 64
# Obs index of the goal's x coordinate, and the sign of the lateral side (left of the
# start-goal direction) that mode +1 passes on: counter-clockwise round the block
# from its goal side ends on the left; round the blocker from the start side, right.
GOAL_X = {"push": 6, "reach": 2}
MODE_SIDE = {"push": 1, "reach": -1}


def _demos(name):
  env = envs.make(name)
  return env, rollout.collect_demos(env, jax.random.PRNGKey(0), NUM_DEMOS)


@pytest.fixture(scope="module")
def push_demos():
  return _demos("push")


@pytest.fixture(scope="module")
def reach_demos():
  return _demos("reach")


@pytest.fixture(params=envs.NAMES)
def env_demos(request):
  return request.getfixturevalue(f"{request.param}_demos")


def _initial(demos, num=None):
  """The episodes' initial states (the first ``num``)."""
  return jax.tree.map(lambda x: x[:num, 0], demos.states)


def _perp(u):
  return np.stack([-u[..., 1], u[..., 0]], axis=-1)


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_registry_and_its_errors():
  assert envs.NAMES == ("push", "reach")
  assert envs.make("push").name == "push" and envs.make("reach").name == "reach"
  assert envs.make("push") is envs.make("push", max_steps=push.MAX_STEPS)
  with pytest.raises(ValueError, match="unknown env 'nope'; expected one of push, reach"):
    envs.make("nope")
  with pytest.raises(ValueError, match="gym-pusht adapter"):
    envs.make("pusht")
  with pytest.raises(ValueError, match="unknown option.*horizon"):
    envs.make("reach", horizon=3)
  with pytest.raises(ValueError, match="max_steps=0"):
    envs.make("push", max_steps=0)


def test_demos_shapes_and_expert_success(env_demos):
  env, demos = env_demos
  t = env.max_steps
  assert demos.obs.shape == (NUM_DEMOS, t + 1, env.obs_dim)
  assert demos.obs.dtype == jnp.float32 and demos.actions.dtype == jnp.float32
  assert demos.actions.shape == (NUM_DEMOS, t, env.action_dim)
  assert np.all(np.abs(demos.actions) <= env.action_high + 1e-7)
  assert np.mean(demos.success) >= 0.9
  assert np.all(demos.lengths[demos.success] < t)


def test_progress_in_unit_interval_one_at_success_and_success_sticky(env_demos):
  env, demos = env_demos
  prog = np.asarray(demos.progress)
  assert prog.min() >= 0.0 and prog.max() <= 1.0 and np.all(prog[:, 0] < 1e-6)
  flags = np.asarray(jax.vmap(jax.vmap(env.success))(demos.states))
  assert np.all(np.diff(flags.astype(int), axis=1) >= 0)  # Sticky.
  rows = np.nonzero(demos.success)[0]
  np.testing.assert_array_equal(prog[rows, demos.lengths[rows]], 1.0)


def _passing_side(name, states):
  """Lateral sign (w.r.t. the initial start/block -> goal direction) at which the agent
  first passes the obstacle (blocker / block centre) along that direction."""
  if name == "push":
    agent, centre, start = states.pusher, states.block[:, 0, :2], states.block[:, 0, :2]
  else:
    agent, centre, start = states.agent, states.obstacles[:, 0, 0, :2], states.agent[:, 0]
  u = _unit(np.asarray(states.goal[:, 0]) - np.asarray(start))
  rel = np.asarray(agent) - np.asarray(centre)[:, None]
  along = np.einsum("etd,ed->et", rel, u)
  passed = along < 0 if name == "push" else along > 0
  first = np.argmax(passed & (np.arange(rel.shape[1]) > 0), axis=1)
  lateral = np.einsum("ed,ed->e", rel[np.arange(len(first)), first], _perp(u))
  return np.sign(lateral)


def test_expert_is_multimodal(env_demos):
  env, demos = env_demos
  mode = np.asarray(demos.states.mode[:, 0])
  assert 0.25 <= np.mean(mode == 1) <= 0.75  # Both modes are drawn.
  side = _passing_side(env.name, demos.states)
  # Each mode passes on its own side: two distinct families of paths.
  assert np.mean(side == MODE_SIDE[env.name] * mode) >= 0.9
  assert 0.25 <= np.mean(side > 0) <= 0.75


def _random_pushes(key, num=32, steps=60):
  """Episodes whose actions aim at the block (many contacts, some beyond the bounds),
  with the pusher position it reaches before any contact correction."""
  def episode(k):
    k0, k1 = jax.random.split(k)
    def body(s, kk):
      to_block = s.block[:2] - s.pusher
      aim = push.MAX_STEP * to_block / jnp.linalg.norm(to_block)
      action = aim + 1.5 * push.MAX_STEP * jax.random.normal(kk, (2,))
      free = jnp.clip(s.pusher + jnp.clip(action, -push.MAX_STEP, push.MAX_STEP),
                      -push.PUSHER_LIMIT, push.PUSHER_LIMIT)
      nxt = push.step(s, action)
      return nxt, (s, nxt, free)
    return jax.lax.scan(body, push.reset(k0), jax.random.split(k1, steps))[1]
  return jax.jit(jax.vmap(episode))(jax.random.split(key, num))


def _corners(block):
  h = push.BLOCK_HALF_SIZE
  c, s = np.cos(block[..., 2]), np.sin(block[..., 2])
  local = np.array([[h, h], [-h, h], [-h, -h], [h, -h]])
  x = block[..., None, 0] + c[..., None] * local[:, 0] - s[..., None] * local[:, 1]
  y = block[..., None, 1] + s[..., None] * local[:, 0] + c[..., None] * local[:, 1]
  return np.stack([x, y], axis=-1)


def test_push_contact_dynamics():
  before, after, free = _random_pushes(jax.random.PRNGKey(1))
  sd = jax.jit(jax.vmap(jax.vmap(lambda b, p: push._contact(b, p)[0])))
  # No penetration after any step.
  assert np.min(sd(after.block, after.pusher)) >= push.PUSHER_RADIUS - 1e-5
  # Without contact the block does not move (and the pusher moves freely).
  no_contact = np.asarray(sd(before.block, free)) >= push.PUSHER_RADIUS
  moved = np.any(np.asarray(after.block) != np.asarray(before.block), axis=-1)
  assert 0.1 < no_contact.mean() < 0.9  # Both cases occur.
  assert not np.any(moved & no_contact)
  np.testing.assert_array_equal(np.asarray(after.pusher)[no_contact],
                                np.asarray(free)[no_contact])
  # Block and pusher stay on the table (the pushes drive blocks into the walls).
  assert np.abs(_corners(np.asarray(after.block))).max() <= push.TABLE_HALF_SIZE
  assert np.abs(np.asarray(after.block[..., :2])).max() >= push.BLOCK_LIMIT - 1e-6
  assert np.abs(np.asarray(after.pusher)).max() <= push.PUSHER_LIMIT + 1e-6
  # Pushes rotate the block.
  assert np.abs(np.asarray(after.block[..., 2] - before.block[..., 2])).max() > 0.05


def test_push_reset_distribution(push_demos):
  states = _initial(push_demos[1])
  dist = np.linalg.norm(np.asarray(states.block[:, :2] - states.goal), axis=-1)
  assert dist.min() >= push.MIN_GOAL_DISTANCE
  np.testing.assert_allclose(states.dist0, dist, rtol=1e-6)
  clearance = np.linalg.norm(np.asarray(states.pusher - states.block[:, :2]), axis=-1)
  assert clearance.min() >= np.sqrt(2) * push.BLOCK_HALF_SIZE + push.PUSHER_RADIUS
  assert np.abs(np.asarray(states.goal)).max() <= push.SPAWN_HALF_SIZE


def test_reach_dynamics_and_blocker(reach_demos):
  states = _initial(reach_demos[1], 32)
  obstacles = np.asarray(states.obstacles)
  # The blocker cuts the start-goal segment: the start-goal line passes its centre
  # closer than its radius, and the centre projects between the two.
  start, goal = np.asarray(states.agent), np.asarray(states.goal)
  u = _unit(goal - start)
  rel = obstacles[:, 0, :2] - start
  assert np.all(np.abs(np.einsum("ed,ed->e", rel, _perp(u))) < obstacles[:, 0, 2])
  along = np.einsum("ed,ed->e", rel, u)
  assert np.all((along > 0) & (along < np.linalg.norm(goal - start, axis=-1)))

  def walk(s, k):  # Actions aimed at the blocker, noisy, partly beyond the bounds.
    aim = jnp.clip(10 * (s.obstacles[0, :2] - s.agent), -0.05, 0.05)
    nxt = reach.step(s, aim + 0.08 * jax.random.normal(k, (2,)))
    return nxt, nxt.agent
  keys = jax.random.split(jax.random.PRNGKey(4), (32, 60))
  agents = np.asarray(jax.jit(jax.vmap(
      lambda s, ks: jax.lax.scan(walk, s, ks)[1]))(states, keys))
  gap = np.linalg.norm(agents[:, :, None] - obstacles[:, None, :, :2], axis=-1)
  gap = gap - obstacles[:, None, :, 2]
  assert gap.min() >= -1e-5  # Never inside an obstacle...
  assert np.mean(gap[..., 0] < 1e-3) > 0.2  # ...though often on the blocker's boundary.
  assert np.abs(agents).max() <= reach.ARENA_HALF_SIZE


def test_reach_free_move_is_clipped_displacement(reach_demos):
  state = _initial(reach_demos[1], 1)
  free = state._replace(obstacles=state.obstacles.at[..., 2].set(0.0),
                        agent=jnp.zeros((1, 2)))
  nxt = jax.jit(jax.vmap(reach.step))(free, jnp.array([[0.3, -0.01]]))
  np.testing.assert_allclose(nxt.agent, [[reach.MAX_STEP, -0.01]], rtol=1e-6)


def test_step_jits_once_and_vmap_matches_loop(env_demos):
  env, demos = env_demos
  states = jax.tree.map(lambda x: x[:6, 5], demos.states)  # Mid-episode states.
  actions = np.random.default_rng(0).normal(0.0, 0.08, (6, 2)).astype(np.float32)
  step = jax.jit(chex.assert_max_traces(env.step, n=1))
  looped = [step(jax.tree.map(lambda x: x[i], states), actions[i]) for i in range(6)]
  batched = jax.jit(jax.vmap(env.step))(states, actions)
  for i, one in enumerate(looped):
    chex.assert_trees_all_close(one, jax.tree.map(lambda x: x[i], batched), atol=1e-6)


def _expert_chunk_policy(env, module, chunk_len):
  """The expert as a chunk policy: from the state the observation shows (mode fixed by
  the goal, so that successive chunks agree), it plans chunk_len steps of itself."""
  def act(key, obs):
    mode = jnp.where(obs[GOAL_X[env.name]] > 0, 1, -1)
    state = module.state_from_obs(obs, mode)
    def body(s, k):
      a = env.expert(s, k)
      return env.step(s, a), a
    return jax.lax.scan(body, state, jax.random.split(key, chunk_len))[1]
  return act


def test_run_chunked_with_the_expert():
  env, chunk_len, execute_steps = envs.make("push"), 8, 7  # 100 = 14 * 7 + 2.
  act = _expert_chunk_policy(env, push, chunk_len)
  out = rollout.run_chunked(env, act, jax.random.PRNGKey(8), 32, chunk_len, execute_steps)
  t = env.max_steps
  assert out.obs.shape == (32, t + 1, env.obs_dim)
  assert out.actions.shape == (32, t, env.action_dim)
  np.testing.assert_array_equal(out.final_progress, out.progress[:, -1])
  np.testing.assert_array_equal(out.states.t[:, -1], t)  # Remainder: exactly T steps.
  assert np.mean(out.success) >= 0.9
  # The same call does not compile again.
  size = rollout._run_chunked._cache_size()
  rollout.run_chunked(env, act, jax.random.PRNGKey(9), 32, chunk_len, execute_steps)
  assert rollout._run_chunked._cache_size() == size


def _straight_at_goal(speed, key, obs, state):
  del key, obs
  to_goal = state.goal - state.agent
  return jnp.tile(speed * to_goal / jnp.linalg.norm(to_goal), (4, 1))


def test_run_chunked_passes_params_and_state():
  env = envs.make("reach")
  out = rollout.run_chunked(env, _straight_at_goal, jax.random.PRNGKey(0), 4, 4, 4,
                            params=jnp.float32(0.02), with_state=True)
  start, goal = out.states.agent[:, 0], out.states.goal[:, 0]
  np.testing.assert_allclose(out.actions[:, 0], 0.02 * _unit(np.asarray(goal - start)),
                             rtol=1e-5)


def test_run_chunked_errors():
  env = envs.make("reach")
  zeros = lambda key, obs: jnp.zeros((4, 2))
  with pytest.raises(ValueError, match="execute_steps=5; expected <= chunk_len=4"):
    rollout.run_chunked(env, zeros, jax.random.PRNGKey(0), 2, 4, 5)
  with pytest.raises(ValueError, match=r"act_fn returned shape \(4, 2\)"):
    rollout.run_chunked(env, zeros, jax.random.PRNGKey(0), 2, 6, 3)
  with pytest.raises(ValueError, match="num_episodes=0"):
    rollout.collect_demos(env, jax.random.PRNGKey(0), 0)


def _turn(states, chunks):
  """Angle swept round the block centre by the pusher over each chunk (no contact)."""
  rel0 = np.asarray(states.pusher - states.block[:, :2])[:, None]
  rel1 = rel0 + np.asarray(chunks).sum(axis=2)
  turn = np.arctan2(rel1[..., 1], rel1[..., 0]) - np.arctan2(rel0[..., 1], rel0[..., 0])
  return np.mod(turn + np.pi, 2 * np.pi) - np.pi


def test_expert_chunks_cover_both_modes(push_demos):
  env, demos = push_demos
  states = _initial(demos, 4)
  chunks = rollout.expert_chunks(env, jax.random.PRNGKey(11), states, chunk_len=8, num=16)
  assert chunks.shape == (4, 16, 8, 2)
  turn = _turn(states, chunks)
  assert np.all((turn > 0).any(1) & (turn < 0).any(1))  # Both ways round (mode redrawn).
  # The demos' own first chunks (mode kept) turn the way their mode says.
  own = _turn(states, np.asarray(demos.actions[:4, None, :8]))[:, 0]
  np.testing.assert_array_equal(np.sign(own), np.asarray(states.mode))


@pytest.mark.usefixtures("x64")
def test_states_stay_float32_under_x64():
  for name in envs.NAMES:
    env = envs.make(name)
    state = jax.jit(lambda k: env.step(env.reset(k), jnp.zeros(2, jnp.float64)))(
        jax.random.PRNGKey(0))
    dtypes = {x.dtype for x in jax.tree.leaves(state)}
    assert dtypes <= set(map(np.dtype, ("float32", "int32", "bool")))
