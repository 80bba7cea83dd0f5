"""The conditional flow-matching loss with classifier-free-guidance dropout.

For a network v_theta(t, x, c), a path with point X_t and conditional target u_t
(``paths.sample_path``), and conditions c dropped to the null vector with
probability p_uncond (Ho & Salimans 2022),

    L(theta) = E_{t, X0, X1, Z, c} | v_theta(t, X_t, c) - u_t |^2,

with t ~ U[0, t_max] (t_max < 1 keeps the bridge drift target (X1 - X_t)/(1 - t)
finite), X0 ~ N(0, I), and optional minibatch-OT coupling of (X0, X1).
``make_loss_fn`` returns ``loss_fn(params, batch, key)`` for common.train.train,
where ``batch = {"x1": (B, ...), "cond": (B, C)}``.
"""

from __future__ import annotations

from typing import Callable

import chex
import jax
import jax.numpy as jnp

from methods.flow_matching import coupling as coupling_lib
from methods.flow_matching import paths

Array = jax.Array


def drop_conditions(key: Array, cond: Array, p_uncond: float) -> Array:
  """Replaces each row of cond by zeros (the null condition) with probability p."""
  keep = jax.random.bernoulli(key, 1.0 - p_uncond, cond.shape[:1])
  return cond * keep[:, None].astype(cond.dtype)


def cfm_loss(apply_fn: Callable, params, x0: Array, x1: Array, t: Array, cond: Array,
             z: Array | None = None, *, path: str = "linear", sigma: float = 0.0) -> Array:
  """Mean over the batch of |v_theta(t, X_t, c) - u_t|^2 (summed over coordinates)."""
  chex.assert_equal_shape([x0, x1])
  chex.assert_shape(t, x0.shape[:1])
  xt, target = paths.sample_path(path, x0, x1, t, z, sigma)
  pred = apply_fn(params, t, xt, cond)
  return jnp.mean(jnp.sum((pred - target).reshape(x0.shape[0], -1) ** 2, axis=1))


def make_loss_fn(apply_fn: Callable, *, path: str = "linear", sigma: float = 0.0,
                 p_uncond: float = 0.1, coupling: str = "independent",
                 t_max: float = 1.0 - 1e-3) -> Callable:
  """loss_fn(params, batch, key) -> (loss, {}) for the shared training loop."""
  if path not in paths.PATHS:
    raise ValueError(f"unknown path {path!r}; expected one of {paths.PATHS}")
  if coupling not in coupling_lib.COUPLINGS:
    raise ValueError(f"unknown coupling {coupling!r}; expected one of {coupling_lib.COUPLINGS}")

  def loss_fn(params, batch, key):
    x1, cond = batch["x1"], batch["cond"]
    k0, kt, kz, kc, kd = jax.random.split(key, 5)
    x0 = jax.random.normal(k0, x1.shape, x1.dtype)
    x0, x1, cond = coupling_lib.couple(kc, x0, x1, coupling, cond)
    t = jax.random.uniform(kt, x1.shape[:1], x1.dtype, 0.0, t_max)
    z = jax.random.normal(kz, x1.shape, x1.dtype) if path == "brownian_bridge" else None
    cond = drop_conditions(kd, cond, p_uncond)
    return cfm_loss(apply_fn, params, x0, x1, t, cond, z, path=path, sigma=sigma), {}

  return loss_fn
