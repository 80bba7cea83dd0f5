"""Conductance-based clustering of per-token susceptibility vectors.

Pipeline ("Spectroscopy of a language model", ICML 2026, clustering section):
  1. `standardize`: z-score every feature (component) over tokens;
  2. `knn_graph`: a symmetric k-nearest-neighbour similarity graph, edge weight
     (1 + cos(u, v)) / 2 between standardized vectors;
  3. `conductance_clustering`: recursive spectral sweep cuts. A cluster S (with the
     induced subgraph W_S) is split by the sweep cut of the Fiedler vector of its
     normalized Laplacian I - D^{-1/2} W_S D^{-1/2}: order the nodes by
     x = D^{-1/2} v_2 and take the prefix with the least conductance

         phi(A) = cut(A, S \\ A) / min(vol(A), vol(S \\ A)),   vol(A) = sum_{i in A} d_i,

     among prefixes leaving at least `min_size` nodes on both sides. A split is kept only
     if phi < `max_conductance`; recursion stops otherwise (or at `max_clusters`, in
     which case the cluster with the lowest-conductance cut is split first).

Host-side NumPy (the recursion has data-dependent shapes); pure functions of arrays.
`adjusted_rand_index` scores a clustering against labels.

Example:
    >>> w = np.kron(np.eye(2), np.ones((5, 5))) + 0.01   # two planted blocks
    >>> np.fill_diagonal(w, 0.0)
    >>> conductance_clustering(w, max_conductance=0.2, min_size=2)
    array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
"""

from __future__ import annotations

import contextlib
import heapq
from typing import NamedTuple

import numpy as np

from common import checks

try:  # Small eigenproblems run far faster on one BLAS thread on a busy machine.
  from threadpoolctl import threadpool_limits as _blas_limits
except ImportError:  # pragma: no cover
  _blas_limits = None


def _one_blas_thread():
  return _blas_limits(1) if _blas_limits is not None else contextlib.nullcontext()


def standardize(features: np.ndarray) -> np.ndarray:
  """Column z-scores of (N, F) features (a constant column becomes 0):

      z_ij = (x_ij - mean_i x_ij) / std_i x_ij

  Args:
    features: (N, F) one row per token.

  Returns:
    (N, F) float64 z-scores.

  Example:
    >>> standardize(np.array([[1.0, 5.0], [3.0, 5.0]]))
    array([[-1.,  0.],
           [ 1.,  0.]])
  """
  x = np.asarray(features, np.float64)
  if x.ndim != 2:
    raise ValueError(f"features must be (tokens, features), got shape {x.shape}")
  checks.check_finite("standardize: features", x)
  std = x.std(axis=0)
  return (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)


def knn_graph(features: np.ndarray, k: int = 10) -> np.ndarray:
  """(N, N) symmetric k-nearest-neighbour similarity graph:

      w_ij = (1 + cos(x_i, x_j)) / 2   if j is among i's k most similar nodes or i
                                       among j's; else 0 (zero diagonal)

  Args:
    features: (N, F) rows; k: neighbours per node, 1 <= k < N.

  Returns:
    (N, N) float64 weights.

  Example:
    >>> knn_graph(np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]]), k=1).round(2)
    array([[0.  , 1.  , 0.  ],
           [1.  , 0.  , 0.55],
           [0.  , 0.55, 0.  ]])
  """
  x = np.asarray(features, np.float64)
  n = x.shape[0]
  if not 1 <= k < n:
    raise ValueError(f"knn_graph needs 1 <= k < N={n}, got k={k}")
  checks.check_finite("knn_graph: features", x)
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  u = x / np.where(norms > 0, norms, 1.0)
  sim = (1.0 + u @ u.T) / 2.0
  np.fill_diagonal(sim, -np.inf)
  nearest = np.argpartition(-sim, k - 1, axis=1)[:, :k]
  w = np.zeros((n, n))
  rows = np.repeat(np.arange(n), k)
  w[rows, nearest.ravel()] = sim[rows, nearest.ravel()]
  return np.maximum(w, w.T)


def conductance(weights: np.ndarray, in_set: np.ndarray) -> float:
  """The conductance of the node set S:

      phi(S) = cut(S, complement) / min(vol S, vol complement),  vol A = sum_{i in A} d_i

  Args:
    weights: (N, N) symmetric nonnegative graph; in_set: (N,) bool membership of S.

  Returns:
    phi(S) (inf if a side has zero volume).

  Example:
    >>> conductance(np.array([[0., 1.], [1., 0.]]), np.array([True, False]))
    1.0
  """
  w = np.asarray(weights, np.float64)
  s = np.asarray(in_set, bool)
  degrees = w.sum(axis=1)
  cut = w[s][:, ~s].sum()
  denominator = min(degrees[s].sum(), degrees[~s].sum())
  return float(cut / denominator) if denominator > 0 else float("inf")


class SweepCut(NamedTuple):
  """in_set: (N,) bool side of the best cut; conductance: its conductance."""
  in_set: np.ndarray
  conductance: float


def sweep_cut(weights: np.ndarray, min_size: int = 1) -> SweepCut:
  """The least-conductance prefix of the Fiedler ordering (both sides >= min_size).

  Cut values of all prefixes come from one pass: with the nodes in sweep order,
  cut(S_k) = sum_{i <= k} (d_i - 2 sum_{j < i} w_ij).

  Args:
    weights: (N, N) symmetric nonnegative graph; min_size: nodes each side keeps.

  Returns:
    `SweepCut` (an empty set and inf when no admissible cut exists).

  Example:
    >>> w = np.kron(np.eye(2), np.ones((3, 3))) + 0.01
    >>> np.fill_diagonal(w, 0.0)
    >>> sweep_cut(w).in_set.astype(int)
    array([1, 1, 1, 0, 0, 0])
  """
  w = np.asarray(weights, np.float64)
  n = w.shape[0]
  if n < 2 * min_size:
    return SweepCut(np.zeros(n, bool), float("inf"))
  degrees = w.sum(axis=1)
  d = np.maximum(degrees, 1e-12)
  inv_sqrt = 1.0 / np.sqrt(d)
  normalized = inv_sqrt[:, None] * w * inv_sqrt[None, :]
  with _one_blas_thread():
    _, vectors = np.linalg.eigh(normalized)     # ascending: the Fiedler vector of
  fiedler = vectors[:, -2] * inv_sqrt           # I - N is N's second-largest
  order = np.argsort(fiedler, kind="stable")
  wp = w[np.ix_(order, order)]
  dp = degrees[order]
  cut = np.cumsum(dp - 2.0 * np.tril(wp, -1).sum(axis=1))
  vol = np.cumsum(dp)
  total = vol[-1]
  denominator = np.minimum(vol, total - vol)
  with np.errstate(divide="ignore", invalid="ignore"):
    phi = np.where(denominator > 0, cut / denominator, np.inf)
  sizes = np.arange(1, n + 1)
  phi[(sizes < min_size) | (n - sizes < min_size)] = np.inf
  best = int(np.argmin(phi))
  if not np.isfinite(phi[best]):
    return SweepCut(np.zeros(n, bool), float("inf"))
  in_set = np.zeros(n, bool)
  in_set[order[:best + 1]] = True
  return SweepCut(in_set, float(max(phi[best], 0.0)))


def conductance_clustering(weights: np.ndarray, max_conductance: float = 0.3,
                           min_size: int = 10, max_clusters: int | None = None) -> np.ndarray:
  """Recursive sweep-cut clustering; returns (N,) int labels 0..K-1.

  Args:
    weights: (N, N) symmetric nonnegative similarity graph with a zero diagonal.
    max_conductance: a cluster is split only by a cut of conductance below this.
    min_size: both sides of a split keep at least this many nodes.
    max_clusters: optional cap on the number of clusters (lowest-conductance cuts
      are made first).

  Returns:
    Labels numbered in order of each cluster's first node.

  Example:
    >>> w = np.kron(np.eye(2), np.ones((5, 5))) + 0.01   # two planted blocks
    >>> np.fill_diagonal(w, 0.0)
    >>> conductance_clustering(w, max_conductance=0.2, min_size=2)
    array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
  """
  w = np.asarray(weights, np.float64)
  n = w.shape[0]
  if w.shape != (n, n) or np.any(w < 0) or not np.allclose(w, w.T):
    raise ValueError(f"weights must be a symmetric nonnegative (N, N) matrix, got {w.shape}")
  if min_size < 1:
    raise ValueError(f"min_size must be >= 1, got {min_size}")
  heap: list = []
  done: list[np.ndarray] = []
  counter = 0

  def push(members: np.ndarray):
    nonlocal counter
    cut = sweep_cut(w[np.ix_(members, members)], min_size)
    if cut.conductance < max_conductance:
      heapq.heappush(heap, (cut.conductance, counter, members, cut.in_set))
      counter += 1
    else:
      done.append(members)

  push(np.arange(n))
  while heap:
    if max_clusters is not None and len(heap) + len(done) >= max_clusters:
      done.extend(item[2] for item in heap)
      break
    _, _, members, in_set = heapq.heappop(heap)
    push(members[in_set])
    push(members[~in_set])
  labels = np.empty(n, np.int64)
  for i, members in enumerate(sorted(done, key=lambda m: int(m.min()))):
    labels[members] = i
  return labels


def cluster_tokens(features: np.ndarray, k: int = 10, max_conductance: float = 0.3,
                   min_size: int = 10, max_clusters: int | None = None) -> np.ndarray:
  """standardize -> knn_graph -> conductance_clustering on (N, F) features.

      labels = conductance_clustering(knn_graph(standardize(features), k), ...)

  Args:
    features: (N, F), one row per token (e.g. `SusceptibilityResult.chi.T`).
    k, max_conductance, min_size, max_clusters: see `knn_graph` and
      `conductance_clustering`.

  Returns:
    (N,) int labels 0..K-1.

  Example:
    >>> rng = np.random.default_rng(0)
    >>> x = np.concatenate([rng.normal(size=(20, 3)) + 5, rng.normal(size=(20, 3)) - 5])
    >>> np.bincount(cluster_tokens(x, k=5, max_conductance=0.1, min_size=5))
    array([20, 20])
  """
  graph = knn_graph(standardize(features), k)
  return conductance_clustering(graph, max_conductance, min_size, max_clusters)


def adjusted_rand_index(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
  """Hubert & Arabie's ARI from the contingency table n_ij:

      (sum_ij C(n_ij,2) - E) / ((sum_i C(a_i,2) + sum_j C(b_j,2)) / 2 - E),
      E = sum_i C(a_i,2) sum_j C(b_j,2) / C(n,2).

  Args:
    labels_true, labels_pred: (N,) labelings (any hashable values).

  Returns:
    The ARI: 1 for identical partitions, about 0 for independent ones.

  Example:
    >>> adjusted_rand_index(np.array([0, 0, 1, 1]), np.array([5, 5, 7, 7]))
    1.0
  """
  a = np.asarray(labels_true)
  b = np.asarray(labels_pred)
  if a.shape != b.shape or a.ndim != 1:
    raise ValueError(f"label arrays must be 1-D and equal in shape, got {a.shape}, {b.shape}")
  _, ai = np.unique(a, return_inverse=True)
  _, bi = np.unique(b, return_inverse=True)
  table = np.zeros((ai.max() + 1, bi.max() + 1))
  np.add.at(table, (ai, bi), 1)
  comb = lambda x: x * (x - 1) / 2.0
  index = comb(table).sum()
  rows, cols = comb(table.sum(axis=1)).sum(), comb(table.sum(axis=0)).sum()
  expected = rows * cols / comb(float(len(a)))
  maximum = (rows + cols) / 2.0
  if maximum == expected:
    return 1.0
  return float((index - expected) / (maximum - expected))


class ClusterProfile(NamedTuple):
  """members: indices of the cluster's tokens, closest to its centre first;
  centre: (F,) its mean standardized feature vector."""
  members: np.ndarray
  centre: np.ndarray


def cluster_profiles(z: np.ndarray, labels: np.ndarray) -> list[ClusterProfile]:
  """For each cluster c = 0..K-1, its centre and members ranked by distance to it:

      centre_c = mean_{i in c} z_i,   members sorted by ||z_i - centre_c||

  The closest members are the cluster's most representative tokens, and the
  largest |centre_c| entry names the component that drives it.

  Args:
    z: (N, F) standardized features (`standardize`); labels: (N,) ints 0..K-1.

  Returns:
    K `ClusterProfile`s, in label order.

  Example:
    >>> z = np.array([[0.0], [1.0], [3.0], [10.0]])
    >>> [p.members.tolist() for p in cluster_profiles(z, np.array([0, 0, 0, 1]))]
    [[1, 0, 2], [3]]
  """
  profiles = []
  for c in range(int(labels.max()) + 1):
    members = np.flatnonzero(labels == c)
    centre = z[members].mean(axis=0)
    closest = members[np.argsort(np.linalg.norm(z[members] - centre, axis=1))]
    profiles.append(ClusterProfile(closest, centre))
  return profiles
