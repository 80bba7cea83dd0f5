"""Token fusion: the 1D tokenizer, the fusion objective, Selective Token Editing."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import lfq
from common.models import vit
from methods.token_fusion import fusion
from methods.token_fusion import model as model_lib
from methods.token_fusion import ste
from methods.token_fusion import tokenizer as tok

CONFIG = tok.TokenizerConfig(image_size=16, patch_size=4, num_tokens=6, bits=5, width=16,
                             depth=1, heads=2)


@pytest.fixture(scope="module")
def tok_params():
  return tok.init(jax.random.key(0), CONFIG)


def test_patchify_round_trip():
  x = jnp.arange(2 * 8 * 12, dtype=jnp.float32).reshape(2, 8, 12)
  p = vit.patchify(x, 4)
  assert p.shape == (2, 6, 16)
  np.testing.assert_array_equal(p[0, 1], x[0, :4, 4:8].reshape(-1))
  np.testing.assert_array_equal(vit.unpatchify(p, 4, 8, 12), x)


def test_tokenizer_shapes_and_codes(tok_params):
  x = jax.random.uniform(jax.random.key(1), (3, 16, 16))
  q = tok.encode(tok_params, x, CONFIG)
  assert q.z_hat.shape == (3, 6, 5)
  np.testing.assert_allclose(jnp.linalg.norm(q.z_hat, axis=-1), 1.0, rtol=1e-6)
  ids = tok.tokens(tok_params, x, CONFIG)
  assert ids.shape == (3, 6) and ids.dtype == jnp.int32
  assert int(ids.min()) >= 0 and int(ids.max()) < 2 ** CONFIG.bits
  recon = tok.reconstruct(tok_params, x, CONFIG)
  assert recon.shape == x.shape
  np.testing.assert_allclose(tok.detokenize(tok_params, ids, CONFIG), recon, atol=1e-5)
  # Re-quantising a code returns it: the decoder only ever sees valid codes.
  np.testing.assert_allclose(tok.quantize(q.z_hat, CONFIG), q.z_hat, atol=1e-7)


def test_tokenizer_bad_input(tok_params):
  with pytest.raises(ValueError, match="not divisible by the patch size 4"):
    tok.encode(tok_params, jnp.zeros((1, 18, 18)), CONFIG)
  with pytest.raises(ValueError, match="built for 16x16"):
    tok.encode(tok_params, jnp.zeros((1, 8, 8)), CONFIG)
  with pytest.raises(ValueError, match="not divisible by the patch size 5"):
    tok.init(jax.random.key(0), CONFIG._replace(patch_size=5))


def _smooth_images(key, n):
  """Random sums of three low-frequency cosines: structured 16 x 16 images in [0, 1]."""
  k1, k2, k3 = jax.random.split(key, 3)
  freq = jax.random.randint(k1, (n, 3, 2), 0, 3)
  phase = jax.random.uniform(k2, (n, 3), maxval=2 * jnp.pi)
  amp = jax.random.uniform(k3, (n, 3), minval=0.1, maxval=0.2)
  t = jnp.arange(16) / 16 * 2 * jnp.pi
  waves = jnp.cos(freq[..., 0, None, None] * t[:, None] + freq[..., 1, None, None] * t
                  + phase[..., None, None])
  return 0.5 + jnp.sum(amp[..., None, None] * waves, axis=1)


def test_tokenizer_reconstruction_beats_the_mean_image():
  train = _smooth_images(jax.random.key(2), 512)
  held = _smooth_images(jax.random.key(3), 64)
  config = CONFIG._replace(bits=8, width=32)
  params = tok.init(jax.random.key(0), config)
  loss_fn = tok.make_loss_fn(config)
  import optax  # pylint: disable=import-outside-toplevel
  opt = optax.adam(3e-3)
  state = opt.init(params)

  # 600 runs of one step: bound by running it, so it compiles at XLA's level 1, not
  # the suite's 0 (tests/conftest.py): a third of the CPU time, the same program.
  @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 1})
  def step(params, state, i):
    x = jax.lax.dynamic_slice_in_dim(train, (i % 16) * 32, 32)
    g = jax.grad(lambda p: loss_fn(p, {"images": x}, None)[0])(params)
    updates, state = opt.update(g, state)
    return optax.apply_updates(params, updates), state
  for i in range(600):
    params, state = step(params, state, i)
  recon = jnp.mean((tok.reconstruct(params, held, config) - held) ** 2)
  mean = jnp.mean((jnp.mean(held, axis=(1, 2), keepdims=True) - held) ** 2)
  assert float(recon) < 0.8 * float(mean)


def test_top_b_masks_edit_exactly_b_tokens():
  scores = jax.random.normal(jax.random.key(0), (5, 32))
  for b in (0, 1, 2, 7, 32):
    assert np.all(np.asarray(ste.top_b_mask(scores, b)).sum(-1) == b)
    m = ste.gumbel_top_b_mask(jax.random.key(b), scores, b, 0.5)
    assert np.all(np.asarray(m).sum(-1) == b) and set(np.unique(np.asarray(m))) <= {0.0, 1.0}
  z = lfq.quantize(jax.random.normal(jax.random.key(3), (32, 6)), 1, 6 ** -0.5).z_hat
  delta = jax.random.normal(jax.random.key(4), (32, 6))
  for b in (1, 2, 5):
    positions = ste.random_positions(b, 32, b)
    assert len(set(positions)) == b
    edited = ste.edit(z, delta, ste.fixed_mask("probe", 32, b, positions))
    changed = np.flatnonzero(np.any(np.asarray(edited) != np.asarray(z), axis=-1))
    assert changed.tolist() == list(positions)
  assert np.all(np.asarray(ste.fixed_mask("all", 32, 2)) == 1)
  assert np.all(np.asarray(ste.fixed_mask("none", 32, 2)) == 0)


def test_budget_errors():
  with pytest.raises(ValueError, match=r"token budget 40 must be in \[0, K = 32\]"):
    ste.random_positions(0, 32, 40)
  with pytest.raises(ValueError, match=r"token budget 33 must be in \[0, K = 32\]"):
    ste.fixed_mask("probe", 32, 33, range(33))
  with pytest.raises(ValueError, match="needs 2 positions"):
    ste.fixed_mask("probe", 32, 2, (1,))


def test_gumbel_mask_passes_gradients_to_scores():
  delta = jnp.ones((8, 3))
  target = jnp.zeros((8, 3)).at[2].set(1.0)

  def loss(scores, key):
    m = ste.gumbel_top_b_mask(key, scores, 1, 0.5)
    return jnp.sum((m[:, None] * delta - target) ** 2)
  g = jax.grad(loss)(jnp.zeros(8), jax.random.key(0))
  assert np.all(np.isfinite(g)) and np.any(g != 0)


def test_fusion_loss_closed_forms():
  x = jax.random.uniform(jax.random.key(0), (2, 24, 24))
  loss, parts = fusion.fusion_loss(x, x, x)
  np.testing.assert_allclose(float(loss), 0.0, atol=1e-5)
  np.testing.assert_allclose(float(parts["ssim"]), 1.0, atol=1e-5)
  zero = jnp.zeros_like(x)
  _, parts = fusion.fusion_loss(zero, x, zero)
  np.testing.assert_allclose(float(parts["intensity"]), float(jnp.mean(x)), rtol=1e-6)
  np.testing.assert_allclose(fusion.base_layer(x, 2.0) + fusion.detail_layer(x, 2.0), x,
                             atol=1e-6)
  const = jnp.full((1, 24, 24), 0.3)
  np.testing.assert_allclose(fusion.base_layer(const, 2.0), const, atol=1e-6)
  np.testing.assert_allclose(fusion.gradient_magnitude(const), 0.0, atol=1e-6)


def test_base_layer_is_scipys_mirrored_gaussian():
  from scipy import ndimage  # pylint: disable=import-outside-toplevel
  x = np.asarray(jax.random.uniform(jax.random.key(0), (2, 40, 28)), np.float64)
  ref = x
  for axis in (1, 2):
    ref = ndimage.gaussian_filter1d(ref, 3.0, axis=axis, mode="mirror", truncate=3.0)
  np.testing.assert_allclose(fusion.base_layer(jnp.asarray(x, jnp.float32), 3.0), ref,
                             atol=1e-6)
  with pytest.raises(ValueError, match="sigma 20.0 is too wide for an image side of 28"):
    fusion.base_layer(jnp.zeros((28, 28)), 20.0)


def test_fuse_without_edit_and_with(tok_params):
  spec = model_lib.FusionSpec(CONFIG, fusion.BackboneConfig(4, 1), sigma=2.0)
  frozen = model_lib.Frozen(tok_params, fusion.init(jax.random.key(1), spec.backbone, 16))
  a = jax.random.uniform(jax.random.key(2), (2, 16, 16))
  b = jax.random.uniform(jax.random.key(3), (2, 16, 16))
  params = ste.init(jax.random.key(0), spec.editor, CONFIG.num_tokens, CONFIG.bits)
  params["delta"] = jnp.ones_like(params["delta"])
  loss_fn = model_lib.make_loss_fn(tok_params, spec, budget=2)
  probe = ste.fixed_mask("probe", 6, 2, (1, 4))

  @jax.jit
  def everything(params):
    f2d = fusion.apply(frozen.backbone, a, b, spec.backbone)
    none = model_lib.fuse(frozen, params, a, b, ste.fixed_mask("none", 6, 0), spec)
    edited = model_lib.fuse(frozen, params, a, b, probe, spec)
    inputs = model_lib.token_inputs(frozen, a, b, spec)
    from_inputs = model_lib.fuse_inputs(tok_params, params, inputs, probe, spec)
    grads = jax.grad(lambda p: loss_fn(p, inputs._asdict(), jax.random.key(0))[0])(params)
    return f2d, none, edited, from_inputs, grads
  f2d, none, edited, from_inputs, grads = everything(params)
  np.testing.assert_allclose(none, f2d, atol=1e-6)          # no edit: the 2D pathway
  assert edited.shape == a.shape and np.all(np.isfinite(edited))
  assert float(jnp.max(jnp.abs(edited - none))) > 0
  np.testing.assert_allclose(from_inputs, edited, atol=1e-5)
  assert np.any(np.asarray(grads["delta"]) != 0) and np.any(np.asarray(grads["logits"]) != 0)
  inputs = model_lib.precompute(frozen, a, b, spec, chunk=1)
  np.testing.assert_allclose(inputs.f2d, f2d, atol=1e-6)
  assert model_lib.probed_positions({"logits": jnp.arange(6.0)}, 2) == (4, 5)
