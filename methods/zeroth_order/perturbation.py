"""Seeded perturbations of a parameter pytree and the two-point (SPSA) difference.

Every zeroth-order estimator here has the same form. A direction z (a pytree like the
parameters) is a pure function of a PRNG key, so it can be regenerated instead of
stored (the "seed trick" of MeZO):

    z = sample(key)                                   (regenerated, never kept)
    two-sided:  c = (L(theta + eps z) - L(theta - eps z)) / (2 eps)
    one-sided:  c = (L(theta + eps z) - L(theta)) / eps
    g_hat = c * z                                     (z regenerated from the key again)

c is the projected gradient (the directional derivative of L along z, up to O(eps^2)
two-sided or O(eps) one-sided). What differs between MeZO, LOZO and AGZO is only the
law of z. `finite_difference` takes `sample` as a zero-argument function and calls it
once per use, so each perturbed copy is computed leaf by leaf as theta + eps z(key_i)
(under jit the random bits and the add fuse into one producer per leaf).

References:
  Malladi et al., "Fine-Tuning Language Models with Just Forward Passes" (MeZO),
  NeurIPS 2023. Spall, "Multivariate stochastic approximation using a simultaneous
  perturbation gradient approximation", IEEE TAC 1992.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
import optax


class ZOEstimate(NamedTuple):
  """What every estimator (and the first-order baseline) returns.

  Attributes:
    grads: pytree like the params, the gradient estimate c * z (first order: the
      true gradient).
    loss: the loss at theta (one-sided / first order) or the mean of the two
      perturbed losses (two-sided).
    projected_grad: the scalar c (first order: the gradient norm).
    num_forward: forward passes this estimate used (a Python int, static).
  """
  grads: Any
  loss: jax.Array
  projected_grad: jax.Array
  num_forward: int


def check_eps(fn: str, eps) -> None:
  """eps must be a finite number > 0 (NaN, inf, 0 and negatives give NaN or no step)."""
  if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
    raise ValueError(f"{fn}: eps={eps!r}; expected a finite number > 0")


def check_positive_int(fn: str, **values) -> None:
  """Each value must be a Python (or numpy) int >= 1: a float rank or interval would
  become an array shape and fail deep inside tracing."""
  for name, value in values.items():
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
      raise ValueError(f"{fn}: {name}={value!r}; expected an int >= 1")


def check_key(fn: str, key, allow_none: bool = False) -> None:
  """key must be a PRNG key: a raw uint32 (2,) `jax.random.PRNGKey` or a typed key."""
  if key is None and allow_none:
    return
  dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
  if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) and shape == ():
    return
  if dtype == np.uint32 and shape is not None and len(shape) == 1:
    return
  raise TypeError(f"{fn}: key={key!r}; expected a PRNG key such as jax.random.PRNGKey(0)")


def leaf_keys(params: Any, key: jax.Array) -> Any:
  """A pytree like `params` of keys fold_in(key, i), i the leaf's flatten index."""
  leaves, treedef = jax.tree.flatten(params)
  return jax.tree.unflatten(treedef, [jax.random.fold_in(key, i) for i in range(len(leaves))])


def gaussian_direction(params: Any, key: jax.Array) -> Any:
  """z ~ N(0, I): standard normal leaves shaped and typed like `params`.

  Leaf i is drawn from fold_in(key, i) (`leaf_keys`), so z is a pure function of
  `key` and the tree structure, and one leaf can be regenerated alone.

  Args:
    params: the pytree whose structure, shapes and dtypes z takes.
    key: a PRNG key.

  Returns:
    z, a pytree like `params`.

  Example:
      >>> z = gaussian_direction({"w": jnp.zeros((2, 3))}, jax.random.PRNGKey(0))
      >>> z["w"].shape
      (2, 3)
  """
  return jax.tree.map(lambda p, k: jax.random.normal(k, p.shape, p.dtype), params,
                      leaf_keys(params, key))


def _moved(params: Any, direction: Any, scale) -> Any:
  """theta + scale * z, in the params' dtypes."""
  return optax.tree.cast_like(optax.tree.add_scale(params, scale, direction), params)


def finite_difference(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batch: Any,
                      sample: Callable[[], Any], eps: float, *, two_sided: bool = True,
                      base_loss: jax.Array | None = None,
                      base_forward: int = 0) -> ZOEstimate:
  """The two-point estimate g_hat = c z, with z = sample() regenerated at each use.

      two-sided:  c = (L(theta + eps z) - L(theta - eps z)) / (2 eps)
      one-sided:  c = (L(theta + eps z) - L(theta)) / eps,     g_hat = c z

  Args:
    loss_fn: (params, batch) -> scalar loss.
    params: theta.
    batch: passed to loss_fn unchanged.
    sample: () -> z, a pure function of a key closed over (same z every call).
    eps: the perturbation size (> 0).
    two_sided: c = (L+ - L-) / (2 eps); else c = (L+ - L(theta)) / eps, which needs
      `base_loss` = L(theta).
    base_loss: L(theta), already computed by the caller (one-sided only).
    base_forward: forward passes the caller spent on base_loss (counted in num_forward).

  Returns:
    A `ZOEstimate` (num_forward = 2 two-sided, 1 + base_forward one-sided).

  Example:
      >>> loss_fn = lambda p, b: jnp.sum((p["w"] - b) ** 2)
      >>> params = {"w": jnp.zeros(3)}
      >>> sample = lambda: gaussian_direction(params, jax.random.PRNGKey(0))
      >>> est = finite_difference(loss_fn, params, jnp.ones(3), sample, 1e-3)
      >>> est.num_forward
      2
  """
  plus = loss_fn(_moved(params, sample(), eps), batch)
  if two_sided:
    minus = loss_fn(_moved(params, sample(), -eps), batch)
    c = (plus - minus) / (2.0 * eps)
    loss = 0.5 * (plus + minus)
    count = 2
  else:
    if base_loss is None:
      raise ValueError("finite_difference(two_sided=False) needs base_loss = L(theta)")
    c = (plus - base_loss) / eps
    loss = base_loss
    count = 1
  z = sample()
  return ZOEstimate(optax.tree.cast_like(optax.tree.scale(c, z), z), loss, c,
                    count + base_forward)
