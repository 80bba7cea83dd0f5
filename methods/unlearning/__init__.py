"""Certified unlearning in continual learning (gradient, Hessian and hybrid removal).

Public API:
  Objective, Task, CLState, make_task, forget, only, stage_loss, stage_grad,
  fit_stage_newton, train_sequence                                   (continual.py)
  build_state, unlearn, UnlearnConfig, Unlearned                     (unlearn.py)
  uniform_plan, hybrid_plan, KINDS                                   (hybrid.py)
  hessian.*   curvature, data_hessian, data_ggn, *_diag, hvp, cg_solve, lissa_solve
  gradient.*  gradient_descent, linear_smoothness, estimated_smoothness
  certificate.*  gaussian_sigma, gaussian_delta, propagated_bound, certify, release
  accounting.*   tree_bytes, state_bytes, Storage
  metrics.*      expected_unlearning_loss, mia_auc, accuracy, joint_risk
  baselines.retrain                                                 (the oracle)
"""

from methods.unlearning import accounting
from methods.unlearning import baselines
from methods.unlearning import certificate
from methods.unlearning import continual
from methods.unlearning import gradient
from methods.unlearning import hessian
from methods.unlearning import metrics
from methods.unlearning.continual import CLState
from methods.unlearning.continual import fit_stage_newton
from methods.unlearning.continual import forget
from methods.unlearning.continual import make_task
from methods.unlearning.continual import Objective
from methods.unlearning.continual import only
from methods.unlearning.continual import stage_grad
from methods.unlearning.continual import stage_loss
from methods.unlearning.continual import Task
from methods.unlearning.continual import train_sequence
from methods.unlearning.hybrid import hybrid_plan
from methods.unlearning.hybrid import KINDS
from methods.unlearning.hybrid import uniform_plan
from methods.unlearning.unlearn import build_state
from methods.unlearning.unlearn import store_curvature
from methods.unlearning.unlearn import unlearn
from methods.unlearning.unlearn import UnlearnConfig
from methods.unlearning.unlearn import Unlearned

__all__ = [
    "accounting", "baselines", "certificate", "continual", "gradient", "hessian", "metrics",
    "CLState", "fit_stage_newton", "forget", "make_task", "Objective", "only", "stage_grad",
    "stage_loss", "Task", "train_sequence", "hybrid_plan", "KINDS", "uniform_plan",
    "build_state", "store_curvature", "unlearn", "UnlearnConfig", "Unlearned",
]
