"""Unit tests of the susceptibility pieces around the estimator: transformer components
(masks, per-token losses, head ablation), the calibration problem and its step-size
sweep, stratified probes, cluster profiles, and the experiment's config, plots and tables."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common import config as config_lib
from common.data import mechanisms
from common.models import transformer
from experiments.configs import susceptibility as configs
from experiments.plots import susceptibility as plots
import methods.susceptibility as sus


@pytest.fixture(scope="module")
def small_model():
  """A 2-layer, 2-head transformer with an MLP and random weights."""
  model = transformer.Transformer(transformer.llama_config(
      vocab_size=12, d_model=8, num_layers=2, num_heads=2, num_kv_heads=2, d_ff=16))
  return model, transformer.init_params(model, jax.random.PRNGKey(0))


# One token shape for every eager forward pass of `small_model`, so that the tests
# share JAX's per-shape op compilations (head_ablation runs the model eagerly).
_TOKENS_SHAPE = (4, 9)


@pytest.fixture(scope="module")
def regression():
  """One linear-regression problem (d=4, noise 0.5), built once for the module. Its
  shapes are those of the LLC test in test_susceptibility.py, whose eager ops it reuses."""
  return sus.linear_regression(jax.random.PRNGKey(0), dim=4, n=2048, batch_size=128,
                               noise=0.5)


def _leaves_with_paths(tree):
  return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def test_token_losses_match_log_softmax(small_model):
  model, params = small_model
  tokens = jax.random.randint(jax.random.PRNGKey(1), _TOKENS_SHAPE, 0, 12)
  logits = model.apply({"params": params}, tokens[:, :-1])
  expected = -np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)),
                                 np.asarray(tokens[:, 1:, None]), axis=-1)[..., 0]
  np.testing.assert_allclose(sus.token_losses(model, params, tokens), expected, rtol=1e-5)


def test_loss_by_label_matches_numpy():
  rng = np.random.default_rng(0)
  losses, labels = rng.random((4, 9)), rng.integers(-1, 3, (4, 9))
  got = np.asarray(sus.loss_by_label(jnp.asarray(losses), jnp.asarray(labels), 4))
  expected = [losses[labels == i].mean() if np.any(labels == i) else 0.0 for i in range(4)]
  np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_block_masks_select_exactly_their_subtrees(small_model):
  model, params = small_model
  masks = dict(sus.block_masks(params, model.config))
  assert list(masks) == ["L0.attn", "L0.mlp", "L1.attn", "L1.mlp", "embed", "lm_head"]
  for name, mask in masks.items():
    for path, leaf in _leaves_with_paths(mask).items():
      if name in ("embed", "lm_head"):
        inside = path.startswith(name + "/")
      else:
        layer, part = name[1], name.split(".")[1]
        inside = path.startswith((f"layer_{layer}/{part}/", f"layer_{layer}/{part}_norm/"))
      assert np.all(leaf == (1.0 if inside else 0.0)), (name, path)
  # Every parameter but the final norm belongs to exactly one component.
  total = _leaves_with_paths(jax.tree.map(lambda *m: sum(m), *masks.values()))
  for path, leaf in total.items():
    assert np.all(leaf == (0.0 if path.startswith("final_norm") else 1.0)), path


def test_head_masks_split_each_layers_attention(small_model):
  model, params = small_model
  named = sus.head_masks(params, model.config)
  assert [n for n, _ in named] == ["L0H0", "L0H1", "L1H0", "L1H1", "embed", "lm_head"]
  heads = [m for n, m in named if n.startswith("L1")]
  union = _leaves_with_paths(jax.tree.map(lambda a, b: a + b, *heads))
  for path, leaf in union.items():
    inside = path.startswith("layer_1/attn/") and "norm" not in path
    assert np.all(leaf == (1.0 if inside else 0.0)), path   # disjoint, and cover the layer


def test_head_ablation_is_zero_for_a_head_that_is_already_off(small_model):
  model, params = small_model
  mask = transformer.component_mask(params, model.config, 0, 1)
  params = jax.tree.map(lambda p, m: p * (1 - m), params, mask)   # head L0H1 silenced
  tokens = jax.random.randint(jax.random.PRNGKey(2), _TOKENS_SHAPE, 0, 12)
  labels = jax.random.randint(jax.random.PRNGKey(3), _TOKENS_SHAPE, -1, 2)
  ablation = sus.head_ablation(model, params, tokens, labels, 2)
  assert ablation.shape == (4, 2)
  np.testing.assert_array_equal(ablation[1], 0.0)
  assert np.any(ablation[[0, 2, 3]] != 0.0)


def test_subtree_mask_selects_prefixes():
  tree = {"a": {"b": jnp.ones(2), "c": jnp.ones(3)}, "d": jnp.ones(1)}
  mask = sus.subtree_mask(tree, [("a", "c"), ("d",)])
  assert mask["a"]["b"].tolist() == [0, 0] and mask["a"]["c"].tolist() == [1, 1, 1]
  assert mask["d"].tolist() == [1]


def test_linear_regression_starts_at_the_least_squares_minimum(regression):
  problem = regression
  grad = jax.grad(problem.loss_fn)(problem.w0, (problem.x, problem.y))
  np.testing.assert_allclose(grad["w"], 0.0, atol=1e-4)
  assert problem.true_llc == 2.0 and problem.curvature == 4.0
  xb, yb = problem.batch_fn(jnp.int32(3))
  assert xb.shape == (128, 4) and yb.shape == (128,)
  np.testing.assert_array_equal(problem.batch_fn(jnp.int32(3))[0], xb)


def test_step_size_sweep_equals_separate_runs(regression):
  problem = regression
  kwargs = dict(n_beta=4.0, localization=1.0, num_chains=2, num_burnin=3, num_draws=5)
  key = jax.random.PRNGKey(4)
  traces = sus.step_size_sweep(problem.loss_fn, problem.w0, problem.batch_fn, key,
                               [1e-3, 1e-1], **kwargs)
  assert traces.shape == (2, 2, 8)
  # Every run_chains call compiles anew, so one separate run is compared (the last
  # row); the first row starts where it does (w0, same minibatch) and then moves apart.
  single = sus.run_chains(problem.loss_fn, problem.w0, problem.batch_fn, key,
                          step_size=1e-1, **kwargs).loss
  np.testing.assert_allclose(traces[1], single, rtol=1e-5)
  np.testing.assert_array_equal(traces[0, :, 0], traces[1, :, 0])
  assert not np.allclose(traces[0, :, 1:], traces[1, :, 1:])


def test_stratified_sample_is_balanced_and_deterministic():
  labels = np.array([0] * 10 + [1] * 2 + [-1] * 5 + [2] * 7 + [3] * 4)
  picks = mechanisms.stratified_sample(labels, per_mechanism=3, seed=0)
  assert np.all(np.diff(picks) > 0)
  assert np.bincount(labels[picks]).tolist() == [3, 2, 3, 3]
  np.testing.assert_array_equal(picks, mechanisms.stratified_sample(labels, 3, seed=0))


def test_cluster_profiles_rank_members_by_distance_to_the_centre():
  rng = np.random.default_rng(0)
  z = rng.normal(size=(30, 4))
  labels = rng.integers(0, 3, 30)
  for c, profile in enumerate(sus.cluster_profiles(z, labels)):
    assert sorted(profile.members) == np.flatnonzero(labels == c).tolist()
    np.testing.assert_allclose(profile.centre, z[labels == c].mean(axis=0))
    dist = np.linalg.norm(z[profile.members] - profile.centre, axis=1)
    assert np.all(np.diff(dist) >= 0)


def test_config_presets_nest_and_errors_name_the_dotted_key():
  tiny = configs.get_config("tiny")
  assert tiny.parts == ("synthetic",) and tiny.train.num_steps == 1000
  assert tiny.synthetic.sgld.draws == 40 and tiny.synthetic.sgld.batch == 4
  assert tiny.synthetic.sgld.chains == 4 and tiny.lm.d_model == 32
  paper = configs.get_config("paper")
  assert paper.lm.d_model == 512 and paper.real_lm.sgld.batch == 32
  for key, value, message in (("synthetic.sgld.n_beta", -1.0, "0: the default"),
                              ("model.d_model", 30, "multiple of model.num_heads"),
                              ("calibration.batch_size", 10 ** 6, "calibration.n"),
                              ("lm.num_heads", 3, "lm.num_heads")):
    config = configs.get_config("quick")
    with config.unlocked():
      node, leaf = config_lib.get(config, key.rsplit(".", 1)[0]), key.rsplit(".", 1)[1]
      node[leaf] = value
    with pytest.raises(config_lib.ConfigError, match=message):
      configs.validate(config)


def test_plots_and_tables_are_written(tmp_path):
  rng = np.random.default_rng(0)
  names = ["L0H0", "L0H1", "embed"]
  labels = rng.integers(0, 4, 40)
  arrays = dict(chi=rng.normal(size=(3, 40)), labels=labels, select=np.arange(40),
                ours=rng.integers(0, 3, 40))
  syn = dict(names=names, ari_susceptibility=0.3, ari_gradient=0.2, ari_residual=0.1)
  cal = dict(rows=[dict(step_size=e, llc=5.0 + e, stderr=0.1) for e in (1e-3, 1e-2)],
             true_llc=5.0, n_beta=10.0, trace_stride=2,
             traces={"0.001": [0.5, 0.4, 0.6], "0.01": [0.7, 0.6, 0.8]})
  cal_config = configs.get_config("quick").calibration
  written = [plots.calibration(cal, cal_config, str(tmp_path / "calibration.png")),
             plots.synthetic_heatmap(syn, arrays, str(tmp_path / "heatmap.png")),
             plots.component_traces(names, rng.normal(size=(3, 20)), "traces",
                                    str(tmp_path / "traces.png"))]
  for path in written:
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  table = plots.synthetic_table(syn, arrays, str(tmp_path / "synthetic.md"))
  counts = [line for line in open(table) if line.startswith("| 0 |")]
  assert counts and counts[0].split("|")[2].strip() == str(int(np.sum(arrays["ours"] == 0)))
  assert plots.show_bytes(b"a|b\n`") == "a\\|b⏎'"
  lm = dict(rows=[dict(cluster=0, size=3, top_tokens="`a`", strongest="L0.attn (+1.0)",
                       examples="`ab[c]`")], tokens=3, names=["L0.attn"])
  text = open(plots.lm_table(lm, "tiny", str(tmp_path / "lm.md"))).read()
  assert text.startswith("# Susceptibility clusters of the tiny byte-level LM (3 validation")
  assert "| 0 | 3 | `a` | L0.attn (+1.0) | `ab[c]` |" in text
  assert sorted(os.listdir(tmp_path)) == ["calibration.png", "heatmap.png", "lm.md",
                                          "synthetic.md", "traces.png"]
