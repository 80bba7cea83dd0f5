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
import optax


class Certificate(NamedTuple):
  """The guarantee attached to a release: noise sigma for distance bound B.

  Attributes:
    epsilon, delta: the (epsilon, delta) of the guarantee.
    bound: B, the bound on ||theta_hat - theta'||.
    sigma: the Gaussian noise scale per coordinate.
    convex: True when (2) is a proof (convex data term), False for a heuristic.
  """
  epsilon: float
  delta: float
  bound: float
  sigma: float
  convex: bool


def gaussian_sigma(bound: float, epsilon: float, delta: float) -> float:
  """sigma = B sqrt(2 ln(1.25 / delta)) / epsilon (the classic Gaussian mechanism).

  Args:
    bound: B >= 0.
    epsilon: > 0 (the classic analysis needs epsilon < 1).
    delta: in (0, 1).

  Returns:
    sigma.

  Example:
    >>> gaussian_sigma(0.2, 0.5, 1e-5)   # ~1.94
  """
  if not (0.0 < epsilon and 0.0 < delta < 1.0):
    raise ValueError(f"need epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
  if not float(bound) >= 0:
    raise ValueError(f"gaussian_sigma: bound={bound!r}; expected B >= 0 (a NaN bound means "
                     "the removal diverged)")
  return float(bound) * math.sqrt(2.0 * math.log(1.25 / delta)) / float(epsilon)


def gaussian_delta(bound: float, sigma: float, epsilon: float) -> float:
  """delta(eps) = Phi(B / 2s - eps s / B) - e^eps Phi(-B / 2s - eps s / B).

  The exact delta(epsilon) between N(a, sigma^2 I) and N(b, sigma^2 I) with
  ||a - b|| = B (Balle & Wang 2018, Thm 8).

  Args:
    bound: B.
    sigma: the noise scale s.
    epsilon: eps.

  Returns:
    delta (0 when B = 0).

  Example:
    >>> gaussian_delta(1.0, gaussian_sigma(1.0, 0.5, 1e-5), 0.5) <= 1e-5
    True
  """
  if not float(bound) >= 0 or not float(sigma) > 0 or not float(epsilon) >= 0:
    raise ValueError(f"gaussian_delta: bound={bound!r}, sigma={sigma!r}, epsilon={epsilon!r}; "
                     "expected bound >= 0, sigma > 0 and epsilon >= 0")
  if bound == 0:
    return 0.0
  a, b = bound / (2.0 * sigma), epsilon * sigma / bound
  return float(norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b))


def stage_bound(residual: float, previous: float, lam: float, mu: float) -> float:
  """One step of (2): B_j = r_j / m + (lam / m) B_{j-1}, m = lam + mu.

  Args:
    residual: r_j.
    previous: B_{j-1}.
    lam, mu: the objective's anchor and ridge strengths.

  Returns:
    B_j.

  Example:
    >>> stage_bound(0.1, 0.0, lam=1.0, mu=0.25)   # 0.08
  """
  m = lam + mu
  if not (lam >= 0 and mu >= 0 and m > 0):
    raise ValueError(f"stage_bound: lam={lam!r}, mu={mu!r}; expected lam, mu >= 0 with "
                     "lam + mu > 0 (the strong convexity m)")
  return float(residual) / m + lam / m * float(previous)


def propagated_bound(residuals: Sequence[float], lam: float, mu: float) -> float:
  """B_T of (2) from the residual gradient norms r_k..r_T.

  Args:
    residuals: r_k..r_T.
    lam, mu: the objective's anchor and ridge strengths.

  Returns:
    B_T.

  Example:
    >>> propagated_bound([0.1, 0.02], lam=1.0, mu=0.25)
  """
  b = 0.0
  for r in residuals:
    b = stage_bound(r, b, lam, mu)
  return b


def gd_distance_bound(initial_grad_norm: float, m: float, smoothness: float,
                      steps: int) -> float:
  """(1 - m / M)^K ||grad L(theta_0)|| / m: distance to the minimiser after K GD steps.

  Args:
    initial_grad_norm: ||grad L(theta_0)||.
    m: strong convexity (lam + mu).
    smoothness: M (the step is 1 / M).
    steps: K.

  Returns:
    The a priori bound on ||theta_K - theta*||.

  Example:
    >>> gd_distance_bound(1.0, 1.1, 33.0, 5)
  """
  return (1.0 - m / smoothness) ** steps * float(initial_grad_norm) / m


def certify(bound: float, epsilon: float, delta: float, convex: bool = True) -> Certificate:
  """The certificate of a release: sigma = `gaussian_sigma(bound, epsilon, delta)`.

  Args:
    bound: B, e.g. `Unlearned.bound`.
    epsilon, delta: the target guarantee.
    convex: whether B is a proof (convex data term) or a heuristic (e.g. an MLP).

  Returns:
    `Certificate(epsilon, delta, bound, sigma, convex)`.

  Example:
    >>> cert = certify(out.bound, epsilon=0.5, delta=1e-5)
  """
  return Certificate(float(epsilon), float(delta), float(bound),
                     gaussian_sigma(bound, epsilon, delta), bool(convex))


def release(key: jax.Array, params, sigma: float):
  """theta~ = theta_hat + sigma xi, xi ~ N(0, I) independently per coordinate.

  Args:
    key: the PRNG key of the noise (split into one key per leaf).
    params: theta_hat, a pytree.
    sigma: the noise scale (`Certificate.sigma`).

  Returns:
    The noisy pytree, in params' dtypes.

  Example:
    >>> theta_release = release(jax.random.PRNGKey(0), out.params, cert.sigma)
  """
  return optax.tree.add_scale(params, sigma, optax.tree.random_like(key, params))
