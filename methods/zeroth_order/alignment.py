"""Gradient alignment: cosine similarity of estimated update directions with jax.grad.

For an estimate g_hat of the true gradient g (same parameters, same batch),

    cos(g_hat, g) = <g_hat, g> / (|g_hat| |g|),

overall (all parameters flattened) and per parameter group (e.g. per linear layer),
averaged over independent draws of the perturbation. For z isotropic Gaussian in a
k-dimensional subspace with projection P and the exact directional derivative,
g_hat = <P g, z> z and

    E cos = (|P g| / |g|) * kappa(k),    kappa(k) = E|u_1| = Gamma(k/2) / (sqrt(pi) Gamma((k+1)/2))

for u uniform on the unit sphere S^{k-1} (kappa(k) ~ sqrt(2 / (pi k))). MeZO is P = I,
k = D; AGZO is the activation subspace (`agzo.project`, `agzo.subspace_dimension`).

`planted_rank_control` is the experiment that isolates the mechanism: one linear
softmax layer whose inputs are planted low-rank or isotropic.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.models import taps as taps_lib
from methods.zeroth_order.agzo import activation_bases
from methods.zeroth_order.agzo import agzo_gradient
from methods.zeroth_order.agzo import project
from methods.zeroth_order.agzo import subspace_dimension
from methods.zeroth_order.spsa import spsa_gradient


def cosine(a: Any, b: Any) -> jax.Array:
  """cos(a, b) = <a, b> / (|a| |b|) over whole pytrees (0 when either is 0).

  Example:
      >>> float(cosine({"w": jnp.array([1.0, 0.0])}, {"w": jnp.array([1.0, 1.0])}))
      0.7071...
  """
  denom = optax.tree.norm(a) * optax.tree.norm(b)
  return jnp.where(denom > 0, optax.tree.vdot(a, b) / jnp.where(denom > 0, denom, 1.0), 0.0)


def group_cosines(a: Any, b: Any, groups: dict[str, Callable[[Any], Any]]) -> dict[str, jax.Array]:
  """{name: cosine(select(a), select(b))} for selectors of sub-pytrees."""
  return {name: cosine(select(a), select(b)) for name, select in groups.items()}


def linear_layer_groups(params: Any) -> dict[str, Callable[[Any], Any]]:
  """{"/".join(path): selector of that linear layer's kernel} for `group_cosines`.

  Example:
      >>> list(linear_layer_groups({"a": {"kernel": jnp.zeros((2, 3))}}))
      ['a']
  """
  groups = {}
  for path in taps_lib.linear_paths(params):
    def select(tree, path=path):
      node = tree
      for p in path:
        node = node[p]
      return node["kernel"]
    groups["/".join(path)] = select
  return groups


def isotropic_expected_cosine(k: int) -> float:
  """kappa(k) = E|u_1| = Gamma(k/2) / (sqrt(pi) Gamma((k+1)/2)), u uniform on S^{k-1}:
  the mean cosine of (g.z) z with g for z isotropic in k dimensions.

  Computed in float64 from log-gammas (float32 gammaln loses all precision for the
  k ~ 1e6 of a small LM).

  Args:
    k: a concrete integer >= 1.

  Returns:
    kappa(k) as a Python float (~ sqrt(2 / (pi k)) for large k).

  Example:
      >>> isotropic_expected_cosine(1)
      1.0
  """
  k = int(k)
  if k < 1:
    raise ValueError(f"isotropic_expected_cosine: k={k}; expected an integer >= 1")
  return math.exp(math.lgamma(k / 2) - math.lgamma((k + 1) / 2)) / math.sqrt(math.pi)


def subspace_expected_cosine(grads: Any, projected: Any, k: int) -> jax.Array:
  """(|P g| / |g|) kappa(k): the expected cosine of a k-dimensional subspace estimator.

  Args:
    grads: g.
    projected: P g (e.g. `agzo.project(g, bases)`).
    k: the subspace dimension (e.g. `agzo.subspace_dimension(params, bases)`).

  Returns:
    A scalar.
  """
  return optax.tree.norm(projected) / optax.tree.norm(grads) * isotropic_expected_cosine(k)


def alignment_draws(estimate_fn: Callable, params: Any, batch: Any, true_grads: Any,
                    key: jax.Array, num_draws: int,
                    groups: dict[str, Callable[[Any], Any]] | None = None
                    ) -> dict[str, jax.Array]:
  """Cosines of `num_draws` independent estimates with the true gradient.

      cos_d = cosine(estimate_fn(params, batch, key, d).grads, true_grads),  d < num_draws

  Args:
    estimate_fn: (params, batch, key, step) -> ZOEstimate (any estimator here).
    params: the point shared by all draws and by `true_grads`.
    batch: the minibatch shared likewise.
    true_grads: jax.grad of the same loss at the same point and batch.
    key: draw d uses (key, step=d), i.e. fold_in(key, d) inside the estimator.
    num_draws: the number of draws (a `lax.map`, one at a time, to bound memory).
    groups: optional {name: selector} for per-group cosines.

  Returns:
    {"overall": (num_draws,), name: (num_draws,) for each group}.

  Example:
      >>> est = lambda p, b, k, s: spsa_gradient(loss_fn, p, b, k, s, eps=1e-3)
      >>> c = alignment_draws(est, params, batch, jax.grad(loss_fn)(params, batch),
      ...                     jax.random.PRNGKey(0), 64)["overall"]
  """
  if isinstance(num_draws, bool) or not isinstance(num_draws, numbers.Integral) or num_draws < 1:
    raise ValueError(f"alignment_draws: num_draws={num_draws!r}; expected an int >= 1")
  groups = groups or {}

  def one(d):
    est = estimate_fn(params, batch, key, d)
    out = {"overall": cosine(est.grads, true_grads)}
    out.update(group_cosines(est.grads, true_grads, groups))
    return out

  return jax.lax.map(one, jnp.arange(num_draws, dtype=jnp.int32))


def mean_and_se(draws) -> tuple[float, float]:
  """(mean, standard error of the mean) of a 1-D array of draws."""
  draws = np.asarray(draws)
  if draws.ndim != 1 or draws.size == 0:
    raise ValueError(f"mean_and_se: draws of shape {draws.shape}; expected a non-empty 1-D array")
  return float(draws.mean()), float(draws.std() / np.sqrt(len(draws)))


def _control_problem(kind: str, keys, d_in: int, d_out: int, num_rows: int, rank: int):
  """(params, batch, loss_and_taps) of softmax regression on one tapped linear layer."""
  k_w, k_b, k_x, k_t = keys
  model = taps_lib.TappedDense(d_out, use_bias=False)
  params = {"kernel": 0.3 * jax.random.normal(k_w, (d_in, d_out))}
  teacher = jax.random.normal(k_t, (d_in, d_out))
  if kind == "isotropic":
    x = jax.random.normal(k_x, (num_rows, d_in))
  else:
    basis = jax.random.normal(k_b, (d_in, rank)) / np.sqrt(rank)
    x = jax.random.normal(k_x, (num_rows, rank)) @ basis.T
  batch = {"x": x, "labels": jnp.argmax(x @ teacher, -1)}

  def loss_and_taps(p, b):
    logits, taps = taps_lib.apply_with_taps(model, {"params": p}, b["x"])
    lse = jax.nn.logsumexp(logits, -1)
    return jnp.mean(lse - jnp.take_along_axis(logits, b["labels"][:, None], 1)[:, 0]), taps

  return params, batch, loss_and_taps


def planted_rank_control(key: jax.Array, *, d_in: int, d_out: int, num_rows: int,
                         rank: int, eps: float, num_iters: int, num_draws: int
                         ) -> dict[str, dict[str, float]]:
  """AGZO / MeZO mean cosine for planted low-rank vs isotropic (full-rank) inputs.

  Softmax regression, logits = x W with W (d_in, d_out) at a random point
  (0.3 N(0, 1)) and teacher labels argmax(x W*); x is either N(0, I_{d_in}) or
  x = B s with B (d_in, rank) / sqrt(rank) and s ~ N(0, I_rank). Both estimators are
  two-sided with the same eps; AGZO uses r = rank. Theory: the ratio is about
  sqrt(d_in / rank) for planted inputs and about 1 for isotropic ones.

  Args:
    key: split into the weights, the planted basis, the inputs, the teacher and
      the draws.
    d_in: input dimension.
    d_out: classes.
    num_rows: rows of x.
    rank: the planted rank and AGZO's r (< d_in).
    eps: perturbation size.
    num_iters: AGZO's power iterations.
    num_draws: draws per estimator.

  Returns:
    {"low_rank" | "isotropic": {"mezo", "mezo_se", "agzo", "agzo_se", "ratio"}}.

  Example:
      >>> ctrl = planted_rank_control(jax.random.PRNGKey(0), d_in=32, d_out=8,
      ...                             num_rows=512, rank=4, eps=1e-3, num_iters=2,
      ...                             num_draws=64)
      >>> ctrl["low_rank"]["ratio"] > ctrl["isotropic"]["ratio"]
      True
  """
  k_w, k_b, k_x, k_t, k_draw = jax.random.split(key, 5)
  out = {}
  for kind in ("low_rank", "isotropic"):
    params, batch, loss_and_taps = _control_problem(kind, (k_w, k_b, k_x, k_t), d_in, d_out,
                                                    num_rows, rank)
    loss_fn = lambda p, b, f=loss_and_taps: f(p, b)[0]
    grads = jax.grad(loss_fn)(params, batch)
    estimators = {
        "mezo": lambda p, b, k, s, f=loss_fn: spsa_gradient(f, p, b, k, s, eps=eps),
        "agzo": lambda p, b, k, s, f=loss_and_taps: agzo_gradient(
            f, p, b, k, s, eps=eps, rank=rank, num_iters=num_iters, two_sided=True)}
    row = {}
    for name, est in estimators.items():
      draws = jax.jit(lambda p, b, g, k, est=est: alignment_draws(
          est, p, b, g, k, num_draws))(params, batch, grads, k_draw)["overall"]
      row[name], row[name + "_se"] = mean_and_se(draws)
    row["ratio"] = row["agzo"] / row["mezo"]
    out[kind] = row
  return out


def agzo_expected_cosine(params: Any, taps: Any, grads: Any, key: jax.Array, *, rank: int,
                         num_iters: int = 2, num_sketches: int = 4) -> float:
  """The theory's AGZO cosine, (|P g| / |g|) kappa(k), averaged over sketches.

  Sketch d builds the bases from fold_in(key, 1000 + d) (`activation_bases`), then
  P (`agzo.project`) and k (`agzo.subspace_dimension`). Call it outside jit (k is
  a Python int); each sketch is one jitted call.

  Args:
    params: the parameter pytree.
    taps: the taps of the batch the gradient is taken on.
    grads: g = jax.grad of the loss at `params` on that batch.
    key: the sketches' base key.
    rank: r.
    num_iters: power iterations.
    num_sketches: how many bases to average over.

  Returns:
    The mean expected cosine, a Python float.
  """
  @jax.jit
  def sketch(d):
    bases = activation_bases(params, taps, jax.random.fold_in(key, 1000 + d), rank=rank,
                             num_iters=num_iters)
    return bases, optax.tree.norm(project(grads, bases)) / optax.tree.norm(grads)

  values = []
  for d in range(num_sketches):
    bases, ratio = sketch(d)
    values.append(float(ratio * isotropic_expected_cosine(subspace_dimension(params, bases))))
  return float(np.mean(values))
