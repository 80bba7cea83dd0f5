"""Positive-definite kernels and kernel matrices as pure functions.

Every kernel here is stationary, k(x, y) = phi(||x - y|| / ell), and is exposed as
a function ``kernel(x, y, lengthscale) -> (n, m) Gram matrix`` over rows of ``x``
(n, d) and ``y`` (m, d). One-dimensional inputs of shape (n,) are treated as (n, 1).

    rbf        k = exp(-r^2 / 2)
    laplace    k = exp(-r)                                  (= Matern 1/2)
    matern32   k = (1 + sqrt(3) r) exp(-sqrt(3) r)
    matern52   k = (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)

with r = ||x - y|| / lengthscale. See Rasmussen & Williams (2006), ch. 4.
All functions work under ``jit``, ``vmap`` (e.g. over lengthscales) and ``grad``.
"""

from __future__ import annotations

from typing import Callable

from flax import struct
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
KernelFn = Callable[[Array, Array, Array], Array]


def as_matrix(x: Array) -> Array:
  """Returns ``x`` as a 2-D (n, d) array; a vector of shape (n,) becomes (n, 1)."""
  x = jnp.asarray(x)
  if x.ndim == 1:
    return x[:, None]
  if x.ndim != 2:
    raise ValueError(f"expected inputs of shape (n,) or (n, d), got shape {x.shape}")
  return x


def squared_distances(x: Array, y: Array) -> Array:
  """Pairwise squared Euclidean distances ||x_i - y_j||^2, clipped at 0. Shape (n, m)."""
  x, y = as_matrix(x), as_matrix(y)
  if x.shape[1] != y.shape[1]:
    raise ValueError(f"feature sizes differ: x has {x.shape[1]}, y has {y.shape[1]}")
  sq = (jnp.sum(x * x, axis=1)[:, None] + jnp.sum(y * y, axis=1)[None, :]
        - 2.0 * x @ y.T)
  return jnp.maximum(sq, 0.0)


def check_lengthscale(lengthscale) -> None:
  """Raises a ValueError unless a concrete lengthscale is finite and > 0 (every entry).

  Skipped for tracers (inside ``jit``/``vmap``/``grad`` it costs nothing). A zero or
  negative lengthscale would give NaN or inf Gram matrices with no error.

  Example:
    >>> check_lengthscale(0.5)
  """
  if isinstance(lengthscale, jax.core.Tracer):
    return
  value = np.asarray(lengthscale, dtype=np.float64)
  if not (np.all(np.isfinite(value)) and np.all(value > 0)):
    raise ValueError(f"kernel lengthscale must be finite and > 0, got {lengthscale}")


def _scaled_distance(x: Array, y: Array, lengthscale: Array) -> Array:
  # sqrt has an infinite derivative at 0; the where keeps gradients finite on the diagonal.
  sq = squared_distances(x, y) / jnp.square(lengthscale)
  safe = jnp.where(sq > 0, sq, 1.0)
  return jnp.where(sq > 0, jnp.sqrt(safe), 0.0)


def rbf(x: Array, y: Array, lengthscale: Array) -> Array:
  """Gaussian kernel exp(-||x - y||^2 / (2 ell^2))."""
  check_lengthscale(lengthscale)
  return jnp.exp(-0.5 * squared_distances(x, y) / jnp.square(lengthscale))


def laplace(x: Array, y: Array, lengthscale: Array) -> Array:
  """Laplace (Matern 1/2) kernel exp(-||x - y|| / ell)."""
  check_lengthscale(lengthscale)
  return jnp.exp(-_scaled_distance(x, y, lengthscale))


def matern32(x: Array, y: Array, lengthscale: Array) -> Array:
  """Matern 3/2 kernel (1 + sqrt(3) r) exp(-sqrt(3) r), r = ||x - y|| / ell."""
  check_lengthscale(lengthscale)
  r = jnp.sqrt(3.0) * _scaled_distance(x, y, lengthscale)
  return (1.0 + r) * jnp.exp(-r)


def matern52(x: Array, y: Array, lengthscale: Array) -> Array:
  """Matern 5/2 kernel (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)."""
  check_lengthscale(lengthscale)
  r = jnp.sqrt(5.0) * _scaled_distance(x, y, lengthscale)
  return (1.0 + r + r * r / 3.0) * jnp.exp(-r)


KERNELS: dict[str, KernelFn] = {
    "rbf": rbf,
    "laplace": laplace,
    "matern12": laplace,
    "matern32": matern32,
    "matern52": matern52,
}


def get_kernel(name: str) -> KernelFn:
  """Looks up a kernel by name; unknown names raise with the allowed values."""
  try:
    return KERNELS[name]
  except KeyError:
    raise ValueError(
        f"unknown kernel {name!r}; expected one of {sorted(KERNELS)}") from None


def median_heuristic(x: Array, max_points: int = 1000) -> Array:
  """Median pairwise distance between rows of ``x`` (on at most ``max_points`` rows).

  The usual default lengthscale: ell = median_{i<j} ||x_i - x_j||. Rows beyond
  ``max_points`` are ignored (deterministically: the first ones are used).
  """
  if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 2:
    raise ValueError(f"max_points must be an int >= 2, got {max_points!r}")
  x = as_matrix(x)[:max_points]
  n = x.shape[0]
  if n < 2:
    raise ValueError(f"median heuristic needs at least 2 points, got {n}")
  d = jnp.sqrt(squared_distances(x, x))
  iu = jnp.triu_indices(n, k=1)
  return jnp.median(d[iu])


@struct.dataclass
class Kernel:
  """A named stationary kernel with its lengthscale, usable as ``k(x, y) -> Gram``.

  A pytree: the lengthscale is a leaf (so it can be traced, vmapped over or
  differentiated), the name is static.
  """
  lengthscale: Array
  name: str = struct.field(pytree_node=False, default="rbf")

  def __call__(self, x: Array, y: Array) -> Array:
    return get_kernel(self.name)(x, y, self.lengthscale)


@struct.dataclass
class ProductKernel:
  """k((a_1..a_J), (b_1..b_J)) = prod_j k_j(a_j, b_j) over tuple-structured inputs.

  Inputs are tuples of arrays sharing their leading axis, e.g. (t, x) for a
  treatment/covariate product kernel k_T(t, t') k_X(x, x').
  """
  factors: tuple

  def __call__(self, za: tuple, zb: tuple) -> Array:
    if len(za) != len(self.factors) or len(zb) != len(self.factors):
      raise ValueError(
          f"product kernel has {len(self.factors)} factors, inputs have "
          f"{len(za)} and {len(zb)} parts")
    out = self.factors[0](za[0], zb[0])
    for k, a, b in zip(self.factors[1:], za[1:], zb[1:]):
      out = out * k(a, b)
    return out
