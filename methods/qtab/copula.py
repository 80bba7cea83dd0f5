"""The SDV Gaussian-copula baseline, on SDV's own copula engine and without torch.

SDV's ``GaussianCopulaSynthesizer`` (Patki et al. 2016, "The Synthetic Data Vault")
turns every column into a float, fits a univariate marginal F_j to each, and models
their dependence by the correlation R of the normal scores,

  z_j = Phi^{-1}(F_j(x_j)),   z ~ N(0, R),   x_j = F_j^{-1}(Phi(z_j)),

with R the sample correlation of z over the training rows. ``sdv`` itself pulls
torch (through ctgan), so this module drives the same engine, ``copulas``
(``copulas.multivariate.GaussianMultivariate``), as SDV does:

- numeric columns get the marginal ``numerical_distribution`` (SDV's
  ``default_distribution``, 'beta' since SDV 1.0; also 'truncnorm', 'norm',
  'gamma', 'uniform', 'gaussian_kde'), and samples are clipped to the training
  range (SDV's ``enforce_min_max_values=True``);
- categorical columns go through SDV's ``UniformEncoder`` (RDT): category c, of
  training frequency p_c, owns the interval [a_c, a_c + p_c) of [0, 1)
  (categories by decreasing frequency), a value is encoded as a uniform draw
  inside its interval and decoded by the interval a float falls in. The encoded
  column is Uniform(0, 1) by construction, so its marginal is the copulas
  ``UniformUnivariate`` (the Beta that SDV fits there converges to it).

Sampling is deterministic given its seed: the engine draws from NumPy's global
generator, which ``GaussianMultivariate``'s ``random_state`` seeds and restores.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

DISTRIBUTIONS = ("beta", "truncnorm", "norm", "gamma", "uniform", "gaussian_kde")


class UniformCodes(NamedTuple):
  """SDV's UniformEncoder state for one categorical column.

  Attributes:
    categories: (K,) the training categories, by decreasing frequency.
    edges: (K + 1,) interval edges, 0 = a_0 < ... < a_K = 1; category k owns
      [edges[k], edges[k + 1]).
  """
  categories: np.ndarray
  edges: np.ndarray


def uniform_fit(values: Any) -> UniformCodes:
  """Gives each category an interval of [0, 1) as long as its frequency.

    a_0 = 0,   a_{k+1} = a_k + p_k,   p_k = #{i: v_i = c_k} / n,

  with c_0, c_1, ... the categories by decreasing frequency (ties by name), as
  RDT's ``UniformEncoder`` (used by SDV's ``GaussianCopulaSynthesizer``) does.

  Args:
    values: (n,) category labels (n >= 1).

  Returns:
    The column's `UniformCodes`.
  """
  values = np.asarray(values).astype(str)
  if values.size == 0:
    raise ValueError("uniform_fit needs at least one value")
  categories, counts = np.unique(values, return_counts=True)
  order = np.lexsort((categories, -counts))  # By count descending, then by name.
  edges = np.concatenate([[0.0], np.cumsum(counts[order]) / values.size])
  edges[-1] = 1.0
  return UniformCodes(categories[order], edges)


def uniform_encode(codes: UniformCodes, values: Any, rng: np.random.Generator) -> np.ndarray:
  """u_i ~ Uniform[a_k, a_{k+1}) for v_i = c_k (strictly inside the interval).

  Args:
    codes: the column's `UniformCodes`.
    values: (n,) labels, each one of `codes.categories`.
    rng: the generator of the draws.

  Returns:
    (n,) float64 codes in [0, 1).
  """
  values = np.asarray(values).astype(str)
  lookup = {c: k for k, c in enumerate(codes.categories)}
  unknown = set(np.unique(values)) - set(lookup)
  if unknown:
    raise ValueError(f"uniform_encode got categories not seen in fit: {sorted(unknown)[:5]}")
  index = np.fromiter((lookup[v] for v in values), np.int64, values.size)
  low, high = codes.edges[index], codes.edges[index + 1]
  u = low + (high - low) * rng.uniform(size=values.size)
  return np.clip(u, low, np.nextafter(high, low))  # Rounding never reaches the next one.


def uniform_decode(codes: UniformCodes, u: Any) -> np.ndarray:
  """v = c_k for the interval a_k <= u < a_{k+1} (u outside [0, 1) is clipped).

  Args:
    codes: the column's `UniformCodes`.
    u: (n,) floats.

  Returns:
    (n,) labels (str), each one of `codes.categories`.
  """
  index = np.searchsorted(codes.edges, np.asarray(u, np.float64), side="right") - 1
  return codes.categories[np.clip(index, 0, len(codes.categories) - 1)]


@contextlib.contextmanager
def _quiet():
  """Silences the engine's warnings, prints and log lines (restored afterwards)."""
  logger = logging.getLogger("copulas")
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
      warnings.simplefilter("ignore")
      yield
  finally:
    logger.setLevel(level)


def _distribution(name: str):
  """The copulas univariate class SDV maps `name` to."""
  from copulas import univariate  # pylint: disable=g-import-not-at-top
  return {"beta": univariate.BetaUnivariate, "truncnorm": univariate.TruncatedGaussian,
          "norm": univariate.GaussianUnivariate, "gamma": univariate.GammaUnivariate,
          "uniform": univariate.UniformUnivariate,
          "gaussian_kde": univariate.GaussianKDE}[name]


class GaussianCopula:
  """SDV's Gaussian-copula synthesizer: marginals F_j, normal scores z ~ N(0, R).

  Fit: u_j = F_j(x_j) with F_j fitted per column (categoricals first mapped to
  [0, 1) by `uniform_encode`), R = corr(Phi^{-1}(u)). Sample: z ~ N(0, R),
  x_j = F_j^{-1}(Phi(z_j)), numeric values clipped to the training range and
  categoricals decoded by `uniform_decode`.

  Example:
    >>> model = GaussianCopula(schema).fit(frame)
    >>> synthetic = model.sample(1000, seed=0)   # columns == schema.columns

  References:
    Patki, Wedge, Veeramachaneni (2016), "The Synthetic Data Vault", DSAA; SDV's
    ``GaussianCopulaSynthesizer`` and RDT's ``UniformEncoder``.
  """

  def __init__(self, schema: Any, numerical_distribution: str = "beta", seed: int = 0):
    """Args: schema: the table's `Schema` (numeric, categorical, columns);
    numerical_distribution: one of `DISTRIBUTIONS`, the numeric marginals;
    seed: seeds the categorical encoding draws of `fit`."""
    if numerical_distribution not in DISTRIBUTIONS:
      raise ValueError(f"numerical_distribution must be one of {DISTRIBUTIONS}, "
                       f"got {numerical_distribution!r}")
    if not tuple(schema.columns):
      raise ValueError("GaussianCopula needs a schema with at least one column")
    self.schema = schema
    self.numerical_distribution = numerical_distribution
    self.seed = int(seed)
    self._model = None
    self._codes: dict[str, UniformCodes] = {}
    self._ranges: dict[str, tuple[float, float]] = {}

  def fit(self, frame: pd.DataFrame) -> "GaussianCopula":
    """Fits the marginals and the normal-score correlation to `frame`; returns self.

    Args:
      frame: the training rows, with (at least) the columns of `schema.columns`.
    """
    from copulas.multivariate import GaussianMultivariate  # pylint: disable=g-import-not-at-top
    missing = [c for c in self.schema.columns if c not in frame.columns]
    if missing or len(frame) < 2:
      raise ValueError(f"fit needs >= 2 rows with every schema column; missing {missing}, "
                       f"got {len(frame)} rows")
    rng = np.random.default_rng(self.seed)
    data, marginals = {}, {}
    for column in self.schema.numeric:
      values = frame[column].to_numpy(np.float64)
      if not np.all(np.isfinite(values)):
        raise ValueError(f"numeric column {column!r} has NaN or infinite values")
      self._ranges[column] = (float(values.min()), float(values.max()))
      data[column], marginals[column] = values, _distribution(self.numerical_distribution)
    for column in self.schema.categorical:
      self._codes[column] = uniform_fit(frame[column])
      data[column] = uniform_encode(self._codes[column], frame[column], rng)
      marginals[column] = _distribution("uniform")
    model = GaussianMultivariate(distribution=marginals)
    with _quiet():
      model.fit(pd.DataFrame(data, columns=list(self.schema.columns)))
    self._model = model
    return self

  def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
    """Draws `n` rows; the same seed gives the same rows.

    Args:
      n: number of rows (>= 1).
      seed: seeds the draw.

    Returns:
      A frame with columns `schema.columns` (numeric float64, categorical str).
    """
    if self._model is None:
      raise ValueError("GaussianCopula.sample called before fit")
    if isinstance(n, bool) or int(n) != n or n < 1:
      raise ValueError(f"n must be a positive int, got {n!r}")
    self._model.set_random_state(int(seed))
    with _quiet():
      raw = self._model.sample(int(n))
    out = {}
    for column in self.schema.columns:
      if column in self._codes:
        out[column] = pd.Series(uniform_decode(self._codes[column], raw[column]).tolist(),
                                dtype=object)
      else:
        low, high = self._ranges[column]
        values = np.nan_to_num(raw[column].to_numpy(np.float64), nan=(low + high) / 2)
        out[column] = np.clip(values, low, high)
    return pd.DataFrame(out, columns=list(self.schema.columns))
