"""GLANCE's pieces: the description of a view, the encoder's convolution, the EMA target,
the intrinsic reward's zero, projector re-initialisation, the losses' masks at episode
ends, hooks built outside jit, and bad settings (more bad input: tests/test_bad_input.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.rl.ppo import Curiosity
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


def test_patch_conv_is_flax_conv():
  """`PatchConv` (slices and one matmul: fast inside XLA:CPU loop bodies) has the
  parameters of `nn.Conv(..., padding="VALID")` and computes its outputs."""
  import flax.linen as nn
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 6, 4))
  for size in ((2, 2), (3, 2)):
    ours, ref = networks.PatchConv(8, size), nn.Conv(8, size, padding="VALID")
    params, want = (m.init(jax.random.PRNGKey(1), x) for m in (ours, ref))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want)):
      np.testing.assert_array_equal(a, b)
    params = jax.tree.map(lambda p: p + 0.1, params)   # a non-zero bias too
    np.testing.assert_allclose(ours.apply(params, x), ref.apply(params, x), rtol=1e-5,
                               atol=1e-5)


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


def _flat_rollout(traj, dones):
  """The 6 transitions of `memory_rollout` as one minibatch with the given dones."""
  flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in traj.items()}
  return {**flat, "dones": jnp.asarray(dones)}


def test_glance_losses_leave_out_episode_ends(memory_rollout):
  """An episode-ending transition's s' is the next episode's first view, so neither
  grounding nor the language cross-entropy may learn from it: with every transition
  terminal both are 0 (the language CE was 13.16 before it was masked); the loss and
  its gradient do not depend on a terminal transition's s'; and the loss with rows 1,
  3, 5 terminal equals the unmasked loss of rows 0, 0, 2, 2, 4, 4."""
  spec, pp, traj = memory_rollout
  hooks, params, extra = curiosity.make_curiosity("glance", spec, pp, jax.random.PRNGKey(1))
  loss = jax.jit(jax.value_and_grad(hooks.aux_loss, has_aux=True))
  (total, m), _ = loss(params, extra, _flat_rollout(traj, [True] * 6))
  assert float(m["grounding_loss"]) == 0.0 and float(m["language_ce"]) == 0.0
  assert float(total) == 0.0
  mixed = _flat_rollout(traj, [False, True] * 3)
  (a, ma), ga = loss(params, extra, mixed)
  walls = jnp.zeros_like(mixed["next_obs"][1::2]).at[..., 0].set(2)   # all wall
  moved = {**mixed, "next_obs": mixed["next_obs"].at[1::2].set(walls)}
  assert bool(jnp.any(moved["next_obs"] != mixed["next_obs"]))
  (b, _), gb = loss(params, extra, moved)
  assert float(a) == float(b) and float(ma["language_ce"]) > 0.0
  for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
    np.testing.assert_array_equal(x, y)
  rows = jnp.array([0, 0, 2, 2, 4, 4])
  doubled = {k: v[rows] for k, v in _flat_rollout(traj, [False] * 6).items()}
  (c, mc), _ = loss(params, extra, doubled)
  for key in ("grounding_loss", "language_ce"):
    assert float(ma[key]) == pytest.approx(float(mc[key]), rel=1e-5)
  assert float(a) == pytest.approx(float(c), rel=1e-5)


@pytest.mark.parametrize("setting, message", [
    ({"reinit_every": -3}, r"^reinit_every must be an int >= 0, got -3$"),
    ({"norm_momentum": 1.5}, r"^norm_momentum must be in \[0, 1\), got 1.5$"),
    ({"norm_momentum": 1.0}, r"^norm_momentum must be in \[0, 1\), got 1.0$"),
    ({"norm_momentum": -0.1}, r"^norm_momentum must be in \[0, 1\), got -0.1$"),
    ({"norm_momentum": float("nan")}, r"^norm_momentum must be in \[0, 1\), got nan$"),
    ({"lang_weight": -1.0}, r"^lang_weight must be finite and >= 0, got -1.0$"),
    ({"tau": 1.0}, r"^tau must be in \[0, 1\), got 1.0$"),
])
def test_bad_curiosity_settings_are_refused_before_any_work(setting, message):
  """Checked before anything is built: the policy parameters (None) are never read."""
  spec = envs.EnvSpec("MiniGrid-DoorKey-5x5", 6, (7, 7, 2), 7, 250)
  config = curiosity.CuriosityConfig(**setting)
  for method in ("glance", "none"):
    with pytest.raises(ValueError, match=message):
      curiosity.make_curiosity(method, spec, None, jax.random.PRNGKey(0), config)
  with pytest.raises(ValueError, match=message):
    curiosity.make_hooks("glance", spec, config)


@pytest.mark.parametrize("max_steps", [0, -5])
def test_make_env_refuses_a_step_limit_below_one(max_steps):
  with pytest.raises(ValueError, match=rf"^max_steps must be an int >= 1, got {max_steps}$"):
    envs.make_env("MiniGrid-DoorKey-5x5", max_steps=max_steps)
  env, spec = envs.make_env("MiniGrid-DoorKey-5x5", max_steps=7)
  assert spec.max_steps == 7


def test_hooks_built_outside_jit_and_arrays_inside(memory_rollout):
  """`make_hooks` (outside jit) and `init_curiosity` (inside) give what
  `make_curiosity` gives: the experiment builds its update on the first and
  initialises each seed with the second, so no hook leaves a jitted trace."""
  spec, pp, traj = memory_rollout
  key = jax.random.PRNGKey(1)
  hooks = curiosity.make_hooks("glance", spec)
  assert isinstance(hooks, Curiosity) and curiosity.make_hooks("none", spec) is None
  params, extra = jax.jit(lambda p, k: curiosity.init_curiosity("glance", spec, p, k))(pp, key)
  _, want_params, want_extra = curiosity.make_curiosity("glance", spec, pp, key)
  for a, b in zip(jax.tree.leaves((want_params, want_extra)),
                  jax.tree.leaves((params, extra))):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)   # eager vs jitted rounding
  assert jax.tree.structure((want_params, want_extra)) == jax.tree.structure((params, extra))
  r, _, _ = jax.jit(hooks.intrinsic)(params, extra, traj)
  assert r.shape == (3, 2)
