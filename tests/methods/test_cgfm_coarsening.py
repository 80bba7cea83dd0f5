"""Tests of the CGFM topology- and geometry-aware coarsening and its baselines.

The meshes are built here: a channel [-2, 8] x [-2, 2] with a unit-diameter circular
hole at the origin, points rejection-sampled denser near the hole and in its wake,
triangulated by Delaunay with the triangles inside the hole removed.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import spatial

from methods.cgfm import coarsening as cg

RADIUS = 0.5


class Mesh:
  def __init__(self, pos, senders, receivers, boundary, obstacle):
    self.pos, self.senders, self.receivers = pos, senders, receivers
    self.boundary, self.obstacle = boundary, obstacle

  @property
  def graph(self):
    return self.pos, self.senders, self.receivers


def _edges_of_triangles(simplices):
  a = np.concatenate([simplices[:, 0], simplices[:, 1], simplices[:, 2]])
  b = np.concatenate([simplices[:, 1], simplices[:, 2], simplices[:, 0]])
  e = np.unique(np.stack([np.minimum(a, b), np.maximum(a, b)], 1), axis=0)
  return (np.concatenate([e[:, 0], e[:, 1]]).astype(np.int32),
          np.concatenate([e[:, 1], e[:, 0]]).astype(np.int32))


def channel_mesh(num_interior: int, seed: int = 0) -> Mesh:
  rng = np.random.default_rng(seed)

  def density(p):
    gap = np.linalg.norm(p, axis=1) - RADIUS
    wake = (p[:, 0] > 0) * np.exp(-np.maximum(p[:, 0], 0) / 3.0 - p[:, 1] ** 2 / 0.5)
    return 0.03 + np.exp(-gap / 0.4) + 0.6 * wake

  chunks, total = [], 0
  while total < num_interior:
    p = rng.uniform([-1.97, -1.97], [7.97, 1.97], size=(4 * num_interior, 2))
    p = p[np.linalg.norm(p, axis=1) > 1.08 * RADIUS]
    p = p[rng.uniform(size=len(p)) < density(p) / 1.6]
    chunks.append(p)
    total += len(p)
  interior = np.concatenate(chunks)[:num_interior]
  near = np.sum(np.linalg.norm(interior, axis=1) < 1.0)
  h = np.sqrt(np.pi * (1 - RADIUS ** 2) / near)          # spacing next to the hole
  n_circle = max(16, int(np.pi / h))
  theta = np.linspace(0, 2 * np.pi, n_circle, endpoint=False)
  circle = RADIUS * np.stack([np.cos(theta), np.sin(theta)], 1)
  n_wall = max(10, int(10 / (4 * h)))
  xs = np.linspace(-2, 8, n_wall)
  ys = np.linspace(-2, 2, max(4, n_wall * 4 // 10))[1:-1]
  walls = np.concatenate([np.stack([xs, -2 + 0 * xs], 1), np.stack([xs, 2 + 0 * xs], 1),
                          np.stack([-2 + 0 * ys, ys], 1), np.stack([8 + 0 * ys, ys], 1)])
  pos = np.concatenate([circle, walls, interior])
  obstacle = np.zeros(len(pos), bool)
  obstacle[:n_circle] = True
  boundary = np.zeros(len(pos), bool)
  boundary[:n_circle + len(walls)] = True
  simplices = spatial.Delaunay(pos).simplices
  simplices = simplices[np.linalg.norm(pos[simplices].mean(1), axis=1) > RADIUS]
  senders, receivers = _edges_of_triangles(simplices)
  return Mesh(pos.astype(np.float32), senders, receivers, boundary, obstacle)


@pytest.fixture(scope="module")
def mesh():
  return channel_mesh(700)        # ~790 nodes


@pytest.fixture(scope="module")
def big_mesh():
  return channel_mesh(2500)       # ~2600 nodes, for the density comparison


@pytest.fixture(scope="module")
def levels(mesh):
  return {m: cg.coarsen(*mesh.graph, ratio=0.3, method=m, boundary=mesh.boundary, seed=0)
          for m in cg.METHODS}


def hole_crossings(level, depth=0.8 * RADIUS):
  """Coarse undirected edges whose segment comes closer than `depth` to the hole centre."""
  p = level.pos.astype(np.float64)
  a, b = p[level.senders], p[level.receivers]
  d = b - a
  t = np.clip(-(a * d).sum(1) / np.maximum((d * d).sum(1), 1e-12), 0.0, 1.0)
  closest = np.linalg.norm(a + t[:, None] * d, axis=1)
  return int(np.sum(closest < depth)) // 2


def num_components(n, senders, receivers):
  return int(cg.connected_components(n, senders, receivers).max()) + 1


def clusters_connected(mesh, assign):
  """Every cluster induces a connected fine subgraph: components of intra edges == Nc."""
  inside = assign[mesh.senders] == assign[mesh.receivers]
  n_cluster = int(assign.max()) + 1
  return num_components(len(mesh.pos), mesh.senders[inside],
                        mesh.receivers[inside]) == n_cluster


def count_in(points, box):
  x0, x1, y0, y1 = box
  return int(np.sum((points[:, 0] > x0) & (points[:, 0] < x1)
                    & (points[:, 1] > y0) & (points[:, 1] < y1)))


# ----------------------------------------------------------------------------- contract


@pytest.mark.parametrize("method", cg.METHODS)
def test_level_contract(mesh, levels, method):
  level = levels[method]
  n, nc = len(mesh.pos), len(level.pos)
  assert level.pos.shape == (nc, 2) and level.pos.dtype == np.float32
  assert level.senders.dtype == np.int32 and level.receivers.dtype == np.int32
  assert level.assign.shape == (n,) and level.assign.dtype == np.int32
  assert level.boundary.shape == (nc,) and level.boundary.dtype == bool
  assert level.assign.min() == 0 and level.assign.max() == nc - 1
  assert np.all(np.bincount(level.assign, minlength=nc) > 0)     # no empty cluster
  assert abs(nc - 0.3 * n) <= 0.1 * 0.3 * n
  s, r = level.senders, level.receivers
  assert np.all(s != r) and s.min() >= 0 and max(s.max(), r.max()) < nc
  pairs = set(zip(s.tolist(), r.tolist()))
  assert len(pairs) == len(s)                                      # unique
  assert pairs == set(zip(r.tolist(), s.tolist()))                 # both directions
  # The coarse boundary flag marks exactly the clusters holding fine boundary nodes.
  np.testing.assert_array_equal(
      level.boundary, np.bincount(level.assign, mesh.boundary.astype(int), nc) > 0)


# ----------------------------------------------------------------------------- aware


def test_aware_clusters_are_connected_and_graph_is_connected(mesh, levels):
  level = levels["aware"]
  assert clusters_connected(mesh, level.assign)
  assert num_components(len(level.pos), level.senders, level.receivers) == 1
  # Coarse edges join exactly the cluster pairs that share a fine edge.
  a = level.assign[mesh.senders]
  b = level.assign[mesh.receivers]
  touching = set(zip(a[a != b].tolist(), b[a != b].tolist()))
  assert touching == set(zip(level.senders.tolist(), level.receivers.tolist()))


def test_aware_seeds_are_fine_nodes_in_their_own_cluster(mesh, levels):
  level = levels["aware"]
  tree = spatial.cKDTree(mesh.pos)
  dist, seed_idx = tree.query(level.pos)
  assert np.all(dist == 0)
  np.testing.assert_array_equal(level.assign[seed_idx], np.arange(len(level.pos)))


def test_aware_edges_do_not_cross_the_hole_unlike_random(mesh, levels):
  aware, random_ = hole_crossings(levels["aware"]), hole_crossings(levels["random"])
  assert aware == 0
  assert random_ >= 2, random_
  # Random and voxel clusters may straddle the hole or be disconnected; aware never.
  assert not all(clusters_connected(mesh, cg.coarsen(
      *mesh.graph, ratio=0.3, method="random", seed=s).assign) for s in range(3))


def test_aware_keeps_the_obstacle_outline(mesh, levels):
  level = levels["aware"]
  obstacle = np.flatnonzero(mesh.obstacle)
  # Every outline node belongs to a cluster whose coarse node sits on the outline.
  centre_dist = np.linalg.norm(level.pos[level.assign[obstacle]], axis=1)
  np.testing.assert_allclose(centre_dist, RADIUS, atol=1e-5)
  assert np.all(level.boundary[level.assign[obstacle]])
  # A high fraction of outline nodes are kept as seeds (1-D subsampling ~ 1 / r),
  # well above the 2-D ratio and above what the baselines keep on the outline.
  on_outline = np.isclose(np.linalg.norm(level.pos, axis=1), RADIUS, atol=1e-5)
  kept_fraction = on_outline.sum() / len(obstacle)
  assert kept_fraction >= 0.4, kept_fraction
  for method in ("random", "voxel"):
    other = np.isclose(np.linalg.norm(levels[method].pos, axis=1), RADIUS, atol=1e-5)
    assert other.sum() < on_outline.sum(), method


def test_aware_density_follows_the_mesh_unlike_voxel(big_mesh):
  dense, sparse_ = (0.5, 2.5, -0.5, 0.5), (5.5, 7.5, 0.5, 1.5)     # equal areas
  fine = count_in(big_mesh.pos, dense) / count_in(big_mesh.pos, sparse_)
  assert fine > 4                                                  # the mesh is graded
  ratio_of = {}
  for method in ("aware", "voxel"):
    level = cg.coarsen(*big_mesh.graph, ratio=0.3, method=method,
                       boundary=big_mesh.boundary, seed=0)
    coarse = count_in(level.pos, dense) / max(count_in(level.pos, sparse_), 1)
    ratio_of[method] = coarse / fine
  assert 0.5 < ratio_of["aware"] < 2.0, ratio_of
  assert ratio_of["voxel"] < 0.5, ratio_of


def test_aware_keeps_components_of_a_disconnected_mesh(mesh):
  n = len(mesh.pos)
  pos = np.concatenate([mesh.pos, mesh.pos + np.float32([0.0, 4.5])])
  senders = np.concatenate([mesh.senders, mesh.senders + n])
  receivers = np.concatenate([mesh.receivers, mesh.receivers + n])
  boundary = np.concatenate([mesh.boundary, mesh.boundary])
  level = cg.coarsen(pos, senders, receivers, ratio=0.3, boundary=boundary, seed=0)
  assert num_components(len(level.pos), level.senders, level.receivers) == 2
  fine_comp = cg.connected_components(2 * n, senders, receivers)
  coarse_comp = cg.connected_components(len(level.pos), level.senders, level.receivers)
  np.testing.assert_array_equal(coarse_comp[level.assign] == coarse_comp[level.assign[0]],
                                fine_comp == fine_comp[0])


def test_aware_without_boundary_mask(mesh):
  level = cg.coarsen(*mesh.graph, ratio=0.3, seed=0)
  assert abs(len(level.pos) - 0.3 * len(mesh.pos)) <= 0.1 * 0.3 * len(mesh.pos)
  assert clusters_connected(mesh, level.assign)
  assert not level.boundary.any()


# ----------------------------------------------------------------------------- hierarchy


@pytest.mark.parametrize("method", cg.METHODS)
def test_build_hierarchy(mesh, method):
  hier = cg.build_hierarchy(*mesh.graph, ratios=(0.3, 0.3), method=method,
                            boundary=mesh.boundary, seed=0)
  assert len(hier) == 2
  sizes = [len(mesh.pos)] + [len(level.pos) for level in hier]
  assert sizes[0] > sizes[1] > sizes[2]
  for n_fine, level in zip(sizes[:-1], hier):
    assert level.assign.shape == (n_fine,)
    assert 0 <= level.assign.min() and level.assign.max() < len(level.pos)
    assert abs(len(level.pos) - 0.3 * n_fine) <= 0.1 * 0.3 * n_fine
    if method == "aware":
      assert num_components(len(level.pos), level.senders, level.receivers) == 1
  if method == "aware":
    assert hier[1].boundary.any()


# ----------------------------------------------------------------------------- pool


def test_pool_unpool(levels):
  level = levels["aware"]
  assign, nc = jnp.asarray(level.assign), len(level.pos)
  nf = assign.shape[0]
  x = jax.random.normal(jax.random.PRNGKey(0), (nf, 3, 2))
  xc = cg.pool(x, assign, nc)
  assert xc.shape == (nc, 3, 2) and xc.dtype == x.dtype
  # A mean, by brute force.
  a = np.asarray(level.assign)
  brute = np.stack([np.asarray(x)[a == c].mean(0) for c in range(nc)])
  np.testing.assert_allclose(np.asarray(xc), brute, rtol=1e-5, atol=1e-6)
  # Constants are kept; pool inverts unpool.
  np.testing.assert_allclose(np.asarray(cg.pool(jnp.full((nf,), 2.5), assign, nc)), 2.5,
                             rtol=1e-6)
  yc = jax.random.normal(jax.random.PRNGKey(1), (nc, 4))
  assert cg.unpool(yc, assign).shape == (nf, 4)
  np.testing.assert_allclose(np.asarray(cg.pool(cg.unpool(yc, assign), assign, nc)),
                             np.asarray(yc), rtol=1e-5, atol=1e-6)


def test_pool_jit_and_vmap(levels):
  level = levels["voxel"]
  assign, nc = jnp.asarray(level.assign), len(level.pos)
  xb = jax.random.normal(jax.random.PRNGKey(2), (5, assign.shape[0], 3))
  pooled = jax.jit(jax.vmap(functools.partial(cg.pool, num_coarse=nc),
                            in_axes=(0, None)))(xb, assign)
  assert pooled.shape == (5, nc, 3)
  np.testing.assert_allclose(np.asarray(pooled[3]), np.asarray(cg.pool(xb[3], assign, nc)),
                             rtol=1e-5, atol=1e-6)
  back = jax.jit(jax.vmap(cg.unpool, in_axes=(0, None)))(pooled, assign)
  assert back.shape == xb.shape
  grad = jax.grad(lambda x: cg.pool(x, assign, nc).sum())(xb[0])
  assert grad.shape == xb[0].shape


# ----------------------------------------------------------------------------- helpers


def test_local_spacing_and_components():
  # A 3 x 3 grid with spacing 0.5 plus an isolated node at distance 2 from a corner.
  xy = np.stack(np.meshgrid(np.arange(3), np.arange(3), indexing="ij"), -1).reshape(-1, 2)
  pos = np.concatenate([0.5 * xy, [[3.0, 0.0]]])
  idx = np.arange(9).reshape(3, 3)
  pairs = np.concatenate([np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1),
                          np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1)])
  s, r = pairs[:, 0], pairs[:, 1]               # one direction only is accepted
  h = cg.local_spacing(pos, s, r)
  np.testing.assert_allclose(h[:9], 0.5)
  np.testing.assert_allclose(h[9], 2.0)
  labels = cg.connected_components(10, np.concatenate([s, r]), np.concatenate([r, s]))
  assert len(set(labels[:9].tolist())) == 1 and labels[9] != labels[0]


# ----------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("method", ("aware", "random"))
def test_deterministic_for_a_seed(mesh, method):
  one = cg.coarsen(*mesh.graph, ratio=0.3, method=method, boundary=mesh.boundary, seed=3)
  two = cg.coarsen(*mesh.graph, ratio=0.3, method=method, boundary=mesh.boundary, seed=3)
  for x, y in zip(one, two):
    np.testing.assert_array_equal(x, y)
  other = cg.coarsen(*mesh.graph, ratio=0.3, method=method, boundary=mesh.boundary, seed=4)
  assert other.pos.shape != one.pos.shape or not np.array_equal(other.pos, one.pos)


# ----------------------------------------------------------------------------- errors


def test_errors(mesh):
  pos, s, r = mesh.graph
  with pytest.raises(ValueError, match="method must be one of"):
    cg.coarsen(pos, s, r, ratio=0.3, method="metis", seed=0)
  for bad in (0.0, 1.0, -0.2, 1.5):
    with pytest.raises(ValueError, match=r"ratio must lie in the open interval \(0, 1\)"):
      cg.coarsen(pos, s, r, ratio=bad, seed=0)
  with pytest.raises(ValueError, match="equal length"):
    cg.coarsen(pos, s, r[:-1], ratio=0.3, seed=0)
  with pytest.raises(ValueError, match=r"must lie in \[0, "):
    cg.coarsen(pos, s, np.where(r == 0, len(pos), r), ratio=0.3, seed=0)
  with pytest.raises(ValueError, match="at least 3"):
    cg.coarsen(pos[:10], s[(s < 10) & (r < 10)], r[(s < 10) & (r < 10)], ratio=0.2,
               seed=0)
  with pytest.raises(ValueError, match=r"pos must have shape \(N, 2\)"):
    cg.coarsen(np.zeros((10, 3)), s[:0], r[:0], ratio=0.5, seed=0)
  with pytest.raises(ValueError, match="boundary must have shape"):
    cg.coarsen(pos, s, r, ratio=0.3, boundary=mesh.boundary[:-1], seed=0)
  with pytest.raises(ValueError, match="ratios"):
    cg.build_hierarchy(pos, s, r, ratios=(), seed=0)
