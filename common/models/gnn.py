"""Graph-network blocks on `jraph.GraphsTuple`, in the encode-process-decode style.

`LayerNormMLP` is the MeshGraphNet MLP (GELU hidden layers, a linear output, then
LayerNorm). `InteractionBlock` is one residual message-passing step (Battaglia et
al. 2018; Pfaff et al. 2021), conditioned on the graph's globals g:

    e'_k = e_k + MLP_e([e_k, h_{s(k)}, h_{r(k)}, g])
    h'_i = h_i + MLP_v([h_i, sum_{k: r(k) = i} e'_k, g])

with the semantics of `jraph.GraphNetwork`, so padded graphs (`jraph.pad_with_graphs`)
and batched graphs (`jraph.batch`) work unchanged: padding edges only touch padding
nodes. Node, edge and global features are arrays of width `latent`, `latent` and
any width.

How it is computed (the same function, less memory traffic). The first layer of an
MLP on a concatenation is a sum of per-part products, and a product commutes with a
gather, so

    [e_k, h_{s(k)}, h_{r(k)}, g] W = e_k W_e + (h W_s + g_{G(.)} W_g)_{s(k)} + (h W_r)_{r(k)}

(W split by rows; g_{G(i)} the globals of node i's graph, which is the edge's graph).
The block therefore never forms the (E, 4 latent) edge input nor per-edge copies of
the globals: the per-edge work is one (E, latent) product, two gathers of projected
node rows and the segment sum. The parameters are those of the concatenated form
(`LayerNormMLP` over `[e, h_s, h_r, g]`), so both forms load the same checkpoints.
Gathers and the segment sum promise in-bounds indices (jraph's contract); with
`receivers_sorted=True` they also promise receivers in non-decreasing order, which
`methods.cgfm.graphs.build` makes (edges sorted by receiver are also what keeps the
receiver gathers and the segment sum local in memory).

Example:
    >>> g = jraph.GraphsTuple(nodes=jnp.ones((3, 8)), edges=jnp.ones((4, 8)),
    ...                       senders=jnp.array([0, 1, 1, 2]), receivers=jnp.array([1, 0, 2, 1]),
    ...                       n_node=jnp.array([3]), n_edge=jnp.array([4]),
    ...                       globals=jnp.ones((1, 5)))
    >>> block = InteractionBlock(latent=8)
    >>> out = block.apply(block.init(jax.random.PRNGKey(0), g), g)
    >>> out.nodes.shape, out.edges.shape
    ((3, 8), (4, 8))
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import jraph

from common.models.mlp import MLP


class Gathered(NamedTuple):
  """An MLP input part that is the rows `index` of `x`: x[index], gathered after projection.

  Attributes:
    x: (N, d) rows.
    index: (E,) int rows of `x` to take, in [0, N).
    is_sorted: whether `index` is non-decreasing (a promise passed on to XLA).
  """
  x: jax.Array
  index: jax.Array
  is_sorted: bool = False


def _take_rows(x: jax.Array, index: jax.Array, is_sorted: bool) -> jax.Array:
  return x.at[index].get(mode="promise_in_bounds", indices_are_sorted=is_sorted)


class _PartsDense(nn.Module):
  """nn.Dense on the concatenation of `parts` (arrays or `Gathered`), never formed.

  Its parameters are those of `nn.Dense(features)` on the concatenated input (kernel
  (sum of widths, features), bias (features,), the same initialisers); parts that are
  gathered by the same index are projected, summed and gathered once.
  """
  features: int

  @nn.compact
  def __call__(self, parts) -> jax.Array:
    widths = [(p.x if isinstance(p, Gathered) else p).shape[-1] for p in parts]
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (sum(widths), self.features))
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
    out, groups, start = bias, [], 0
    for part, width in zip(parts, widths):
      w, start = kernel[start:start + width], start + width
      if not isinstance(part, Gathered):
        out = out + part @ w
        continue
      same = [g for g in groups if g[0] is part.index]
      if same:
        same[0][2] = same[0][2] + part.x @ w
      else:
        groups.append([part.index, part.is_sorted, part.x @ w])
    for index, is_sorted, projected in groups:
      out = out + _take_rows(projected, index, is_sorted)
    return out


class _PartsMLP(nn.Module):
  """`common.models.mlp.MLP` (GELU) whose first layer is a `_PartsDense` (same parameters)."""
  features: tuple[int, ...]

  @nn.compact
  def __call__(self, parts) -> jax.Array:
    x = _PartsDense(self.features[0], name="dense_0")(parts)
    for i, width in enumerate(self.features[1:], start=1):
      x = nn.Dense(width, name=f"dense_{i}")(nn.gelu(x))
    return x


class LayerNormMLP(nn.Module):
  """MLP with `num_layers` hidden layers of width `width`, output `out`, then LayerNorm.

  Called on one array x, it is LayerNorm(MLP(x)). Called on several parts (arrays of
  equal leading size, or `Gathered` rows), it is the same function of their
  concatenation on the last axis, with the same parameters, computed without
  forming the concatenation or the gathered rows (see the module doc).
  """
  width: int
  out: int
  num_layers: int = 2
  layer_norm: bool = True

  @nn.compact
  def __call__(self, *parts) -> jax.Array:
    features = (self.width,) * self.num_layers + (self.out,)
    if len(parts) == 1 and not isinstance(parts[0], Gathered):
      y = MLP(features, name="mlp")(parts[0])
    else:
      y = _PartsMLP(features, name="mlp")(parts)
    return nn.LayerNorm(name="norm")(y) if self.layer_norm else y


class InteractionBlock(nn.Module):
  """One residual edge-then-node update of a GraphsTuple, conditioned on its globals.

  Attributes:
    latent: width of the node and edge features and of the MLPs.
    num_layers: hidden layers of each MLP.
    receivers_sorted: promise that `graph.receivers` is non-decreasing (as
      `methods.cgfm.graphs.build` makes it); XLA may then use sorted-index scatters.
      Leave False for graphs of unknown order: a broken promise gives wrong sums.
  """
  latent: int
  num_layers: int = 2
  receivers_sorted: bool = False

  @nn.compact
  def __call__(self, graph: jraph.GraphsTuple) -> jraph.GraphsTuple:
    edge_mlp = LayerNormMLP(self.latent, self.latent, self.num_layers, name="edge")
    node_mlp = LayerNormMLP(self.latent, self.latent, self.num_layers, name="node")
    nodes, edges, senders, receivers = graph.nodes, graph.edges, graph.senders, graph.receivers
    n = nodes.shape[0]
    node_globals = jnp.repeat(graph.globals, graph.n_node, axis=0, total_repeat_length=n)
    edges = edges + edge_mlp(edges, Gathered(nodes, senders),
                             Gathered(nodes, receivers, self.receivers_sorted),
                             Gathered(node_globals, senders))
    received = jax.ops.segment_sum(edges, receivers, n, indices_are_sorted=self.receivers_sorted,
                                   mode="promise_in_bounds")
    nodes = nodes + node_mlp(nodes, received, node_globals)
    return graph._replace(nodes=nodes, edges=edges)
