"""Benchmark: the control-step latency that TapSampling adds to a chunked policy.

  python -m experiments.benchmarks.tap_sampling [--totals=16,48] [--repeats=20]
      [--policy=flow] [--tiny]

One control step at one observation, each side one jitted call (`common.timing.
median_seconds`, after an untimed compiling call):

- policy alone: one chunk from the base policy (the flow policy integrates its ODE with
  10 Euler steps; the Gaussian policy is one forward pass);
- TapSampling with K candidates: N = 4 policy chunks, K - N decoded by the Action-VAE
  from their posteriors, every candidate scored by the verifier, and the threshold-
  weighted merge, all batched in the same call.

The ratio (TapSampling / policy alone) is the overhead a robot's control loop pays per
replanning step; the chosen chunk is checked to be finite and inside the action bounds
on both sides. The networks have the experiment's sizes (3 x 256 policy and verifier
MLPs, a 7-layer width-256 VAE, H = 10, 2-D actions, 12-D observations), randomly
initialised: latency does not depend on the trained values. The peer is our own policy
without TapSampling (there is no other JAX implementation to compare against).
"""

from __future__ import annotations

import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from common import config as config_lib
from common import timing
from experiments.benchmarks import machine_line
from methods import tap_sampling as ts

FLAGS = flags.FLAGS
flags.DEFINE_list("totals", ["16", "48"], "Candidate counts K to time.")
flags.DEFINE_integer("repeats", 20, "Timed calls per side (medians reported).")
flags.DEFINE_enum("policy", "flow", list(ts.POLICIES), "The base policy.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: K = 8, 3 repeats, small networks.")

PEERS = ()  # the peer is our own policy without TapSampling

HORIZON, ACTION_DIM, OBS_DIM, SCALE = 10, 2, 12, 0.05


def build(policy: str, tiny: bool) -> ts.Models:
  hidden, width = ((32,), 32) if tiny else ((256, 256, 256), 256)
  pol = ts.make_policy(policy, HORIZON, ACTION_DIM, hidden=hidden, num_steps=10)
  vae = ts.ActionVAE(HORIZON, ACTION_DIM, latent_dim=8, width=width, depth=3 if tiny else 7)
  ver = ts.ProgressVerifier(HORIZON, ACTION_DIM, hidden)
  k = jax.random.split(jax.random.PRNGKey(0), 3)
  return ts.Models(pol, pol.init(k[0], OBS_DIM), vae,
                   vae.init(k[1], jnp.zeros((2, HORIZON, ACTION_DIM)), k[2]), ver,
                   ver.init(k[2], OBS_DIM), SCALE)


def step_seconds(models: ts.Models, cfg: ts.SamplerConfig, repeats: int) -> float:
  obs = jnp.linspace(-0.5, 0.5, OBS_DIM)
  step = jax.jit(lambda key: ts.act(models, cfg, key, obs))
  chunk = np.asarray(step(jax.random.PRNGKey(1)))
  if chunk.shape != (HORIZON, ACTION_DIM) or not np.all(np.abs(chunk) <= SCALE + 1e-6):
    config_lib.die(f"{cfg.method} returned a chunk outside the action bounds")
  keys = iter(jax.random.split(jax.random.PRNGKey(2), repeats + 1))
  return timing.median_seconds(lambda: step(next(keys)), repeats)


def parse_flags(argv: list[str]) -> list[str]:
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  try:
    totals = [int(k) for k in FLAGS.totals]
  except ValueError:
    config_lib.die(f"--totals must be integers, got {','.join(FLAGS.totals)}")
  if min(totals) < 4 or FLAGS.repeats < 1:
    config_lib.die(f"--totals must be >= N = 4 and --repeats >= 1, got totals {totals}, "
                   f"repeats {FLAGS.repeats}")
  return rest


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  totals = [8] if FLAGS.tiny else [int(k) for k in FLAGS.totals]
  repeats = 3 if FLAGS.tiny else FLAGS.repeats
  models = build(FLAGS.policy, FLAGS.tiny)
  print(f"# float32, {FLAGS.policy} policy, H = {HORIZON}, {repeats} repeats")
  base = step_seconds(models, ts.SamplerConfig("single"), repeats)
  print("| control step | median latency (ms) | / policy alone |")
  print("|---|---|---|")
  print(f"| policy alone (1 chunk) | {1e3 * base:.3f} | 1.0x |")
  for k in totals:
    t = step_seconds(models, ts.SamplerConfig("tap", num_policy=4, total=k), repeats)
    print(f"| TapSampling, K = {k} (N = 4) | {1e3 * t:.3f} | {t / base:.1f}x |", flush=True)
  print(f"\nload average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
