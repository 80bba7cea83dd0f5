"""The local learning coefficient (LLC) estimated from SGLD loss traces, with diagnostics.

For a trained point w0 and draws w_t of the localized tempered posterior (`sgld.py`),

    lambda_hat = n_beta ( E_t[ L(w_t) ] - L(w0) )              (Lau et al. 2023, eq. 8)

per chain, where E_t is the mean over the chain's (post-burn-in) steps of the minibatch
loss. The estimate is the mean over chains; its standard error is the standard
deviation over chains / sqrt(chains). For a regular model with d parameters at a
non-degenerate minimum, lambda = d / 2.

The diagnostics flag a mis-tuned sampler without any accept/reject step:
  * non-finite losses (eps far too large: the chain diverged);
  * a negative estimate (the chain found lower loss than w0: w0 is not a local minimum
    or gamma is too weak to localize);
  * drift: the mean loss of the last half of a chain against its first half, in units
    of a batch-means standard error (a chain that has not reached stationarity, or is
    escaping, keeps drifting);
  * the step-size stability number eps * (n_beta * h + gamma) / 2 for a curvature
    scale h is returned by `stability_number` for a quick a-priori check.

These functions act on host or device arrays and are jit-safe except `diagnose`,
which returns Python values.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class LLCEstimate(NamedTuple):
  """mean: lambda_hat averaged over chains; stderr: std over chains / sqrt(chains)
  (nan for one chain); per_chain: (chains,) estimates."""
  mean: jax.Array
  stderr: jax.Array
  per_chain: jax.Array


def init_loss(loss_fn, params, batch_fn, num_batches: int) -> jax.Array:
  """L(w0), the loss at the trained point averaged over the first minibatches:

      L(w0) = (1 / S) sum_{s < S} loss_fn(params, batch_fn(s)),   S = num_batches

  Args:
    loss_fn: (params, batch) -> scalar; params: w0; batch_fn: traceable step -> batch.
    num_batches: S >= 1.

  Returns:
    Scalar L(w0).

  Example:
    >>> init_loss(lambda w, b: (w - b) ** 2, 1.0, lambda s: s.astype(jnp.float32), 3)
    Array(0.6666667, dtype=float32)
  """
  losses = jax.lax.map(lambda s: loss_fn(params, batch_fn(s)),
                       jnp.arange(num_batches, dtype=jnp.int32))
  return jnp.mean(losses)


def estimate_llc(loss_trace: jax.Array, loss_at_init: jax.Array, n_beta: float,
                 num_burnin: int = 0) -> LLCEstimate:
  """lambda_hat = n_beta (mean_t L(w_t) - L(w0)) per chain, then over chains.

  Args:
    loss_trace: (chains, steps) minibatch losses along each chain (`SGLDTrace.loss`).
    loss_at_init: scalar L(w0).
    n_beta: the sampler's inverse temperature.
    num_burnin: leading steps of each chain to drop.

  Returns:
    `LLCEstimate`.

  Example:
    >>> est = estimate_llc(jnp.array([[1.0, 1.2, 1.4], [1.0, 1.6, 1.8]]), 1.0, 10.0, 1)
    >>> round(float(est.mean), 4), est.per_chain.round(4).tolist()
    (5.0, [3.0, 7.0])
  """
  loss_trace = jnp.asarray(loss_trace)
  if loss_trace.ndim != 2 or num_burnin >= loss_trace.shape[1]:
    raise ValueError(f"loss_trace must be (chains, steps) with steps > num_burnin="
                     f"{num_burnin}, got shape {loss_trace.shape}")
  per_chain = n_beta * (jnp.mean(loss_trace[:, num_burnin:], axis=1) - loss_at_init)
  chains = per_chain.shape[0]
  stderr = (jnp.std(per_chain, ddof=1) / jnp.sqrt(chains) if chains > 1
            else jnp.asarray(jnp.nan, per_chain.dtype))
  return LLCEstimate(jnp.mean(per_chain), stderr, per_chain)


def stability_number(step_size: float, n_beta: float, localization: float,
                     curvature: float) -> float:
  """The per-step contraction of the SGLD drift for a loss curvature h:

      x = eps (n_beta h + gamma) / 2

  Near 0: accurate but slow mixing; above ~0.2 the stationary variance is visibly
  inflated (by 1 / (1 - x/2) on a quadratic); >= 2 diverges.

  Args:
    step_size: eps; n_beta: inverse temperature; localization: gamma;
    curvature: h, the scale of the loss Hessian's eigenvalues.

  Returns:
    x.

  Example:
    >>> stability_number(1e-3, 46.0, 1.0, 1.0)
    0.0235
  """
  return step_size * (n_beta * curvature + localization) / 2


def _batch_means_stderr(x: np.ndarray, num_batches: int = 10) -> float:
  """Standard error of the mean of an autocorrelated series by batch means."""
  usable = len(x) - len(x) % num_batches
  if usable < num_batches:
    return float("nan")
  means = x[:usable].reshape(num_batches, -1).mean(axis=1)
  return float(means.std(ddof=1) / np.sqrt(num_batches))


def diagnose(loss_trace, loss_at_init, n_beta: float, num_burnin: int = 0,
             drift_z: float = 4.0) -> dict:
  """Host-side health checks of SGLD chains (no acceptance step needed).

  Args:
    loss_trace: (chains, steps) minibatch losses; loss_at_init: L(w0).
    n_beta: the inverse temperature; num_burnin: leading steps to drop.
    drift_z: |z| above which a chain counts as drifting.

  Returns:
    dict with "finite" (all losses finite), "negative_llc" (some chain has
    lambda_hat < 0), "max_drift_z" (largest |second-half mean - first-half mean| /
    batch-means standard error over chains), "drifting" (max_drift_z > drift_z),
    "llc_spread" (std over chains / |mean| of lambda_hat) and "healthy" (finite, no
    negative chain, not drifting).

  Example:
    >>> flat = 0.5 + 0.1 * np.random.default_rng(1).normal(size=(2, 400))
    >>> diagnose(flat, 0.0, 1.0)["healthy"]
    True
  """
  trace = np.asarray(loss_trace, np.float64)[:, num_burnin:]
  finite = bool(np.all(np.isfinite(trace)))
  if not finite:
    return dict(finite=False, negative_llc=False, max_drift_z=float("inf"), drifting=True,
                llc_spread=float("inf"), healthy=False)
  per_chain = n_beta * (trace.mean(axis=1) - float(loss_at_init))
  half = trace.shape[1] // 2
  zs = []
  for chain in trace:
    a, b = chain[:half], chain[half:2 * half]
    se = np.hypot(_batch_means_stderr(a), _batch_means_stderr(b))
    zs.append(abs(b.mean() - a.mean()) / se if se > 0 else 0.0)
  max_z = float(np.nanmax(zs)) if zs else float("nan")
  negative = bool(np.any(per_chain < 0))
  spread = float(per_chain.std() / max(abs(per_chain.mean()), 1e-12))
  return dict(finite=True, negative_llc=negative, max_drift_z=max_z,
              drifting=bool(max_z > drift_z), llc_spread=spread,
              healthy=bool(not negative and not max_z > drift_z))
