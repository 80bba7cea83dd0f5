"""TapSampling: inference-time sampling for chunked robot policies.

A base policy proposes N action chunks; an Action-VAE, trained on demonstrated chunks,
turns them into posteriors and decodes K - N more candidates; a verifier trained on the
demonstrations' own progress (forward windows rise, reversed ones fall) scores every
candidate, and the score-weighted mean of those above a threshold is executed. Nothing
about the base policy is fine-tuned. Modules: ``windows`` (training data),
``policies`` (flow-matching and Gaussian BC chunk policies), ``vae``, ``verifier``,
``selection``, ``sampler`` (one control step for every method), ``baselines``,
``metrics``, ``training``. See docs/tap_sampling.md.
"""

from methods.tap_sampling.policies import FlowPolicy, GaussianPolicy, make_policy, POLICIES
from methods.tap_sampling.sampler import METHODS, Models, SamplerConfig, act, candidates, check_config
from methods.tap_sampling.selection import argmax, thres_weighted_merge
from methods.tap_sampling.vae import (ActionVAE, make_loss_fn as vae_loss_fn, parameter_ema,
                                      reconstruct, resample, with_parameter_ema)
from methods.tap_sampling.verifier import ProgressVerifier
from methods.tap_sampling.windows import ChunkData, chunk_dataset, progress_windows

__all__ = [
    "ActionVAE", "ChunkData", "FlowPolicy", "GaussianPolicy", "METHODS", "Models", "POLICIES",
    "ProgressVerifier", "SamplerConfig", "act", "argmax", "candidates", "check_config",
    "chunk_dataset", "make_policy", "parameter_ema", "progress_windows", "reconstruct",
    "resample", "thres_weighted_merge", "vae_loss_fn", "with_parameter_ema",
]
