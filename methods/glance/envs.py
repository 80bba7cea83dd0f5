"""XLand-MiniGrid environments (`xminigrid`) as the pure `common.rl.ppo.Env` pair.

We use `xminigrid.make(name)` -> (env, env_params), wrapped in its
`GymAutoResetWrapper` (a finished episode resets inside `step`; the returned timestep
then holds the new episode's first observation). Observations are the agent's
egocentric, partially observed view, `(view, view, 2)` uint8: per cell the tile id and
its colour id (`xminigrid.core.constants.Tiles` / `Colors`); the reward is
1 - 0.9 t / max_steps on success and 0 otherwise, so `reward > 0` at the end of an
episode means success.

Example:
    >>> env, spec = make_env("MiniGrid-DoorKey-5x5")
    >>> spec.num_actions, spec.obs_shape
    (6, (7, 7, 2))
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax

from common import checks
from common.rl.ppo import Env


class EnvSpec(NamedTuple):
  name: str
  num_actions: int
  obs_shape: tuple
  view_size: int
  max_steps: int


def environment_names() -> tuple[str, ...]:
  import xminigrid
  return tuple(xminigrid.registered_environments())


def make_env(name: str, observation: str = "symbolic", **params) -> tuple[Env, EnvSpec]:
  """The auto-resetting xminigrid environment `name` and its spec.

  Equal arguments give the same `Env` (the same pure functions), so that a program
  jitted with the environment as a static argument compiles once for all its callers
  (e.g. every method of an experiment on one environment).

  Args:
    name: a registered xminigrid name (`environment_names()`).
    observation: "symbolic" (the (tile, colour) grid view, the only kind we use);
      "image" asks for RGB observations, which these environments do not give to
      the agent (they are a rendering), and is refused.
    **params: env_params overrides (e.g. max_steps, an int >= 1, view_size).

  Raises:
    ValueError: an unknown name (listing the valid ones) or observation kind, or
      max_steps < 1.
  """
  if "max_steps" in params:
    checks.positive_int("max_steps", params["max_steps"])
  key = (name, observation, tuple(sorted(params.items())))
  try:
    hash(key)
  except TypeError:   # an unhashable override: a fresh environment
    return _make_env(*key)
  return _cached_env(*key)


def _make_env(name: str, observation: str, params: tuple) -> tuple[Env, EnvSpec]:
  import xminigrid
  from xminigrid.wrappers import GymAutoResetWrapper
  params = dict(params)
  names = environment_names()
  if name not in names:
    raise ValueError(f"unknown environment {name!r}; expected one of {', '.join(names)}")
  if observation != "symbolic":
    raise ValueError(f"observation={observation!r}: {name} has no image observations for "
                     "the agent (its RGB frames are a rendering); expected 'symbolic', the "
                     "(tile, colour) grid view")
  env, env_params = xminigrid.make(name)
  if params:
    env_params = env_params.replace(**params)
  env = GymAutoResetWrapper(env)
  spec = EnvSpec(name, int(env.num_actions(env_params)),
                 tuple(env.observation_shape(env_params)), int(env_params.view_size),
                 int(env_params.max_steps))
  return Env(reset=lambda key: env.reset(env_params, key),
             step=lambda timestep, action: env.step(env_params, timestep, action)), spec


_cached_env = functools.lru_cache(maxsize=None)(_make_env)
