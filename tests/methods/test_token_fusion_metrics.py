"""Tests of methods/token_fusion/metrics: hand-computed cases, and numpy transcriptions
of the CDDFuse evaluator (utils/Evaluator.py, on 0..255 images) on small images."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage
from scipy.signal import convolve2d
from skimage.metrics import structural_similarity
from sklearn.metrics import mutual_info_score

from methods.token_fusion import metrics

_QABF_MAX = 0.9994 * 0.9879 / (1 + math.exp(-4.4))


# ----------------------------------------- the evaluator, transcribed (0..255 scale)


def _ref_en(img):
  a = np.uint8(np.round(img)).flatten()
  h = np.bincount(a) / a.shape[0]
  return -sum(h * np.log2(h + (h == 0)))


def _ref_sf(img):
  return np.sqrt(np.mean((img[:, 1:] - img[:, :-1]) ** 2)
                 + np.mean((img[1:, :] - img[:-1, :]) ** 2))


def _ref_mi(f, a, b):
  return mutual_info_score(f.flatten(), a.flatten()) + mutual_info_score(f.flatten(),
                                                                         b.flatten())


def _ref_corr(u, v):
  du, dv = u - u.mean(), v - v.mean()
  return np.sum(du * dv) / np.sqrt(np.sum(du ** 2) * np.sum(dv ** 2))


def _ref_scd(f, a, b):
  return _ref_corr(a, f - b) + _ref_corr(b, f - a)


def _ref_vifp(ref, dist):
  sigma_nsq, eps, num, den = 2, 1e-10, 0.0, 0.0
  for scale in range(1, 5):
    n = 2 ** (4 - scale + 1) + 1
    sd = n / 5.0
    m = (n - 1.0) / 2.0
    y, x = np.ogrid[-m:m + 1, -m:m + 1]
    h = np.exp(-(x * x + y * y) / (2.0 * sd * sd))
    h[h < np.finfo(h.dtype).eps * h.max()] = 0
    win = np.rot90(h / h.sum(), 2)
    if scale > 1:
      ref = convolve2d(ref, win, mode="valid")[::2, ::2]
      dist = convolve2d(dist, win, mode="valid")[::2, ::2]
    mu1, mu2 = convolve2d(ref, win, mode="valid"), convolve2d(dist, win, mode="valid")
    sigma1_sq = convolve2d(ref * ref, win, mode="valid") - mu1 * mu1
    sigma2_sq = convolve2d(dist * dist, win, mode="valid") - mu2 * mu2
    sigma12 = convolve2d(ref * dist, win, mode="valid") - mu1 * mu2
    sigma1_sq[sigma1_sq < 0] = 0
    sigma2_sq[sigma2_sq < 0] = 0
    g = sigma12 / (sigma1_sq + eps)
    sv_sq = sigma2_sq - g * sigma12
    g[sigma1_sq < eps] = 0
    sv_sq[sigma1_sq < eps] = sigma2_sq[sigma1_sq < eps]
    sigma1_sq[sigma1_sq < eps] = 0
    g[sigma2_sq < eps] = 0
    sv_sq[sigma2_sq < eps] = 0
    sv_sq[g < 0] = sigma2_sq[g < 0]
    g[g < 0] = 0
    sv_sq[sv_sq <= eps] = eps
    num += np.sum(np.log10(1 + g * g * sigma1_sq / (sv_sq + sigma_nsq)))
    den += np.sum(np.log10(1 + sigma1_sq / sigma_nsq))
  vifp = num / den
  return 1.0 if np.isnan(vifp) else vifp


def _ref_sobel(img):
  h1 = np.array([[1, 2, 1], [0, 0, 0], [-1, -2, -1]], np.float64)
  h3 = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float64)
  sx, sy = convolve2d(img, h3, mode="same"), convolve2d(img, h1, mode="same")
  g = np.sqrt(sx * sx + sy * sy)
  angle = np.zeros_like(img)
  angle[sx == 0] = math.pi / 2
  angle[sx != 0] = np.arctan(sy[sx != 0] / sx[sx != 0])
  return g, angle


def _ref_q(a_x, g_x, a_f, g_f):
  ratio = np.zeros_like(a_x)
  ratio[g_x > g_f] = g_f[g_x > g_f] / g_x[g_x > g_f]
  ratio[g_x == g_f] = g_f[g_x == g_f]
  ratio[g_x < g_f] = g_x[g_x < g_f] / g_f[g_x < g_f]
  orientation = 1 - np.abs(a_x - a_f) / (math.pi / 2)
  return (0.9994 / (1 + np.exp(-15 * (ratio - 0.5)))
          * 0.9879 / (1 + np.exp(-22 * (orientation - 0.8))))


def _ref_qabf(f, a, b):
  (g_a, a_a), (g_b, a_b), (g_f, a_f) = _ref_sobel(a), _ref_sobel(b), _ref_sobel(f)
  q_af, q_bf = _ref_q(a_a, g_a, a_f, g_f), _ref_q(a_b, g_b, a_f, g_f)
  return np.sum(q_af * g_a + q_bf * g_b) / np.sum(g_a + g_b)


def _ref_fusion_ssim(f, a, b):
  # skimage 0.19's defaults for float images: win_size 7, uniform, data_range 2.
  return (structural_similarity(f, a, data_range=2, win_size=7)
          + structural_similarity(f, b, data_range=2, win_size=7))


def _ref_all(a, b, f):
  """The evaluator's eight figures on [0, 1] images (it works on 0..255)."""
  a, b, f = 255.0 * a, 255.0 * b, 255.0 * f
  return {"EN": _ref_en(f), "SD": np.std(f), "SF": _ref_sf(f), "MI": _ref_mi(f, a, b),
          "SCD": _ref_scd(f, a, b), "VIF": _ref_vifp(a, f) + _ref_vifp(b, f),
          "Qabf": _ref_qabf(f, a, b), "SSIM": _ref_fusion_ssim(f, a, b)}


# ------------------------------------------------------------------------- fixtures


def _image(rng, n=64, smooth=2.0):
  """A float64 8-bit-grid image in [0, 1]: smooth noise plus a step edge and a flat
  patch (the cases where the evaluator's masks and zero handling matter)."""
  x = ndimage.gaussian_filter(rng.normal(size=(n, n)), smooth)
  x = (x - x.min()) / (x.max() - x.min())
  x[:, n // 2:] = 0.3 + 0.7 * x[:, n // 2:]
  x[4:14, 4:14] = 0.5
  return np.round(255 * x) / 255


@pytest.fixture(scope="module")
def images():
  rng = np.random.default_rng(0)
  a, b, gt = _image(rng), _image(rng, smooth=1.0), _image(rng)
  f = np.round(255 * (0.5 * a + 0.5 * b)) / 255
  return a, b, f, gt


@pytest.fixture(scope="module")
def jit_all():
  return jax.jit(metrics.all_metrics)


# ------------------------------------------------------------------------ hand cases


def _levels(values):
  return jnp.asarray(np.asarray(values, np.float64) / 255, jnp.float32)


def test_entropy_hand_cases():
  assert float(metrics.entropy(jnp.full((4, 4), 0.4))) == 0.0
  two = _levels([[0, 255, 0, 255]] * 4)
  four = _levels([[0, 85, 170, 255]] * 4)
  np.testing.assert_allclose(metrics.entropy(two), 1.0, atol=1e-6)
  np.testing.assert_allclose(metrics.entropy(four), 2.0, atol=1e-6)


def test_standard_deviation_and_spatial_frequency_hand_case():
  # levels 10 j + 40 i: var = var(10 j) + var(40 i) = 125 + 2000; the horizontal
  # differences are all 10 and the vertical ones all 40, so SF = sqrt(100 + 1600).
  f = _levels(10 * np.arange(4)[None, :] + 40 * np.arange(4)[:, None])
  np.testing.assert_allclose(metrics.standard_deviation(f), math.sqrt(2125), rtol=1e-6)
  np.testing.assert_allclose(metrics.spatial_frequency(f), math.sqrt(1700), rtol=1e-6)


def test_mutual_information_identities():
  rng = np.random.default_rng(1)
  x, y = (jnp.asarray(rng.integers(0, 2, (64, 64)), jnp.float32) for _ in range(2))
  ln2 = math.log(2)
  # MI(X, X) = H(X) (nats); independent binary noise: MI ~ 1 / (2 N ln 2) ~ 0.
  np.testing.assert_allclose(metrics.mutual_information(x, x, x),
                             2 * ln2 * metrics.entropy(x), rtol=1e-5)
  assert float(metrics.mutual_information(x, x, y)) / 2 < 1e-2
  # MI(a, b, a) = H(a) + MI(b, a); MI(a, b, b) = MI(a, b) + H(b): the cross terms agree.
  a, b = (jnp.asarray(_image(rng, 32), jnp.float32) for _ in range(2))
  cross_1 = metrics.mutual_information(a, b, a) - ln2 * metrics.entropy(a)
  cross_2 = metrics.mutual_information(a, b, b) - ln2 * metrics.entropy(b)
  np.testing.assert_allclose(cross_1, cross_2, rtol=1e-4)


def test_scd_hand_case():
  rng = np.random.default_rng(2)
  a, b = 0.5 * rng.random((2, 16, 16))
  # F - B = A and F - A = B: both correlations are 1.
  np.testing.assert_allclose(metrics.scd(a, b, a + b), 2.0, atol=1e-5)


def test_qabf_extremes():
  x = jnp.zeros((32, 32)).at[:, 16:].set(1.0).at[8:12, 4:9].set(1.0)
  # f == a == b: every orientation agrees (Q_a = Ta / (1 + e^-4.4)) and, as every
  # edge is >= 255 on the 0..255 scale, the evaluator's G = g_F gives Q_g = Tg.
  np.testing.assert_allclose(metrics.qabf(x, x, x), _QABF_MAX, rtol=1e-6)
  # A black fused image keeps no edge: G = 0, Q_g = Tg / (1 + e^7.5).
  assert float(metrics.qabf(x, x.T, jnp.zeros_like(x))) < 1e-3


def test_vif_identity_and_noise():
  rng = np.random.default_rng(3)
  x = jnp.asarray(_image(rng), jnp.float32)
  noise = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
  np.testing.assert_allclose(metrics.vifp_mscale(x, x), 1.0, atol=1e-6)
  np.testing.assert_allclose(metrics.vif(x, x, x), 2.0, atol=1e-6)
  values = [float(metrics.vifp_mscale(x, jnp.clip(x + s * noise, 0, 1)))
            for s in (0.01, 0.05, 0.2)]
  assert 1.0 > values[0] > values[1] > values[2] > 0.0


def test_ssim_matches_skimage():
  rng = np.random.default_rng(4)
  x, y = _image(rng, 32), _image(rng, 32)
  y = 0.6 * x + 0.4 * y
  expected = structural_similarity(x, y, data_range=1, gaussian_weights=True, sigma=1.5,
                                   use_sample_covariance=False)
  np.testing.assert_allclose(metrics.ssim(jnp.asarray(x, jnp.float32), y), expected,
                             atol=1e-4)
  np.testing.assert_allclose(metrics.ssim(x, x), 1.0, atol=1e-6)


def test_psnr_closed_forms():
  np.testing.assert_allclose(metrics.psnr(jnp.zeros((4, 4)), jnp.full((4, 4), 0.1)),
                             20.0, rtol=1e-6)
  # peak max(F) = 0.5, MSE = (0.25 + 0.25) / 2: 10 log10(1) = 0 dB.
  np.testing.assert_allclose(
      metrics.fusion_psnr(jnp.zeros((4, 4)), jnp.ones((4, 4)), jnp.full((4, 4), 0.5)),
      0.0, atol=1e-6)


# ----------------------------------------------------- against the evaluator, in numpy


def test_all_metrics_match_the_evaluator(images, jit_all):
  a, b, f, gt = images
  got = jit_all(*(jnp.asarray(x, jnp.float32) for x in (a, b, f, gt)))
  assert set(got) == set(metrics.NO_REFERENCE + metrics.FULL_REFERENCE)
  expected = _ref_all(a, b, f)
  for name in metrics.NO_REFERENCE:
    np.testing.assert_allclose(got[name], expected[name], rtol=2e-4, err_msg=name)
  np.testing.assert_allclose(
      got["SSIM_gt"], structural_similarity(f, gt, data_range=1, gaussian_weights=True,
                                            sigma=1.5, use_sample_covariance=False),
      atol=1e-4)
  np.testing.assert_allclose(got["PSNR_gt"], -10 * np.log10(np.mean((f - gt) ** 2)),
                             rtol=1e-5)
  mse = 255 ** 2 * (np.mean((a - f) ** 2) + np.mean((b - f) ** 2)) / 2
  fusion_psnr = 10 * np.log10((255 * f.max()) ** 2 / mse)   # the evaluator's PSNR
  np.testing.assert_allclose(metrics.fusion_psnr(a, b, f), fusion_psnr, rtol=1e-5)


def test_float64_matches_the_evaluator_closely(images, x64):
  a, b, f, _ = images
  got = metrics.all_metrics(a, b, f)
  assert tuple(got) == metrics.NO_REFERENCE
  assert all(v.dtype == jnp.float64 for v in got.values())
  expected = _ref_all(a, b, f)
  for name in metrics.NO_REFERENCE:
    np.testing.assert_allclose(got[name], expected[name], rtol=1e-9, err_msg=name)


def test_jit_and_vmap_give_the_individual_values(images, jit_all):
  a, b, f, gt = (jnp.asarray(x, jnp.float32) for x in images)
  batch = [jnp.stack(v) for v in ((a, b, gt), (b, gt, a), (f, f, b))]
  batched = jax.jit(jax.vmap(metrics.all_metrics))(*batch)
  for i in range(3):
    single = jit_all(*(x[i] for x in batch))
    for name, value in single.items():
      np.testing.assert_allclose(batched[name][i], value, rtol=1e-5, err_msg=name)
  np.testing.assert_allclose(jax.vmap(metrics.entropy)(batch[0]),
                             [metrics.entropy(x) for x in batch[0]], rtol=1e-6)


def test_metadata():
  assert set(metrics.HIGHER_IS_BETTER) == set(metrics.NO_REFERENCE
                                              + metrics.FULL_REFERENCE)
  assert all(metrics.HIGHER_IS_BETTER.values())


@pytest.mark.parametrize("call, match", [
    (lambda x: metrics.entropy(x[None]), "f must be a 2-D grayscale image"),
    (lambda x: metrics.scd(x, x[:, :-1], x), "a and b must have the same shape"),
    (lambda x: metrics.vif(x, x, x[:20, :20]), "a and f must have the same shape"),
    (lambda x: metrics.vifp_mscale(x[:40, :40], x[:40, :40]),
     "ref must be at least 41x41"),
    (lambda x: metrics.qabf(x, x, 255 * x), r"f must hold values in \[0, 1\]"),
    (lambda x: metrics.psnr(x, x.at[0, 0].set(jnp.nan)), "y has a non-finite value"),
    (lambda x: metrics.all_metrics(x, x, x, ground_truth=x[:-1]),
     "a and ground_truth must have the same shape"),
])
def test_bad_input_names_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call(jnp.full((48, 48), 0.5))
