"""Boundary checks for the public API: one-line errors that name the argument, before any work.

Value checks (signs, finiteness) run only on concrete values; a ``jax.core.Tracer``
is skipped, so under ``jit`` they cost nothing and never force a transfer. Shape
and dtype checks work on tracers too (they run once per trace).
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(value: Any) -> bool:
  """True unless ``value`` is a tracer (inside ``jit``/``vmap``/``grad``)."""
  return not isinstance(value, jax.core.Tracer)


def scalar(name: str, value: Any, *, low: float = 0.0, strict: bool = True,
           high: float | None = None) -> None:
  """Raises a ValueError naming ``name`` unless ``low < value`` (``<=`` when not
  ``strict``), ``value <= high`` when given, and ``value`` is finite.

  Example:
    >>> scalar("sigma", 0.0, strict=False)
  """
  if not is_concrete(value):
    return
  v = np.asarray(value, dtype=np.float64)
  ok = np.all(v > low) if strict else np.all(v >= low)
  ok = ok and np.all(np.isfinite(v)) and (high is None or np.all(v <= high))
  if not ok:
    bound = f"> {low:g}" if strict else f">= {low:g}"
    if high is not None:
      bound = f"in {'(' if strict else '['}{low:g}, {high:g}]"
    raise ValueError(f"{name} must be finite and {bound}, got {value}")


def positive_int(name: str, value: Any, low: int = 1) -> None:
  """Raises a ValueError naming ``name`` unless ``value`` is an int >= low (tracers skip).

  Example:
    >>> positive_int("num_steps", 8)
  """
  if not is_concrete(value):
    return
  if (isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer,
                                                        jax.Array))
      or np.ndim(value) != 0 or int(value) < low):
    raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def as_float(name: str, a: Any) -> jax.Array:
  """``a`` as a float array: integer and boolean arrays become the default float dtype.

  Integer starting points would otherwise give integer time grids (0, 0, ..., 1)
  or scan carries of the wrong type.

  Example:
    >>> as_float("x0", jnp.ones((2, 2), jnp.int32)).dtype
    dtype('float32')
  """
  a = jnp.asarray(a)
  if jnp.issubdtype(a.dtype, jnp.floating):
    return a
  if jnp.issubdtype(a.dtype, jnp.integer) or a.dtype == jnp.bool_:
    return a.astype(jnp.result_type(float))
  raise TypeError(f"{name} must be a real-valued array, got dtype {a.dtype}")


def same_shape(names: str, a: Any, b: Any) -> None:
  """Raises a ValueError naming both arrays unless their shapes are equal.

  Example:
    >>> same_shape("x and y", jnp.zeros(2), jnp.zeros(2))
  """
  if jnp.shape(a) != jnp.shape(b):
    raise ValueError(f"{names} must have the same shape, got {jnp.shape(a)} and "
                     f"{jnp.shape(b)}")


def weights(name: str, w: Any) -> None:
  """Raises a ValueError unless the (concrete) weights are >= 0, finite and sum to 1.

  Example:
    >>> weights("target.weights", jnp.array([0.25, 0.75]))
  """
  if not is_concrete(w):
    return
  v = np.asarray(w, dtype=np.float64)
  if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v < 0) or \
      not np.allclose(v.sum(axis=-1), 1.0, atol=1e-4):
    raise ValueError(f"{name} must be non-empty, >= 0 and sum to 1, got "
                     f"{np.array2string(v.ravel(), precision=4, threshold=8)}")

def check_finite(name: str, a: Any) -> None:
  """Raises a ValueError naming ``name`` and the first index of a NaN or inf in ``a``.

  A value check: skipped for tracers (inside ``jit`` it costs nothing), run on
  concrete arrays at the Python boundary before any compute.

  Args:
    name: the argument's name, for the error message.
    a: an array (or a tracer, which is not checked).

  Example:
    >>> check_finite("y", jnp.array([0.0, jnp.nan]))  # doctest: +SKIP
    ValueError: y has a non-finite value nan at index 1; expected finite numbers
  """
  if not is_concrete(a):
    return
  values = np.asarray(a)
  if not np.issubdtype(values.dtype, np.inexact):
    return
  bad = ~np.isfinite(values)
  if bad.any():
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = idx[0] if len(idx) == 1 else idx
    raise ValueError(f"{name} has a non-finite value {values[idx]} at index {where}; "
                     "expected finite numbers")
