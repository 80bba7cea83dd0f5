"""CGFM: multilevel graphs, HieraGraphNet symmetries, the flow loss/sampler, and the metrics.

The network tests share a padded graph, parameters drawn on the tree of `init` (no
compiled init) and one jitted `apply` that takes the graph as an argument (module
fixtures), so each padded shape compiles once instead of running op by op. Most run
on a 2-level hierarchy; the permutation test and the merged-batch structure run on 3.
The loss and its gradients compile once, shared by the data-parallel check.
"""

import functools

import jax
import jax.numpy as jnp
import jraph
import numpy as np
import pytest
import scipy.stats
from scipy.spatial import Delaunay

from methods.cgfm import coarsening, flow, graphs, hieragraphnet, metrics, variants


def _mesh(n=160, seed=0):
  rng = np.random.default_rng(seed)
  pos = rng.uniform(-1.0, 1.0, (n, 2))
  tri = Delaunay(pos).simplices
  e = np.unique(np.sort(np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [2, 0]]]), 1),
                axis=0)
  senders = np.concatenate([e[:, 0], e[:, 1]]).astype(np.int32)
  receivers = np.concatenate([e[:, 1], e[:, 0]]).astype(np.int32)
  feats = np.concatenate([pos, rng.integers(0, 2, (n, 1))], 1).astype(np.float32)
  return pos, senders, receivers, feats


def _graph(n=160, ratios=(0.3, 0.4), seed=0):
  pos, s, r, feats = _mesh(n, seed)
  levels = coarsening.build_hierarchy(pos, s, r, ratios=ratios, method="aware", seed=seed)
  return pos, s, r, feats, graphs.build(pos, s, r, feats, levels)


MODEL_KWARGS = dict(latent=16, blocks_per_level=1, num_layers=1)
MODEL = hieragraphnet.HieraGraphNet(**MODEL_KWARGS)


@functools.partial(jax.jit, static_argnums=0)
def _apply(model, params, graph, t, x, cond):
  return model.apply(params, graph, t, x, cond)


def apply(params, graph, t, x, cond, model=MODEL):
  """`model.apply` compiled once per graph shape (t, x, cond cast to float32)."""
  return np.asarray(_apply(model, params, graph, np.float32(t), np.asarray(x, np.float32),
                           np.asarray(cond, np.float32)))


def init(model, graph, seed=0):
  """Parameters of `model` for `graph`: the tree of `model.init` (traced, not compiled),
  every leaf drawn from N(0, 0.5^2). The tests below hold for any parameters."""
  x = jax.ShapeDtypeStruct((graph.levels[0].nodes.shape[0], 3), jnp.float32)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), graph, 0.0, x,
                          jax.ShapeDtypeStruct((1,), jnp.float32))
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda s: (0.5 * rng.normal(size=s.shape)).astype(s.dtype), shapes)


_TRACES = []


@jax.jit
def _loss_and_grad(params, batch, key):
  _TRACES.append(1)
  return jax.value_and_grad(lambda p: flow.make_loss_fn(MODEL)(p, batch, key)[0])(params)


@pytest.fixture(scope="module")
def mesh_graph():
  """(pos, senders, receivers, features, the unpadded 3-level graph) of a 160-node mesh."""
  return _graph()


@pytest.fixture(scope="module")
def padded3(mesh_graph):
  *_, g = mesh_graph
  return graphs.pad(g, *graphs.padded_sizes(g))


@pytest.fixture(scope="module")
def graph2():
  """The same mesh with one coarse level (unpadded): what the model tests run on."""
  return _graph(ratios=(0.3,))[-1]


@pytest.fixture(scope="module")
def padded(graph2):
  return graphs.pad(graph2, *graphs.padded_sizes(graph2))


@pytest.fixture(scope="module")
def params(padded):
  return init(MODEL, padded)


@pytest.fixture(scope="module")
def loss_batch(padded):
  b, n = 8, padded.levels[0].nodes.shape[0]
  rng = np.random.default_rng(0)
  return {"graph": graphs.broadcast(padded, b),
          "x1": rng.normal(size=(b, n, 3)).astype(np.float32),
          "cond": rng.normal(size=(b, 1)).astype(np.float32)}


def test_build_and_pad_shapes(mesh_graph):
  pos, s, r, feats, g = mesh_graph
  assert g.num_levels == 3
  assert g.levels[0].nodes.shape == (160, 3) and g.levels[0].edges.shape == (len(s), 3)
  for l in range(2):
    assert g.assign[l].shape == (g.levels[l].nodes.shape[0],)
    assert g.assign[l].max() < g.levels[l + 1].nodes.shape[0]
    assert g.cross[l].shape == (g.levels[l].nodes.shape[0], 3)
  n_node, n_edge = graphs.padded_sizes(g, multiple=16)
  p = graphs.pad(g, n_node, n_edge)
  for l in range(3):
    assert p.levels[l].nodes.shape[0] == n_node[l] and p.levels[l].senders.shape == (n_edge[l],)
    np.testing.assert_array_equal(p.levels[l].n_node[:1], g.levels[l].n_node)
  # Padding nodes pool into the padding node of the next level; real ones are untouched.
  np.testing.assert_array_equal(p.assign[0][:160], g.assign[0])
  assert np.all(p.assign[0][160:] == n_node[1] - 1)
  mask = np.asarray(graphs.node_mask(p))
  assert mask.sum() == 160 and mask[:160].all()
  # Edges sorted by (receiver, sender) on every level, the same edge set as given; padding
  # and merging keep the receivers sorted (the promise of receivers_sorted=True).
  assert sorted(zip(g.levels[0].receivers, g.levels[0].senders)) == list(
      zip(g.levels[0].receivers, g.levels[0].senders)) == sorted(zip(r, s))
  merged = graphs.merge(graphs.broadcast(p, 3))
  for lev in g.levels + p.levels + merged.levels:
    assert np.all(np.diff(np.asarray(lev.receivers)) >= 0)
  assert variants.variant_model(None, latent=8, blocks_per_level=1, num_layers=1,
                                num_levels=2).receivers_sorted
  stacked = graphs.broadcast(p, 3)
  assert np.asarray(graphs.node_mask(stacked)).shape == (3, n_node[0])
  with pytest.raises(ValueError, match="budget"):
    graphs.pad(g, (160,) + n_node[1:], n_edge)


def test_output_ignores_padding_budget(params, padded, graph2):
  n_node, n_edge = graphs.padded_sizes(graph2)
  larger = graphs.pad(graph2, [n + 32 for n in n_node], [e + 64 for e in n_edge])
  x_real = np.random.default_rng(1).normal(size=(160, 3)).astype(np.float32)
  outs = []
  for p in (padded, larger):                 # every level has more padding in `larger`
    x = np.zeros((p.levels[0].nodes.shape[0], 3), np.float32)
    x[:160] = x_real
    outs.append(apply(params, p, 0.3, x, [0.2])[:160])
  np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)


def _permute(g: graphs.MultiscaleGraph, perms):
  """Relabels the nodes of every level l by perms[l] (new index of old node i = perm[i])."""
  levels, assign, cross = [], [], []
  for l, (lev, perm) in enumerate(zip(g.levels, perms)):
    inv = np.argsort(perm)
    levels.append(lev._replace(nodes=lev.nodes[inv], senders=perm[lev.senders],
                               receivers=perm[lev.receivers]))
    if l < len(g.assign):
      assign.append(perms[l + 1][g.assign[l]][inv])
      cross.append(g.cross[l][inv])
  return graphs.MultiscaleGraph(tuple(levels), tuple(assign), tuple(cross))


def test_permutation_equivariance(padded3):
  """Relabelling the real nodes of every level of a 3-level graph (padding stays last)
  permutes the output the same way."""
  padded, params = padded3, init(MODEL, padded3, seed=1)
  rng = np.random.default_rng(0)
  real = [int(lev.n_node[0]) for lev in padded.levels]
  perms = [np.concatenate([rng.permutation(k), np.arange(k, lev.nodes.shape[0])])
           for k, lev in zip(real, padded.levels)]
  gp = _permute(padded, perms)
  n = padded.levels[0].nodes.shape[0]
  x = np.zeros((n, 3), np.float32)
  x[:real[0]] = rng.normal(size=(real[0], 3))
  inv = np.argsort(perms[0])
  out = apply(params, padded, 0.4, x, [0.3])
  np.testing.assert_allclose(apply(params, gp, 0.4, x[inv], [0.3]), out[inv], atol=2e-5)
  # Permuting the coarse levels alone leaves the output unchanged.
  gc = _permute(padded, [np.arange(n)] + perms[1:])
  np.testing.assert_allclose(apply(params, gc, 0.4, x, [0.3]), out, atol=2e-5)


def test_single_level_is_a_message_passing_network():
  pos, s, r, feats = _mesh(60)
  g = graphs.build(pos, s, r, feats)
  assert g.num_levels == 1 and g.assign == ()
  model = hieragraphnet.HieraGraphNet(latent=8, blocks_per_level=2, num_layers=1)
  x = np.zeros((60, 3), np.float32)
  params = init(model, g)
  assert not any("pool" in k for k in params["params"])
  # Receptive field: two blocks reach two hops, so a node 3+ hops away is unaffected.
  hops = _hops(60, s, r, 0)
  x1 = x.copy()
  x1[0] = 1.0
  d = np.abs(apply(params, g, 0.0, x1, [0.0], model) - apply(params, g, 0.0, x, [0.0], model))
  assert d[0].max() > 0 and d[hops == 2].max() > 0
  assert (hops >= 3).any() and d[hops >= 3].max() == 0


def _hops(n, s, r, src):
  dist = np.full(n, 10 ** 6)
  dist[src] = 0
  frontier = [src]
  while frontier:
    nxt = []
    for u in frontier:
      for v in r[s == u]:
        if dist[v] > dist[u] + 1:
          dist[v] = dist[u] + 1
          nxt.append(v)
    frontier = nxt
  return dist


def test_loss_traces_once_and_is_finite(params, loss_batch):
  for i in range(3):
    loss, grads = _loss_and_grad(params, loss_batch, jax.random.PRNGKey(i))
    assert np.isfinite(float(loss))
  assert len(_TRACES) == 1
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_loss_is_the_cfm_error_per_real_node(padded):
  """A network that outputs zero has loss E|X1 - X0|^2 per node and channel = 1 + E X1^2."""
  class Zero(hieragraphnet.HieraGraphNet):
    def __call__(self, graph, t, x, cond):
      return jnp.zeros_like(x)
  b, n = 64, padded.levels[0].nodes.shape[0]
  x1 = np.full((b, n, 3), 2.0, np.float32)
  batch = {"graph": graphs.broadcast(padded, b), "x1": x1, "cond": np.zeros((b, 1), np.float32)}
  loss, _ = jax.jit(flow.make_loss_fn(Zero()))({}, batch, jax.random.PRNGKey(0))
  assert abs(float(loss) - 5.0) < 0.1  # padding nodes would pull this toward 0


def test_sampler_shapes_and_padding(params, padded):
  sample = jax.jit(functools.partial(flow.sample, MODEL, num_samples=5, num_steps=3))
  out = sample(params, padded, jnp.array([0.1]), jax.random.PRNGKey(0))
  assert out.shape == (5, padded.levels[0].nodes.shape[0], 3)
  assert np.all(np.isfinite(out)) and np.all(np.asarray(out)[:, 160:] == 0)


def test_standardizer_round_trip():
  rng = np.random.default_rng(0)
  states = rng.normal(3.0, 2.0, (10, 7, 3))
  cond = rng.uniform(50, 150, (10, 1))
  st = flow.Standardizer.fit(states, cond)
  z = st.states(states)
  np.testing.assert_allclose(z.reshape(-1, 3).mean(0), 0, atol=1e-5)
  np.testing.assert_allclose(z.reshape(-1, 3).std(0), 1, atol=1e-5)
  np.testing.assert_allclose(st.unstates(z), states, rtol=1e-5)
  assert abs(float(st.cond(cond).std()) - 1) < 1e-5


def test_condition_features_smooth():
  f = hieragraphnet.condition_features(jnp.array([0.3]), 2)
  np.testing.assert_allclose(f, [0.3, np.sin(0.3 * np.pi), np.sin(0.6 * np.pi),
                                 np.cos(0.3 * np.pi), np.cos(0.6 * np.pi)], rtol=1e-6)


def test_wasserstein1_matches_scipy():
  rng = np.random.default_rng(0)
  for m, s in ((20, 20), (13, 29), (50, 7)):
    x, y = rng.normal(size=(m, 4)), rng.normal(0.5, 2.0, (s, 4))
    ours = metrics.wasserstein1_1d(x, y)
    ref = [scipy.stats.wasserstein_distance(x[:, j], y[:, j]) for j in range(4)]
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_field_errors():
  rng = np.random.default_rng(0)
  ref = rng.normal(size=(200, 30, 3)) + np.linspace(0, 3, 30)[None, :, None]
  e = metrics.field_errors(ref, ref)
  assert e.mean_rel == 0 and e.std_rel == 0 and e.w1 == 0
  shifted = metrics.field_errors(ref, ref + 0.5 * ref.std(axis=(0, 1)))
  assert abs(shifted.w1 - 0.5) < 1e-9 and shifted.std_rel < 1e-12 and shifted.mean_rel > 0
  wide = metrics.field_errors(ref, 2 * (ref - ref.mean(0)) + ref.mean(0))
  assert abs(wide.std_rel - 1.0) < 1e-9 and wide.mean_rel < 1e-9
  region = np.zeros(30, bool)
  region[:5] = True
  assert metrics.field_errors(ref, ref + 1.0, region).w1 > 0
  with pytest.raises(ValueError, match="region"):
    metrics.field_errors(ref, ref, np.zeros(30, bool))
  with pytest.raises(ValueError, match="agree"):
    metrics.field_errors(ref, ref[:, :10])


def test_near_wake_region():
  pos = np.array([[0.0, 0.0], [3.0, 0.5], [3.0, 2.0], [-2.0, 0.0], [8.0, 0.0]])
  np.testing.assert_array_equal(metrics.near_wake_region(pos), [True, True, False, False, False])


def test_merged_batch_equals_per_sample(params, padded):
  """The batch runs as one merged graph (jraph.batch style); each sample is unchanged."""
  b, n = 3, padded.levels[0].nodes.shape[0]
  rng = np.random.default_rng(2)
  x = rng.normal(size=(b, n, 3)).astype(np.float32)
  t = np.array([0.1, 0.5, 0.9], np.float32)
  cond = rng.normal(size=(b, 1)).astype(np.float32)
  field = jax.jit(lambda p, g, *args: flow.batched_field(MODEL, p, g)(*args))
  out = np.asarray(field(params, graphs.broadcast(padded, b), t, x, cond))
  for i in range(b):
    ref = apply(params, padded, t[i], x[i], cond[i])
    np.testing.assert_allclose(out[i, :160], ref[:160], atol=2e-5)
  assert np.all(out[:, 160:] == 0)


def test_merge_is_jraph_batch_on_every_level(padded3):
  """On three levels: each level of the merged batch is `jraph.batch` of the samples,
  and sample b's pooling map is offset by b times the next level's size."""
  b = 3
  merged = graphs.merge(graphs.broadcast(padded3, b))
  for l, level in enumerate(padded3.levels):
    ref = jraph.batch([level] * b)
    for name in ("nodes", "edges", "senders", "receivers", "n_node", "n_edge"):
      np.testing.assert_array_equal(np.asarray(getattr(merged.levels[l], name)),
                                    getattr(ref, name), err_msg=f"level {l} {name}")
  for l, a in enumerate(padded3.assign):
    n_next = padded3.levels[l + 1].nodes.shape[0]
    np.testing.assert_array_equal(np.asarray(merged.assign[l]),
                                  np.concatenate([a + k * n_next for k in range(b)]))
    np.testing.assert_array_equal(np.asarray(merged.cross[l]), np.tile(padded3.cross[l], (b, 1)))


def test_model_variants_and_their_depth():
  assert variants.model_variants(("random", "voxel")) == {
      "cgfm": "aware", "naive_random": "random", "naive_voxel": "voxel", "single_level": None}
  sizes = dict(latent=8, blocks_per_level=2, num_layers=1, num_levels=3)
  assert variants.variant_model("aware", **sizes).blocks_per_level == 2
  assert variants.variant_model(None, **sizes).blocks_per_level == 2 * (2 * 3 - 1)


def test_node_features_and_variant_graphs():
  pos, s, r, _ = _mesh(120, seed=4)
  node_type = (np.abs(pos).max(1) > 0.9).astype(np.int32)  # a "wall" rim
  feats = variants.node_features(pos, node_type)
  extent = 0.5 * np.max(pos.max(0) - pos.min(0))
  np.testing.assert_array_equal(feats[:, :5], np.eye(5)[node_type])
  np.testing.assert_allclose(feats[:, 5:], pos / extent, rtol=1e-6)
  single = variants.variant_graph(pos, s, r, node_type, method=None, ratios=(0.3,), seed=0)
  aware = variants.variant_graph(pos, s, r, node_type, method="aware", ratios=(0.3,), seed=0)
  assert single.num_levels == 1 and aware.num_levels == 2
  for g in (single, aware):  # padded: real nodes first, then padding
    assert int(np.asarray(graphs.node_mask(g)).sum()) == 120
    np.testing.assert_array_equal(g.levels[0].nodes[:120], feats)
  # The coarse level marks clusters holding a boundary (non-NORMAL) node.
  level = coarsening.build_hierarchy(pos, s, r, ratios=(0.3,), boundary=node_type != 0,
                                     seed=0)[0]
  np.testing.assert_array_equal(aware.levels[1].nodes[:len(level.pos), -1], level.boundary)


def test_batch_fn_is_a_pure_function_of_seed_and_step(padded):
  rng = np.random.default_rng(0)
  states = rng.normal(size=(10, 160, 3)).astype(np.float32)
  cond = np.arange(10, dtype=np.float32)[:, None]
  batch_fn = flow.make_batch_fn(padded, states, cond, batch_size=4)
  a, b, c = batch_fn(0, 5), batch_fn(0, 5), batch_fn(0, 6)
  np.testing.assert_array_equal(a["x1"], b["x1"])
  assert not np.array_equal(a["x1"], c["x1"])
  n_pad = padded.levels[0].nodes.shape[0]
  assert a["x1"].shape == (4, n_pad, 3) and np.all(a["x1"][:, 160:] == 0)
  idx = a["cond"][:, 0].astype(int)  # cond[i] = i names the drawn state
  np.testing.assert_array_equal(a["x1"][:, :160], states[idx])
  assert a["graph"].levels[0].nodes.shape == (4,) + padded.levels[0].nodes.shape


def test_region_errors_is_field_errors_per_region():
  rng = np.random.default_rng(1)
  ref, gen = rng.normal(size=(40, 12, 3)), rng.normal(0.2, 1.1, (30, 12, 3))
  wake = np.arange(12) < 5
  scale = np.array([1.0, 2.0, 0.5])
  errs = metrics.region_errors(ref, gen, {"all": None, "wake": wake}, scale)
  assert list(errs) == ["all", "wake"]
  assert errs["all"] == metrics.field_errors(ref, gen, scale=scale)
  assert errs["wake"] == metrics.field_errors(ref, gen, wake, scale=scale)


_DATA_PARALLEL = r"""
import pickle, sys
import jax, jax.numpy as jnp, numpy as np
from common import sharding
from methods.cgfm import flow, hieragraphnet
assert jax.device_count() == 4
with open(sys.argv[1], "rb") as f:
  case = pickle.load(f)
model = hieragraphnet.HieraGraphNet(**case["model"])
key = jnp.asarray(case["key"])
loss_fn = jax.jit(jax.value_and_grad(lambda p, b: flow.make_loss_fn(model)(p, b, key)[0]))
placed = sharding.shard_batch(case["batch"], sharding.make_mesh())
assert len(placed["x1"].sharding.device_set) == 4
out, gout = loss_fn(case["params"], placed)
np.testing.assert_allclose(out, case["loss"], rtol=1e-5)
for a, b in zip(jax.tree.leaves(gout), jax.tree.leaves(case["grads"])):
  np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
print("OK")
"""


def test_loss_is_data_parallel_over_fake_devices(params, loss_batch, tmp_path):
  """The same loss and gradients with the batch split over 4 (fake CPU) devices as on
  this process's one device (a batch of 8: two samples per device)."""
  import os
  import pickle
  import subprocess
  import sys
  key = jax.random.PRNGKey(3)
  loss, grads = _loss_and_grad(params, loss_batch, key)
  case = tmp_path / "case.pkl"
  case.write_bytes(pickle.dumps(dict(
      model=MODEL_KWARGS, key=np.asarray(key), params=jax.device_get(params),
      batch=jax.tree.map(np.asarray, loss_batch), loss=float(loss),
      grads=jax.device_get(grads))))
  # After the caller's XLA_FLAGS, so that an ISA cap reaches the child too.
  xla_flags = (f"{os.environ.get('XLA_FLAGS', '')} "
               f"--xla_force_host_platform_device_count=4").strip()
  env = dict(os.environ, XLA_FLAGS=xla_flags,
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _DATA_PARALLEL, str(case)], env=env,
                        capture_output=True, text=True, timeout=300,
                        cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                            os.path.abspath(__file__)))))
  assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
