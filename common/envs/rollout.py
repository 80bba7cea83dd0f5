"""Episodes of a `ControlEnv` as one compiled program: expert demonstrations,
closed-loop evaluation of action-chunk policies, and expert chunks from given states.

Every episode runs the env's full horizon ``T = env.max_steps`` (success is sticky, so a
fixed-length ``lax.scan`` is an episode); episodes are vmapped and the whole batch is one
``jit`` with the env (and policy) as static arguments: one compile per (env, policy,
shapes). Trajectories keep the initial state, so they have ``T + 1`` entries.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from common.envs.base import ControlEnv

Array = jax.Array


class Demos(NamedTuple):
  """Expert episodes (E episodes of T = max_steps steps).

  Attributes:
    obs: (E, T + 1, obs_dim) observations, the initial one first.
    actions: (E, T, action_dim) the expert's actions (within the action bounds).
    progress: (E, T + 1) true progress.
    success: (E,) bool, success at the end (sticky).
    lengths: (E,) int32 steps until success (first t with success), T if never.
    states: the env's state pytree with leading axes (E, T + 1).
  """
  obs: Array
  actions: Array
  progress: Array
  success: Array
  lengths: Array
  states: Any


class Rollout(NamedTuple):
  """Closed-loop episodes of a chunk policy (same layout as `Demos`).

  Attributes:
    success: (E,) bool, success at the end (sticky).
    final_progress: (E,) progress after the last step.
    obs: (E, T + 1, obs_dim) observations.
    actions: (E, T, action_dim) the executed actions (as given, before the env clips).
    progress: (E, T + 1) true progress.
    lengths: (E,) int32 steps until success, T if never.
    states: the env's state pytree with leading axes (E, T + 1) (positions for plots).
  """
  success: Array
  final_progress: Array
  obs: Array
  actions: Array
  progress: Array
  lengths: Array
  states: Any


def _with_initial(state0, states):
  """Prepends the initial state to a scanned (T, ...) state trajectory."""
  return jax.tree.map(lambda x0, xs: jnp.concatenate([x0[None], xs]), state0, states)


def _summarise(env, states):
  """(obs, progress, success, length) of one (T + 1, ...) state trajectory."""
  obs = jax.vmap(env.observe)(states)
  prog = jax.vmap(env.progress)(states)
  flags = jax.vmap(env.success)(states)
  length = jnp.where(flags.any(), jnp.argmax(flags), env.max_steps).astype(jnp.int32)
  return obs, prog, flags[-1], length


def _check_count(name, value):
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f"{name}={value!r}; expected a positive integer")
  return int(value)


def _check_env(env):
  if not isinstance(env, ControlEnv):
    raise ValueError(f"env={type(env).__name__}; expected a ControlEnv "
                     "(common.envs.make('push') or make('reach'))")


def _expert_episode(env, key):
  k_reset, k_act = jax.random.split(key)
  state0 = env.reset(k_reset)

  def body(state, k):
    action = env.expert(state, k)
    nxt = env.step(state, action)
    return nxt, (nxt, action)

  keys = jax.random.split(k_act, env.max_steps)
  _, (states, actions) = jax.lax.scan(body, state0, keys)
  states = _with_initial(state0, states)
  obs, prog, succ, length = _summarise(env, states)
  return Demos(obs=obs, actions=actions, progress=prog, success=succ, lengths=length,
               states=states)


@functools.partial(jax.jit, static_argnames=("env", "num_episodes"))
def _collect_demos(env, key, num_episodes):
  return jax.vmap(lambda k: _expert_episode(env, k))(jax.random.split(key, num_episodes))


def collect_demos(env: ControlEnv, key: Array, num_episodes: int) -> Demos:
  """The scripted expert's episodes: ``s_0 = reset(k)``, ``a_t = expert(s_t, k_t)``,
  ``s_{t+1} = step(s_t, a_t)`` for ``t < T``; one jitted, vmapped ``lax.scan``.

  Args:
    env: a `ControlEnv`.
    key: a PRNG key (episode ``i`` uses ``split(key, num_episodes)[i]``).
    num_episodes: E.

  Returns:
    `Demos` with leading axis E.

  Example:
    >>> demos = collect_demos(envs.make("push"), jax.random.PRNGKey(0), 64)
    >>> demos.success.mean()
  """
  _check_env(env)
  return _collect_demos(env, key, _check_count("num_episodes", num_episodes))


def _masked_step(env, state, t, action):
  """``step(state, action)`` while ``t < T``; the unchanged state afterwards."""
  nxt = env.step(state, action)
  keep = t < env.max_steps
  return jax.tree.map(lambda new, old: jnp.where(keep, new, old), nxt, state)


def _chunked_episode(env, policy, key, chunk_len, execute_steps):
  num_chunks = -(-env.max_steps // execute_steps)
  k_reset, k_policy = jax.random.split(key)
  state0 = env.reset(k_reset)

  def run_chunk(carry, k):
    state, t = carry
    chunk = policy(k, env.observe(state), state)
    if chunk.shape != (chunk_len, env.action_dim):
      raise ValueError(f"act_fn returned shape {chunk.shape}; expected "
                       f"(chunk_len, action_dim) = ({chunk_len}, {env.action_dim})")

    def run_step(inner, action):
      state, t = inner
      nxt = _masked_step(env, state, t, action)
      return (nxt, t + 1), (nxt, action)

    return jax.lax.scan(run_step, (state, t), chunk[:execute_steps])

  keys = jax.random.split(k_policy, num_chunks)
  _, (states, actions) = jax.lax.scan(run_chunk, (state0, jnp.int32(0)), keys)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])[:env.max_steps]
  states = _with_initial(state0, jax.tree.map(flat, states))
  obs, prog, succ, length = _summarise(env, states)
  return Rollout(success=succ, final_progress=prog[-1], obs=obs, actions=flat(actions),
                 progress=prog, lengths=length, states=states)


@functools.partial(jax.jit, static_argnames=("env", "act_fn", "num_episodes",
                                             "chunk_len", "execute_steps", "with_state"))
def _run_chunked(env, act_fn, key, num_episodes, chunk_len, execute_steps, params,
                 with_state):
  def policy(k, obs, state):
    head = () if params is None else (params,)
    tail = (state,) if with_state else ()
    return act_fn(*head, k, obs, *tail)

  episode = lambda k: _chunked_episode(env, policy, k, chunk_len, execute_steps)
  return jax.vmap(episode)(jax.random.split(key, num_episodes))


def run_chunked(env: ControlEnv, act_fn: Callable[..., Array], key: Array,
                num_episodes: int, chunk_len: int, execute_steps: int,
                params: Any = None, with_state: bool = False) -> Rollout:
  """Closed-loop evaluation of an action-chunk policy with a receding horizon.

  Every ``execute_steps`` steps the policy sees the current observation and returns a
  chunk; its first ``execute_steps`` actions are executed:

      A = act_fn(k_j, observe(s_{jH}))  (chunk_len, action_dim),   H = execute_steps,
      s_{jH+i+1} = step(s_{jH+i}, A[i])   for i < H.

  The episode is a ``lax.scan`` over ``ceil(T / H)`` chunks (T = max_steps) of an inner
  scan over H steps. If H does not divide T, the last chunk is cut short: steps past T
  leave the state unchanged and are dropped, so every episode has exactly T steps.
  Episodes are vmapped and the whole evaluation is jit-compiled once per (env, act_fn,
  sizes); pass changing arrays (trained parameters) through ``params``, not a closure,
  to keep that one compile. With ``with_state`` the policy also gets the env's state
  (for oracle baselines that simulate their candidates; a learned policy must not).

  Args:
    env: a `ControlEnv`.
    act_fn: pure function ``(key, obs (obs_dim,)) -> (chunk_len, action_dim)``;
      ``(params, key, obs[, state])`` when ``params`` is given, ``(key, obs, state)``
      with ``with_state``. It may draw and score many candidates inside; it must be
      hashable (a function, not a fresh lambda per call, if it should compile once).
    key: a PRNG key (episode resets and the policy's keys).
    num_episodes: E.
    chunk_len: length of each predicted chunk.
    execute_steps: H, actions executed per chunk, ``1 <= H <= chunk_len``.
    params: optional pytree passed to ``act_fn`` as its first argument.
    with_state: also pass the current state to ``act_fn`` (last argument).

  Returns:
    A `Rollout` with leading axis E.

  Example:
    >>> env = envs.make("reach")
    >>> act = lambda key, obs: jnp.zeros((8, 2))
    >>> out = run_chunked(env, act, jax.random.PRNGKey(0), 16, chunk_len=8,
    ...                   execute_steps=4)
  """
  _check_env(env)
  num_episodes = _check_count("num_episodes", num_episodes)
  chunk_len = _check_count("chunk_len", chunk_len)
  execute_steps = _check_count("execute_steps", execute_steps)
  if execute_steps > chunk_len:
    raise ValueError(f"execute_steps={execute_steps}; expected <= chunk_len={chunk_len}")
  return _run_chunked(env, act_fn, key, num_episodes, chunk_len, execute_steps, params,
                      bool(with_state))


def _expert_chunk(env, state, key, chunk_len, resample_mode):
  k_mode, k_roll = jax.random.split(key)
  if resample_mode and hasattr(state, "mode"):
    mode = jnp.where(jax.random.bernoulli(k_mode), 1, -1).astype(state.mode.dtype)
    state = state._replace(mode=mode)

  def body(s, k):
    action = env.expert(s, k)
    return env.step(s, action), action

  return jax.lax.scan(body, state, jax.random.split(k_roll, chunk_len))[1]


@functools.partial(jax.jit, static_argnames=("env", "chunk_len", "num", "resample_mode"))
def _expert_chunks(env, key, states, chunk_len, num, resample_mode):
  batch = jax.tree.leaves(states)[0].shape[0]
  keys = jax.random.split(key, batch * num).reshape((batch, num) + key.shape)
  per_key = lambda s, k: _expert_chunk(env, s, k, chunk_len, resample_mode)
  per_state = lambda s, ks: jax.vmap(lambda k: per_key(s, k))(ks)
  return jax.vmap(per_state)(states, keys)


def expert_chunks(env: ControlEnv, key: Array, states: Any, chunk_len: int, num: int,
                  resample_mode: bool = True) -> Array:
  """Expert action chunks from each of a batch of states (a reference sample of the
  expert's chunk distribution there, e.g. for an MMD coverage metric).

  From each state ``s^b`` the expert acts and the env steps ``chunk_len`` times, ``num``
  times with independent keys: ``A[b, n, i] = expert(s^{b,n}_i, k_{b,n,i})``,
  ``s^{b,n}_{i+1} = step(s^{b,n}_i, A[b, n, i])``, ``s^{b,n}_0 = s^b``. With
  ``resample_mode`` a state's ``mode`` field (if it has one) is redrawn (+1 or -1) per
  sample: observations do not show the mode, so this is the expert's chunk distribution
  given the observation, the one a policy learns from demonstrations.

  Args:
    env: a `ControlEnv`.
    key: a PRNG key.
    states: the env's state pytree with leading axis B (e.g. ``demos.states`` at one
      time index, ``jax.tree.map(lambda x: x[:, t], demos.states)``).
    chunk_len: steps per chunk.
    num: chunks per state.
    resample_mode: redraw the expert's mode for each chunk.

  Returns:
    (B, num, chunk_len, action_dim) actions.

  Example:
    >>> s = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 4))
    >>> chunks = expert_chunks(env, jax.random.PRNGKey(1), s, chunk_len=8, num=16)
  """
  _check_env(env)
  return _expert_chunks(env, key, states, _check_count("chunk_len", chunk_len),
                        _check_count("num", num), bool(resample_mode))
