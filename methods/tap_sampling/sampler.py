"""TapSampling and its baselines as one chunk-level control step.

At each replanning step, with observation o:

1. **Candidates.** TapSampling draws N chunks from the base policy and M = K - N more
   by resampling them through the Action-VAE's posteriors (``vae.resample``), K
   candidates in all. The baselines draw their K candidates differently: best-of-K
   from the policy itself, or the policy's N chunks plus M Gaussian perturbations
   x_j + sigma eps (RoboMonkey-style, j ~ U{1..N}).
2. **Scores.** The progress verifier scores each candidate, s_i = s(o, x_i).
3. **Selection.** ``selection.thres_weighted_merge`` (or a random pick for the
   VAE-without-verifier ablation; the simulator's true progress for the oracle).

``act`` is one pure, jit-able function of (key, obs, env state): every method runs as
one compiled program, batched over candidates, and over episodes under ``vmap``. The
state is read only by the oracle, which simulates each candidate's executed prefix.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from common import checks
from methods.tap_sampling import baselines
from methods.tap_sampling import selection
from methods.tap_sampling import vae as vae_lib

Array = jax.Array
METHODS = ("single", "tap", "best_of_k", "gaussian", "vae_random", "oracle")


class Models(NamedTuple):
  """The trained pieces: policy, Action-VAE, verifier, their parameters and the scale.

  ``scale`` is the action bound s: models work on x = a / s.
  """
  policy: Any
  policy_params: Any
  vae: Any
  vae_params: Any
  verifier: Any
  verifier_params: Any
  scale: Any


class SamplerConfig(NamedTuple):
  """Settings of one method (static under jit).

  Attributes:
    method: one of ``METHODS``.
    num_policy: N, the policy's proposals (TapSampling, Gaussian perturbation).
    total: K, candidates in all (>= N).
    threshold: tau of ``thres_weighted_merge``, in [0, 1].
    sigma: the Gaussian perturbation's standard deviation (normalised units).
    execute_steps: actions executed per replanning step (the oracle simulates these).
  """
  method: str = "tap"
  num_policy: int = 4
  total: int = 16
  threshold: float = 0.5
  sigma: float = 0.1
  execute_steps: int = 5


def check_config(config: SamplerConfig) -> None:
  """One-line ValueErrors for an unknown method, K < N, or tau outside [0, 1]."""
  if config.method not in METHODS:
    raise ValueError(f"unknown sampling method {config.method!r}; expected one of {METHODS}")
  checks.positive_int("num_policy", config.num_policy)
  if config.total < config.num_policy:
    raise ValueError(f"candidate count total={config.total} must be >= num_policy (N) = "
                     f"{config.num_policy}")
  checks.scalar("threshold", config.threshold, strict=False, high=1.0)
  checks.scalar("sigma", config.sigma, strict=False)
  checks.positive_int("execute_steps", config.execute_steps)


def candidates(models: Models, config: SamplerConfig, key: Array, obs: Array) -> Array:
  """The method's K candidate chunks (K, H, a), normalised (step 1 of the docstring)."""
  k_pol, k_more = jax.random.split(key)
  n, k = config.num_policy, config.total
  if config.method == "single":
    return models.policy.sample(models.policy_params, k_pol, obs, 1)
  if config.method == "best_of_k":
    return models.policy.sample(models.policy_params, k_pol, obs, k)
  proposals = models.policy.sample(models.policy_params, k_pol, obs, n)
  if k == n:
    return proposals
  if config.method == "gaussian":
    extra = baselines.gaussian_perturbation(k_more, proposals, k - n, config.sigma)
    return jnp.concatenate([proposals, extra])
  extra = vae_lib.resample(models.vae, models.vae_params, k_more, proposals, k - n)
  return jnp.concatenate([proposals, extra])


def act(models: Models, config: SamplerConfig, key: Array, obs: Array, state=None,
        env=None) -> Array:
  """One control step: the chosen chunk (H, a) in action units (module docstring).

  Args:
    models: the trained pieces.
    config: the method's settings.
    key: PRNG key.
    obs: the observation (o,).
    state: the environment state (read only by the oracle).
    env: the ``ControlEnv`` (only for the oracle).

  Returns:
    (H, a) actions, s x*.

  Example:
    >>> chunk = act(models, SamplerConfig("tap", 4, 16), key, obs)
  """
  check_config(config)
  k_cand, k_pick = jax.random.split(key)
  chunks = candidates(models, config, k_cand, obs)
  if config.method == "single":
    chosen = chunks[0]
  elif config.method == "vae_random":
    chosen = baselines.random_pick(k_pick, chunks)
  elif config.method == "oracle":
    if env is None or state is None:
      raise ValueError("the oracle needs the environment and its state")
    chosen = selection.argmax(chunks, baselines.true_progress(env, state, chunks * models.scale,
                                                    config.execute_steps))
  else:
    scores = models.verifier.score(models.verifier_params, obs, chunks)
    chosen = selection.thres_weighted_merge(chunks, scores, config.threshold)
  return chosen * models.scale
