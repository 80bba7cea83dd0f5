"""Minibatch optimal-transport coupling (Tong et al. 2024; Pooladian et al. 2023).

Given a batch of source draws x0 (B, d) and target draws x1 (B, d), solve entropic
OT between the two empirical measures with cost |x0_i - x1_j|^2 and, for each i,
draw the partner j ~ plan[i, :] / plan[i, :].sum(). The pairs (x0_i, x1_{j_i}) then
replace the independent coupling in the flow-matching loss (straighter paths).
Everything is jit-able (log-domain Sinkhorn from ``divergences``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from methods.flow_matching import divergences
from common import checks

Array = jax.Array
COUPLINGS = ("independent", "minibatch_ot")


def ot_pairing(key: Array, x0: Array, x1: Array, eps: float = 0.05,
               num_iters: int = 100) -> Array:
  """Indices j (B,) such that (x0_i, x1[j_i]) is a minibatch-OT coupling:

      j_i ~ plan[i, :] / plan[i, :].sum(),   plan = argmin_P <P, C> - eps H(P),
      C_ij = |x0_i - x1_j|^2 / mean(C).

  The cost is normalised by its mean so ``eps`` is scale-free.

  Args:
    key: PRNG key for drawing the partners.
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    eps: entropic regularisation (relative to the mean cost).
    num_iters: Sinkhorn iterations.

  Returns:
    Partner indices (B,) into x1.

  Example:
    >>> j = ot_pairing(key, x0, x1)
    >>> x1_paired = x1[j]
  """
  checks.scalar("eps", eps)
  checks.positive_int("num_iters", num_iters)
  checks.same_shape("x0 and x1", x0, x1)
  a = x0.reshape(x0.shape[0], -1)
  b = x1.reshape(x1.shape[0], -1)
  cost = divergences.squared_distances(a, b)
  cost = cost / jnp.maximum(jnp.mean(cost), 1e-12)
  plan, _ = divergences.sinkhorn_plan(jax.lax.stop_gradient(cost), eps, num_iters)
  return jax.random.categorical(key, jnp.log(plan + 1e-30), axis=1)


def couple(key: Array, x0: Array, x1: Array, coupling: str, *extras: Array):
  """(x0, x1[j], *extras[j]) with j the coupling's partner of each x0_i.

  Args:
    key: PRNG key (used by "minibatch_ot").
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    coupling: "independent" (j_i = i) or "minibatch_ot" (``ot_pairing``).
    *extras: arrays with leading axis B that travel with x1 (e.g. conditions).

  Returns:
    The tuple (x0, x1, *extras) with x1 and extras permuted alike.

  Example:
    >>> x0, x1, cond = couple(key, x0, x1, "minibatch_ot", cond)
  """
  if coupling == "independent":
    return (x0, x1, *extras)
  if coupling == "minibatch_ot":
    j = ot_pairing(key, x0, x1)
    return (x0, x1[j], *(e[j] for e in extras))
  raise ValueError(f"unknown coupling {coupling!r}; expected one of {COUPLINGS}")
