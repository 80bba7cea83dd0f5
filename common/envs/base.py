"""Continuous-control environments as pure functions, for imitation and inference-time sampling.

A ``ControlEnv`` is a bundle of pure, jit- and vmap-able functions over an explicit state
pytree (static under ``jit``):

    state = reset(key);   state' = step(state, a);   o = observe(state)

``progress(state)`` in [0, 1] is the task's true progress (1 at the goal), which the
oracle baseline and the evaluation read; ``success(state)`` is the episode's success
flag; ``expert(state, key)`` is the scripted demonstrator's next action (multimodal and
noisy: its mode is drawn at ``reset`` and kept in the state). Episodes have a fixed
horizon ``max_steps``; a successful state is absorbing for ``success`` (the flag stays
set once reached), so a fixed-length ``lax.scan`` is an episode.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, Callable, NamedTuple

import jax

Array = jax.Array
State = Any


class ControlEnv(NamedTuple):
  """A continuous-control task as pure functions (see the module docstring).

  Attributes:
    name: the registered name.
    obs_dim: size of ``observe(state)``.
    action_dim: size of an action.
    max_steps: the episode horizon.
    reset: key -> state.
    step: (state, action (action_dim,)) -> state; actions are clipped to the bounds.
    observe: state -> (obs_dim,) float32 observation.
    progress: state -> scalar in [0, 1], the true task progress.
    success: state -> bool scalar, sticky once reached.
    expert: (state, key) -> action, the scripted demonstrator.
    action_low, action_high: the action bounds (scalars or (action_dim,)).
  """
  name: str
  obs_dim: int
  action_dim: int
  max_steps: int
  reset: Callable[[Array], State]
  step: Callable[[State, Array], State]
  observe: Callable[[State], Array]
  progress: Callable[[State], Array]
  success: Callable[[State], Array]
  expert: Callable[[State, Array], Array]
  action_low: Any
  action_high: Any


def planar_env(module, name: str, max_steps: Any, expert_noise: Any) -> ControlEnv:
  """The `ControlEnv` of a task module with 2-D displacement actions.

  ``module`` provides OBS_DIM, MAX_STEP and the functions reset, step, observe,
  progress, success and expert(state, key, noise). Equal arguments give the same object,
  so jitted functions that take the env as a static argument (`common.envs.rollout`)
  compile once per setting.

  Args:
    module: the task module.
    name: the env's name.
    max_steps: episode horizon, a positive int.
    expert_noise: the expert's noise standard deviation as a fraction of MAX_STEP, >= 0.

  Raises:
    ValueError naming the env and the bad value.
  """
  if (isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral)
      or max_steps < 1):
    raise ValueError(f"{name}: max_steps={max_steps!r}; expected a positive integer")
  if not isinstance(expert_noise, numbers.Real) or expert_noise < 0:
    raise ValueError(f"{name}: expert_noise={expert_noise!r}; expected a number >= 0")
  return _planar_env(module, name, int(max_steps), float(expert_noise))


@functools.lru_cache(maxsize=None)
def _planar_env(module, name, max_steps, expert_noise):
  m = module
  return ControlEnv(
      name=name, obs_dim=m.OBS_DIM, action_dim=2, max_steps=max_steps, reset=m.reset,
      step=m.step, observe=m.observe, progress=m.progress, success=m.success,
      expert=functools.partial(m.expert, noise=expert_noise), action_low=-m.MAX_STEP,
      action_high=m.MAX_STEP)
