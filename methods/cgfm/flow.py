"""Condition-aware flow matching on mesh graphs: the training loss and the sampler.

CGFM (ICML 2026; papers/icml2026-abstracts.txt line 21) learns the distribution of
flow states p(x | c) over a range of physical conditions c (here the Reynolds
number) from many short trajectory windows, with one flow for all conditions:

    L(theta) = E_{t, c, X1 ~ p(.|c), X0 ~ N(0, I)} mean_i |v_theta(t, X_t, c; G)_i - (X1 - X0)_i|^2,
    X_t = (1 - t) X0 + t X1,

over the real (unpadded) nodes i of the mesh graph G, with v_theta a
`HieraGraphNet`. Because c enters v_theta through smooth features, the flow is
defined for every c in the trained range: sampling at an unseen condition
interpolates between the trained ones. Samples come from integrating
dX/dt = v_theta(t, X, c; G) from X0 ~ N(0, I) with `flow_matching.sample_ode`.

States and conditions are standardised (`Standardizer`, from training data only) so
that the N(0, I) source matches the data's scale. The loss reuses
`flow_matching.losses.cfm_loss`; a batch is `{"graph": MultiscaleGraph stacked
over B, "x1": (B, N_0, C), "cond": (B, P)}` (see `methods.cgfm.graphs`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from methods.cgfm import graphs as graphs_lib
from methods.flow_matching import losses as fm_losses
from methods.flow_matching import sampling as fm_sampling

Array = jax.Array


class Standardizer(NamedTuple):
  """Per-channel affine maps of states and conditions: z = (x - mean) / std."""
  state_mean: np.ndarray  # (C,)
  state_std: np.ndarray   # (C,)
  cond_mean: np.ndarray   # (P,)
  cond_std: np.ndarray    # (P,)

  @classmethod
  def fit(cls, states: np.ndarray, cond: np.ndarray) -> "Standardizer":
    """From training states (M, N, C) and conditions (M, P)."""
    states, cond = np.asarray(states, np.float64), np.asarray(cond, np.float64)
    s_std = states.reshape(-1, states.shape[-1]).std(0)
    c_std = cond.std(0)
    return cls(states.reshape(-1, states.shape[-1]).mean(0).astype(np.float32),
               np.where(s_std > 0, s_std, 1.0).astype(np.float32),
               cond.mean(0).astype(np.float32),
               np.where(c_std > 0, c_std, 1.0).astype(np.float32))

  def states(self, x):
    return (x - self.state_mean) / self.state_std

  def unstates(self, z):
    return z * self.state_std + self.state_mean

  def cond(self, c):
    return (c - self.cond_mean) / self.cond_std


def batched_field(model, params, graph: graphs_lib.MultiscaleGraph
                  ) -> Callable[[Array, Array, Array], Array]:
  """(t (B,), x (B, N, C), cond (B, P)) -> v (B, N, C), zero on padding nodes.

  `graph` is stacked over the batch (B, ...); the batch runs as one merged graph.
  """
  mask = jnp.asarray(graphs_lib.node_mask(graph))[..., None]
  merged = graphs_lib.merge(graph)
  per_sample = graph.levels[0].n_node.shape[-1]  # graphs per padded sample (2)

  def field(t, x, cond):
    b, n = x.shape[:2]
    out = model.apply(params, merged, jnp.repeat(t, per_sample),
                      x.reshape((b * n,) + x.shape[2:]), jnp.repeat(cond, per_sample, axis=0))
    return out.reshape(x.shape[:2] + out.shape[1:]) * mask.astype(out.dtype)

  return field


def make_loss_fn(model, *, t_max: float = 1.0) -> Callable:
  """loss_fn(params, batch, key) -> (loss, {}) for `common.train.train`.

  The loss is the CFM regression error per real node and channel (so its scale does
  not depend on the mesh size).
  """

  def loss_fn(params, batch, key):
    graph, x1, cond = batch["graph"], batch["x1"], batch["cond"]
    mask = jnp.asarray(graphs_lib.node_mask(graph))[..., None].astype(x1.dtype)
    k0, kt = jax.random.split(key)
    x0 = jax.random.normal(k0, x1.shape, x1.dtype) * mask
    x1 = x1 * mask
    t = jax.random.uniform(kt, x1.shape[:1], x1.dtype, 0.0, t_max)
    field = batched_field(model, params, graph)
    apply_fn = lambda p, t_, x_, c_: field(t_, x_, c_)
    loss = fm_losses.cfm_loss(apply_fn, params, x0, x1, t, cond, path="linear")
    per_node = loss / (jnp.mean(jnp.sum(mask, axis=(1, 2))) * x1.shape[-1])
    return per_node, {}

  return loss_fn


def sample(model, params, graph: graphs_lib.MultiscaleGraph, cond: Array, key: Array, *,
           num_samples: int, num_steps: int = 32, solver: str = "euler",
           dtype=jnp.float32) -> Array:
  """num_samples states (S, N_0, C) at one (standardised) condition cond (P,).

  `graph` is one padded MultiscaleGraph (no batch axis), shared by all samples.
  """
  n, c = graph.levels[0].nodes.shape[0], model.out_dim
  mask = jnp.asarray(graphs_lib.node_mask(graph))[None, :, None].astype(dtype)
  x0 = jax.random.normal(key, (num_samples, n, c), dtype) * mask
  conds = jnp.broadcast_to(jnp.asarray(cond, dtype), (num_samples,) + jnp.shape(cond))
  field = batched_field(model, params, graphs_lib.broadcast(graph, num_samples))
  vector_field = lambda t, x: field(jnp.broadcast_to(t, (num_samples,)), x, conds)
  return fm_sampling.sample_ode(vector_field, x0, num_steps=num_steps, solver=solver)
