"""Two-stage kernel ridge regression for continuous-treatment effects.

Public API:
  fit_two_stage, TwoStageHyper, TwoStageFit, EffectFunction   (two_stage.py)
  select_two_stage, SelectionGrid                             (selection.py)
  krr.fit / krr.predict / krr.spectral_path                   (krr.py)
  baselines.naive / plug_in / doubly_robust                   (baselines.py)
"""

from methods.kernel_ridge import baselines
from methods.kernel_ridge import krr
from methods.kernel_ridge.selection import SelectionGrid
from methods.kernel_ridge.selection import select_two_stage
from methods.kernel_ridge.two_stage import EffectFunction
from methods.kernel_ridge.two_stage import fit_two_stage
from methods.kernel_ridge.two_stage import marginalize
from methods.kernel_ridge.two_stage import TwoStageFit
from methods.kernel_ridge.two_stage import TwoStageHyper

__all__ = [
    "baselines", "krr", "SelectionGrid", "select_two_stage", "EffectFunction",
    "fit_two_stage", "marginalize", "TwoStageFit", "TwoStageHyper",
]
