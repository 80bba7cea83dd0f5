"""Graph-network blocks on `jraph.GraphsTuple`, in the encode-process-decode style.

`LayerNormMLP` is the MeshGraphNet MLP (GELU hidden layers, a linear output, then
LayerNorm). `InteractionBlock` is one residual message-passing step (Battaglia et
al. 2018; Pfaff et al. 2021), conditioned on the graph's globals g:

    e'_k = e_k + MLP_e([e_k, h_{s(k)}, h_{r(k)}, g])
    h'_i = h_i + MLP_v([h_i, sum_{k: r(k) = i} e'_k, g])

built on `jraph.GraphNetwork`, so padded graphs (`jraph.pad_with_graphs`) and
batched graphs (`jraph.batch`) work unchanged: padding edges only touch padding
nodes. Node, edge and global features are arrays of width `latent`, `latent` and
any width.

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

import flax.linen as nn
import jax
import jax.numpy as jnp
import jraph

from common.models.mlp import MLP


class LayerNormMLP(nn.Module):
  """MLP with `num_layers` hidden layers of width `width`, output `out`, then LayerNorm."""
  width: int
  out: int
  num_layers: int = 2
  layer_norm: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    y = MLP((self.width,) * self.num_layers + (self.out,), name="mlp")(x)
    return nn.LayerNorm(name="norm")(y) if self.layer_norm else y


class InteractionBlock(nn.Module):
  """One residual edge-then-node update of a GraphsTuple, conditioned on its globals."""
  latent: int
  num_layers: int = 2

  @nn.compact
  def __call__(self, graph: jraph.GraphsTuple) -> jraph.GraphsTuple:
    edge_mlp = LayerNormMLP(self.latent, self.latent, self.num_layers, name="edge")
    node_mlp = LayerNormMLP(self.latent, self.latent, self.num_layers, name="node")

    def update_edge(edges, sent, received, globals_):
      return edges + edge_mlp(jnp.concatenate([edges, sent, received, globals_], axis=-1))

    def update_node(nodes, _, received, globals_):
      return nodes + node_mlp(jnp.concatenate([nodes, received, globals_], axis=-1))

    network = jraph.GraphNetwork(update_edge_fn=update_edge, update_node_fn=update_node,
                                 update_global_fn=None)
    return network(graph)
