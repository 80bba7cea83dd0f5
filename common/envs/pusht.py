"""Push-T, the Diffusion Policy benchmark, through the real simulator of ``gym-pusht``.

An adapter over ``gym.make("gym_pusht/PushT-v0", obs_type="state")`` (pymunk physics,
no rendering), a scripted planning expert that reads the simulator state, demonstration
collection in the ``Demos`` layout (obs, actions, progress, success, lengths), and the
closed-loop evaluation of a policy that outputs action chunks.

The task: a circular agent (radius 15 px) pushes a T-shaped block (a 120 x 30 bar over
a 30 x 90 stem) onto a fixed goal pose (x, y, angle) = (256, 256, pi/4) in a
512 x 512 px workspace. The floor has no friction and the space has ``damping = 0``,
so the block moves only while the agent pushes it (quasi-static pushing).

Scales (the units of the simulator):
    observation  [agent_x, agent_y, block_x, block_y, block_angle]; positions in pixels
                 in [0, 512], the angle in radians in [0, 2 pi) (it wraps at 2 pi).
                 ``block_x, block_y`` is the T's body origin: the middle of the bar's
                 edge that faces the stem, not its centre of mass.
    action       [x, y], the ABSOLUTE target position of the agent in pixels, [0, 512];
                 a PD controller (k_p = 100, k_v = 20) pulls the agent towards it for
                 0.1 s (10 physics steps of 0.01 s) per environment step.
    coverage     area(block n goal) / area(goal) in [0, 1].
    progress     the environment's reward, clip(coverage / threshold, 0, 1), where the
                 installed gym-pusht's threshold is 0.95; an episode succeeds (and the
                 environment terminates) once coverage > threshold.
``normalize_obs`` / ``normalize_action`` (and their inverses) map these ranges
affinely to [-1, 1], the range chunked generative policies are trained on.

gym-pusht is imported lazily, inside the functions that need it, so importing this
module never fails and costs nothing when the package is absent.

Example:
    >>> env = PushT()                                      # doctest: +SKIP
    >>> obs = env.reset(seed=0)                            # (5,) float32
    >>> expert = PushTExpert()
    >>> obs, progress, success = env.step(expert(env.state()))
    >>> demos = collect_demos(num_episodes=4, seed=0)      # PushTDemos of numpy arrays
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

ENV_ID = "gym_pusht/PushT-v0"
MAX_STEPS = 300                          # the benchmark's episode limit
WORKSPACE = 512.0                        # pixels; the action box is [0, WORKSPACE]^2
OBS_DIM = 5
ACTION_DIM = 2
OBS_LOW = np.array([0.0, 0.0, 0.0, 0.0, 0.0], np.float32)
OBS_HIGH = np.array([WORKSPACE, WORKSPACE, WORKSPACE, WORKSPACE, 2.0 * math.pi],
                    np.float32)
ACTION_LOW = np.array([0.0, 0.0], np.float32)
ACTION_HIGH = np.array([WORKSPACE, WORKSPACE], np.float32)


# ----------------------------------------------------------------------------- scales

def normalize(x, low, high):
  """Affine map of [low, high] onto [-1, 1]: 2 (x - low) / (high - low) - 1.

  Works on numpy and jax arrays alike (plain arithmetic, broadcasting over the last
  axis).
  """
  return 2.0 * (x - low) / (high - low) - 1.0


def unnormalize(y, low, high):
  """Inverse of ``normalize``: low + (y + 1) (high - low) / 2."""
  return low + (y + 1.0) * (high - low) / 2.0


def normalize_obs(obs):
  """Push-T state observations (..., 5) in simulator units -> [-1, 1].

  Example:
    >>> normalize_obs(np.array([256., 0., 512., 256., np.pi]))   # [0, -1, 1, 0, 0]
  """
  return normalize(obs, OBS_LOW, OBS_HIGH)


def unnormalize_obs(obs):
  """[-1, 1] -> Push-T state observations (..., 5) in simulator units."""
  return unnormalize(obs, OBS_LOW, OBS_HIGH)


def normalize_action(action):
  """Push-T actions (..., 2), target pixels in [0, 512] -> [-1, 1]."""
  return normalize(action, ACTION_LOW, ACTION_HIGH)


def unnormalize_action(action):
  """[-1, 1] -> Push-T actions (..., 2), target pixels in [0, 512]."""
  return unnormalize(action, ACTION_LOW, ACTION_HIGH)


# ----------------------------------------------------------------------------- adapter

def _import_gym_pusht():
  """(gymnasium, gym_pusht.envs.PushTEnv), or a one-line ImportError."""
  try:
    import gymnasium
    import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
    from gym_pusht.envs import PushTEnv
  except ImportError as e:
    raise ImportError(f"Push-T needs the gym-pusht package ({e}); install it with: "
                      "pip install gym-pusht") from None
  return gymnasium, PushTEnv


class PushTState(NamedTuple):
  """The simulator state an expert reads (simulator units, float64).

  Attributes:
    agent_pos: (2,) agent centre, pixels.
    agent_vel: (2,) agent velocity, pixels per second.
    block_pose: (3,) x, y of the T's body origin and its angle (radians, not wrapped).
    goal_pose: (3,) the goal pose, same convention.
  """
  agent_pos: np.ndarray
  agent_vel: np.ndarray
  block_pose: np.ndarray
  goal_pose: np.ndarray


class PushT:
  """One Push-T environment: ``gym_pusht/PushT-v0`` with state observations.

  ``reset(seed)`` starts an episode (the agent in [50, 450)^2, the block's origin in
  [100, 400)^2, its angle uniform in [-pi, pi), drawn by gym-pusht from the seed);
  ``step(action)`` applies one absolute-position action and returns
  ``(obs, progress, success)`` where success is sticky (it stays True once coverage
  exceeded the threshold; the benchmark ends the episode there).

  Args:
    max_steps: episode limit, passed to gymnasium's TimeLimit (300 in the benchmark).

  Attributes:
    success_threshold: the installed gym-pusht's coverage threshold (0.95).
    coverage, progress, success, steps: of the current episode, after the last step.

  Example:
    >>> env = PushT()                                        # doctest: +SKIP
    >>> obs = env.reset(seed=3)
    >>> obs, progress, success = env.step(np.array([256.0, 256.0]))
  """

  def __init__(self, max_steps: int = MAX_STEPS):
    if int(max_steps) < 1:
      raise ValueError(f"max_steps={max_steps}; expected a positive integer")
    gym, _ = _import_gym_pusht()
    self.max_steps = int(max_steps)
    self._env = gym.make(ENV_ID, obs_type="state", max_episode_steps=self.max_steps,
                         disable_env_checker=True)
    self.sim = self._env.unwrapped          # the gym_pusht PushTEnv (pymunk space etc.)
    self.success_threshold = float(getattr(self.sim, "success_threshold", 0.95))
    self.coverage = 0.0
    self.success = False
    self.steps = 0
    self._ready = False

  @property
  def progress(self) -> float:
    """clip(coverage / success_threshold, 0, 1): the environment's reward."""
    return float(np.clip(self.coverage / self.success_threshold, 0.0, 1.0))

  def reset(self, seed: int | None = None) -> np.ndarray:
    """Starts an episode; returns the (5,) float32 observation."""
    obs, _ = self._env.reset(seed=None if seed is None else int(seed))
    self.coverage = float(self.sim._get_coverage())   # gym-pusht computes it only in step
    self.success = self.coverage > self.success_threshold
    self.steps = 0
    self._ready = True
    return np.asarray(obs, np.float32)

  def step(self, action) -> tuple[np.ndarray, float, bool]:
    """Applies ``action`` (2,), the agent's target in pixels.

    Returns:
      obs (5,) float32, progress in [0, 1] (the env's reward), success (sticky).
    """
    if not self._ready:
      raise RuntimeError("PushT.step called before reset(); call env.reset(seed) first")
    action = np.asarray(action, np.float64)
    if action.shape != (ACTION_DIM,) or not np.all(np.isfinite(action)):
      raise ValueError(f"action {action!r} has shape {action.shape}; expected a finite "
                       f"(2,) target position in pixels [0, {WORKSPACE:g}]")
    obs, _, _, _, info = self._env.step(action)
    self.coverage = float(info["coverage"])
    self.success = self.success or bool(info["is_success"])
    self.steps += 1
    return np.asarray(obs, np.float32), self.progress, self.success

  def state(self) -> PushTState:
    """The simulator state (agent position/velocity, block and goal poses)."""
    sim = self.sim
    return PushTState(
        agent_pos=np.array(tuple(sim.agent.position), np.float64),
        agent_vel=np.array(tuple(sim.agent.velocity), np.float64),
        block_pose=np.array([*tuple(sim.block.position), sim.block.angle], np.float64),
        goal_pose=np.array(sim.goal_pose, np.float64))

  def close(self):
    self._env.close()


# ----------------------------------------------------------------------------- expert

@dataclasses.dataclass(frozen=True)
class ExpertConfig:
  """Knobs of ``PushTExpert`` (pixels, environment steps).

  Attributes:
    contact_spacing: spacing of the candidate contact points along the T's outline.
    gap: the agent stops this far from the block's surface before a push.
    push_speeds: speeds (pixels per step) of the push target's straight-line motion.
    push_steps: longest push, in steps; every prefix 1..push_steps is a candidate.
    approach_speed: pixels per step assumed when costing the approach to a contact.
    approach_overhead: extra steps assumed for the agent to settle at the contact.
    lookahead: the approach target runs this far ahead along the planned path.
    settle_pos, settle_vel: the push starts once the agent is within settle_pos px of
      the contact and slower than settle_vel px/s.
    approach_timeout: replan after this many approach steps.
  """
  contact_spacing: float = 15.0
  gap: float = 3.0
  push_speeds: tuple[float, ...] = (3.0, 10.0, 25.0)
  push_steps: int = 6
  approach_speed: float = 20.0
  approach_overhead: float = 4.0
  lookahead: float = 50.0
  settle_pos: float = 1.5
  settle_vel: float = 15.0
  approach_timeout: int = 30


def _rotation(theta: float) -> np.ndarray:
  c, s = math.cos(theta), math.sin(theta)
  return np.array([[c, -s], [s, c]])


def _to_world(points: np.ndarray, pose: np.ndarray) -> np.ndarray:
  """Local (n, 2) points of a body at pose (x, y, angle) -> world (n, 2)."""
  return points @ _rotation(pose[2]).T + pose[:2]


class PushTExpert:
  """A planning expert for Push-T that pushes with the true simulator in the loop.

  The block is quasi-static (it stops when the agent stops), so one push is a short,
  self-contained experiment. At each decision the expert:

  1. lists candidate pushes: contact points every ``contact_spacing`` px along the T's
     outline whose outward normal n leaves room for the agent (points in the concave
     corners are dropped); a push starts with the agent at rest at
     q = p + (radius + gap) n and moves its target along -n at speed v (one of
     ``push_speeds``) for k = 1..``push_steps`` steps;
  2. simulates every (contact, v) push in a private copy of the pymunk space (the same
     PD controller and physics as the environment) and scores each prefix k by the drop
     of the pose cost per step spent,
         score = (C(pose_now) - C(pose_after_k)) / (approach_steps(q) + k),
     where C is the mean distance (px) between the T's 8 outline corners at a pose and
     at the goal pose (0 exactly at the goal), and approach_steps is the length of the
     shortest path to q around the block (a visibility graph on the T inflated by the
     agent's radius) over ``approach_speed`` plus ``approach_overhead``;
  3. drives the agent along that path to q, waits until it is settled there, and plays
     the chosen push's k targets open loop; then decides again. An agent touching the
     block first backs off along the surface normal; the approach target runs up to
     ``lookahead`` px ahead on the path, as far as the agent sees it past the block.
     It also replans when the block moves during an approach. When no push lowers C,
     it plays a random candidate (drawn from its own ``seed``) to leave the local
     minimum.

  Stateful (the current plan), so call ``reset()`` at every episode start.

  Args:
    config: ``ExpertConfig``.
    seed: seed of the fallback draws.

  Example:
    >>> env, expert = PushT(), PushTExpert()                 # doctest: +SKIP
    >>> obs = env.reset(seed=0); expert.reset()
    >>> obs, progress, success = env.step(expert(env.state()))
  """

  def __init__(self, config: ExpertConfig | None = None, seed: int = 0):
    self.config = config or ExpertConfig()
    if not self.config.push_speeds or self.config.push_steps < 1:
      raise ValueError(f"ExpertConfig {self.config}: expected at least one push speed "
                       "and push_steps >= 1")
    _, push_env_cls = _import_gym_pusht()
    self._sim = push_env_cls(obs_type="state")        # planning copy of the physics
    self._sim.reset(seed=0)
    self._rollout = None                               # second copy, for plan_chunk
    self._rng = np.random.default_rng(seed)
    self._geometry()
    self.reset()

  # -- geometry, computed once from the installed gym-pusht's T
  def _geometry(self):
    import shapely
    import shapely.geometry as sg
    from shapely.geometry.polygon import orient

    polys = [sg.Polygon([tuple(v) for v in s.get_vertices()])
             for s in self._sim.block.shapes]
    t_local = orient(shapely.union_all(polys).simplify(0.0), 1.0)     # CCW outline
    corners = np.array(t_local.exterior.coords)[:-1]
    self._t_local = t_local
    self._corners = corners                            # (8, 2): the cost's keypoints
    self._radius = float(next(iter(self._sim.agent.shapes)).radius)
    cfg = self.config
    standoff = self._radius + cfg.gap
    points, normals = [], []
    for a, b in zip(corners, np.roll(corners, -1, axis=0)):
      length = float(np.linalg.norm(b - a))
      u = (b - a) / length
      n = np.array([u[1], -u[0]])                      # outward for a CCW outline
      m = max(1, int(round(length / cfg.contact_spacing)))
      for s in (np.arange(m) + 0.5) / m * length:
        p = a + s * u
        if t_local.distance(sg.Point(p + standoff * n)) >= standoff - 1e-6:
          points.append(p)
          normals.append(n)
    self._contact_p = np.array(points)
    self._contact_n = np.array(normals)
    self._kp, self._kv, self._dt = self._sim.k_p, self._sim.k_v, self._sim.dt
    self._substeps = int(round(1.0 / (self._sim.dt * self._sim.control_hz)))

  def reset(self):
    """Forgets the current plan (call at each episode start)."""
    self._phase = None          # None (decide), "approach" or "push"
    self._plan_pose = None
    self._target = None         # q, the pre-contact point
    self._pushes = None         # (k, 2) push targets
    self._push_i = 0
    self._approach_steps = 0

  def cost(self, block_pose, goal_pose) -> float:
    """C(pose): mean distance (px) between the T's outline corners at two poses."""
    d = _to_world(self._corners, np.asarray(block_pose)) - _to_world(
        self._corners, np.asarray(goal_pose))
    return float(np.mean(np.linalg.norm(d, axis=1)))

  # -- simulation on the private copy
  def _load(self, sim, agent_pos, agent_vel, block_pose):
    sim.agent.position = (float(agent_pos[0]), float(agent_pos[1]))
    sim.agent.velocity = (float(agent_vel[0]), float(agent_vel[1]))
    block = sim.block
    block.angle = float(block_pose[2])      # angle first: setting it moves the origin
    block.position = (float(block_pose[0]), float(block_pose[1]))
    block.velocity = (0.0, 0.0)
    block.angular_velocity = 0.0

  def _sim_step(self, sim, target):
    """One environment step of the PD controller and physics (as gym-pusht's step)."""
    tx, ty = float(target[0]), float(target[1])
    agent, kp, kv, dt = sim.agent, self._kp, self._kv, self._dt
    for _ in range(self._substeps):
      (px, py), (vx, vy) = agent.position, agent.velocity
      agent.velocity = (vx + (kp * (tx - px) - kv * vx) * dt,
                        vy + (kp * (ty - py) - kv * vy) * dt)
      sim.space.step(dt)

  # -- approach paths around the block
  def _roadmap(self, start, block_pose):
    """Shortest paths from ``start`` around the block (a visibility graph).

    Nodes are the corners of the T inflated (mitred) by the agent's radius + 6 px;
    edges are segments clear of the T inflated (rounded) by radius + 1 px. An agent
    closer than radius + 1 px to the block first backs off along the surface normal
    to radius + 6 px.
    """
    import shapely
    from shapely import affinity, ops

    c, s = math.cos(block_pose[2]), math.sin(block_pose[2])
    t_world = affinity.affine_transform(
        self._t_local, [c, -s, s, c, float(block_pose[0]), float(block_pose[1])])
    r = self._radius
    obstacle = t_world.buffer(r + 1.0, quad_segs=4)
    core = t_world.buffer(r - 2.0, quad_segs=4)
    nodes = np.array(t_world.buffer(r + 6.0, join_style="mitre").exterior.coords)[:-1]
    agent = np.asarray(start, np.float64)
    start = agent
    if t_world.distance(shapely.Point(agent)) < r + 1.0:
      near = np.array(ops.nearest_points(t_world.exterior, shapely.Point(agent))[0].coords[0])
      away = agent - near
      start = near + (r + 6.0) * away / max(np.linalg.norm(away), 1e-9)

    def free(geom, a, b):
      a, b = np.broadcast_arrays(np.atleast_2d(a), np.atleast_2d(b))
      return ~shapely.intersects(geom, shapely.linestrings(np.stack([a, b], axis=1)))

    n = len(nodes)
    weights = np.full((n, n), np.inf)
    i, j = np.triu_indices(n, 1)
    ok = free(obstacle, nodes[i], nodes[j])
    d = np.linalg.norm(nodes[i] - nodes[j], axis=1)
    weights[i[ok], j[ok]] = weights[j[ok], i[ok]] = d[ok]
    dist = np.where(free(obstacle, start, nodes),
                    np.linalg.norm(nodes - start, axis=1), np.inf)
    prev = np.full(n, -1)
    done = np.zeros(n, bool)
    for _ in range(n):                                   # Dijkstra from the start
      u = int(np.argmin(np.where(done, np.inf, dist)))
      if not np.isfinite(dist[u]):
        break
      done[u] = True
      better = dist[u] + weights[u] < dist
      dist[better] = dist[u] + weights[u][better]
      prev[better] = u
    return dict(agent=agent, start=start, nodes=nodes, dist=dist, prev=prev, free=free,
                obstacle=obstacle, core=core)

  def _path_lengths(self, roadmap, goals):
    """Shortest path length from the agent to each goal (g, 2)."""
    rm, free = roadmap, roadmap["free"]
    backoff = float(np.linalg.norm(rm["start"] - rm["agent"]))
    direct = np.where(free(rm["obstacle"], rm["start"], goals),
                      np.linalg.norm(goals - rm["start"], axis=1) + backoff, np.inf)
    # An agent touching the block may slide straight to a nearby start point.
    close = np.linalg.norm(goals - rm["agent"], axis=1)
    slide = np.where((close < 8.0) & free(rm["core"], rm["agent"], goals), close, np.inf)
    nodes, g = rm["nodes"], len(goals)
    gi = np.repeat(np.arange(g), len(nodes))
    ni = np.tile(np.arange(len(nodes)), g)
    ok = free(rm["obstacle"], goals[gi], nodes[ni]).reshape(g, len(nodes))
    via = rm["dist"][None, :] + np.linalg.norm(goals[:, None] - nodes[None], axis=2)
    via = np.where(ok, via, np.inf).min(axis=1) + backoff
    length = np.minimum(np.minimum(direct, via), slide)
    # Unreachable in the graph (rare, e.g. against a wall): a long straight detour.
    return np.where(np.isfinite(length), length,
                    2.0 * np.linalg.norm(goals - rm["agent"], axis=1))

  def _path(self, roadmap, goal):
    """Waypoints (m, 2) from the agent to ``goal`` on the roadmap."""
    rm, free = roadmap, roadmap["free"]
    goal = np.asarray(goal, np.float64)
    agent, start = rm["agent"], rm["start"]
    if np.linalg.norm(goal - agent) < 8.0 and free(rm["core"], agent, goal)[0]:
      return np.stack([agent, goal])
    head = [agent] if np.any(start != agent) else []
    if free(rm["obstacle"], start, goal)[0]:
      return np.stack([*head, start, goal])
    nodes = rm["nodes"]
    ok = free(rm["obstacle"], goal, nodes)
    via = np.where(ok, rm["dist"] + np.linalg.norm(nodes - goal, axis=1), np.inf)
    u = int(np.argmin(via))
    if not np.isfinite(via[u]):
      return np.stack([*head, start, goal])
    chain = []
    while u >= 0:
      chain.append(nodes[u])
      u = rm["prev"][u]
    return np.stack([*head, start, *chain[::-1], goal])

  def _pursue(self, roadmap, path):
    """The furthest point within ``lookahead`` along the path that the agent sees in
    a straight line past the block (so the lagging agent does not cut corners)."""
    agent, free = roadmap["agent"], roadmap["free"]
    if len(path) == 2:
      return _along(path, self.config.lookahead)
    geom = roadmap["obstacle"] if np.all(roadmap["start"] == agent) else roadmap["core"]
    for frac in (1.0, 0.75, 0.5, 0.25):
      point = _along(path, frac * self.config.lookahead)
      if free(geom, agent, point)[0]:
        return point
    return _along(path, 10.0)

  # -- deciding on a push
  def _decide(self, state: PushTState):
    cfg = self.config
    pose, goal = state.block_pose, state.goal_pose
    c0 = self.cost(pose, goal)
    rot = _rotation(pose[2])
    normals = self._contact_n @ rot.T
    starts = _to_world(self._contact_p, pose) + (self._radius + cfg.gap) * normals
    valid = np.all((starts >= 0.0) & (starts <= WORKSPACE), axis=1)
    idx = np.flatnonzero(valid)
    if len(idx) == 0:                # cannot happen inside the workspace; be safe
      idx = np.arange(len(starts))
    roadmap = self._roadmap(state.agent_pos, pose)
    approach = (self._path_lengths(roadmap, starts[idx]) / cfg.approach_speed
                + cfg.approach_overhead)
    best, best_score, candidates = None, 0.0, []
    for a, i in zip(approach, idx):
      for v in cfg.push_speeds:
        self._load(self._sim, starts[i], (0.0, 0.0), pose)
        targets = np.clip(starts[i] - normals[i] * v * np.arange(1, cfg.push_steps + 1)[:, None],
                          0.0, WORKSPACE)
        for k, target in enumerate(targets, start=1):
          self._sim_step(self._sim, target)
          b = self._sim.block
          score = (c0 - self.cost((*b.position, b.angle), goal)) / (a + k)
          if score > best_score:
            best, best_score = (i, targets[:k]), score
        candidates.append((i, targets))
    if best is None:                 # no push lowers the cost: a random one
      best = candidates[self._rng.integers(len(candidates))]
    i, targets = best
    self._phase, self._plan_pose = "approach", np.array(pose)
    self._target, self._pushes, self._push_i = starts[i], targets, 0
    self._approach_steps = 0

  def __call__(self, state: PushTState) -> np.ndarray:
    """The next action (2,) in pixels for the simulator state ``state``."""
    cfg = self.config
    if self._phase == "push":
      action = self._pushes[self._push_i]
      self._push_i += 1
      if self._push_i == len(self._pushes):
        self._phase = None
      return np.array(action, np.float64)
    moved = (self._plan_pose is not None and
             (np.linalg.norm(state.block_pose[:2] - self._plan_pose[:2]) > 0.5
              or abs(state.block_pose[2] - self._plan_pose[2]) > 0.01))
    if self._phase is None or moved or self._approach_steps >= cfg.approach_timeout:
      self._decide(state)
    if (np.linalg.norm(state.agent_pos - self._target) < cfg.settle_pos
        and np.linalg.norm(state.agent_vel) < cfg.settle_vel):
      self._phase = "push"
      return self(state)
    self._approach_steps += 1
    roadmap = self._roadmap(state.agent_pos, state.block_pose)
    path = self._path(roadmap, self._target)
    return np.clip(self._pursue(roadmap, path), 0.0, WORKSPACE)

  def plan_chunk(self, obs, chunk_len: int) -> np.ndarray:
    """A (chunk_len, 2) action chunk from a (5,) observation, by running the expert
    open loop in a private simulator copy (the agent's velocity, absent from the
    observation, is taken as 0). Starts from a fresh plan (it calls ``reset()``).
    Used as a chunked policy in ``evaluate_chunked``.

    Example:
      >>> res = evaluate_chunked(lambda o: expert.plan_chunk(o, 16), 4,  # doctest: +SKIP
      ...                        chunk_len=16, execute_steps=8)
    """
    obs = np.asarray(obs, np.float64)
    if obs.shape != (OBS_DIM,):
      raise ValueError(f"obs has shape {obs.shape}; expected ({OBS_DIM},)")
    if self._rollout is None:
      _, push_env_cls = _import_gym_pusht()
      self._rollout = push_env_cls(obs_type="state")
      self._rollout.reset(seed=0)
    sim = self._rollout
    self._load(sim, obs[:2], (0.0, 0.0), obs[2:])
    self.reset()
    chunk = []
    for _ in range(int(chunk_len)):
      state = PushTState(np.array(tuple(sim.agent.position)),
                         np.array(tuple(sim.agent.velocity)),
                         np.array([*tuple(sim.block.position), sim.block.angle]),
                         np.array(sim.goal_pose, np.float64))
      action = self(state)
      self._sim_step(sim, action)
      chunk.append(action)
    return np.array(chunk, np.float32)


def _along(path: np.ndarray, distance: float) -> np.ndarray:
  """The point ``distance`` along a polyline (m, 2) from its start (or its end)."""
  for a, b in zip(path[:-1], path[1:]):
    seg = float(np.linalg.norm(b - a))
    if seg >= distance:
      return a + (b - a) * (distance / max(seg, 1e-9))
    distance -= seg
  return path[-1]


# ----------------------------------------------------------------------------- demos

class PushTDemos(NamedTuple):
  """Expert demonstrations, padded to a common length (numpy; same field names as the
  jax ``Demos`` of ``common/envs/rollout.py``, so one training pipeline reads both).

  Attributes:
    obs: (E, T+1, 5) float32 observations; past ``lengths[e]`` the last one repeated.
    actions: (E, T, 2) float32 actions (pixels); past ``lengths[e]`` the last repeated.
    progress: (E, T+1) float32, clip(coverage / threshold, 0, 1) after each step.
    success: (E,) bool, coverage exceeded the threshold within the episode.
    lengths: (E,) int32 steps taken (the episode stops at success or T = max_steps).
  """
  obs: np.ndarray
  actions: np.ndarray
  progress: np.ndarray
  success: np.ndarray
  lengths: np.ndarray


class Trajectory(NamedTuple):
  """One episode: obs (L+1, 5) float32, actions (L, 2) float32, coverage (L+1,)."""
  obs: np.ndarray
  actions: np.ndarray
  coverage: np.ndarray


def _check_counts(**kwargs):
  for name, value in kwargs.items():
    if int(value) < 1:
      raise ValueError(f"{name}={value}; expected a positive integer")


def _pad(rows: Sequence[np.ndarray], length: int) -> np.ndarray:
  """Stacks (L_e, ...) arrays into (E, length, ...), repeating each one's last row."""
  return np.stack([np.concatenate([r, np.repeat(r[-1:], length - len(r), axis=0)])
                   for r in rows])


def collect_demos(num_episodes: int, seed: int = 0, max_steps: int = MAX_STEPS,
                  expert: PushTExpert | None = None) -> PushTDemos:
  """Runs the expert on episodes reset with seeds seed, seed + 1, ...

  Each episode stops at success (coverage > threshold) or after ``max_steps``.

  Args:
    num_episodes: E.
    seed: the first episode's reset seed.
    max_steps: T, the episode limit.
    expert: a ``PushTExpert`` (default: a new one with ``ExpertConfig()``).

  Returns:
    ``PushTDemos`` with obs (E, T+1, 5), actions (E, T, 2), progress (E, T+1),
    success (E,), lengths (E,).

  Example:
    >>> demos = collect_demos(num_episodes=2, seed=0, max_steps=300)   # doctest: +SKIP
    >>> demos.obs.shape, demos.success.mean()
  """
  _check_counts(num_episodes=num_episodes, max_steps=max_steps)
  env, expert = PushT(max_steps), expert or PushTExpert(seed=seed)
  obs_rows, act_rows, prog_rows, success, lengths = [], [], [], [], []
  for e in range(int(num_episodes)):
    obs = [env.reset(seed=seed + e)]
    expert.reset()
    progress, actions = [env.progress], []
    while env.steps < max_steps and not env.success:
      action = expert(env.state())
      o, p, _ = env.step(action)
      obs.append(o)
      progress.append(p)
      actions.append(action)
    actions = np.array(actions, np.float32).reshape(-1, ACTION_DIM)
    if len(actions) == 0:           # already solved at reset: one "stay" action
      actions = obs[0][None, :2].astype(np.float32)
    obs_rows.append(np.stack(obs))
    act_rows.append(actions)
    prog_rows.append(np.array(progress, np.float32))
    success.append(env.success)
    lengths.append(env.steps)
  env.close()
  return PushTDemos(obs=_pad(obs_rows, max_steps + 1),
                    actions=_pad(act_rows, max_steps),
                    progress=_pad(prog_rows, max_steps + 1),
                    success=np.array(success, bool),
                    lengths=np.array(lengths, np.int32))


# ----------------------------------------------------------------------------- evaluation

class ChunkedEval(NamedTuple):
  """Closed-loop results of a chunked policy.

  Attributes:
    success: (E,) bool, coverage exceeded the threshold within the episode.
    coverage: (E,) float, coverage when the episode ended (at success or max_steps).
    max_coverage: (E,) float, the best coverage reached in the episode.
    lengths: (E,) int, steps taken.
    trajectories: E ``Trajectory`` tuples (for plots).
  """
  success: np.ndarray
  coverage: np.ndarray
  max_coverage: np.ndarray
  lengths: np.ndarray
  trajectories: list


def evaluate_chunked(act_fn: Callable[[np.ndarray], Any], num_episodes: int,
                     seed: int = 0, chunk_len: int = 16, execute_steps: int = 8,
                     max_steps: int = MAX_STEPS) -> ChunkedEval:
  """Receding-horizon evaluation of a chunked policy in the real simulator.

  Each episode (reset seeds seed, seed + 1, ...): ask ``act_fn(obs)`` for a chunk
  of ``chunk_len`` actions, execute its first ``execute_steps``, observe, ask again;
  stop at success or after ``max_steps``.

  Args:
    act_fn: obs (5,) float32 in simulator units -> (chunk_len, 2) actions in pixels
      (wrap a jitted sampler as ``lambda o: np.asarray(unnormalize_action(f(...)))``).
    num_episodes: E.
    seed: the first episode's reset seed.
    chunk_len: H, the chunk length the policy returns.
    execute_steps: actions executed per chunk, 1 <= execute_steps <= chunk_len.
    max_steps: the episode limit.

  Returns:
    ``ChunkedEval``.

  Example:
    >>> expert = PushTExpert()                                      # doctest: +SKIP
    >>> res = evaluate_chunked(lambda o: expert.plan_chunk(o, 16), 5, chunk_len=16)
    >>> res.success.mean(), res.coverage.mean()
  """
  _check_counts(num_episodes=num_episodes, chunk_len=chunk_len,
                execute_steps=execute_steps, max_steps=max_steps)
  if execute_steps > chunk_len:
    raise ValueError(f"execute_steps={execute_steps} exceeds chunk_len={chunk_len}; "
                     "expected 1 <= execute_steps <= chunk_len")
  env = PushT(max_steps)
  success, coverage, best, lengths, trajectories = [], [], [], [], []
  for e in range(int(num_episodes)):
    obs = env.reset(seed=seed + e)
    observations, actions, covers = [obs], [], [env.coverage]
    while env.steps < max_steps and not env.success:
      chunk = np.asarray(act_fn(obs), np.float64)
      if chunk.shape != (chunk_len, ACTION_DIM):
        raise ValueError(f"act_fn returned a chunk of shape {chunk.shape}; expected "
                         f"({chunk_len}, {ACTION_DIM}) actions in pixels")
      for action in chunk[:execute_steps]:
        obs, _, _ = env.step(action)
        observations.append(obs)
        actions.append(action)
        covers.append(env.coverage)
        if env.success or env.steps >= max_steps:
          break
    success.append(env.success)
    coverage.append(env.coverage)
    best.append(max(covers))
    lengths.append(env.steps)
    trajectories.append(Trajectory(np.stack(observations),
                                   np.array(actions, np.float32).reshape(-1, 2),
                                   np.array(covers)))
  env.close()
  return ChunkedEval(np.array(success), np.array(coverage), np.array(best),
                     np.array(lengths), trajectories)
