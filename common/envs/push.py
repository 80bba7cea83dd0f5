"""Planar pushing: a disk pusher pushes a square block to a goal position on a table.

Geometry (module constants): the table is ``[-1, 1]^2``; the pusher is a disk of radius
``r = PUSHER_RADIUS``; the block is a square of half side ``h = BLOCK_HALF_SIZE`` with
centre ``c`` and angle ``theta``. An action is the pusher's displacement, clipped to
``[-MAX_STEP, MAX_STEP]`` per coordinate.

Contact model (quasi-static, frictionless pusher, uniform support pressure). The pusher
moves first, ``p' = clip(p + a, +-(1 - r))``. If it then overlaps the block, i.e. the
signed distance ``sd`` from ``p'`` to the square is below ``r``, let ``delta = r - sd``
be the penetration, ``n`` the block's outward normal at the closest boundary point
``x``, ``rho = x - c`` its arm and ``f = -n`` the push direction. An ellipsoidal limit
surface maps the wrench ``(f, tau = rho x f)`` to the block's twist

    (dc, dtheta) = lambda * (f, tau / k^2),    k = h (sqrt(2) + asinh(1)) / 3,

(``k`` is the mean distance of the square's points from its centre: the ratio of
maximal friction torque to force), and ``lambda = delta / (1 + tau^2 / k^2)`` makes the
contact point recede along ``n`` by exactly ``delta`` to first order; ``dtheta`` is
clipped to ``MAX_ROTATION``. A final translation along the new normal removes what the
linearisation leaves, so after every step the pusher touches the block at most. With
no overlap nothing moves: the block never moves without contact. The block centre is
then kept in ``[-BLOCK_LIMIT, BLOCK_LIMIT]^2`` (the whole block stays on the table with
room for the pusher beside it); if that clip re-creates an overlap, the pusher is
pushed back out along the normal instead.

Episodes: the block (angle uniform) and the goal are drawn in ``[-0.6, 0.6]^2`` at least
``MIN_GOAL_DISTANCE`` apart; the pusher starts 0.3-0.5 from the block on the goal side
(within 0.8 rad of the block-goal direction), so it must go round the block, left or
right, to push. Success (sticky): ``|c - g| <= GOAL_TOLERANCE`` (position only).

    progress = clip((d0 - |c - g|) / (d0 - GOAL_TOLERANCE), 0, 1),    d0 = |c0 - g|,

which is 1 exactly within the tolerance. Observation (12): pusher xy, block x, y,
cos theta, sin theta, goal xy, block - pusher, goal - block.

Scripted expert: a mode drawn at ``reset`` (+1 counter-clockwise, -1 clockwise) picks
the way round the block to the pushing side, opposite the goal. Outside the pushing cone
(more than PUSH_ANGLE from straight behind the block) the pusher follows
``reach.orbit_waypoint`` on the circle of radius ``ORBIT_RADIUS`` (which clears the
block at any angle); inside it, it pushes along the block-goal direction ``u`` while
steering back onto the line behind the centre, ``dir = u - LATERAL_GAIN * (e / |p - c|)
v``, with ``e`` the pusher's offset along ``v = perp(u)``. If the block drifts off line,
the pusher leaves the cone and re-approaches. It stops within STOP_DISTANCE of the goal.
Gaussian noise (``noise * MAX_STEP``) is added to every action.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.envs.base import ControlEnv, planar_env
from common.envs.reach import noisy_step_towards, orbit_waypoint

TABLE_HALF_SIZE = 1.0
PUSHER_RADIUS = 0.05
BLOCK_HALF_SIZE = 0.1
MAX_STEP = 0.05
GOAL_TOLERANCE = 0.08
MIN_GOAL_DISTANCE = 0.4
SPAWN_HALF_SIZE = 0.6      # Block and goal are drawn in [-0.6, 0.6]^2.
MAX_ROTATION = 0.25        # Largest block rotation in one step (rad).
PUSHER_LIMIT = TABLE_HALF_SIZE - PUSHER_RADIUS
BLOCK_LIMIT = TABLE_HALF_SIZE - math.sqrt(2) * BLOCK_HALF_SIZE - 2 * PUSHER_RADIUS
LIMIT_SURFACE_RADIUS = BLOCK_HALF_SIZE * (math.sqrt(2) + math.asinh(1.0)) / 3
ORBIT_RADIUS = math.sqrt(2) * BLOCK_HALF_SIZE + PUSHER_RADIUS + 0.04
PUSH_ANGLE = 0.5           # The pushing cone's half angle behind the block (rad).
LATERAL_GAIN = 2.0
STOP_DISTANCE = 0.04
MAX_STEPS = 100
EXPERT_NOISE = 0.2
OBS_DIM = 12
_CANDIDATES = 16


class PushState(NamedTuple):
  """State of the pushing task (a pytree of arrays).

  Attributes:
    pusher: (2,) pusher centre.
    block: (3,) block centre x, y and angle theta (not wrapped; the observation
      shows cos and sin).
    goal: (2,) goal position of the block centre.
    dist0: () initial block-goal distance.
    t: () int32 steps taken.
    succeeded: () bool, sticky success flag.
    mode: () int32 expert mode, +1 counter-clockwise or -1 clockwise round the block.
  """
  pusher: jax.Array
  block: jax.Array
  goal: jax.Array
  dist0: jax.Array
  t: jax.Array
  succeeded: jax.Array
  mode: jax.Array


def _rotation(theta):
  c, s = jnp.cos(theta), jnp.sin(theta)
  return jnp.array([[c, -s], [s, c]])


def _unit(x):
  return x / jnp.maximum(jnp.linalg.norm(x), 1e-9)


def box_contact(q):
  """Signed distance from ``q`` (block frame) to the square ``|x|, |y| <= h``.

  With ``e = |q| - h`` (per coordinate): ``sd = |max(e, 0)| + min(max_i e_i, 0)``. The
  outward normal is ``sign(q) max(e, 0) / |max(e, 0)|`` outside and the nearest face's
  normal inside; the closest boundary point is ``q - sd * normal``.

  Args:
    q: (2,) point in the block frame.

  Returns:
    (sd, normal (2,), closest (2,)).
  """
  excess = jnp.abs(q) - BLOCK_HALF_SIZE
  sign = jnp.where(q >= 0, 1.0, -1.0)
  outside = jnp.linalg.norm(jnp.maximum(excess, 0.0))
  sd = outside + jnp.minimum(jnp.max(excess), 0.0)
  face = jax.nn.one_hot(jnp.argmax(excess), 2, dtype=q.dtype) * sign
  corner = jnp.maximum(excess, 0.0) * sign / jnp.maximum(outside, 1e-9)
  normal = jnp.where(outside > 1e-9, corner, face)
  return sd, normal, q - sd * normal


def _contact(block, point):
  """World-frame (sd, normal, arm) of ``point`` against the block (arm: closest
  boundary point minus the centre)."""
  rot = _rotation(block[2])
  sd, normal, closest = box_contact(rot.T @ (point - block[:2]))
  return sd, rot @ normal, rot @ closest


def _separate_block(block, pusher):
  """Translates the block along the contact normal until the pusher only touches it."""
  sd, normal, _ = _contact(block, pusher)
  shift = jnp.maximum(PUSHER_RADIUS - sd, 0.0) * normal
  return block.at[:2].add(-shift)


def push_block(block, pusher):
  """The block after the pusher has moved to ``pusher`` (the module's contact model).

  Args:
    block: (3,) x, y, theta.
    pusher: (2,) the pusher's new centre.

  Returns:
    (3,) the block, touching the pusher at most (unchanged without overlap).
  """
  sd, normal, arm = _contact(block, pusher)
  depth = jnp.maximum(PUSHER_RADIUS - sd, 0.0)
  force = -normal
  torque = arm[0] * force[1] - arm[1] * force[0]
  k2 = LIMIT_SURFACE_RADIUS ** 2
  lam = depth / (1.0 + torque ** 2 / k2)
  dtheta = jnp.clip(lam * torque / k2, -MAX_ROTATION, MAX_ROTATION)
  moved = jnp.concatenate([block[:2] + lam * force, (block[2] + dtheta)[None]])
  return _separate_block(moved, pusher)


def step(state, action):
  """One step: move the pusher, push the block, keep both on the table.

  Args:
    state: a `PushState`.
    action: (2,) pusher displacement; clipped to ``[-MAX_STEP, MAX_STEP]`` per coordinate.

  Returns:
    The next `PushState` (``t + 1``; ``succeeded`` stays set once reached).

  Example:
    >>> state = step(reset(jax.random.PRNGKey(0)), jnp.array([0.05, 0.0]))
  """
  action = jnp.clip(jnp.asarray(action, jnp.float32), -MAX_STEP, MAX_STEP)
  pusher = jnp.clip(state.pusher + action, -PUSHER_LIMIT, PUSHER_LIMIT)
  block = push_block(state.block, pusher)
  block = block.at[:2].set(jnp.clip(block[:2], -BLOCK_LIMIT, BLOCK_LIMIT))
  sd, normal, _ = _contact(block, pusher)
  pusher = pusher + jnp.maximum(PUSHER_RADIUS - sd, 0.0) * normal
  reached = jnp.linalg.norm(block[:2] - state.goal) <= GOAL_TOLERANCE
  return state._replace(pusher=pusher, block=block, t=state.t + 1,
                        succeeded=state.succeeded | reached)


def _draw_block_and_goal(u):
  """Block and goal uniform in the spawn square, conditioned on being at least
  MIN_GOAL_DISTANCE apart (first valid of 16 draws; the chance that none is valid is
  below 1e-7, and then the first draw is used).

  Args:
    u: (16, 2, 2) uniforms in [0, 1).
  """
  pairs = SPAWN_HALF_SIZE * (2.0 * u - 1.0)
  valid = jnp.linalg.norm(pairs[:, 0] - pairs[:, 1], axis=-1) >= MIN_GOAL_DISTANCE
  chosen = pairs[jnp.argmax(valid)]
  return chosen[0], chosen[1]


def reset(key):
  """Draws an episode (see the module docstring). All uniforms come from one draw
  (one random-bits call compiles much faster than several).

  Args:
    key: a PRNG key.

  Returns:
    A `PushState` with ``t = 0``.

  Example:
    >>> state = reset(jax.random.PRNGKey(0))
  """
  u = jax.random.uniform(key, (4 * _CANDIDATES + 4,), jnp.float32)
  centre, goal = _draw_block_and_goal(u[:4 * _CANDIDATES].reshape(_CANDIDATES, 2, 2))
  theta, angle, dist, coin = u[4 * _CANDIDATES:]
  theta = (theta - 0.5) * (math.pi / 2)           # Uniform in [-pi/4, pi/4).
  angle = (angle - 0.5) * 1.6                     # Within 0.8 rad of the goal direction.
  pusher = centre + (0.3 + 0.2 * dist) * (_rotation(angle) @ _unit(goal - centre))
  mode = jnp.where(coin < 0.5, 1, -1).astype(jnp.int32)
  return PushState(pusher=jnp.clip(pusher, -PUSHER_LIMIT, PUSHER_LIMIT),
                   block=jnp.concatenate([centre, theta[None]]), goal=goal,
                   dist0=jnp.linalg.norm(goal - centre), t=jnp.zeros((), jnp.int32),
                   succeeded=jnp.zeros((), bool), mode=mode)


def observe(state):
  """(12,) float32: pusher xy, block x, y, cos theta, sin theta, goal xy, and the two
  relative vectors a learned policy needs most, block - pusher and goal - block."""
  theta = state.block[2]
  centre = state.block[:2]
  return jnp.concatenate([state.pusher, centre, jnp.stack(
      [jnp.cos(theta), jnp.sin(theta)]), state.goal, centre - state.pusher,
                          state.goal - centre]).astype(jnp.float32)


def progress(state):
  """``clip((d0 - |c - g|) / (d0 - GOAL_TOLERANCE), 0, 1)``: 1 within the tolerance."""
  dist = jnp.linalg.norm(state.block[:2] - state.goal)
  return jnp.clip((state.dist0 - dist) / (state.dist0 - GOAL_TOLERANCE), 0.0, 1.0)


def success(state):
  """The sticky success flag: the block centre has been within GOAL_TOLERANCE."""
  return state.succeeded


def expert(state, key, noise=EXPERT_NOISE):
  """The scripted demonstrator's next action (see the module docstring).

  Args:
    state: a `PushState` (its ``mode`` picks the way round the block).
    key: a PRNG key for the action noise.
    noise: noise standard deviation as a fraction of MAX_STEP.

  Returns:
    (2,) float32 action within the bounds.

  Example:
    >>> s = reset(jax.random.PRNGKey(0)); a = expert(s, jax.random.PRNGKey(1))
  """
  centre, p, g = state.block[:2], state.pusher, state.goal
  to_goal = jnp.linalg.norm(g - centre)
  u = _unit(g - centre)
  v = jnp.stack([-u[1], u[0]])
  rel = p - centre
  behind = jnp.arctan2(jnp.dot(rel, v), -jnp.dot(rel, u))
  gap = jnp.maximum(_contact(state.block, p)[0] - PUSHER_RADIUS, 0.0)
  push_dir = _unit(u - LATERAL_GAIN * jnp.dot(rel, v) / jnp.linalg.norm(rel) * v)
  push_to = p + (to_goal + gap) * push_dir
  orbit_to = orbit_waypoint(p, centre, -u, ORBIT_RADIUS, state.mode)
  target = jnp.where(jnp.abs(behind) < PUSH_ANGLE, push_to, orbit_to)
  target = jnp.where(to_goal < STOP_DISTANCE, p, target)
  return noisy_step_towards(p, target, key, noise, MAX_STEP)


def state_from_obs(obs, mode=1):
  """The state an observation shows (``t = 0``, ``dist0`` the current distance).

  For policies that plan with the true dynamics from an observation (e.g. the expert
  wrapped as a chunk policy). ``mode``: +1 or -1, the expert's way round.
  """
  centre, goal = obs[2:4], obs[6:8]
  block = jnp.concatenate([centre, jnp.arctan2(obs[5], obs[4])[None]])
  return PushState(pusher=obs[:2], block=block, goal=goal,
                   dist0=jnp.linalg.norm(goal - centre), t=jnp.zeros((), jnp.int32),
                   succeeded=jnp.zeros((), bool), mode=jnp.asarray(mode, jnp.int32))


def make(max_steps: int = MAX_STEPS, expert_noise: float = EXPERT_NOISE) -> ControlEnv:
  """The pushing task as a `ControlEnv` named "push" (obs_dim 12, action_dim 2); see
  `base.planar_env` for the arguments and caching.

  Example:
    >>> env = make(); s = env.reset(jax.random.PRNGKey(0))
  """
  return planar_env(sys.modules[__name__], "push", max_steps, expert_noise)
