"""Unit and property tests of methods/zeroth_order: SPSA unbiasedness, the AGZO
subspace (row-space membership, planted-basis recovery) on the transformer and on a
plain flax model, the seed trick, the cosine theory, composition with optax chains and
schedules, training through the common loop, and the recipes and task helpers."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import methods.zeroth_order as zo
from common import train as train_lib
from common.models import apply_with_taps
from common.models import taps as taps_lib
from methods.zeroth_order import recipes
from methods.zeroth_order import task as task_lib


def quadratic(dim=6, seed=0):
  rng = np.random.default_rng(seed)
  m = rng.normal(size=(dim, dim))
  q = jnp.asarray(m @ m.T / dim + np.eye(dim), jnp.float32)
  b = jnp.asarray(rng.normal(size=dim), jnp.float32)
  params = {"w": jnp.asarray(rng.normal(size=(2, dim // 2)), jnp.float32)}

  def loss_fn(p, batch):
    del batch
    x = p["w"].reshape(-1)
    return 0.5 * x @ q @ x + b @ x

  return params, loss_fn


def test_spsa_is_unbiased_for_a_quadratic():
  params, loss_fn = quadratic()
  true = jax.grad(loss_fn)(params, None)["w"].reshape(-1)
  n = 20000
  draws = jax.jit(jax.vmap(lambda s: zo.spsa_gradient(loss_fn, params, None,
                                                      jax.random.PRNGKey(3), s,
                                                      eps=1e-2).grads["w"].reshape(-1)))(
      jnp.arange(n))
  draws = np.asarray(draws, np.float64)
  mean, se = draws.mean(0), draws.std(0) / np.sqrt(n)
  z = np.abs(mean - np.asarray(true)) / se
  assert np.all(z < 4.5), (mean, true, z)
  # The test has power: an estimator off by 10% is rejected with these draws.
  assert np.any(np.abs(1.1 * mean - np.asarray(true)) / (1.1 * se) > 4.5)


def test_one_sided_spsa_counts_passes_and_matches_directional_derivative():
  params, loss_fn = quadratic()
  est = zo.spsa_gradient(loss_fn, params, None, jax.random.PRNGKey(0), 5, eps=1e-3,
                         two_sided=False)
  z = zo.gaussian_direction(params, jax.random.fold_in(jax.random.PRNGKey(0), 5))
  g = jax.grad(loss_fn)(params, None)
  assert est.num_forward == 2
  np.testing.assert_allclose(est.projected_grad, jnp.vdot(g["w"], z["w"]), rtol=2e-2)


def test_seed_trick_regenerates_the_same_z():
  params, loss_fn = quadratic()
  key = jax.random.PRNGKey(42)
  z1 = zo.gaussian_direction(params, jax.random.fold_in(key, 7))
  z2 = zo.gaussian_direction(params, jax.random.fold_in(key, 7))
  z3 = zo.gaussian_direction(params, jax.random.fold_in(key, 8))
  np.testing.assert_array_equal(z1["w"], z2["w"])
  assert not np.allclose(z1["w"], z3["w"])
  # The estimate is c * z with z regenerated from the step key, bit for bit.
  est = jax.jit(lambda p: zo.spsa_gradient(loss_fn, p, None, key, 7, eps=1e-3))(params)
  np.testing.assert_allclose(est.grads["w"], est.projected_grad * z1["w"], rtol=1e-6)
  # LOZO: V is shared within an interval of steps and redrawn across intervals.
  p2 = {"k": jnp.zeros((6, 5))}
  lz = lambda s: zo.lozo_direction(p2, key, s, rank=2, interval=4)["k"]
  for s in (0, 1, 3):
    np.testing.assert_array_equal(lz(s), zo.lozo_direction(p2, key, s, rank=2, interval=4)["k"])
  col_space = lambda m: np.linalg.svd(np.asarray(m))[2][:2]  # right singular vectors = V's span
  v0, v3, v4 = col_space(lz(0)), col_space(lz(3)), col_space(lz(4))
  assert np.allclose(np.abs(np.linalg.det(v0 @ v3.T)), 1.0, atol=1e-4)
  assert not np.allclose(np.abs(np.linalg.det(v0 @ v4.T)), 1.0, atol=1e-2)


def test_power_iteration_recovers_a_planted_low_rank_basis():
  rng = np.random.default_rng(0)
  n, d, k = 400, 48, 5
  v, _ = np.linalg.qr(rng.normal(size=(d, k)))
  u = rng.normal(size=(n, k)) * np.array([10.0, 8.0, 6.0, 5.0, 4.0])
  h = u @ v.T + 1e-2 * rng.normal(size=(n, d))
  basis = jax.jit(zo.power_iteration_basis, static_argnums=1, static_argnames="num_iters")
  a = np.asarray(basis(jnp.asarray(h, jnp.float32), k, jax.random.PRNGKey(0), num_iters=3))
  np.testing.assert_allclose(a.T @ a, np.eye(k), atol=1e-5)
  assert np.linalg.norm(a @ a.T - v @ v.T, 2) < 1e-2
  # A random basis of the same size is far from the planted one.
  rand, _ = np.linalg.qr(rng.normal(size=(d, k)))
  assert np.linalg.norm(rand @ rand.T - v @ v.T, 2) > 0.5


def _row_space_residual(h, delta):
  _, s, vt = np.linalg.svd(np.asarray(h, np.float64).reshape(-1, h.shape[-1]),
                           full_matrices=False)
  v = vt[s > 1e-6 * s[0]].T
  d = np.asarray(delta, np.float64)
  return np.linalg.norm(d - v @ (v.T @ d)) / np.linalg.norm(d), v.shape[1]


@pytest.mark.parametrize("rank", [3, 8])
def test_agzo_perturbation_lies_in_the_activation_row_space(rank):
  rng = np.random.default_rng(1)
  h = jnp.asarray(rng.normal(size=(40, 5)) @ rng.normal(size=(5, 16)), jnp.float32)  # rank 5
  params = {"lin": {"kernel": jnp.zeros((16, 7)), "bias": jnp.zeros((7,))}}
  taps = {"lin": {"input": h}}

  @jax.jit  # One compilation for the bases and the direction.
  def run(p, t):
    bases = zo.activation_bases(p, t, jax.random.PRNGKey(0), rank=rank)
    return bases, zo.agzo_direction(p, bases, jax.random.PRNGKey(1))

  bases, delta = run(params, taps)
  resid, dim = _row_space_residual(h, delta["lin"]["kernel"])
  assert dim == 5 and resid < 1e-5, resid
  assert np.linalg.matrix_rank(np.asarray(delta["lin"]["kernel"]), tol=1e-4) == min(rank, 5)
  assert np.std(np.asarray(delta["lin"]["bias"])) > 0.3  # other parameters: Gaussian
  assert zo.subspace_dimension(params, bases) == min(rank, 5) * 7 + 7


def test_agzo_on_the_transformer_perturbs_every_linear_layer_inside_its_taps(tiny_lm):
  # The session's trained tiny LM (d_model 32, d_ff 64): no second model to initialise.
  model, params = tiny_lm.model, tiny_lm.params
  rng = np.random.default_rng(1)  # 16 token rows < d_in
  tokens = jnp.asarray(rng.integers(0, model.config.vocab_size, (2, 8)), jnp.int32)

  def loss_and_taps(p, batch):
    logits, state = model.apply({"params": p}, batch, mutable=["taps"])
    return jnp.mean(logits[:, -1, 0]), state["taps"]

  @jax.jit  # One compilation for the taps, bases and direction.
  def run(p):
    taps = loss_and_taps(p, tokens)[1]
    bases = zo.activation_bases(p, taps, jax.random.PRNGKey(2), rank=4)
    return taps, bases, zo.agzo_direction(p, bases, jax.random.PRNGKey(3))

  taps, bases, delta = run(params)
  paths = taps_lib.linear_paths(params)
  assert set(bases) == set(paths) and len(paths) == 8
  for path in paths:
    node_d, node_t = delta, taps
    for p in path:
      node_d, node_t = node_d[p], node_t[p]
    resid, dim = _row_space_residual(node_t["input"], node_d["kernel"])
    assert dim <= 16 and resid < 1e-4, (path, resid)


def _per_layer_reference(params, taps, key, rank, num_iters=2):
  """The AGZO bases and direction one layer at a time (the textbook loop)."""
  bases = {}
  for i, path in enumerate(taps_lib.linear_paths(params)):
    h = taps_lib.tapped_input(taps, path)
    h = h.reshape(-1, h.shape[-1])
    q = jax.random.normal(jax.random.fold_in(key, i), (h.shape[1], min(rank, *h.shape)))
    for _ in range(num_iters):
      q, upper = jnp.linalg.qr(h.T @ (h @ q))
    diag = jnp.abs(jnp.diagonal(upper))
    bases[path] = q * (diag > 1e-4 * diag.max())
  flat, treedef = jax.tree_util.tree_flatten_with_path(params)
  out = []
  for j, (key_path, p) in enumerate(flat):
    k = jax.random.fold_in(key, j)
    a = bases.get(tuple(str(e.key) for e in key_path[:-1]))
    out.append(jax.random.normal(k, p.shape) if a is None
               else a @ jax.random.normal(k, (p.shape[1], a.shape[1])).T)
  return bases, jax.tree.unflatten(treedef, out)


def test_grouped_agzo_matches_the_per_layer_loop(tiny_lm, rank=8):
  # The transformer's q/k/v (and gate/up) read the same taps, so activation_bases
  # shares their matmuls and draws each shape group's Omega and R in one vmapped
  # call; the bases and the direction must be those of one layer at a time.
  model, params = tiny_lm.model, tiny_lm.params
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, 256, (2, 16)), jnp.int32)
  key = jax.random.PRNGKey(5)

  @jax.jit
  def run(p):
    taps = model.apply({"params": p}, tokens, mutable=["taps"])[1]["taps"]
    bases = zo.activation_bases(p, taps, key, rank=rank)
    return bases, zo.agzo_direction(p, bases, key), _per_layer_reference(p, taps, key, rank)

  bases, delta, (ref_bases, ref_delta) = run(params)
  assert set(bases) == set(ref_bases) and len(bases) == 8
  for path, a in bases.items():
    # Equal up to float rounding (the shared matmuls sum in another order). At r = 8 on
    # 32 token rows every column is well conditioned (differences about 3e-7); at r = 16
    # the last columns were not, and a change of the attention's float rounding moved
    # them by 1.4e-4.
    np.testing.assert_allclose(a, ref_bases[path], atol=1e-5)
    assert 0 < int(jnp.sum(jnp.any(a != 0, axis=0))) <= rank
  for got, want in zip(jax.tree.leaves(delta), jax.tree.leaves(ref_delta)):
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_cosine_theory_matches_monte_carlo():
  assert abs(zo.isotropic_expected_cosine(10**6) - np.sqrt(2 / (np.pi * 10**6))) < 1e-8
  assert abs(zo.isotropic_expected_cosine(1) - 1.0) < 1e-12
  params, loss_fn = quadratic(dim=12, seed=3)
  g = jax.grad(loss_fn)(params, None)
  est = lambda p, b, k, s: zo.spsa_gradient(loss_fn, p, b, k, s, eps=1e-3)
  c = np.asarray(jax.jit(lambda p: zo.alignment_draws(est, p, None, g, jax.random.PRNGKey(0),
                                                      4000))(params)["overall"])
  theory = zo.isotropic_expected_cosine(12)
  assert abs(c.mean() - theory) < 4 * c.std() / np.sqrt(len(c)), (c.mean(), theory)


def _regression_problem():
  model = taps_lib.TappedDense(3, use_bias=False)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(64, 2)) @ rng.normal(size=(2, 8)), jnp.float32)
  y = x @ jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
  params = {"kernel": jnp.zeros((8, 3))}

  def loss_and_taps(p, batch):
    out, state = model.apply({"params": p}, batch["x"], mutable=["taps"])
    return jnp.mean((out - batch["y"]) ** 2), state["taps"]

  return params, {"x": x, "y": y}, loss_and_taps


@pytest.mark.parametrize("name", ["mezo", "lozo", "agzo", "first_order"])
def test_each_estimator_composes_with_optax_chain_and_a_schedule(name):
  params, batch, loss_and_taps = _regression_problem()
  loss_fn = lambda p, b: loss_and_taps(p, b)[0]
  key = jax.random.PRNGKey(0)
  head = {"mezo": lambda: zo.mezo(loss_fn, 1e-3, key=key),
          "lozo": lambda: zo.lozo(loss_fn, 1e-3, key=key, rank=2, interval=5),
          "agzo": lambda: zo.agzo(loss_and_taps, 1e-3, key=key, rank=2),
          "first_order": lambda: zo.first_order(loss_fn)}[name]()
  schedule = optax.cosine_decay_schedule(0.02, 300)
  tx = optax.chain(head, optax.clip_by_global_norm(10.0), optax.sgd(schedule))
  state = tx.init(params)
  step = zo.make_step(tx)
  start = float(loss_fn(params, batch))
  for _ in range(300):
    params, state = step(params, state, batch)
  zo_state = zo.find_zo_state(state)
  assert int(zo_state.step) == 300
  assert float(loss_fn(params, batch)) < 0.5 * start
  assert step._cache_size() == 1  # traced once


def test_zeroth_order_transformation_needs_a_key_params_and_batch():
  params, loss_fn = quadratic()
  with pytest.raises(TypeError, match="key"):
    zo.mezo(loss_fn)  # No silent default key.
  tx = zo.mezo(loss_fn, key=jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="batch"):
    tx.update(params, tx.init(params), params)
  with pytest.raises(ValueError, match="eps"):
    zo.mezo(loss_fn, eps=0.0, key=jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="rank"):
    zo.power_iteration_basis(jnp.ones((4, 3)), 0, jax.random.PRNGKey(0))


class _PlainMLP(nn.Module):
  """A user's model: plain flax Dense layers, no taps of its own."""

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2)(nn.tanh(nn.Dense(16)(x)))


def _low_rank_regression(d_in=12, rank=2, batch=32):
  rng = np.random.default_rng(0)
  basis = rng.normal(size=(d_in, rank)) / np.sqrt(rank)
  w_true = rng.normal(size=(d_in, 2))

  def batch_fn(seed, step):
    x = (np.random.default_rng((seed, step)).normal(size=(batch, rank)) @ basis.T)
    return {"x": x.astype(np.float32), "y": np.tanh(x @ w_true).astype(np.float32)}

  return batch_fn


def test_agzo_on_a_plain_flax_mlp_reads_every_dense_input_and_trains_in_the_loop(tmp_path):
  model, batch_fn = _PlainMLP(), _low_rank_regression()
  params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 12)))["params"]

  def loss_and_taps(p, batch):
    out, tapped = apply_with_taps(model, {"params": p}, batch["x"])
    return jnp.mean((out - batch["y"]) ** 2), tapped

  batch = jax.tree.map(jnp.asarray, batch_fn(0, 0))

  @jax.jit  # One compilation for the taps, bases, direction and estimate.
  def inspect(p, b):
    tapped = loss_and_taps(p, b)[1]
    bases = zo.activation_bases(p, tapped, jax.random.PRNGKey(1), rank=2)
    est = zo.agzo_gradient(loss_and_taps, p, b, jax.random.PRNGKey(4), 0, rank=2)
    return tapped, bases, zo.agzo_direction(p, bases, jax.random.PRNGKey(2)), est

  tapped, bases, delta, est = inspect(params, batch)
  assert set(bases) == {("Dense_0",), ("Dense_1",)}
  for name in ("Dense_0", "Dense_1"):
    resid, _ = _row_space_residual(tapped[name]["input"], delta[name]["kernel"])
    assert resid < 1e-4, (name, resid)
  # Dense_0 sees rank-2 inputs in 12 dimensions: its perturbation has rank 2.
  assert np.linalg.matrix_rank(np.asarray(delta["Dense_0"]["kernel"]), tol=1e-4) == 2
  # The estimator counts the unperturbed pass (one-sided: 2 forward passes).
  assert int(est.num_forward) == 2 and np.isfinite(float(est.projected_grad))
  config = train_lib.default_train_config()
  config.update(num_steps=60, batch_size=32, log_every=59, checkpoint_every=0,
                progress_bar=False)
  tx = optax.chain(zo.agzo(loss_and_taps, 1e-3, key=jax.random.PRNGKey(3), rank=2,
                           two_sided=True), optax.sgd(0.02))
  result = train_lib.train(init_fn=lambda key: params,
                           loss_fn=lambda p, b, key: (loss_and_taps(p, b)[0], {}),
                           batch_fn=batch_fn, optimizer=tx, config=config, workdir=tmp_path,
                           gradient_free=True)
  first, last = result.history[0]["loss"], result.history[-1]["loss"]
  assert last < 0.3 * first, (first, last)


def test_recipes_name_the_methods_their_step_sizes_and_costs():
  assert recipes.method_names(("first_order", "agzo", "mezo"), (1, 4)) == [
      "first_order", "agzo_r1", "agzo_r4", "mezo"]
  trainable = {"a": {"kernel": jnp.zeros((8, 5))}, "b": {"kernel": jnp.zeros((2, 3))},
               "scale": jnp.zeros((4,))}
  assert recipes.perturbation_dimension("mezo", trainable) == 40 + 6 + 4
  # AGZO: min(r, d_in) d_out per kernel, plus the other sizes.
  assert recipes.perturbation_dimension("agzo_r4", trainable) == 4 * 5 + 2 * 3 + 4
  spec = type("Spec", (), dict(lr_first_order=1e-3, zo_lr_scale=50.0))
  assert recipes.learning_rate("agzo_r4", trainable, spec) == 50.0 / 30
  assert recipes.learning_rate("first_order", trainable, spec) == 1e-3
  assert [recipes.passes_per_step(n, 3, False) for n in ("first_order", "mezo", "agzo_r1")] \
      == [3, 2, 2]
  assert recipes.passes_per_step("agzo_r1", 3, True) == 3


def test_trainable_split_keeps_the_linear_paths_and_merges_back():
  params = {"embed": jnp.ones((4, 2)), "layer": {"q": {"kernel": jnp.ones((2, 2))},
                                                  "norm": {"scale": jnp.ones((2,))}}}
  trainable, frozen = task_lib.split_trainable(params, "linear")
  assert jax.tree.structure(trainable) == jax.tree.structure({"layer": {"q": {"kernel": 0}}})
  new = jax.tree.map(lambda x: 2 * x, trainable)
  merged = task_lib.merge(frozen, new)
  assert float(merged["layer"]["q"]["kernel"][0, 0]) == 2.0 and merged["embed"] is params["embed"]
  assert task_lib.split_trainable(params, "all") == (params, {})
  split = ((np.arange(100) % 7).astype(np.int32), (np.arange(90) % 5).astype(np.int32))
  one, two = (task_lib.task_batch(split, 3, 5, 6, 4) for _ in range(2))
  np.testing.assert_array_equal(one["tokens"], two["tokens"])  # A pure function of (seed, step).
  assert one["tokens"].shape == (6, 4) and set(one["labels"]) <= {0, 1}


# Bad input and surprises (issue 17).

def test_make_step_does_not_donate_unless_asked():
  params, loss_fn = quadratic()
  txs = [optax.chain(zo.mezo(loss_fn, key=jax.random.PRNGKey(0)), optax.sgd(1e-2)),
         optax.chain(zo.lozo(loss_fn, key=jax.random.PRNGKey(0), rank=1), optax.sgd(1e-2))]
  # The notebook pattern: the same initial params for two optimisers.
  for tx in txs:
    new, _ = zo.make_step(tx)(params, tx.init(params), jnp.zeros(()))
    assert not params["w"].is_deleted() and new["w"].shape == params["w"].shape
  copy = jax.tree.map(jnp.copy, params)
  zo.make_step(txs[0], donate=True)(copy, txs[0].init(copy), jnp.zeros(()))
  assert copy["w"].is_deleted()  # Opted in: the buffers were reused.


def test_agzo_without_taps_is_an_error_unless_isotropic_fallback_is_asked_for():
  model = _PlainMLP()
  params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 12)))["params"]
  batch = jax.tree.map(jnp.asarray, _low_rank_regression()(0, 0))

  def loss_no_taps(p, b):  # plain apply: nn.Dense records nothing
    out, state = model.apply({"params": p}, b["x"], mutable=["taps"])
    return jnp.mean((out - b["y"]) ** 2), state.get("taps", {})

  with pytest.raises(ValueError, match=r"no tap.*Dense_0.*apply_with_taps.*untapped"):
    zo.agzo_gradient(loss_no_taps, params, batch, jax.random.PRNGKey(0), 0)
  tx = optax.chain(zo.agzo(loss_no_taps, key=jax.random.PRNGKey(0)), optax.sgd(1e-2))
  with pytest.raises(ValueError, match=r"no tap.*Dense_0"):  # at the first trace
    zo.make_step(tx)(params, tx.init(params), batch)
  with pytest.raises(ValueError, match=r"no tap.*1 of 2.*Dense_0"):  # Dense_1 reads x
    zo.activation_bases(params, {"Dense_1": {"input": batch["x"]}}, jax.random.PRNGKey(0),
                        rank=2)
  # The explicit opt-in: untapped kernels get isotropic noise (MeZO on those layers).
  est = zo.agzo_gradient(loss_no_taps, params, batch, jax.random.PRNGKey(0), 0,
                         untapped="isotropic")
  assert np.isfinite(float(est.projected_grad))
  with pytest.raises(ValueError, match="untapped='gauss'"):
    zo.agzo(loss_no_taps, key=jax.random.PRNGKey(0), untapped="gauss")
  with pytest.raises(ValueError, match=r"taps\[Dense_1\]\[.input.\].*\(4, 5\).*12"):
    zo.activation_bases(params, {"Dense_0": {"input": jnp.ones((4, 16))},
                                 "Dense_1": {"input": jnp.ones((4, 5))}},
                        jax.random.PRNGKey(0), rank=2)


def test_hyperparameters_and_names_are_checked():
  params, loss_fn = quadratic()
  key = jax.random.PRNGKey(0)
  for make, match in [(lambda: zo.mezo(loss_fn, float("inf"), key=key), "eps=inf"),
                      (lambda: zo.lozo(loss_fn, key=key, rank=1.5), "rank=1.5"),
                      (lambda: zo.agzo(loss_fn, key=key, rank=2.0), "rank=2.0"),
                      (lambda: zo.mezo(loss_fn, key=3), "key=3")]:
    with pytest.raises((ValueError, TypeError), match=match):
      make()
  with pytest.raises(ValueError, match="mode='lineer'"):
    task_lib.split_trainable(params, "lineer")  # was silently "linear"
  with pytest.raises(ValueError, match="name='sgd'"):
    recipes.optimizer("sgd", loss_fn, loss_fn, 1e-3, None, key=key)
  with pytest.raises(ValueError, match="num_draws=0"):
    zo.alignment_draws(lambda *a: None, params, None, params, key, 0)
