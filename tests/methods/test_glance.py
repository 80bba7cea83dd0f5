"""GLANCE's pieces: the description of a view, the EMA target, the intrinsic reward's
zero and projector re-initialisation (bad input: tests/test_bad_input.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods.glance import curiosity, envs, language, networks


def _view():
  """A 7x7 view: walls around, the agent at (6, 3) facing up, floor in front, a yellow
  key two cells to the upper left, a locked door further right."""
  tile = np.full((7, 7), 1)
  tile[0, :] = 2
  tile[4, 2] = 7                       # key: row 4 col 2 -> distance 2 + 1 = 3, left
  tile[3, 5] = 8                       # locked door: distance 3 + 2 = 5
  colour = np.zeros((7, 7), int)
  colour[4, 2], colour[3, 5], colour[0, :] = 5, 5, 6
  return np.stack([tile, colour], -1).astype(np.uint8)


def test_description_of_a_constructed_view():
  tokens = language.describe(_view())
  assert language.to_text(tokens) == "front: floor none; nearest: key yellow, left, 3"
  empty = np.zeros((7, 7, 2), np.uint8)
  empty[5, 3] = (2, 6)
  assert language.to_text(language.describe(empty)) == "front: wall grey; nearest: nothing"
  batch = language.describe(np.stack([_view(), empty]))
  assert batch.shape == (2, 6)


def test_ema_target_update():
  target, online = {"w": jnp.array([1.0, 2.0])}, {"w": jnp.array([3.0, 0.0])}
  for tau, want in ((0.75, [1.5, 1.5]), (0.0, [3.0, 0.0])):
    after = curiosity._after_update(curiosity.CuriosityConfig(tau=tau, reinit_every=0))
    _, extra = after({"policy": {"encoder": online}}, {"target": target}, 1)
    np.testing.assert_allclose(extra["target"]["w"], want)


def test_intrinsic_reward_is_zero_when_prediction_equals_target():
  y = jax.random.normal(jax.random.PRNGKey(0), (5, 8))
  np.testing.assert_allclose(curiosity.normalised_error(2.5 * y, y), 0.0, atol=1e-6)
  assert np.all(np.asarray(curiosity.normalised_error(-y, y)) == pytest.approx(4.0, rel=1e-5))
  r, _ = curiosity._normalise(jnp.zeros((4, 3)), jnp.zeros((4, 3), bool), {"m2": jnp.ones(())},
                              curiosity.CuriosityConfig(beta=0.5))
  np.testing.assert_array_equal(r, 0.0)


def _policy_params(spec):
  """The policy network's parameters for `spec`'s view (jitted: one program, not one per
  initialiser)."""
  net = networks.ActorCritic(spec.num_actions)
  dummy = jnp.zeros((1,) + spec.obs_shape, jnp.uint8)
  return jax.jit(net.init)(jax.random.PRNGKey(0), dummy)["params"]


@pytest.fixture(scope="module")
def agent():
  _, spec = envs.make_env("MiniGrid-DoorKey-5x5")
  return spec, _policy_params(spec)


@pytest.mark.parametrize("method", ["glance", "glance_no_bottleneck"])
def test_reinitialisation_changes_only_the_projector(agent, method):
  spec, pp = agent
  config = curiosity.CuriosityConfig(reinit_every=3)
  hooks, params, extra = curiosity.make_curiosity(method, spec, pp,
                                                  jax.random.PRNGKey(1), config)
  same, extra1 = hooks.after_update(params, extra, 2)      # not due
  changed, _ = hooks.after_update(params, extra, 3)        # due
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(same)):
    np.testing.assert_array_equal(a, b)
  for part in ("policy",):
    for a, b in zip(jax.tree.leaves(params[part]), jax.tree.leaves(changed[part])):
      np.testing.assert_array_equal(a, b)
  for a, b in zip(jax.tree.leaves(params["curiosity"]["model"]),
                  jax.tree.leaves(changed["curiosity"]["model"])):
    np.testing.assert_array_equal(a, b)
  assert any(np.any(np.asarray(a) != np.asarray(b)) for a, b in zip(
      jax.tree.leaves(params["curiosity"]["projector"]),
      jax.tree.leaves(changed["curiosity"]["projector"])))
  # The EMA target moved toward the online encoder (here equal: it starts as a copy).
  for a, b in zip(jax.tree.leaves(extra1["target"]), jax.tree.leaves(pp["encoder"])):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_without_reinit_the_projector_stays(agent):
  spec, pp = agent
  hooks, params, extra = curiosity.make_curiosity(
      "glance_no_reinit", spec, pp, jax.random.PRNGKey(1),
      curiosity.CuriosityConfig(reinit_every=1))
  after, _ = hooks.after_update(params, extra, 5)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(after)):
    np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def memory_rollout():
  """MemoryS8's spec, the policy's parameters for it and a real 3-step rollout of two
  environments: the same for every curiosity, so made once (reset and step jitted; op
  by op, xminigrid's step compiles hundreds of small programs)."""
  env, spec = envs.make_env("MiniGrid-MemoryS8")
  reset, step = jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))
  ts = reset(jax.random.split(jax.random.PRNGKey(2), 2))
  obs, actions, next_obs, dones = [], [], [], []
  for t in range(3):
    a = jnp.array([t % 3, 2])
    nxt = step(ts, a)
    obs.append(ts.observation), actions.append(a), next_obs.append(nxt.observation)
    dones.append(nxt.last())
    ts = nxt
  traj = {"obs": jnp.stack(obs), "actions": jnp.stack(actions),
          "next_obs": jnp.stack(next_obs), "dones": jnp.stack(dones)}
  return spec, _policy_params(spec), traj


@pytest.mark.parametrize("method", [m for m in curiosity.METHODS if m != "none"])
def test_every_curiosity_fits_the_environment_view(method, memory_rollout):
  """MemoryS8's view is 3x3, DoorKey's 7x7: every model is built for the view it gets
  and scores a real rollout with a finite, non-negative intrinsic reward (jitted, as
  in training)."""
  spec, pp, traj = memory_rollout
  assert spec.obs_shape == (3, 3, 2)
  hooks, params, extra = curiosity.make_curiosity(method, spec, pp, jax.random.PRNGKey(1))
  r, _, _ = jax.jit(hooks.intrinsic)(params, extra, traj)
  assert r.shape == (3, 2) and bool(jnp.all(jnp.isfinite(r))) and bool(jnp.all(r >= 0))
