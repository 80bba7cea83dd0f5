"""common.models.gnn: the split-weight InteractionBlock against the concatenated form.

The reference is the textbook block on `jraph.GraphNetwork` (concatenate
[e, h_s, h_r, g] per edge, then the MLP), with the same parameters; the block must
match it in values and gradients, and edges sorted by receiver (with the promise)
must give the same nodes as any other edge order.
"""

import jax
import jax.numpy as jnp
import jraph
import numpy as np

from common.models.gnn import Gathered, InteractionBlock, LayerNormMLP

LATENT = 8


def _reference_block(params, graph, num_layers=1):
  """The concatenated form: jraph.GraphNetwork with LayerNormMLPs on concatenations."""
  mlp = LayerNormMLP(LATENT, LATENT, num_layers)
  edge = lambda x: mlp.apply({"params": params["params"]["edge"]}, x)
  node = lambda x: mlp.apply({"params": params["params"]["node"]}, x)
  net = jraph.GraphNetwork(
      update_edge_fn=lambda e, s, r, g: e + edge(jnp.concatenate([e, s, r, g], -1)),
      update_node_fn=lambda h, _, r, g: h + node(jnp.concatenate([h, r, g], -1)),
      update_global_fn=None)
  return net(graph)


def _graph(seed=0, sort=False):
  """Two random graphs (7 and 5 nodes) batched, plus a padding graph, random features;
  edges sorted by (receiver, sender) or shuffled within each graph, and that order."""
  rng = np.random.default_rng(seed)
  parts = []
  for n, e in ((7, 20), (5, 12)):
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    parts.append(jraph.GraphsTuple(
        nodes=rng.normal(size=(n, LATENT)).astype(np.float32),
        edges=rng.normal(size=(e, LATENT)).astype(np.float32),
        senders=s.astype(np.int32), receivers=r.astype(np.int32),
        n_node=np.array([n]), n_edge=np.array([e]),
        globals=rng.normal(size=(1, 3)).astype(np.float32)))
  g = jraph.pad_with_graphs(jraph.batch(parts), 16, 40, 3)
  # Either order keeps each graph's edges together, as jraph requires.
  graph_of_edge = np.repeat(np.arange(3), g.n_edge)
  order = (np.lexsort((g.senders, g.receivers)) if sort
           else np.lexsort((rng.random(len(g.senders)), graph_of_edge)))
  return g._replace(senders=g.senders[order], receivers=g.receivers[order],
                    edges=g.edges[order]), order


def test_block_equals_the_concatenated_graph_network():
  g, _ = _graph()
  block = InteractionBlock(LATENT, num_layers=1)
  params = block.init(jax.random.PRNGKey(0), g)
  # Same parameter tree as LayerNormMLPs on the concatenations (4 latent + 3 -> latent).
  assert params["params"]["edge"]["mlp"]["dense_0"]["kernel"].shape == (3 * LATENT + 3, LATENT)
  def loss_and_grad(apply_fn):  # values and gradients in one compiled function
    def loss(p):
      out = apply_fn(p, g)
      return jnp.sum(jnp.sin(out.nodes)), (out.nodes, out.edges)
    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  (_, out), grads = loss_and_grad(block.apply)
  (_, ref), ref_grads = loss_and_grad(_reference_block)
  np.testing.assert_allclose(out[0], ref[0], atol=1e-5)
  np.testing.assert_allclose(out[1], ref[1], atol=1e-5)
  for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_sorted_receivers_give_the_same_message_passing():
  unsorted, order_u = _graph(seed=1)
  sorted_, order_s = _graph(seed=1, sort=True)
  assert np.all(np.diff(sorted_.receivers) >= 0) and np.any(np.diff(unsorted.receivers) < 0)
  plain, promised = InteractionBlock(LATENT, 1), InteractionBlock(LATENT, 1, receivers_sorted=True)
  params = plain.init(jax.random.PRNGKey(1), unsorted)
  out_u = jax.jit(plain.apply)(params, unsorted)
  out_s = jax.jit(promised.apply)(params, sorted_)
  np.testing.assert_allclose(out_s.nodes, out_u.nodes, atol=1e-5)
  # The same edges, in their own orders.
  back_u, back_s = np.empty_like(order_u), np.empty_like(order_s)
  back_u[order_u], back_s[order_s] = np.arange(len(order_u)), np.arange(len(order_s))
  np.testing.assert_allclose(np.asarray(out_s.edges)[back_s], np.asarray(out_u.edges)[back_u],
                             atol=1e-5)


def test_parts_mlp_shares_projections_of_one_index():
  """Gathered parts with the same index are projected, summed and gathered once, and the
  result is the MLP of the materialised concatenation."""
  rng = np.random.default_rng(2)
  x, y = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(6, 2)).astype(np.float32)
  e, idx = rng.normal(size=(9, 3)).astype(np.float32), rng.integers(0, 6, 9)
  mlp = LayerNormMLP(5, 4, num_layers=2)
  concat = np.concatenate([e, x[idx], y[idx]], -1)
  params = mlp.init(jax.random.PRNGKey(0), concat)
  split = lambda p: mlp.apply(p, e, Gathered(x, idx), Gathered(y, idx))
  np.testing.assert_allclose(split(params), mlp.apply(params, concat), atol=1e-5)
  assert str(jax.make_jaxpr(split)(params)).count("gather") == 1
