"""Multilevel graphs for HieraGraphNet: one `jraph.GraphsTuple` per level plus the maps between levels.

A `MultiscaleGraph` holds, for levels l = 0 (the mesh) .. L-1 (the coarsest):

    levels[l]   a GraphsTuple: nodes = static node features (N_l, F_l), edges =
                [dx, dy, |d|] / s for each directed edge (E_l, 3), where d is the
                receiver-minus-sender displacement and s the mean mesh-edge length,
                with the edges sorted by (receiver, sender);
    assign[l]   (N_l,) int: the level-(l+1) node that level-l node i pools into;
    cross[l]    (N_l, 3): [dx, dy, |d|] / s from node i to its coarse node assign[l][i].

Edges sorted by receiver keep the receiver gathers and the segment sums of message
passing local in memory, and let `HieraGraphNet(receivers_sorted=True)` promise XLA
sorted indices; `pad` appends padding edges on the last (padding) node and `merge`
offsets sample b by b N_l, so both keep the order.

The hierarchy itself (which nodes survive, which fine nodes pool where) comes from
`methods.cgfm.coarsening`. Shapes are made static for `jit` with `pad`: every level
is padded with `jraph.pad_with_graphs` (one padding graph), and padding nodes of
level l pool into the last (padding) node of level l+1, so no real node ever
receives a message from padding. Samples of a batch are padded to the same sizes
and stacked (`stack`) along a leading axis, which is the axis the training loop
splits over the mesh `data` axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jraph
import numpy as np


class MultiscaleGraph(NamedTuple):
  """The levels of a mesh hierarchy and the maps between them (see the module doc).

  Attributes:
    levels: one `jraph.GraphsTuple` per level, finest first.
    assign: (N_l,) int32 per level but the last: the coarse node each node pools into.
    cross: (N_l, 3) float32 per level but the last: [dx, dy, |d|] / s to that node.
  """
  levels: tuple[jraph.GraphsTuple, ...]
  assign: tuple[np.ndarray, ...]
  cross: tuple[np.ndarray, ...]

  @property
  def num_levels(self) -> int:
    return len(self.levels)


def _edge_features(pos: np.ndarray, senders: np.ndarray, receivers: np.ndarray,
                   scale: float) -> np.ndarray:
  d = (pos[receivers] - pos[senders]) / scale
  return np.concatenate([d, np.linalg.norm(d, axis=1, keepdims=True)], 1).astype(np.float32)


def _graph(nodes, edges, senders, receivers) -> jraph.GraphsTuple:
  """A one-graph GraphsTuple with its edges sorted by (receiver, sender)."""
  order = np.lexsort((senders, receivers))
  return jraph.GraphsTuple(
      nodes=np.asarray(nodes, np.float32), edges=edges[order],
      senders=np.asarray(senders, np.int32)[order],
      receivers=np.asarray(receivers, np.int32)[order],
      n_node=np.array([len(nodes)], np.int32), n_edge=np.array([len(senders)], np.int32),
      globals=np.zeros((1, 1), np.float32))


def build(pos: np.ndarray, senders: np.ndarray, receivers: np.ndarray,
          node_features: np.ndarray, coarse: Sequence = (), *,
          length_scale: float | None = None) -> MultiscaleGraph:
  """The multilevel graph of a mesh and its coarse levels.

  Args:
    pos: (N, 2) mesh node coordinates.
    senders, receivers: (E,) directed mesh edges (both directions of each edge).
    node_features: (N, F) static features of the mesh nodes (e.g. node type one-hot
      and position).
    coarse: `coarsening.CoarseLevel`s, level l+1 built from level l (empty for a
      single-level MeshGraphNet-style graph).
    length_scale: s in the edge features; defaults to the mean mesh-edge length.

  Returns:
    The MultiscaleGraph, every level's edges sorted by (receiver, sender). Coarse
    nodes carry [x / L, y / L, boundary] as features, with L the half extent of the
    mesh.

  Example:
    >>> coarse = coarsening.build_hierarchy(pos, s, r, ratios=(0.3, 0.3), seed=0)
    >>> graph = build(pos, s, r, node_features, coarse)
    >>> padded = pad(graph, *padded_sizes(graph))
  """
  pos = np.asarray(pos, np.float64)
  if pos.ndim != 2 or pos.shape[1] != 2:
    raise ValueError(f"pos must have shape (N, 2), got {pos.shape}")
  if np.shape(node_features)[0] != len(pos):
    raise ValueError(f"node_features has {np.shape(node_features)[0]} rows for "
                     f"{len(pos)} nodes")
  senders, receivers = np.asarray(senders), np.asarray(receivers)
  if senders.shape != receivers.shape or senders.ndim != 1:
    raise ValueError(f"senders {senders.shape} and receivers {receivers.shape} must be "
                     "equal-length vectors")
  if length_scale is None:
    length_scale = float(np.mean(np.linalg.norm(pos[receivers] - pos[senders], axis=1)))
  extent = 0.5 * float(np.max(pos.max(0) - pos.min(0)))
  levels = [_graph(node_features, _edge_features(pos, senders, receivers, length_scale),
                   senders, receivers)]
  assign, cross = [], []
  fine_pos = pos
  for level in coarse:
    a = np.asarray(level.assign)
    if a.shape != (len(fine_pos),) or a.min() < 0 or a.max() >= len(level.pos):
      raise ValueError(f"coarse level {len(levels)}: assign must map the {len(fine_pos)} "
                       f"finer nodes into [0, {len(level.pos)})")
    cpos = np.asarray(level.pos, np.float64)
    feats = np.concatenate([cpos / extent, np.asarray(level.boundary, np.float64)[:, None]], 1)
    levels.append(_graph(feats, _edge_features(cpos, level.senders, level.receivers,
                                               length_scale),
                         level.senders, level.receivers))
    d = (cpos[a] - fine_pos) / length_scale
    assign.append(a.astype(np.int32))
    cross.append(np.concatenate([d, np.linalg.norm(d, axis=1, keepdims=True)],
                                1).astype(np.float32))
    fine_pos = cpos
  return MultiscaleGraph(tuple(levels), tuple(assign), tuple(cross))


def padded_sizes(graph: MultiscaleGraph, multiple: int = 32) -> tuple[tuple[int, ...],
                                                                       tuple[int, ...]]:
  """Node and edge budgets per level: n -> ceil((n + 1) / multiple) * multiple.

  Args:
    graph: an unpadded MultiscaleGraph.
    multiple: the rounding (fewer distinct shapes, fewer recompilations).

  Returns:
    (node budgets, edge budgets), one per level, for `pad`.

  Example:
    >>> padded = pad(graph, *padded_sizes(graph, multiple=64))
  """
  up = lambda n: int(-(-(n + 1) // multiple) * multiple)
  nodes = tuple(up(int(np.sum(g.n_node))) for g in graph.levels)
  edges = tuple(up(int(np.sum(g.n_edge))) for g in graph.levels)
  return nodes, edges


def pad(graph: MultiscaleGraph, n_node: Sequence[int], n_edge: Sequence[int]) -> MultiscaleGraph:
  """Pads every level to (n_node[l], n_edge[l]) with `jraph.pad_with_graphs` (2 graphs).

  Padding nodes of level l pool into the last (padding) node of level l + 1 with
  zero cross features, so no real node receives a message from padding.

  Args:
    graph: an unpadded MultiscaleGraph.
    n_node, n_edge: per-level budgets; n_node[l] must exceed the real node count.

  Returns:
    The padded MultiscaleGraph (numpy arrays of static shapes).

  Example:
    >>> padded = pad(graph, *padded_sizes(graph))
    >>> mask = node_mask(padded)   # True on the real mesh nodes
  """
  if len(n_node) != graph.num_levels or len(n_edge) != graph.num_levels:
    raise ValueError(f"need one node and edge budget per level ({graph.num_levels}), got "
                     f"{len(n_node)} and {len(n_edge)}")
  levels = []
  for l, g in enumerate(graph.levels):
    real_n, real_e = int(np.sum(g.n_node)), int(np.sum(g.n_edge))
    if n_node[l] <= real_n or n_edge[l] < real_e:
      raise ValueError(f"level {l}: budget ({n_node[l]} nodes, {n_edge[l]} edges) must exceed "
                       f"the graph's {real_n} nodes and hold its {real_e} edges")
    p = jraph.pad_with_graphs(g, n_node[l], n_edge[l], 2)
    levels.append(p._replace(
        nodes=np.asarray(p.nodes, np.float32), edges=np.asarray(p.edges, np.float32),
        senders=np.asarray(p.senders, np.int32), receivers=np.asarray(p.receivers, np.int32),
        n_node=np.asarray(p.n_node, np.int32), n_edge=np.asarray(p.n_edge, np.int32),
        globals=np.asarray(p.globals, np.float32)))
  assign, cross = [], []
  for l, (a, c) in enumerate(zip(graph.assign, graph.cross)):
    extra = n_node[l] - len(a)
    assign.append(np.concatenate([a, np.full(extra, n_node[l + 1] - 1, np.int32)]))
    cross.append(np.concatenate([c, np.zeros((extra, c.shape[1]), np.float32)]))
  return MultiscaleGraph(tuple(levels), tuple(assign), tuple(cross))


def node_mask(graph: MultiscaleGraph) -> jax.Array:
  """(N_0,) True on the real mesh nodes, False on padding ((B, N_0) if stacked).

  The first graph of each padded sample is the real one (`jraph.pad_with_graphs`
  appends the padding graph), so mask_i = [i < n_node[0]].

  Args:
    graph: a padded MultiscaleGraph, or a batch of them stacked.

  Returns:
    Boolean (N_0,) or (B, N_0).

  Example:
    >>> x = x * node_mask(padded)[:, None]   # zero the padding nodes
  """
  g = graph.levels[0]
  return jnp.arange(g.nodes.shape[-2]) < jnp.asarray(g.n_node)[..., :1]


def stack(graphs: Sequence[MultiscaleGraph]) -> MultiscaleGraph:
  """Stacks equally padded graphs along a new leading (batch) axis.

  Args:
    graphs: MultiscaleGraphs padded to the same budgets.

  Returns:
    One MultiscaleGraph whose arrays have a leading axis of len(graphs).

  Example:
    >>> batch_graph = stack([pad(g, n, e) for g in meshes])
  """
  return jax.tree.map(lambda *xs: np.stack(xs), *graphs)


def merge(stacked: MultiscaleGraph) -> MultiscaleGraph:
  """One graph holding every sample of a stacked batch, as `jraph.batch` would build it.

  Node and edge arrays (B, N_l, ...) become (B N_l, ...); the indices of sample b
  (senders, receivers, assign) are offset by b N_l (or b N_{l+1}), and n_node/n_edge
  list all B x 2 graphs (each sample's real graph, then its padding graph). Works on
  traced arrays, so a model can run one gather/scatter per block over the whole batch.

  Args:
    stacked: padded MultiscaleGraphs stacked along a leading axis of size B.

  Returns:
    The merged MultiscaleGraph (2B graphs per level).

  Example:
    >>> merged = merge(broadcast(padded, 8))
  """
  b = stacked.levels[0].n_node.shape[0]
  flat = lambda a: jnp.reshape(a, (-1,) + tuple(a.shape[2:]))
  sizes = [lev.nodes.shape[1] for lev in stacked.levels]
  levels = []
  for lev, n in zip(stacked.levels, sizes):
    offset = (jnp.arange(b, dtype=lev.senders.dtype) * n)[:, None]
    levels.append(jraph.GraphsTuple(
        nodes=flat(lev.nodes), edges=flat(lev.edges), senders=flat(lev.senders + offset),
        receivers=flat(lev.receivers + offset), n_node=flat(lev.n_node),
        n_edge=flat(lev.n_edge), globals=flat(lev.globals)))
  assign = tuple(flat(a + (jnp.arange(b, dtype=a.dtype) * sizes[l + 1])[:, None])
                 for l, a in enumerate(stacked.assign))
  return MultiscaleGraph(tuple(levels), assign, tuple(flat(c) for c in stacked.cross))


def broadcast(graph: MultiscaleGraph, batch_size: int) -> MultiscaleGraph:
  """The same graph repeated along a new leading axis (a batch on one mesh).

  Args:
    graph: one padded MultiscaleGraph.
    batch_size: B.

  Returns:
    A stacked MultiscaleGraph (host arrays stay numpy, without copies).

  Example:
    >>> batch = {"graph": broadcast(padded, 8), "x1": x1, "cond": cond}
  """
  def rep(x):
    xp = np if isinstance(x, np.ndarray) else jnp  # host arrays stay on the host
    return xp.broadcast_to(x, (batch_size,) + tuple(x.shape))
  return jax.tree.map(rep, graph)
