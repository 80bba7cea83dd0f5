"""DivIn: diversity-inducing initialization by Langevin sampling of the initial noise.

From the ICML 2026 DivIn abstract (papers/icml2026-abstracts.txt, "guidance potential
posterior"): draw the starting noise of a guided flow/diffusion sampler from
p(z) ~ N(z; 0, I) exp(-tau U(z)), U the guidance potential, instead of N(0, I).

Public API:
  potential:  guidance_potential, clean_prediction, potential_grad
  langevin:   divin_init, langevin_step, SCHEMES
  baselines:  cfg_field, cads_field, particle_guidance_field, anneal_condition, rbf_repulsion
  metrics:    vendi_score, mode_coverage, precision, per_mode_precision, mode_counts,
              mean_pairwise_distance, density_coverage
"""

from methods.divin import baselines
from methods.divin import langevin
from methods.divin import metrics
from methods.divin import potential
from methods.divin.baselines import cads_field
from methods.divin.baselines import cfg_field
from methods.divin.baselines import particle_guidance_field
from methods.divin.langevin import divin_init
from methods.divin.potential import guidance_potential
from methods.divin.potential import potential_grad

__all__ = ["baselines", "langevin", "metrics", "potential", "cads_field", "cfg_field",
           "particle_guidance_field", "divin_init", "guidance_potential", "potential_grad"]
