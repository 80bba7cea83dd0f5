"""Guided sampling with DivIn and its baselines by name, one batch per class.

Every method samples dX/dt = v_guided(t, X) from t = 0 to 1 with Euler steps
(``flow_matching.sample_ode``); they differ in the field and the starting noise:

    cfg:                z ~ N(0, I),                       v_w = v(., 0) + w (v(., c) - v(., 0))
    cads:               z ~ N(0, I),                       CFG with the annealed condition c_hat(t)
    particle_guidance:  z ~ N(0, I),                       CFG + alpha (1 - t) RBF repulsion
    divin:              z ~ p(z) ∝ N(z; 0, I) e^{-tau U(z)} (Langevin), CFG
    divin_cads:         z from DivIn,                      CADS

(see ``baselines``, ``langevin`` and ``potential``).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from methods.divin import baselines
from methods.divin import langevin
from methods.divin import potential
from common import checks
from methods.flow_matching.sampling import sample_ode

Array = jax.Array
METHODS = ("cfg", "cads", "particle_guidance", "divin", "divin_cads")


def method_field(method: str, apply_fn: Callable, params, cond: Array, w, key: Array, *,
                 num_steps: int, noise_scale=0.0, alpha=0.0, cads_t1: float = 0.2,
                 cads_t2: float = 0.6) -> Callable:
  """The guided vector field ``field(t, x)`` that ``method`` samples along.

  Args:
    method: one of ``METHODS`` (DivIn's own field is CFG's; divin_cads uses CADS's).
    apply_fn: ``apply(params, t, x, cond)``.
    params: the network's parameters.
    cond: conditions (B, C).
    w: CFG weight.
    key: PRNG key of CADS's condition noise.
    num_steps: the sampler's number of Euler steps (CADS redraws noise per step).
    noise_scale: CADS noise scale s.
    alpha: particle-guidance strength.
    cads_t1, cads_t2: CADS's annealing window in flow time.

  Returns:
    ``field(t, x) -> (B, ...)``.

  Example:
    >>> field = method_field("cads", model.apply, params, cond, 7.0, key, num_steps=32,
    ...                      noise_scale=0.5)
  """
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  if method in ("cads", "divin_cads"):
    return baselines.cads_field(apply_fn, params, cond, w, key, num_steps=num_steps,
                                t1=cads_t1, t2=cads_t2, noise_scale=noise_scale)
  if method == "particle_guidance":
    return baselines.particle_guidance_field(apply_fn, params, cond, w, alpha=alpha)
  return baselines.cfg_field(apply_fn, params, cond, w)


def sample_classes(params, key: Array, w, tau, noise_scale, alpha, eta, *, apply_fn: Callable,
                   method: str, shape: tuple[int, ...], num_classes: int, num_steps: int,
                   divin_steps: int, rollout_steps: int, scheme: str = "ou",
                   cads_t1: float = 0.2, cads_t2: float = 0.6) -> Array:
  """One batch of ``shape`` per class with ``method``, vmapped over the classes.

  Class c draws (k_z, k_l, k_c) = split(key_c, 3) with key_c = split(key, C)[c]:
  z ~ N(0, I) from k_z, DivIn's Langevin noise from k_l (divin, divin_cads; ``tau``,
  ``eta``, ``divin_steps`` updates, potential with ``rollout_steps`` Euler steps),
  CADS's condition noise from k_c; then ``num_steps`` Euler steps of the method's field.

  Args:
    params: the network's parameters.
    key: PRNG key.
    w, tau, noise_scale, alpha, eta: CFG weight, DivIn inverse temperature, CADS noise
      scale, particle-guidance strength, Langevin step (traced scalars: one compilation
      serves a whole sweep).
    apply_fn: ``apply(params, t, x, cond)`` (static).
    method: one of ``METHODS``.
    shape: (n, ...) the samples of one class.
    num_classes: C.
    num_steps: Euler steps of the sampler.
    divin_steps: Langevin updates of DivIn.
    rollout_steps: Euler steps of the potential's clean-sample prediction.
    scheme: Langevin scheme, "ou" or "euler".
    cads_t1, cads_t2: CADS's annealing window.

  Returns:
    Samples (C, *shape).

  Example:
    >>> x = sample_classes(params, key, 7.0, 0.2, 0.0, 0.0, 0.05, apply_fn=model.apply,
    ...                    method="divin", shape=(400, 2), num_classes=3, num_steps=32,
    ...                    divin_steps=30, rollout_steps=8)

  Bad arguments raise a one-line ValueError naming them before tracing; the traced
  scalars are checked only when they are concrete (not under an outer ``jit``).
  """
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  if scheme not in langevin.SCHEMES:
    raise ValueError(f"unknown Langevin scheme {scheme!r}; expected one of {langevin.SCHEMES}")
  shape = tuple(shape)
  if not shape or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool)
                          and s >= 1 for s in shape):
    raise ValueError(f"shape must be a non-empty tuple of ints >= 1, got {shape}")
  for name, value in (("num_classes", num_classes), ("num_steps", num_steps),
                      ("rollout_steps", rollout_steps)):
    checks.positive_int(name, value)
  checks.positive_int("divin_steps", divin_steps, low=0)
  baselines.check_cads_window(cads_t1, cads_t2)
  checks.scalar("w", w, low=-float("inf"))
  checks.scalar("alpha", alpha, low=-float("inf"))
  checks.scalar("noise_scale", noise_scale, strict=False)
  checks.scalar("tau", tau, strict=False)
  checks.scalar("eta", eta)
  return _sample_classes(params, key, w, tau, noise_scale, alpha, eta, apply_fn=apply_fn,
                         method=method, shape=shape, num_classes=num_classes,
                         num_steps=num_steps, divin_steps=divin_steps,
                         rollout_steps=rollout_steps, scheme=scheme, cads_t1=cads_t1,
                         cads_t2=cads_t2)


@functools.partial(jax.jit, static_argnames=("apply_fn", "method", "shape", "num_classes",
                                             "num_steps", "divin_steps", "rollout_steps",
                                             "scheme", "cads_t1", "cads_t2"))
def _sample_classes(params, key, w, tau, noise_scale, alpha, eta, *, apply_fn, method, shape,
                    num_classes, num_steps, divin_steps, rollout_steps, scheme, cads_t1,
                    cads_t2):
  grad_fn = potential.potential_grad(apply_fn, params, rollout_steps)

  def one_class(c, key):
    k_z, k_l, k_c = jax.random.split(key, 3)
    cond = jnp.broadcast_to(jax.nn.one_hot(c, num_classes), (shape[0], num_classes))
    z = jax.random.normal(k_z, shape)
    if method in ("divin", "divin_cads"):
      z = langevin.divin_init(k_l, z, cond, grad_fn, tau=tau, eta=eta, num_steps=divin_steps,
                              scheme=scheme)
    field = method_field(method, apply_fn, params, cond, w, k_c, num_steps=num_steps,
                         noise_scale=noise_scale, alpha=alpha, cads_t1=cads_t1,
                         cads_t2=cads_t2)
    return sample_ode(field, z, num_steps=num_steps, solver="euler")

  return jax.vmap(one_class)(jnp.arange(num_classes), jax.random.split(key, num_classes))
