"""(epsilon, delta) certificates: the Gaussian mechanism on a bounded distance.

If an unlearning method returns theta_hat with ||theta_hat - theta'|| <= B, where
theta' is what retraining without the forgotten data gives, then releasing

    theta~ = theta_hat + sigma xi,   xi ~ N(0, I),
    sigma  = B sqrt(2 ln(1.25 / delta)) / epsilon                        (Gaussian mechanism)

is (epsilon, delta)-indistinguishable from releasing theta' + sigma xi (Dwork & Roth
2014, Thm A.1; valid for epsilon < 1). `gaussian_delta` gives the exact delta of the
pair of Gaussians (Balle & Wang, ICML 2018, Thm 8), which the property test checks
stays below the nominal delta.

The bound B comes from residual gradient norms. For a stage objective (1) that is
m-strongly convex (m = lam + mu for convex data terms):
  * the stage minimiser theta*(a) moves by at most lam / m ||a - a'|| when the anchor
    moves (d theta* / d a = lam (grad^2 D + m I)^{-1});
  * a point with residual gradient r_j = ||grad L_j(theta_hat_j; theta_hat_{j-1}, D'_j)||
    is within r_j / m of theta*(theta_hat_{j-1}).
Hence the propagated bound through the tasks after the forgotten one

    B_j = r_j / m + (lam / m) B_{j-1},   B_{k-1} = 0,   B = B_T.            (2)

For gradient descent a second, a priori bound holds per stage (descent-to-delete):
||theta_K - theta*|| <= (1 - m / M)^K ||grad L(theta_0)|| / m; `stage bound = min` of
the two. For non-convex models (the MLP) (2) is computed the same way but is not a
certificate (there is no strong convexity to lean on).

Reference: Guo et al., ICML 2020 (residual-gradient calibrated noise); Neel et al.,
ALT 2021 (descent-to-delete); the ICML 2026 CL-unlearning paper (abstract 5).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import jax
from jax.scipy.stats import norm


class Certificate(NamedTuple):
  """The guarantee attached to a release: noise sigma for distance bound B."""
  epsilon: float
  delta: float
  bound: float
  sigma: float
  convex: bool  # True when (2) is a proof (convex data term), False for a heuristic


def gaussian_sigma(bound: float, epsilon: float, delta: float) -> float:
  """sigma = B sqrt(2 ln(1.25 / delta)) / epsilon."""
  if not (0.0 < epsilon and 0.0 < delta < 1.0):
    raise ValueError(f"need epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
  return float(bound) * math.sqrt(2.0 * math.log(1.25 / delta)) / float(epsilon)


def gaussian_delta(bound: float, sigma: float, epsilon: float) -> float:
  """Exact delta(epsilon) between N(a, sigma^2 I) and N(b, sigma^2 I), ||a - b|| = B."""
  if bound == 0:
    return 0.0
  a, b = bound / (2.0 * sigma), epsilon * sigma / bound
  return float(norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b))


def stage_bound(residual: float, previous: float, lam: float, mu: float) -> float:
  """One step of (2): r / m + (lam / m) B_prev, m = lam + mu."""
  m = lam + mu
  return float(residual) / m + lam / m * float(previous)


def propagated_bound(residuals: Sequence[float], lam: float, mu: float) -> float:
  """B_T of (2) from the residual gradient norms r_k..r_T."""
  b = 0.0
  for r in residuals:
    b = stage_bound(r, b, lam, mu)
  return b


def gd_distance_bound(initial_grad_norm: float, m: float, smoothness: float,
                      steps: int) -> float:
  """(1 - m / M)^K ||grad L(theta_0)|| / m: distance to the minimiser after K GD steps."""
  return (1.0 - m / smoothness) ** steps * float(initial_grad_norm) / m


def certify(bound: float, epsilon: float, delta: float, convex: bool = True) -> Certificate:
  return Certificate(float(epsilon), float(delta), float(bound),
                     gaussian_sigma(bound, epsilon, delta), bool(convex))


def release(key: jax.Array, params, sigma: float):
  """theta_hat + sigma xi, xi ~ N(0, I) independently per coordinate of every leaf."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  noisy = [x + sigma * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
  return jax.tree.unflatten(treedef, noisy)
