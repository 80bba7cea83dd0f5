"""Probability paths between a source X0 ~ N(0, I) and a target X1, as pure functions.

Two paths from "Convergence of Brownian diffusion flow matching" (ICML 2026, the DFM
paper; abstract line 7 of papers/icml2026-abstracts.txt) and the flow-matching
literature it builds on:

* Linear (rectified) path, deterministic:

      X_t = (1 - t) X0 + t X1,           conditional velocity  u_t = X1 - X0.

* Brownian bridge path with diffusion coefficient sigma:

      X_t = (1 - t) X0 + t X1 + sigma sqrt(t (1 - t)) Z,    Z ~ N(0, I),

  the time-t marginal of the bridge dX = (X1 - X)/(1 - t) dt + sigma dW started at
  X0 and pinned at X1. Its conditional (Schrodinger-bridge style) SDE drift is

      b_t(x | X1) = (X1 - x) / (1 - t) = X1 - X0 - sigma sqrt(t / (1 - t)) Z,

  and the SDE dX = b_t(X) dt + sigma dW with b_t(x) = E[(X1 - X_t)/(1 - t) | X_t = x]
  has the same one-time marginals as the bridge mixture (Markovian projection).
  With sigma = 0 the drift is the linear path's velocity field. The ODE velocity
  that transports the bridge marginals deterministically is

      v_t(x | X0, X1, Z) = X1 - X0 + sigma (1 - 2t) / (2 sqrt(t (1 - t))) Z.

Times ``t`` have shape (B,) and broadcast against samples of shape (B, ...).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array
PATHS = ("linear", "brownian_bridge")


class PathSample(NamedTuple):
  """A point on the path and the regression target there."""
  xt: Array      # (B, ...)
  target: Array  # (B, ...) conditional velocity (linear) or SDE drift (bridge)


def _bcast(t: Array, x: Array) -> Array:
  t = jnp.asarray(t, x.dtype)
  return t.reshape(t.shape + (1,) * (x.ndim - t.ndim))


def linear_interpolant(x0: Array, x1: Array, t: Array) -> Array:
  """X_t = (1 - t) X0 + t X1.

  Args:
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    t: times (B,) (or a scalar).

  Returns:
    X_t, the shape of x0.

  Example:
    >>> linear_interpolant(jnp.zeros((2, 1)), jnp.ones((2, 1)), jnp.full((2,), 0.25))  # 0.25
  """
  t = _bcast(t, x0)
  return (1.0 - t) * x0 + t * x1


def linear_velocity(x0: Array, x1: Array) -> Array:
  """u_t(x | X0, X1) = X1 - X0 (constant along the straight line).

  Args:
    x0: source draws (B, ...).
    x1: target draws (B, ...).

  Returns:
    The conditional velocity, the shape of x0.

  Example:
    >>> linear_velocity(jnp.zeros(2), jnp.ones(2))   # [1, 1]
  """
  return x1 - x0


def brownian_bridge(x0: Array, x1: Array, t: Array, z: Array, sigma: float) -> Array:
  """X_t = (1 - t) X0 + t X1 + sigma sqrt(t (1 - t)) Z.

  Args:
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    t: times (B,).
    z: standard normal draws, the shape of x0.
    sigma: diffusion coefficient.

  Returns:
    X_t, the shape of x0.

  Example:
    >>> xt = brownian_bridge(x0, x1, jnp.full((B,), 0.5), z, 1.0)
  """
  tb = _bcast(t, x0)
  return linear_interpolant(x0, x1, t) + sigma * jnp.sqrt(tb * (1.0 - tb)) * z


def bridge_drift(x1: Array, xt: Array, t: Array) -> Array:
  """The pinned Brownian bridge drift b_t(x | X1) = (X1 - x) / (1 - t), t < 1.

  Args:
    x1: target draws (B, ...).
    xt: points on the path (B, ...).
    t: times (B,), each < 1.

  Returns:
    The drift, the shape of xt.

  Example:
    >>> bridge_drift(jnp.ones((1, 2)), jnp.zeros((1, 2)), jnp.array([0.5]))   # [[2, 2]]
  """
  return (x1 - xt) / (1.0 - _bcast(t, xt))


def bridge_ode_velocity(x0: Array, x1: Array, t: Array, z: Array, sigma: float) -> Array:
  """v_t = X1 - X0 + sigma (1 - 2t) / (2 sqrt(t (1 - t))) Z, for 0 < t < 1.

  The time derivative of ``brownian_bridge`` at fixed (X0, X1, Z).

  Args:
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    t: times (B,) in (0, 1).
    z: the bridge's standard normal draws.
    sigma: diffusion coefficient.

  Returns:
    The velocity, the shape of x0.

  Example:
    >>> bridge_ode_velocity(x0, x1, jnp.full((B,), 0.5), z, 1.0)   # = x1 - x0 at t = 1/2
  """
  tb = _bcast(t, x0)
  return x1 - x0 + sigma * (1.0 - 2.0 * tb) / (2.0 * jnp.sqrt(tb * (1.0 - tb))) * z


def sample_path(path: str, x0: Array, x1: Array, t: Array, z: Array | None = None,
                sigma: float = 0.0) -> PathSample:
  """The point X_t and the regression target of ``path``:

      linear:           X_t = (1 - t) X0 + t X1,                      target X1 - X0;
      brownian_bridge:  X_t = (1 - t) X0 + t X1 + sigma sqrt(t(1-t)) Z,  target (X1 - X_t)/(1 - t).

  Args:
    path: "linear" or "brownian_bridge".
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    t: times (B,) (< 1 for the bridge).
    z: the bridge's Gaussian draws (required for the bridge).
    sigma: the bridge's diffusion coefficient.

  Returns:
    ``PathSample(xt, target)``.

  Example:
    >>> xt, target = sample_path("brownian_bridge", x0, x1, t, z, sigma=1.0)
  """
  if path not in PATHS:
    raise ValueError(f"unknown path {path!r}; expected one of {PATHS}")
  if jnp.shape(x0) != jnp.shape(x1):
    raise ValueError(f"x0 and x1 must have the same shape, got {jnp.shape(x0)} and "
                     f"{jnp.shape(x1)}")
  if jnp.ndim(t) > 1 or (jnp.ndim(t) == 1 and jnp.shape(t)[0] != jnp.shape(x0)[0]):
    raise ValueError(f"times t must be a scalar or have shape ({jnp.shape(x0)[0]},) like "
                     f"x0's batch, got {jnp.shape(t)}")
  if path == "linear":
    return PathSample(linear_interpolant(x0, x1, t), linear_velocity(x0, x1))
  if path == "brownian_bridge":
    if z is None:
      raise ValueError("the brownian_bridge path needs the Gaussian draw z")
    xt = brownian_bridge(x0, x1, t, z, sigma)
    return PathSample(xt, bridge_drift(x1, xt, t))
  raise ValueError(f"unknown path {path!r}; expected one of {PATHS}")
