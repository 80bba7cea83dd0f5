"""CGFM: condition-aware graph flow matching for distributions of fluid states.

"Condition-aware graph flow matching" (ICML 2026; papers/icml2026-abstracts.txt
line 21): one flow, conditioned on the physical condition, learns the distribution of
flow states on an irregular mesh from short trajectories at a few conditions, and
interpolates to unseen ones. Its vector field is HieraGraphNet, message passing
within and across the levels of a multilevel graph whose coarse levels come from a
topology- and geometry-aware coarsening.

Public API:
  coarsening:     CoarseLevel, coarsen, build_hierarchy, pool, unpool, METHODS
  graphs:         MultiscaleGraph, build, pad, padded_sizes, node_mask, stack, broadcast
  hieragraphnet:  HieraGraphNet, condition_features
  flow:           Standardizer, make_loss_fn, sample, batched_field
  metrics:        field_errors, FieldErrors, wasserstein1_1d, near_wake_region
  baselines:      NAIVE_COARSENING, single_level_blocks
"""

from methods.cgfm import baselines
from methods.cgfm import coarsening
from methods.cgfm import flow
from methods.cgfm import graphs
from methods.cgfm import hieragraphnet
from methods.cgfm import metrics
from methods.cgfm.coarsening import build_hierarchy
from methods.cgfm.coarsening import CoarseLevel
from methods.cgfm.coarsening import coarsen
from methods.cgfm.flow import make_loss_fn
from methods.cgfm.flow import sample
from methods.cgfm.flow import Standardizer
from methods.cgfm.graphs import MultiscaleGraph
from methods.cgfm.hieragraphnet import HieraGraphNet
from methods.cgfm.metrics import field_errors
from methods.cgfm.metrics import near_wake_region

__all__ = [
    "baselines", "coarsening", "flow", "graphs", "hieragraphnet", "metrics",
    "build_hierarchy", "CoarseLevel", "coarsen", "make_loss_fn", "sample", "Standardizer",
    "MultiscaleGraph", "HieraGraphNet", "field_errors", "near_wake_region",
]
