"""Flow matching: paths, exact drifts, the CFM loss, diffrax samplers, OT coupling, divergences.

Implements the Brownian diffusion flow matching (DFM) setting of "Convergence of
Brownian diffusion flow matching" (ICML 2026; papers/icml2026-abstracts.txt line 7):
the Brownian bridge path between N(0, I) and the data, its Markovian drift, and the
Euler-Maruyama sampler whose discretisation error (KL, W2) the paper bounds. The same
core (linear path, CFG sampling) serves methods/divin.

Public API:
  paths:        linear_interpolant, brownian_bridge, bridge_drift, sample_path, PATHS
  closed_form:  Gaussian, GaussianMixture, gaussian_drift(_coefficients), mixture_drift,
                bridge_marginal, euler_maruyama_law, mixture_sample,
                conditional_mixture_velocity
  targets:      rotated_gaussian, sphere_mixture
  losses:       cfm_loss, make_loss_fn, drop_conditions
  sampling:     guided_field, sample_ode, sample_sde, euler_maruyama_with_increments,
                brownian_increments, coarsen_increments
  coupling:     ot_pairing, couple
  divergences:  gaussian_kl, gaussian_w2, exact_w2, sinkhorn_divergence, empirical_gaussian,
                coupling_w2_bound
  networks:     ConditionalMLP
"""

from methods.flow_matching import closed_form
from methods.flow_matching import coupling
from methods.flow_matching import divergences
from methods.flow_matching import losses
from methods.flow_matching import networks
from methods.flow_matching import paths
from methods.flow_matching import sampling
from methods.flow_matching import targets
from methods.flow_matching.closed_form import bridge_marginal
from methods.flow_matching.closed_form import conditional_mixture_velocity
from methods.flow_matching.closed_form import euler_maruyama_law
from methods.flow_matching.closed_form import Gaussian
from methods.flow_matching.closed_form import gaussian_drift
from methods.flow_matching.closed_form import GaussianMixture
from methods.flow_matching.closed_form import mixture_drift
from methods.flow_matching.closed_form import mixture_sample
from methods.flow_matching.coupling import couple
from methods.flow_matching.divergences import coupling_w2_bound
from methods.flow_matching.divergences import empirical_gaussian
from methods.flow_matching.divergences import exact_w2
from methods.flow_matching.divergences import gaussian_kl
from methods.flow_matching.divergences import gaussian_w2
from methods.flow_matching.divergences import sinkhorn_divergence
from methods.flow_matching.losses import cfm_loss
from methods.flow_matching.losses import make_loss_fn
from methods.flow_matching.networks import ConditionalMLP
from methods.flow_matching.paths import sample_path
from methods.flow_matching.sampling import brownian_increments
from methods.flow_matching.sampling import coarsen_increments
from methods.flow_matching.sampling import euler_maruyama_with_increments
from methods.flow_matching.sampling import guided_field
from methods.flow_matching.sampling import sample_ode
from methods.flow_matching.sampling import sample_sde
from methods.flow_matching.targets import rotated_gaussian
from methods.flow_matching.targets import sphere_mixture

__all__ = [
    "closed_form", "coupling", "divergences", "losses", "networks", "paths", "sampling",
    "targets", "bridge_marginal", "conditional_mixture_velocity", "euler_maruyama_law",
    "Gaussian", "gaussian_drift", "GaussianMixture", "mixture_drift", "mixture_sample",
    "couple", "coupling_w2_bound", "empirical_gaussian", "exact_w2", "gaussian_kl",
    "gaussian_w2", "sinkhorn_divergence", "cfm_loss", "make_loss_fn", "ConditionalMLP",
    "sample_path", "brownian_increments", "coarsen_increments",
    "euler_maruyama_with_increments", "guided_field", "sample_ode", "sample_sde",
    "rotated_gaussian", "sphere_mixture",
]
