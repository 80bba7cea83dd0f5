"""Topology- and geometry-aware graph coarsening for HieraGraphNet (CGFM, ICML 2026).

CGFM ("condition-aware graph flow matching"; papers/icml2026-abstracts.txt) builds the
coarse levels of its hierarchical graph network with "a topology- and geometry-aware
graph coarsening scheme that incorporates topological connectivity and local geometric
density". This module is that scheme (``method="aware"``) and the two naive baselines
the comparison uses (``"random"``, ``"voxel"``). Preprocessing runs once per mesh on the
host (numpy/scipy, like building a graph); ``pool``/``unpool`` are jnp and compose with
``jit`` and ``vmap``.

Algorithm ("aware"), for a fine mesh (pos, senders, receivers, boundary) and a target
size K = round(ratio * N):

1. Geometry. The local spacing h_i is the mean length of the edges incident to i
   (``local_spacing``).
2. Seeds: a density-adaptive Poisson-disk (maximal independent set) sweep. Nodes are
   visited boundary nodes first (in breadth-first order along the boundary subgraph,
   so the outline is subsampled evenly), then interior nodes by hop distance from the
   boundary (an advancing front; ties in a seeded random order). Node i becomes a seed
   unless a seed of the *same connected component* already lies within Euclidean
   distance r * h_i of it. The radius factor r is found by a safeguarded secant /
   bisection search in log r so the seed count is within 2 % of K (best found
   otherwise; in practice well within 10 %). The sweep distance is Euclidean (a k-d
   tree ball query); topology enters through the same-component rule here and through
   the geodesic assignment below.
3. Clusters: every node joins its nearest seed by graph-geodesic distance along mesh
   edges (one multi-source Dijkstra) in the density-normalised metric
   w_ij = |x_i - x_j| / ((h_i + h_j) / 2), so clusters hold about 1 / ratio fine nodes
   wherever the mesh is dense or sparse. Boundary nodes are first given to their
   nearest boundary seed along the boundary subgraph, and the multi-source Dijkstra
   starts them at that distance, so outline arcs belong to coarse nodes on the outline.
   Labels are propagated along the Dijkstra predecessor forest, so ties cannot split a
   cluster.
4. Coarse graph: a coarse node sits at its seed's position (so boundary seeds stay on
   the obstacle outline and walls); two coarse nodes are joined iff their clusters
   share a fine edge. ``boundary`` marks clusters that contain a fine boundary node.

Guarantees of "aware": (a) every cluster induces a connected fine subgraph (it contains
its seed's shortest-path tree); (b) coarse edges join only clusters that touch through a
mesh edge, so coarse adjacency never jumps across a hole or between components (the
straight segment between two adjacent seeds can still clip the hole when the outline is
very coarse), and the coarse graph has exactly as many connected components as the fine
graph (each component gets at least one seed, so Nc >= the number of components);
(c) coarse node density follows the fine density (seed spacing is r * h_i); (d) boundary
nodes are visited first, so about a fraction 1 / r ~ sqrt(ratio) of the outline is kept
as seeds, more than the fraction ratio kept in the interior, and every boundary node
reachable along the boundary from a boundary seed lies in a cluster whose coarse node is
a boundary seed; (e) deterministic for a fixed ``seed``. Coarse edges are unique, in both directions,
without self loops.

Baselines (geometry only, ignore topology): "random" keeps a seeded uniform subset of K
nodes, assigns every node to its Euclidean-nearest kept node and joins kept nodes by a
Delaunay triangulation (edges may cross holes, clusters may be disconnected); "voxel"
clusters nodes by a uniform square grid whose cell size is bisected so about K cells are
non-empty, with coarse nodes at the cell centroids joined by Delaunay.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import sparse
from scipy.sparse import csgraph
from scipy import spatial

Array = jax.Array

METHODS = ("aware", "random", "voxel")

_SEARCH_TOL = 0.02     # relative tolerance on the number of coarse nodes
_MAX_SEARCH_STEPS = 40


class CoarseLevel(NamedTuple):
  """One coarsening step from a fine graph with Nf nodes to a coarse one with Nc.

  Attributes:
    pos: (Nc, 2) float32 coarse node coordinates.
    senders: (Ec,) int32 coarse edges, both directions, unique, no self loops.
    receivers: (Ec,) int32.
    assign: (Nf,) int32 in [0, Nc): the coarse node (cluster) of each fine node.
    boundary: (Nc,) bool: the cluster contains at least one fine boundary node.
  """
  pos: np.ndarray
  senders: np.ndarray
  receivers: np.ndarray
  assign: np.ndarray
  boundary: np.ndarray


# ----------------------------------------------------------------------------- checks


def _check_graph(pos, senders, receivers, boundary=None):
  """Validated copies: pos (N, 2) float64, senders/receivers int64, boundary bool."""
  pos = np.asarray(pos)
  if pos.ndim != 2 or pos.shape[1] != 2:
    raise ValueError(f"pos must have shape (N, 2); got {pos.shape}")
  if not np.all(np.isfinite(pos)):
    raise ValueError("pos must be finite; got NaN or Inf coordinates")
  n = pos.shape[0]
  senders, receivers = np.asarray(senders), np.asarray(receivers)
  if senders.ndim != 1 or senders.shape != receivers.shape:
    raise ValueError("senders and receivers must be 1-D of equal length; got shapes "
                     f"{senders.shape} and {receivers.shape}")
  if senders.size and not (np.issubdtype(senders.dtype, np.integer)
                           and np.issubdtype(receivers.dtype, np.integer)):
    raise ValueError("senders and receivers must be integer arrays; got dtypes "
                     f"{senders.dtype} and {receivers.dtype}")
  senders, receivers = senders.astype(np.int64), receivers.astype(np.int64)
  if senders.size:
    lo = min(senders.min(), receivers.min())
    hi = max(senders.max(), receivers.max())
    if lo < 0 or hi >= n:
      raise ValueError(f"edge indices must lie in [0, {n}) for {n} nodes; got range "
                       f"[{lo}, {hi}]")
  if boundary is None:
    boundary = np.zeros(n, bool)
  else:
    boundary = np.asarray(boundary)
    if boundary.shape != (n,):
      raise ValueError(f"boundary must have shape ({n},); got {boundary.shape}")
    boundary = boundary.astype(bool)
  return pos.astype(np.float64), senders, receivers, boundary


def _target_size(ratio: float, n: int) -> int:
  ratio = float(ratio)
  if not (0.0 < ratio < 1.0):
    raise ValueError(f"ratio must lie in the open interval (0, 1); got {ratio}")
  k = int(round(ratio * n))
  if k < 3:
    raise ValueError(f"ratio * N = {ratio} * {n} requests {k} coarse nodes; at least 3 "
                     "are needed (raise ratio or use a larger graph)")
  return k


# ----------------------------------------------------------------------------- graph helpers


def _undirected_edges(senders, receivers):
  """Unique undirected edges (i < j), self loops dropped: two (M,) int64 arrays."""
  a, b = np.minimum(senders, receivers), np.maximum(senders, receivers)
  keep = a != b
  if not keep.any():
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  a, b = a[keep], b[keep]
  base = int(b.max()) + 1
  key = np.unique(a * base + b)             # sorted by (a, b)
  return key // base, key % base


def _both_directions(a, b):
  """Unique directed edges in both directions, no self loops, int32, sorted."""
  a, b = _undirected_edges(np.asarray(a, np.int64), np.asarray(b, np.int64))
  s, r = np.concatenate([a, b]), np.concatenate([b, a])
  order = np.lexsort((r, s))
  return s[order].astype(np.int32), r[order].astype(np.int32)


def connected_components(num_nodes: int, senders, receivers) -> np.ndarray:
  """Component label in [0, C) of every node of the undirected graph: (num_nodes,) int32.

  Args:
    num_nodes: N.
    senders, receivers: (E,) edges, read as undirected.

  Returns:
    (N,) int32 labels; i and j share a label iff a path joins them.

  Example:
    >>> int(connected_components(n, s, r).max()) + 1   # the number of components
  """
  senders = np.asarray(senders, np.int64)
  receivers = np.asarray(receivers, np.int64)
  adj = sparse.coo_matrix((np.ones(senders.size, np.int8), (senders, receivers)),
                          shape=(num_nodes, num_nodes)).tocsr()
  _, labels = csgraph.connected_components(adj, directed=False)
  return labels.astype(np.int32)


def local_spacing(pos, senders, receivers) -> np.ndarray:
  """h_i: mean length of the (undirected, unique) edges incident to node i. (N,) float64.

  h_i = sum_{j ~ i} |x_i - x_j| / deg(i). Edges are read as undirected (either or both
  directions may be given). An isolated node gets the Euclidean distance to its
  nearest other node (1.0 for a single node).

  Args:
    pos: (N, 2) node coordinates.
    senders, receivers: (E,) edges.

  Returns:
    (N,) float64 spacings.

  Example:
    >>> h = local_spacing(pos, senders, receivers)   # small where the mesh is dense
  """
  pos, senders, receivers, _ = _check_graph(pos, senders, receivers)
  n = pos.shape[0]
  a, b = _undirected_edges(senders, receivers)
  length = np.linalg.norm(pos[a] - pos[b], axis=1)
  total = np.bincount(a, length, n) + np.bincount(b, length, n)
  degree = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
  h = total / np.maximum(degree, 1)
  isolated = degree == 0
  if isolated.any():
    if n > 1:
      dist, _ = spatial.cKDTree(pos).query(pos[isolated], k=2)
      h[isolated] = dist[:, 1]
    else:
      h[isolated] = 1.0
  return h


def _delaunay_edges(points):
  """Both-direction unique edges of the Delaunay triangulation of (M, 2) points."""
  try:
    tri = spatial.Delaunay(points)
  except spatial.QhullError as e:  # collinear or too few points
    raise ValueError(f"Delaunay triangulation of {len(points)} coarse points failed "
                     f"(collinear or degenerate points?): {e}") from None
  simp = tri.simplices
  a = np.concatenate([simp[:, 0], simp[:, 1], simp[:, 2]])
  b = np.concatenate([simp[:, 1], simp[:, 2], simp[:, 0]])
  return _both_directions(a, b)


def _cluster_boundary(assign, boundary, num_coarse):
  return np.bincount(assign, boundary.astype(np.int64), num_coarse) > 0


# ----------------------------------------------------------------------------- aware


def _sweep_order(n, a, b, boundary, rng):
  """Boundary nodes first (BFS along the boundary subgraph), then by hop distance."""
  tiebreak = rng.permutation(n)               # tiebreak[i]: random rank of node i
  order_parts = []
  bidx = np.flatnonzero(boundary)
  if bidx.size:
    # Breadth-first order inside each component of the boundary-induced subgraph,
    # started at its node of lowest random rank: the outline is walked, not sampled.
    local = -np.ones(n, np.int64)
    local[bidx] = np.arange(bidx.size)
    inside = boundary[a] & boundary[b]
    sub = sparse.coo_matrix((np.ones(inside.sum()), (local[a[inside]], local[b[inside]])),
                            shape=(bidx.size, bidx.size)).tocsr()
    ncomp, lab = csgraph.connected_components(sub, directed=False)
    starts = np.full(ncomp, -1)
    for c_rank in np.argsort(tiebreak[bidx]):   # lowest rank first
      if starts[lab[c_rank]] < 0:
        starts[lab[c_rank]] = c_rank
    for c in np.argsort(tiebreak[bidx[starts]]):
      bfs = csgraph.breadth_first_order(sub, starts[c], directed=False,
                                        return_predecessors=False)
      order_parts.append(bidx[bfs])
    # Interior: hop distance from the boundary (an advancing front), random ties.
    adj = sparse.coo_matrix((np.ones(a.size), (a, b)), shape=(n, n)).tocsr()
    hops = csgraph.dijkstra(adj, directed=False, unweighted=True, indices=bidx,
                            min_only=True)
    hops = np.where(np.isfinite(hops), hops, np.inf)
    interior = np.flatnonzero(~boundary)
    order_parts.append(interior[np.lexsort((tiebreak[interior], hops[interior]))])
  else:
    order_parts.append(np.argsort(tiebreak))
  return np.concatenate(order_parts)


def _poisson_disk(tree, pos, h, comp, order, rank, r):
  """Greedy sweep: i is kept unless an earlier-kept node of its component is < r h_i away."""
  balls = tree.query_ball_point(pos, r * h, return_sorted=False)
  kept = np.zeros(pos.shape[0], bool)
  for i in order:
    nbrs = balls[i]
    if len(nbrs) > 1:
      nbrs = np.asarray(nbrs)
      nbrs = nbrs[(comp[nbrs] == comp[i]) & (rank[nbrs] < rank[i])]
      if kept[nbrs].any():
        continue
    kept[i] = True
  return kept


def _select_seeds(pos, h, comp, order, k):
  """Search the radius factor r so the sweep keeps about k seeds; (seed mask, r)."""
  n = pos.shape[0]
  tree = spatial.cKDTree(pos)
  rank = np.empty(n, np.int64)
  rank[order] = np.arange(n)
  r_lo, r_hi = 0.0, np.inf    # count(r_lo) > k > count(r_hi)
  r = 1.0 / np.sqrt(k / n)    # 2-D packing: k / n ~ 1 / r^2
  best = None
  for _ in range(_MAX_SEARCH_STEPS):
    kept = _poisson_disk(tree, pos, h, comp, order, rank, r)
    count = int(kept.sum())
    if best is None or abs(count - k) < abs(best[0].sum() - k):
      best = (kept, r)
    if abs(count - k) <= _SEARCH_TOL * k:
      break
    if count > k:
      r_lo = max(r_lo, r)
    else:
      r_hi = min(r_hi, r)
    step = r * np.sqrt(count / k)          # secant in log-log under count ~ r^-2
    if not r_lo < step < r_hi:
      step = 2.0 * r_lo if np.isinf(r_hi) else np.sqrt(max(r_lo, 1e-3 * r_hi) * r_hi)
    if step == r:
      break
    r = step
  return best


def _propagate_labels(dist, pred, label):
  """Give every unlabelled reached node its predecessor's label, in order of distance.

  Each node then shares its label with its parent in the shortest-path forest, so each
  label class contains the forest paths back to its roots (it is connected).
  """
  for i in np.argsort(dist, kind="stable"):
    if label[i] < 0 and np.isfinite(dist[i]) and pred[i] >= 0:
      label[i] = label[pred[i]]
  return label


def _geodesic_assign(n, a, b, pos, h, seeds, boundary):
  """Nearest seed along mesh edges in the metric |x_i - x_j| / mean(h_i, h_j).

  Two phases. (1) Boundary nodes join their nearest *boundary* seed along the boundary
  subgraph (edges with both ends on the boundary), so outline arcs go to the coarse
  nodes that sit on the outline. (2) A Dijkstra over the whole mesh from a virtual
  source joined to every seed (length 0) and to every phase-1 node (its phase-1
  distance) labels the rest; this is a multi-source Dijkstra whose boundary nodes
  start at their phase-1 distances. Every cluster stays connected.
  """
  eps = 1e-9                                  # explicit zeros would drop an edge
  length = np.maximum(np.linalg.norm(pos[a] - pos[b], axis=1) / (0.5 * (h[a] + h[b])), eps)
  label = -np.ones(n, np.int64)
  label[seeds] = np.arange(seeds.size)
  start = np.full(n, np.inf)
  start[seeds] = 0.0
  bseeds = seeds[boundary[seeds]]
  on_boundary = boundary[a] & boundary[b]
  if bseeds.size and on_boundary.any():
    adj = sparse.coo_matrix((length[on_boundary], (a[on_boundary], b[on_boundary])),
                            shape=(n, n)).tocsr()
    dist, pred, _ = csgraph.dijkstra(adj, directed=False, indices=bseeds, min_only=True,
                                     return_predecessors=True)
    label = _propagate_labels(dist, pred, label)
    start = np.where(np.isfinite(dist) & boundary, dist, start)
  roots = np.flatnonzero(np.isfinite(start))
  src = np.full(roots.size, n)
  adj = sparse.coo_matrix(
      (np.concatenate([length, length, start[roots] + eps]),
       (np.concatenate([a, b, src]), np.concatenate([b, a, roots]))),
      shape=(n + 1, n + 1)).tocsr()
  dist, pred = csgraph.dijkstra(adj, directed=True, indices=n, return_predecessors=True)
  label = _propagate_labels(dist[:n], pred[:n], label)
  if (label < 0).any():
    raise AssertionError(f"{int((label < 0).sum())} nodes are not reachable from a seed")
  return label


def _coarsen_aware(pos, senders, receivers, boundary, k, seed):
  n = pos.shape[0]
  a, b = _undirected_edges(senders, receivers)
  h = local_spacing(pos, a, b)
  comp = connected_components(n, a, b)
  order = _sweep_order(n, a, b, boundary, np.random.default_rng(seed))
  kept, _ = _select_seeds(pos, h, comp, order, k)
  seeds = order[kept[order]]               # coarse nodes numbered in sweep order
  assign = _geodesic_assign(n, a, b, pos, h, seeds, boundary)
  cs, cr = _both_directions(assign[a], assign[b])
  return CoarseLevel(pos=pos[seeds].astype(np.float32), senders=cs, receivers=cr,
                     assign=assign.astype(np.int32),
                     boundary=_cluster_boundary(assign, boundary, seeds.size))


# ----------------------------------------------------------------------------- baselines


def _coarsen_random(pos, boundary, k, seed):
  rng = np.random.default_rng(seed)
  chosen = np.sort(rng.choice(pos.shape[0], size=k, replace=False))
  _, assign = spatial.cKDTree(pos[chosen]).query(pos)
  cs, cr = _delaunay_edges(pos[chosen])
  return CoarseLevel(pos=pos[chosen].astype(np.float32), senders=cs, receivers=cr,
                     assign=assign.astype(np.int32),
                     boundary=_cluster_boundary(assign, boundary, k))


def _voxel_cells(pos, cell):
  keys = np.floor((pos - pos.min(0)) / cell).astype(np.int64)
  _, inverse = np.unique(keys, axis=0, return_inverse=True)
  return inverse.reshape(-1)


def _coarsen_voxel(pos, boundary, k):
  extent = float(np.max(pos.max(0) - pos.min(0)))
  if extent <= 0:
    raise ValueError("voxel coarsening needs points that are not all identical")
  lo, hi = np.log(extent * 1e-6), np.log(extent * 2.0)   # count(lo) >= k >= count(hi)
  best = None
  for _ in range(60):
    cell = np.exp(0.5 * (lo + hi))
    assign = _voxel_cells(pos, cell)
    count = int(assign.max()) + 1
    if best is None or abs(count - k) < abs(best[1] - k):
      best = (assign, count)
    if abs(count - k) <= _SEARCH_TOL * k:
      break
    if count > k:
      lo = np.log(cell)
    else:
      hi = np.log(cell)
  assign, count = best
  members = np.bincount(assign, minlength=count)[:, None]
  centroid = np.stack([np.bincount(assign, pos[:, d], count) for d in range(2)], 1)
  centroid = centroid / members
  cs, cr = _delaunay_edges(centroid)
  return CoarseLevel(pos=centroid.astype(np.float32), senders=cs, receivers=cr,
                     assign=assign.astype(np.int32),
                     boundary=_cluster_boundary(assign, boundary, count))


# ----------------------------------------------------------------------------- public


def coarsen(pos, senders, receivers, *, ratio: float, method: str = "aware",
            boundary: np.ndarray | None = None, seed: int) -> CoarseLevel:
  """One coarsening step of a 2-D mesh graph to about K = round(ratio * N) nodes.

  "aware" (the module docstring's steps 1-4): seeds by a density-adaptive sweep that
  keeps i unless a kept node of its component lies within r h_i (r searched so about
  K are kept), clusters by geodesic distance in the metric
  w_ij = |x_i - x_j| / ((h_i + h_j) / 2), coarse edges between clusters that share a
  fine edge.

  Args:
    pos: (N, 2) node coordinates.
    senders, receivers: (E,) integer edges (read as undirected; both directions given
      is the convention).
    ratio: target Nc / N in (0, 1).
    method: "aware" (the CGFM scheme, see the module docstring), "random" or "voxel".
    boundary: optional (N,) bool mask of boundary nodes (obstacle outline, walls).
    seed: the seed of every random choice (sweep tie-breaks, random subsets).

  Returns:
    A ``CoarseLevel`` with numpy arrays. "aware" and "random" hit round(ratio * N)
    within 2 % (random: exactly), "voxel" within 2 % where a cell size achieves it.

  Example:
    >>> level = coarsen(pos, senders, receivers, ratio=0.3, boundary=wall, seed=0)
    >>> xc = pool(x, level.assign, level.pos.shape[0])
  """
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}; got {method!r}")
  pos, senders, receivers, boundary = _check_graph(pos, senders, receivers, boundary)
  k = _target_size(ratio, pos.shape[0])
  if method == "aware":
    return _coarsen_aware(pos, senders, receivers, boundary, k, seed)
  if method == "random":
    return _coarsen_random(pos, boundary, k, seed)
  return _coarsen_voxel(pos, boundary, k)


def build_hierarchy(pos, senders, receivers, *, ratios: Sequence[float],
                    method: str = "aware", boundary=None,
                    seed: int) -> tuple[CoarseLevel, ...]:
  """Repeated ``coarsen``: level l + 1 coarsens level l with ratios[l] = Nc / Nf.

  Level 0 coarsens the input mesh; each later level uses the previous level's pos,
  edges and boundary, and the seed ``seed + l``.

  Args:
    pos, senders, receivers, boundary: the fine mesh graph, as in ``coarsen``.
    ratios: Nc / Nf of each step, each in (0, 1).
    method: "aware", "random" or "voxel", for every step.
    seed: the seed of step 0 (step l uses ``seed + l``).

  Returns:
    The ``CoarseLevel`` of each step, finest first (``graphs.build`` takes them).

  Example:
    >>> levels = build_hierarchy(pos, s, r, ratios=(0.3, 0.3), boundary=wall, seed=0)
    >>> [len(level.pos) for level in levels]   # about [0.3 N, 0.09 N]
  """
  ratios = tuple(ratios)
  if not ratios:
    raise ValueError("ratios must name at least one coarsening step; got ()")
  levels = []
  for l, ratio in enumerate(ratios):
    level = coarsen(pos, senders, receivers, ratio=ratio, method=method,
                    boundary=boundary, seed=seed + l)
    levels.append(level)
    pos, senders, receivers, boundary = (level.pos, level.senders, level.receivers,
                                         level.boundary)
  return tuple(levels)


def _check_assign(fn: str, assign, num_fine, num_coarse) -> None:
  """Shape always; id range only for concrete values (skipped under jit)."""
  shape = jnp.shape(assign)
  if len(shape) != 1 or (num_fine is not None and shape[0] != num_fine):
    raise ValueError(f"{fn}: assign has shape {shape}; expected ({num_fine or 'Nf'},), one "
                     "cluster id per fine node")
  if isinstance(assign, jax.core.Tracer) or isinstance(num_coarse, jax.core.Tracer):
    return
  a = np.asarray(assign)
  bad = np.nonzero((a < 0) | (a >= num_coarse))[0]
  if len(bad):
    raise ValueError(f"{fn}: assign[{int(bad[0])}]={int(a[bad[0]])} is out of range; expected "
                     f"cluster ids in [0, {num_coarse})")


def pool(x: Array, assign: Array, num_coarse: int) -> Array:
  """Cluster mean: xc[c] = mean of x[i] over the fine nodes i with assign[i] = c.

  x (Nf, ...) -> (Nc, ...); empty clusters give 0. ``num_coarse`` must be static
  under jit. vmap over a batch axis of x with ``in_axes=(0, None, None)``.

  Args:
    x: (Nf, ...) fine values (integers are averaged as float32).
    assign: (Nf,) the cluster of each fine node (``CoarseLevel.assign``).
    num_coarse: Nc.

  Returns:
    (Nc, ...) cluster means.

  Example:
    >>> xc = pool(x, level.assign, len(level.pos))
  """
  x = jnp.asarray(x)
  _check_assign("pool", assign, x.shape[0], num_coarse)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.float32)
  total = jax.ops.segment_sum(x, assign, num_segments=num_coarse)
  count = jax.ops.segment_sum(jnp.ones(x.shape[:1], x.dtype), assign,
                              num_segments=num_coarse)
  count = jnp.maximum(count, 1).reshape((num_coarse,) + (1,) * (x.ndim - 1))
  return total / count


def unpool(xc: Array, assign: Array) -> Array:
  """Broadcast each coarse value back to its cluster: xc (Nc, ...) -> xc[assign] (Nf, ...).

  Args:
    xc: (Nc, ...) coarse values.
    assign: (Nf,) the cluster of each fine node.

  Returns:
    (Nf, ...) with x_i = xc[assign[i]]; unpool(pool(x)) is the piecewise-constant
    projection of x onto the clusters.

  Example:
    >>> x_smooth = unpool(pool(x, level.assign, len(level.pos)), level.assign)
  """
  xc = jnp.asarray(xc)
  _check_assign("unpool", assign, None, xc.shape[0])
  return jnp.take(xc, assign, axis=0)
