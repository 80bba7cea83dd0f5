"""CGFM and its baselines as named variants: each one's padded graph and network.

A variant is named by how its hierarchy is coarsened: "aware" (CGFM, the
topology/geometry-aware scheme of `coarsening`), "random" or "voxel" (the naive
baselines), or None (the single-level MeshGraphNet-style network):

    model_variants(("random",)) == {"cgfm": "aware", "naive_random": "random",
                                    "single_level": None}

Every variant runs the same `HieraGraphNet` widths on the same static node features

    f_i = [one_hot(node_type_i), x_i / L, y_i / L],   L = max extent of the mesh / 2,

and the single-level network gets B (2L - 1) blocks (`baselines.single_level_blocks`,
L levels of the hierarchical ones), so every variant has the same message-passing depth.
The experiment and the benchmark build their graphs and models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.data.fluid_meshes import NORMAL, NUM_NODE_TYPES
from methods.cgfm import baselines
from methods.cgfm import coarsening
from methods.cgfm import graphs as graphs_lib
from methods.cgfm.hieragraphnet import HieraGraphNet


def model_variants(naive_coarsening: Sequence[str]) -> dict[str, str | None]:
  """{variant name: coarsening method, or None for the single-level network}.

  Args:
    naive_coarsening: the naive baselines to include ("random", "voxel").

  Returns:
    "cgfm" (aware), then "naive_<m>" for each m, then "single_level", in that order.

  Example:
    >>> model_variants(("random", "voxel"))
    {'cgfm': 'aware', 'naive_random': 'random', 'naive_voxel': 'voxel', 'single_level': None}
  """
  variants = {"cgfm": "aware"}
  variants.update({f"naive_{m}": m for m in naive_coarsening})
  variants["single_level"] = None
  return variants


def node_features(pos: np.ndarray, node_type: np.ndarray) -> np.ndarray:
  """f_i = [one_hot(node_type_i), x_i / L, y_i / L], L half the mesh's largest extent.

  Args:
    pos: (N, 2) node positions.
    node_type: (N,) ints in [0, NUM_NODE_TYPES) (`common.data.fluid_meshes` types).

  Returns:
    (N, NUM_NODE_TYPES + 2) float32.

  Example:
    >>> feats = node_features(mesh.pos, mesh.node_type)
  """
  extent = 0.5 * float(np.max(pos.max(0) - pos.min(0)))
  one_hot = np.eye(NUM_NODE_TYPES, dtype=np.float32)[node_type]
  return np.concatenate([one_hot, pos / extent], 1).astype(np.float32)


def variant_graph(pos: np.ndarray, senders: np.ndarray, receivers: np.ndarray,
                  node_type: np.ndarray, *, method: str | None, ratios: Sequence[float],
                  seed: int) -> graphs_lib.MultiscaleGraph:
  """The padded `MultiscaleGraph` of one variant on a mesh.

  The hierarchy is `coarsening.build_hierarchy(..., ratios, method, boundary, seed)`
  with boundary = (node_type != NORMAL), none for method None; the graph is padded to
  `graphs.padded_sizes`.

  Args:
    pos, senders, receivers, node_type: the mesh (`fluid_meshes.FlowMesh` fields).
    method: "aware", "random", "voxel" or None (single level).
    ratios: the coarsening ratios N_{l+1} / N_l.
    seed: the coarsening seed (tie-breaks of "aware", the subset of "random").

  Returns:
    The padded graph, ready for `HieraGraphNet` and `flow`.

  Example:
    >>> g = variant_graph(m.pos, m.senders, m.receivers, m.node_type, method="aware",
    ...                   ratios=(0.3, 0.3), seed=0)
  """
  coarse = () if method is None else coarsening.build_hierarchy(
      pos, senders, receivers, ratios=tuple(ratios), method=method,
      boundary=node_type != NORMAL, seed=seed)
  graph = graphs_lib.build(pos, senders, receivers, node_features(pos, node_type), coarse)
  return graphs_lib.pad(graph, *graphs_lib.padded_sizes(graph))


def variant_model(method: str | None, *, latent: int, blocks_per_level: int,
                  num_layers: int, num_levels: int, out_dim: int = 3) -> HieraGraphNet:
  """The `HieraGraphNet` of one variant; method None gets B (2L - 1) blocks on one level.

  The network promises receiver-sorted edges (`receivers_sorted=True`), as every graph
  from `variant_graph` (`graphs.build`) has them.

  Args:
    method: the variant's coarsening method, or None for the single-level network.
    latent, blocks_per_level, num_layers, out_dim: the network's widths and depth.
    num_levels: L, the levels of the hierarchical variants (len(ratios) + 1).

  Returns:
    The flax module (unbound).

  Example:
    >>> model = variant_model(None, latent=32, blocks_per_level=1, num_layers=1,
    ...                       num_levels=3)   # a MeshGraphNet with 5 blocks
  """
  blocks = blocks_per_level
  if method is None:
    blocks = baselines.single_level_blocks(blocks_per_level, num_levels)
  return HieraGraphNet(latent=latent, blocks_per_level=blocks, num_layers=num_layers,
                       out_dim=out_dim, receivers_sorted=True)
