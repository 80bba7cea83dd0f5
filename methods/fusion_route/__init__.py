"""FusionRoute: token-level collaboration of frozen expert LMs through a small router
that picks one expert per token and adds its own complementary logits.

Modules: `router` (the router LM with its routing head), `combine` (decoding rules,
routing labels, the stage-1 and Co-LLM losses), `ensemble` (the fused forward pass and
fused KV-cached decoding), `training` (common-loop losses, frozen experts, preference
pairs, evaluation), `merging` (weight averaging, task arithmetic), `baselines`
(sequence-level routing), `data` (the four stdlib/generated domains and mixed
documents). See docs/fusion_route.md.
"""

from methods.fusion_route import baselines, combine, data, ensemble, merging, router, training
from methods.fusion_route.combine import (MODES, combine as combine_logits, gold_logprobs,
                                          latent_routing_loss, routing_labels, stage1_loss)
from methods.fusion_route.ensemble import (Ensemble, FusedGeneration, check_params, forward,
                                           generate, make_ensemble, token_logprobs)
from methods.fusion_route.router import Router, from_lm_params, init_router

__all__ = ["Ensemble", "FusedGeneration", "MODES", "Router", "baselines", "check_params",
           "combine", "combine_logits", "data", "ensemble", "forward", "from_lm_params",
           "generate", "gold_logprobs", "init_router", "latent_routing_loss", "make_ensemble",
           "merging", "router", "routing_labels", "stage1_loss", "token_logprobs", "training"]
