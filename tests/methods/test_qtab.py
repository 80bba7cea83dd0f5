"""Q-Tab's tokenizer, masked generator and row <-> token glue (methods/qtab)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.train import default_train_config, train
from methods.qtab import generator as gen_lib
from methods.qtab import model as model_lib
from methods.qtab import tokenizer as tok_lib
from methods.qtab import training


def _loop(steps: int, batch: int):
  return default_train_config(num_steps=steps, batch_size=batch, progress_bar=False,
                              checkpoint_every=0, log_every=steps, nan_guard=False)


def _rows(n=1024, d=4, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  x[:, 1] = np.tanh(x[:, 0]) + 0.2 * x[:, 1]
  return x


def _fit_tokenizer(tc, x, tmp_path, steps=200):
  return train(init_fn=lambda k: tok_lib.init(k, tc, x.shape[1]), loss_fn=tok_lib.make_loss_fn(tc),
               batch_fn=training.rows_batch_fn(x, 128, "x"),
               optimizer=training.optimizer(3e-3, steps), config=_loop(steps, 128),
               workdir=tmp_path).state.params


def test_tokens_are_the_lfq_signs_of_the_encoder_output():
  tc = tok_lib.TokenizerConfig(bits=5, levels=3, hidden=16)
  x = jnp.asarray(_rows(8))
  params = tok_lib.init(jax.random.PRNGKey(0), tc, 4)
  z = tok_lib.NumericTokenizer(tc, 4).apply(params, x, method=tok_lib.NumericTokenizer.encode)
  residual, bits = z, []
  for l in range(3):  # r_{l+1} = r_l - s_l sign(r_l), s_l = 2^-l
    sign = np.where(residual >= 0, 1, -1)
    bits.append(((sign > 0) * 2 ** np.arange(5)).sum(-1))
    residual = residual - 2.0 ** -l * sign
  np.testing.assert_array_equal(tok_lib.tokenize(params, x, tc), np.stack(bits, -1))


def test_straight_through_gradient_reaches_the_encoder():
  tc = tok_lib.TokenizerConfig(bits=4, levels=2, hidden=8, corruption="none",
                               entropy_weight=0.0, commit_weight=0.0)
  x = jnp.asarray(_rows(16))
  params = tok_lib.init(jax.random.PRNGKey(1), tc, 4)
  grads = jax.grad(lambda p: tok_lib.loss(p, x, jax.random.PRNGKey(0), tc)[0])(params)
  enc = jax.tree.leaves(grads["params"]["encoder"])
  assert all(np.all(np.isfinite(g)) for g in enc)
  assert sum(float(jnp.abs(g).sum()) for g in enc) > 0  # sign() alone has zero gradient


@pytest.mark.parametrize("structure,expected", [
    ("none", [0, 0, 0, 0]), ("uniform", [0.2] * 4), ("fine", [0.05, 0.1, 0.15, 0.2]),
    ("coarse", [0.2, 0.15, 0.1, 0.05])])
def test_corruption_structures(structure, expected):
  tc = tok_lib.TokenizerConfig(levels=4, corruption=structure, corruption_rate=0.2)
  np.testing.assert_allclose(tok_lib.corruption_rates(tc), expected)


def test_corrupted_reconstruction_enters_the_loss_only_with_corruption():
  x = jnp.asarray(_rows(32))
  for structure, present in (("none", False), ("fine", True)):
    tc = tok_lib.TokenizerConfig(bits=4, levels=3, hidden=8, corruption=structure)
    params = tok_lib.init(jax.random.PRNGKey(0), tc, 4)
    _, metrics = tok_lib.loss(params, x, jax.random.PRNGKey(1), tc)
    assert ("recon_corrupted" in metrics) == present


def test_bad_tokenizer_configs_name_the_field():
  with pytest.raises(ValueError, match="corruption"):
    tok_lib.check_config(tok_lib.TokenizerConfig(corruption="everywhere"))
  with pytest.raises(ValueError, match="quantizer"):
    tok_lib.check_config(tok_lib.TokenizerConfig(quantizer="fsq"))
  with pytest.raises(ValueError, match="bits"):
    tok_lib.check_config(tok_lib.TokenizerConfig(bits=20))


def test_residual_reconstruction_error_decreases_with_levels(tmp_path):
  """Trained jointly, each extra residual level halves the quantisation step."""
  x = _rows(1024)
  errors = []
  for levels in (1, 2, 4):
    tc = tok_lib.TokenizerConfig(bits=4, levels=levels, hidden=64, corruption="none")
    params = _fit_tokenizer(tc, x, tmp_path / f"l{levels}")
    spec = model_lib.make_spec(tc, gen_lib.GeneratorConfig(), 4, ())
    errors.append(float(model_lib.reconstruction_error(spec, params, jnp.asarray(x))))
  assert errors[0] > errors[1] > errors[2], errors
  assert errors[2] < 0.5 * errors[0], errors


def test_rvq_picks_the_nearest_code_per_level():
  books = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 3))
  z = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
  q = tok_lib.rvq_quantize(z, books)
  residual = np.asarray(z)
  for l in range(2):
    d = ((residual[:, None] - np.asarray(books[l])) ** 2).sum(-1)
    np.testing.assert_array_equal(q.indices[:, l], d.argmin(1))
    residual = residual - np.asarray(books[l])[d.argmin(1)]
  np.testing.assert_allclose(tok_lib.rvq_dequantize(q.indices, books), z - residual, atol=1e-5)


def test_random_mask_rate_and_at_least_one_masked():
  mask = np.asarray(gen_lib.random_mask(jax.random.PRNGKey(0), 20000, 6))
  assert mask.any(axis=1).all()
  # r ~ U(0, 1): E[fraction masked] = 1/2, lifted slightly by the one forced position.
  assert 0.5 < mask.mean() < 0.56


def test_maskgit_keeps_the_known_positions_and_unmasks_everything():
  sizes, cfg = (16, 16, 3, 5), gen_lib.GeneratorConfig(width=16, depth=1, heads=2)
  params = gen_lib.init(jax.random.PRNGKey(0), sizes, cfg)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 3, (64, 4)), jnp.int32)
  known = jnp.asarray(np.random.default_rng(1).random((64, 4)) < 0.5)
  for order in gen_lib.ORDERS:
    out = np.asarray(gen_lib.sample(params, jax.random.PRNGKey(1), tokens, known, sizes, cfg,
                                    steps=3, order=order))
    np.testing.assert_array_equal(out[np.asarray(known)], np.asarray(tokens)[np.asarray(known)])
    assert np.all(out < np.asarray(sizes)) and np.all(out >= 0)  # no [MASK] id left


def test_cosine_schedule_ends_fully_unmasked():
  assert float(gen_lib.cosine_schedule(0, 8)) == pytest.approx(1.0)
  assert float(gen_lib.cosine_schedule(8, 8)) == pytest.approx(0.0, abs=1e-7)


def test_mlm_loss_traces_once_and_is_finite():
  sizes, cfg = (8, 8, 4), gen_lib.GeneratorConfig(width=16, depth=1, heads=2)
  params = gen_lib.init(jax.random.PRNGKey(0), sizes, cfg)
  loss_fn = jax.jit(chex.assert_max_traces(gen_lib.make_loss_fn(sizes, cfg), n=1))
  for i in range(3):
    batch = {"tokens": jnp.asarray(np.random.default_rng(i).integers(0, 4, (8, 3)), jnp.int32)}
    loss, metrics = loss_fn(params, batch, jax.random.PRNGKey(i))
    assert np.isfinite(loss) and 0 <= metrics["accuracy"] <= 1


def test_generator_learns_a_dependency_and_imputes_it(tmp_path):
  """Column 1 copies column 0 (K = 6): after MLM training, imputing column 1 from
  column 0 recovers it, and unconditional rows keep the dependency."""
  rng = np.random.default_rng(0)
  a = rng.integers(0, 6, 2048)
  x_cat = np.stack([a, a, rng.integers(0, 3, 2048)], 1).astype(np.int32)
  tc, gc = tok_lib.TokenizerConfig(), gen_lib.GeneratorConfig(width=32, depth=2, heads=2)
  spec = model_lib.make_spec(tc, gc, 0, (6, 6, 3))
  params = train(init_fn=lambda k: gen_lib.init(k, spec.vocab_sizes, gc),
                 loss_fn=gen_lib.make_loss_fn(spec.vocab_sizes, gc),
                 batch_fn=training.rows_batch_fn(x_cat, 128, "tokens"),
                 optimizer=training.optimizer(3e-3, 300), config=_loop(300, 128),
                 workdir=tmp_path).state.params
  qp = model_lib.QTabParams({}, params)
  known = np.ones((256, 3), bool)
  known[:, 1] = False
  _, imputed = model_lib.impute(spec, qp, jax.random.PRNGKey(0), np.zeros((256, 0)),
                                x_cat[:256], known, steps=2)
  assert np.mean(np.asarray(imputed)[:, 1] == x_cat[:256, 0]) > 0.95
  np.testing.assert_array_equal(np.asarray(imputed)[:, [0, 2]], x_cat[:256, [0, 2]])
  _, generated, _ = model_lib.generate(spec, qp, jax.random.PRNGKey(1), 512, steps=3)
  assert np.mean(np.asarray(generated)[:, 0] == np.asarray(generated)[:, 1]) > 0.9


def test_rows_round_trip_through_tokens():
  tc = tok_lib.TokenizerConfig(bits=4, levels=2, hidden=8)
  spec = model_lib.make_spec(tc, gen_lib.GeneratorConfig(), 3, (4, 2))
  params = tok_lib.init(jax.random.PRNGKey(0), tc, 3)
  x_num, x_cat = _rows(10, 3), np.tile([[3, 1]], (10, 1)).astype(np.int32)
  tokens = model_lib.row_tokens(spec, params, x_num, x_cat)
  assert tokens.shape == (10, 4) and spec.vocab_sizes == (16, 16, 4, 2)
  rec_num, rec_cat = model_lib.rows_from_tokens(spec, params, tokens)
  np.testing.assert_array_equal(rec_cat, x_cat)
  np.testing.assert_allclose(rec_num, tok_lib.detokenize(params, tokens[:, :2], tc, 3))


def test_rows_batch_fn_is_a_pure_function_and_checks_the_size():
  fn = training.rows_batch_fn(np.arange(100)[:, None], 8, "x")
  np.testing.assert_array_equal(fn(0, 3)["x"], fn(0, 3)["x"])
  with pytest.raises(ValueError, match="fewer than the batch size 8"):
    training.rows_batch_fn(np.arange(5)[:, None], 8, "x")
