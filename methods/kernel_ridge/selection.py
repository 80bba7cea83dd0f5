"""Data-driven model selection for both stages, and leave-one-out selection for KRR.

Two-stage selection (pseudo-labelling on a hold-out split). The sample is split
into a training part D1 and a validation part D2.

1. An imputation model mu_tilde is fitted on D2 alone (KRR on (T, X), lengthscales
   and ridge by exact leave-one-out error). Its covariate average gives
   pseudo-labels theta_tilde(T_i) = (1/N) sum_j mu_tilde(T_i, X_j) at the D2
   treatments, i.e. on the treatment marginal the final error is measured under.
2. Every candidate (lengthscale_t, lengthscale_x, lambda_1, lengthscale_t2,
   lambda_2) is fitted on D1 and scored by
       (1/|D2|) sum_{i in D2} (theta_hat(T_i) - theta_tilde(T_i))^2,
   the error of the *final* effect estimate against the pseudo-labels, not the
   stage-1 prediction error; the minimiser is returned.

No conditional density of T given X is estimated. Because overlap and the
spectral decay of the kernel only enter through this score, the selected
regularisation adapts to both. All lambdas of one lengthscale come from one
eigendecomposition (``krr.spectral_path``), so the grid is cheap: one
eigendecomposition per stage-1 lengthscale pair and one per stage-2 lengthscale.
For large n, selection runs on a random subsample of ``max_n`` points and the
selected hyperparameters are then used on the full sample, with the solver that
suits the full n: the exact Cholesky solve below ``krr.NYSTROM_MIN_N`` rows, Nystrom
with ``krr.landmark_rule(n)`` landmarks from there on (``Selected.solver`` and
``Selected.num_landmarks``, which ``fit_two_stage``'s default ``solver="auto"`` also
picks).

Examples assume ``import jax, jax.numpy as jnp``, ``from common import kernels`` and
``from common.data import causal``.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from common import kernels
from methods.kernel_ridge import krr
from methods.kernel_ridge import two_stage

Array = jax.Array


class SelectionGrid(NamedTuple):
  """Candidate hyperparameters. Lengthscales are multiples of the median heuristic.

  ``val_fraction`` of the (sub)sample is the validation part D2; selection runs on
  a random subsample of ``max_n`` rows when the sample is larger.
  """
  scales_t: Sequence[float] = (0.5, 1.0, 2.0)
  scales_x: Sequence[float] = (0.5, 1.0, 2.0)
  lams1: Sequence[float] = (1e-5, 1e-4, 1e-3, 1e-2)
  scales_t2: Sequence[float] = (0.25, 0.5, 1.0, 2.0)
  lams2: Sequence[float] = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
  val_fraction: float = 0.5
  max_n: int = 2000


class Selected(NamedTuple):
  """What ``select_two_stage`` returns."""
  hyper: two_stage.TwoStageHyper
  score: float         # pseudo-label error of the chosen candidate
  scores: np.ndarray   # (|scales_t|, |scales_x|, |lams1|, |scales_t2|, |lams2|)
  solver: str = "cholesky"  # for the fit on all n rows: krr.resolve_solver("auto", n)
  num_landmarks: int = 1    # its Nystrom rank m (unused by "cholesky")

  def fit_kwargs(self) -> dict:
    """``fit_two_stage`` keyword arguments for the chosen solver and rank."""
    return dict(solver=self.solver, num_landmarks=self.num_landmarks)


class LooSelected(NamedTuple):
  """What ``loo_select`` returns."""
  scale_index: int
  lam: float
  loo_mse: float
  alphas: Array        # dual coefficients of the chosen model on the given data


def check_grid(grid: SelectionGrid) -> None:
  """Raises ValueError unless every candidate list is non-empty and > 0,
  0 < val_fraction < 1 and max_n >= 8.

  Args:
    grid: the candidates.

  Example:
    >>> check_grid(SelectionGrid(scales_t=(1.0,)))
  """
  for name in ("scales_t", "scales_x", "lams1", "scales_t2", "lams2"):
    values = getattr(grid, name)
    if len(values) == 0 or not all(0 < float(v) < np.inf for v in values):
      raise ValueError(f"selection grid {name} must be non-empty, > 0 and finite, "
                       f"got {values}")
  if not 0 < grid.val_fraction < 1:
    raise ValueError(f"val_fraction must lie in (0, 1), got {grid.val_fraction}")
  if grid.max_n < 8:
    raise ValueError(f"max_n must be >= 8, got {grid.max_n}")


def base_lengthscales(t: Array, x: Array) -> tuple[Array, Array]:
  """Median-heuristic lengthscales (h_t, h_x) of the treatment and the covariates:
  h = median_{i<j} ||z_i - z_j||.

  Args:
    t: (n,) treatments; x: (n, p) covariates.

  Returns:
    (h_t, h_x), the units of the grid's scales. A zero median (e.g. a constant
    treatment) would make every lengthscale 0 and every fit NaN, so it raises a
    ValueError naming the array (on concrete arrays).

  Example:
    >>> h_t, h_x = base_lengthscales(jnp.linspace(0.0, 1.0, 9), jnp.linspace(0.0, 1.0, 9))
  """
  h_t, h_x = kernels.median_heuristic(t), kernels.median_heuristic(x)
  for name, h in (("treatment t", h_t), ("covariates x", h_x)):
    if not isinstance(h, jax.core.Tracer) and not float(h) > 0:
      raise ValueError(f"{name} has median pairwise distance {float(h)} (most rows are "
                       "equal); the median-heuristic lengthscale must be > 0")
  return h_t, h_x


@jax.jit
def _spectral(gram, y, lams):
  return krr.spectral_path(gram, y, lams)


_cholesky = jax.jit(krr.solve_cholesky)


def loo_select(kernel_list: Sequence, z, y: Array, lams: Sequence[float], *,
               max_n: int | None = None, key: Array | None = None) -> LooSelected:
  """Chooses (kernel, lambda) minimising the exact leave-one-out error of KRR:

      argmin_{k, lambda} (1/n) sum_i ((y_i - f_i) / (1 - H_ii))^2,
      H = K (K + n lambda I)^{-1}   (see ``krr.spectral_path``).

  With ``max_n`` below n, the leave-one-out search runs on a random subsample of
  ``max_n`` rows drawn with ``key``, and the chosen model is then refitted on all
  rows by a Cholesky solve; ``alphas`` always refer to all rows of ``z``.

  Args:
    kernel_list: candidate kernels ``k(z_a, z_b) -> Gram matrix``.
    z: inputs, a pytree with leading axis n.
    y: (n,) targets.
    lams: candidate ridges.
    max_n: the largest sample the search runs on, or None for all rows.
    key: PRNG key drawing the subsample; required when n > max_n.

  Returns:
    LooSelected(scale_index, lam, loo_mse, alphas).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 30)
    >>> best = loo_select([kernels.Kernel(s) for s in (0.2, 0.5)], x, jnp.sin(3 * x),
    ...                   (1e-4, 1e-2), max_n=20, key=jax.random.PRNGKey(0))
  """
  if len(kernel_list) == 0:
    raise ValueError("kernel_list must hold at least one candidate kernel, got none")
  if len(lams) == 0 or not all(0 < float(v) < np.inf for v in lams):
    raise ValueError(f"lams must be non-empty, > 0 and finite, got {lams}")
  n = krr.num_rows(z)
  y = checks.as_float("targets y", y)
  if y.shape != (n,):
    raise ValueError(f"targets y must have shape ({n},), got {y.shape}")
  z = jax.tree_util.tree_map(lambda a: checks.as_float("inputs z", a), z)
  for leaf in jax.tree_util.tree_leaves(z):
    checks.check_finite("inputs z", leaf)
  checks.check_finite("targets y", y)
  z_sel, y_sel = z, y
  if max_n is not None and n > max_n:
    if key is None:
      raise ValueError(f"leave-one-out selection on a subsample of max_n={max_n} of "
                       f"n={n} rows needs a PRNG key")
    idx = jax.random.choice(key, n, (max_n,), replace=False)
    z_sel, y_sel = krr.take_rows(z, idx), y[idx]
  lams_arr = jnp.asarray(lams, y.dtype)
  best = None
  for i, k in enumerate(kernel_list):
    path = _spectral(k(z_sel, z_sel), y_sel, lams_arr)
    j = int(jnp.argmin(path.loo_mse))
    mse = float(path.loo_mse[j])
    if best is None or mse < best.loo_mse:
      best = LooSelected(scale_index=i, lam=float(lams[j]), loo_mse=mse, alphas=path.alphas[j])
  if z_sel is not z:
    k = kernel_list[best.scale_index]
    best = best._replace(alphas=_cholesky(k(z, z), y, jnp.asarray(best.lam, y.dtype)))
  return best


@jax.jit
def _candidate_scores(gram1, kt1_marg, y1, lams1, eig2_s, eig2_u, k2_cross, lams2,
                      theta_tilde):
  """Scores all (lambda_1, lambda_2) for one (stage-1, stage-2) lengthscale choice.

  gram1: (n1, n1) stage-1 product Gram on D1; kt1_marg: (n1, n1) the treatment
  Gram on D1 with columns scaled by the mean embedding e_l; eig2_*: eigenpairs of
  the stage-2 treatment Gram on D1; k2_cross: (n2, n1) stage-2 Gram D2 x D1.
  """
  n1 = y1.shape[0]
  alphas1 = krr.spectral_path(gram1, y1, lams1).alphas               # (L1, n1)
  y_tilde = alphas1 @ kt1_marg.T                                     # (L1, n1)
  uy = y_tilde @ eig2_u                                              # (L1, n1)
  shrink = 1.0 / (eig2_s[None, :] + n1 * lams2[:, None])             # (L2, n1)
  alphas2 = (uy[:, None, :] * shrink[None, :, :]) @ eig2_u.T         # (L1, L2, n1)
  theta_val = alphas2 @ k2_cross.T                                   # (L1, L2, n2)
  return jnp.mean((theta_val - theta_tilde) ** 2, axis=-1)


def _split(t, x, y, key, grid):
  """((t1, x1, y1), (t2, x2, y2)): D1 and D2 of a subsample of at most max_n rows."""
  sub_key, split_key = jax.random.split(key)
  n = t.shape[0]
  if n > grid.max_n:
    idx = jax.random.choice(sub_key, n, (grid.max_n,), replace=False)
    t, x, y = t[idx], x[idx], y[idx]
    n = grid.max_n
  perm = jax.random.permutation(split_key, n)
  n2 = max(4, int(round(grid.val_fraction * n)))
  i2, i1 = perm[:n2], perm[n2:]
  return (t[i1], x[i1], y[i1]), (t[i2], x[i2], y[i2])


def _pseudo_labels(d2, x_population, grid, stage1_kernel) -> Array:
  """theta~(T_i) = (1/N) sum_j mu~(T_i, X_j) at the D2 treatments, mu~ fitted on D2."""
  t2, x2, y2 = d2
  pairs = [(st, sx) for st in grid.scales_t for sx in grid.scales_x]
  imputer = loo_select([stage1_kernel(st, sx) for st, sx in pairs], (t2, x2), y2,
                       grid.lams1)
  k_imp = stage1_kernel(*pairs[imputer.scale_index])
  return two_stage.marginalize(
      krr.KRRFit(centers=(t2, x2), weights=imputer.alphas), k_imp, x_population,
      chunk_size=2048)(t2)


def _score_grid(d1, t2, theta_tilde, x_population, grid, h_t, h_x, kernel_t, kernel_x):
  """Pseudo-label errors of every candidate fitted on D1: the ``Selected.scores`` array."""
  t1, x1, y1 = d1
  dtype = y1.dtype
  lams1 = jnp.asarray(grid.lams1, dtype)
  lams2 = jnp.asarray(grid.lams2, dtype)
  stage2 = []
  for s2 in grid.scales_t2:
    k2 = kernels.Kernel(s2 * h_t, kernel_t)
    s, u = jnp.linalg.eigh(k2(t1, t1))
    stage2.append((jnp.maximum(s, 0.0), u, k2(t2, t1)))
  scores = np.zeros((len(grid.scales_t), len(grid.scales_x), len(grid.lams1),
                     len(grid.scales_t2), len(grid.lams2)))
  # Covariate Grams and mean embeddings depend only on the covariate lengthscale.
  covariate = []
  for sx in grid.scales_x:
    k_x = kernels.Kernel(sx * h_x, kernel_x)
    covariate.append((k_x(x1, x1), two_stage.mean_embedding(k_x, x1, x_population,
                                                             chunk_size=2048)))
  for a, st in enumerate(grid.scales_t):
    gram_t = kernels.Kernel(st * h_t, kernel_t)(t1, t1)
    for b, (gram_x, e) in enumerate(covariate):
      gram1 = gram_t * gram_x
      for c, (s, u, cross) in enumerate(stage2):
        scores[a, b, :, c, :] = np.asarray(_candidate_scores(
            gram1, gram_t * e[None, :], y1, lams1, s, u, cross, lams2, theta_tilde))
  return np.where(np.isfinite(scores), scores, np.inf)


def select_two_stage(t: Array, x: Array, y: Array, key: Array,
                     grid: SelectionGrid = SelectionGrid(), *, kernel_t: str = "rbf",
                     kernel_x: str = "rbf") -> Selected:
  """Selects both stages' lengthscales and ridges by pseudo-labels on a hold-out split:

      argmin over the grid of (1/|D2|) sum_{i in D2} (theta_hat_D1(T_i) - theta~(T_i))^2,

  where theta_hat_D1 is the two-stage fit on D1 and theta~ the covariate average of
  an imputation model fitted on D2 (see the module docstring).

  It also picks the solver for the final fit on all n rows: the exact Cholesky
  solve below ``krr.NYSTROM_MIN_N`` = 4000 rows, Nystrom with m =
  ``krr.landmark_rule(n)`` = min(ceil(sqrt(n) log n), 1000) landmarks from there on.
  At the threshold the Nystrom fit already matches the exact fit's integrated squared
  error to within 1% at a fraction of its O(n^3) cost, and the exact solve's n x n
  matrices stop fitting in memory a little above n = 20000 (measurements in
  docs/benchmarks.md, "Two-stage kernel ridge").

  Args:
    t, x, y: the sample (see ``two_stage.check_inputs``).
    key: PRNG key for the subsample and the split.
    grid: candidate values (lengthscales as multiples of the median heuristic).
    kernel_t, kernel_x: kernel names.

  Returns:
    Selected(hyper, score, scores, solver, num_landmarks) with absolute lengthscales
    in ``hyper``; pass ``**chosen.fit_kwargs()`` (and a key when the solver is
    "nystrom") to ``fit_two_stage``.

  Example:
    >>> data = causal.overlap_design(jax.random.PRNGKey(0), 60)
    >>> grid = SelectionGrid(scales_t=(1.0,), scales_x=(1.0,), lams1=(1e-3,),
    ...                      scales_t2=(1.0,), lams2=(1e-4, 1e-3))
    >>> chosen = select_two_stage(data.t, data.x, data.y, jax.random.PRNGKey(1), grid)
    >>> chosen.scores.shape, chosen.solver
    ((1, 1, 1, 1, 2), 'cholesky')
  """
  t, x, y = two_stage.check_inputs(t, x, y)
  if key is None:
    raise TypeError("select_two_stage needs a PRNG key (key) for the split, got None")
  check_grid(grid)
  n = t.shape[0]
  if n < 8:
    raise ValueError(f"model selection needs at least 8 observations, got {n}")
  h_t, h_x = base_lengthscales(t, x)
  d1, d2 = _split(t, x, y, key, grid)

  def stage1_kernel(st, sx):
    return two_stage.product_kernel(kernel_t, kernel_x, st * h_t, sx * h_x)

  theta_tilde = _pseudo_labels(d2, x, grid, stage1_kernel)
  scores = _score_grid(d1, d2[0], theta_tilde, x, grid, h_t, h_x, kernel_t, kernel_x)
  if not np.isfinite(scores).any():
    raise ValueError("select_two_stage: every candidate of the grid scored NaN or inf; "
                     "expected at least one finite pseudo-label error")
  a, b, c, d, e_ = np.unravel_index(np.argmin(scores), scores.shape)
  hyper = two_stage.TwoStageHyper(
      lengthscale_t=float(grid.scales_t[a] * h_t),
      lengthscale_x=float(grid.scales_x[b] * h_x),
      lam1=float(grid.lams1[c]),
      lengthscale_t2=float(grid.scales_t2[d] * h_t),
      lam2=float(grid.lams2[e_]))
  solver, num_landmarks = krr.resolve_solver("auto", n, None)
  return Selected(hyper=hyper, score=float(scores[a, b, c, d, e_]), scores=scores,
                  solver=solver, num_landmarks=num_landmarks)
