"""Localized stochastic-gradient Langevin dynamics (SGLD) over a params pytree.

The localized, tempered posterior around a trained point w0 is

    p(w) ∝ exp(-n_beta L_n(w) - (gamma / 2) ||w - w0||^2 - (lambda_wd / 2) ||w||^2),

and SGLD (Welling & Teh 2011, with the localization of Lau et al. 2023) samples it with

    dw = n_beta grad L_batch(w) + gamma (w - w0) + lambda_wd w
    w <- w - (eps / 2) dw + sqrt(eps) sigma N(0, I)          (sigma = 1 for sampling)

Restricting the sampler to a component C (a 0/1 `mask` pytree, e.g.
`common.models.transformer.component_mask`) multiplies the whole update by the mask, so
the other parameters stay at w0 and the chain samples the posterior of C's weights
given the rest. This is the sampler behind the local learning coefficient (`llc.py`)
and the susceptibilities (`susceptibilities.py`) of "Spectroscopy of a language model"
(ICML 2026; the per-token susceptibilities and conductance clustering applied to
Pythia-14M) and of Baker et al. 2025, "Structural inference: interpreting small language
models with susceptibilities".

`sgld(...)` is an `optax.GradientTransformation` (it composes with `optax.chain`);
`run_chains` runs several chains (vmapped) with burn-in and thinning inside one
`jit`-compiled `lax.scan`.

Example:
    >>> loss_fn = lambda w, batch: 0.5 * jnp.sum((w["x"] - batch) ** 2)
    >>> trace = run_chains(loss_fn, {"x": jnp.zeros(3)}, lambda s: jnp.zeros(3),
    ...                    jax.random.PRNGKey(0), step_size=1e-3, n_beta=10.0,
    ...                    localization=1.0, num_chains=2, num_burnin=10, num_draws=5)
    >>> trace.loss.shape
    (2, 15)
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax


class SGLDState(NamedTuple):
  """count: int32 updates done; key: the chain's PRNG key; anchor: w0 (the
  localization centre, the params passed to `init`)."""
  count: jax.Array
  key: jax.Array
  anchor: Any


class SGLDTrace(NamedTuple):
  """What `run_chains` returns (leading axis: chains).

  Attributes:
    loss: (chains, num_burnin + num_draws * thin) minibatch loss L_batch(w_t) at the
      params each step's gradient was taken at (step 0 is at w0).
    sq_distance: same shape, ||w_t - w0||^2 over the sampled coordinates.
    drift_sq_norm: same shape, ||m (n_beta g_t + gamma (w_t - w0) + lambda_wd w_t)||^2,
      the squared norm of the drift (the gradient of the localized potential) at w_t;
      `llc.mala_acceptance` turns consecutive values into the step-size check.
    observations: `observe_fn`'s pytree with leading axes (chains, num_draws), taken
      after every `thin`-th step past burn-in (None without `observe_fn`).
  """
  loss: jax.Array
  sq_distance: jax.Array
  drift_sq_norm: jax.Array
  observations: Any


def default_n_beta(batch_size: int) -> float:
  """The WBIC-style inverse temperature for a minibatch of m predictions:

      n_beta = m / ln m

  Args:
    batch_size: m >= 2, the predictions per minibatch (tokens for an LM).

  Returns:
    n_beta as a Python float.

  Example:
    >>> round(default_n_beta(512), 2)
    82.07
  """
  if batch_size < 2:
    raise ValueError(f"default_n_beta needs a batch size >= 2, got {batch_size}")
  return batch_size / math.log(batch_size)


def sgld(step_size: float, n_beta: float, localization: float, *, key: jax.Array,
         weight_decay: float = 0.0, mask: Any = None,
         noise_scale: float = 1.0) -> optax.GradientTransformation:
  """Localized SGLD as an optax transformation.

      updates = mask * ( -(eps/2) (n_beta g + gamma (w - w0) + lambda_wd w)
                         + sqrt(eps) sigma xi ),      xi ~ N(0, I)

  where g are the incoming gradients of the minibatch mean loss, w the current params
  and w0 the params given to `init`. Apply with `optax.apply_updates`.

  Args:
    step_size: eps > 0.
    n_beta: inverse temperature times sample size (>= 0; 0 samples the prior).
    localization: gamma >= 0, the pull towards w0.
    key: the chain's PRNG key (the noise of update t uses fold_in(key, t)).
    weight_decay: lambda_wd >= 0 (a Gaussian prior centred at 0).
    mask: optional 0/1 pytree like the params; only its nonzero entries move.
    noise_scale: sigma (1 for posterior sampling; 0 gives localized gradient descent).

  Returns:
    An `optax.GradientTransformation` with `SGLDState`.

  Example:
    >>> w0 = {"w": jnp.zeros(3)}
    >>> opt = sgld(1e-3, n_beta=10.0, localization=1.0, key=jax.random.PRNGKey(0))
    >>> state = opt.init(w0)
    >>> grads = jax.grad(lambda w: jnp.sum((w["w"] - 1.0) ** 2))(w0)
    >>> updates, state = opt.update(grads, state, w0)
    >>> w1 = optax.apply_updates(w0, updates)

  References:
    Welling & Teh (2011), Bayesian learning via stochastic gradient Langevin dynamics.
    Lau, Furman, Wang, Murfet, Wei (2023), The local learning coefficient.
  """
  _check_hyperparameters(step_size, n_beta, localization, weight_decay, noise_scale)

  def init(params):
    return SGLDState(jnp.zeros((), jnp.int32), key, params)

  def update(grads, state, params=None):
    if params is None:
      raise ValueError("sgld needs the current params: update(grads, state, params)")
    noise = optax.tree.random_like(jax.random.fold_in(state.key, state.count), params)
    drift = _drift(grads, params, state.anchor, n_beta, localization, weight_decay)
    updates = jax.tree.map(lambda d, xi: -(step_size / 2) * d
                           + jnp.sqrt(step_size) * noise_scale * xi, drift, noise)
    if mask is not None:
      updates = jax.tree.map(lambda u, m: u * m.astype(u.dtype), updates, mask)
    return updates, SGLDState(state.count + 1, state.key, state.anchor)

  return optax.GradientTransformation(init, update)


def _check_hyperparameters(step_size, n_beta, localization, weight_decay, noise_scale):
  """One-line errors for sampler hyperparameters out of range (traced ones pass)."""
  for name, value in (("step_size", step_size), ("n_beta", n_beta),
                      ("localization", localization), ("weight_decay", weight_decay),
                      ("noise_scale", noise_scale)):
    if not isinstance(value, jax.Array) and not 0 <= value < math.inf:
      raise ValueError(f"sgld: {name}={value!r}; expected a finite value >= 0")
  if not isinstance(step_size, jax.Array) and not step_size > 0:
    raise ValueError(f"sgld: step_size={step_size!r} must be > 0")


def _drift(grads, params, anchor, n_beta, localization, weight_decay):
  """n_beta g + gamma (w - w0) + lambda_wd w, leaf by leaf."""
  return jax.tree.map(
      lambda g, w, w0: n_beta * g + localization * (w - w0) + weight_decay * w,
      grads, params, anchor)


def _masked_sq_norm(tree, mask) -> jax.Array:
  """||mask * tree||^2."""
  if mask is not None:
    tree = jax.tree.map(lambda d, m: d * m.astype(d.dtype), tree, mask)
  return optax.tree.norm(tree, squared=True)


def _sq_distance(params, anchor, mask) -> jax.Array:
  """||mask * (w - w0)||^2."""
  return _masked_sq_norm(optax.tree.sub(params, anchor), mask)


def run_chains(loss_fn: Callable[[Any, Any], jax.Array], params: Any,
               batch_fn: Callable[[jax.Array], Any], key: jax.Array, *,
               step_size: float, n_beta: float, localization: float,
               num_chains: int = 4, num_burnin: int = 0, num_draws: int = 100,
               thin: int = 1, weight_decay: float = 0.0, mask: Any = None,
               noise_scale: float = 1.0,
               observe_fn: Callable[[Any], Any] | None = None,
               independent_batches: bool = False) -> SGLDTrace:
  """Runs `num_chains` localized SGLD chains from `params` (vmapped, one compiled scan).

  Each chain iterates the `sgld` update from w_0 = w0:

      w_{s+1} = w_s - (eps/2) m (n_beta grad L_{batch_fn(s)}(w_s) + gamma (w_s - w0)
                                 + lambda_wd w_s) + sqrt(eps) sigma m xi_s

  Every chain starts at w0 = `params` and takes num_burnin + num_draws * thin steps;
  step s uses the minibatch `batch_fn(s)` (the same for every chain, so chains differ
  only by their noise; with `independent_batches`, chain c uses `batch_fn(s + c * S)`
  for S the steps per chain, so the spread over chains also carries the minibatch
  noise) and chain c's key is `fold_in(key, c)`.

  Args:
    loss_fn: (params, batch) -> scalar mean minibatch loss L_batch (traceable).
    params: w0, the trained params pytree.
    batch_fn: int32 step index -> batch pytree, traceable (e.g. rows of a device
      array chosen by `jax.random.fold_in(data_key, step)`).
    key: PRNG key of the noise.
    step_size, n_beta, localization, weight_decay, mask, noise_scale: see `sgld`.
      `mask` may be a traced pytree, so components can be vmapped over.
    num_chains: independent chains (>= 1).
    num_burnin: steps before the first draw (>= 0).
    num_draws: draws per chain (>= 1), one every `thin` (>= 1) steps after burn-in.
    observe_fn: optional params -> pytree recorded at every draw (e.g. per-token
      losses on a probe set, or an activation tap).

  Returns:
    `SGLDTrace` with the loss trace, the distance trace and the observations.

  Example:
    >>> loss_fn = lambda w, batch: 0.5 * jnp.sum((w["x"] - batch) ** 2)
    >>> trace = run_chains(loss_fn, {"x": jnp.zeros(3)}, lambda s: jnp.zeros(3),
    ...                    jax.random.PRNGKey(0), step_size=1e-3, n_beta=10.0,
    ...                    localization=1.0, num_chains=2, num_burnin=10, num_draws=5,
    ...                    observe_fn=lambda w: w["x"][0])
    >>> trace.loss.shape, trace.observations.shape
    ((2, 15), (2, 5))
  """
  for name, value, low in (("num_chains", num_chains, 1), ("num_burnin", num_burnin, 0),
                           ("num_draws", num_draws, 1), ("thin", thin, 1)):
    if not isinstance(value, int) or value < low:
      raise ValueError(f"run_chains: {name}={value!r}; expected an int >= {low}")

  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
      raise TypeError(f"run_chains: params leaf {jax.tree_util.keystr(path) or 'params'} has "
                      f"dtype {jnp.result_type(leaf)}; expected a floating dtype")
  if mask is not None and (jax.tree.structure(mask) != jax.tree.structure(params)):
    raise ValueError(f"run_chains: mask has tree structure {jax.tree.structure(mask)}; "
                     f"expected the params' {jax.tree.structure(params)}")
  _check_hyperparameters(step_size, n_beta, localization, weight_decay, noise_scale)
  hyper = dict(step_size=step_size, n_beta=n_beta, localization=localization,
               weight_decay=weight_decay, noise_scale=noise_scale)
  return _run_chains(key, params, mask, hyper, loss_fn=loss_fn, batch_fn=batch_fn,
                     observe_fn=observe_fn, num_chains=num_chains, num_burnin=num_burnin,
                     num_draws=num_draws, thin=thin,
                     independent_batches=bool(independent_batches))


# Module level, so that repeated calls with the same functions and sizes reuse one
# compiled program (a jit defined inside `run_chains` recompiled on every call, which
# cost more than the chains themselves for a small LM). The hyperparameters are traced:
# changing them does not recompile either.
@functools.partial(jax.jit, static_argnames=(
    "loss_fn", "batch_fn", "observe_fn", "num_chains", "num_burnin", "num_draws", "thin",
    "independent_batches"))
def _run_chains(key, params, mask, hyper, *, loss_fn, batch_fn, observe_fn, num_chains,
                num_burnin, num_draws, thin, independent_batches) -> SGLDTrace:
  """`run_chains` after its checks: the chains vmapped over one compiled scan."""
  steps_per_chain = num_burnin + num_draws * thin
  n_beta, localization = hyper["n_beta"], hyper["localization"]
  weight_decay = hyper["weight_decay"]

  def one_chain(chain_key, chain):
    offset = chain * steps_per_chain if independent_batches else 0
    opt = sgld(hyper["step_size"], n_beta, localization, key=chain_key,
               weight_decay=weight_decay, mask=mask, noise_scale=hyper["noise_scale"])
    state = opt.init(params)

    def step(carry, s):
      w, opt_state = carry
      loss, grads = jax.value_and_grad(loss_fn)(w, batch_fn(s + offset))
      chex.assert_shape(loss, ())
      updates, opt_state = opt.update(grads, opt_state, w)
      dist = _sq_distance(w, params, mask)
      drift = _masked_sq_norm(
          _drift(grads, w, params, n_beta, localization, weight_decay), mask)
      return (optax.apply_updates(w, updates), opt_state), (loss, dist, drift)

    carry, burn = jax.lax.scan(step, (params, state), jnp.arange(num_burnin, dtype=jnp.int32))

    def draw(carry, d):
      steps = num_burnin + d * thin + jnp.arange(thin, dtype=jnp.int32)
      carry, per_step = jax.lax.scan(step, carry, steps)
      obs = None if observe_fn is None else observe_fn(carry[0])
      return carry, (per_step, obs)

    _, (per_step, obs) = jax.lax.scan(draw, carry, jnp.arange(num_draws, dtype=jnp.int32))
    loss, dist, drift = (jnp.concatenate([b, x.reshape(-1)]) for b, x in zip(burn, per_step))
    return SGLDTrace(loss, dist, drift, obs)

  chains = jnp.arange(num_chains, dtype=jnp.int32)
  keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(chains)
  return jax.vmap(one_chain)(keys, chains)
