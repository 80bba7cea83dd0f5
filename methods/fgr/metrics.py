"""Calibration metrics and post-hoc temperature scaling, pure jnp (numpy inputs work).

With probabilities p (N, K), labels y, confidence c_i = max_k p_ik, prediction
yhat_i = argmax_k p_ik and correctness a_i = 1[yhat_i = y_i]:

    ECE (Guo et al. 2017)    sum_b (n_b / N) |acc_b - conf_b|, 15 equal-width bins
                             (l_b, u_b] of c (FGR's evaluation code; torchmetrics'
                             MulticlassCalibrationError(norm="l1") uses [l_b, u_b),
                             which differs only for confidences on a bin edge)
    adaptive ECE             the same with 15 equal-mass bins: the sorted
                             confidences cut into groups of (nearly) N / 15
    classwise ECE            (1/K) sum_k sum_b (n_kb / N) |mean_{b} 1[y = k] - mean_{b} p_k|,
                             bins of p_k itself, for every class k (the code's cECE)
    NLL                      -mean_i log p_iy
    Brier score              mean_i sum_k (p_ik - 1[y_i = k])^2
    accuracy                 mean_i a_i

Temperature scaling (Guo et al. 2017): one T > 0 for all classes, fitted on held-out
ID validation logits z by minimising the NLL of softmax(z / T),

    T* = argmin_T  -mean_i log softmax(z_i / T)_{y_i},

found by golden-section search over log T in [log 0.05, log 20] (the NLL is unimodal
in log T: it is convex in 1 / T). FGR is evaluated with and without it.

Example:
    >>> probs = jnp.array([[0.9, 0.1], [0.65, 0.35]])
    >>> labels = jnp.array([0, 1])
    >>> round(float(ece(probs, labels)), 3)     # (|1 - 0.9| + |0 - 0.65|) / 2
    0.375
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from common import checks

Array = jax.Array


def _check(probs: Array, labels: Array) -> None:
  if jnp.ndim(probs) != 2 or jnp.shape(labels) != jnp.shape(probs)[:1]:
    raise ValueError(f"probs {jnp.shape(probs)} and labels {jnp.shape(labels)}; expected "
                     "(N, K) probabilities and (N,) integer labels")


def _top(probs: Array, labels: Array) -> tuple[Array, Array]:
  probs = jnp.asarray(probs)
  conf = probs.max(axis=-1)
  correct = (jnp.argmax(probs, axis=-1) == jnp.asarray(labels)).astype(conf.dtype)
  return conf, correct


def equal_width_bins(values: Array, n_bins: int = 15) -> Array:
  """Bin ids 0..n_bins-1 of the bins (k / B, (k + 1) / B] (0 goes to bin 0)."""
  edges = jnp.linspace(0.0, 1.0, n_bins + 1, dtype=jnp.asarray(values).dtype)
  return jnp.clip(jnp.searchsorted(edges, values, side="left") - 1, 0, n_bins - 1)


def equal_mass_bins(values: Array, n_bins: int = 15) -> Array:
  """Bin ids of equal-mass bins: the i-th smallest value goes to floor(i B / N)."""
  n = jnp.shape(values)[0]
  rank = jnp.argsort(jnp.argsort(values))
  return (rank * n_bins) // n


def binned_calibration_error(confidences: Array, targets: Array, bins: Array,
                             n_bins: int, p: float = 1.0) -> Array:
  """(sum_b (n_b / N) |mean_b targets - mean_b confidences|^p)^(1/p) over given bin ids.

  Args:
    confidences: (N,) predicted probabilities of the event.
    targets: (N,) 1.0 where the event happened (correctness, or 1[y = k]).
    bins: (N,) int bin ids in 0..n_bins-1.
    n_bins: the number of bins.
    p: 1 for the ECE, 2 for the L2 calibration error.
  """
  conf = jnp.asarray(confidences)
  count = jax.ops.segment_sum(jnp.ones_like(conf), bins, n_bins)
  sum_conf = jax.ops.segment_sum(conf, bins, n_bins)
  sum_target = jax.ops.segment_sum(jnp.asarray(targets, conf.dtype), bins, n_bins)
  safe = jnp.maximum(count, 1.0)
  gap = jnp.abs(sum_target / safe - sum_conf / safe) ** p
  return jnp.sum(count / conf.shape[0] * gap) ** (1.0 / p)


METRICS = ("accuracy", "ece", "adaptive_ece", "classwise_ece", "nll", "brier")


@functools.partial(jax.jit, static_argnames=("n_bins", "names"))
def _metrics(probs: Array, labels: Array, n_bins: int, names: tuple[str, ...]
             ) -> dict[str, Array]:
  """The metrics in `names`, in one compiled program per (shapes, n_bins, names)."""
  conf, correct = _top(probs, labels)
  onehot = jax.nn.one_hot(labels, probs.shape[1], dtype=probs.dtype)

  def one_class(p_k, t_k):
    return binned_calibration_error(p_k, t_k, equal_width_bins(p_k, n_bins), n_bins)

  compute = {
      "accuracy": lambda: jnp.mean(correct),
      "ece": lambda: binned_calibration_error(conf, correct,
                                              equal_width_bins(conf, n_bins), n_bins),
      "adaptive_ece": lambda: binned_calibration_error(conf, correct,
                                                       equal_mass_bins(conf, n_bins), n_bins),
      "classwise_ece": lambda: jnp.mean(jax.vmap(one_class, in_axes=(1, 1))(probs, onehot)),
      "nll": lambda: -jnp.mean(jnp.log(jnp.maximum(jnp.sum(probs * onehot, axis=-1),
                                                   1e-12))),
      "brier": lambda: jnp.mean(jnp.sum((probs - onehot) ** 2, axis=-1)),
  }
  return {name: compute[name]() for name in names}


def _metric(name: str, probs: Array, labels: Array, n_bins: int = 15) -> Array:
  _check(probs, labels)
  checks.positive_int("n_bins", n_bins)
  return _metrics(jnp.asarray(probs), jnp.asarray(labels), n_bins, (name,))[name]


def ece(probs: Array, labels: Array, n_bins: int = 15) -> Array:
  """Expected calibration error over `n_bins` equal-width confidence bins.

  Example:
    >>> round(float(ece(jnp.array([[0.7, 0.3]]), jnp.array([0]))), 3)   # |1 - 0.7|
    0.3
  """
  return _metric("ece", probs, labels, n_bins)


def adaptive_ece(probs: Array, labels: Array, n_bins: int = 15) -> Array:
  """ECE over `n_bins` equal-mass bins of the confidences (adaptive ECE)."""
  return _metric("adaptive_ece", probs, labels, n_bins)


def classwise_ece(probs: Array, labels: Array, n_bins: int = 15) -> Array:
  """Mean over classes k of the ECE of p_k against 1[y = k] (equal-width bins of p_k)."""
  return _metric("classwise_ece", probs, labels, n_bins)


def nll(probs: Array, labels: Array) -> Array:
  """-mean_i log p_iy (probabilities clipped at 1e-12)."""
  return _metric("nll", probs, labels)


def brier_score(probs: Array, labels: Array) -> Array:
  """mean_i sum_k (p_ik - 1[y_i = k])^2 (0 perfect, 2 worst)."""
  return _metric("brier", probs, labels)


def accuracy(probs: Array, labels: Array) -> Array:
  """mean_i 1[argmax_k p_ik = y_i]."""
  return _metric("accuracy", probs, labels)


def calibration_metrics(logits: Array, labels: Array, n_bins: int = 15,
                        temperature: float = 1.0) -> dict[str, float]:
  """All metrics of softmax(logits / temperature) as host floats.

  Returns:
    {"accuracy", "ece", "adaptive_ece", "classwise_ece", "nll", "brier"}.

  Example:
    >>> m = calibration_metrics(jnp.array([[2.0, 0.0], [0.0, 1.0]]), jnp.array([0, 0]))
    >>> sorted(m)
    ['accuracy', 'adaptive_ece', 'brier', 'classwise_ece', 'ece', 'nll']
  """
  checks.scalar("temperature", temperature)
  probs = jax.nn.softmax(jnp.asarray(logits) / temperature, axis=-1)
  _check(probs, labels)
  checks.positive_int("n_bins", n_bins)
  return {k: float(v) for k, v in _metrics(probs, jnp.asarray(labels), n_bins,
                                           METRICS).items()}


def temperature_nll(logits: Array, labels: Array, temperature: Array) -> Array:
  """-mean_i log softmax(z_i / T)_{y_i}."""
  logp = jax.nn.log_softmax(logits / temperature, axis=-1)
  return -jnp.mean(jnp.take_along_axis(logp, labels[:, None].astype(jnp.int32), axis=-1))


@functools.partial(jax.jit, static_argnames=("iters",))
def _golden_section(logits: Array, labels: Array, lo: Array, hi: Array, iters: int) -> Array:
  inv_phi = (np.sqrt(5.0) - 1.0) / 2.0
  f = lambda log_t: temperature_nll(logits, labels, jnp.exp(log_t))

  def body(_, carry):
    a, b = carry
    c = b - inv_phi * (b - a)
    d = a + inv_phi * (b - a)
    keep_left = f(c) < f(d)
    return jnp.where(keep_left, a, c), jnp.where(keep_left, d, b)

  a, b = jax.lax.fori_loop(0, iters, body, (lo, hi))
  return jnp.exp((a + b) / 2.0)


def fit_temperature(logits: Array, labels: Array, bounds: tuple[float, float] = (0.05, 20.0),
                    iters: int = 80) -> float:
  """Temperature scaling: T* = argmin_T NLL(softmax(z / T), y) on validation data.

  Args:
    logits: (N, K) validation logits.
    labels: (N,) validation labels.
    bounds: the search interval for T, 0 < low < high.
    iters: golden-section steps (each shrinks the log-T interval by 0.618).

  Returns:
    T* as a Python float; calibrated probabilities are softmax(z / T*).

  Example:
    >>> t = fit_temperature(jnp.array([[4.0, 0.0], [4.0, 0.0]]), jnp.array([0, 1]))
    >>> t > 1.0        # half of the confident predictions are wrong: soften them
    True
  """
  logits = jnp.asarray(logits)
  labels = jnp.asarray(labels)
  _check(logits, labels)
  lo, hi = bounds
  checks.scalar("bounds[0]", lo)
  checks.scalar("bounds[1]", hi, low=lo)
  checks.positive_int("iters", iters)
  dtype = logits.dtype
  return float(_golden_section(logits, labels, jnp.log(jnp.asarray(lo, dtype)),
                               jnp.log(jnp.asarray(hi, dtype)), iters))
