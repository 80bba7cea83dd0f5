"""The local learning coefficient (LLC) estimated from SGLD loss traces, with diagnostics.

For a trained point w0 and draws w_t of the localized tempered posterior (`sgld.py`),

    lambda_hat = n_beta ( E_t[ L(w_t) ] - L(w0) )              (Lau et al. 2023, eq. 8)

per chain, where E_t is the mean over the chain's (post-burn-in) steps of the minibatch
loss. The estimate is the mean over chains; its standard error is the standard
deviation over chains / sqrt(chains). For a regular model with d parameters at a
non-degenerate minimum, lambda = d / 2.

`diagnose` flags the two ways a step size eps goes wrong, besides divergence:
  * too small: the chains never equilibrate (the loss trace keeps rising) or mix so
    slowly that the chains disagree. Caught by the split R-hat of the loss traces
    (chain halves against each other), the chain-to-chain spread of lambda_hat (its
    relative standard error) and the per-chain drift z;
  * too large: the discretisation bias inflates lambda_hat while the traces look
    stationary. No loss-only check sees this; the step-size check is the Metropolis
    (MALA) acceptance rate of the SGLD moves, as devinterp's `MalaAcceptanceRate`
    callback reports it. `mala_acceptance` computes it from the drift norms that
    `run_chains` records (`SGLDTrace.drift_sq_norm`), at no extra gradient cost.
Plus non-finite losses (divergence) and a negative estimate (w0 is not a local minimum,
or gamma is too weak to localize). `stability_number` is the a-priori version of the
step-size check for a known curvature scale.

These functions act on host or device arrays and are jit-safe except `diagnose` and
`split_rhat`, which return Python values.
"""

from __future__ import annotations

import functools

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from methods.susceptibility.sgld import SGLDTrace


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
  if not isinstance(num_batches, (int, np.integer)) or num_batches < 1:
    raise ValueError(f"init_loss: num_batches={num_batches!r}; expected an int >= 1")
  return _init_loss(params, loss_fn=loss_fn, batch_fn=batch_fn, num_batches=int(num_batches))


@functools.partial(jax.jit, static_argnames=("loss_fn", "batch_fn", "num_batches"))
def _init_loss(params, *, loss_fn, batch_fn, num_batches):
  """`init_loss` after its checks, compiled once per (functions, num_batches)."""
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
  if not isinstance(num_burnin, (int, np.integer)) or num_burnin < 0:
    raise ValueError(f"estimate_llc: num_burnin={num_burnin!r}; expected an int >= 0")
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


def mala_acceptance(drift_sq_norm: jax.Array, step_size: float,
                    num_burnin: int = 0) -> jax.Array:
  """The mean Metropolis (MALA) acceptance probability of each chain's SGLD moves.

  An SGLD step w -> w' = w - (eps/2) G(w) + sqrt(eps) xi, with G = grad U the drift of
  the potential U = n_beta L + (gamma/2) ||w - w0||^2 (+ weight decay), is the MALA
  proposal; its acceptance probability is min(1, exp(log_alpha)) with

      log_alpha = -(U(w') - U(w)) + (w' - w).(G + G')/2 + (eps/8) (|G|^2 - |G'|^2).

  With the energy difference taken by the trapezoid rule, U(w') - U(w) = (w' - w).(G +
  G')/2 (exact for a quadratic potential), only the drift norms remain:

      log_alpha_t = (eps/8) (|G_t|^2 - |G_{t+1}|^2),

  so the check needs no extra loss or gradient evaluation. (devinterp's
  `MalaAcceptanceRate` uses the minibatch losses for U; with a different minibatch at
  every step their batch-to-batch noise, n_beta times the loss's standard error, would
  swamp the ratio.) An acceptance near 1 means the discretisation error of the step is
  small; it falls as eps grows (for a Gaussian in d dimensions, log_alpha has standard
  deviation ~ sqrt(d) (eps a)^{3/2} / 4 for a curvature a of U), so the same eps
  gives a lower acceptance in higher dimension. Meaningful for noise_scale = 1 only.

  Args:
    drift_sq_norm: (chains, steps) `SGLDTrace.drift_sq_norm` (consecutive steps: the
      trace records every step, thinned or not).
    step_size: the eps the chains ran with.
    num_burnin: leading steps to drop.

  Returns:
    (chains,) mean acceptance probability over the post-burn-in moves.

  Example:
    >>> g2 = jnp.array([[10.0, 12.0, 9.0, 11.0]])
    >>> [round(float(a), 3) for a in mala_acceptance(g2, step_size=0.8)]  # e^-.2, 1, e^-.2
    [0.879]
  """
  g2 = jnp.asarray(drift_sq_norm)
  if g2.ndim != 2 or g2.shape[1] - num_burnin < 2:
    raise ValueError(f"mala_acceptance: drift_sq_norm must be (chains, steps) with at least "
                     f"2 steps after num_burnin={num_burnin}, got shape {g2.shape}")
  if not isinstance(step_size, jax.core.Tracer) and not float(step_size) > 0:
    raise ValueError(f"mala_acceptance: step_size={step_size!r}; expected > 0")
  g2 = g2[:, num_burnin:]
  log_alpha = (step_size / 8) * (g2[:, :-1] - g2[:, 1:])
  return jnp.mean(jnp.exp(jnp.minimum(log_alpha, 0.0)), axis=1)


def split_rhat(trace) -> float:
  """The split potential scale reduction factor R-hat of a (chains, steps) trace.

  Each chain is cut into halves (2 C sequences of length n); with W the mean
  within-sequence variance and B/n the variance of the sequence means,

      R-hat = sqrt( ((n - 1)/n W + B/n) / W )          (Gelman et al., BDA3, 11.4)

  It is near 1 when every half of every chain samples the same distribution, and
  above 1 when the traces trend (not yet stationary) or the chains disagree (slow
  mixing: R-hat ~ 1 + tau / (2 n) for an autocorrelation time tau).

  Args:
    trace: (chains, steps) with steps >= 4.

  Returns:
    R-hat as a float (1.0 for constant traces, inf if only the means differ).

  Example:
    >>> rng = np.random.default_rng(0)
    >>> round(split_rhat(rng.normal(size=(4, 1000))), 2)
    1.0
    >>> split_rhat(np.linspace(0, 1, 1000)[None] + 0.1 * rng.normal(size=(4, 1000))) > 1.5
    True
  """
  x = np.asarray(trace, np.float64)
  if x.ndim != 2 or x.shape[1] < 4:
    raise ValueError(f"split_rhat: trace must be (chains, steps) with steps >= 4, "
                     f"got shape {x.shape}")
  half = x.shape[1] // 2
  seqs = np.concatenate([x[:, :half], x[:, half:2 * half]])
  within = float(np.mean(np.var(seqs, axis=1, ddof=1)))
  between = float(np.var(seqs.mean(axis=1), ddof=1))       # B / n
  if within == 0:
    return 1.0 if between == 0 else float("inf")
  return float(np.sqrt(((half - 1) / half * within + between) / within))


def _check_diagnose_args(trace, loss_at_init, n_beta, num_burnin, step_size):
  """One-line ValueErrors for what `diagnose` cannot work with."""
  if trace.ndim != 2:
    raise ValueError(f"diagnose: loss_trace must be (chains, steps), got shape {trace.shape}")
  if not isinstance(num_burnin, (int, np.integer)) or not 0 <= num_burnin < trace.shape[1]:
    raise ValueError(f"diagnose: num_burnin={num_burnin!r}; expected an int in "
                     f"[0, steps={trace.shape[1]})")
  if not np.isfinite(n_beta) or not n_beta > 0:
    raise ValueError(f"diagnose: n_beta={n_beta!r}; expected a finite value > 0")
  if np.ndim(loss_at_init) != 0 or not np.isfinite(loss_at_init):
    raise ValueError(f"diagnose: loss_at_init={loss_at_init!r}; expected a finite scalar")
  if step_size is not None and not float(step_size) > 0:
    raise ValueError(f"diagnose: step_size={step_size!r}; expected > 0")


def _half_z(x: np.ndarray) -> float:
  """|second-half mean - first-half mean| / its batch-means standard error."""
  half = len(x) // 2
  a, b = x[:half], x[half:2 * half]
  se = np.hypot(_batch_means_stderr(a), _batch_means_stderr(b))
  return float(abs(b.mean() - a.mean()) / se) if se > 0 else 0.0


def _drift_z(trace: np.ndarray) -> tuple[float, float]:
  """(largest per-chain z, pooled z) of the second-half mean against the first.

  The pooled z is that of the mean over chains at each step: it sees a rise common to
  all chains with sqrt(chains) more power, and its batch means carry the minibatch
  noise that chains share (the same batch at each step) as well as theirs."""
  zs = [_half_z(chain) for chain in trace]
  return float(np.nanmax(zs)), _half_z(trace.mean(axis=0))


def diagnose(loss_trace, loss_at_init, n_beta: float, num_burnin: int = 0,
             drift_z: float = 4.0, *, step_size: float | None = None,
             max_rhat: float = 1.1, max_rel_stderr: float = 0.1,
             min_acceptance: float = 0.9) -> dict:
  """Host-side health checks of SGLD chains for the LLC; each one can fail.

  Checks (after dropping `num_burnin` steps); pass the whole `SGLDTrace` of
  `run_chains` to get all of them, a bare loss array gets the loss-only ones:
    * finite: every loss is finite (a diverged chain is not);
    * negative_llc: some chain has lambda_hat < 0;
    * drifting: the mean loss over chains, second half against first half, in units of
      its batch-means standard error, exceeds `drift_z` (the trace keeps rising);
    * rhat > max_rhat: the split R-hat (`split_rhat`) of the loss traces and, from an
      `SGLDTrace`, of the ||w - w0||^2 traces (free of minibatch noise, so it sees slow
      mixing that the noisy losses hide): the chains keep moving away from w0 (eps too
      small to equilibrate) or have not mixed;
    * rel_stderr > max_rel_stderr: the chain-to-chain spread of lambda_hat, as its
      standard error over |mean| (needs >= 2 chains);
    * acceptance < min_acceptance: the step-size check, the MALA acceptance of the
      moves (`mala_acceptance`, from an `SGLDTrace` and `step_size`; else None). Too
      large an eps inflates lambda_hat while every trace looks healthy. For a Gaussian
      the acceptance falls with dimension at a fixed bias, so in high dimension lower
      `min_acceptance` (or check that the estimate is flat in eps).

  Args:
    loss_trace: the `SGLDTrace` of `run_chains`, or (chains, steps) minibatch losses.
    loss_at_init: L(w0), a finite scalar.
    n_beta: the inverse temperature (> 0); num_burnin: leading steps to drop.
    drift_z: the pooled |z| above which the chains count as drifting.
    step_size: the eps the chains ran with (enables the acceptance check).
    max_rhat, max_rel_stderr, min_acceptance: the thresholds.

  Returns:
    dict with "finite", "negative_llc", "drift_z" (the pooled z), "max_drift_z" (the
    largest per-chain z, for information: with 10 batch means per half its tails are
    heavy, so the check uses the pooled z), "drifting", "llc_spread" (std over
    chains / |mean| of lambda_hat), "rel_stderr" (llc_spread / sqrt(chains - 1)), "rhat"
    (of the losses), "rhat_distance" and "acceptance" (None when not computed),
    "problems" (one line per failed check, with its likely cause) and "healthy" (no
    problems).

  Example:
    >>> flat = 0.5 + 0.1 * np.random.default_rng(1).normal(size=(2, 400))
    >>> diagnose(flat, 0.0, 1.0)["healthy"]
    True
    >>> diagnose(flat + np.linspace(0, 0.3, 400), 0.0, 1.0)["problems"][1][:12]
    'split R-hat '
  """
  full = loss_trace if isinstance(loss_trace, SGLDTrace) else None
  trace = np.asarray(full.loss if full is not None else loss_trace, np.float64)
  _check_diagnose_args(trace, loss_at_init, n_beta, num_burnin, step_size)
  trace = trace[:, num_burnin:]
  if not np.all(np.isfinite(trace)):
    return dict(finite=False, negative_llc=False, max_drift_z=float("inf"),
                drift_z=float("inf"), drifting=True,
                llc_spread=float("inf"), rel_stderr=float("inf"), rhat=float("inf"),
                rhat_distance=None, acceptance=None, healthy=False,
                problems=["non-finite loss: a chain diverged (eps far too large)"])
  if trace.shape[1] < 4:
    raise ValueError(f"diagnose: needs >= 4 steps after num_burnin={num_burnin}, got "
                     f"{trace.shape[1]}")
  per_chain = n_beta * (trace.mean(axis=1) - float(loss_at_init))
  chains, scale = len(per_chain), max(abs(float(per_chain.mean())), 1e-12)
  max_z, pooled_z = _drift_z(trace)
  spread = float(per_chain.std() / scale)
  rel_stderr = (float(per_chain.std(ddof=1) / np.sqrt(chains) / scale) if chains > 1
                else float("nan"))
  rhat = split_rhat(trace)
  rhat_distance = acceptance = None
  if full is not None:
    rhat_distance = split_rhat(np.asarray(full.sq_distance)[:, num_burnin:])
    if step_size is not None:
      acceptance = float(np.mean(mala_acceptance(full.drift_sq_norm, step_size, num_burnin)))
  problems = []
  if np.any(per_chain < 0):
    problems.append(f"negative LLC in {int(np.sum(per_chain < 0))} of {chains} chains (w0 "
                    "is not a local minimum, or gamma is too weak to localize)")
  if pooled_z > drift_z:
    problems.append(f"drift z {pooled_z:.1f} > {drift_z:g}: the loss is still moving "
                    "(second half of the chains against the first)")
  for name, value in (("loss", rhat), ("||w - w0||^2", rhat_distance)):
    if value is not None and value > max_rhat:
      problems.append(f"split R-hat of the {name} traces {value:.3f} > {max_rhat:g}: not "
                      "stationary or not mixed (eps too small, or chains too short)")
  if rel_stderr > max_rel_stderr:
    problems.append(f"relative standard error of the LLC {rel_stderr:.1%} > "
                    f"{max_rel_stderr:.0%}: the chains disagree (more or longer chains, or "
                    "a larger eps)")
  if acceptance is not None and not acceptance >= min_acceptance:
    problems.append(f"MALA acceptance {acceptance:.3f} < {min_acceptance:g}: eps too large "
                    "(discretisation bias inflates the LLC)")
  return dict(finite=True, negative_llc=bool(np.any(per_chain < 0)), max_drift_z=max_z,
              drift_z=pooled_z, drifting=bool(pooled_z > drift_z), llc_spread=spread, rel_stderr=rel_stderr,
              rhat=rhat, rhat_distance=rhat_distance, acceptance=acceptance,
              problems=problems, healthy=not problems)
