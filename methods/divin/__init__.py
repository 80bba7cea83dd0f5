"""DivIn: diversity-inducing initialization by Langevin sampling of the initial noise.

From the ICML 2026 DivIn abstract (papers/icml2026-abstracts.txt, "guidance potential
posterior"): draw the starting noise of a guided flow/diffusion sampler from
p(z) ~ N(z; 0, I) exp(-tau U(z)), U the guidance potential, instead of N(0, I).

Public API:
  potential:  guidance_potential, clean_prediction, potential_grad
  langevin:   divin_init, langevin_step, SCHEMES
  baselines:  cfg_field, cads_field, particle_guidance_field, anneal_condition, rbf_repulsion
  sampling:   sample_classes, method_field, METHODS (every method by name, per class)
  data:       ring_modes, mixture_batch, dataset_batch (training batches of (seed, step))
  metrics:    vendi_score, mode_coverage, precision, per_mode_precision, mode_counts,
              mean_pairwise_distance, density_coverage, pareto_mask, hypervolume_2d,
              class_mode_metrics, class_density_metrics
"""

from methods.divin import baselines
from methods.divin import data
from methods.divin import langevin
from methods.divin import metrics
from methods.divin import potential
from methods.divin import sampling
from methods.divin.baselines import cads_field
from methods.divin.baselines import cfg_field
from methods.divin.baselines import particle_guidance_field
from methods.divin.data import dataset_batch
from methods.divin.data import mixture_batch
from methods.divin.data import ring_modes
from methods.divin.langevin import divin_init
from methods.divin.metrics import class_density_metrics
from methods.divin.metrics import class_mode_metrics
from methods.divin.metrics import hypervolume_2d
from methods.divin.metrics import vendi_score
from methods.divin.potential import guidance_potential
from methods.divin.potential import potential_grad
from methods.divin.sampling import METHODS
from methods.divin.sampling import method_field
from methods.divin.sampling import sample_classes

__all__ = ["baselines", "data", "langevin", "metrics", "potential", "sampling", "cads_field",
           "cfg_field", "particle_guidance_field", "dataset_batch", "mixture_batch",
           "ring_modes", "divin_init", "class_density_metrics", "class_mode_metrics",
           "hypervolume_2d", "vendi_score", "guidance_potential", "potential_grad",
           "METHODS", "method_field", "sample_classes"]
