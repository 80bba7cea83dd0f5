"""Per-token susceptibilities: how a component responds to upweighting one token in context.

Upweighting the token y in context x in the data distribution, q -> q + h delta_xy,
shifts the posterior expectation of a component observable phi_C by (to first order)

    chi_xy^C = d/dh E_h[phi_C] = -Cov_posterior[ phi_C(w), l_xy(w) - L(w) ],

where l_xy(w) = -log p_w(y | x) is the per-token loss and L(w) the loss on the data
distribution ("Spectroscopy of a language model", ICML 2026; Baker et al. 2025,
"Structural inference: interpreting small language models with susceptibilities",
appendix C). The posterior is the localized SGLD posterior restricted to C's weights
(`sgld.run_chains(..., mask=component_mask)`), and phi_C(w) = L(w) - L(w0) is C's
share of the loss (only C's weights move). The covariance is the sample covariance
over the SGLD draws, pooled within chains (each chain centred by its own mean), for
all probe tokens at once.

Example:
    >>> phi = jnp.array([[0.1, 0.3, 0.2]])            # (chains, draws)
    >>> l = jnp.array([[[1., 2.], [3., 2.], [2., 2.]]])  # (chains, draws, tokens)
    >>> [round(v, 4) for v in pooled_covariance(phi, l).tolist()]   # over the 3 draws
    [0.1, 0.0]
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from methods.susceptibility.sgld import run_chains
from methods.susceptibility.sgld import SGLDTrace


def pooled_covariance(a: jax.Array, b: jax.Array) -> jax.Array:
  """Within-chain sample covariance of a (chains, draws) with b (chains, draws, ...).

      Cov = sum_c sum_t (a_ct - mean_t a_c)(b_ct - mean_t b_c) / (C (D - 1))

  For one chain this is numpy's `np.cov(a, b_j)[0, 1]` for every trailing index j.

  Args:
    a: (chains, draws >= 2); b: (chains, draws, ...).

  Returns:
    (...) covariances, one per trailing index of b.

  Example:
    >>> pooled_covariance(jnp.array([[0.0, 1.0]]), jnp.array([[[0.0], [2.0]]]))
    Array([1.], dtype=float32)
  """
  a, b = jnp.asarray(a), jnp.asarray(b)
  if a.ndim != 2 or b.shape[:2] != a.shape or a.shape[1] < 2:
    raise ValueError(f"pooled_covariance needs a (chains, draws>=2) and b (chains, draws, "
                     f"...), got {a.shape} and {b.shape}")
  chains, draws = a.shape
  ac = a - jnp.mean(a, axis=1, keepdims=True)
  bc = b - jnp.mean(b, axis=1, keepdims=True)
  ac = ac.reshape(ac.shape + (1,) * (b.ndim - 2))
  return jnp.sum(ac * bc, axis=(0, 1)) / (chains * (draws - 1))


def susceptibilities(phi: jax.Array, token_losses: jax.Array,
                     loss: jax.Array | None = None) -> jax.Array:
  """chi_xy = -Cov[phi, l_xy - L] for every probe token.

  Args:
    phi: (chains, draws) observable of the component at each draw.
    token_losses: (chains, draws, N) per-token losses l_xy at each draw.
    loss: (chains, draws) the distribution loss L(w) at each draw; default: the mean
      of `token_losses` over the N probe tokens.

  Returns:
    (N,) susceptibilities.

  Example:
    >>> phi = jnp.array([[0.0, 1.0, 2.0]])
    >>> l = jnp.array([[[1.0, 1.0], [0.0, 2.0], [-1.0, 3.0]]])   # token 0 falls with phi
    >>> susceptibilities(phi, l)
    Array([ 1., -1.], dtype=float32)
  """
  if loss is None:
    loss = jnp.mean(token_losses, axis=-1)
  return -pooled_covariance(phi, token_losses - loss[..., None])


class SusceptibilityResult(NamedTuple):
  """chi: (components, N); phi: (components, chains, draws) observable draws;
  trace: the components' `SGLDTrace`s stacked on a leading components axis
  (observations dropped); init_token_losses: (N,) l_xy(w0)."""
  chi: jax.Array
  phi: jax.Array
  trace: SGLDTrace
  init_token_losses: jax.Array


def stack_trees(trees: Sequence[Any]) -> Any:
  """Stacks pytrees of the same structure on a new leading axis:

      out[leaf] = stack([tree[leaf] for tree in trees])

  Args:
    trees: a non-empty sequence of pytrees with equal structure and leaf shapes.

  Returns:
    One pytree whose leaves have a leading axis of len(trees).

  Example:
    >>> stack_trees([{"a": jnp.zeros(2)}, {"a": jnp.ones(2)}])["a"].shape
    (2, 2)
  """
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def component_susceptibilities(
    loss_fn: Callable[[Any, Any], jax.Array], token_loss_fn: Callable[[Any], jax.Array],
    params: Any, batch_fn: Callable[[jax.Array], Any], masks: Sequence[Any],
    key: jax.Array, *, components_per_call: int | None = None,
    **sgld_kwargs) -> SusceptibilityResult:
  """Susceptibilities of N probe tokens to every component in `masks`.

  For each component C (mask m_C), SGLD restricted to C runs from w0 = params; at each
  draw the probe per-token losses l(w) = token_loss_fn(w) (N,) are recorded, and

      phi_C(w) = mean(l(w)) - mean(l(w0)),   chi_C = -Cov[phi_C, l - mean(l)].

  Components are vmapped, `components_per_call` at a time (None: all at once).

  Args:
    loss_fn: (params, batch) -> scalar minibatch loss driving SGLD.
    token_loss_fn: params -> (N,) per-token losses on the fixed probe set.
    params: w0.
    batch_fn: traceable step -> batch (see `sgld.run_chains`).
    masks: 0/1 pytrees like params, one per component.
    key: PRNG key; component k uses fold_in(key, k).
    **sgld_kwargs: step_size, n_beta, localization, num_chains, num_burnin,
      num_draws, thin, weight_decay (see `sgld.run_chains`).

  Returns:
    `SusceptibilityResult`.

  Example:
    >>> w0 = {"a": jnp.zeros(2), "b": jnp.zeros(2)}
    >>> loss_fn = lambda w, batch: jnp.sum((w["a"] - 1.0) ** 2 + w["b"] ** 2)
    >>> token_loss_fn = lambda w: jnp.stack([w["a"][0] ** 2, w["b"][1] ** 2])
    >>> masks = [{"a": jnp.ones(2), "b": jnp.zeros(2)}, {"a": jnp.zeros(2), "b": jnp.ones(2)}]
    >>> res = component_susceptibilities(loss_fn, token_loss_fn, w0, lambda s: None,
    ...                                  masks, jax.random.PRNGKey(0), step_size=1e-2,
    ...                                  n_beta=1.0, localization=1.0, num_chains=2,
    ...                                  num_draws=20)
    >>> res.chi.shape, res.phi.shape
    ((2, 2), (2, 2, 20))
  """
  if not masks:
    raise ValueError("component_susceptibilities needs at least one component mask")
  init_losses = token_loss_fn(params)
  init_mean = jnp.mean(init_losses)

  def one(k, mask):
    trace = run_chains(loss_fn, params, batch_fn, jax.random.fold_in(key, k),
                                mask=mask, observe_fn=token_loss_fn, **sgld_kwargs)
    losses = trace.observations
    phi = jnp.mean(losses, axis=-1) - init_mean
    chi = susceptibilities(phi, losses)
    return chi, phi, trace._replace(observations=None)

  per_call = len(masks) if components_per_call is None else components_per_call
  run = jax.jit(jax.vmap(one))
  outs = []
  for start in range(0, len(masks), per_call):
    group = masks[start:start + per_call]
    outs.append(run(jnp.arange(start, start + len(group)), stack_trees(group)))
  chi = jnp.concatenate([o[0] for o in outs])
  phi = jnp.concatenate([o[1] for o in outs])
  trace = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[o[2] for o in outs])
  return SusceptibilityResult(chi, phi, trace, init_losses)
