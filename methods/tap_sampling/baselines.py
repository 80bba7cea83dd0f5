"""What TapSampling is compared against, with the same base policy and candidate count.

* single-shot: one policy chunk, executed as is;
* best-of-K: K chunks sampled from the policy, scored by the same verifier and merged
  by the same rule;
* Gaussian perturbation (RoboMonkey-style): the policy's N chunks plus K - N
  perturbations x_j + sigma eps, j ~ U{1..N}, eps ~ N(0, I), clipped to [-1, 1];
* the VAE without the verifier: TapSampling's K candidates, one picked at random;
* the oracle: TapSampling's K candidates, the one whose executed prefix makes the most
  true progress in the simulator.

``sampler.act`` dispatches on the method's name; these are its pieces.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def gaussian_perturbation(key: Array, proposals: Array, num: int, sigma) -> Array:
  """``num`` perturbed copies x_j + sigma eps of uniformly picked proposals, (num, H, a)."""
  k_pick, k_eps = jax.random.split(key)
  picked = proposals[jax.random.randint(k_pick, (num,), 0, proposals.shape[0])]
  return jnp.clip(picked + sigma * jax.random.normal(k_eps, picked.shape), -1.0, 1.0)


def random_pick(key: Array, chunks: Array) -> Array:
  """One candidate chosen uniformly, (H, a)."""
  return chunks[jax.random.randint(key, (), 0, chunks.shape[0])]


def true_progress(env, state, chunks: Array, execute_steps: int) -> Array:
  """Simulator progress after executing each chunk's first ``execute_steps`` actions, (K,).

  Args:
    env: a ``common.envs.ControlEnv``.
    state: its current state.
    chunks: (K, H, a) candidates in action units.
    execute_steps: how many of each chunk's actions to simulate.
  """
  def run(chunk):
    final = jax.lax.fori_loop(0, execute_steps, lambda t, s: env.step(s, chunk[t]), state)
    return env.progress(final)
  return jax.vmap(run)(chunks)
