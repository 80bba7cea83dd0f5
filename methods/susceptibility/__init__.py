"""Spectroscopy of a language model: SGLD, the local learning coefficient, per-token
susceptibilities and conductance-based clustering ("Spectroscopy of a language model",
ICML 2026).

Public API:
  sgld, run_chains, default_n_beta, SGLDState, SGLDTrace          (sgld.py)
  estimate_llc, init_loss, diagnose, stability_number, LLCEstimate,
  mala_acceptance, split_rhat                                     (llc.py)
  linear_regression, step_size_sweep, RegressionProblem           (calibration.py)
  pooled_covariance, susceptibilities, component_susceptibilities,
  stack_trees, SusceptibilityResult                               (susceptibilities.py)
  token_losses, loss_by_label, subtree_mask, head_masks, block_masks,
  head_ablation                                                   (components.py)
  standardize, knn_graph, conductance, sweep_cut, SweepCut, conductance_clustering,
  cluster_tokens, adjusted_rand_index, cluster_profiles, ClusterProfile (clustering.py)
  projected_gradient_features, residual_features                  (baselines.py)
"""

from methods.susceptibility import baselines
from methods.susceptibility.baselines import projected_gradient_features
from methods.susceptibility.baselines import residual_features
from methods.susceptibility.calibration import linear_regression
from methods.susceptibility.calibration import RegressionProblem
from methods.susceptibility.calibration import step_size_sweep
from methods.susceptibility.clustering import adjusted_rand_index
from methods.susceptibility.clustering import cluster_profiles
from methods.susceptibility.clustering import cluster_tokens
from methods.susceptibility.clustering import ClusterProfile
from methods.susceptibility.clustering import conductance
from methods.susceptibility.clustering import conductance_clustering
from methods.susceptibility.clustering import knn_graph
from methods.susceptibility.clustering import standardize
from methods.susceptibility.clustering import sweep_cut
from methods.susceptibility.clustering import SweepCut
from methods.susceptibility.components import block_masks
from methods.susceptibility.components import head_ablation
from methods.susceptibility.components import head_masks
from methods.susceptibility.components import loss_by_label
from methods.susceptibility.components import subtree_mask
from methods.susceptibility.components import token_losses
from methods.susceptibility.llc import diagnose
from methods.susceptibility.llc import estimate_llc
from methods.susceptibility.llc import init_loss
from methods.susceptibility.llc import LLCEstimate
from methods.susceptibility.llc import mala_acceptance
from methods.susceptibility.llc import split_rhat
from methods.susceptibility.llc import stability_number
from methods.susceptibility.sgld import default_n_beta
from methods.susceptibility.sgld import run_chains
from methods.susceptibility.sgld import sgld
from methods.susceptibility.sgld import SGLDState
from methods.susceptibility.sgld import SGLDTrace
from methods.susceptibility.susceptibilities import component_susceptibilities
from methods.susceptibility.susceptibilities import pooled_covariance
from methods.susceptibility.susceptibilities import stack_trees
from methods.susceptibility.susceptibilities import susceptibilities
from methods.susceptibility.susceptibilities import SusceptibilityResult

__all__ = [
    "baselines", "projected_gradient_features", "residual_features",
    "linear_regression", "RegressionProblem", "step_size_sweep",
    "adjusted_rand_index", "cluster_profiles", "cluster_tokens", "ClusterProfile",
    "conductance", "conductance_clustering", "knn_graph", "standardize", "sweep_cut",
    "SweepCut", "block_masks", "head_ablation", "head_masks", "loss_by_label",
    "subtree_mask", "token_losses", "diagnose", "estimate_llc", "init_loss",
    "LLCEstimate", "mala_acceptance", "split_rhat", "stability_number",
    "default_n_beta", "run_chains", "sgld",
    "SGLDState", "SGLDTrace", "component_susceptibilities", "pooled_covariance",
    "stack_trees", "susceptibilities", "SusceptibilityResult",
]
