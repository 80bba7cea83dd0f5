"""How a dose-response estimate is scored against the true effect function.

The integrated squared error over the central part of the treatment's law,

    ISE(theta_hat) = (1/G) sum_g (theta_hat(t_g) - theta(t_g))^2,

with t_1 < ... < t_G equispaced between the q and 1 - q quantiles of T (the grid
of ``evaluation_grid``), i.e. the mean squared error on the grid. The tails are left
out because no estimator has data there under weak overlap.

Examples assume ``import jax, jax.numpy as jnp``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from common import checks
from methods.kernel_ridge import krr

Array = jax.Array


def evaluation_grid(t: Array, quantile: float = 0.05, num_points: int = 100) -> Array:
  """t_g = q_lo + (g - 1) (q_hi - q_lo) / (G - 1), g = 1..G, between the ``quantile``
  and ``1 - quantile`` empirical quantiles q_lo, q_hi of the treatments ``t``.

  Args:
    t: (n,) treatment draws (a large sample of T).
    quantile: q in [0, 0.5).
    num_points: G >= 2.

  Returns:
    (G,) equispaced treatment values, in the dtype of ``t`` (integer treatments are
    promoted to the default float dtype; NaN or inf raise a ValueError).

  Example:
    >>> grid = evaluation_grid(jax.random.normal(jax.random.PRNGKey(0), (1000,)), 0.05, 20)
    >>> grid.shape
    (20,)
  """
  t = checks.as_float("treatments t", t)
  if t.ndim != 1 or t.shape[0] < 2:
    raise ValueError(f"treatments t must have shape (n,) with n >= 2, got {t.shape}")
  if not 0 <= quantile < 0.5:
    raise ValueError(f"quantile must lie in [0, 0.5), got {quantile}")
  if num_points < 2:
    raise ValueError(f"num_points must be >= 2, got {num_points}")
  checks.check_finite("treatments t", t)
  low, high = jnp.quantile(t, jnp.asarray([quantile, 1.0 - quantile], t.dtype))
  return jnp.linspace(low, high, num_points)


def integrated_squared_error(estimate: Array, truth: Array) -> Array:
  """ISE = (1/G) sum_g (estimate_g - truth_g)^2 over the grid values.

  Args:
    estimate: (G,) theta_hat on the evaluation grid.
    truth: (G,) theta on the same grid.

  Returns:
    The ISE, a scalar array.

  Example:
    >>> grid = jnp.linspace(-1.0, 1.0, 50)
    >>> float(integrated_squared_error(grid ** 2 + 0.1, grid ** 2))  # doctest: +ELLIPSIS
    0.01...
  """
  estimate, truth = jnp.asarray(estimate), jnp.asarray(truth)
  if estimate.shape != truth.shape:
    raise ValueError(f"estimate and truth must have the same shape, got {estimate.shape} "
                     f"and {truth.shape}")
  return jnp.mean((estimate - truth) ** 2)
