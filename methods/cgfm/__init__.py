"""CGFM: condition-aware graph flow matching for distributions of fluid states.

"Condition-aware graph flow matching" (ICML 2026; papers/icml2026-abstracts.txt
line 21): one flow, conditioned on the physical condition, learns the distribution of
flow states on an irregular mesh from short trajectories at a few conditions, and
interpolates to unseen ones. Its vector field is HieraGraphNet, message passing
within and across the levels of a multilevel graph whose coarse levels come from a
topology- and geometry-aware coarsening.

Public API:
  coarsening:     CoarseLevel, coarsen, build_hierarchy, pool, unpool, METHODS
  graphs:         MultiscaleGraph, build, pad, padded_sizes, node_mask, stack, broadcast, merge
  hieragraphnet:  HieraGraphNet, condition_features
  flow:           Standardizer, make_batch_fn, make_loss_fn, sample, batched_field
  metrics:        field_errors, region_errors, FieldErrors, wasserstein1_1d, near_wake_region
  variants:       model_variants, node_features, variant_graph, variant_model
  baselines:      NAIVE_COARSENING, single_level_blocks
"""

from methods.cgfm import baselines
from methods.cgfm import coarsening
from methods.cgfm import flow
from methods.cgfm import graphs
from methods.cgfm import hieragraphnet
from methods.cgfm import metrics
from methods.cgfm import variants
from methods.cgfm.baselines import single_level_blocks
from methods.cgfm.coarsening import build_hierarchy
from methods.cgfm.coarsening import CoarseLevel
from methods.cgfm.coarsening import coarsen
from methods.cgfm.coarsening import pool
from methods.cgfm.coarsening import unpool
from methods.cgfm.flow import batched_field
from methods.cgfm.flow import make_batch_fn
from methods.cgfm.flow import make_loss_fn
from methods.cgfm.flow import sample
from methods.cgfm.flow import Standardizer
from methods.cgfm.graphs import MultiscaleGraph
from methods.cgfm.hieragraphnet import condition_features
from methods.cgfm.hieragraphnet import HieraGraphNet
from methods.cgfm.metrics import field_errors
from methods.cgfm.metrics import FieldErrors
from methods.cgfm.metrics import near_wake_region
from methods.cgfm.metrics import region_errors
from methods.cgfm.metrics import wasserstein1_1d
from methods.cgfm.variants import model_variants
from methods.cgfm.variants import node_features
from methods.cgfm.variants import variant_graph
from methods.cgfm.variants import variant_model

__all__ = [
    "baselines", "coarsening", "flow", "graphs", "hieragraphnet", "metrics", "variants",
    "single_level_blocks", "build_hierarchy", "CoarseLevel", "coarsen", "pool", "unpool",
    "batched_field", "make_batch_fn", "make_loss_fn", "sample", "Standardizer",
    "MultiscaleGraph", "condition_features", "HieraGraphNet", "field_errors", "FieldErrors",
    "near_wake_region", "region_errors", "wasserstein1_1d", "model_variants", "node_features",
    "variant_graph", "variant_model",
]
