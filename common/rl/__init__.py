"""Reinforcement learning and preference optimisation for LMs, as pure functions.

`grpo` holds the GRPO loss; `ppo` PPO with GAE for vmapped JAX environments; `dpo` the DPO loss for any policy with logits (its names
stay under `dpo.`, as `check_batch` and `make_loss_fn` here are GRPO's); `rollout` the
on-policy sampling and the GRPO batch function (`common.rl.rollout.rollout` is the
sampler: the name stays the module's here).
"""

from common.rl import dpo
from common.rl import grpo
from common.rl import ppo
from common.rl import rollout
from common.rl.grpo import (BATCH_KEYS, LOSS_AGG_MODES, GRPOConfig, aggregate, check_batch,
                            grpo_loss, group_advantages, kl_k3, make_loss_fn, policy_loss)
from common.rl.rollout import Rollout, make_grpo_batch_fn, reference_logprobs, rollout_key

__all__ = ["BATCH_KEYS", "LOSS_AGG_MODES", "GRPOConfig", "Rollout", "aggregate", "check_batch",
           "dpo", "grpo", "ppo", "grpo_loss", "group_advantages", "kl_k3", "make_grpo_batch_fn",
           "make_loss_fn", "policy_loss", "reference_logprobs", "rollout", "rollout_key"]
