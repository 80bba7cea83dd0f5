"""Two-stage kernel ridge regression for continuous-treatment effects.

Public API:
  fit_two_stage, TwoStageHyper, TwoStageFit, EffectFunction,
  marginalize, mean_embedding, permuted_pseudo_outcomes,
  product_kernel, PSEUDO_OUTCOMES                              (two_stage.py)
  select_two_stage, SelectionGrid, Selected, loo_select        (selection.py)
  krr.fit / krr.predict / krr.spectral_path, KRRFit, SOLVERS   (krr.py)
  evaluation_grid, integrated_squared_error                    (metrics.py)
  baselines.naive / plug_in / doubly_robust                    (baselines.py)

Randomness is an explicit ``key`` wherever a function draws random numbers (the
selection split, Nystrom landmarks, permutations, leave-one-out subsamples,
cross-fitting folds).

Example:
  >>> data = common.data.causal.overlap_design(jax.random.PRNGKey(0), 500, overlap=0.2)
  >>> chosen = select_two_stage(data.t, data.x, data.y, jax.random.PRNGKey(1))
  >>> theta_hat = fit_two_stage(data.t, data.x, data.y, chosen.hyper).effect
"""

from methods.kernel_ridge import baselines
from methods.kernel_ridge import krr
from methods.kernel_ridge import metrics
from methods.kernel_ridge.krr import KRRFit
from methods.kernel_ridge.krr import SOLVERS
from methods.kernel_ridge.metrics import evaluation_grid
from methods.kernel_ridge.metrics import integrated_squared_error
from methods.kernel_ridge.selection import loo_select
from methods.kernel_ridge.selection import LooSelected
from methods.kernel_ridge.selection import select_two_stage
from methods.kernel_ridge.selection import Selected
from methods.kernel_ridge.selection import SelectionGrid
from methods.kernel_ridge.two_stage import EffectFunction
from methods.kernel_ridge.two_stage import fit_two_stage
from methods.kernel_ridge.two_stage import marginalize
from methods.kernel_ridge.two_stage import mean_embedding
from methods.kernel_ridge.two_stage import permuted_pseudo_outcomes
from methods.kernel_ridge.two_stage import product_kernel
from methods.kernel_ridge.two_stage import PSEUDO_OUTCOMES
from methods.kernel_ridge.two_stage import TwoStageFit
from methods.kernel_ridge.two_stage import TwoStageHyper

__all__ = [
    "baselines", "krr", "metrics", "KRRFit", "SOLVERS", "evaluation_grid",
    "integrated_squared_error", "loo_select", "LooSelected", "select_two_stage",
    "Selected", "SelectionGrid", "EffectFunction", "fit_two_stage", "marginalize",
    "mean_embedding", "permuted_pseudo_outcomes", "product_kernel", "PSEUDO_OUTCOMES",
    "TwoStageFit", "TwoStageHyper",
]
