"""Evolutionary operators shared by AutoMS's SAES optimiser and its NSGA-II baseline.

Everything minimises, works on float arrays in a box ``lower <= x <= upper`` and draws
its randomness from an explicit ``jax.random`` key. The operators are pure functions
(each public one checks its arguments, then calls a jitted core; under an outer ``jit``
the checks see tracers and skip the value checks):

* `non_dominated_ranks`, `constrained_ranks`: Pareto front index, 0 = non-dominated
  (Deb et al. 2002's fast non-dominated sort, and its constrained domination);
* `crowding_distance`: NSGA-II's crowding distance per front, as pymoo 0.6.2 computes it;
* `survival`: NSGA-II's environmental selection (rank, then crowding);
* `binary_tournament`: the crowded-comparison tournament;
* `sbx`: bounded simulated binary crossover (Deb & Agrawal 1995), pymoo 0.6.2's variant;
* `polynomial_mutation`: bounded polynomial mutation (Deb & Goyal 1996), pymoo 0.6.2's;
* `nsga2`: the NSGA-II loop around a black-box ``evaluate(X) -> (F, cv)``.

    history = nsga2(evaluate, jax.random.PRNGKey(0), jnp.zeros(5), jnp.ones(5),
                    pop_size=20, generations=10)
    front = history.F[history.final]

References:
  K. Deb, A. Pratap, S. Agarwal, T. Meyarivan (2002). A fast and elitist multiobjective
    genetic algorithm: NSGA-II. IEEE Trans. Evol. Comput. 6(2).
  K. Deb, R. B. Agrawal (1995). Simulated binary crossover for continuous search space.
    Complex Systems 9.
  K. Deb, M. Goyal (1996). A combined genetic adaptive search (GeneAS) for engineering
    design. Computer Science and Informatics 26.
  J. Blank, K. Deb (2020). pymoo: Multi-objective optimization in Python. IEEE Access 8
    (version 0.6.2: operators/crossover/sbx.py, operators/mutation/pm.py,
    operators/survival/rank_and_crowding/metrics.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from common import checks

Array = jax.Array

# pymoo's SBX skips a variable whose parents differ by at most this much.
SBX_EPS = 1e-14
# pymoo's SBX exchange probability (``prob_bin``) of the two children of a variable.
SBX_PROB_EXCHANGE = 0.5


# ----------------------------------------------------------------------------------------
# Argument checks (one-line ValueErrors; value checks skip tracers).


def _objectives(F: Any) -> Array:
  """F as a float (P, M) array with P, M >= 1 and finite values."""
  F = checks.as_float("F", F)
  if F.ndim != 2 or F.shape[0] < 1 or F.shape[1] < 1:
    raise ValueError(f"F must have shape (P, M) with P, M >= 1, got {tuple(F.shape)}")
  checks.check_finite("F", F)
  return F


def _vector(name: str, v: Any, n: int, *, dtype=None) -> Array:
  """v as a (n,) array (of ``dtype`` when given)."""
  v = jnp.asarray(v, dtype)
  if v.shape != (n,):
    raise ValueError(f"{name} must have shape ({n},), got {tuple(v.shape)}")
  return v


def _violation(cv: Any, n: int, dtype) -> Array:
  """cv as a (n,) array of finite values >= 0 (total constraint violation)."""
  cv = _vector("cv", cv, n, dtype=dtype)
  if checks.is_concrete(cv):
    bad = np.flatnonzero(~(np.asarray(cv) >= 0) | ~np.isfinite(np.asarray(cv)))
    if bad.size:
      raise ValueError(f"cv must be finite and >= 0, got cv[{bad[0]}] = "
                       f"{np.asarray(cv)[bad[0]]}")
  return cv


def _bounds(lower: Any, upper: Any, d: int | None = None) -> tuple[Array, Array]:
  """lower, upper as float (D,) arrays with lower <= upper."""
  lower, upper = checks.as_float("lower", lower), checks.as_float("upper", upper)
  checks.same_shape("lower and upper", lower, upper)
  if lower.ndim != 1 or (d is not None and lower.shape[0] != d):
    want = "(D,)" if d is None else f"({d},)"
    raise ValueError(f"lower and upper must have shape {want}, got {tuple(lower.shape)}")
  if checks.is_concrete(lower) and checks.is_concrete(upper):
    bad = np.flatnonzero(~(np.asarray(lower) <= np.asarray(upper)))
    if bad.size:
      i = bad[0]
      raise ValueError(f"lower must be <= upper, got lower[{i}] = {lower[i]} > "
                       f"upper[{i}] = {upper[i]}")
  return lower, upper


def _hyper(eta: Any, prob: Any, suffix: str = "") -> None:
  """eta >= 0 and a probability prob in [0, 1] (named eta<suffix>, prob<suffix>)."""
  checks.scalar(f"eta{suffix}", eta, low=0.0, strict=False)
  checks.scalar(f"prob{suffix}", prob, low=0.0, strict=False, high=1.0)


# ----------------------------------------------------------------------------------------
# Non-dominated sorting.


def _pareto_dominates(F: Array) -> Array:
  """(P, P) bool: D[i, j] = F_i <= F_j everywhere and F_i < F_j somewhere."""
  le = jnp.all(F[:, None, :] <= F[None, :, :], axis=-1)
  lt = jnp.any(F[:, None, :] < F[None, :, :], axis=-1)
  return le & lt


def _constrained_dominates(F: Array, cv: Array) -> Array:
  """(P, P) bool: Deb et al. (2002)'s constrained domination (cv = 0 is feasible)."""
  feas = cv <= 0
  infeas = ~feas
  return ((feas[:, None] & infeas[None, :])
          | (infeas[:, None] & infeas[None, :] & (cv[:, None] < cv[None, :]))
          | (feas[:, None] & feas[None, :] & _pareto_dominates(F)))


def _peel(dominates: Array) -> Array:
  """(P,) int32 front index: peel off the points no remaining point dominates."""
  p = dominates.shape[0]

  def cond(state):
    ranks, r = state
    return jnp.any(ranks < 0) & (r < p)

  def body(state):
    ranks, r = state
    remaining = ranks < 0
    n_dominators = jnp.sum(dominates & remaining[:, None], axis=0)
    return jnp.where(remaining & (n_dominators == 0), r, ranks), r + 1

  ranks, _ = lax.while_loop(cond, body, (jnp.full(p, -1, jnp.int32), jnp.int32(0)))
  return ranks


_ranks = jax.jit(lambda F: _peel(_pareto_dominates(F)))
_constrained = jax.jit(lambda F, cv: _peel(_constrained_dominates(F, cv)))


def non_dominated_ranks(F: Array) -> Array:
  """The Pareto front index of each point (0 = non-dominated), for minimisation.

  With x_i dominating x_j iff F_i <= F_j in every objective and F_i < F_j in one,

      front_0 = {i : no j dominates i},
      front_r = {i not in front_<r : no j outside front_<r dominates i},

  Deb et al. (2002)'s fast non-dominated sort, computed from the (P, P) domination
  matrix by peeling one front per `lax.while_loop` step (P is small). Equal rows share
  a front.

  Args:
    F: (P, M) finite objective values.

  Returns:
    (P,) int32 front index.

  Example:
    >>> non_dominated_ranks(jnp.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]))  # [0 0 1]
  """
  return _ranks(_objectives(F))


def constrained_ranks(F: Array, cv: Array) -> Array:
  """The front index under Deb et al. (2002)'s constrained domination.

  x_i constrained-dominates x_j iff (a) x_i is feasible (cv_i = 0) and x_j is not,
  (b) both are infeasible and cv_i < cv_j, or (c) both are feasible and x_i Pareto-
  dominates x_j. So every feasible front comes before every infeasible one, and the
  infeasible points form one front per distinct cv value, in increasing cv.

  Args:
    F: (P, M) finite objective values.
    cv: (P,) total constraint violation, >= 0 (0 = feasible).

  Returns:
    (P,) int32 front index.

  Example:
    >>> constrained_ranks(jnp.array([[0.0], [1.0], [2.0]]), jnp.array([1.0, 0.0, 0.0]))
    ... # [2 0 1]
  """
  F = _objectives(F)
  return _constrained(F, _violation(cv, F.shape[0], F.dtype))


# ----------------------------------------------------------------------------------------
# Crowding distance.


def _objective_crowding(f: Array, ranks: Array) -> Array:
  """(P,) the pymoo crowding term of one objective f: in each front sorted by f (ties
  by index), (f_i - f_prev) / range + (f_next - f_i) / range, inf at the ends and 0
  when the front's range is 0."""
  p = f.shape[0]
  order = jnp.lexsort((jnp.arange(p), f, ranks))
  fs, rs = f[order], ranks[order]
  same = rs[1:] == rs[:-1]  # neighbours in the same front
  prev = jnp.where(jnp.concatenate([jnp.array([False]), same]), jnp.roll(fs, 1), -jnp.inf)
  nxt = jnp.where(jnp.concatenate([same, jnp.array([False])]), jnp.roll(fs, -1), jnp.inf)
  norm = (jax.ops.segment_max(f, ranks, p) - jax.ops.segment_min(f, ranks, p))[rs]
  ok = norm > 0
  safe = jnp.where(ok, norm, 1.0)
  d = jnp.where(ok, (fs - prev) / safe, 0.0) + jnp.where(ok, (nxt - fs) / safe, 0.0)
  return jnp.zeros_like(f).at[order].set(d)


@jax.jit
def _crowding(F: Array, ranks: Array) -> Array:
  p, m = F.shape
  size = jax.ops.segment_sum(jnp.ones(p, jnp.int32), ranks, p)[ranks]
  per_objective = jax.vmap(_objective_crowding, in_axes=(1, None), out_axes=1)(F, ranks)
  cd = jnp.sum(per_objective, axis=1) / m
  return jnp.where(size <= 2, jnp.inf, cd)


def crowding_distance(F: Array, ranks: Array) -> Array:
  """NSGA-II's crowding distance within each front, as pymoo 0.6.2's ``"cd"``.

  For a front S with more than two points, sorted by objective m (ties by index),

      cd_i = (1 / M) sum_m [(f_m(next_i) - f_m(prev_i)) / (max_S f_m - min_S f_m)],

  where the first and last points of each sort get +inf, and an objective whose range
  over S is 0 adds 0 to every point of S (including the ends). Fronts of one or two
  points get +inf everywhere. Duplicated rows are kept (the first of a tie at the
  minimum and the last at the maximum take the ends). This is Deb et al. (2002)'s
  distance divided by M, which does not change the order.

  Fronts of varying size are handled together with masks: one sort per objective over
  (rank, f_m, index).

  Args:
    F: (P, M) finite objective values.
    ranks: (P,) int front index in [0, P), e.g. from `non_dominated_ranks`.

  Returns:
    (P,) crowding distance (larger = less crowded).

  Example:
    >>> F = jnp.array([[0.0, 3.0], [1.0, 1.0], [3.0, 0.0]])
    >>> crowding_distance(F, jnp.zeros(3, jnp.int32))  # [inf 1. inf]
  """
  F = _objectives(F)
  ranks = _vector("ranks", ranks, F.shape[0])
  if not jnp.issubdtype(ranks.dtype, jnp.integer):
    raise ValueError(f"ranks must be an integer array, got dtype {ranks.dtype}")
  if checks.is_concrete(ranks) and not np.all((np.asarray(ranks) >= 0)
                                               & (np.asarray(ranks) < F.shape[0])):
    raise ValueError(f"ranks must lie in [0, {F.shape[0]}), got min {ranks.min()} and "
                     f"max {ranks.max()}")
  return _crowding(F, ranks)


# ----------------------------------------------------------------------------------------
# Selection.


@functools.partial(jax.jit, static_argnames=("k",))
def _survive(F: Array, cv: Array, k: int) -> tuple[Array, Array, Array]:
  """(indices (k,), ranks (P,), crowding (P,)) of NSGA-II's environmental selection."""
  ranks = _peel(_constrained_dominates(F, cv))
  cd = _crowding(F, ranks)
  order = jnp.lexsort((jnp.arange(F.shape[0]), -cd, ranks))
  return order[:k], ranks, cd


def survival(F: Array, cv: Array, k: int) -> Array:
  """NSGA-II's environmental selection of k of P points (Deb et al. 2002).

  Sort by the crowded-comparison order: constrained front index (`constrained_ranks`)
  ascending, then crowding distance (`crowding_distance`, computed on each whole front)
  descending, then index ascending; keep the first k. This fills the survivors front by
  front and cuts the last front by descending crowding; the index tie-break makes it
  deterministic (pymoo breaks such ties at random).

  Args:
    F: (P, M) finite objective values.
    cv: (P,) total constraint violation, >= 0 (0 = feasible).
    k: number of survivors, 1 <= k <= P (static).

  Returns:
    (k,) int32 indices into F, best first.

  Example:
    >>> survival(jnp.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]), jnp.zeros(3), 2)
    ... # [0 1]
  """
  F = _objectives(F)
  cv = _violation(cv, F.shape[0], F.dtype)
  checks.positive_int("k", k)
  if k > F.shape[0]:
    raise ValueError(f"k must be <= P = {F.shape[0]}, got {k}")
  return _survive(F, cv, int(k))[0]


@functools.partial(jax.jit, static_argnames=("n",))
def _tournament(key: Array, ranks: Array, crowding: Array, n: int) -> Array:
  p = ranks.shape[0]
  k_first, k_second = jax.random.split(key)
  i = jax.random.randint(k_first, (n,), 0, p)
  j = (i + jax.random.randint(k_second, (n,), 1, p)) % p  # j != i
  i_wins = (ranks[i] < ranks[j]) | ((ranks[i] == ranks[j]) & (crowding[i] >= crowding[j]))
  return jnp.where(i_wins, i, j)


def binary_tournament(key: Array, ranks: Array, crowding: Array, n: int) -> Array:
  """n winners of binary tournaments under the crowded-comparison operator.

  Each tournament draws a uniform pair i != j and keeps i iff

      rank_i < rank_j  or  (rank_i == rank_j and crowding_i >= crowding_j),

  Deb et al. (2002)'s <_n (a full tie keeps the first draw, itself uniform).

  Args:
    key: a `jax.random` key.
    ranks: (P,) front index (P >= 2), e.g. from `constrained_ranks`.
    crowding: (P,) crowding distance, e.g. from `crowding_distance`.
    n: number of tournaments (static, >= 1).

  Returns:
    (n,) int32 indices of the winners.

  Example:
    >>> binary_tournament(jax.random.PRNGKey(0), jnp.array([0, 1]), jnp.ones(2), 4)
    ... # [0 0 0 0]
  """
  ranks = jnp.asarray(ranks)
  if ranks.ndim != 1 or ranks.shape[0] < 2:
    raise ValueError(f"ranks must have shape (P,) with P >= 2, got {tuple(ranks.shape)}")
  crowding = _vector("crowding", crowding, ranks.shape[0])
  checks.positive_int("n", n)
  return _tournament(key, ranks, crowding, int(n))


# ----------------------------------------------------------------------------------------
# Variation.


def _sbx_betaq(beta: Array, u: Array, eta: Array) -> Array:
  """The bounded SBX spread factor for the distance beta to a bound and u ~ U[0, 1)."""
  alpha = 2.0 - beta ** -(eta + 1.0)
  return jnp.where(u <= 1.0 / alpha, (u * alpha) ** (1.0 / (eta + 1.0)),
                   (1.0 / (2.0 - u * alpha)) ** (1.0 / (eta + 1.0)))


@jax.jit
def _sbx(key, a, b, lower, upper, eta, prob, prob_var):
  k_pair, k_var, k_u, k_swap = jax.random.split(key, 4)
  uniform = functools.partial(jax.random.uniform, dtype=a.dtype)
  pair = uniform(k_pair, a.shape[:-1] + (1,)) < prob
  cross = (pair & (uniform(k_var, a.shape) < prob_var)
           & (jnp.abs(a - b) > SBX_EPS) & (lower != upper))
  y1, y2 = jnp.minimum(a, b), jnp.maximum(a, b)
  delta = jnp.where(cross, y2 - y1, 1.0)
  u = uniform(k_u, a.shape)
  c1 = 0.5 * ((y1 + y2) - _sbx_betaq(1.0 + 2.0 * (y1 - lower) / delta, u, eta) * delta)
  c2 = 0.5 * ((y1 + y2) + _sbx_betaq(1.0 + 2.0 * (upper - y2) / delta, u, eta) * delta)
  child1, child2 = jnp.where(a < b, c1, c2), jnp.where(a < b, c2, c1)
  swap = (uniform(k_swap, a.shape) < SBX_PROB_EXCHANGE) ^ (a > b)
  child1, child2 = jnp.where(swap, child2, child1), jnp.where(swap, child1, child2)
  return (jnp.clip(jnp.where(cross, child1, a), lower, upper),
          jnp.clip(jnp.where(cross, child2, b), lower, upper))


def sbx(key: Array, a: Array, b: Array, lower: Array, upper: Array, eta: float = 20.0,
        prob: float = 0.8, prob_var: float = 0.5) -> tuple[Array, Array]:
  """Bounded simulated binary crossover (Deb & Agrawal 1995), as pymoo 0.6.2's SBX.

  Each pair of parents crosses with probability ``prob``; then each variable with
  probability ``prob_var``, unless |a - b| <= 1e-14 or lower = upper. With
  y1 = min(a, b) < y2 = max(a, b), delta = y2 - y1 and one u ~ U[0, 1) per variable,

      beta_L = 1 + 2 (y1 - lower) / delta,   beta_U = 1 + 2 (upper - y2) / delta,
      alpha  = 2 - beta^-(eta + 1),
      beta_q = (u alpha)^(1 / (eta + 1))               if u <= 1 / alpha,
             = (1 / (2 - u alpha))^(1 / (eta + 1))     otherwise,
      c1 = (y1 + y2 - beta_q(beta_L) delta) / 2,   c2 = (y1 + y2 + beta_q(beta_U) delta) / 2.

  The child near a goes to a's slot, then the pair is exchanged by pymoo's rule
  ``(v < 0.5) xor (a > b)``, v ~ U[0, 1) (a fair coin); children are clipped to the box.
  Far from the bounds alpha -> 2 and c1 + c2 = a + b.

  Args:
    key: a `jax.random` key.
    a: (..., D) first parents, inside the box.
    b: (..., D) second parents, inside the box.
    lower: (D,) lower bounds.
    upper: (D,) upper bounds (>= lower).
    eta: distribution index (>= 0; larger = children nearer the parents).
    prob: probability that a pair crosses at all.
    prob_var: probability that a variable of a crossing pair crosses.

  Returns:
    (child1, child2), each shaped like a.

  Example:
    >>> c1, c2 = sbx(jax.random.PRNGKey(0), jnp.zeros(3), jnp.ones(3), jnp.zeros(3),
    ...              jnp.ones(3), prob=1.0)
  """
  a, b = checks.as_float("a", a), checks.as_float("b", b)
  checks.same_shape("a and b", a, b)
  if a.ndim < 1:
    raise ValueError(f"a must have shape (..., D), got {tuple(a.shape)}")
  lower, upper = _bounds(lower, upper, a.shape[-1])
  _hyper(eta, prob)
  checks.scalar("prob_var", prob_var, low=0.0, strict=False, high=1.0)
  dtype = a.dtype
  return _sbx(key, a, b.astype(dtype), lower.astype(dtype), upper.astype(dtype),
              jnp.asarray(eta, dtype), jnp.asarray(prob, dtype),
              jnp.asarray(prob_var, dtype))


@jax.jit
def _pm(key, x, lower, upper, eta, prob):
  k_mut, k_u = jax.random.split(key)
  mutate = (jax.random.uniform(k_mut, x.shape, x.dtype) < prob) & (lower != upper)
  width = jnp.where(lower != upper, upper - lower, 1.0)
  delta1, delta2 = (x - lower) / width, (upper - x) / width
  u = jax.random.uniform(k_u, x.shape, x.dtype)
  power = 1.0 / (eta + 1.0)
  left = (2.0 * u + (1.0 - 2.0 * u) * (1.0 - delta1) ** (eta + 1.0)) ** power - 1.0
  right = 1.0 - (2.0 * (1.0 - u) + 2.0 * (u - 0.5) * (1.0 - delta2) ** (eta + 1.0)) ** power
  y = x + jnp.where(u <= 0.5, left, right) * width
  return jnp.clip(jnp.where(mutate, y, x), lower, upper)


def polynomial_mutation(key: Array, x: Array, lower: Array, upper: Array,
                        eta: float = 20.0, prob: float = 0.2) -> Array:
  """Bounded polynomial mutation (Deb & Goyal 1996), as pymoo 0.6.2's PM.

  Each variable mutates with probability ``prob`` (pymoo's ``prob_var``, whose default
  there is 1 / D; pymoo's per-individual ``prob`` is 1 here), unless lower = upper.
  With delta_1 = (x - lower) / (upper - lower), delta_2 = (upper - x) / (upper - lower)
  and u ~ U[0, 1),

      delta_q = [2u + (1 - 2u)(1 - delta_1)^(eta+1)]^(1/(eta+1)) - 1           if u <= 1/2,
              = 1 - [2(1 - u) + 2(u - 1/2)(1 - delta_2)^(eta+1)]^(1/(eta+1))   otherwise,
      x' = clip(x + delta_q (upper - lower), lower, upper).

  Args:
    key: a `jax.random` key.
    x: (..., D) points inside the box.
    lower: (D,) lower bounds.
    upper: (D,) upper bounds (>= lower).
    eta: distribution index (>= 0; larger = smaller steps).
    prob: per-variable mutation probability.

  Returns:
    x', shaped like x.

  Example:
    >>> polynomial_mutation(jax.random.PRNGKey(0), jnp.full((4, 3), 0.5), jnp.zeros(3),
    ...                     jnp.ones(3), prob=1.0)
  """
  x = checks.as_float("x", x)
  if x.ndim < 1:
    raise ValueError(f"x must have shape (..., D), got {tuple(x.shape)}")
  lower, upper = _bounds(lower, upper, x.shape[-1])
  _hyper(eta, prob)
  dtype = x.dtype
  return _pm(key, x, lower.astype(dtype), upper.astype(dtype), jnp.asarray(eta, dtype),
             jnp.asarray(prob, dtype))


# ----------------------------------------------------------------------------------------
# The NSGA-II loop.


class NSGA2History(NamedTuple):
  """Everything `nsga2` evaluated, in evaluation order (N = pop_size (generations + 1))."""
  X: Array           # (N, D) evaluated points
  F: Array           # (N, M) their objectives
  cv: Array          # (N,) their total constraint violation (0 = feasible)
  generation: Array  # (N,) int32: 0 for the initial population, g for generation g
  final: Array       # (pop_size,) rows of the final population, best first


@functools.partial(jax.jit, static_argnames=("n",))
def _offspring(key, X, ranks, crowding, lower, upper, eta_c, prob_c, eta_m, prob_m, n):
  """n children: tournament -> SBX on consecutive winners -> polynomial mutation."""
  k_select, k_cross, k_mutate = jax.random.split(key, 3)
  pairs = _tournament(k_select, ranks, crowding, 2 * ((n + 1) // 2)).reshape(-1, 2)
  c1, c2 = _sbx(k_cross, X[pairs[:, 0]], X[pairs[:, 1]], lower, upper, eta_c, prob_c,
                jnp.asarray(0.5, X.dtype))
  children = jnp.concatenate([c1, c2])[:n]
  return _pm(k_mutate, children, lower, upper, eta_m, prob_m)


def _evaluate(evaluate: Callable, X: Array) -> tuple[Array, Array]:
  """Calls the black box on X (as numpy) and checks its (F (P, M), cv (P,))."""
  F, cv = evaluate(np.asarray(X))
  F = _objectives(jnp.asarray(F, X.dtype))
  if F.shape[0] != X.shape[0]:
    raise ValueError(f"evaluate must return F with {X.shape[0]} rows, got {F.shape[0]}")
  cv = jnp.zeros(X.shape[0], X.dtype) if cv is None else cv
  return F, _violation(cv, X.shape[0], X.dtype)


def _initial_population(key: Array, lower: Array, upper: Array, n: int,
                        initial: Array | None) -> Array:
  """(n, D) uniform points in the box, or ``initial`` after checking it."""
  if initial is None:
    u = jax.random.uniform(key, (n, lower.shape[0]), lower.dtype)
    return lower + (upper - lower) * u
  X = jnp.asarray(initial, lower.dtype)
  if X.shape != (n, lower.shape[0]):
    raise ValueError(f"initial must have shape ({n}, {lower.shape[0]}), got "
                     f"{tuple(X.shape)}")
  if not bool(jnp.all((X >= lower) & (X <= upper))):
    raise ValueError("initial must lie inside [lower, upper]")
  return X


def nsga2(evaluate: Callable[[np.ndarray], tuple[Any, Any]], key: Array, lower: Array,
          upper: Array, *, pop_size: int = 20, generations: int = 10, eta_c: float = 20.0,
          prob_c: float = 0.8, eta_m: float = 20.0, prob_m: float = 0.2,
          initial: Array | None = None) -> NSGA2History:
  """NSGA-II (Deb et al. 2002) on a black-box ``evaluate(X) -> (F, cv)``, minimising.

  P_0 is uniform in the box (or ``initial``). Generation g = 1..generations:

      Q_g = PM(SBX(tournament(P_{g-1})))            pop_size children,
      P_g = survival(P_{g-1} u Q_g, pop_size)         rank, then crowding,

  the tournament using the ranks and crowding computed when P_{g-1} was selected. The
  operators of a generation are one compiled step; ``evaluate`` (the expensive
  simulator) sees numpy arrays; the budget is pop_size (generations + 1) rows.

  Args:
    evaluate: X (P, D) numpy array -> (F (P, M) finite objectives, cv (P,) total
      constraint violation >= 0, or None when unconstrained); numpy or jax.
    key: a `jax.random` key.
    lower: (D,) lower bounds.
    upper: (D,) upper bounds (>= lower).
    pop_size: population size (>= 2); also the number of children per generation.
    generations: number of generations (>= 0).
    eta_c: SBX distribution index.
    prob_c: SBX per-pair crossover probability (per-variable probability 0.5).
    eta_m: polynomial-mutation distribution index.
    prob_m: polynomial-mutation per-variable probability.
    initial: optional (pop_size, D) initial population inside the box.

  Returns:
    `NSGA2History`: every evaluated row with its generation, and the final population.

  Example:
    >>> h = nsga2(lambda X: (np.stack([X[:, 0], 1 - X[:, 0] ** 0.5], 1), None), key, lo, up)
  """
  lower, upper = _bounds(lower, upper)
  checks.positive_int("pop_size", pop_size, low=2)
  checks.positive_int("generations", generations, low=0)
  _hyper(eta_c, prob_c, "_c")
  _hyper(eta_m, prob_m, "_m")
  n = int(pop_size)
  key, k_init = jax.random.split(key)
  X = _initial_population(k_init, lower, upper, n, initial)
  F, cv = _evaluate(evaluate, X)
  history = [(X, F, cv)]
  keep, ranks, crowding = _survive(F, cv, n)  # sort P_0 best first
  X, F, cv, ranks, crowding = (v[keep] for v in (X, F, cv, ranks, crowding))
  rows = keep  # history rows of the current population
  for g in range(1, int(generations) + 1):
    key, k_gen = jax.random.split(key)
    Xo = _offspring(k_gen, X, ranks, crowding, lower, upper, eta_c, prob_c, eta_m, prob_m, n=n)
    Fo, cvo = _evaluate(evaluate, Xo)
    history.append((Xo, Fo, cvo))
    X, F, cv = (jnp.concatenate(pair) for pair in ((X, Xo), (F, Fo), (cv, cvo)))
    rows = jnp.concatenate([rows, g * n + jnp.arange(n)])
    keep, ranks, crowding = _survive(F, cv, n)
    X, F, cv, rows, ranks, crowding = (v[keep] for v in (X, F, cv, rows, ranks, crowding))
  X_all, F_all, cv_all = (jnp.concatenate(v) for v in zip(*history))
  generation = jnp.repeat(jnp.arange(len(history), dtype=jnp.int32), n)
  return NSGA2History(X_all, F_all, cv_all, generation, rows)
