"""Reinforcement learning for LMs and other policies, as pure functions (GRPO so far)."""

from common.rl.grpo import (BATCH_KEYS, LOSS_AGG_MODES, GRPOConfig, aggregate, check_batch,
                            grpo_loss, group_advantages, kl_k3, make_loss_fn, policy_loss)

__all__ = ["BATCH_KEYS", "LOSS_AGG_MODES", "GRPOConfig", "aggregate", "check_batch", "grpo_loss",
           "group_advantages", "kl_k3", "make_loss_fn", "policy_loss"]
