"""Polynomials over F_p: univariate (by values or coefficients) and multilinear extensions.

Conventions. A table of 2^n values is indexed big-endian: entry j holds the value at
x = (x_1, ..., x_n), the bits of j with x_1 the most significant. Its multilinear
extension (MLE) is

  f~(r) = sum_{x in {0,1}^n} eq(r, x) f(x),  eq(r, x) = prod_i (r_i x_i + (1 - r_i)(1 - x_i)),

the unique polynomial of degree <= 1 in each variable that agrees with f on the cube
(Thaler, "Proofs, Arguments, and Zero-Knowledge", section 3.5). A univariate round
polynomial of degree <= d travels as its values at 0, 1, ..., d.
"""

import jax.numpy as jnp
import numpy as np

from methods.interactive_proofs.field import PrimeField


def fold(F: PrimeField, table, r):
  """Binds the first variable of a table to r: (..., 2m) -> (..., m).

  f(r, x_2..x_n) = f(0, ...) + r (f(1, ...) - f(0, ...)), exact on the MLE.
  """
  half = table.shape[-1] // 2
  lo, hi = table[..., :half], table[..., half:]
  return F.add(lo, F.mul(r, F.sub(hi, lo)))


def mle_eval(F: PrimeField, table, point):
  """f~(point) for a table of 2^n values (leading axes batched) in O(2^n).

  Args:
    table: (..., 2^n) field elements.
    point: (n,) field elements.
  Returns:
    (...,) the multilinear extension at `point`.
  """
  n = point.shape[-1]
  if table.shape[-1] != 2**n:
    raise ValueError(f"table has {table.shape[-1]} entries; a point with {n} coordinates "
                     f"needs 2^{n} = {2**n}")
  for i in range(n):
    table = fold(F, table, point[..., i, None])
  return table[..., 0]


def eq_table(F: PrimeField, z):
  """The 2^n values eq(z, x) over the cube, big-endian, in O(2^n)."""
  table = jnp.ones((1,), dtype=z.dtype)
  for i in range(z.shape[-1]):
    pair = jnp.stack([F.sub(1, z[i]), z[i]])  # eq(z_i, 0), eq(z_i, 1)
    table = F.mul(table[:, None], pair[None, :]).reshape(-1)
  return table


def eq_eval(F: PrimeField, z, x):
  """eq(z, x) = prod_i (z_i x_i + (1 - z_i)(1 - x_i)) at field points, in O(n)."""
  zx = F.mul(z, x)
  term = F.add(zx, F.sub(F.sub(1, z), F.sub(x, zx)))  # z x + (1 - z)(1 - x)
  return F.prod(term, axis=-1)


def lagrange_eval(F: PrimeField, values, r):
  """Evaluates at r the polynomial of degree <= d with values[..., t] at t = 0..d.

  p(r) = sum_t values_t w_t prod_{k != t} (r - k),  w_t = 1 / prod_{k != t} (t - k),
  with the barycentric weights w_t computed once in Python integers. The d + 1 basis
  products are one (d + 1, d + 1) array of factors r - k (1 where k = t) reduced by a
  product tree: O(d^2) work per point in O(log d) traced multiplications, so a protocol
  that interpolates every round stays a small program to compile.
  """
  d = values.shape[-1] - 1
  weights = []
  for t in range(d + 1):
    den = 1
    for k in range(d + 1):
      if k != t:
        den = den * (t - k) % F.p
    weights.append(F.inv_int(den))
  r = jnp.asarray(r)
  ks = jnp.asarray(np.arange(d + 1) % F.p, dtype=r.dtype)
  diffs = F.sub(r[..., None], ks)  # (..., d + 1): r - k
  others = jnp.where(np.eye(d + 1, dtype=bool), jnp.ones((), r.dtype), diffs[..., None, :])
  basis = F.mul(jnp.asarray(weights, dtype=r.dtype), F.prod(others, axis=-1))  # (..., d + 1)
  return F.dot(values, basis, axis=-1)


def values_from_coefficients(F: PrimeField, coeffs, d: int):
  """Values at 0..d of the polynomial sum_j coeffs[..., j] X^j (Horner)."""
  ts = jnp.arange(d + 1, dtype=coeffs.dtype) % F.p
  acc = jnp.zeros(coeffs.shape[:-1] + (d + 1,), dtype=coeffs.dtype)
  for j in reversed(range(coeffs.shape[-1])):
    acc = F.add(F.mul(acc, ts), coeffs[..., j, None])
  return acc


def horner(F: PrimeField, coeffs, x):
  """sum_j coeffs[..., j] x^j, batched over leading axes of coeffs and x."""
  acc = jnp.zeros(jnp.broadcast_shapes(coeffs.shape[:-1], jnp.shape(x)), dtype=coeffs.dtype)
  for j in reversed(range(coeffs.shape[-1])):
    acc = F.add(F.mul(acc, x), coeffs[..., j])
  return acc
