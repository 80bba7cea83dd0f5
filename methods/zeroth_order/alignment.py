"""Gradient alignment: cosine similarity of estimated update directions with jax.grad.

For an estimate g_hat of the true gradient g (same parameters, same batch),

    cos(g_hat, g) = <g_hat, g> / (|g_hat| |g|),

overall (all parameters flattened) and per parameter group (e.g. per linear layer),
averaged over independent draws of the perturbation. For z isotropic Gaussian in a
k-dimensional subspace with projection P and the exact directional derivative,
g_hat = <P g, z> z and

    E cos = (|P g| / |g|) * kappa(k),    kappa(k) = E|u_1| = Gamma(k/2) / (sqrt(pi) Gamma((k+1)/2))

for u uniform on the unit sphere S^{k-1} (kappa(k) ~ sqrt(2 / (pi k))). MeZO is P = I,
k = D; AGZO is the activation subspace (`agzo.project`, `agzo.subspace_dimension`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def tree_dot(a: Any, b: Any) -> jax.Array:
  return sum(jnp.vdot(x.astype(jnp.float32), y.astype(jnp.float32))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def tree_norm(a: Any) -> jax.Array:
  return jnp.sqrt(tree_dot(a, a))


def cosine(a: Any, b: Any) -> jax.Array:
  """<a, b> / (|a| |b|) over whole pytrees (0 when either is 0)."""
  denom = tree_norm(a) * tree_norm(b)
  return jnp.where(denom > 0, tree_dot(a, b) / jnp.where(denom > 0, denom, 1.0), 0.0)


def group_cosines(a: Any, b: Any, groups: dict[str, Callable[[Any], Any]]) -> dict[str, jax.Array]:
  """{name: cosine(select(a), select(b))} for selectors of sub-pytrees."""
  return {name: cosine(select(a), select(b)) for name, select in groups.items()}


def isotropic_expected_cosine(k: int) -> float:
  """kappa(k) = E|u_1|, u uniform on S^{k-1}: the mean cosine of (g.z) z with g.

  Computed in float64 from log-gammas (float32 gammaln loses all precision for the
  k ~ 1e6 of a small LM); k must be a concrete positive integer.
  """
  k = int(k)
  if k < 1:
    raise ValueError(f"isotropic_expected_cosine: k={k}; expected an integer >= 1")
  return math.exp(math.lgamma(k / 2) - math.lgamma((k + 1) / 2)) / math.sqrt(math.pi)


def subspace_expected_cosine(grads: Any, projected: Any, k: int) -> jax.Array:
  """(|P g| / |g|) kappa(k): the expected cosine of a k-dim subspace estimator."""
  return tree_norm(projected) / tree_norm(grads) * isotropic_expected_cosine(k)


def alignment_draws(estimate_fn: Callable, params: Any, batch: Any, true_grads: Any,
                    key: jax.Array, num_draws: int,
                    groups: dict[str, Callable[[Any], Any]] | None = None
                    ) -> dict[str, jax.Array]:
  """Cosines of `num_draws` independent estimates with the true gradient.

  Args:
    estimate_fn: (params, batch, key, step) -> ZOEstimate (any estimator here).
    params, batch: the point and minibatch shared by all draws and by `true_grads`.
    true_grads: jax.grad of the same loss at the same point and batch.
    key: draw d uses (key, step=d), i.e. fold_in(key, d) inside the estimator.
    num_draws: the number of draws (a `lax.map`, one at a time, to bound memory).
    groups: optional {name: selector} for per-group cosines.

  Returns:
    {"overall": (num_draws,), name: (num_draws,) for each group}.
  """
  groups = groups or {}

  def one(d):
    est = estimate_fn(params, batch, key, d)
    out = {"overall": cosine(est.grads, true_grads)}
    out.update(group_cosines(est.grads, true_grads, groups))
    return out

  return jax.lax.map(one, jnp.arange(num_draws, dtype=jnp.int32))
