"""The irregular fluid mesh, grid-to-mesh sampling, the dataset and its npz format."""

import os

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.csgraph

from common.data import fluid_meshes as fm
from common.data import lbm


@pytest.fixture(scope="module")
def geometry():
  return lbm.make_geometry(80, 24, diameter=6.0)


@pytest.fixture(scope="module")
def mesh(geometry):
  return fm.make_mesh(geometry, 150, seed=0)


def test_mesh_is_a_valid_connected_graph(geometry, mesh):
  n = len(mesh.pos)
  assert 100 <= n <= 150 and mesh.pos.dtype == np.float32
  assert mesh.triangles.dtype == np.int32 and mesh.senders.dtype == np.int32
  edges = np.stack([mesh.senders, mesh.receivers], 1)
  assert np.all(edges[:, 0] != edges[:, 1])
  assert len(np.unique(edges, axis=0)) == len(edges)
  assert set(map(tuple, edges)) == set(map(tuple, edges[:, ::-1]))
  adj = scipy.sparse.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])),
                                shape=(n, n))
  assert scipy.sparse.csgraph.connected_components(adj)[0] == 1
  level = fm._level(geometry, mesh.pos.astype(np.float64))
  assert np.all(level >= 1 - 1e-4)                        # nothing inside the body
  on_body = mesh.node_type == fm.OBSTACLE
  np.testing.assert_allclose(level[on_body], 1.0, atol=1e-4)
  assert set(np.unique(mesh.node_type)) == {fm.NORMAL, fm.WALL, fm.OBSTACLE,
                                            fm.INLET, fm.OUTLET}
  centroid = mesh.pos[mesh.triangles].mean(1).astype(np.float64)
  assert np.all(fm._level(geometry, centroid) > 1)


def test_mesh_is_denser_near_the_obstacle_and_in_the_wake(geometry):
  m = fm.make_mesh(lbm.make_geometry(180, 44, diameter=10.0), 700, seed=1)
  x, y = m.pos[:, 0], m.pos[:, 1]
  r = np.hypot(x, y)
  near = np.sum((r > 0.5) & (r < 1.5)) / (np.pi * (1.5**2 - 0.5**2))
  wake = np.sum((x > 1.5) & (x < 4.5) & (np.abs(y) < 0.5)) / 3.0
  far = np.sum((x > 10) & (x < 14)) / (4.0 * 4.2)
  assert near > 2 * far and wake > 1.5 * far


def test_sample_fields_is_exact_on_linear_fields(geometry, mesh):
  x, y = np.meshgrid(np.arange(80.0), np.arange(24.0), indexing="ij")
  lin = 0.3 * x - 0.7 * y + 2.0
  grid = np.stack([lin, 2 * lin, lin], -1)[None].astype(np.float32)
  out = np.asarray(fm.sample_fields(grid, geometry, mesh))[0]
  d = geometry.diameter
  xm = geometry.cx + d * mesh.pos[:, 0]
  ym = geometry.cy + d * mesh.pos[:, 1]
  exact = 0.3 * xm - 0.7 * ym + 2.0
  # Cells whose four corners are fluid reproduce a linear field exactly.
  solid = lbm.solid_mask(geometry)
  i0 = np.clip(np.floor(xm).astype(int), 0, 78)
  j0 = np.clip(np.floor(ym).astype(int), 0, 22)
  clean = ~(solid[i0, j0] | solid[i0 + 1, j0] | solid[i0, j0 + 1]
            | solid[i0 + 1, j0 + 1])
  no_slip = np.isin(mesh.node_type, (fm.WALL, fm.OBSTACLE))
  clean &= ~no_slip
  assert clean.sum() > 50
  np.testing.assert_allclose(out[clean, 0], exact[clean], atol=1e-4)
  np.testing.assert_allclose(out[clean, 1], 2 * exact[clean], atol=1e-4)
  np.testing.assert_allclose(out[clean, 2], exact[clean], atol=1e-4)
  assert np.all(out[no_slip, :2] == 0)
  assert np.all(np.isfinite(out))


def test_generate_save_and_load_round_trip(tmp_path):
  data = fm.generate_cylinder_flow(
      [30.0, 90.0], nx=80, ny=24, diameter=6.0, num_points=150, windows=2,
      window_length=3, record_every=10, window_gap=20, spinup_steps=600, seed=0)
  n = len(data.mesh.pos)
  assert data.states.shape == (12, n, 3) and data.states.dtype == np.float32
  assert data.cond.shape == (12, 1) and data.cond[:6, 0].tolist() == [30.0] * 6
  assert data.window.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
  assert np.all(np.isfinite(data.states)) and data.time.shape == (12,)
  path = os.path.join(tmp_path, "sub", "flow.npz")
  fm.save_npz(path, data)
  assert os.listdir(os.path.dirname(path)) == ["flow.npz"]
  back = fm.load_npz(path)
  in_memory = fm.from_arrays(fm.to_arrays(data))
  for dataset in (back, in_memory):
    for a, b in zip(list(dataset.mesh) + list(dataset[1:]), list(data.mesh) + list(data[1:])):
      np.testing.assert_array_equal(a, b)


def _write(path, **arrays):
  np.savez(path, **arrays)
  return path


def test_loader_derives_edges_and_defaults(tmp_path):
  pos = np.array([[0, 0], [1, 0], [0, 1], [1, 1]], np.float64)
  tri = np.array([[0, 1, 2], [1, 3, 2]])
  path = _write(os.path.join(tmp_path, "own.npz"), pos=pos, triangles=tri,
                states=np.zeros((5, 4, 3)), cond=np.arange(5.0))
  data = fm.load_npz(path)
  edges = set(zip(data.mesh.senders.tolist(), data.mesh.receivers.tolist()))
  assert edges == {(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1), (1, 3), (3, 1),
                   (2, 3), (3, 2)}
  assert data.mesh.node_type.tolist() == [fm.NORMAL] * 4
  assert data.cond.shape == (5, 1) and data.window.tolist() == [0] * 5
  assert data.time.tolist() == [0, 1, 2, 3, 4]


def test_loader_errors_name_the_key(tmp_path):
  pos = np.zeros((4, 2))
  tri = np.array([[0, 1, 2]])
  ok = dict(pos=pos, triangles=tri, states=np.zeros((5, 4, 3)), cond=np.zeros(5))
  cases = [
      (dict(ok, states=None), "lacks the key 'states'"),
      (dict(ok, triangles=None), "'senders'/'receivers' or 'triangles'"),
      (dict(ok, states=np.zeros((5, 3, 3))), r"'states' must have shape \(M, 4, C\)"),
      (dict(ok, pos=np.zeros((4, 3))), r"'pos' must have shape \(N, 2\)"),
      (dict(ok, cond=np.zeros(4)), r"'cond' must be real with shape \(5, P\)"),
      (dict(ok, triangles=tri.astype(float)), "'triangles' must be integer"),
      (dict(ok, senders=np.array([0, 1])), "both 'senders' and 'receivers'"),
      (dict(ok, node_type=np.full(4, 9)), "'node_type' must be"),
      (dict(ok, window=np.zeros(3, int)), r"'window' must have shape \(5,\)"),
  ]
  for i, (arrays, message) in enumerate(cases):
    arrays = {k: v for k, v in arrays.items() if v is not None}
    path = _write(os.path.join(tmp_path, f"bad{i}.npz"), **arrays)
    with pytest.raises(ValueError, match=message):
      fm.load_npz(path)
  with pytest.raises(ValueError, match="my data lacks the key 'cond'"):
    fm.from_arrays(dict(pos=pos, triangles=tri, states=np.zeros((5, 4, 3))), source="my data")


def test_bad_inputs_raise(geometry, mesh):
  with pytest.raises(ValueError, match="num_points must be an integer >= 40"):
    fm.make_mesh(geometry, 10, seed=0)
  with pytest.raises(ValueError, match="unknown obstacle kind 'blob'"):
    fm.generate_cylinder_flow([50.0], nx=80, ny=24, diameter=6.0, kind="blob", seed=0)
  with pytest.raises(ValueError, match=r"Re=\[1000.0\] gives tau"):
    fm.generate_cylinder_flow([1000.0], nx=80, ny=24, diameter=6.0, seed=0)
  with pytest.raises(ValueError, match="grid_fields must have shape"):
    fm.sample_fields(np.zeros((3, 10, 10, 3)), geometry, mesh)


def test_ellipse_mesh_and_flow_are_valid():
  g = lbm.make_geometry(80, 24, "ellipse", axes=(4.0, 2.0), angle=0.4)
  m = fm.make_mesh(g, 160, seed=3)
  assert np.all(fm._level(g, m.pos.astype(np.float64)) >= 1 - 1e-4)
  assert np.sum(m.node_type == fm.OBSTACLE) >= 12
  flow = lbm.simulate_channel_flow(g, [60.0], spinup_steps=300, window_length=2,
                                   record_every=5)
  states = np.asarray(fm.sample_fields(flow.fields, g, m))
  assert states.shape == (1, 2, len(m.pos), 3) and np.all(np.isfinite(states))


def test_loader_rejects_non_finite_and_empty_data_naming_the_file(tmp_path):
  pos = np.zeros((4, 2))
  tri = np.array([[0, 1, 2]])
  ok = dict(pos=pos, triangles=tri, states=np.zeros((5, 4, 3)), cond=np.zeros(5))
  states = np.zeros((5, 4, 3))
  states[2, 1, 0] = np.nan
  cases = [
      (dict(ok, states=states), r"bad0.npz: npz key 'states' holds nan at index \(2, 1, 0\)"),
      (dict(ok, cond=np.array([0, 1, np.inf, 0, 0])), r"'cond' holds inf at index \(2, 0\)"),
      (dict(ok, pos=np.full((4, 2), np.nan)), r"'pos' holds nan at index \(0, 0\)"),
      (dict(ok, time=np.array([0, 1, np.nan, 3, 4])), r"'time' holds nan at index \(2,\)"),
      (dict(ok, states=np.zeros((0, 4, 3)), cond=np.zeros(0)), r"with M, C >= 1"),
  ]
  for i, (arrays, message) in enumerate(cases):
    path = _write(os.path.join(tmp_path, f"bad{i}.npz"), **arrays)
    with pytest.raises(ValueError, match=message):
      fm.load_npz(path)
  # Not an archive: a truncated one, and a single .npy array.
  good = _write(os.path.join(tmp_path, "good.npz"), **ok)
  raw = open(good, "rb").read()
  with open(os.path.join(tmp_path, "cut.npz"), "wb") as f:
    f.write(raw[:len(raw) // 2])
  with pytest.raises(ValueError, match=r"cut.npz is not a readable .npz archive"):
    fm.load_npz(os.path.join(tmp_path, "cut.npz"))
  np.save(os.path.join(tmp_path, "one.npy"), np.zeros(3))
  with pytest.raises(ValueError, match=r"one.npy holds a single array"):
    fm.load_npz(os.path.join(tmp_path, "one.npy"))
  with pytest.raises(FileNotFoundError, match=r"missing.npz does not exist"):
    fm.load_npz(os.path.join(tmp_path, "missing.npz"))
