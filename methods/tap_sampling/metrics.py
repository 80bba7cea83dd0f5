"""How well a candidate set covers the expert's actions, and how well the verifier ranks.

* ``mmd2``: the unbiased squared maximum mean discrepancy with a Gaussian kernel
  k(x, y) = exp(-|x - y|^2 / (2 ell^2)) (Gretton et al. 2012),

      MMD_u^2 = 1/(n(n-1)) sum_{i != j} k(x_i, x_j) + 1/(m(m-1)) sum_{i != j} k(y_i, y_j)
                - 2/(nm) sum_{i, j} k(x_i, y_j),

  between candidate chunks x and expert chunks y drawn from the same state (an
  unbiased estimate, so sets of different sizes compare fairly on average).
* ``pearson``: the correlation of predicted and true progress.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from common import kernels

Array = jax.Array


def mmd2(x: Array, y: Array, lengthscale) -> Array:
  """Unbiased MMD^2 between the rows of x (n, ...) and y (m, ...), n, m >= 2.

  Example:
    >>> mmd2(jnp.zeros((4, 2)), jnp.zeros((5, 2)), 1.0)   # 0
  """
  x = x.reshape(x.shape[0], -1)
  y = y.reshape(y.shape[0], -1)
  n, m = x.shape[0], y.shape[0]
  if n < 2 or m < 2:
    raise ValueError(f"mmd2 needs at least 2 rows on each side, got {n} and {m}")
  kxx, kyy = kernels.rbf(x, x, lengthscale), kernels.rbf(y, y, lengthscale)
  kxy = kernels.rbf(x, y, lengthscale)
  sxx = (jnp.sum(kxx) - jnp.trace(kxx)) / (n * (n - 1))
  syy = (jnp.sum(kyy) - jnp.trace(kyy)) / (m * (m - 1))
  return sxx + syy - 2.0 * jnp.mean(kxy)


def pearson(a: Array, b: Array) -> Array:
  """The Pearson correlation of two flattened arrays (`jnp.corrcoef`)."""
  return jnp.corrcoef(jnp.ravel(a), jnp.ravel(b))[0, 1]
