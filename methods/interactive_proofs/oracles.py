"""Low-degree oracles: polynomials the verifier may query at any point of F^m.

`CPPolynomial` is a polynomial of degree <= d in each of m variables written as a sum
of R products of univariate polynomials (a CP / tensor-rank decomposition),

  O(x) = sum_{r=1}^{R} c_r prod_{j=1}^{m} u_{r,j}(x_j),

so one query costs O(R m d) while its values on the cube {0,1}^m are 2^m arbitrary-
looking numbers: a "polynomial judge" whose answers on N = 2^m items a computation
aggregates. `line_test` is the low-degree test of Rubinfeld and Sudan (1996): the
restriction of O to a random line a + t b has degree <= m d in t, so the values at
t = 0..md+1 must lie on one polynomial of that degree. `corrupt` makes an oracle that
answers wrongly on a fraction of the field's points (what the test and the direct
queries are for).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from methods.interactive_proofs import polynomials as poly
from methods.interactive_proofs.field import PrimeField


class CPPolynomial(NamedTuple):
  """coeffs (R,), factors (R, m, d+1): u_{r,j}(X) = sum_k factors[r, j, k] X^k."""
  coeffs: jax.Array
  factors: jax.Array

  @property
  def num_vars(self) -> int:
    return self.factors.shape[1]

  @property
  def degree(self) -> int:
    return self.factors.shape[2] - 1


def random_cp(F: PrimeField, key, num_vars: int, degree: int, rank: int) -> CPPolynomial:
  """A random polynomial of degree <= `degree` per variable and CP rank <= `rank`."""
  k1, k2 = jax.random.split(key)
  return CPPolynomial(F.random(k1, (rank,)), F.random(k2, (rank, num_vars, degree + 1)))


def cp_eval(F: PrimeField, oracle: CPPolynomial, points):
  """O(points) for points (P, m): (P,) values, O(P R m d)."""
  univariate = poly.horner(F, oracle.factors[None], points[:, None, :])  # (P, R, m)
  return F.dot(F.prod(univariate, axis=2), oracle.coeffs[None], axis=-1)


def corrupt(F: PrimeField, fn, fraction: float, seed: int = 0):
  """An oracle that agrees with `fn` except on about `fraction` of F^m's points, where
  it answers a pseudo-random value; which points are wrong is a hash of the point."""
  threshold = int(fraction * 2**32)

  def corrupted(points):
    h = jnp.full(points.shape[:1], seed, dtype=jnp.uint32)
    for j in range(points.shape[1]):  # FNV-1a-style mixing of the coordinates
      h = (h ^ points[:, j].astype(jnp.uint32)) * jnp.uint32(16777619)
      h = h ^ (h >> 15)
    wrong = h.astype(jnp.int64) < threshold
    return jnp.where(wrong, F.add(fn(points), 1 + h.astype(jnp.int64) % (F.p - 1)),
                     fn(points))

  return corrupted


def line_test(F: PrimeField, fn, num_vars: int, total_degree: int, key, repetitions: int = 1):
  """Rubinfeld-Sudan line test: queries (total_degree + 2) points on each random line.

  Returns:
    True where, on every line, the value at t = total_degree + 1 equals the degree-
    `total_degree` interpolant of the values at t = 0..total_degree. A polynomial of
    total degree <= total_degree always passes.
  """
  ka, kb = jax.random.split(key)
  a = F.random(ka, (repetitions, 1, num_vars))
  b = F.random(kb, (repetitions, 1, num_vars))
  ts = jnp.arange(total_degree + 2, dtype=jnp.int64)[None, :, None]
  points = F.add(a, F.mul(ts, b)).reshape(-1, num_vars)
  values = fn(points).reshape(repetitions, total_degree + 2)
  predicted = poly.lagrange_eval(F, values[:, :-1], jnp.int64(total_degree + 1))
  return jnp.all(predicted == values[:, -1])
