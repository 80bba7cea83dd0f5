"""HieraGraphNet: the conditioned vector field v_theta(t, x, c) on a multilevel mesh graph.

Encode-process-decode (Pfaff et al. 2021) over the levels of a `MultiscaleGraph`,
in a U shape (CGFM, ICML 2026; papers/icml2026-abstracts.txt line 21):

    e      = MLP([phi(t), psi(c)])                  the conditioning, the graphs' globals
    h^0_i  = MLP_0([x_i, static features_i]),   h^l_j = MLP_l(static features_j)  (l > 0)
    down:  for l = 0..L-1:  B x InteractionBlock on level l;  then, if l < L-1,
           h^{l+1}_j += MLP([h^{l+1}_j, mean_{i: a(i) = j} MLP([h^l_i, d_ij, e]), e])
    up:    for l = L-2..0:  h^l_i += MLP([h^l_i, h^{l+1}_{a(i)}, d_{i a(i)}, e]);
                            B x InteractionBlock on level l
    v_i    = MLP_out(h^0_i)

with phi the sinusoidal time features, psi(c) = [c, sin(pi k c), cos(pi k c)]
(k = 1..K) of the standardised physical condition (low frequencies, so the field is
smooth in c and interpolates between the conditions seen in training), a(i) the
pooling map and d the cross-level displacement features. With a single level the
network is a MeshGraphNet with B conditioned blocks (the single-level baseline).

`apply(params, graph, t, x, cond)` takes a (padded) MultiscaleGraph with G graphs,
node states x (N_0, C), and t () or (G,) and cond (P,) or (G, P) per graph: one
sample (G = 2 after `graphs.pad`: the mesh and its padding graph), or a whole batch
merged into one graph by `graphs.merge` (G = 2B), which is how `flow` runs it.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from common.models.gnn import InteractionBlock, LayerNormMLP
from methods.cgfm.graphs import MultiscaleGraph
from methods.flow_matching.networks import time_features


def condition_features(cond: jax.Array, num_frequencies: int) -> jax.Array:
  """psi(c) = [c, sin(pi k c), cos(pi k c)], k = 1..K, for a standardised condition c (P,).

  Low frequencies keep the field smooth in c, so it interpolates between conditions.

  Args:
    cond: (P,) standardised condition.
    num_frequencies: K.

  Returns:
    (P (1 + 2K),) features: c, then the sines (k-major per entry), then the cosines.

  Example:
    >>> condition_features(jnp.array([0.3]), 2)   # [0.3, sin(.3 pi), sin(.6 pi), cos.., cos..]
  """
  k = jnp.arange(1, num_frequencies + 1, dtype=cond.dtype)
  ang = jnp.pi * cond[:, None] * k[None, :]
  return jnp.concatenate([cond, jnp.sin(ang).ravel(), jnp.cos(ang).ravel()])


class HieraGraphNet(nn.Module):
  """The multilevel conditioned vector field; one level gives the MeshGraphNet baseline.

  Attributes:
    latent: width of node, edge and conditioning latents.
    blocks_per_level: InteractionBlocks run at each level on the way down, and again at
      each level but the coarsest on the way up.
    num_layers: hidden layers in every MLP.
    out_dim: channels of the output field.
    cond_frequencies: K in psi(c).
    receivers_sorted: promise that every level's receivers are non-decreasing, as
      `graphs.build` makes them (and `graphs.pad` / `graphs.merge` keep them); the
      segment sums then tell XLA so. Leave False for graphs of unknown edge order.

  Example:
    >>> model = HieraGraphNet(latent=32, blocks_per_level=1, num_layers=1)
    >>> x = jnp.zeros((padded.levels[0].nodes.shape[0], 3))
    >>> params = model.init(key, padded, 0.0, x, jnp.zeros(1))
    >>> v = model.apply(params, padded, 0.5, x, jnp.array([0.2]))   # (N_0, 3)
  """
  latent: int = 64
  blocks_per_level: int = 2
  num_layers: int = 2
  out_dim: int = 3
  cond_frequencies: int = 2
  receivers_sorted: bool = False

  @nn.compact
  def __call__(self, graph: MultiscaleGraph, t: jax.Array, x: jax.Array,
               cond: jax.Array) -> jax.Array:
    levels = graph.levels
    if x.ndim != 2 or x.shape[0] != levels[0].nodes.shape[0]:
      raise ValueError(f"x must have shape (N_0={levels[0].nodes.shape[0]}, C), got {x.shape}")
    dtype = x.dtype
    n_graph = levels[0].n_node.shape[0]
    t = jnp.broadcast_to(jnp.asarray(t, dtype), (n_graph,))
    cond = jnp.asarray(cond, dtype)
    cond = jnp.broadcast_to(cond, (n_graph, cond.shape[-1]))
    psi = jax.vmap(lambda c: condition_features(c, self.cond_frequencies))(cond)
    e = LayerNormMLP(self.latent, self.latent, self.num_layers, name="cond_encoder")(
        jnp.concatenate([time_features(t), psi], axis=-1))  # (G, latent)
    per_node = lambda l: jnp.repeat(e, levels[l].n_node, axis=0,
                                    total_repeat_length=levels[l].nodes.shape[0])
    mlp = lambda name: LayerNormMLP(self.latent, self.latent, self.num_layers, name=name)

    h, graphs = [], []
    for l, g in enumerate(levels):
      feats = g.nodes.astype(dtype)
      if l == 0:
        feats = jnp.concatenate([x, feats], axis=-1)
      h.append(mlp(f"node_encoder_{l}")(feats))
      graphs.append(g._replace(edges=mlp(f"edge_encoder_{l}")(g.edges.astype(dtype)),
                               globals=e))

    def process(l: int, stage: str):
      g = graphs[l]._replace(nodes=h[l])
      for b in range(self.blocks_per_level):
        g = InteractionBlock(self.latent, self.num_layers, self.receivers_sorted,
                             name=f"{stage}_{l}_block_{b}")(g)
      h[l], graphs[l] = g.nodes, g

    num_levels = len(levels)
    for l in range(num_levels):
      process(l, "down")
      if l < num_levels - 1:
        a, d = graph.assign[l], graph.cross[l].astype(dtype)
        msg = mlp(f"pool_message_{l}")(jnp.concatenate([h[l], d, per_node(l)], -1))
        n_coarse = h[l + 1].shape[0]
        total = jax.ops.segment_sum(msg, a, n_coarse)
        count = jax.ops.segment_sum(jnp.ones((a.shape[0], 1), dtype), a, n_coarse)
        h[l + 1] = h[l + 1] + mlp(f"pool_update_{l}")(
            jnp.concatenate([h[l + 1], total / jnp.maximum(count, 1.0), per_node(l + 1)], -1))
    for l in range(num_levels - 2, -1, -1):
      a, d = graph.assign[l], graph.cross[l].astype(dtype)
      h[l] = h[l] + mlp(f"unpool_{l}")(
          jnp.concatenate([h[l], h[l + 1][a], d, per_node(l)], -1))
      process(l, "up")

    return LayerNormMLP(self.latent, self.out_dim, self.num_layers, layer_norm=False,
                        name="decoder")(h[0])
