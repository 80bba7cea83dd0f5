"""FGR's pieces: low-pass filters and views, losses, the rectifying projection (pytree and
optax), SoftBinnedECE, calibration metrics (against torchmetrics) and temperature scaling."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from methods import fgr
from methods.fgr import filters, losses, metrics, rectify


# --- Filters ---------------------------------------------------------------------------

def _planted(size, channels, low, high, amplitude=0.2):
  """0.5 + a cos(2 pi low x / W) + a cos(2 pi high y / H), in [0.1, 0.9]."""
  t = np.arange(size)
  yy, xx = np.meshgrid(t, t, indexing="ij")
  img = 0.5 + amplitude * np.cos(2 * np.pi * low * xx / size) \
      + amplitude * np.cos(2 * np.pi * high * yy / size)
  return jnp.asarray(np.repeat(img[None, :, :, None], channels, axis=-1), jnp.float32)


def _amplitude(images, fy, fx):
  """|FFT| of channel 0 of image 0 at integer frequency (fy, fx), normalised by H W."""
  spectrum = np.fft.fft2(np.asarray(images)[0, :, :, 0])
  return np.abs(spectrum[fy, fx]) / spectrum.size


@pytest.mark.parametrize("size,channels,high,ratio", [(32, 3, 12, 0.3), (8, 1, 3, 0.4)])
def test_fft_lowpass_removes_a_planted_high_frequency_and_keeps_a_low_one(size, channels,
                                                                          high, ratio):
  x = _planted(size, channels, low=1, high=high)
  before_low, before_high = _amplitude(x, 0, 1), _amplitude(x, high, 0)
  assert before_low == pytest.approx(0.1) and before_high == pytest.approx(0.1)
  y = filters.fft_lowpass(x, ratio)
  radius = size * ratio / 2  # 4.8 cycles per image at 32 px, 1.6 at 8 px
  mask = lambda f: np.exp(-f ** 2 / (2 * (radius / 1.5) ** 2))
  # The component at f = 1 passes, scaled by the mask (0.95 at 32 px, 0.65 at 8 px);
  # the one at f = high is removed.
  assert _amplitude(y, 0, 1) == pytest.approx(0.1 * mask(1), rel=1e-3)
  assert _amplitude(y, 0, 1) > 0.6 * before_low
  assert _amplitude(y, high, 0) < 0.02 * before_high
  # Mean brightness (f = 0) is untouched; the mask is the paper's.
  assert float(y.mean()) == pytest.approx(float(x.mean()), abs=1e-4)
  assert float(filters.gaussian_lowpass_mask(size, size, radius)[0, 1]) == \
      pytest.approx(mask(1))


def test_jpeg_filter_removes_a_planted_high_frequency_dct_component_and_keeps_a_low_one():
  from common.data.corruptions import _dct_matrix

  d = _dct_matrix(8)
  basis = lambda u, v: np.outer(d[u], d[v])  # orthonormal: DCT coefficient 1 at (u, v)
  block = 128.0 + 100.0 * basis(0, 1) + 100.0 * basis(7, 7)  # levels, within 0..255
  x = jnp.asarray(np.round(block)[None, :, :, None] / 255.0, jnp.float32)
  y = np.asarray(filters.jpeg_filter(x, 15))[0, :, :, 0] * 255.0 - 128.0
  coef = d @ y @ d.T
  # Quality 15 steps: 37 at (0, 1), 330 at (7, 7) (the luminance table x 5000 / 15 %).
  assert abs(coef[0, 1] - 100.0) < 15.0
  assert abs(coef[7, 7]) < 10.0


def test_lowpass_views_replace_exactly_a_fraction_rho_and_are_deterministic():
  key = jax.random.PRNGKey(0)
  x = jax.random.uniform(key, (20, 8, 8, 1))
  for kind in filters.FILTERS:
    f = filters.make_filter(kind)
    views, filtered = filters.lowpass_views(jax.random.PRNGKey(1), x, 0.25, f)
    assert views.shape == x.shape and views.dtype == x.dtype
    assert int(filtered.sum()) == 5
    changed = np.asarray(jnp.abs(views - x).max(axis=(1, 2, 3)) > 0)
    np.testing.assert_array_equal(changed, np.asarray(filtered))
    again, _ = filters.lowpass_views(jax.random.PRNGKey(1), x, 0.25, f)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(views))
  none, mask = filters.lowpass_views(key, x, 0.0)
  assert int(mask.sum()) == 0 and bool(jnp.all(none == x))
  assert int(filters.lowpass_views(key, x, 1.0)[1].sum()) == 20
  assert int(filters.epoch_selection(key, 1000, 0.05).sum()) == 50


# --- Losses ----------------------------------------------------------------------------

def test_losses_match_their_formulas():
  logits = jnp.array([[2.0, 1.0, -1.0], [0.0, 0.5, 0.2]])
  labels = jnp.array([0, 2])
  p = np.asarray(jax.nn.softmax(logits))
  p_y = p[[0, 1], [0, 2]]
  runner_up = np.array([p[0, 1], p[1, 1]])
  dfl = -np.mean((1 - p_y + runner_up) ** 5 * np.log(p_y))
  assert float(losses.dual_focal_loss(logits, labels)) == pytest.approx(dfl, rel=1e-5)
  focal = -np.mean((1 - p_y) ** 3 * np.log(p_y))
  assert float(losses.focal_loss(logits, labels)) == pytest.approx(focal, rel=1e-5)
  ce = float(losses.cross_entropy(logits, labels))
  assert ce == pytest.approx(-np.mean(np.log(p_y)), rel=1e-6)
  assert float(losses.focal_loss(logits, labels, gamma=0.0)) == pytest.approx(ce, rel=1e-6)
  assert float(losses.label_smoothing_loss(logits, labels, 0.0)) == pytest.approx(ce, rel=1e-6)
  x, q = losses.mixup(jax.random.PRNGKey(0), jnp.ones((4, 8, 8, 1)), jnp.arange(4), 10)
  assert x.shape == (4, 8, 8, 1) and q.shape == (4, 10)
  np.testing.assert_allclose(np.asarray(q.sum(axis=1)), 1.0, rtol=1e-6)
  grads = jax.jit(jax.grad(lambda z: losses.dual_focal_loss(z, labels)
                           + losses.soft_binned_ece(z, labels)))(logits)
  assert bool(jnp.all(jnp.isfinite(grads)))


def _hard_nearest_centre_error(conf, correct, centers, p):
  bins = np.argmin(np.abs(conf[:, None] - centers[None, :]), axis=1)
  total = 0.0
  for b in range(len(centers)):
    m = bins == b
    if m.any():
      total += m.mean() * abs(correct[m].mean() - conf[m].mean()) ** p
  return total ** (1 / p)


def test_soft_binned_ece_tends_to_the_hard_binned_error_as_temperature_goes_to_zero():
  rng = np.random.default_rng(0)
  conf = rng.uniform(0.3, 1.0, 400)
  # Over- and under-confident stretches, so no binning gives the same |acc - conf| sums.
  correct = (rng.uniform(size=400) < 0.5 + 0.45 * np.sin(25 * conf)).astype(np.float64)
  paper = np.linspace(0, 1, 15)          # the paper's centres: nearest-centre bins
  middles = (np.arange(15) + 0.5) / 15  # centres of the 15 equal-width ECE bins
  # Keep confidences away from the bin boundaries, where the limit is reached slowest.
  for centers in (paper, middles):
    edges = (centers[1:] + centers[:-1]) / 2
    keep = np.min(np.abs(conf[:, None] - edges[None, :]), axis=1) > 0.004
    c, a = conf[keep], correct[keep]
    for p in (2.0, 1.0):
      target = _hard_nearest_centre_error(c, a, centers, p)
      gaps = [abs(float(losses.soft_binned_calibration_error(
          jnp.asarray(c, jnp.float32), jnp.asarray(a, jnp.float32), temperature=t, p=p,
          n_bins=15, centers=jnp.asarray(centers))) - target)
              for t in (1e-2, 1e-3, 1e-4, 1e-5)]
      assert gaps[-1] < 1e-4 and gaps[0] > gaps[-1], gaps
  # With the ECE bins' centres and p = 1 the limit is the usual ECE of 15 bins.
  probs = np.concatenate([c[:, None], np.repeat((1 - c[:, None]) / 9, 9, axis=1)], axis=1)
  labels = np.where(a > 0, 0, 1)  # class 0 is the top class (c >= 0.3 > (1 - c) / 9)
  hard = float(metrics.ece(jnp.asarray(probs, jnp.float32), jnp.asarray(labels)))
  soft = float(losses.soft_binned_calibration_error(
      jnp.asarray(c, jnp.float32), jnp.asarray(a, jnp.float32), temperature=1e-5, p=1.0,
      centers=jnp.asarray(middles)))
  assert soft == pytest.approx(hard, abs=1e-4)


def test_soft_binned_ece_weights_equal_selecting_the_clean_rows():
  key = jax.random.PRNGKey(0)
  logits = 3 * jax.random.normal(key, (32, 10))
  labels = jnp.arange(32) % 10
  clean = jnp.arange(32) % 4 != 0
  weighted = losses.soft_binned_ece(logits, labels, clean.astype(jnp.float32))
  selected = losses.soft_binned_ece(logits[clean], labels[clean])
  assert float(weighted) == pytest.approx(float(selected), rel=1e-5)


# --- Rectification ---------------------------------------------------------------------

def _params(key):
  k = jax.random.split(key, 4)
  return {"params": {"Dense_0": {"kernel": jax.random.normal(k[0], (5, 4)),
                                 "bias": jax.random.normal(k[1], (4,))},
                     "head": {"kernel": jax.random.normal(k[2], (4, 3)),
                              "bias": jax.random.normal(k[3], (3,))}}}


def _dot(a, b):
  return float(sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


def _conflicting_pair(seed):
  g_m = _params(jax.random.PRNGKey(seed))
  g_c = _params(jax.random.PRNGKey(seed + 100))
  g_c = jax.tree.map(lambda a, b: b - 2.0 * a, g_m, g_c)  # pushes <g_m, g_c> negative
  return g_m, g_c


def test_projection_removes_the_conflict_and_leaves_agreeing_gradients_alone():
  for seed in range(5):
    g_m, g_c = _conflicting_pair(seed)
    assert _dot(g_m, g_c) < 0
    g, info = rectify.rectify_grads(g_m, g_c, scope="all")
    # The step -g no longer raises the constraint: <g, g_c> >= 0 (= 0 after projection).
    assert _dot(g, g_c) >= -1e-5 * _dot(g_c, g_c)
    assert _dot(g, g_c) == pytest.approx(0.0, abs=1e-4)
    assert float(info.dot) == pytest.approx(_dot(g_m, g_c), rel=1e-5)
    assert float(info.conflict) == 1.0
    # No conflict (g_c agrees with g_m): g is g_m, bit for bit.
    agree = jax.tree.map(lambda a: 0.5 * a + 0.01, g_m)
    assert _dot(g_m, agree) > 0
    same, info = rectify.rectify_grads(g_m, agree, scope="all")
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(g_m)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(info.conflict) == 0.0


def test_head_scope_and_per_layer_variants():
  g_m, g_c = _conflicting_pair(7)
  g, _ = rectify.rectify_grads(g_m, g_c)  # default: the head, globally
  np.testing.assert_array_equal(np.asarray(g["params"]["Dense_0"]["kernel"]),
                                np.asarray(g_m["params"]["Dense_0"]["kernel"]))
  head_dot = lambda a, b: _dot(a["params"]["head"], b["params"]["head"])
  if head_dot(g_m, g_c) < 0:
    assert head_dot(g, g_c) == pytest.approx(0.0, abs=1e-4)
  # Per layer: every layer's inner product is >= 0 afterwards.
  g, info = rectify.rectify_grads(g_m, g_c, scope="all", per_layer=True)
  for layer in ("Dense_0", "head"):
    assert _dot(g["params"][layer], g_c["params"][layer]) >= -1e-5
  assert 0.0 < float(info.conflict) <= 1.0
  # A predicate selects the head too; a head that matches nothing is refused.
  g2, _ = rectify.rectify_grads(g_m, g_c, head=lambda path: "head" in path)
  g1, _ = rectify.rectify_grads(g_m, g_c)
  np.testing.assert_array_equal(np.asarray(g1["params"]["head"]["kernel"]),
                                np.asarray(g2["params"]["head"]["kernel"]))
  with pytest.raises(ValueError, match="no parameter path matches head='fc_out'"):
    rectify.rectify_grads(g_m, g_c, head="fc_out")


def test_pcgrad_projects_both_sides_and_sums():
  g_m, g_c = _conflicting_pair(3)
  g, _ = rectify.pcgrad(g_m, g_c, scope="all")
  dot, mm, cc = _dot(g_m, g_c), _dot(g_m, g_m), _dot(g_c, g_c)
  expected = jax.tree.map(lambda m, c: (m - dot / cc * c) + (c - dot / mm * m), g_m, g_c)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_optax_transform_composes_with_a_chain_and_never_raises_the_constraint():
  lr = 0.05
  params = _params(jax.random.PRNGKey(0))
  for per_layer in (False, True):
    tx = optax.chain(fgr.fgr_rectify(scope="head", per_layer=per_layer),
                     optax.clip_by_global_norm(1e3), optax.sgd(lr))
    state = tx.init(params)
    step = jax.jit(lambda g, s, c: tx.update(g, s, params, constraint_grads=c))
    for seed in range(3):
      g_m, g_c = _conflicting_pair(seed)
      g_c = {"params": {"Dense_0": jax.tree.map(jnp.zeros_like, g_c["params"]["Dense_0"]),
                        "head": g_c["params"]["head"]}}  # only the head's constraint
      updates, state = step(g_m, state, g_c)
      # The update is the descent direction: <u, g_c> <= 0 means L_cal does not rise.
      assert _dot(updates, g_c) <= 1e-5
      np.testing.assert_allclose(np.asarray(updates["params"]["Dense_0"]["kernel"]),
                                 -lr * np.asarray(g_m["params"]["Dense_0"]["kernel"]),
                                 rtol=1e-6)
      assert float(state[0].dot) == pytest.approx(_dot(g_m, g_c), rel=1e-4)
      # No conflict: plain SGD.
      agree = jax.tree.map(lambda a: 0.3 * a, g_m)
      updates, state = step(g_m, state, agree)
      for u, g in zip(jax.tree.leaves(updates), jax.tree.leaves(g_m)):
        np.testing.assert_allclose(np.asarray(u), -lr * np.asarray(g), rtol=1e-6)
  with pytest.raises(ValueError, match="constraint_grads"):
    tx.update(g_m, tx.init(params), params)


def test_rectified_step_does_not_increase_the_calibration_loss_to_first_order():
  # An overconfident two-layer model (80% of the labels agree with its predictions):
  # here the plain DFL step raises SoftBinnedECE, and FGR's step does not.
  key = jax.random.PRNGKey(0)
  params = {"body": 0.5 * jax.random.normal(key, (6, 8)),
            "head": 3.0 * jax.random.normal(jax.random.fold_in(key, 1), (8, 4))}
  x = jax.random.normal(jax.random.fold_in(key, 2), (64, 6))
  predictions = jnp.argmax(jnp.tanh(x @ params["body"]) @ params["head"], axis=-1)
  y = jnp.where(jnp.arange(64) % 5 == 0, (predictions + 1) % 4, predictions)

  def objectives(p):
    logits = jnp.tanh(x @ p["body"]) @ p["head"]
    return losses.dual_focal_loss(logits, y), losses.soft_binned_ece(logits, y)

  (_, l_cal), g_m, g_c = jax.jit(rectify.value_and_two_grads, static_argnums=0)(
      objectives, params)
  g_alone = jax.jit(jax.grad(lambda p: objectives(p)[1]))(params)
  np.testing.assert_allclose(np.asarray(g_c["head"]), np.asarray(g_alone["head"]),
                             rtol=1e-5, atol=1e-7)
  g, info = rectify.rectify_grads(g_m, g_c, scope="all")
  assert float(info.conflict) == 1.0

  def slope(direction):  # d L_cal along the step -direction of length 1e-3, per unit length
    length = 1e-3
    unit = length / np.sqrt(_dot(direction, direction))
    moved = jax.tree.map(lambda p, d: p - unit * d, params, direction)
    return (float(jax.jit(objectives)(moved)[1]) - float(l_cal)) / length

  plain, rectified = slope(g_m), slope(g)
  assert plain > 0.01                  # the DFL step alone would raise L_cal
  assert rectified < 0.1 * plain       # FGR's step: zero to first order


# --- Metrics ---------------------------------------------------------------------------

def test_ece_family_on_a_hand_computed_case():
  probs = jnp.array([[0.95, 0.05], [0.95, 0.05], [0.65, 0.35], [0.55, 0.45]])
  labels = jnp.array([0, 1, 0, 0])
  # Bins: {0.95, 0.95}: acc 0.5, conf 0.95; {0.65}: acc 1; {0.55}: acc 1.
  expected = 0.5 * 0.45 + 0.25 * 0.35 + 0.25 * 0.45
  assert float(metrics.ece(probs, labels)) == pytest.approx(expected, abs=1e-6)
  # Equal mass with 2 bins: {0.55, 0.65} (acc 1, conf 0.6) and {0.95, 0.95}.
  assert float(metrics.adaptive_ece(probs, labels, n_bins=2)) == \
      pytest.approx(0.5 * 0.4 + 0.5 * 0.45, abs=1e-6)
  assert float(metrics.accuracy(probs, labels)) == 0.75
  brier = np.mean([0.05 ** 2 * 2, 0.95 ** 2 * 2, 0.35 ** 2 * 2, 0.45 ** 2 * 2])
  assert float(metrics.brier_score(probs, labels)) == pytest.approx(brier, abs=1e-6)
  nll = -np.mean(np.log([0.95, 0.05, 0.65, 0.55]))
  assert float(metrics.nll(probs, labels)) == pytest.approx(nll, rel=1e-6)
  # Class-wise, class 0 bins p_0 in {0.95 x2 (freq .5), .65 (1), .55 (1)}; class 1 mirrors.
  class0 = 0.5 * 0.45 + 0.25 * 0.35 + 0.25 * 0.45
  assert float(metrics.classwise_ece(probs, labels)) == pytest.approx(class0, abs=1e-6)


def test_ece_matches_torchmetrics():
  torch = pytest.importorskip("torch")
  tm = pytest.importorskip("torchmetrics.classification")
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(500, 10)) * rng.uniform(0.5, 4.0, size=(500, 1))
  probs = np.asarray(jax.nn.softmax(jnp.asarray(logits, jnp.float32)))
  labels = np.where(rng.uniform(size=500) < 0.6, probs.argmax(1), rng.integers(0, 10, 500))
  ref = tm.MulticlassCalibrationError(num_classes=10, n_bins=15, norm="l1")(
      torch.tensor(probs), torch.tensor(labels))
  assert float(metrics.ece(probs, labels)) == pytest.approx(float(ref), abs=1e-5)


def test_temperature_scaling_recovers_a_planted_temperature():
  key = jax.random.PRNGKey(0)
  true_logits = 2.0 * jax.random.normal(key, (4000, 5))
  labels = jax.random.categorical(jax.random.fold_in(key, 1), true_logits)
  overconfident = 3.0 * true_logits
  t = metrics.fit_temperature(overconfident, labels)
  assert t == pytest.approx(3.0, rel=0.08)
  grid = np.exp(np.linspace(np.log(0.5), np.log(10.0), 400))
  nlls = jax.vmap(lambda g: metrics.temperature_nll(overconfident, labels, g))(grid)
  assert float(metrics.temperature_nll(overconfident, labels, t)) <= float(nlls.min()) + 1e-6
  before = metrics.calibration_metrics(overconfident, labels)
  after = metrics.calibration_metrics(overconfident, labels, temperature=t)
  assert after["ece"] < before["ece"] and after["nll"] < before["nll"]
  assert after["accuracy"] == before["accuracy"]
