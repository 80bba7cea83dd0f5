"""Flax models shared by the methods, used functionally (`init` / `apply`)."""

from common.models.cnn import ConditionalCNN
from common.models.gnn import InteractionBlock, LayerNormMLP
from common.models.mlp import MLP
from common.models.taps import TappedDense, apply_with_taps, record_dense_inputs
from common.models.transformer import (KVCache, RopeScaling, Transformer, TransformerConfig,
                                       init_cache, init_params, llama_config, neox_config)

__all__ = ["ConditionalCNN", "InteractionBlock", "LayerNormMLP", "MLP", "KVCache", "RopeScaling",
           "TappedDense", "Transformer", "TransformerConfig", "apply_with_taps", "init_cache",
           "init_params", "llama_config", "neox_config", "record_dense_inputs"]
