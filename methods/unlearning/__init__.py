"""Certified unlearning in continual learning (gradient, Hessian and hybrid removal).

Public API:
  Objective, Task, CLState, make_task, pad_tasks, forget, forget_task, only,
  stage_loss, stage_grad                                             (objective.py)
  fit_stage_newton, train_sequence                                   (continual.py)
  loop_stage_fitter, scan_stage_fitter     (loop.py: the shared loop; one compiled scan)
  build_state, build_states, store_curvature, unlearn, UnlearnConfig,
  Unlearned                                                          (unlearn.py)
  uniform_plan, hybrid_plan, method_plan, KINDS, METHODS             (hybrid.py)
  Model, Removal, fit_model, prepare_model, remove      (single.py: one model)
  hessian.*   curvature, data_hessian, data_ggn, *_diag, hvp, cg_solve, default_cg_tol,
              lissa_solve, newton_matrix_free
  gradient.*  gradient_descent, linear_smoothness, estimated_smoothness
  certificate.*  gaussian_sigma, gaussian_delta, propagated_bound, certify, release
  accounting.*   tree_bytes, state_bytes, Storage
  metrics.*      expected_unlearning_loss, mia_auc, accuracy, joint_risk, joint_minimum
  baselines.retrain                                                 (the oracle)
"""

from methods.unlearning import accounting
from methods.unlearning import baselines
from methods.unlearning import certificate
from methods.unlearning import continual
from methods.unlearning import gradient
from methods.unlearning import hessian
from methods.unlearning import hybrid
from methods.unlearning import loop
from methods.unlearning import metrics
from methods.unlearning import objective
from methods.unlearning import single
from methods.unlearning.continual import fit_stage_newton
from methods.unlearning.continual import train_sequence
from methods.unlearning.hybrid import hybrid_plan
from methods.unlearning.hybrid import KINDS
from methods.unlearning.hybrid import method_plan
from methods.unlearning.hybrid import METHODS
from methods.unlearning.hybrid import uniform_plan
from methods.unlearning.loop import loop_stage_fitter
from methods.unlearning.loop import scan_stage_fitter
from methods.unlearning.objective import CLState
from methods.unlearning.objective import forget
from methods.unlearning.objective import forget_task
from methods.unlearning.objective import make_task
from methods.unlearning.objective import Objective
from methods.unlearning.objective import only
from methods.unlearning.objective import pad_tasks
from methods.unlearning.objective import stage_grad
from methods.unlearning.objective import stage_loss
from methods.unlearning.objective import Task
from methods.unlearning.single import fit_model
from methods.unlearning.single import Model
from methods.unlearning.single import prepare_model
from methods.unlearning.single import Removal
from methods.unlearning.single import remove
from methods.unlearning.unlearn import build_state
from methods.unlearning.unlearn import build_states
from methods.unlearning.unlearn import store_curvature
from methods.unlearning.unlearn import unlearn
from methods.unlearning.unlearn import UnlearnConfig
from methods.unlearning.unlearn import Unlearned

__all__ = [
    "accounting", "baselines", "certificate", "continual", "gradient", "hessian", "hybrid",
    "loop", "metrics", "objective", "single",
    "fit_stage_newton", "train_sequence", "hybrid_plan", "KINDS", "method_plan", "METHODS",
    "uniform_plan", "loop_stage_fitter", "scan_stage_fitter", "CLState", "forget",
    "forget_task", "make_task", "Objective", "only", "pad_tasks", "stage_grad", "stage_loss",
    "Task", "fit_model",
    "Model", "prepare_model", "Removal", "remove", "build_state", "build_states",
    "store_curvature", "unlearn", "UnlearnConfig", "Unlearned",
]
