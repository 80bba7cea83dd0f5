"""Random target families for measuring discretisation error (Gaussians and mixtures).

* ``rotated_gaussian``: N(m, S) with m = mean_scale (1, ..., 1) and

      S = Q diag(s) Q^T,   s_i log-spaced in [cov_min, cov_max],   Q a random rotation,

  a spectrum of fixed condition number cov_max / cov_min in every dimension d.
* ``sphere_mixture``: sum_k w_k N(m_k, std^2 I) with K means at distance ``radius``
  from the origin in random directions and unequal weights w_k proportional to
  K - k (k = 0..K-1); not log-concave when the modes are separated.

Both are pure functions of their key; they follow the default float dtype (float64
under ``jax.enable_x64``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from methods.flow_matching.closed_form import Gaussian
from methods.flow_matching.closed_form import GaussianMixture

Array = jax.Array


def rotated_gaussian(key: Array, d: int, *, mean_scale: float = 1.0, cov_min: float = 0.25,
                     cov_max: float = 4.0) -> Gaussian:
  """N(mean_scale 1, Q diag(s) Q^T), s log-spaced in [cov_min, cov_max], Q ~ Haar.

  Q is the sign-corrected Q factor of a Gaussian matrix (Q R with diag(R) > 0), which
  is Haar-distributed on the orthogonal group.

  Args:
    key: PRNG key for the rotation.
    d: dimension.
    mean_scale: every coordinate of the mean.
    cov_min, cov_max: the smallest and largest eigenvalues of the covariance.

  Returns:
    ``Gaussian(mean (d,), cov (d, d))``.

  Example:
    >>> g = rotated_gaussian(jax.random.PRNGKey(0), 3, cov_min=0.5, cov_max=2.0)
    >>> jnp.linalg.eigvalsh(g.cov)   # [0.5, 1.0, 2.0]
  """
  checks.positive_int("d", d)
  checks.scalar("cov_min", cov_min)
  if checks.is_concrete(cov_min):
    checks.scalar("cov_max", cov_max, low=float(cov_min), strict=False)
  checks.scalar("mean_scale", mean_scale, low=-np.inf)
  s = jnp.exp(jnp.linspace(jnp.log(cov_min), jnp.log(cov_max), d))
  q, r = jnp.linalg.qr(jax.random.normal(key, (d, d)))
  q = q * jnp.sign(jnp.diag(r))[None, :]
  return Gaussian(mean_scale * jnp.ones((d,)), (q * s[None, :]) @ q.T)


def sphere_mixture(key: Array, d: int, *, num_components: int = 4, radius: float = 2.0,
                   std: float = 0.5) -> GaussianMixture:
  """sum_k w_k N(m_k, std^2 I): |m_k| = radius in random directions, w_k ∝ K - k.

  Args:
    key: PRNG key for the directions of the means.
    d: dimension.
    num_components: K.
    radius: distance of every mean from the origin.
    std: the components' standard deviation.

  Returns:
    ``GaussianMixture(weights (K,), means (K, d), covs (K, d, d))``.

  Example:
    >>> mix = sphere_mixture(jax.random.PRNGKey(0), 2, num_components=4)
    >>> mix.weights   # [0.4, 0.3, 0.2, 0.1]
  """
  checks.positive_int("d", d)
  checks.positive_int("num_components", num_components)
  checks.scalar("radius", radius, strict=False)
  checks.scalar("std", std)
  k = num_components
  dirs = jax.random.normal(key, (k, d))
  means = radius * dirs / jnp.linalg.norm(dirs, axis=1, keepdims=True)
  w = jnp.arange(k, 0, -1, dtype=means.dtype)
  covs = jnp.broadcast_to(std ** 2 * jnp.eye(d), (k, d, d))
  return GaussianMixture(w / w.sum(), means, covs)
