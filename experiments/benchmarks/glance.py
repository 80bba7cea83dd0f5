"""Benchmark: our PPO (jitted rollouts over vmapped xminigrid environments) against
Stable-Baselines3's PPO on the gymnasium `minigrid` DoorKey, same sizes.

  python -m experiments.benchmarks.glance [--env_size=5] [--steps=100000] [--repeats=3]
      [--tiny]

Both sides train PPO without curiosity on DoorKey-<size>x<size>, 16 environments x 128
steps per rollout, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, gamma 0.99,
lambda 0.95, clip 0.2, entropy 0.01, value 0.5, grad clip 0.5 (SB3's documented PPO
arguments set to these), and the same network shape: two 2x2 convolutions (32, 64
channels), a 128-unit dense layer, then 64-unit tanh policy and value heads. Ours
embeds the (tile, colour) ids into 32 channels first; SB3 reads minigrid's
(object, colour, state) image as 3 float channels.

Figures:
  (a) throughput: environment steps per second over a training run of `--speed_steps`
      steps after one warm-up rollout (ours: compiled first, untimed), median of
      `--repeats` runs; the ratio ours / SB3;
  (b) learning: the success rate of the final policies (sampled actions) over the
      evaluation episodes (ours: those 64 environments finish in 1000 steps; SB3: 200)
      after `--steps` training steps, on both sides.
SB3 and minigrid come from the `bench` extra. ``--tiny`` trains one rollout's worth
(2048 steps) per side, once, for both figures, and evaluates SB3 over 16 episodes, in
seconds (the suite's smoke test).
"""

from __future__ import annotations

import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from common import config as config_lib
from common.rl import ppo
from experiments.benchmarks import machine_line
from methods.glance import envs, networks

FLAGS = flags.FLAGS
flags.DEFINE_integer("env_size", 5, "DoorKey grid size (5, 6, 8 or 16).")
flags.DEFINE_integer("steps", 100_000, "Training steps for the learning comparison.")
flags.DEFINE_integer("speed_steps", 20_480, "Training steps per timed throughput run.")
flags.DEFINE_integer("repeats", 3, "Timed throughput runs per side (medians reported).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: 2048 steps (one rollout) for both "
                  "figures, 1 repeat, 16 SB3 evaluation episodes.")

PEERS = ("torch", "stable_baselines3", "minigrid", "gymnasium")
NUM_ENVS, NUM_STEPS = 16, 128


def _config() -> ppo.PPOConfig:
  return ppo.PPOConfig(num_envs=NUM_ENVS, num_steps=NUM_STEPS)


def ours(total_steps: int, seed: int = 0):
  """(seconds after compilation, final runner state, env, apply_fn) of our PPO."""
  env, spec = envs.make_env(f"MiniGrid-DoorKey-{FLAGS.env_size}x{FLAGS.env_size}")
  net = networks.ActorCritic(spec.num_actions)
  config = _config()
  updates = max(1, total_steps // (NUM_ENVS * NUM_STEPS))
  params = net.init(jax.random.PRNGKey(seed), jnp.zeros((1,) + spec.obs_shape, jnp.uint8))
  apply_fn = lambda p, o: net.apply({"params": p}, o)
  opt = ppo.make_optimizer(config, updates)
  update = ppo.make_update(env, apply_fn, config, opt)
  state = ppo.init_runner(env, params["params"], config, opt, jax.random.PRNGKey(seed + 1))
  warm = ppo.init_runner(env, params["params"], config, opt, jax.random.PRNGKey(seed + 2))
  jax.block_until_ready(ppo.run_updates(update, warm, 1))          # compile
  start = time.perf_counter()
  state, _ = ppo.run_updates(update, state, updates)
  jax.block_until_ready(state)
  return time.perf_counter() - start, state, env, apply_fn


def ours_success(state, env, apply_fn) -> float:
  """Success rate of the trained policy (sampled actions) over the episodes that 64
  environments finish in 1000 steps."""
  def body(carry, _):
    ts, key = carry
    key, sub = jax.random.split(key)
    logits, _ = apply_fn(state.params, ts.observation)
    nxt = jax.vmap(env.step)(ts, jax.random.categorical(sub, logits))
    return (nxt, key), (nxt.last(), nxt.last() & (nxt.reward > 0))
  ts = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(99), 64))
  done, win = jax.jit(lambda ts: jax.lax.scan(body, (ts, jax.random.PRNGKey(7)), None,
                                              1000)[1])(ts)
  done, win = np.asarray(done), np.asarray(win)
  return float(win.sum() / max(done.sum(), 1)) if done.sum() else 0.0


def sb3(total_steps: int, seed: int = 0):
  """(seconds, model, vec env) of SB3 PPO with the same hyperparameters and network."""
  import gymnasium as gym
  import minigrid  # noqa: F401  (registers the environments)
  import torch
  from minigrid.wrappers import ImgObsWrapper
  from stable_baselines3 import PPO
  from stable_baselines3.common.env_util import make_vec_env
  from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

  class GridCNN(BaseFeaturesExtractor):
    def __init__(self, space, features_dim=128):
      super().__init__(space, features_dim)
      self.net = torch.nn.Sequential(
          torch.nn.Conv2d(3, 32, 2), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 2),
          torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64 * 5 * 5, features_dim),
          torch.nn.ReLU())

    def forward(self, obs):
      return self.net(obs.float())   # SB3 has already moved channels first

  name = f"MiniGrid-DoorKey-{FLAGS.env_size}x{FLAGS.env_size}-v0"
  vec = make_vec_env(lambda: ImgObsWrapper(gym.make(name)), n_envs=NUM_ENVS, seed=seed)
  c = _config()
  model = PPO("CnnPolicy", vec, n_steps=NUM_STEPS, batch_size=c.minibatch_size,
              n_epochs=c.update_epochs, learning_rate=lambda f: c.learning_rate * f,
              gamma=c.gamma, gae_lambda=c.gae_lambda, clip_range=c.clip_eps,
              ent_coef=c.ent_coef, vf_coef=c.vf_coef, max_grad_norm=c.max_grad_norm,
              policy_kwargs=dict(features_extractor_class=GridCNN, normalize_images=False,
                                 net_arch=dict(pi=[64], vf=[64]),
                                 activation_fn=torch.nn.Tanh),
              seed=seed, device="cpu", verbose=0)
  model.learn(NUM_ENVS * NUM_STEPS)                                  # warm-up rollout
  start = time.perf_counter()
  model.learn(total_steps, reset_num_timesteps=True)
  return time.perf_counter() - start, model, vec


def sb3_success(model, vec, episodes: int = 200) -> float:
  obs, done_count, wins = vec.reset(), 0, 0
  while done_count < episodes:
    action, _ = model.predict(obs, deterministic=False)
    obs, reward, done, _ = vec.step(action)
    done_count += int(done.sum())
    wins += int((done & (reward > 0)).sum())
  return wins / done_count


def main(argv):
  config_lib.parse_flags_or_die(FLAGS, argv)
  print(machine_line(PEERS), flush=True)
  from importlib import metadata
  rollout = NUM_ENVS * NUM_STEPS
  if FLAGS.tiny:
    steps, speed_steps, repeats, episodes = rollout, rollout, 1, 16
  else:
    steps, speed_steps, repeats, episodes = FLAGS.steps, FLAGS.speed_steps, FLAGS.repeats, 200
  print(f"xminigrid {metadata.version('xminigrid')}; DoorKey-{FLAGS.env_size}x"
        f"{FLAGS.env_size}, {NUM_ENVS} envs x {NUM_STEPS} steps")
  mine = [ours(speed_steps, s) for s in range(repeats)]
  theirs = [sb3(speed_steps, s) for s in range(repeats)]
  a = statistics.median(speed_steps / run[0] for run in mine)
  b = statistics.median(speed_steps / run[0] for run in theirs)
  print(f"| throughput (env steps/s, median of {repeats}) | ours {a:.0f} | SB3 {b:.0f} "
        f"| ours / SB3 {a / b:.1f} |")
  # --tiny trains as many steps for both figures: the learning figure reuses the last
  # throughput run's policies instead of training them again.
  _, state, env, apply_fn = mine[-1] if FLAGS.tiny else ours(steps)
  _, model, vec = theirs[-1] if FLAGS.tiny else sb3(steps)
  print(f"| success after {steps} steps | ours "
        f"{ours_success(state, env, apply_fn):.2f} | SB3 "
        f"{sb3_success(model, vec, episodes):.2f} |")


if __name__ == "__main__":
  app.run(main)
