"""Synthetic observational data with a continuous treatment and known dose-response.

Each design samples (T, X, Y) with confounding (X drives both T and Y) and comes with
its true effect function theta(t) = E_X[ E[Y | T=t, X] ], so estimators can be scored
exactly. Samplers are pure functions of a ``jax.random`` key.

Designs
- ``overlap``: S ~ U[-1, 1], T = sin(pi S) + E with E ~ U[-a, a], Y = T^2 + T + 1 + 10 S
  + eps, eps ~ N(0, 1). Here theta(t) = t^2 + t + 1. The half-width ``a`` sets overlap:
  for small a, T almost determines S, so the conditional density of T given S is
  zero over most of the (t, s) plane (the single-confounder model used by
  nonparametric dose-response papers).
- ``colangelo_lee``: X ~ N(0, Sigma), p = 100, Sigma tridiagonal (1 on the diagonal,
  rho = 0.5 next to it), beta_j = 1 / j^2, T = Phi(3 X'beta) + 0.75 nu - 0.5,
  Y = 1.2 T + T^2 + T X_1 + 1.2 X'beta + eps, nu, eps ~ N(0, 1). theta(t) = 1.2 t + t^2
  (Colangelo & Lee, 2020).

Examples assume ``import jax``.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


class DoseResponseData(NamedTuple):
  """An observational sample: treatment t (n,), covariates x (n, p), outcome y (n,)."""
  t: Array
  x: Array
  y: Array


def _check_n(n: int) -> None:
  if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
    raise ValueError(f"sample size n must be an integer >= 2, got {n!r}")


def overlap_design(key: Array, n: int, overlap: float = 1.0,
                   noise: float = 1.0) -> DoseResponseData:
  """Samples the single-confounder design with overlap half-width ``overlap`` (= a):

      S ~ U[-1, 1],  T = sin(pi S) + E, E ~ U[-a, a],  Y = T^2 + T + 1 + 10 S + noise eps.

  Args:
    key: PRNG key.
    n: sample size >= 2.
    overlap: a > 0; small a means weak overlap.
    noise: the standard deviation of eps.

  Returns:
    DoseResponseData(t (n,), x = S as (n, 1), y (n,)).

  Example:
    >>> data = overlap_design(jax.random.PRNGKey(0), 100, overlap=0.2)
    >>> data.x.shape
    (100, 1)
  """
  _check_n(n)
  if not overlap > 0:
    raise ValueError(f"overlap must be > 0, got {overlap}")
  if not overlap < np.inf:
    raise ValueError(f"overlap must be finite, got {overlap}")
  if not 0 <= noise < np.inf:
    raise ValueError(f"noise must be finite and >= 0, got {noise}")
  ks, ke, keps = jax.random.split(key, 3)
  s = jax.random.uniform(ks, (n,), minval=-1.0, maxval=1.0)
  e = jax.random.uniform(ke, (n,), minval=-overlap, maxval=overlap)
  t = jnp.sin(jnp.pi * s) + e
  y = overlap_effect(t) + 10.0 * s + noise * jax.random.normal(keps, (n,))
  return DoseResponseData(t=t, x=s[:, None], y=y)


def overlap_effect(t: Array) -> Array:
  """theta(t) = t^2 + t + 1 for the ``overlap`` design (E[S] = 0 removes 10 S).

  Example:
    >>> float(overlap_effect(1.0))
    3.0
  """
  return t * t + t + 1.0


def _tridiagonal_cholesky(p: int, rho: float, dtype) -> Array:
  cov = (jnp.eye(p, dtype=dtype) + rho * jnp.eye(p, k=1, dtype=dtype)
         + rho * jnp.eye(p, k=-1, dtype=dtype))
  return jnp.linalg.cholesky(cov)


def colangelo_lee_design(key: Array, n: int, p: int = 100,
                         rho: float = 0.5) -> DoseResponseData:
  """Samples the Colangelo-Lee design with ``p`` correlated Gaussian covariates:

      X ~ N(0, Sigma) (Sigma tridiagonal: 1, rho),  beta_j = 1 / j^2,
      T = Phi(3 X'beta) + 0.75 nu - 0.5,  Y = 1.2 T + T^2 + T X_1 + 1.2 X'beta + eps.

  Args:
    key: PRNG key.
    n: sample size >= 2.
    p: number of covariates >= 1.
    rho: the off-diagonal correlation, in [0, 0.5].

  Returns:
    DoseResponseData(t (n,), x (n, p), y (n,)).

  Example:
    >>> data = colangelo_lee_design(jax.random.PRNGKey(0), 50, p=10)
    >>> data.x.shape
    (50, 10)
  """
  _check_n(n)
  if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
    raise ValueError(f"number of covariates p must be an integer >= 1, got {p!r}")
  if not 0 <= rho <= 0.5:  # keeps the tridiagonal covariance positive definite
    raise ValueError(f"rho must lie in [0, 0.5], got {rho}")
  kx, knu, keps = jax.random.split(key, 3)
  dtype = jnp.result_type(float)
  chol = _tridiagonal_cholesky(p, rho, dtype)
  x = jax.random.normal(kx, (n, p), dtype) @ chol.T
  beta = 1.0 / jnp.arange(1, p + 1, dtype=dtype) ** 2
  xb = x @ beta
  t = jax.scipy.stats.norm.cdf(3.0 * xb) + 0.75 * jax.random.normal(knu, (n,), dtype) - 0.5
  y = (1.2 * t + t * t + t * x[:, 0] + 1.2 * xb
       + jax.random.normal(keps, (n,), dtype))
  return DoseResponseData(t=t, x=x, y=y)


def colangelo_lee_effect(t: Array) -> Array:
  """theta(t) = 1.2 t + t^2 for the ``colangelo_lee`` design (E[X] = 0).

  Example:
    >>> round(float(colangelo_lee_effect(1.0)), 6)
    2.2
  """
  return 1.2 * t + t * t


class Design(NamedTuple):
  """A design: ``sample(key, n, **params) -> DoseResponseData`` and its true ``effect(t)``."""
  sample: Callable[..., DoseResponseData]
  effect: Callable[[Array], Array]


DESIGNS: dict[str, Design] = {
    "overlap": Design(overlap_design, overlap_effect),
    "colangelo_lee": Design(colangelo_lee_design, colangelo_lee_effect),
}


def load_dose_response_csv(path: str | os.PathLike, treatment: str, outcome: str,
                           covariates: Sequence[str] | None = None,
                           delimiter: str = ",") -> DoseResponseData:
  """Reads an observational table (header row, numeric columns) from a local CSV file.

  Args:
    path: the CSV file.
    treatment, outcome: column names of T and Y.
    covariates: column names of X; default all other columns.
    delimiter: the field separator.

  Returns:
    DoseResponseData with float arrays. Missing file, missing columns, non-numeric
    or missing values raise ValueError naming them.

  Example:
    >>> data = load_dose_response_csv("obs.csv", treatment="dose", outcome="y",
    ...                               covariates=["age", "income"])  # doctest: +SKIP
  """
  if os.path.isdir(path):
    raise ValueError(f"dose-response table {path} is a directory; expected a CSV file")
  if not os.path.isfile(path):
    raise ValueError(f"dose-response table not found: {path}")
  with open(path, newline="") as f:
    header = [h.strip() for h in f.readline().rstrip("\r\n").split(delimiter)]
  covariates = list(covariates) if covariates is not None else [
      h for h in header if h not in (treatment, outcome)]
  missing = [c for c in [treatment, outcome, *covariates] if c not in header]
  if missing:
    raise ValueError(f"columns {missing} not in {path}; it has {header}")
  if not covariates:
    raise ValueError(f"no covariate columns in {path}; header is {header}")
  try:
    table = np.loadtxt(path, delimiter=delimiter, skiprows=1, ndmin=2, dtype=np.float64)
  except ValueError as e:
    raise ValueError(f"{path} has a non-numeric or missing value: {e}") from None
  col = {h: i for i, h in enumerate(header)}
  if table.shape[0] < 2:
    raise ValueError(f"{path} has {table.shape[0]} data rows; expected at least 2")
  if table.shape[1] != len(header):
    raise ValueError(f"{path} has {table.shape[1]} columns but its header names "
                     f"{len(header)}")
  if not np.all(np.isfinite(table)):
    row, c = (int(i) for i in np.argwhere(~np.isfinite(table))[0])
    raise ValueError(f"{path} has a non-finite value {table[row, c]} in column "
                     f"{header[c]!r} at data row {row + 1}; expected finite numbers")
  return DoseResponseData(
      t=jnp.asarray(table[:, col[treatment]]),
      x=jnp.asarray(table[:, [col[c] for c in covariates]]),
      y=jnp.asarray(table[:, col[outcome]]))
