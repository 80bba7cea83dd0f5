"""LILO's test problems and the decision maker's hidden utility over outcomes.

Two problems, as in the paper's public code (facts and constants carried over, the code
written anew):

* **DTLZ2** with d = 8 inputs in [0, 1] and M = 4 outcomes (pymoo's and BoTorch's
  formula). The public code feeds the *raw* objective values to a utility that increases
  with them, so its DTLZ2 task **maximises** the DTLZ2 objectives (the opposite of the
  usual minimisation). We keep that: y = f(x), y in [0, 1 + g] with g <= 1.25; the
  stated outcome range is [0, 2].
* **VehicleSafety** with d = 5 inputs in [1, 3] and 3 outcomes (BoTorch's formulas for
  mass, collision acceleration and toe-board intrusion, all to be minimised). The utility
  sees y = (f - min) / (max - min) with the public code's hard-coded bounds, as the
  released code computes it (it normalises to reductions, then sets y = 1 - y). Its
  labels and domain text say "reduction", so the intent was probably the opposite sign;
  we keep the released behaviour, because the published constants and figures come
  from it (with the "intended" sign, 8 random designs already reach U = 0.81 on average
  and the problem says little about the optimisers).

The utility is the public code's piecewise-linear one,

    h_i(y_i) = beta1_i y_i + (beta2_i - beta1_i) t_i   if y_i < t_i
             = beta2_i y_i                              otherwise,
    U(y)     = sigmoid((sum_i h_i(y_i) - bias) / scale),

continuous at t_i, steep (beta1 > beta2) below the threshold t_i and flat above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common import checks


def _check_matrix(name: str, x, d: int) -> jax.Array:
  """x as a float (n, d) array; a one-line ValueError for another shape or a non-finite
  value (tracers are only shape-checked)."""
  x = checks.as_float(name, x)
  if x.ndim != 2 or x.shape[1] != d:
    raise ValueError(f"{name} must have shape (n, {d}), got {tuple(x.shape)}")
  checks.check_finite(name, x)
  return x


def dtlz2(x: jax.Array, num_outcomes: int = 4) -> jax.Array:
  """The DTLZ2 objectives (raw, as LILO's public code uses them: to be maximised).

  With M outcomes and d inputs (0-based x_j):

      g   = sum_{j = M-1}^{d-1} (x_j - 1/2)^2
      f_1 = (1 + g) prod_{j=0}^{M-2} cos(pi x_j / 2)
      f_i = (1 + g) prod_{j=0}^{M-i-1} cos(pi x_j / 2) sin(pi x_{M-i} / 2),  i = 2..M.

  On the Pareto front of the usual (minimisation) view, x_{M-1..d-1} = 1/2, so g = 0
  and sum_i f_i^2 = 1.

  Args:
    x: (n, d) inputs in [0, 1], d >= num_outcomes.
    num_outcomes: M.

  Returns:
    (n, M) objective values, in the dtype of `x`.

  Example:
    >>> round(float((dtlz2(jnp.full((1, 8), 0.5)) ** 2).sum()), 5)   # on the front
    1.0
  """
  x = checks.as_float("x", x)
  if x.ndim != 2 or x.shape[1] < num_outcomes:
    raise ValueError(f"x must have shape (n, d) with d >= {num_outcomes}, got {tuple(x.shape)}")
  checks.check_finite("x", x)
  m = num_outcomes
  g = jnp.sum((x[:, m - 1:] - 0.5) ** 2, axis=1)
  c, s = jnp.cos(0.5 * jnp.pi * x), jnp.sin(0.5 * jnp.pi * x)
  cols = []
  for i in range(1, m + 1):              # f_i uses cos of x_0..x_{M-i-1} and sin of x_{M-i}
    f = (1.0 + g) * jnp.prod(c[:, :m - i], axis=1)
    if i > 1:
      f = f * s[:, m - i]
    cols.append(f)
  return jnp.stack(cols, axis=1)


# BoTorch VehicleSafety, in x = (x1..x5) in [1, 3]^5.
def vehicle_safety_raw(x: jax.Array) -> jax.Array:
  """BoTorch's VehicleSafety objectives (mass, collision acceleration, toe-board
  intrusion; all to be minimised):

      f1 = 1640.2823 + 2.3573285 x1 + 2.3220035 x2 + 4.5688768 x3 + 7.7213633 x4
           + 4.4559504 x5
      f2 = 6.5856 + 1.15 x1 - 1.0427 x2 + 0.9738 x3 + 0.8364 x4 - 0.3695 x1 x4
           + 0.0861 x1 x5 + 0.3628 x2 x4 - 0.1106 x1^2 - 0.3437 x3^2 + 0.1764 x4^2
      f3 = -0.0551 + 0.0181 x1 + 0.1024 x2 + 0.0421 x3 - 0.0073 x1 x2 + 0.024 x2 x3
           - 0.0118 x2 x4 - 0.0204 x3 x4 - 0.008 x3 x5 - 0.0241 x2^2 + 0.0109 x4^2

  Args:
    x: (n, 5) inputs in [1, 3].

  Returns:
    (n, 3) raw objective values.

  Example:
    >>> round(float(vehicle_safety_raw(jnp.ones((1, 5)))[0, 0]), 2)
    1661.71
  """
  x = _check_matrix("x", x, 5)
  x1, x2, x3, x4, x5 = (x[:, i] for i in range(5))
  f1 = (1640.2823 + 2.3573285 * x1 + 2.3220035 * x2 + 4.5688768 * x3 + 7.7213633 * x4
        + 4.4559504 * x5)
  f2 = (6.5856 + 1.15 * x1 - 1.0427 * x2 + 0.9738 * x3 + 0.8364 * x4 - 0.3695 * x1 * x4
        + 0.0861 * x1 * x5 + 0.3628 * x2 * x4 - 0.1106 * x1 ** 2 - 0.3437 * x3 ** 2
        + 0.1764 * x4 ** 2)
  f3 = (-0.0551 + 0.0181 * x1 + 0.1024 * x2 + 0.0421 * x3 - 0.0073 * x1 * x2
        + 0.024 * x2 * x3 - 0.0118 * x2 * x4 - 0.0204 * x3 * x4 - 0.008 * x3 * x5
        - 0.0241 * x2 ** 2 + 0.0109 * x4 ** 2)
  return jnp.stack([f1, f2, f3], axis=1)


# The public code's hard-coded normalisation bounds: about the maxima and the minima of f.
VEHICLE_F_MAX = (1704.0, 11.708, 0.26192)
VEHICLE_F_MIN = (1661.9, 6.2136, 0.042879)


def vehicle_safety(x: jax.Array) -> jax.Array:
  """The VehicleSafety outcomes the utility sees, as the released public code computes
  them (higher is better for the utility):

      y = (f(x) - f_min) / (f_max - f_min)

  with the public code's bounds `VEHICLE_F_MAX`, `VEHICLE_F_MIN` (y is about in [0, 1];
  see the module docstring for the sign).

  Args:
    x: (n, 5) inputs in [1, 3].

  Returns:
    (n, 3) normalised mass, collision acceleration and toe-board intrusion.

  Example:
    >>> vehicle_safety(jnp.ones((1, 5))).shape
    (1, 3)
  """
  f = vehicle_safety_raw(x)
  hi = jnp.asarray(VEHICLE_F_MAX, f.dtype)
  lo = jnp.asarray(VEHICLE_F_MIN, f.dtype)
  return (f - lo) / (hi - lo)


def piecewise_linear_utility(y: jax.Array, beta1, beta2, t, bias: float,
                             scale: float) -> jax.Array:
  """The public code's piecewise-linear utility over outcomes.

      h_i = beta1_i y_i + (beta2_i - beta1_i) t_i   if y_i < t_i,  else beta2_i y_i
      U   = sigmoid((sum_i h_i - bias) / scale)

  Args:
    y: (..., k) outcomes.
    beta1: (k,) slopes below the thresholds.
    beta2: (k,) slopes above the thresholds.
    t: (k,) thresholds.
    bias, scale: the sigmoid's shift and temperature (scale > 0).

  Returns:
    (...,) utilities in (0, 1).

  Example:
    >>> float(piecewise_linear_utility(jnp.zeros(2), [1.0, 1.0], [0.5, 0.5], [0.0, 0.0],
    ...                                0.0, 1.0))
    0.5
  """
  y = checks.as_float("y", y)
  beta1, beta2, t = (jnp.asarray(v, y.dtype) for v in (beta1, beta2, t))
  h = jnp.where(y < t, beta1 * y + (beta2 - beta1) * t, beta2 * y)
  return jax.nn.sigmoid((jnp.sum(h, axis=-1) - bias) / scale)


class Problem(NamedTuple):
  """A test problem: inputs in `bounds`, outcomes as the utility sees them, and the DM's
  hidden utility parameters.

  Attributes:
    name: registry key.
    dim: d, the number of inputs.
    num_outcomes: k.
    bounds: (d, 2) lower and upper bound of each input.
    outcomes: X_raw (n, d) -> Y (n, k), the outcomes the utility sees.
    beta1, beta2, t, bias, scale: the piecewise-linear utility's constants.
    y_lower, y_upper: (k,) the stated outcome ranges (shown in the prompts).
    outcome_names: k short names ("mass reduction").
    outcome_aliases: k tuples of other names the DM may use for each outcome.
    description: one paragraph about the problem, for the optimiser prompt.
  """
  name: str
  dim: int
  num_outcomes: int
  bounds: np.ndarray
  outcomes: Callable[[jax.Array], jax.Array]
  beta1: tuple[float, ...]
  beta2: tuple[float, ...]
  t: tuple[float, ...]
  bias: float
  scale: float
  y_lower: tuple[float, ...]
  y_upper: tuple[float, ...]
  outcome_names: tuple[str, ...]
  outcome_aliases: tuple[tuple[str, ...], ...]
  description: str


PROBLEMS: dict[str, Problem] = {
    "dtlz2": Problem(
        name="dtlz2", dim=8, num_outcomes=4, bounds=np.array([[0.0, 1.0]] * 8),
        outcomes=dtlz2,
        beta1=(4.0, 3.0, 2.0, 1.0), beta2=(0.4, 0.3, 0.2, 0.1), t=(1.0, 0.8, 0.5, 0.5),
        bias=-2.0, scale=1.7, y_lower=(0.0,) * 4, y_upper=(2.0,) * 4,
        outcome_names=("objective 1", "objective 2", "objective 3", "objective 4"),
        outcome_aliases=(("first objective", "f1"), ("second objective", "f2"),
                         ("third objective", "f3"), ("fourth objective", "f4")),
        description=("A synthetic benchmark (DTLZ2) with 8 tunable parameters and 4 "
                     "competing objectives; larger objective values are better for the "
                     "decision maker.")),
    "vehicle_safety": Problem(
        name="vehicle_safety", dim=5, num_outcomes=3, bounds=np.array([[1.0, 3.0]] * 5),
        outcomes=vehicle_safety,
        beta1=(2.0, 6.0, 8.0), beta2=(1.0, 2.0, 2.0), t=(0.5, 0.8, 0.8),
        bias=0.0, scale=1.0, y_lower=(0.0,) * 3, y_upper=(1.0,) * 3,
        outcome_names=("mass reduction", "acceleration reduction", "intrusion reduction"),
        outcome_aliases=(("weight reduction", "weight saving"),
                         ("collision acceleration reduction", "deceleration reduction"),
                         ("toe-board intrusion reduction", "footwell intrusion reduction")),
        description=("Crash-safety design of a car: the 5 parameters are the thicknesses "
                     "of five frontal structural members; the outcomes measure how much "
                     "the vehicle mass, the collision acceleration and the toe-board "
                     "intrusion are reduced (each scaled to about [0, 1]; higher is "
                     "better).")),
}


def get_problem(problem: Problem | str) -> Problem:
  """`problem` itself, or the registered problem of that name (one-line error if none)."""
  if isinstance(problem, Problem):
    return problem
  if problem not in PROBLEMS:
    raise ValueError(f"unknown problem {problem!r}; expected one of {sorted(PROBLEMS)}")
  return PROBLEMS[problem]


def utility(problem: Problem | str, Y: jax.Array) -> jax.Array:
  """The DM's true utility U(y) of outcomes (`piecewise_linear_utility` with the
  problem's constants).

  Args:
    problem: a `Problem` or its name.
    Y: (n, k) outcomes (finite).

  Returns:
    (n,) utilities in (0, 1).

  Example:
    >>> p = PROBLEMS["vehicle_safety"]
    >>> utility(p, jnp.asarray([[0.5, 0.8, 0.8]])).shape
    (1,)
  """
  p = get_problem(problem)
  Y = _check_matrix("Y", Y, p.num_outcomes)
  return piecewise_linear_utility(Y, p.beta1, p.beta2, p.t, p.bias, p.scale)


def utility_np(problem: Problem | str, Y) -> np.ndarray:
  """`utility` in NumPy float64, for host-side callers that evaluate it many times on
  small arrays (the simulated DM); the same equation, no JAX dispatch.

  Example:
    >>> float(utility_np("vehicle_safety", [[0.5, 0.8, 0.8]])[0]) > 0.5
    True
  """
  p = get_problem(problem)
  Y = np.asarray(Y, np.float64)
  if Y.ndim != 2 or Y.shape[1] != p.num_outcomes:
    raise ValueError(f"Y must have shape (n, {p.num_outcomes}), got {Y.shape}")
  checks.check_finite("Y", Y)
  b1, b2, t = (np.asarray(v, np.float64) for v in (p.beta1, p.beta2, p.t))
  h = np.where(Y < t, b1 * Y + (b2 - b1) * t, b2 * Y)
  return 1.0 / (1.0 + np.exp(-(h.sum(axis=1) - p.bias) / p.scale))


def to_unit(problem: Problem | str, X_raw: jax.Array) -> jax.Array:
  """Inputs in the problem's bounds mapped to [0, 1]^d: u = (x - lo) / (hi - lo).

  Example:
    >>> to_unit("vehicle_safety", jnp.full((1, 5), 2.0)).tolist()
    [[0.5, 0.5, 0.5, 0.5, 0.5]]
  """
  p = get_problem(problem)
  X_raw = _check_matrix("X_raw", X_raw, p.dim)
  b = jnp.asarray(p.bounds, X_raw.dtype)
  return (X_raw - b[:, 0]) / (b[:, 1] - b[:, 0])


def from_unit(problem: Problem | str, U: jax.Array) -> jax.Array:
  """Points of [0, 1]^d mapped to the problem's bounds: x = lo + u (hi - lo).

  Example:
    >>> from_unit("vehicle_safety", jnp.full((1, 5), 0.5)).tolist()
    [[2.0, 2.0, 2.0, 2.0, 2.0]]
  """
  p = get_problem(problem)
  U = _check_matrix("U", U, p.dim)
  b = jnp.asarray(p.bounds, U.dtype)
  return b[:, 0] + U * (b[:, 1] - b[:, 0])
