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
  """Per-channel affine maps of states and conditions: z = (x - mean) / std.

  Fitted on training data only (`fit`); a zero std is replaced by 1. `states` and
  `cond` standardise, `unstates` maps generated states back to physical units.

  Example:
    >>> st = Standardizer.fit(train_states, train_cond)   # (M, N, C), (M, P)
    >>> z = st.states(train_states); c = st.cond(np.array([85.0]))
    >>> x = st.unstates(sample(model, params, graph, c, key, num_samples=64))
  """
  state_mean: np.ndarray  # (C,)
  state_std: np.ndarray   # (C,)
  cond_mean: np.ndarray   # (P,)
  cond_std: np.ndarray    # (P,)

  @classmethod
  def fit(cls, states: np.ndarray, cond: np.ndarray) -> "Standardizer":
    """Means and stds over states and nodes (per channel) and over states (per condition).

    Args:
      states: (M, N, C) training states.
      cond: (M, P) training conditions.

    Returns:
      The Standardizer, with float32 (C,) and (P,) statistics.
    """
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
  """The batched vector field v_theta(t_b, x_b, c_b; G_b), zero on padding nodes.

  Args:
    model: a `HieraGraphNet`.
    params: its parameters.
    graph: padded `MultiscaleGraph`s stacked over the batch (B, ...) (`graphs.broadcast`
      or `graphs.stack`); the batch runs as one graph (`graphs.merge`).

  Returns:
    field(t (B,), x (B, N, C), cond (B, P)) -> v (B, N, C), traceable under jit.

  Example:
    >>> field = batched_field(model, params, graphs.broadcast(padded, 4))
    >>> v = field(jnp.full(4, 0.5), x, cond)   # x (4, N, 3), cond (4, 1)
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


def make_batch_fn(graph: graphs_lib.MultiscaleGraph, states: np.ndarray, cond: np.ndarray,
                  batch_size: int) -> Callable[[int, int], dict]:
  """batch_fn(seed, step) for `common.train.train`: a batch as a pure function of (seed, step).

  Batch b draws B training states uniformly with replacement,
  idx = default_rng([seed, step]).integers(0, M, B), and returns
  {"graph": graph broadcast to B, "x1": states[idx] zero-padded to N_pad nodes,
  "cond": cond[idx]}, the batch `make_loss_fn` takes.

  Args:
    graph: one padded `MultiscaleGraph` (no batch axis), shared by every sample.
    states: (M, N, C) standardised training states on the N real nodes.
    cond: (M, P) standardised conditions.
    batch_size: B.

  Returns:
    batch_fn(seed, step) -> dict of host arrays.

  Example:
    >>> batch_fn = make_batch_fn(graph, z_states, z_cond, batch_size=8)
    >>> batch = batch_fn(0, 0)   # batch["x1"].shape == (8, N_pad, 3)
  """
  n_pad = graph.levels[0].nodes.shape[0]
  padded = np.zeros((len(states), n_pad, states.shape[-1]), np.float32)
  padded[:, :states.shape[1]] = states
  batch_graph = graphs_lib.broadcast(graph, batch_size)

  def batch_fn(seed: int, step: int):
    idx = np.random.default_rng([seed, step]).integers(0, len(states), batch_size)
    return {"graph": batch_graph, "x1": padded[idx], "cond": cond[idx]}

  return batch_fn


def make_loss_fn(model, *, t_max: float = 1.0) -> Callable:
  """loss_fn(params, batch, key) -> (loss, {}) for `common.train.train`.

  With X0 ~ N(0, I) on the real nodes, t ~ U(0, t_max) per sample and
  X_t = (1 - t) X0 + t X1 (`flow_matching.losses.cfm_loss`, linear path),

      loss = sum_{b, i real, c} |v_theta(t_b, X_t, c_b; G)_{ic} - (X1 - X0)_{ic}|^2
             / (B * mean_b(#real nodes) * C),

  the CFM regression error per real node and channel, so its scale does not depend
  on the mesh size or the padding.

  Args:
    model: a `HieraGraphNet`.
    t_max: the upper end of the time distribution.

  Returns:
    loss_fn(params, {"graph": stacked padded graphs, "x1": (B, N, C), "cond": (B, P)},
    key) -> (scalar loss, {}).

  Example:
    >>> loss_fn = make_loss_fn(model)
    >>> loss, _ = loss_fn(params, batch_fn(0, 0), jax.random.PRNGKey(0))
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
  """Samples of p(x | c): integrates dX/dt = v_theta(t, X, c; G) from X0 ~ N(0, I) to t = 1.

  Args:
    model: a `HieraGraphNet`.
    params: its parameters.
    graph: one padded `MultiscaleGraph` (no batch axis), shared by every sample.
    cond: (P,) standardised condition.
    key: draws X0 (zero on padding nodes).
    num_samples: S.
    num_steps: solver steps (`flow_matching.sample_ode`).
    solver: "euler", "heun" or "dopri5".
    dtype: of X0 and the integration.

  Returns:
    (S, N_0, C) standardised states (zero on padding nodes).

  Example:
    >>> z = sample(model, params, padded, st.cond(np.array([85.0])), key, num_samples=64)
    >>> states = st.unstates(np.asarray(z)[:, :num_real_nodes])
  """
  n, c = graph.levels[0].nodes.shape[0], model.out_dim
  mask = jnp.asarray(graphs_lib.node_mask(graph))[None, :, None].astype(dtype)
  x0 = jax.random.normal(key, (num_samples, n, c), dtype) * mask
  conds = jnp.broadcast_to(jnp.asarray(cond, dtype), (num_samples,) + jnp.shape(cond))
  field = batched_field(model, params, graphs_lib.broadcast(graph, num_samples))
  vector_field = lambda t, x: field(jnp.broadcast_to(t, (num_samples,)), x, conds)
  return fm_sampling.sample_ode(vector_field, x0, num_steps=num_steps, solver=solver)
