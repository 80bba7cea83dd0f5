"""FGR's training losses: the main classification losses and the differentiable ID
calibration objective (SoftBinnedECE), all pure jnp, jit- and grad-able.

With logits z (N, K), labels y, p = softmax(z), p_y the true-class probability:

    cross_entropy        -mean log p_y
    focal (gamma)        -mean (1 - p_y)^gamma log p_y                   (Lin et al. 2017)
    dual_focal (gamma)   -mean (1 - p_y + max_{k != y} p_k)^gamma log p_y
                                                                    (Tao et al., ICML 2023)
    label_smoothing (a)  -mean sum_k q_k log p_k,  q = (1 - a) onehot(y) + a / K
    mixup (alpha)        x~ = lam x_i + (1 - lam) x_j, q~ likewise, lam ~ Beta(alpha, alpha)

FGR trains with the dual focal loss (DFL) on the mixed batch; the public code's scripts
use gamma = 5 for DFL (its class default is 3 and the CLI default 2, both overridden)
and gamma = 3 for the focal baseline.

SoftBinnedECE, FGR's ID calibration constraint, on the clean (unfiltered) images of the
batch: with confidence c_i = max_k p_ik, correctness a_i = 1[argmax_k p_ik = y_i],
centres mu_b = linspace(0, 1, B) (B = 15) and soft bin memberships

    s_ib = softmax_b(-(c_i - mu_b)^2 / T)                                  (T = 0.1)
    m_b = sum_i s_ib,   conf_b = sum_i s_ib c_i / m_b,   acc_b = sum_i s_ib a_i / m_b
    SoftBinnedECE = ( sum_b m_b / N |acc_b - conf_b|^p )^(1/p)             (p = 2)

(the code adds 1e-8 to m_b). Gradients flow through c_i and the memberships, not
through a_i. As T -> 0 the memberships become the nearest-centre bins and the value the
hard binned L_p calibration error on those bins (tests/methods/test_fgr.py checks it).
Optional per-example `weights` (e.g. the clean mask) replace the counts: m_b = sum_i
w_i s_ib, N = sum_i w_i; weights of 0 and 1 equal the paper's logits[clean_mask].

Example:
    >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 0.4, 0.0]])
    >>> labels = jnp.array([0, 1])
    >>> loss = dual_focal_loss(logits, labels, gamma=5.0)
    >>> ece = soft_binned_ece(logits, labels)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from common import checks

Array = jax.Array


def _check(logits: Array, labels: Array) -> None:
  if jnp.ndim(logits) != 2 or jnp.shape(labels) != jnp.shape(logits)[:1]:
    raise ValueError(f"logits {jnp.shape(logits)} and labels {jnp.shape(labels)}; expected "
                     "(N, K) logits and (N,) integer labels")


def _true_class(x: Array, labels: Array) -> Array:
  return jnp.take_along_axis(x, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]


def cross_entropy(logits: Array, labels: Array) -> Array:
  """-mean_i log softmax(z_i)[y_i].

  Example:
    >>> float(cross_entropy(jnp.zeros((1, 2)), jnp.array([0])))   # log 2
    0.693...
  """
  _check(logits, labels)
  return -jnp.mean(_true_class(jax.nn.log_softmax(logits), labels))


def focal_loss(logits: Array, labels: Array, gamma: float = 3.0) -> Array:
  """-mean_i (1 - p_iy)^gamma log p_iy (gamma = 0 is cross-entropy).

  Example:
    >>> loss = focal_loss(jnp.zeros((1, 2)), jnp.array([0]), gamma=3.0)
  """
  _check(logits, labels)
  checks.scalar("gamma", gamma, strict=False)
  return _focal(logits, labels, gamma)


@jax.jit
def _focal(logits: Array, labels: Array, gamma: Array) -> Array:
  logp = _true_class(jax.nn.log_softmax(logits), labels)
  return -jnp.mean((1.0 - jnp.exp(logp)) ** gamma * logp)


def dual_focal_loss(logits: Array, labels: Array, gamma: float = 5.0) -> Array:
  """Dual focal loss: -mean_i (1 - p_iy + max_{k != y} p_ik)^gamma log p_iy.

  The modulating factor also grows with the strongest wrong class, so a confident
  correct prediction whose runner-up is far behind is down-weighted less than under
  the focal loss. gamma = 5 is what FGR's scripts use.

  Example:
    >>> loss = dual_focal_loss(jnp.array([[3.0, 0.0]]), jnp.array([0]))
  """
  _check(logits, labels)
  checks.scalar("gamma", gamma, strict=False)
  return _dual_focal(logits, labels, gamma)


@jax.jit
def _dual_focal(logits: Array, labels: Array, gamma: Array) -> Array:
  logp_all = jax.nn.log_softmax(logits)
  p_all = jnp.exp(logp_all)
  logp = _true_class(logp_all, labels)
  is_true = jax.nn.one_hot(labels, logits.shape[-1], dtype=bool)
  runner_up = jnp.max(jnp.where(is_true, -1.0, p_all), axis=-1).clip(0.0)
  return -jnp.mean((1.0 - jnp.exp(logp) + runner_up) ** gamma * logp)


def soft_cross_entropy(logits: Array, targets: Array) -> Array:
  """-mean_i sum_k q_ik log softmax(z_i)_k for target distributions q (N, K)."""
  if jnp.shape(targets) != jnp.shape(logits):
    raise ValueError(f"targets {jnp.shape(targets)} must match logits {jnp.shape(logits)}")
  return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1))


def label_smoothing_loss(logits: Array, labels: Array, alpha: float = 0.05) -> Array:
  """Cross-entropy against (1 - alpha) onehot(y) + alpha / K.

  Example:
    >>> loss = label_smoothing_loss(jnp.zeros((2, 3)), jnp.array([0, 2]), alpha=0.1)
  """
  _check(logits, labels)
  checks.scalar("alpha", alpha, strict=False, high=1.0)
  k = logits.shape[-1]
  targets = (1.0 - alpha) * jax.nn.one_hot(labels, k, dtype=logits.dtype) + alpha / k
  return soft_cross_entropy(logits, targets)


def mixup(key: Array, images: Array, labels: Array, num_classes: int,
          alpha: float = 0.2) -> tuple[Array, Array]:
  """Mixup (Zhang et al. 2018; for calibration, Thulasidasan et al. 2019): one
  lam ~ Beta(alpha, alpha) per batch, a random partner j = perm(i) per example,

      x~_i = lam x_i + (1 - lam) x_j,   q~_i = lam onehot(y_i) + (1 - lam) onehot(y_j).

  Train with `soft_cross_entropy(model(x~), q~)`.

  Returns:
    (mixed images, soft targets (N, num_classes)).

  Example:
    >>> x, q = mixup(jax.random.PRNGKey(0), jnp.zeros((4, 8, 8, 1)), jnp.arange(4), 10)
  """
  checks.scalar("alpha", alpha)
  checks.positive_int("num_classes", num_classes)
  if jnp.shape(labels) != jnp.shape(images)[:1]:
    raise ValueError(f"labels {jnp.shape(labels)} must have one entry per image "
                     f"{jnp.shape(images)[:1]}")
  k_lam, k_perm = jax.random.split(key)
  lam = jax.random.beta(k_lam, alpha, alpha).astype(images.dtype)
  perm = jax.random.permutation(k_perm, images.shape[0])
  onehot = jax.nn.one_hot(labels, num_classes, dtype=images.dtype)
  return lam * images + (1 - lam) * images[perm], lam * onehot + (1 - lam) * onehot[perm]


def soft_binned_calibration_error(confidences: Array, correct: Array,
                                  weights: Array | None = None, *, n_bins: int = 15,
                                  temperature: float = 0.1, p: float = 2.0,
                                  centers: Array | None = None) -> Array:
  """SoftBinnedECE from confidences c (N,) and correctness a (N,) (module docstring).

  Args:
    confidences: (N,) top-class probabilities.
    correct: (N,) 1.0 where the top class is right (no gradient flows through it).
    weights: optional (N,) non-negative example weights (the clean mask).
    n_bins: number of centres, linspace(0, 1, n_bins) unless `centers` is given.
    temperature: T > 0 of the soft memberships softmax(-(c - mu)^2 / T).
    p: the norm, >= 1.
    centers: optional (B,) centres (e.g. (k + 0.5) / B, where T -> 0 gives the usual
      equal-width bins).

  Returns:
    The scalar (sum_b m_b / N |acc_b - conf_b|^p)^(1/p); 0 when all weights are 0.
  """
  checks.positive_int("n_bins", n_bins)
  checks.scalar("temperature", temperature)
  checks.scalar("p", p, low=1.0, strict=False)
  if jnp.ndim(confidences) != 1 or jnp.shape(correct) != jnp.shape(confidences):
    raise ValueError(f"confidences {jnp.shape(confidences)} and correct "
                     f"{jnp.shape(correct)}; expected two (N,) arrays")
  c = confidences
  mu = jnp.linspace(0.0, 1.0, n_bins, dtype=c.dtype) if centers is None else \
      jnp.asarray(centers, c.dtype)
  a = jnp.asarray(correct, c.dtype)
  w = jnp.ones_like(c) if weights is None else jnp.asarray(weights, c.dtype)
  return _soft_binned(c, a, w, mu, temperature, p)


@jax.jit
def _soft_binned(c: Array, a: Array, w: Array, mu: Array, temperature: Array,
                 p: Array) -> Array:
  a = jax.lax.stop_gradient(a)
  s = jax.nn.softmax(-((c[:, None] - mu[None, :]) ** 2) / temperature, axis=-1) * w[:, None]
  mass = s.sum(axis=0) + 1e-8
  conf_b = (s * c[:, None]).sum(axis=0) / mass
  acc_b = (s * a[:, None]).sum(axis=0) / mass
  total = jnp.maximum(w.sum(), 1e-12)
  inner = jnp.sum(mass / total * jnp.abs(acc_b - conf_b) ** p)
  # (.)^(1/p) has an infinite slope at 0: take the root only of positive values.
  positive = inner > 0
  return jnp.where(positive, jnp.where(positive, inner, 1.0) ** (1.0 / p), 0.0)


def soft_binned_ece(logits: Array, labels: Array, weights: Array | None = None, *,
                    n_bins: int = 15, temperature: float = 0.1, p: float = 2.0) -> Array:
  """SoftBinnedECE of logits (N, K) and labels (N,): FGR's ID calibration constraint
  (15 centres, T = 0.1, p = 2 as in the public code; module docstring).

  Args:
    logits: (N, K).
    labels: (N,) integer classes.
    weights: optional (N,) weights, e.g. `~filtered` to use only the clean images.

  Example:
    >>> loss = soft_binned_ece(jnp.array([[2.0, 0.0]]), jnp.array([0]))
  """
  _check(logits, labels)
  probs = jax.nn.softmax(logits, axis=-1)
  conf = probs.max(axis=-1)
  correct = (jnp.argmax(probs, axis=-1) == labels).astype(logits.dtype)
  return soft_binned_calibration_error(conf, correct, weights, n_bins=n_bins,
                                       temperature=temperature, p=p)


LOSSES = {"cross_entropy": cross_entropy, "focal": focal_loss, "dual_focal": dual_focal_loss,
          "label_smoothing": label_smoothing_loss}


def classification_loss(name: str, logits: Array, labels: Array, **kwargs) -> Array:
  """`LOSSES[name](logits, labels, **kwargs)`, with a one-line error for unknown names.

  Example:
    >>> loss = classification_loss("dual_focal", jnp.zeros((2, 3)), jnp.array([0, 1]),
    ...                            gamma=5.0)
  """
  if name not in LOSSES:
    raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(LOSSES)}")
  return LOSSES[name](logits, labels, **kwargs)
