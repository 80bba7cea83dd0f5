"""What FGR is compared against, with the same signatures as FGR's own pieces.

* Training losses `(logits, labels, **hyper) -> scalar`: cross-entropy, focal
  (gamma = 3, the code's script), dual focal (gamma = 5) and label smoothing
  (alpha = 0.05); mixup is a batch transform (`losses.mixup`) trained with
  `losses.soft_cross_entropy`.
* PCGrad's symmetric projection (Yu et al., NeurIPS 2020) in place of FGR's one-sided
  one: `pcgrad` on pytrees, `pcgrad_rectify` as an optax transformation taking the same
  `constraint_grads` extra argument as `fgr_rectify`.
* The two ablations need no code of their own: low-pass views only = `lowpass_views`
  with plain DFL updates; projection only = `fgr_rectify` with rho = 0 (the constraint
  on the whole, unfiltered batch).
* Post-hoc temperature scaling (`metrics.fit_temperature`) applies to every one of them.

Example:
    >>> loss = BASELINE_LOSSES["focal"](jnp.zeros((2, 3)), jnp.array([0, 1]))
"""

from __future__ import annotations

import functools

from methods.fgr import losses
from methods.fgr.rectify import pcgrad, pcgrad_rectify

BASELINE_LOSSES = {
    "cross_entropy": losses.cross_entropy,
    "focal": functools.partial(losses.focal_loss, gamma=3.0),
    "dual_focal": functools.partial(losses.dual_focal_loss, gamma=5.0),
    "label_smoothing": functools.partial(losses.label_smoothing_loss, alpha=0.05),
}

__all__ = ["BASELINE_LOSSES", "pcgrad", "pcgrad_rectify"]
