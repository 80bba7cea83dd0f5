"""PPO with GAE for vmapped JAX environments: one jitted `lax.scan` per chunk of updates.

For N environments stepped T times with policy pi_theta and value V_theta (time-major
arrays (T, N)), generalized advantage estimation (Schulman et al., 2016):

    delta_t = r_t + gamma V(s_{t+1}) (1 - d_t) - V(s_t)
    A_t     = delta_t + gamma lambda (1 - d_t) A_{t+1},    R_t = A_t + V(s_t)

(d_t = 1 when step t ended an episode; the environment then auto-resets). The clipped
surrogate with a clipped value loss and an entropy bonus (Schulman et al., 2017; the
purejaxrl / CleanRL form), per minibatch with advantages normalised to mean 0, std 1:

    rho = exp(log pi(a|s) - log pi_old(a|s))
    L_pi = -mean min(rho A, clip(rho, 1 - eps, 1 + eps) A)
    L_V  = 0.5 mean max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)
    L    = L_pi + c_V L_V - c_H mean H[pi(.|s)]

One update = a rollout of T steps in N environments, rewards (plus an optional
intrinsic reward from `Curiosity` hooks), GAE, then `update_epochs` passes over
`num_minibatches` shuffled minibatches (the rollout is a `lax.scan`, and so are the
epochs and, inside each, the minibatches: the update compiles one gradient step however
many it takes, as in purejaxrl). `make_update` returns it as a pure function of a
`RunnerState`; `run_updates` runs many (one `lax.scan` on accelerators); `train` runs
chunks of updates with orbax checkpoints (`common.checkpoint`) and JSONL/TensorBoard
metrics (`common.metrics`), so an interrupted run resumes from its newest chunk and ends
bit-identical.

GRPO (`common.rl.grpo`) shares the clipped ratio objective's idea but not its data: it
scores token sequences with group-relative advantages and no critic.

Example:
    >>> config = PPOConfig(num_envs=8, num_steps=128)
    >>> update = make_update(env, apply_fn, config, make_optimizer(config, num_updates))
    >>> state = init_runner(env, init_params, config, make_optimizer(...), key)
    >>> state, metrics = run_updates(update, state, 10)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import checks
from common import checkpoint as checkpoint_lib
from common import metrics as metrics_lib

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class PPOConfig:
  """PPO hyperparameters (frozen, hashable).

  Defaults: purejaxrl's gymnax PPO (`purejaxrl/ppo.py`) with 8 environments where it
  has 4; its MiniGrid script (`ppo_minigrid.py`) runs 16 x 128 steps with 1 epoch of
  8 minibatches instead.

  Fields:
    num_envs, num_steps: N environments x T steps per rollout.
    update_epochs, num_minibatches: passes over the rollout and minibatches per pass;
      N T must be divisible by num_minibatches.
    gamma, gae_lambda: discount and GAE lambda, in [0, 1].
    clip_eps: the ratio (and value) clip, > 0.
    ent_coef, vf_coef: entropy and value-loss weights, >= 0.
    max_grad_norm: global-norm gradient clip, > 0.
    learning_rate: Adam's step size, > 0; linearly annealed to 0 when anneal_lr.
  """
  num_envs: int = 8
  num_steps: int = 128
  update_epochs: int = 4
  num_minibatches: int = 4
  gamma: float = 0.99
  gae_lambda: float = 0.95
  clip_eps: float = 0.2
  ent_coef: float = 0.01
  vf_coef: float = 0.5
  max_grad_norm: float = 0.5
  learning_rate: float = 2.5e-4
  anneal_lr: bool = True

  def __post_init__(self):
    for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
      checks.positive_int(f"PPOConfig.{name}", getattr(self, name))
    rollout = self.num_envs * self.num_steps
    if rollout % self.num_minibatches:
      raise ValueError(f"PPOConfig: the rollout of num_envs x num_steps = {self.num_envs} x "
                       f"{self.num_steps} = {rollout} transitions does not split into "
                       f"num_minibatches={self.num_minibatches} equal minibatches")
    for name in ("gamma", "gae_lambda"):
      checks.scalar(f"PPOConfig.{name}", getattr(self, name), strict=False, high=1.0)
    for name in ("clip_eps", "max_grad_norm", "learning_rate"):
      checks.scalar(f"PPOConfig.{name}", getattr(self, name))
    for name in ("ent_coef", "vf_coef"):
      checks.scalar(f"PPOConfig.{name}", getattr(self, name), strict=False)

  @property
  def minibatch_size(self) -> int:
    return self.num_envs * self.num_steps // self.num_minibatches


def gae(rewards: Array, values: Array, dones: Array, last_value: Array, gamma: float,
        lam: float) -> tuple[Array, Array]:
  """(advantages, returns), both (T, N), from time-major rewards, values, dones (T, N)
  and the bootstrap value V(s_T) (N,) (module docstring)."""
  dones = dones.astype(values.dtype)
  next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
  deltas = rewards + gamma * next_values * (1.0 - dones) - values

  def back(carry, x):
    delta, done = x
    adv = delta + gamma * lam * (1.0 - done) * carry
    return adv, adv

  _, adv = jax.lax.scan(back, jnp.zeros_like(last_value), (deltas, dones), reverse=True)
  return adv, adv + values


def ppo_loss(logits: Array, values: Array, actions: Array, old_logp: Array,
             old_values: Array, advantages: Array, returns: Array, config: PPOConfig
             ) -> tuple[Array, dict[str, Array]]:
  """The clipped PPO loss of one minibatch (module docstring); inputs flat (B,) and
  logits (B, A). Advantages are normalised here."""
  logp_all = jax.nn.log_softmax(logits)
  logp = jnp.take_along_axis(logp_all, actions[:, None].astype(jnp.int32), axis=-1)[:, 0]
  adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
  ratio = jnp.exp(logp - old_logp)
  clipped = jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps)
  policy = -jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
  v_clipped = old_values + jnp.clip(values - old_values, -config.clip_eps, config.clip_eps)
  value = 0.5 * jnp.mean(jnp.maximum((values - returns) ** 2, (v_clipped - returns) ** 2))
  entropy = -jnp.mean(jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1))
  loss = policy + config.vf_coef * value - config.ent_coef * entropy
  sg = jax.lax.stop_gradient
  return loss, {"policy_loss": policy, "value_loss": value, "entropy": entropy,
                "approx_kl": sg(jnp.mean((ratio - 1.0) - jnp.log(ratio))),
                "clip_fraction": sg(jnp.mean((jnp.abs(ratio - 1.0) > config.clip_eps)
                                             .astype(jnp.float32)))}


class Env(NamedTuple):
  """A batched-by-vmap environment as two pure functions (static under jit).

  reset(key) -> timestep;  step(timestep, action) -> timestep, auto-resetting at the end
  of an episode. A timestep has .observation, .reward, .last() (as xminigrid's).
  """
  reset: Callable
  step: Callable


class Curiosity(NamedTuple):
  """Optional hooks that add an intrinsic reward and its model's loss to PPO.

  intrinsic(params, extra, traj) -> (r_int (T, N), extra, metrics): from the rollout
    (traj: obs (T, N, ...), actions, next_obs, dones); its gradient is not used.
  aux_loss(params, extra, minibatch) -> (loss, metrics): added to the PPO loss
    (minibatch: flat obs, actions, next_obs, dones).
  after_update(params, extra, update) -> (params, extra): e.g. an EMA target update or
    re-initialising part of the curiosity model every K updates.
  """
  intrinsic: Callable
  aux_loss: Callable
  after_update: Callable


class RunnerState(NamedTuple):
  params: Any
  opt_state: Any
  timestep: Any      # the N environments' current timesteps
  extra: Any         # the curiosity's state (targets, normalisers), or ()
  key: Array
  update: Array      # updates done so far


def make_optimizer(config: PPOConfig, num_updates: int) -> optax.GradientTransformation:
  """clip_by_global_norm then Adam (eps 1e-5), lr linearly annealed to 0 over the run."""
  steps = num_updates * config.update_epochs * config.num_minibatches
  lr = (optax.linear_schedule(config.learning_rate, 0.0, max(steps, 1)) if config.anneal_lr
        else config.learning_rate)
  return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr, eps=1e-5))


def init_runner(env: Env, params: Any, config: PPOConfig,
                optimizer: optax.GradientTransformation, key: Array, extra: Any = ()
                ) -> RunnerState:
  """The state before the first update: `reset_envs`, then `start_runner`."""
  timestep, key = reset_envs(env, config.num_envs, key)
  return start_runner(params, optimizer, timestep, key, extra)


def reset_envs(env: Env, num_envs: int, key: Array) -> tuple[Any, Array]:
  """(the first timesteps of `num_envs` environments, the key left to the runner): the
  part of `init_runner` that needs neither parameters nor optimizer, so that callers
  with several models for one environment can compile it once."""
  key, reset_key = jax.random.split(key)
  return jax.vmap(env.reset)(jax.random.split(reset_key, num_envs)), key


def start_runner(params: Any, optimizer: optax.GradientTransformation, timestep: Any,
                 key: Array, extra: Any = ()) -> RunnerState:
  """The state before the first update from environments already reset (`reset_envs`)."""
  params = jax.tree.map(jnp.array, params)   # a copy: updates donate the state's buffers
  return RunnerState(params, optimizer.init(params), timestep, extra, key,
                     jnp.zeros((), jnp.int32))


def _rollout(env: Env, apply_fn, config: PPOConfig, state: RunnerState):
  def body(carry, _):
    timestep, key = carry
    key, sub = jax.random.split(key)
    obs = timestep.observation
    logits, value = apply_fn(state.params, obs)
    action = jax.random.categorical(sub, logits)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
    nxt = jax.vmap(env.step)(timestep, action)
    done = nxt.last()
    out = {"obs": obs, "actions": action, "logp": logp, "values": value,
           "rewards": nxt.reward.astype(jnp.float32), "dones": done,
           "next_obs": nxt.observation,
           "success": (done & (nxt.reward > 0)).astype(jnp.float32)}
    return (nxt, key), out

  (timestep, key), traj = jax.lax.scan(body, (state.timestep, state.key), None,
                                       config.num_steps)
  _, last_value = apply_fn(state.params, timestep.observation)
  return timestep, key, traj, last_value


def make_update(env: Env, apply_fn: Callable, config: PPOConfig,
                optimizer: optax.GradientTransformation,
                curiosity: Curiosity | None = None) -> Callable:
  """`update(state) -> (state, metrics)`: one rollout and its PPO epochs (pure).

  apply_fn(params, obs (N, ...)) -> (logits (N, A), values (N,)); with curiosity,
  params also hold the curiosity model's parameters (one optimizer for both).
  """
  def loss_fn(params, extra, mb):
    logits, values = apply_fn(params, mb["obs"])
    loss, m = ppo_loss(logits, values, mb["actions"], mb["logp"], mb["values"],
                       mb["advantages"], mb["returns"], config)
    if curiosity is not None:
      aux, am = curiosity.aux_loss(params, extra, mb)
      loss = loss + aux
      m = {**m, **am}
    return loss, m

  def update(state: RunnerState):
    timestep, key, traj, last_value = _rollout(env, apply_fn, config, state)
    rewards, extra, cm = traj["rewards"], state.extra, {}
    if curiosity is not None:
      r_int, extra, cm = curiosity.intrinsic(state.params, extra, traj)
      rewards = rewards + jax.lax.stop_gradient(r_int)
    adv, ret = gae(rewards, traj["values"], traj["dones"], last_value, config.gamma,
                   config.gae_lambda)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in traj.items()}
    flat.update(advantages=adv.reshape(-1), returns=ret.reshape(-1))
    step = functools.partial(_minibatch_step, loss_fn, optimizer, extra)
    (params, opt_state), key, m = _epochs(step, config, (state.params, state.opt_state),
                                          flat, key)
    if curiosity is not None:
      params, extra = curiosity.after_update(params, extra, state.update + 1)
    metrics = {k: jnp.mean(v) for k, v in m.items()}
    metrics.update({k: jnp.mean(v) for k, v in cm.items()})
    metrics.update(reward=jnp.mean(traj["rewards"]), episodes=jnp.sum(traj["dones"]),
                   successes=jnp.sum(traj["success"]))
    return RunnerState(params, opt_state, timestep, extra, key, state.update + 1), metrics

  return update


def _minibatch_step(loss_fn: Callable, optimizer: optax.GradientTransformation, extra: Any,
                    carry: tuple, minibatch: dict) -> tuple[tuple, dict]:
  """One gradient step on one minibatch: ((params, opt_state), its loss metrics)."""
  params, opt_state = carry
  (_, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, extra, minibatch)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return (optax.apply_updates(params, updates), opt_state), m


def _epochs(step: Callable, config: PPOConfig, carry: tuple, batch: dict, key: Array
            ) -> tuple[tuple, Array, dict]:
  """`update_epochs` passes over the rollout, each a fresh permutation of its N T rows
  cut into `num_minibatches` minibatches of `minibatch_size` (row order[i B + j] is
  row j of minibatch i), as two nested `lax.scan`s (purejaxrl's form), so the update
  compiles one gradient step, however many it runs.

  Returns (the final carry, the key after one split per epoch, metrics stacked
  (update_epochs, num_minibatches)).
  """
  shape = (config.num_minibatches, config.minibatch_size)

  def epoch(state, _):
    carry, key = state
    key, sub = jax.random.split(key)
    order = jax.random.permutation(sub, config.num_envs * config.num_steps)
    minibatches = jax.tree.map(lambda x: x[order].reshape(shape + x.shape[1:]), batch)
    carry, m = jax.lax.scan(step, carry, minibatches)
    return (carry, key), m

  (carry, key), m = jax.lax.scan(epoch, (carry, key), None, config.update_epochs)
  return carry, key, m


def _strong(tree):
  """The same values without weak types. jit keys its cache on weak_type, and
  xminigrid's reset and step return weak-typed leaves (step_num, reward, discount) in
  different places, which made the update compile three times per run."""
  return jax.tree.map(lambda x: jax.lax.convert_element_type(x, jnp.result_type(x)), tree)


@functools.partial(jax.jit, static_argnames=("update",), donate_argnums=(1,))
def _one_update(update: Callable, state: RunnerState):
  state, metrics = update(state)
  return _strong(state), metrics


@functools.partial(jax.jit, static_argnames=("update", "num_updates"), donate_argnums=(1,))
def _scanned_updates(update: Callable, state: RunnerState, num_updates: int):
  return jax.lax.scan(lambda s, _: update(s), state, None, num_updates)


_strong_jit = jax.jit(_strong)


def run_updates(update: Callable, state: RunnerState, num_updates: int,
                scan: bool | None = None, num_seeds: int | None = None
                ) -> tuple[RunnerState, dict[str, Array]]:
  """`num_updates` updates; metrics stacked (num_updates,) (then (.., num_seeds)).

  scan=True runs them in one jitted `lax.scan` (purejaxrl's form, right on GPU/TPU);
  False calls one jitted update per iteration from Python. None picks False on CPU:
  there XLA runs an update inside a loop body several times slower (3.2 s vs 0.37 s per
  update of 16 x 128 DoorKey steps with `nn.Conv`, measured; 5.5 s vs 1.1 s with
  GLANCE's `PatchConv` encoder on a loaded machine), while the dispatch of one call per
  update costs microseconds. (XLA:CPU gives convolutions its fast kernels only outside
  loops; `make_update`'s minibatch steps are a loop, so on CPU a convolutional policy
  runs them fastest written as patches times a kernel, as
  `methods.glance.networks.PatchConv`: 10x faster gradients, measured.)

  With num_seeds = S, `state` holds S runner states stacked on a leading axis. With
  scan they are vmapped; without, each seed's update is its own call on its slice
  (on CPU, vmapping over parameters turns convolutions into grouped ones: 4 seeds
  vmapped took 1.88 s per update against 4 x 0.31 s one by one, measured).
  """
  if scan is None:
    scan = jax.default_backend() != "cpu"
  if num_seeds is not None:
    if scan:
      return _scanned_updates(_vmapped(update), state, num_updates)
    return _seed_by_seed(update, state, num_updates, num_seeds)
  if scan:
    return _scanned_updates(update, state, num_updates)
  rows = []
  for _ in range(num_updates):
    state, m = _one_update(update, state)
    rows.append(m)
  return state, stack_trees(rows)


@jax.jit
def _take(tree, i):
  return _strong(jax.tree.map(lambda x: x[i], tree))


@functools.partial(jax.jit, static_argnames=("axis",))
def stack_trees(trees, axis: int = 0):
  """Pytrees of equal structure stacked leaf by leaf on a new `axis` (e.g. per-seed
  runner states into the batched state that `train(num_seeds=...)` runs)."""
  return jax.tree.map(lambda *x: jnp.stack(x, axis=axis), *trees)


def _seed_by_seed(update, state, num_updates: int, num_seeds: int):
  # Each seed's state as `train` passes a single run's (committed, without weak types),
  # so that one compiled update serves single runs and every seed: a fresh state's
  # slice compiled it twice more (once for its weak types and uncommitted arrays, once
  # for the update's output).
  state = jax.device_put(state, jax.local_devices()[0])
  seeds, rows = [], []
  for i in range(num_seeds):
    s = _take(state, i)
    ms = []
    for _ in range(num_updates):
      s, m = _one_update(update, s)
      ms.append(m)
    seeds.append(s)
    rows.append(stack_trees(ms))
  return stack_trees(seeds), stack_trees(rows, axis=1)


@functools.lru_cache(maxsize=None)
def _vmapped(update: Callable) -> Callable:
  """One vmapped copy per update function, so jit's cache sees the same callable."""
  return jax.vmap(update)


class TrainResult(NamedTuple):
  state: RunnerState
  history: list   # one dict per update of the whole run (from metrics.jsonl)


def train(update: Callable, init_state: Callable[[], RunnerState], num_updates: int,
          workdir: str, chunk: int = 10, keep: int = 2, log: bool = True,
          num_seeds: int | None = None) -> TrainResult:
  """Runs `num_updates` updates in jitted chunks, checkpointing after each chunk.

  A run in a workdir with checkpoints resumes from the newest one (the whole
  `RunnerState`: parameters, optimizer, environments, curiosity state, key), so an
  interrupted run ends with the state of an uninterrupted one. Metrics of every
  update go to workdir/metrics.jsonl and TensorBoard event files.

  With num_seeds = S, `init_state()` returns S runner states stacked on a leading axis
  (e.g. `jax.vmap(init)` over S keys): S independent runs, vmapped in one program on
  accelerators (purejaxrl's seeds-in-parallel), one after another per chunk on CPU
  (`run_updates`). Each metric is
  then logged as its mean over seeds and per seed as "<name>/<seed>".
  """
  checks.positive_int("num_updates", num_updates)
  checks.positive_int("chunk", chunk)
  os.makedirs(workdir, exist_ok=True)
  abstract = jax.eval_shape(init_state)
  manager = checkpoint_lib.make_manager(os.path.join(workdir, "checkpoints"), keep=keep)
  step, restored = checkpoint_lib.restore_newest(manager, abstract)
  # Restored arrays are committed to a device and fresh ones are not, and jit compiles
  # the update once for each: committing the fresh state too means a resumed run (or a
  # second `train` call on the same workdir) reuses the compiled update. Same values.
  state = _strong_jit(jax.device_put(restored if step is not None else init_state(),
                                     jax.local_devices()[0]))
  done = int(np.max(np.asarray(state.update)))
  if num_seeds is not None:
    checks.positive_int("num_seeds", num_seeds)
  with metrics_lib.MetricsWriter(workdir, enabled=log, purge_after_step=done) as writer:
    while done < num_updates:
      n = min(chunk, num_updates - done)
      state, m = run_updates(update, state, n, num_seeds=num_seeds)
      m = jax.tree.map(np.asarray, m)
      for i in range(n):
        row = {k: float(np.mean(v[i])) for k, v in m.items()}
        if num_seeds is not None:
          row.update({f"{k}/{j}": float(v[i, j]) for k, v in m.items()
                      for j in range(v.shape[1])})
        writer.write_scalars(done + i + 1, row)
      done += n
      checkpoint_lib.save(manager, done, state)
  manager.wait_until_finished()
  history = metrics_lib.read_metrics_jsonl(os.path.join(workdir, metrics_lib.METRICS_FILENAME)) \
      if log else []
  return TrainResult(state, history)


def episode_success_rate(history: list, window: int) -> float:
  """Successes / finished episodes over the last `window` updates (nan if none ended)."""
  rows = history[-window:]
  episodes = sum(r["episodes"] for r in rows)
  return sum(r["successes"] for r in rows) / episodes if episodes else math.nan
