"""Flax models shared by the methods, used functionally (`init` / `apply`)."""

from common.models.cnn import ConditionalCNN
from common.models.gnn import InteractionBlock, LayerNormMLP
from common.models.mlp import MLP
from common.models.transformer import (KVCache, RopeScaling, Transformer, TransformerConfig,
                                       init_cache, init_params, llama_config, neox_config)

__all__ = ["ConditionalCNN", "InteractionBlock", "LayerNormMLP", "MLP", "KVCache", "RopeScaling", "Transformer", "TransformerConfig", "init_cache",
           "init_params", "llama_config", "neox_config"]
