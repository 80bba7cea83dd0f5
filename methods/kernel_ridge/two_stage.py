"""Two-stage kernel ridge regression for the dose-response of a continuous treatment.

Target: the effect function theta(t) = E_X[ mu(t, X) ], mu(t, x) = E[Y | T=t, X=x],
i.e. the regression function averaged under the *product* law P_T x P_X rather than
the observed joint law of (T, X) (which carries the confounding).

Stage 1 fits mu by KRR of Y on (T, X) with a product kernel k_T(t, t') k_X(x, x'):

    mu_hat(t, x) = sum_l c_l k_T(t, t_l) k_X(x, x_l).

Stage 2 builds pseudo-outcomes whose regression on T alone targets theta, which
corrects the joint-to-product distribution shift without a conditional density
of T given X:

  - "average":  Y~_i = (1/n) sum_j mu_hat(T_i, X_j)
                      = sum_l c_l e_l k_T(T_i, t_l),   e_l = (1/n) sum_j k_X(X_j, x_l),
    (the inner average is a kernel mean embedding of P_X, so it costs O(n m));
  - "permute":  Y~_i = (1/R) sum_r mu_hat(T_i, X_{pi_r(i)}) over R random permutations
    pi_r, i.e. stage-1 predictions on pairs drawn from P_T x P_X.

and then fits theta_hat by KRR of Y~ on T with its own kernel and ridge, so the
final estimate adapts to the (typically much simpler) smoothness of theta rather
than that of mu. With "average" and lambda_2 -> 0 the second stage reduces to the
plug-in estimator of Singh, Xu & Gretton (``marginalize`` below).

Examples assume ``import jax, jax.numpy as jnp``, ``from common import kernels`` and
``from common.data import causal``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from flax import struct
import jax
import jax.numpy as jnp

from common import checks
from common import kernels
from methods.kernel_ridge import krr

Array = jax.Array
PSEUDO_OUTCOMES = ("average", "permute")


@struct.dataclass
class EffectFunction:
  """An estimated effect function theta_hat(t) = sum_l weights_l k_T(t, centers_l).

  A pytree (it passes through ``jit``); call it on an (q,) array of treatments.
  """
  kernel: kernels.Kernel
  centers: Array  # (m,) treatment values
  weights: Array  # (m,)

  def __call__(self, t: Array) -> Array:
    return self.kernel(t, self.centers) @ self.weights


class TwoStageHyper(NamedTuple):
  """Hyperparameters of both stages (lengthscales in the units of T and X)."""
  lengthscale_t: float   # stage-1 treatment kernel
  lengthscale_x: float   # stage-1 covariate kernel
  lam1: float            # stage-1 ridge
  lengthscale_t2: float  # stage-2 treatment kernel
  lam2: float            # stage-2 ridge


class TwoStageFit(NamedTuple):
  """What ``fit_two_stage`` returns."""
  stage1: krr.KRRFit          # mu_hat over inputs (t, x)
  plug_in: EffectFunction     # average of mu_hat over the covariate sample
  effect: EffectFunction      # the two-stage estimate theta_hat
  pseudo_outcomes: Array      # (n,) the stage-2 regression targets


def check_inputs(t: Array, x: Array, y: Array | None = None
                 ) -> tuple[Array, Array, Array | None]:
  """Validates the sample: t (n,), x (n,) or (n, p), y (n,), n >= 2, all finite.

  Integer (or boolean) arrays are promoted to the default float dtype: the
  hyperparameters are cast to the dtype of t, so integer doses would otherwise turn
  lengthscales and ridges into 0 and give NaN fits. NaN or inf values raise (on
  concrete arrays; tracers are only shape-checked).

  Args:
    t: treatments; x: covariates; y: outcomes, or None to skip their check.

  Returns:
    (t, x as an (n, p) matrix, y or None), float arrays; a ValueError names the
    offending array and its shape or first non-finite index otherwise.

  Example:
    >>> t, x, y = check_inputs(jnp.arange(4), jnp.zeros(4), jnp.zeros(4))
    >>> x.shape, t.dtype
    ((4, 1), dtype('float32'))
  """
  t = checks.as_float("treatment t", t)
  x = kernels.as_matrix(checks.as_float("covariates x", x))
  if t.ndim != 1:
    raise ValueError(f"treatment t must have shape (n,), got {t.shape}")
  if x.shape[0] != t.shape[0]:
    raise ValueError(f"covariates x must have {t.shape[0]} rows like t, got {x.shape}")
  if y is not None:
    y = checks.as_float("outcome y", y)
    if y.shape != t.shape:
      raise ValueError(f"outcome y must have shape {t.shape}, got {y.shape}")
  if t.shape[0] < 2:
    raise ValueError(f"need at least 2 observations, got {t.shape[0]}")
  checks.check_finite("treatment t", t)
  checks.check_finite("covariates x", x)
  if y is not None:
    checks.check_finite("outcome y", y)
  return t, x, y


def product_kernel(name_t: str, name_x: str, lengthscale_t, lengthscale_x
                   ) -> kernels.ProductKernel:
  """The stage-1 kernel k((t, x), (t', x')) = k_T(t, t') k_X(x, x') over inputs (t, x).

  Args:
    name_t, name_x: kernel names from ``common.kernels.KERNELS``.
    lengthscale_t, lengthscale_x: their lengthscales.

  Returns:
    A ``common.kernels.ProductKernel`` with factors (k_T, k_X).

  Example:
    >>> k = product_kernel("rbf", "matern32", 0.5, 1.0)
    >>> k((jnp.zeros(3), jnp.zeros((3, 2))), (jnp.ones(4), jnp.ones((4, 2)))).shape
    (3, 4)
  """
  return kernels.ProductKernel(factors=(kernels.Kernel(lengthscale_t, name_t),
                                        kernels.Kernel(lengthscale_x, name_x)))


def mean_embedding(k_x: kernels.Kernel, x_centers: Array, x_population: Array,
                   chunk_size: int | None = None) -> Array:
  """e_l = (1/N) sum_j k_X(x_l, X_j): the empirical kernel mean embedding of P_X at x_l.

  The sum over j runs over blocks of ``chunk_size`` population rows, so memory is
  O(m chunk_size) however large N is (N = 10^6 with m = 1000 centres would otherwise
  be an 8 GB float64 matrix).

  Args:
    k_x: the covariate kernel.
    x_centers: (m, p) points x_l.
    x_population: (N, p) covariate sample X_j.
    chunk_size: population rows per block, or None for one block.

  Returns:
    (m,) e.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 10)[:, None]
    >>> e = mean_embedding(kernels.Kernel(0.5), x[:3], x, chunk_size=4)
  """
  n_pop = x_population.shape[0]
  if chunk_size is None or chunk_size >= n_pop:
    return jnp.mean(k_x(x_centers, x_population), axis=1)
  blocks, _ = krr.row_blocks(x_population, chunk_size)
  mask = krr.block_mask(n_pop, chunk_size, x_centers.dtype)

  def body(total, xs):
    rows, w = xs
    return total + k_x(x_centers, rows) @ w, None

  total, _ = jax.lax.scan(body, jnp.zeros(x_centers.shape[0], x_centers.dtype), (blocks, mask))
  return total / n_pop


def marginalize(stage1: krr.KRRFit, k: kernels.ProductKernel, x_population: Array,
                chunk_size: int | None = None) -> EffectFunction:
  """The plug-in effect theta(t) = (1/N) sum_j mu_hat(t, X_j) as an expansion over
  treatment centres: theta(t) = sum_l c_l e_l k_T(t, t_l), e = ``mean_embedding``.

  Args:
    stage1: mu_hat, a ``KRRFit`` over inputs (t, x) with centres (t_l, x_l).
    k: the product kernel it was fitted with.
    x_population: (N, p) covariates X_j to average over.
    chunk_size: covariate rows per block for the embedding, or None.

  Returns:
    An ``EffectFunction`` with the stage-1 treatment centres.

  Example:
    >>> t, x = jnp.linspace(-1.0, 1.0, 6), jnp.linspace(0.0, 1.0, 6)[:, None]
    >>> k = product_kernel("rbf", "rbf", 0.5, 0.5)
    >>> theta = marginalize(krr.KRRFit(centers=(t, x), weights=jnp.ones(6)), k, x)
    >>> theta(jnp.zeros(2)).shape
    (2,)
  """
  k_t, k_x = k.factors
  t_c, x_c = stage1.centers
  e = mean_embedding(k_x, x_c, x_population, chunk_size)
  return EffectFunction(kernel=k_t, centers=t_c, weights=stage1.weights * e)


def permuted_pseudo_outcomes(stage1: krr.KRRFit, k: kernels.ProductKernel, t: Array,
                             x: Array, key: Array, num_permutations: int,
                             chunk_size: int | None = None) -> Array:
  """Y~_i = (1/R) sum_r mu_hat(T_i, X_{pi_r(i)}) with R independent permutations pi_r.

  Args:
    stage1: mu_hat, a ``KRRFit`` over inputs (t, x).
    k: the product kernel it was fitted with.
    t: (n,) treatments; x: (n, p) covariates.
    key: PRNG key drawing the permutations.
    num_permutations: R.
    chunk_size: rows per prediction block, or None.

  Returns:
    (n,) pseudo-outcomes, unbiased for the covariate average of ``marginalize``.

  Example:
    >>> t, x = jnp.linspace(-1.0, 1.0, 6), jnp.linspace(0.0, 1.0, 6)[:, None]
    >>> k = product_kernel("rbf", "rbf", 0.5, 0.5)
    >>> stage1 = krr.KRRFit(centers=(t, x), weights=jnp.ones(6))
    >>> y_tilde = permuted_pseudo_outcomes(stage1, k, t, x, jax.random.PRNGKey(0), 4)
  """
  n = t.shape[0]

  def one(k_r):
    perm = jax.random.permutation(k_r, n)
    return krr.predict(k, stage1, (t, x[perm]), chunk_size)

  return jnp.mean(jax.lax.map(one, jax.random.split(key, num_permutations)), axis=0)


@functools.partial(jax.jit, static_argnames=(
    "kernel_t", "kernel_x", "pseudo", "solver", "num_landmarks", "chunk_size",
    "num_permutations"))
def _fit_two_stage(t, x, y, hyper, key, kernel_t, kernel_x, pseudo, solver,
                   num_landmarks, chunk_size, num_permutations):
  k1_key, perm_key, k2_key = (None,) * 3 if key is None else jax.random.split(key, 3)
  k = product_kernel(kernel_t, kernel_x, hyper.lengthscale_t, hyper.lengthscale_x)
  stage1 = krr._fit(k, (t, x), y, hyper.lam1, k1_key, solver, num_landmarks, chunk_size)
  plug_in = marginalize(stage1, k, x, chunk_size)
  if pseudo == "average":
    y_tilde = krr.chunked_rows(plug_in, t, chunk_size)
  else:
    y_tilde = permuted_pseudo_outcomes(stage1, k, t, x, perm_key, num_permutations,
                                       chunk_size)
  k2 = kernels.Kernel(hyper.lengthscale_t2, kernel_t)
  stage2 = krr._fit(k2, t, y_tilde, hyper.lam2, k2_key, solver, num_landmarks, chunk_size)
  effect = EffectFunction(kernel=k2, centers=stage2.centers, weights=stage2.weights)
  return TwoStageFit(stage1=stage1, plug_in=plug_in, effect=effect, pseudo_outcomes=y_tilde)


def _needs_key(solver: str, pseudo: str) -> bool:
  return solver == "nystrom" or pseudo == "permute"


def _check_hyper(hyper: TwoStageHyper) -> None:
  if not isinstance(hyper, TwoStageHyper):
    raise TypeError(f"hyper must be a TwoStageHyper, got {type(hyper).__name__}")
  for name, value in hyper._asdict().items():
    if isinstance(value, jax.core.Tracer):
      continue
    if not float(value) > 0:
      raise ValueError(f"{name} must be > 0, got {value}")
    if not float(value) < float("inf"):
      raise ValueError(f"{name} must be finite, got {value}")


def fit_two_stage(t: Array, x: Array, y: Array, hyper: TwoStageHyper, *,
                  key: Array | None = None, kernel_t: str = "rbf",
                  kernel_x: str = "rbf", pseudo: str = "average",
                  solver: str = "auto", num_landmarks: int | None = None,
                  chunk_size: int | None = 2048,
                  num_permutations: int = 8) -> TwoStageFit:
  """Fits the two-stage KRR dose-response estimator.

  Args:
    t: (n,) treatments; x: (n,) or (n, p) covariates; y: (n,) outcomes.
    hyper: lengthscales and ridges of both stages (see ``select_two_stage``).
    key: PRNG key for the Nystrom landmarks and the permutations; required when the
      solver is (or "auto" resolves to) "nystrom" or ``pseudo="permute"``, unused
      (may be None) otherwise.
    kernel_t, kernel_x: kernel names from ``common.kernels.KERNELS``.
    pseudo: "average" or "permute" (see the module docstring).
    solver: "cholesky", "cg", "nystrom" (both stages) or "auto": exact Cholesky
      below ``krr.NYSTROM_MIN_N`` rows, Nystrom from there on (the default).
    num_landmarks: Nystrom rank m of each stage, or None for ``krr.landmark_rule(n)``
      (ceil(sqrt(n) log n), capped at ``krr.MAX_LANDMARKS``).
    chunk_size: rows per block wherever an n x m or m x N kernel block is built.
    num_permutations: R for ``pseudo="permute"``.

  Returns:
    TwoStageFit; ``fit.effect(t_grid)`` evaluates theta_hat.

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 200)
    >>> hyper = TwoStageHyper(0.5, 0.3, 1e-3, 0.5, 1e-3)
    >>> theta_hat = fit_two_stage(data.t, data.x, data.y, hyper).effect
    >>> theta_hat(jnp.linspace(-1, 1, 50)).shape
    (50,)
    >>> sparse = fit_two_stage(data.t, data.x, data.y, hyper, key=jax.random.PRNGKey(1),
    ...                        solver="nystrom", num_landmarks=50)
  """
  t, x, y = check_inputs(t, x, y)
  _check_hyper(hyper)
  krr.check_chunk_size(chunk_size)
  for name in (kernel_t, kernel_x):
    kernels.get_kernel(name)  # raises on an unknown name
  if pseudo not in PSEUDO_OUTCOMES:
    raise ValueError(f"unknown pseudo-outcome rule {pseudo!r}; expected one of {PSEUDO_OUTCOMES}")
  solver, num_landmarks = krr.resolve_solver(solver, t.shape[0], num_landmarks)
  if num_permutations < 1:
    raise ValueError(f"num_permutations must be >= 1, got {num_permutations}")
  if key is None and _needs_key(solver, pseudo):
    raise ValueError(f"solver={solver!r} with pseudo={pseudo!r} at n={t.shape[0]} draws "
                     "random numbers: pass a PRNG key")
  dtype = t.dtype
  hyper = TwoStageHyper(*(jnp.asarray(v, dtype) for v in hyper))
  return _fit_two_stage(t, x, y, hyper, key, kernel_t, kernel_x, pseudo,
                        solver, num_landmarks, chunk_size, int(num_permutations))
