"""Where the intrinsic reward falls: a rollout of the current policy that records the
agent's cell, the curiosity's reward per transition, and whether GLANCE's greedy
description of the next view was wrong.

    heat[y, x] = mean of r_int over transitions that start in cell (y, x)

GLANCE's hook also reports, per transition, the number of wrong slots in the world
model's greedy description of s' (0..6); `reward_error_correlation` measures how r_int
tracks the linguistic world model's mistakes.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from common.rl.ppo import Curiosity, Env


def rollout_with_positions(env: Env, apply_fn, params: Any, timestep, key, steps: int):
  """`steps` policy steps in the batch of environments: the transitions as PPO records
  them, plus "position" (T, N, 2) of the agent before each step."""
  def body(carry, _):
    ts, key = carry
    key, sub = jax.random.split(key)
    logits, _ = apply_fn(params, ts.observation)
    action = jax.random.categorical(sub, logits)
    nxt = jax.vmap(env.step)(ts, action)
    return (nxt, key), {"obs": ts.observation, "actions": action,
                        "next_obs": nxt.observation, "dones": nxt.last(),
                        "position": ts.state.agent.position}
  _, traj = jax.lax.scan(body, (timestep, key), None, steps)
  return traj


def intrinsic_heatmap(r_int, positions, dones, shape) -> np.ndarray:
  """Mean r_int per starting cell over non-terminal transitions (nan where never)."""
  r = np.asarray(r_int).reshape(-1)
  pos = np.asarray(positions).reshape(-1, 2)
  keep = ~np.asarray(dones).reshape(-1)
  total, count = np.zeros(shape), np.zeros(shape)
  np.add.at(total, (pos[keep, 0], pos[keep, 1]), r[keep])
  np.add.at(count, (pos[keep, 0], pos[keep, 1]), 1)
  with np.errstate(invalid="ignore"):
    return total / count


@functools.partial(jax.jit, static_argnames=("env", "apply_fn", "hooks", "steps"))
def _rollout_rewards(env, apply_fn, hooks, steps, params, extra, timestep, key):
  traj = rollout_with_positions(env, apply_fn, params, timestep, key, steps)
  r, _, info = hooks.intrinsic(params, extra, traj)
  return traj, r, info


def evaluate_curiosity(env: Env, apply_fn, hooks: Curiosity, state, steps: int,
                       grid_shape) -> dict:
  """The heatmap and per-transition r_int of the curiosity at a runner state (one
  compilation per (env, apply_fn, hooks, steps))."""
  traj, r, info = _rollout_rewards(env, apply_fn, hooks, steps, state.params, state.extra,
                                   state.timestep, state.key)
  out = {"heatmap": intrinsic_heatmap(r, traj["position"], traj["dones"], grid_shape),
         "r_int": np.asarray(r), "dones": np.asarray(traj["dones"])}
  if "wrong_slots" in info:
    out["wrong_slots"] = np.asarray(info["wrong_slots"])
  return out


def reward_error_correlation(r_int, wrong, dones) -> float:
  """Pearson correlation over non-terminal transitions of r_int with the number of
  wrong slots of the world model's description (nan if either is constant)."""
  keep = ~np.asarray(dones).reshape(-1)
  r, w = np.asarray(r_int).reshape(-1)[keep], np.asarray(wrong).reshape(-1)[keep]
  if r.std() == 0 or w.std() == 0:
    return float("nan")
  return float(np.corrcoef(r, w)[0, 1])
