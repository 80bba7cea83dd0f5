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

from typing import Any, Callable, Mapping

import chex
import jax
import jax.numpy as jnp

from methods.flow_matching import coupling as coupling_lib
from methods.flow_matching import paths
from common import checks

Array = jax.Array
BATCH_KEYS = ("x1", "cond")


def check_batch(batch: Any) -> None:
  """Checks the structure of a training batch: ``{"x1": (B, ...) float, "cond": (B, C)}``.

  A structure check (keys, ranks, leading sizes, dtypes): it works on tracers, so
  ``make_loss_fn``'s loss runs it when it is traced (once per compilation), and it
  adds nothing to the compiled step.

  Args:
    batch: the batch ``loss_fn`` receives.

  Raises:
    TypeError if ``batch`` is not a mapping or ``x1`` is not floating point;
    ValueError listing the expected and the given keys when one is missing, or naming
    the key whose shape is wrong.

  Example:
    >>> check_batch({"x1": jnp.zeros((4, 2)), "cond": jnp.zeros((4, 3))})
  """
  expected = list(BATCH_KEYS)
  if not isinstance(batch, Mapping):
    raise TypeError(f"batch must be a dict with keys {expected}, got a "
                    f"{type(batch).__name__}")
  missing = [k for k in BATCH_KEYS if k not in batch]
  if missing:
    raise ValueError(f"batch is missing keys {missing}: expected keys {expected}, got "
                     f"keys {sorted(map(str, batch))}")
  x1_shape, cond_shape = jnp.shape(batch["x1"]), jnp.shape(batch["cond"])
  if len(x1_shape) < 1:
    raise ValueError(f"batch['x1'] must have shape (B, ...), got {x1_shape}")
  if len(cond_shape) != 2 or cond_shape[0] != x1_shape[0]:
    raise ValueError(f"batch['cond'] must have shape ({x1_shape[0]}, C) like x1's batch "
                     f"size, got {cond_shape}")
  if not jnp.issubdtype(jnp.result_type(batch["x1"]), jnp.floating):
    raise TypeError(f"batch['x1'] must be floating point, got dtype "
                    f"{jnp.result_type(batch['x1'])}")


def drop_conditions(key: Array, cond: Array, p_uncond: float) -> Array:
  """CFG dropout: c_i <- b_i c_i with b_i ~ Bernoulli(1 - p_uncond), so a row becomes the
  null condition (zeros) with probability p_uncond.

  Args:
    key: PRNG key.
    cond: conditions (B, C).
    p_uncond: dropout probability.

  Returns:
    The conditions with dropped rows zeroed, (B, C).

  Example:
    >>> drop_conditions(key, jnp.ones((4, 3)), 0.5)   # about half the rows are zeros
  """
  checks.scalar("p_uncond", p_uncond, strict=False, high=1.0)
  if jnp.ndim(cond) != 2:
    raise ValueError(f"cond must have shape (B, C), got {jnp.shape(cond)}")
  keep = jax.random.bernoulli(key, 1.0 - p_uncond, cond.shape[:1])
  return cond * keep[:, None].astype(cond.dtype)


def cfm_loss(apply_fn: Callable, params, x0: Array, x1: Array, t: Array, cond: Array,
             z: Array | None = None, *, path: str = "linear", sigma: float = 0.0) -> Array:
  """The CFM loss (1/B) sum_i |v_theta(t_i, X_{t_i}, c_i) - u_{t_i}|^2 on given draws.

  Args:
    apply_fn: ``apply(params, t (B,), x (B, ...), cond (B, C)) -> (B, ...)``.
    params: the network's parameters.
    x0: source draws (B, ...).
    x1: target draws (B, ...).
    t: times (B,) (< 1 for the bridge).
    cond: conditions (B, C) (or whatever ``apply_fn`` takes).
    z: the bridge's Gaussian draws (B, ...) (``path="brownian_bridge"`` only).
    path: "linear" or "brownian_bridge" (see ``paths.sample_path``).
    sigma: the bridge's diffusion coefficient.

  Returns:
    The scalar loss (squared error summed over coordinates, averaged over the batch).

  Example:
    >>> loss = cfm_loss(model.apply, params, x0, x1, t, cond)
  """
  chex.assert_equal_shape([x0, x1])
  chex.assert_shape(t, x0.shape[:1])
  xt, target = paths.sample_path(path, x0, x1, t, z, sigma)
  pred = apply_fn(params, t, xt, cond)
  return jnp.mean(jnp.sum((pred - target).reshape(x0.shape[0], -1) ** 2, axis=1))


def make_loss_fn(apply_fn: Callable, *, path: str = "linear", sigma: float = 0.0,
                 p_uncond: float = 0.1, coupling: str = "independent",
                 t_max: float = 1.0 - 1e-3) -> Callable:
  """``loss_fn(params, batch, key) -> (loss, {})`` for ``common.train.train``.

  Draws X0 ~ N(0, I), optionally couples it to X1, t ~ U[0, t_max], the bridge's Z,
  drops conditions with probability ``p_uncond``, and returns ``cfm_loss``.

  Args:
    apply_fn: the network, ``apply(params, t, x, cond)``.
    path: "linear" or "brownian_bridge".
    sigma: the bridge's diffusion coefficient.
    p_uncond: CFG dropout probability.
    coupling: "independent" or "minibatch_ot".
    t_max: the largest training time (< 1 keeps the bridge target finite).

  Returns:
    The loss function; ``batch = {"x1": (B, ...), "cond": (B, C)}``. A batch without
    these keys (or with mismatched leading sizes) raises when the loss is first traced,
    listing the expected keys and the ones given (``check_batch``).

  Example:
    >>> loss_fn = make_loss_fn(model.apply, p_uncond=0.2)
    >>> common.train.train(init_fn=..., loss_fn=loss_fn, batch_fn=..., ...)
  """
  if path not in paths.PATHS:
    raise ValueError(f"unknown path {path!r}; expected one of {paths.PATHS}")
  if coupling not in coupling_lib.COUPLINGS:
    raise ValueError(f"unknown coupling {coupling!r}; expected one of {coupling_lib.COUPLINGS}")
  checks.scalar("p_uncond", p_uncond, strict=False, high=1.0)
  checks.scalar("sigma", sigma, strict=False)
  checks.scalar("t_max", t_max, high=1.0)
  if path == "brownian_bridge" and not t_max < 1.0:
    raise ValueError(f"t_max must be < 1 for the brownian_bridge path (its target "
                     f"divides by 1 - t), got {t_max}")

  def loss_fn(params, batch, key):
    check_batch(batch)  # runs at trace time only (structure, not values)
    x1, cond = batch["x1"], batch["cond"]
    k0, kt, kz, kc, kd = jax.random.split(key, 5)
    x0 = jax.random.normal(k0, x1.shape, x1.dtype)
    x0, x1, cond = coupling_lib.couple(kc, x0, x1, coupling, cond)
    t = jax.random.uniform(kt, x1.shape[:1], x1.dtype, 0.0, t_max)
    z = jax.random.normal(kz, x1.shape, x1.dtype) if path == "brownian_bridge" else None
    cond = drop_conditions(kd, cond, p_uncond)
    return cfm_loss(apply_fn, params, x0, x1, t, cond, z, path=path, sigma=sigma), {}

  return loss_fn
