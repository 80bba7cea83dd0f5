"""Reach with obstacles: a point agent goes around circular obstacles to a goal.

The arena is the square ``[-1, 1]^2``. An action is a 2-D displacement, clipped to
``[-MAX_STEP, MAX_STEP]`` per coordinate. The move is

    p' = clip(p + a, -1, 1);  if |p' - o_k| < r_k: p' <- o_k + r_k (p' - o_k) / |p' - o_k|

that is, a move that would end inside obstacle ``k`` ends on its boundary instead (the
agent slides along the circle). Obstacles are disjoint (gaps of at least 0.1) and end
at least 0.1 inside the walls, so one projection suffices and the agent never ends a
step inside one. Only the end point is checked: since ``MAX_STEP`` is far below every
radius, a move can at most cut a chord of depth ``|a|^2 / (8 r) < 0.005``.

Each episode draws start ``s`` and goal ``g`` at distance 1.0-1.5 and places obstacle 0
(the blocker, radius 0.2-0.3) on the segment between them, offset sideways by at most
0.3 of its radius, so the straight line is blocked and the agent must go around it on
the left or the right. Obstacles 1 and 2 (radius 0.08-0.15) are distractors drawn away
from the corridor that either way around uses (a distractor that finds no free spot in
32 draws gets radius 0, that is, is absent).

    progress = clip((d0 - |p - g|) / (d0 - GOAL_TOLERANCE), 0, 1),   d0 = |s - g|,

which is 1 exactly when ``|p - g| <= GOAL_TOLERANCE``, the success test (sticky).

The observation (13 numbers) is the agent xy, the goal xy and each obstacle's
(x, y, radius). The scripted expert draws a mode at ``reset`` (+1: round the blocker
counter-clockwise, -1: clockwise): while the blocker cuts the segment from the agent to
the goal it follows waypoints on the circle of radius ``r_0 + ORBIT_MARGIN`` round the
blocker (`orbit_waypoint`), then heads straight for the goal; Gaussian noise of standard
deviation ``noise * MAX_STEP`` is added to each action.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.envs.base import ControlEnv, planar_env

ARENA_HALF_SIZE = 1.0
MAX_STEP = 0.05
GOAL_TOLERANCE = 0.05
NUM_OBSTACLES = 3
BLOCKER_RADIUS = (0.2, 0.3)
DISTRACTOR_RADIUS = (0.08, 0.15)
ORBIT_MARGIN = 0.1        # The expert circles the blocker at r_0 + ORBIT_MARGIN.
SIGHT_MARGIN = 0.04       # The way is clear once the path to the goal passes r_0 + this.
MAX_STEPS = 60
EXPERT_NOISE = 0.2
OBS_DIM = 4 + 3 * NUM_OBSTACLES
_CANDIDATES = 16


class ReachState(NamedTuple):
  """State of the reach task (a pytree of arrays).

  Attributes:
    agent: (2,) agent position.
    goal: (2,) goal position.
    obstacles: (NUM_OBSTACLES, 3) rows (x, y, radius); row 0 is the blocker.
    dist0: () initial agent-goal distance.
    t: () int32 steps taken.
    succeeded: () bool, sticky success flag.
    mode: () int32 expert mode, +1 counter-clockwise or -1 clockwise round the blocker.
  """
  agent: jax.Array
  goal: jax.Array
  obstacles: jax.Array
  dist0: jax.Array
  t: jax.Array
  succeeded: jax.Array
  mode: jax.Array


def _unit(x):
  return x / jnp.maximum(jnp.linalg.norm(x), 1e-9)


def _perp(x):
  return jnp.stack([-x[1], x[0]])


def _segment_distance(point, a, b):
  """Distance from ``point`` to the segment [a, b]."""
  ab = b - a
  s = jnp.clip(jnp.dot(point - a, ab) / jnp.maximum(jnp.dot(ab, ab), 1e-12), 0.0, 1.0)
  return jnp.linalg.norm(point - (a + s * ab))


def orbit_waypoint(point, centre, target_dir, radius, mode, step_angle=0.5,
                   commit_angle=2.0):
  """The next waypoint on a circle round ``centre``, travelling towards ``target_dir``.

  With ``beta`` the angle of ``point - centre`` measured counter-clockwise from
  ``target_dir`` (0 at the target side), the travel direction is

      s = mode          if |beta| > commit_angle  (far side: the mode decides),
      s = -sign(beta)   otherwise                  (the short way to beta = 0),

  and the waypoint is ``centre + radius * (cos b', sin b')`` in the (target_dir,
  perp(target_dir)) frame, with ``b' = beta + s * min(step_angle, |beta|)``.

  Args:
    point: (2,) current position.
    centre: (2,) circle centre.
    target_dir: (2,) unit vector from the centre towards the side to reach.
    radius: circle radius (keep it above the clearance needed: chords between
      waypoints dip by ``radius * (1 - cos(step_angle / 2))``).
    mode: +1 (counter-clockwise) or -1 (clockwise).
    step_angle: angular look-ahead of the waypoint.
    commit_angle: beyond this angle from the target the mode picks the way round.

  Returns:
    (2,) the waypoint.

  Example:
    >>> w = orbit_waypoint(jnp.array([-0.5, 0.0]), jnp.zeros(2),
    ...                    jnp.array([1.0, 0.0]), 0.3, 1)  # goes round below
  """
  normal = _perp(target_dir)
  rel = point - centre
  beta = jnp.arctan2(jnp.dot(rel, normal), jnp.dot(rel, target_dir))
  direction = jnp.where(jnp.abs(beta) > commit_angle, mode, -jnp.sign(beta))
  new_beta = beta + direction * jnp.minimum(step_angle, jnp.abs(beta))
  return centre + radius * (jnp.cos(new_beta) * target_dir + jnp.sin(new_beta) * normal)


def _first_valid(candidates, valid, fallback):
  """The first candidate (leading axis) whose ``valid`` is true, else ``fallback``."""
  index = jnp.argmax(valid)
  chosen = jax.tree.map(lambda c: c[index], candidates)
  return jax.tree.map(lambda c, f: jnp.where(valid.any(), c, f), chosen, fallback)


def _between(u, low, high):
  """Maps uniforms in [0, 1) to [low, high)."""
  return low + (high - low) * u


def _draw_start_goal(u):
  """Start and goal ``m -/+ l w`` with |m|_inf <= 0.45, l in [0.5, 0.75], both in
  [-0.9, 0.9]^2 (rejection over 16 draws; fallback m = 0, l = 0.6).

  Args:
    u: (16, 4) uniforms in [0, 1).
  """
  mid = _between(u[:, :2], -0.45, 0.45)
  angle = _between(u[:, 2], 0.0, 2 * math.pi)
  half = _between(u[:, 3:], 0.5, 0.75)
  w = jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=-1)
  start, goal = mid - half * w, mid + half * w
  valid = (jnp.abs(start).max(-1) <= 0.9) & (jnp.abs(goal).max(-1) <= 0.9)
  fallback = (-0.6 * w[0], 0.6 * w[0])
  return _first_valid((start, goal), valid, fallback)


def _draw_blocker(u, start, goal):
  """Obstacle 0: radius r in BLOCKER_RADIUS, centre at the midpoint moved sideways by
  at most 0.3 r, so it cuts the segment from start to goal (u: (2,) uniforms)."""
  radius = _between(u[0], *BLOCKER_RADIUS)
  shift = _between(u[1], -0.3, 0.3) * radius
  centre = 0.5 * (start + goal) + shift * _perp(_unit(goal - start))
  return jnp.concatenate([centre, radius[None]])


def _draw_distractor(u, start, goal, placed):
  """A distractor clear of the corridor round the blocker, of the walls (0.1) and of
  the obstacles already placed (0.1); radius 0 if none of the draws is free.

  Args:
    u: (n, 3) uniforms in [0, 1), one row (x, y, radius) per draw.
    start, goal: (2,) the episode's start and goal.
    placed: (k, 3) obstacles already placed.
  """
  radius = _between(u[:, 2], *DISTRACTOR_RADIUS)
  limit = ARENA_HALF_SIZE - 0.1 - radius[:, None]
  centre = _between(u[:, :2], -1.0, 1.0) * limit
  corridor = 1.3 * placed[0, 2] + ORBIT_MARGIN + 0.1
  to_line = jax.vmap(lambda c: _segment_distance(c, start, goal))(centre)
  gaps = jnp.linalg.norm(centre[:, None] - placed[None, :, :2], axis=-1) - placed[:, 2]
  valid = (to_line >= corridor + radius) & jnp.all(gaps >= radius[:, None] + 0.1, axis=1)
  rows = jnp.concatenate([centre, radius[:, None]], axis=1)
  return _first_valid(rows, valid, jnp.zeros(3, jnp.float32))


def reset(key):
  """Draws an episode (see the module docstring). All uniforms come from one draw
  (one random-bits call compiles much faster than a dozen).

  Args:
    key: a PRNG key.

  Returns:
    A `ReachState` with ``t = 0``.

  Example:
    >>> state = reset(jax.random.PRNGKey(0))
  """
  n = 2 * _CANDIDATES  # Draws per distractor.
  num = 4 * _CANDIDATES + 3 + 3 * n * (NUM_OBSTACLES - 1)
  u = jax.random.uniform(key, (num,), jnp.float32)
  start, goal = _draw_start_goal(u[:4 * _CANDIDATES].reshape(_CANDIDATES, 4))
  u = u[4 * _CANDIDATES:]
  obstacles = _draw_blocker(u[:2], start, goal)[None]
  mode = jnp.where(u[2] < 0.5, 1, -1).astype(jnp.int32)
  for rows in u[3:].reshape(NUM_OBSTACLES - 1, n, 3):
    row = _draw_distractor(rows, start, goal, obstacles)
    obstacles = jnp.concatenate([obstacles, row[None]])
  return ReachState(agent=start, goal=goal, obstacles=obstacles,
                    dist0=jnp.linalg.norm(goal - start), t=jnp.zeros((), jnp.int32),
                    succeeded=jnp.zeros((), bool), mode=mode)


def _project_out(point, obstacles):
  """Moves ``point`` onto the boundary of the (at most one) obstacle containing it."""
  rel = point - obstacles[:, :2]
  dist = jnp.linalg.norm(rel, axis=-1)
  inside = dist < obstacles[:, 2]
  direction = jnp.where(dist[:, None] > 1e-9, rel / jnp.maximum(dist, 1e-9)[:, None],
                        jnp.array([1.0, 0.0], jnp.float32))
  boundary = obstacles[:, :2] + obstacles[:, 2:] * direction
  return point + jnp.sum(jnp.where(inside[:, None], boundary - point, 0.0), axis=0)


def step(state, action):
  """One move: ``p' = clip(p + clip(a), -1, 1)``, projected out of any obstacle.

  Args:
    state: a `ReachState`.
    action: (2,) displacement; clipped to ``[-MAX_STEP, MAX_STEP]`` per coordinate.

  Returns:
    The next `ReachState` (``t + 1``; ``succeeded`` stays set once reached).

  Example:
    >>> state = step(reset(jax.random.PRNGKey(0)), jnp.array([0.05, 0.0]))
  """
  action = jnp.clip(jnp.asarray(action, jnp.float32), -MAX_STEP, MAX_STEP)
  agent = jnp.clip(state.agent + action, -ARENA_HALF_SIZE, ARENA_HALF_SIZE)
  agent = _project_out(agent, state.obstacles)
  reached = jnp.linalg.norm(agent - state.goal) <= GOAL_TOLERANCE
  return state._replace(agent=agent, t=state.t + 1, succeeded=state.succeeded | reached)


def observe(state):
  """(13,) float32: agent xy, goal xy, then (x, y, radius) of each obstacle."""
  return jnp.concatenate([state.agent, state.goal, state.obstacles.reshape(-1)]
                         ).astype(jnp.float32)


def progress(state):
  """``clip((d0 - |p - g|) / (d0 - GOAL_TOLERANCE), 0, 1)``: 1 within the tolerance."""
  dist = jnp.linalg.norm(state.agent - state.goal)
  return jnp.clip((state.dist0 - dist) / (state.dist0 - GOAL_TOLERANCE), 0.0, 1.0)


def success(state):
  """The sticky success flag: the agent has been within GOAL_TOLERANCE of the goal."""
  return state.succeeded


def expert(state, key, noise=EXPERT_NOISE):
  """The scripted demonstrator's next action (see the module docstring).

  ``target = orbit_waypoint(...)`` while ``dist(o_0, [p, g]) < r_0 + SIGHT_MARGIN``, else
  ``g``; ``a = clip(step_towards(target) + noise * MAX_STEP * N(0, I))``, where the step
  has length ``min(MAX_STEP, |target - p|)``.

  Args:
    state: a `ReachState` (its ``mode`` picks the way round the blocker).
    key: a PRNG key for the action noise.
    noise: noise standard deviation as a fraction of MAX_STEP.

  Returns:
    (2,) float32 action within the bounds.

  Example:
    >>> s = reset(jax.random.PRNGKey(0)); a = expert(s, jax.random.PRNGKey(1))
  """
  centre, radius = state.obstacles[0, :2], state.obstacles[0, 2]
  p, g = state.agent, state.goal
  blocked = _segment_distance(centre, p, g) < radius + SIGHT_MARGIN
  waypoint = orbit_waypoint(p, centre, _unit(g - centre), radius + ORBIT_MARGIN,
                            state.mode)
  return noisy_step_towards(p, jnp.where(blocked, waypoint, g), key, noise)


def noisy_step_towards(position, target, key, noise, max_step=MAX_STEP):
  """``clip(d * min(1, max_step / |d|) + noise * max_step * N(0, I), +-max_step)``
  with ``d = target - position``: a bounded step towards ``target``, with noise."""
  delta = target - position
  delta = delta * jnp.minimum(1.0, max_step / jnp.maximum(jnp.linalg.norm(delta), 1e-9))
  delta = delta + noise * max_step * jax.random.normal(key, (2,), jnp.float32)
  return jnp.clip(delta, -max_step, max_step).astype(jnp.float32)


def state_from_obs(obs, mode=1):
  """The state an observation shows (``t = 0``, ``dist0`` the current distance).

  For policies that plan with the true dynamics from an observation (e.g. the expert
  wrapped as a chunk policy). ``mode``: +1 or -1, the expert's way round.
  """
  agent, goal = obs[:2], obs[2:4]
  return ReachState(agent=agent, goal=goal, obstacles=obs[4:].reshape(NUM_OBSTACLES, 3),
                    dist0=jnp.linalg.norm(goal - agent), t=jnp.zeros((), jnp.int32),
                    succeeded=jnp.zeros((), bool),
                    mode=jnp.asarray(mode, jnp.int32))


def make(max_steps: int = MAX_STEPS, expert_noise: float = EXPERT_NOISE) -> ControlEnv:
  """The reach-with-obstacles task as a `ControlEnv` named "reach" (obs_dim 13, action_dim 2); see
  `base.planar_env` for the arguments and caching.

  Example:
    >>> env = make(); s = env.reset(jax.random.PRNGKey(0))
  """
  return planar_env(sys.modules[__name__], "reach", max_steps, expert_noise)
