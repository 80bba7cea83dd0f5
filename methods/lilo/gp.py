"""LILO's proxies: a pairwise-preference GP (Laplace) and an exact GP regression.

Pairwise GP (Chu & Ghahramani 2005; BoTorch's ``PairwiseGP`` defaults). A latent
utility f at n points X (n, d), already normalised to [0, 1]^d by the caller, and m
comparisons C (m, 2): row (w, l) says X[w] was preferred to X[l]. With D the m x n
matrix with +1 at (k, w_k) and -1 at (k, l_k), z = D f / sqrt(2):

    likelihood  P(w > l | f) = Phi((f_w - f_l) / sqrt(2))       (probit, noise 1)
    prior       f ~ N(0, K),  K = s * RBF_ARD(X; ell) + 1e-6 I
    MAP         f_hat = argmin S(f),  S(f) = -sum_k log Phi(z_k) + 1/2 f^T K^-1 f
    Laplace     log p(C | ell, s) ~= -S(f_hat) - 1/2 log|I + K Lambda|

Lambda = D^T diag(h (h + z) / 2) D is the Hessian of the negative log-likelihood,
h = phi(z) / Phi(z). It is singular (Lambda 1 = 0), so nothing here inverts it.

Hyperparameters (BoTorch's defaults): lengthscales ell with prior Gamma(2.4, 2.7)
(concentration, rate), started at its mode 1.4 / 2.7; outputscale s in [0.005, 200]
(s = 0.005 + 199.995 sigmoid(raw)) with the SmoothedBoxPrior(0.01, 100) (sigma 0.01),
started at 1. ``fit_pairwise_gp`` maximises log p(C | ell, s) + log priors over
(log ell, raw s) with optax's L-BFGS.

Exact GP: RBF-ARD with outputscale and Gaussian noise (>= 1e-4), y standardised
inside, hyperparameters by the exact marginal likelihood plus BoTorch
``SingleTaskGP``'s default priors; ``gp_posterior`` answers in the original units.

Every array function is pure, float64-friendly (callers run under
``jax.enable_x64(True)``) and jit-compiled; the one-line ValueErrors on bad inputs
run at the Python boundary on concrete values. Fits pad n and m up to a few size
buckets (padded points are independent N(0, 1) with no data, padded comparisons
have weight 0: both leave the marginal likelihood and the posterior unchanged
exactly), so a growing BO run recompiles only when it crosses a bucket.

Where this differs from BoTorch's ``PairwiseGP`` (all deliberate):
  - z is not clamped to [-3, 3] (BoTorch clamps it, which flattens the likelihood of
    confidently ordered pairs); ``log_ndtr`` keeps -log Phi(z) exact for any z;
  - the jitter 1e-6 is always added to K (BoTorch adds outputscale * 1e-6, growing,
    only when a Cholesky fails), and duplicate points are not merged;
  - f_hat is found by damped Newton from f = 0 at every evaluation (BoTorch: scipy
    ``fsolve`` warm-started from the previous MAP, then 2 Newton steps in torch for
    gradients; here one step carries the exact implicit gradient);
  - hyperparameters by optax L-BFGS over (log ell, raw s), one start (BoTorch: scipy
    L-BFGS-B with ell >= 1e-4 as a bound, retried from prior samples on failure).

Examples assume ``import jax, jax.numpy as jnp`` and ``from methods.lilo import gp``.

References:
  W. Chu, Z. Ghahramani. Preference learning with Gaussian processes. ICML 2005.
  C. E. Rasmussen, C. K. I. Williams. Gaussian Processes for Machine Learning, 2006,
  Algorithm 3.1 and Section 5.5.1.
  BoTorch ``botorch/models/pairwise_gp.py`` (defaults only; no code is copied).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp
from jax.scipy import linalg as jsl
from jax.scipy import special
from jax.scipy import stats
import numpy as np
import optax

from common import checks
from common import kernels

Array = jax.Array

JITTER = 1e-6
LENGTHSCALE_PRIOR = (2.4, 2.7)           # Gamma(concentration, rate)
OUTPUTSCALE_BOUNDS = (0.005, 200.0)      # sigmoid-scaled interval constraint
OUTPUTSCALE_BOX = (0.01, 100.0, 0.01)    # SmoothedBoxPrior(a, b, sigma)
NOISE_FLOOR = 1e-4
NEWTON_MAX_ITER = 100
NEWTON_TOL = 1e-10
GRAD_TOL = 1e-6
_SQRT2 = math.sqrt(2.0)


def rbf_ard(x: Array, y: Array, lengthscales: Array) -> Array:
  """RBF kernel with one lengthscale per input dimension.

      k(x, y) = exp(-1/2 sum_j (x_j - y_j)^2 / ell_j^2)

  ``common.kernels.rbf`` applied to inputs divided by their lengthscales.

  Args:
    x: (n, d) inputs.
    y: (k, d) inputs.
    lengthscales: (d,) positive lengthscales.

  Returns:
    The (n, k) Gram matrix.

  Example:
    >>> gp.rbf_ard(jnp.zeros((1, 2)), jnp.ones((1, 2)), jnp.ones(2))  # exp(-1)
  """
  return kernels.rbf(x / lengthscales, y / lengthscales, 1.0)


# ---------------------------------------------------------------------------
# Input checks (concrete values only; tracers skip).


def _check_points(name: str, X) -> np.ndarray | None:
  if not checks.is_concrete(X):
    return None
  shape = np.shape(X)
  if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
    raise ValueError(f"{name} must be a non-empty (n, d) array, got shape {shape}")
  checks.check_finite(name, X)
  return np.asarray(X)


def _check_comparisons(comparisons, n: int) -> None:
  if not checks.is_concrete(comparisons):
    return
  c = np.asarray(comparisons)
  if c.ndim != 2 or c.shape[1] != 2 or c.shape[0] == 0:
    raise ValueError(f"comparisons must be a non-empty (m, 2) array of point indices, "
                     f"got shape {c.shape}")
  if not np.issubdtype(c.dtype, np.integer):
    raise ValueError(f"comparisons must hold integer point indices, got dtype {c.dtype}")
  bad = np.argwhere((c < 0) | (c >= n))
  if len(bad):
    k, j = bad[0]
    raise ValueError(f"comparison {k} references point {c[k, j]}, but there are {n} points")
  same = np.flatnonzero(c[:, 0] == c[:, 1])
  if len(same):
    k = same[0]
    raise ValueError(f"comparison {k} compares point {c[k, 0]} with itself")


def _check_hyper(lengthscales, outputscale, d: int) -> None:
  if checks.is_concrete(lengthscales) and np.shape(lengthscales) != (d,):
    raise ValueError(f"lengthscales must have shape ({d},), got {np.shape(lengthscales)}")
  checks.scalar("lengthscales", lengthscales)
  checks.scalar("outputscale", outputscale)


# ---------------------------------------------------------------------------
# Padding to size buckets (fewer recompilations as a BO run grows).


def _bucket(n: int, minimum: int = 8) -> int:
  """n rounded up to one of four sizes per octave (at most 25% padding)."""
  if n <= minimum:
    return minimum
  step = max(1, 2 ** (int(math.floor(math.log2(n))) - 2))
  return -(-n // step) * step


def _pad_rows(a: np.ndarray, rows: int, fill=0) -> np.ndarray:
  pad = np.full((rows - a.shape[0],) + a.shape[1:], fill, a.dtype)
  return np.concatenate([a, pad])


# ---------------------------------------------------------------------------
# Pairwise GP: the Laplace approximation.


class PairwiseGP(NamedTuple):
  """A fitted pairwise GP (a pytree).

  Posterior at X* (see ``pairwise_posterior``): mean k*^T alpha, covariance
  K** - k*^T cov_term k*, with alpha = K^-1 f_map and
  cov_term = (I + Lambda K)^-1 Lambda = (K + Lambda^-1)^-1.
  """
  X: Array              # (n, d) inputs in [0, 1]^d
  comparisons: Array    # (m, 2) winner, loser
  lengthscales: Array   # (d,)
  outputscale: Array    # ()
  f_map: Array          # (n,) the MAP latent utility f_hat
  alpha: Array          # (n,) K^-1 f_hat
  cov_term: Array       # (n, n) (I + Lambda K)^-1 Lambda
  log_marginal: Array   # () the Laplace log marginal likelihood at the fit


def _prior_cov(lengthscales, outputscale, X, mask) -> Array:
  """K = s RBF_ARD + jitter I on real points; padded points are independent N(0, 1)."""
  K = outputscale * rbf_ard(X, X, lengthscales) * (mask[:, None] * mask[None, :])
  return K + jnp.diag(JITTER * mask + (1.0 - mask))


def _likelihood(f: Array, pairs: Array, weights: Array):
  """Negative log-likelihood sum_k -log Phi(z_k), its gradient and Hessian in f.

      grad = -D^T (h / sqrt 2),   Lambda = D^T diag(h (h + z) / 2) D,
      z = D f / sqrt 2,   h = phi(z) / Phi(z),

  with D applied by gathers and scatter-adds over the (winner, loser) ``pairs``
  (O(m) work for Lambda instead of the O(m n^2) of a dense D).
  """
  w, l = pairs[:, 0], pairs[:, 1]
  z = (f[w] - f[l]) / _SQRT2
  log_cdf = special.log_ndtr(z)
  h = jnp.exp(stats.norm.logpdf(z) - log_cdf)
  nll = -jnp.sum(weights * log_cdf)
  r = weights * h / _SQRT2
  grad = -jnp.zeros_like(f).at[w].add(r).at[l].add(-r)
  c = weights * h * (h + z) / 2.0
  n = f.shape[0]
  lam = (jnp.zeros((n, n), f.dtype).at[w, w].add(c).at[l, l].add(c)
         .at[w, l].add(-c).at[l, w].add(-c))
  return nll, grad, lam


def _newton_step(f: Array, K: Array, L: Array, pairs: Array, weights: Array):
  """One full Newton step on S from f; returns (alpha, f_new) with f_new = K alpha.

      f_new = f - (K Lambda + I)^-1 K grad S(f) = (I + K Lambda)^-1 K b,
      b = Lambda f - grad nll(f),
      alpha = b - Lambda L (I + L^T Lambda L)^-1 L^T b,     K = L L^T,

  so f_new = K alpha and f_new^T K^-1 f_new = alpha^T f_new, with no inverse of K or
  of Lambda (Rasmussen & Williams, Algorithm 3.1, with Lambda in place of W).
  """
  _, grad, lam = _likelihood(f, pairs, weights)
  b = lam @ f - grad
  B = jnp.eye(f.shape[0], dtype=f.dtype) + L.T @ lam @ L
  C = jnp.linalg.cholesky(B)
  alpha = b - lam @ (L @ jsl.cho_solve((C, True), L.T @ b))
  return alpha, K @ alpha


def _objective(f: Array, alpha: Array, pairs: Array, weights: Array) -> Array:
  """S(f) = -sum log Phi(z) + 1/2 f^T K^-1 f, with K^-1 f = alpha."""
  nll, _, _ = _likelihood(f, pairs, weights)
  return nll + 0.5 * alpha @ f


def _solve_map(K: Array, L: Array, pairs: Array, weights: Array) -> tuple[Array, Array]:
  """f_hat = argmin S by damped Newton from f = 0 (S is strictly convex).

  Each iteration takes the Newton point and the 8 step sizes 1, 1/2, ..., 1/128
  towards it, keeps the one with the lowest S, and stops when the step is below
  ``NEWTON_TOL`` (relative), S no longer decreases, or after ``NEWTON_MAX_ITER``.
  """
  n = K.shape[0]
  ts = 0.5 ** jnp.arange(8, dtype=K.dtype)

  def body(carry):
    f, alpha, s, it, _ = carry
    alpha_new, f_new = _newton_step(f, K, L, pairs, weights)
    fs = f + ts[:, None] * (f_new - f)
    alphas = alpha + ts[:, None] * (alpha_new - alpha)
    ss = jax.vmap(_objective, in_axes=(0, 0, None, None))(fs, alphas, pairs, weights)
    ss = jnp.where(jnp.isfinite(ss), ss, jnp.inf)
    i = jnp.argmin(ss)
    better = ss[i] < s
    step = jnp.where(better, jnp.max(jnp.abs(fs[i] - f)), 0.0)
    return (jnp.where(better, fs[i], f), jnp.where(better, alphas[i], alpha),
            jnp.where(better, ss[i], s), it + 1, step)

  def cond(carry):
    f, _, _, it, step = carry
    return (it < NEWTON_MAX_ITER) & (step > NEWTON_TOL * (1.0 + jnp.max(jnp.abs(f))))

  zeros = jnp.zeros(n, K.dtype)
  s0 = _objective(zeros, zeros, pairs, weights)
  f, alpha, _, _, _ = lax.while_loop(
      cond, body, (zeros, zeros, s0, jnp.asarray(0), jnp.asarray(jnp.inf, K.dtype)))
  return f, alpha


def _laplace(lengthscales, outputscale, X, pairs, weights, mask):
  """(log marginal, f_hat, alpha, Lambda, L, C) at the MAP, differentiable in (ell, s).

  f_hat is found with no gradient (``stop_gradient`` on K), then ONE Newton step is
  taken from it inside the differentiated function. At the fixed point f_hat(theta)
  = N(f_hat(theta), theta) of the Newton map N, dN/df = 0 (Newton converges
  quadratically), so d f_hat / d theta = dN/d theta: the single step carries the
  exact implicit derivative of f_hat, with no backpropagation through the solve.
  """
  K = _prior_cov(lengthscales, outputscale, X, mask)
  L = jnp.linalg.cholesky(K)
  f_hat, _ = _solve_map(lax.stop_gradient(K), lax.stop_gradient(L), pairs, weights)
  f_hat = lax.stop_gradient(f_hat)
  alpha, f = _newton_step(f_hat, K, L, pairs, weights)
  nll, _, lam = _likelihood(f, pairs, weights)
  B = jnp.eye(f.shape[0], dtype=f.dtype) + L.T @ lam @ L
  C = jnp.linalg.cholesky(B)
  log_marginal = -(nll + 0.5 * alpha @ f) - jnp.sum(jnp.log(jnp.diag(C)))
  return log_marginal, f, alpha, lam, L, C


def log_prior(lengthscales, outputscale) -> Array:
  """The pairwise GP's hyperprior (BoTorch's defaults), as ``fit_pairwise_gp`` adds it.

      log p(ell, s) = sum_j log Gamma(ell_j; 2.4, rate 2.7) + log SmoothedBox(s; 0.01, 100)

  SmoothedBox(a, b, sigma = 0.01): flat on [a, b] with N(0, sigma^2) tails outside,
      log p(s) = log N(max(|s - (a+b)/2| - (b-a)/2, 0); 0, sigma^2)
                 - log(1 + (b - a) / (sqrt(2 pi) sigma)).

  Args:
    lengthscales: (d,) RBF lengthscales.
    outputscale: the kernel's scale s.

  Returns:
    The scalar log density.

  Example:
    >>> gp.log_prior(jnp.full(2, 1.4 / 2.7), 1.0)
  """
  conc, rate = LENGTHSCALE_PRIOR
  lp = jnp.sum(stats.gamma.logpdf(lengthscales, conc, scale=1.0 / rate))
  a, b, sigma = OUTPUTSCALE_BOX
  dist = jnp.maximum(jnp.abs(outputscale - (a + b) / 2) - (b - a) / 2, 0.0)
  lp_s = stats.norm.logpdf(dist, 0.0, sigma) - math.log1p((b - a) / (math.sqrt(2 * math.pi)
                                                                     * sigma))
  return lp + lp_s


def _outputscale(raw: Array) -> Array:
  lo, hi = OUTPUTSCALE_BOUNDS
  return lo + (hi - lo) * jax.nn.sigmoid(raw)


def _raw_outputscale(s) -> Array:
  lo, hi = OUTPUTSCALE_BOUNDS
  p = (jnp.asarray(s) - lo) / (hi - lo)
  return jnp.log(p) - jnp.log1p(-p)


def _lbfgs(loss, params, steps: int):
  """Minimises ``loss`` from ``params`` with optax L-BFGS (zoom line search) for at
  most ``steps`` iterations or until ||grad|| < GRAD_TOL; returns the best finite
  iterate seen (the start included) and its loss."""
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(loss)
  v0 = loss(params)

  def body(carry):
    p, state, best_p, best_v, it = carry
    value, grad = value_and_grad(p, state=state)
    updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=loss)
    p = optax.apply_updates(p, updates)
    value = optax.tree.get(state, "value")
    better = jnp.isfinite(value) & (value < best_v)
    best_p = jax.tree.map(lambda a, b: jnp.where(better, a, b), p, best_p)
    return p, state, best_p, jnp.where(better, value, best_v), it + 1

  def cond(carry):
    p, state, _, _, it = carry
    grad_norm = optax.tree.norm(optax.tree.get(state, "grad"))
    value = optax.tree.get(state, "value")
    finite = jnp.isfinite(value) & jnp.all(jnp.isfinite(jnp.concatenate(
        [jnp.ravel(x) for x in jax.tree.leaves(p)])))
    return (it == 0) | ((it < steps) & (grad_norm >= GRAD_TOL) & finite)

  init = (params, opt.init(params), params, jnp.where(jnp.isfinite(v0), v0, jnp.inf),
          jnp.asarray(0))
  _, _, best_p, best_v, it = lax.while_loop(cond, body, init)
  return best_p, best_v, it


@jax.jit
def _fit_pairwise(X, pairs, weights, mask, log_ls0, raw_s0, steps):
  def loss(params):
    log_ls, raw_s = params
    ls, s = jnp.exp(log_ls), _outputscale(raw_s)
    lml = _laplace(ls, s, X, pairs, weights, mask)[0]
    return -(lml + log_prior(ls, s))

  (log_ls, raw_s), _, _ = _lbfgs(loss, (log_ls0, raw_s0), steps)
  ls, s = jnp.exp(log_ls), _outputscale(raw_s)
  log_marginal, f, alpha, lam, L, C = _laplace(ls, s, X, pairs, weights, mask)
  # cov_term = (I + Lambda K)^-1 Lambda = Lambda - Lambda (K^-1 + Lambda)^-1 Lambda,
  # (K^-1 + Lambda)^-1 = L (I + L^T Lambda L)^-1 L^T.
  V = jsl.solve_triangular(C, L.T @ lam, lower=True)
  cov_term = lam - V.T @ V
  return ls, s, f, alpha, 0.5 * (cov_term + cov_term.T), log_marginal


def _padded_problem(X: np.ndarray, comparisons: np.ndarray):
  """(X, pairs, weights, mask) padded to size buckets (see the module docstring)."""
  n, m = X.shape[0], comparisons.shape[0]
  n_pad, m_pad = _bucket(n), _bucket(m)
  Xp = _pad_rows(X, n_pad)
  mask = np.concatenate([np.ones(n), np.zeros(n_pad - n)]).astype(X.dtype)
  cp = _pad_rows(comparisons.astype(np.int64), m_pad)
  cp[m:] = (0, 1) if n > 1 else (0, 0)
  weights = np.concatenate([np.ones(m), np.zeros(m_pad - m)]).astype(X.dtype)
  return jnp.asarray(Xp), jnp.asarray(cp), jnp.asarray(weights), jnp.asarray(mask)


def _float_array(a) -> np.ndarray:
  """``a`` as a numpy float array in JAX's canonical dtype (float32 without x64)."""
  a = np.asarray(a)
  dtype = a.dtype if np.issubdtype(a.dtype, np.floating) else np.float64
  return a.astype(jax.dtypes.canonicalize_dtype(dtype))


def fit_pairwise_gp(X, comparisons, *, steps: int = 100,
                    init: PairwiseGP | None = None) -> PairwiseGP:
  """Fits the pairwise GP: Laplace MAP of f and type-II MAP hyperparameters.

      (ell, s) = argmax  log p(C | ell, s) + log Gamma(ell; 2.4, 2.7) + log Box(s)
      log p(C | ell, s) ~= -S(f_hat) - 1/2 log|I + K Lambda|       (Laplace)

  over (log ell, raw s), s = 0.005 + 199.995 sigmoid(raw s), with optax's L-BFGS
  (zoom line search): the objective is smooth, deterministic and low-dimensional
  (d + 1 numbers), which is the case L-BFGS is for, and it matches BoTorch's
  scipy L-BFGS-B fit. It stops after ``steps`` iterations or when the gradient norm
  falls below 1e-6, and keeps the best iterate. Every objective evaluation solves for
  f_hat by damped Newton; gradients use the one-step implicit derivative (see
  ``laplace_log_marginal``).

  Args:
    X: (n, d) inputs, already normalised to [0, 1]^d.
    comparisons: (m, 2) integer (winner, loser) rows indexing X.
    steps: maximum L-BFGS iterations (>= 1).
    init: a previous fit whose lengthscales and outputscale start this one (same d);
      by default the lengthscales start at the Gamma prior's mode 1.4 / 2.7 and the
      outputscale at 1.

  Returns:
    A ``PairwiseGP`` with the MAP latent utility and the posterior caches.

  Runs at the Python boundary (padding to size buckets needs concrete sizes), so it is
  not itself traceable; the fit is one jit-compiled call, compiled again only when n
  or m crosses a bucket.

  Example:
    >>> X = jax.random.uniform(jax.random.PRNGKey(0), (10, 2))
    >>> u = -jnp.sum((X - 0.3) ** 2, axis=1)
    >>> C = jnp.array([(i, j) if u[i] > u[j] else (j, i) for i in range(10)
    ...                for j in range(i)])
    >>> model = gp.fit_pairwise_gp(X, C)
    >>> mean, cov = gp.pairwise_posterior(model, X)
  """
  checks.positive_int("steps", steps)
  Xn = _float_array(_check_points("X", X))
  n, d = Xn.shape
  _check_comparisons(comparisons, n)
  C = np.asarray(comparisons, dtype=np.int64)
  if init is None:
    conc, rate = LENGTHSCALE_PRIOR
    log_ls0 = jnp.full(d, math.log((conc - 1.0) / rate), Xn.dtype)
    raw_s0 = _raw_outputscale(jnp.asarray(1.0, Xn.dtype))
  else:
    if np.shape(init.lengthscales) != (d,):
      raise ValueError(f"init has {np.shape(init.lengthscales)[0]} lengthscales, but X "
                       f"has {d} dimensions")
    lo, hi = OUTPUTSCALE_BOUNDS
    s0 = np.clip(float(init.outputscale), lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
    log_ls0 = jnp.log(jnp.asarray(init.lengthscales, Xn.dtype))
    raw_s0 = _raw_outputscale(jnp.asarray(s0, Xn.dtype))
  Xp, pairs, weights, mask = _padded_problem(Xn, C)
  ls, s, f, alpha, cov_term, lml = _fit_pairwise(Xp, pairs, weights, mask, log_ls0, raw_s0,
                                                 jnp.asarray(int(steps)))
  return PairwiseGP(jnp.asarray(Xn), jnp.asarray(C), ls, s, f[:n], alpha[:n],
                    cov_term[:n, :n], lml)


@jax.jit
def _pairwise_posterior(gp: PairwiseGP, Xs: Array):
  Ks = gp.outputscale * rbf_ard(gp.X, Xs, gp.lengthscales)           # (n, k)
  Kss = gp.outputscale * rbf_ard(Xs, Xs, gp.lengthscales)            # (k, k)
  mean = Ks.T @ gp.alpha
  cov = Kss - Ks.T @ gp.cov_term @ Ks
  return mean, 0.5 * (cov + cov.T)


def pairwise_posterior(gp: PairwiseGP, Xs) -> tuple[Array, Array]:
  """Laplace posterior of the latent utility at new points.

      mean = k*^T K^-1 f_hat,
      cov  = K** - k*^T (K + Lambda^-1)^-1 k* = K** - k*^T (I + Lambda K)^-1 Lambda k*

  (the second form needs no inverse of the singular Lambda). k* = s RBF(X, X*),
  K** = s RBF(X*, X*) (no jitter).

  Args:
    gp: a fitted ``PairwiseGP``.
    Xs: (k, d) query points in the same [0, 1]^d scale as ``gp.X``.

  Returns:
    (mean (k,), cov (k, k)).

  Example:
    >>> mean, cov = gp.pairwise_posterior(model, jnp.full((1, 2), 0.3))
  """
  if checks.is_concrete(Xs):
    _check_points("Xs", Xs)
    if np.shape(Xs)[1] != np.shape(gp.X)[1]:
      raise ValueError(f"Xs has {np.shape(Xs)[1]} dimensions, but the GP was fitted on "
                       f"{np.shape(gp.X)[1]}")
  Xs = jnp.asarray(Xs, jnp.asarray(gp.X).dtype)
  return _pairwise_posterior(gp, Xs)


def _unpadded(lengthscales, outputscale, X, comparisons):
  Xn = jnp.asarray(X)
  if not jnp.issubdtype(Xn.dtype, jnp.floating):
    Xn = Xn.astype(jnp.result_type(float))
  n = Xn.shape[0]
  pairs = jnp.asarray(comparisons)
  weights = jnp.ones(pairs.shape[0], Xn.dtype)
  mask = jnp.ones(n, Xn.dtype)
  ls = jnp.asarray(lengthscales, Xn.dtype)
  s = jnp.asarray(outputscale, Xn.dtype)
  return ls, s, Xn, pairs, weights, mask


def _check_all(lengthscales, outputscale, X, comparisons) -> None:
  X = _check_points("X", X)
  if X is not None:
    _check_comparisons(comparisons, X.shape[0])
    _check_hyper(lengthscales, outputscale, X.shape[1])


def map_utility(lengthscales, outputscale, X, comparisons) -> Array:
  """The MAP latent utility at fixed hyperparameters.

      f_hat = argmin_f  -sum_k log Phi((f_{w_k} - f_{l_k}) / sqrt 2) + 1/2 f^T K^-1 f

  by damped Newton iterations f <- f - t (K Lambda + I)^-1 K grad S(f) (t in
  {1, 1/2, ..., 1/128}, the best) from f = 0, in a ``lax.while_loop``. S is strictly
  convex, so the minimiser is unique.

  Args:
    lengthscales: (d,) RBF lengthscales.
    outputscale: the kernel's scale s.
    X: (n, d) inputs.
    comparisons: (m, 2) integer (winner, loser) rows.

  Returns:
    f_hat, shape (n,). Not differentiable (use ``laplace_log_marginal`` for
    hyperparameter gradients).

  Example:
    >>> f = gp.map_utility(jnp.ones(2), 1.0, jnp.eye(2), jnp.array([[0, 1]]))
  """
  _check_all(lengthscales, outputscale, X, comparisons)
  ls, s, Xn, pairs, weights, mask = _unpadded(lengthscales, outputscale, X, comparisons)
  return _map_utility(ls, s, Xn, pairs, weights, mask)


@jax.jit
def _map_utility(ls, s, X, pairs, weights, mask):
  K = _prior_cov(ls, s, X, mask)
  return _solve_map(K, jnp.linalg.cholesky(K), pairs, weights)[0]


def laplace_log_marginal(lengthscales, outputscale, X, comparisons) -> Array:
  """Laplace approximation to the log marginal likelihood of the comparisons.

      log p(C | ell, s) ~= -S(f_hat) - 1/2 log|I + K Lambda(f_hat)|
                         = sum_k log Phi(z_k) - 1/2 f_hat^T K^-1 f_hat
                           - 1/2 log|I + L^T Lambda L|            (K = L L^T)

  Differentiable in (lengthscales, outputscale) by the implicit derivative of f_hat:
  f_hat is solved with ``stop_gradient`` and one Newton step is applied to it inside
  the differentiated function. At the fixed point the Newton map's Jacobian in f is
  zero, so that step's derivative in the hyperparameters is exactly d f_hat / d theta.
  Priors are not included (``fit_pairwise_gp`` adds them).

  Args:
    lengthscales: (d,) RBF lengthscales.
    outputscale: the kernel's scale s.
    X: (n, d) inputs.
    comparisons: (m, 2) integer (winner, loser) rows.

  Returns:
    The scalar log marginal likelihood.

  Example:
    >>> g = jax.grad(gp.laplace_log_marginal)(jnp.ones(2), 1.0, jnp.eye(2),
    ...                                       jnp.array([[0, 1]]))
  """
  _check_all(lengthscales, outputscale, X, comparisons)
  ls, s, Xn, pairs, weights, mask = _unpadded(lengthscales, outputscale, X, comparisons)
  return _jit_laplace(ls, s, Xn, pairs, weights, mask)


@jax.jit
def _jit_laplace(ls, s, X, pairs, weights, mask):
  return _laplace(ls, s, X, pairs, weights, mask)[0]


# ---------------------------------------------------------------------------
# Exact GP regression.


class GP(NamedTuple):
  """A fitted exact GP on standardised targets (a pytree).

  y_std = (y - y_mean) / y_scale; posterior in original units (see ``gp_posterior``).
  """
  X: Array              # (n, d)
  y: Array              # (n,) original targets
  lengthscales: Array   # (d,)
  outputscale: Array    # ()
  noise: Array          # () Gaussian noise variance on the standardised scale, >= 1e-4
  y_mean: Array         # ()
  y_scale: Array        # ()
  alpha: Array          # (n,) (K + noise I)^-1 y_std
  chol: Array           # (n, n) Cholesky factor of K + noise I


def _gp_priors(ls, noise, d: int) -> Array:
  """BoTorch SingleTaskGP defaults: ell ~ LogNormal(sqrt 2 + log(d) / 2, sqrt 3),
  noise ~ LogNormal(-4, 1)."""
  mu = math.sqrt(2.0) + 0.5 * math.log(d)
  lp = jnp.sum(stats.norm.logpdf(jnp.log(ls), mu, math.sqrt(3.0)) - jnp.log(ls))
  return lp + stats.norm.logpdf(jnp.log(noise), -4.0, 1.0) - jnp.log(noise)


def _gp_matrices(ls, s, noise, X, mask):
  """K + noise I on real points; padded points are independent N(0, 1) with y = 0."""
  K = s * rbf_ard(X, X, ls) * (mask[:, None] * mask[None, :])
  return K + jnp.diag(noise * mask + (1.0 - mask))


def _gp_log_marginal(ls, s, noise, X, y, mask):
  """log N(y; 0, K + noise I) (padded points add the constant -1/2 log 2 pi each)."""
  L = jnp.linalg.cholesky(_gp_matrices(ls, s, noise, X, mask))
  v = jsl.solve_triangular(L, y, lower=True)
  return (-0.5 * v @ v - jnp.sum(jnp.log(jnp.diag(L)))
          - 0.5 * y.shape[0] * math.log(2 * math.pi))


@jax.jit
def _fit_exact(X, y, mask, steps):
  d = X.shape[1]
  mu = math.sqrt(2.0) + 0.5 * math.log(d)
  log_ls0 = jnp.full(d, mu - 3.0, X.dtype)              # the LogNormal's mode
  # NOISE_FLOOR + exp(raw_noise0) = exp(-5), the noise prior's mode.
  raw_noise0 = jnp.asarray(math.log(math.exp(-5.0) - NOISE_FLOOR), X.dtype)

  def unpack(p):
    log_ls, log_s, raw_noise = p
    return jnp.exp(log_ls), jnp.exp(log_s), NOISE_FLOOR + jnp.exp(raw_noise)

  def loss(p):
    ls, s, noise = unpack(p)
    return -(_gp_log_marginal(ls, s, noise, X, y, mask) + _gp_priors(ls, noise, d))

  p, _, _ = _lbfgs(loss, (log_ls0, jnp.zeros((), X.dtype), raw_noise0), steps)
  ls, s, noise = unpack(p)
  L = jnp.linalg.cholesky(_gp_matrices(ls, s, noise, X, mask))
  alpha = jsl.cho_solve((L, True), y)
  return ls, s, noise, alpha, L


def fit_gp(X, y, *, steps: int = 100) -> GP:
  """Fits an exact GP regression y = g(X) + eps with RBF-ARD kernel.

      y_std = (y - mean(y)) / std(y),  g ~ GP(0, s RBF_ARD(ell)),  eps ~ N(0, noise)
      (ell, s, noise) = argmax log N(y_std; 0, K + noise I) + log priors

  with BoTorch SingleTaskGP's default priors (ell ~ LogNormal(sqrt 2 + log(d)/2,
  sqrt 3), started at its mode; noise ~ LogNormal(-4, 1), started at its mode
  exp(-5), kept >= 1e-4), s started at 1 without a prior, maximised with optax L-BFGS
  over (log ell, log s, log(noise - 1e-4)). std(y) is the sample standard deviation
  (1 when n = 1 or all y are equal). The mean function is 0 on the standardised scale
  (BoTorch learns a constant).

  Args:
    X: (n, d) inputs (normalised to [0, 1]^d by the caller).
    y: (n,) targets.
    steps: maximum L-BFGS iterations (>= 1).

  Returns:
    A ``GP``. Like ``fit_pairwise_gp``, runs at the Python boundary (one jit-compiled
    fit per size bucket of n).

  Example:
    >>> X = jnp.linspace(0, 1, 12)[:, None]
    >>> model = gp.fit_gp(X, jnp.sin(6 * X[:, 0]))
    >>> mean, cov = gp.gp_posterior(model, jnp.array([[0.5]]))
  """
  checks.positive_int("steps", steps)
  Xn = _float_array(_check_points("X", X))
  n = Xn.shape[0]
  yn = np.asarray(y)
  if yn.ndim != 1 or yn.shape[0] != n:
    raise ValueError(f"y must have shape ({n},) to match X, got {yn.shape}")
  checks.check_finite("y", yn)
  yn = yn.astype(Xn.dtype)
  y_mean = yn.mean()
  y_scale = yn.std(ddof=1) if n > 1 else 1.0
  if not y_scale > 1e-8:
    y_scale = 1.0
  n_pad = _bucket(n)
  mask = np.concatenate([np.ones(n), np.zeros(n_pad - n)]).astype(Xn.dtype)
  ys = _pad_rows((yn - y_mean) / y_scale, n_pad)
  ls, s, noise, alpha, L = _fit_exact(jnp.asarray(_pad_rows(Xn, n_pad)), jnp.asarray(ys),
                                      jnp.asarray(mask), jnp.asarray(int(steps)))
  return GP(jnp.asarray(Xn), jnp.asarray(yn), ls, s, noise,
            jnp.asarray(y_mean, Xn.dtype), jnp.asarray(y_scale, Xn.dtype),
            alpha[:n], L[:n, :n])


@jax.jit
def _gp_posterior(gp: GP, Xs: Array):
  Ks = gp.outputscale * rbf_ard(gp.X, Xs, gp.lengthscales)
  Kss = gp.outputscale * rbf_ard(Xs, Xs, gp.lengthscales)
  V = jsl.solve_triangular(gp.chol, Ks, lower=True)
  mean = gp.y_mean + gp.y_scale * (Ks.T @ gp.alpha)
  cov = gp.y_scale ** 2 * (Kss - V.T @ V)
  return mean, 0.5 * (cov + cov.T)


def gp_posterior(gp: GP, Xs) -> tuple[Array, Array]:
  """Posterior of the latent function (no observation noise), in y's units.

      mean = y_mean + y_scale k*^T (K + noise I)^-1 y_std
      cov  = y_scale^2 (K** - k*^T (K + noise I)^-1 k*)

  Args:
    gp: a fitted ``GP``.
    Xs: (k, d) query points.

  Returns:
    (mean (k,), cov (k, k)).

  Example:
    >>> mean, cov = gp.gp_posterior(model, jnp.array([[0.25], [0.75]]))
  """
  if checks.is_concrete(Xs):
    _check_points("Xs", Xs)
    if np.shape(Xs)[1] != np.shape(gp.X)[1]:
      raise ValueError(f"Xs has {np.shape(Xs)[1]} dimensions, but the GP was fitted on "
                       f"{np.shape(gp.X)[1]}")
  return _gp_posterior(gp, jnp.asarray(Xs, jnp.asarray(gp.X).dtype))


def pairwise_posterior_unchecked(gp: PairwiseGP, Xs: Array) -> tuple[Array, Array]:
  """`pairwise_posterior` without its boundary checks: for use under `jit` (inside an
  acquisition function), where the inputs are tracers."""
  return _pairwise_posterior(gp, Xs)


def gp_posterior_unchecked(gp: GP, Xs: Array) -> tuple[Array, Array]:
  """`gp_posterior` without its boundary checks, for use under `jit`."""
  return _gp_posterior(gp, Xs)
