"""RaBitQ KV-cache attention (RaBitQCache, ICML 2026; RaBitQ, Gao & Long, SIGMOD 2024).

Keys are centred, randomly rotated and stored as 1-bit codes plus three per-token
scalars; rotated queries are quantised to 4 bits; a binary x INT4 popcount estimator
gives unbiased attention scores with an error bound; adaptive top-p keeps the smallest
set of tokens reaching mass p; exact attention then reads only those keys/values.

Public API:
  random_rotation, pack_bits, unpack_bits, quantize_keys, quantize_query,
  KeyCodes, QueryCode, key_bytes_per_token                      (quantization.py)
  integer_dot, binary_int4_dot, binary_query_product, estimate_unit,
  estimate_unit_float, estimate_scores, kernel_scores, error_bound, bound_rate (estimator.py)
  top_p_select, top_p_mask, top_k_mask, attention_mass, decode_masks,
  Selection                                                     (selection.py)
  RaBitQConfig, LayerState, init_cache, init_layer_state, with_top_p (cache.py)
  make_attention_fn, decode_step, dense_estimated_logits        (attention.py)
  query_at_cosine, synthetic_cache                              (synthetic.py)
  estimator_trials, EstimatorTrials, error_stats, selection_metrics,
  tokens_at_recall, attention_entropy, recording_attention_fn, record_queries,
  teacher_forced_decode                                         (analysis.py)
  baselines.full_attention / oracle_top_k / oracle_top_p / quest / quest_mask
                                                                (baselines.py)
"""

from methods.rabitq_attention import baselines
from methods.rabitq_attention.analysis import attention_entropy
from methods.rabitq_attention.analysis import error_stats
from methods.rabitq_attention.analysis import estimator_trials
from methods.rabitq_attention.analysis import EstimatorTrials
from methods.rabitq_attention.analysis import record_queries
from methods.rabitq_attention.analysis import recording_attention_fn
from methods.rabitq_attention.analysis import selection_metrics
from methods.rabitq_attention.analysis import teacher_forced_decode
from methods.rabitq_attention.analysis import tokens_at_recall
from methods.rabitq_attention.attention import decode_step
from methods.rabitq_attention.attention import dense_estimated_logits
from methods.rabitq_attention.attention import make_attention_fn
from methods.rabitq_attention.cache import init_cache
from methods.rabitq_attention.cache import init_layer_state
from methods.rabitq_attention.cache import LayerState
from methods.rabitq_attention.cache import RaBitQConfig
from methods.rabitq_attention.cache import with_top_p
from methods.rabitq_attention.estimator import binary_int4_dot
from methods.rabitq_attention.estimator import binary_query_product
from methods.rabitq_attention.estimator import bound_rate
from methods.rabitq_attention.estimator import EPS0
from methods.rabitq_attention.estimator import error_bound
from methods.rabitq_attention.estimator import estimate_scores
from methods.rabitq_attention.estimator import estimate_unit
from methods.rabitq_attention.estimator import estimate_unit_float
from methods.rabitq_attention.estimator import integer_dot
from methods.rabitq_attention.estimator import kernel_scores
from methods.rabitq_attention.quantization import key_bytes_per_token
from methods.rabitq_attention.quantization import KeyCodes
from methods.rabitq_attention.quantization import pack_bits
from methods.rabitq_attention.quantization import quantize_keys
from methods.rabitq_attention.quantization import quantize_query
from methods.rabitq_attention.quantization import QueryCode
from methods.rabitq_attention.quantization import random_rotation
from methods.rabitq_attention.quantization import unpack_bits
from methods.rabitq_attention.selection import attention_mass
from methods.rabitq_attention.selection import decode_masks
from methods.rabitq_attention.selection import Selection
from methods.rabitq_attention.selection import top_k_mask
from methods.rabitq_attention.selection import top_p_mask
from methods.rabitq_attention.selection import top_p_select
from methods.rabitq_attention.synthetic import query_at_cosine
from methods.rabitq_attention.synthetic import synthetic_cache

__all__ = [
    "baselines", "decode_step", "dense_estimated_logits", "make_attention_fn", "init_cache",
    "init_layer_state", "LayerState", "RaBitQConfig", "with_top_p", "binary_int4_dot",
    "binary_query_product", "bound_rate", "EPS0", "error_bound", "estimate_scores",
    "estimate_unit", "estimate_unit_float", "integer_dot", "kernel_scores",
    "key_bytes_per_token", "KeyCodes", "pack_bits", "quantize_keys", "quantize_query",
    "QueryCode", "random_rotation", "unpack_bits", "attention_mass", "Selection",
    "top_k_mask", "top_p_mask", "top_p_select", "decode_masks", "query_at_cosine",
    "synthetic_cache", "attention_entropy", "error_stats", "estimator_trials",
    "EstimatorTrials", "record_queries", "recording_attention_fn", "selection_metrics",
    "teacher_forced_decode", "tokens_at_recall",
]
