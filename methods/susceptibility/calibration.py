"""Calibrating SGLD on a model whose learning coefficient is known: linear regression.

For y = x.w* + sigma eps with d features and Gaussian noise, the per-sample negative
log-likelihood (up to a constant)

    L(w) = mean_i (y_i - x_i.w)^2 / (2 sigma^2)

is a regular model: at the least-squares point w0 its local learning coefficient is
lambda = d / 2, whatever the data. Running SGLD from w0 at several step sizes and
comparing `llc.estimate_llc` with d / 2 shows where the sampler is accurate and where
its discretisation bias (which grows with eps) takes over; `step_size_sweep` runs all
step sizes in one vmapped, compiled call.

Example:
    >>> problem = linear_regression(jax.random.PRNGKey(0), dim=4, n=512, batch_size=64,
    ...                             noise=1.0)
    >>> traces = step_size_sweep(problem.loss_fn, problem.w0, problem.batch_fn,
    ...                          jax.random.PRNGKey(1), (1e-3, 1e-2), n_beta=15.4,
    ...                          localization=1.0, num_chains=2, num_draws=100)
    >>> traces.shape
    (2, 2, 100)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.susceptibility.sgld import run_chains


class RegressionProblem(NamedTuple):
  """A linear-regression calibration problem.

  Attributes:
    x: (n, d) design; y: (n,) responses.
    w0: {"w": (d,)} the least-squares solution, where SGLD starts.
    loss_fn: (params, (xb, yb)) -> mean Gaussian negative log-likelihood of the batch.
    batch_fn: int32 step -> (xb, yb), `batch_size` rows drawn with replacement
      (traceable: a pure function of the step).
    true_llc: d / 2.
    curvature: 1 / sigma^2, the loss curvature scale (for `llc.stability_number`).
  """
  x: jax.Array
  y: jax.Array
  w0: Any
  loss_fn: Callable[[Any, Any], jax.Array]
  batch_fn: Callable[[jax.Array], Any]
  true_llc: float
  curvature: float


def linear_regression(key: jax.Array, dim: int, n: int, batch_size: int,
                      noise: float) -> RegressionProblem:
  """Draws y = x.w* + noise * eps and returns the problem SGLD is calibrated on.

      x ~ N(0, I_d),  w* ~ N(0, I_d),  eps ~ N(0, 1),
      L(w) = mean_i (y_i - x_i.w)^2 / (2 noise^2),   w0 = argmin L,   lambda = d / 2

  Args:
    key: PRNG key; split into the design, w*, the noise and the minibatch keys.
    dim: d >= 1 features; n >= d samples; batch_size: rows per minibatch.
    noise: sigma > 0.

  Returns:
    `RegressionProblem`.

  Example:
    >>> problem = linear_regression(jax.random.PRNGKey(0), 3, 100, 10, 0.5)
    >>> problem.true_llc, problem.batch_fn(0)[0].shape
    (1.5, (10, 3))
  """
  for name, value, low in (("dim", dim, 1), ("n", n, max(dim, 1)), ("batch_size", batch_size, 1)):
    if not isinstance(value, (int, np.integer)) or value < low:
      raise ValueError(f"linear_regression: {name}={value!r}; expected an int >= {low}"
                       + (" (n >= dim, or w0 is not unique and lambda != d/2)"
                          if name == "n" else ""))
  if not 0 < noise < float("inf"):
    raise ValueError(f"linear_regression: noise={noise!r}; expected a finite value > 0")
  kx, kw, ke, kb = jax.random.split(key, 4)
  x = jax.random.normal(kx, (n, dim))
  y = x @ jax.random.normal(kw, (dim,)) + noise * jax.random.normal(ke, (n,))
  w0 = {"w": jnp.linalg.lstsq(x, y)[0]}

  def loss_fn(params, batch):
    xb, yb = batch
    return 0.5 * jnp.mean((yb - xb @ params["w"]) ** 2) / noise ** 2

  def batch_fn(step):
    idx = jax.random.randint(jax.random.fold_in(kb, step), (batch_size,), 0, n)
    return x[idx], y[idx]

  return RegressionProblem(x, y, w0, loss_fn, batch_fn, dim / 2, 1.0 / noise ** 2)


def step_size_sweep(loss_fn: Callable[[Any, Any], jax.Array], params: Any,
                    batch_fn: Callable[[jax.Array], Any], key: jax.Array,
                    step_sizes: Sequence[float], **run_chains_kwargs) -> jax.Array:
  """SGLD loss traces from `params` at every step size, vmapped over eps:

      traces[e] = run_chains(loss_fn, params, batch_fn, key, step_size=eps_e, ...).loss

  Every step size uses the same key, so the runs share their noise draws and differ
  only by eps.

  Args:
    loss_fn, params, batch_fn, key: as in `sgld.run_chains`.
    step_sizes: the eps values (> 0).
    **run_chains_kwargs: n_beta, localization, num_chains, num_burnin, num_draws, ...

  Returns:
    (len(step_sizes), chains, steps) minibatch losses; `llc.estimate_llc(traces[e],
    L(w0), n_beta, num_burnin)` is the estimate at eps_e.

  Example:
    >>> p = linear_regression(jax.random.PRNGKey(0), 2, 64, 8, 1.0)
    >>> step_size_sweep(p.loss_fn, p.w0, p.batch_fn, jax.random.PRNGKey(1), [1e-3],
    ...                 n_beta=4.0, localization=1.0, num_chains=1, num_draws=3).shape
    (1, 1, 3)
  """
  eps = np.asarray(step_sizes, np.float64)
  if eps.ndim != 1 or eps.size == 0 or not np.all((eps > 0) & np.isfinite(eps)):
    raise ValueError(f"step_size_sweep: step_sizes={list(np.ravel(eps))!r}; expected a "
                     "non-empty sequence of finite values > 0")
  run = jax.vmap(lambda eps: run_chains(loss_fn, params, batch_fn, key, step_size=eps,
                                        **run_chains_kwargs).loss)
  return run(jnp.asarray(step_sizes))
