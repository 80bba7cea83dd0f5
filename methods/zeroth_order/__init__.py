"""Zeroth-order fine-tuning: MeZO (SPSA), LOZO and activation-guided AGZO, as optax
transformations, plus the first-order baseline and gradient-alignment measurements.

    tx = optax.chain(agzo(loss_and_taps_fn, eps=1e-3, key=key, rank=4), optax.sgd(schedule))
    state = tx.init(params)
    updates, state = tx.update(params, state, params, batch=batch)

or, with checkpoints, metrics and a mesh,
`common.train.train(..., optimizer=tx, gradient_free=True)`. Estimators share one
signature, `estimate(params, batch, key, step) -> ZOEstimate`. AGZO reads each
linear layer's input from the taps of `common.models.taps` (`TappedDense`,
`apply_with_taps`). See docs/zeroth_order.md.
"""

from methods.zeroth_order import recipes
from methods.zeroth_order import task
from methods.zeroth_order.agzo import activation_bases
from methods.zeroth_order.agzo import agzo
from methods.zeroth_order.agzo import agzo_direction
from methods.zeroth_order.agzo import agzo_gradient
from methods.zeroth_order.agzo import power_iteration_basis
from methods.zeroth_order.agzo import project
from methods.zeroth_order.agzo import subspace_dimension
from methods.zeroth_order.alignment import agzo_expected_cosine
from methods.zeroth_order.alignment import alignment_draws
from methods.zeroth_order.alignment import cosine
from methods.zeroth_order.alignment import group_cosines
from methods.zeroth_order.alignment import isotropic_expected_cosine
from methods.zeroth_order.alignment import linear_layer_groups
from methods.zeroth_order.alignment import mean_and_se
from methods.zeroth_order.alignment import planted_rank_control
from methods.zeroth_order.alignment import subspace_expected_cosine
from methods.zeroth_order.baselines import first_order
from methods.zeroth_order.baselines import first_order_gradient
from methods.zeroth_order.lozo import lozo
from methods.zeroth_order.lozo import lozo_direction
from methods.zeroth_order.lozo import lozo_gradient
from methods.zeroth_order.perturbation import ZOEstimate
from methods.zeroth_order.perturbation import finite_difference
from methods.zeroth_order.perturbation import gaussian_direction
from methods.zeroth_order.spsa import mezo
from methods.zeroth_order.spsa import spsa_gradient
from methods.zeroth_order.transform import ZOState
from methods.zeroth_order.transform import find_zo_state
from methods.zeroth_order.transform import make_step
from methods.zeroth_order.transform import zeroth_order

__all__ = [
    "ZOEstimate", "ZOState", "activation_bases", "agzo", "agzo_direction", "agzo_gradient",
    "alignment_draws", "cosine", "find_zo_state", "finite_difference", "first_order",
    "first_order_gradient", "gaussian_direction", "group_cosines",
    "agzo_expected_cosine", "isotropic_expected_cosine", "linear_layer_groups", "lozo", "lozo_direction",
    "lozo_gradient", "make_step", "mean_and_se", "mezo", "planted_rank_control",
    "power_iteration_basis", "project", "recipes", "spsa_gradient", "subspace_dimension",
    "subspace_expected_cosine", "task", "zeroth_order",
]
