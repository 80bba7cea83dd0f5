"""ODE and SDE samplers (diffrax) with classifier-free guidance.

A vector field is ``field(t, x) -> dx/dt`` on a whole batch x (B, ...) (so fields
that couple particles, such as particle guidance, fit the same samplers). Guided
fields (Ho & Salimans 2022):

    v_w(t, x) = v(t, x, null) + w (v(t, x, c) - v(t, x, null)),

so w = 1 is the plain conditional model and w = 0 the unconditional one.

* ``sample_ode``: dX/dt = v(t, X) from t = 0 to 1: fixed-grid "euler" / "heun"
  with ``num_steps`` steps on linspace(0, 1, N + 1), or adaptive "dopri5" with
  diffrax (``PIDController(rtol, atol)``). The fixed-grid solvers run as a
  ``lax.scan`` of the step (the same steps as diffrax's Euler / Heun with
  ``StepTo`` on that grid, which ``solver="diffrax_euler"`` / ``"diffrax_heun"``
  still run): diffrax's adaptive-loop bookkeeping costs about 0.1 ms a step on a CPU,
  more than a small network's forward pass.
* ``sample_sde``: Euler-Maruyama for dX = b(t, X) dt + sigma dW on the same grid,
  with a diffrax Brownian path drawn from ``key``; the drift is evaluated at
  t_k = k/N only, never at the singular t = 1.

Both are pure functions of their array arguments and jit/vmap-able (fields are
closures over params; see ``guided_field``).
"""

from __future__ import annotations

from typing import Callable

import diffrax
import jax
import jax.numpy as jnp
import lineax as lx

from common import checks

Array = jax.Array
Field = Callable[[Array, Array], Array]
ODE_SOLVERS = ("euler", "heun", "dopri5", "diffrax_euler", "diffrax_heun")


def guided_field(apply_fn: Callable, params, cond: Array, w) -> Field:
  """Classifier-free guidance: v_w(t, x) = v(t, x, 0) + w (v(t, x, c) - v(t, x, 0)).

  Args:
    apply_fn: ``apply(params, t (B,), x (B, ...), cond (B, C))``.
    params: the network's parameters.
    cond: conditions (B, C), one per sample (zeros: the null condition).
    w: guidance weight (1: conditional model, 0: unconditional).

  Returns:
    ``field(t, x) -> (B, ...)`` for ``sample_ode``.

  Example:
    >>> x1 = sample_ode(guided_field(model.apply, params, cond, 3.0), x0, num_steps=32)
  """
  null = jnp.zeros_like(cond)

  def field(t, x):
    tb = jnp.full(x.shape[:1], t, x.dtype)
    v_c = apply_fn(params, tb, x, cond)
    v_u = apply_fn(params, tb, x, null)
    return v_u + w * (v_c - v_u)

  return field


def _grid(num_steps: int, dtype) -> Array:
  return jnp.linspace(0.0, 1.0, num_steps + 1, dtype=dtype)


def _fixed_grid(field: Field, x0: Array, ts: Array, solver: str) -> Array:
  """Euler or Heun (explicit trapezoid) on the grid ``ts`` as a ``lax.scan``.

  Euler:  X_{k+1} = X_k + h_k f(t_k, X_k),  h_k = t_{k+1} - t_k;
  Heun:   X_{k+1} = X_k + h_k (f(t_k, X_k) + f(t_{k+1}, X_k + h_k f(t_k, X_k))) / 2.

  Args:
    field: ``field(t, x) -> dx/dt``.
    x0: starting points (B, ...), float.
    ts: the grid (N + 1,), the dtype of x0.
    solver: "euler" or "heun".

  Returns:
    X_N, the shape of x0.
  """
  def step(x, interval):
    t0, t1 = interval
    h = t1 - t0
    k0 = field(t0, x)
    if solver == "euler":
      return x + k0 * h, None
    k1 = field(t1, x + k0 * h)
    return x + (k0 + k1) * (0.5 * h), None

  x, _ = jax.lax.scan(step, x0, (ts[:-1], ts[1:]))
  return x


def sample_ode(field: Field, x0: Array, *, num_steps: int = 50, solver: str = "euler",
               rtol: float = 1e-5, atol: float = 1e-5, max_steps: int = 4096) -> Array:
  """X_1 = X_0 + int_0^1 field(t, X_t) dt from X_0 = x0.

  Euler: X_{k+1} = X_k + h field(t_k, X_k) on t_k = k / N; Heun adds the trapezoidal
  corrector; both run as a ``lax.scan`` (``_fixed_grid``). Dopri5 (diffrax) adapts
  its steps to (rtol, atol). "diffrax_euler" / "diffrax_heun" run Euler / Heun
  through ``diffrax.diffeqsolve`` with ``StepTo`` on the same grid (the same values,
  with diffrax's per-step overhead).

  Args:
    field: ``field(t, x) -> dx/dt`` on the whole batch.
    x0: starting points (B, ...).
    num_steps: N for the fixed-grid solvers; 1 / (initial step) for "dopri5".
    solver: one of ``ODE_SOLVERS``.
    rtol, atol: Dopri5 tolerances.
    max_steps: Dopri5's step budget.

  Returns:
    X_1, the shape of x0.

  Raises:
    ValueError: for an unknown solver or num_steps < 1.

  Example:
    >>> x1 = sample_ode(lambda t, x: -x, jnp.ones((4, 2)), num_steps=100)   # ~ e^{-1}
  """
  checks.positive_int("num_steps", num_steps)
  x0 = checks.as_float("x0", x0)
  if solver in ("euler", "heun"):
    return _fixed_grid(field, x0, _grid(num_steps, x0.dtype), solver)
  term = diffrax.ODETerm(lambda t, y, args: field(t, y))
  if solver in ("diffrax_euler", "diffrax_heun"):
    solver_obj = diffrax.Euler() if solver == "diffrax_euler" else diffrax.Heun()
    controller = diffrax.StepTo(ts=_grid(num_steps, x0.dtype))
    dt0, max_steps = None, num_steps
  elif solver == "dopri5":
    solver_obj, dt0 = diffrax.Dopri5(), 1.0 / num_steps
    controller = diffrax.PIDController(rtol=rtol, atol=atol)
  else:
    raise ValueError(f"unknown ODE solver {solver!r}; expected one of {ODE_SOLVERS}")
  sol = diffrax.diffeqsolve(term, solver_obj, t0=0.0, t1=1.0, dt0=dt0, y0=x0,
                            stepsize_controller=controller, max_steps=max_steps,
                            saveat=diffrax.SaveAt(t1=True))
  return sol.ys[0]


def sample_sde(drift: Field, x0: Array, key: Array, *, sigma: float,
               num_steps: int = 100) -> Array:
  """Euler-Maruyama X_{k+1} = X_k + h b(t_k, X_k) + sigma (W_{t_{k+1}} - W_{t_k}).

  On the grid t_k = k / N (the drift is never evaluated at t = 1), with a diffrax
  Brownian path drawn from ``key``.

  Args:
    drift: ``drift(t, x) -> (B, ...)`` on the whole batch.
    x0: starting points (B, ...).
    key: PRNG key of the Brownian path.
    sigma: diffusion coefficient (diagonal noise sigma I).
    num_steps: N.

  Returns:
    X_N, the shape of x0.

  Example:
    >>> x1 = sample_sde(lambda t, x: fm.gaussian_drift(target, t, x, 1.0), x0, key,
    ...                 sigma=1.0, num_steps=64)
  """
  checks.positive_int("num_steps", num_steps)
  checks.scalar("sigma", sigma, strict=False)
  x0 = checks.as_float("x0", x0)
  shape = x0.shape
  flat = x0.reshape(-1)   # diagonal noise sigma I as a lineax diagonal operator on a vector
  bm = diffrax.UnsafeBrownianPath(shape=flat.shape, key=key)
  terms = diffrax.MultiTerm(
      diffrax.ODETerm(lambda t, y, args: drift(t, y.reshape(shape)).reshape(-1)),
      diffrax.ControlTerm(
          lambda t, y, args: lx.DiagonalLinearOperator(jnp.full(y.shape, sigma, y.dtype)), bm))
  sol = diffrax.diffeqsolve(terms, diffrax.Euler(), t0=0.0, t1=1.0, dt0=None, y0=flat,
                            stepsize_controller=diffrax.StepTo(ts=_grid(num_steps, x0.dtype)),
                            max_steps=num_steps, saveat=diffrax.SaveAt(t1=True),
                            adjoint=diffrax.ForwardMode())
  return sol.ys[0].reshape(shape)


def brownian_increments(key: Array, num_steps: int, shape, dtype=jnp.float32) -> Array:
  """N i.i.d. increments W_{t_{k+1}} - W_{t_k} ~ N(0, h I) on the grid t_k = k/N.

  Args:
    key: PRNG key.
    num_steps: N.
    shape: the shape of one increment (the batch of states).
    dtype: float dtype.

  Returns:
    Increments (N, *shape).

  Example:
    >>> dw = brownian_increments(key, 512, (1000, 2))   # shared by coupled chains
  """
  checks.positive_int("num_steps", num_steps)
  if not jnp.issubdtype(dtype, jnp.floating):
    raise TypeError(f"dtype must be a float dtype, got {jnp.dtype(dtype)}")
  return jax.random.normal(key, (num_steps,) + tuple(shape), dtype) * jnp.sqrt(1.0 / num_steps)


def coarsen_increments(dw: Array, num_steps: int) -> Array:
  """Sums fine increments (N_fine, ...) onto a grid of num_steps (N_fine % num_steps == 0).

  Two chains driven by dw and coarsen_increments(dw, N) share one Brownian path
  (synchronous coupling): E|X^N - X^fine|^2 bounds W2^2 of their laws from above.

  Args:
    dw: fine increments (N_fine, ...).
    num_steps: the coarse N, a divisor of N_fine.

  Returns:
    Coarse increments (N, ...): sums of N_fine / N consecutive fine ones.

  Example:
    >>> coarsen_increments(jnp.ones((8, 3)), 2)   # each row 4.0
  """
  checks.positive_int("num_steps", num_steps)
  fine = dw.shape[0]
  if fine % num_steps:
    raise ValueError(f"cannot coarsen {fine} increments to {num_steps} steps")
  return dw.reshape((num_steps, fine // num_steps) + dw.shape[1:]).sum(axis=1)


def euler_maruyama_with_increments(drift: Field, x0: Array, dw: Array, *,
                                   sigma: float) -> Array:
  """Euler-Maruyama X_{k+1} = X_k + h b(t_k, X_k) + sigma dW_k with given increments.

  Args:
    drift: ``drift(t, x) -> (B, ...)``.
    x0: starting points (B, ...).
    dw: Brownian increments (N, B, ...) (``brownian_increments``).
    sigma: diffusion coefficient.

  Returns:
    X_N, the shape of x0.

  Example:
    >>> dw = brownian_increments(key, 64, x0.shape, x0.dtype)
    >>> x1 = euler_maruyama_with_increments(drift, x0, dw, sigma=1.0)
  """
  checks.scalar("sigma", sigma, strict=False)
  x0 = checks.as_float("x0", x0)
  if dw.ndim < 1 or dw.shape[0] < 1 or dw.shape[1:] != x0.shape:
    raise ValueError(f"dw must have shape (N, *x0.shape) = (N, {', '.join(map(str, x0.shape))}) "
                     f"with N >= 1, got {dw.shape}")
  num_steps = dw.shape[0]
  h = 1.0 / num_steps

  def step(x, inputs):
    k, inc = inputs
    return x + h * drift(k * h, x) + sigma * inc, None

  x, _ = jax.lax.scan(step, x0, (jnp.arange(num_steps, dtype=x0.dtype), dw))
  return x
