"""Image-fusion quality metrics, as the field's common evaluator computes them.

The evaluator is ``utils/Evaluator.py`` of CDDFuse (Zhao et al., CVPR 2023,
github.com/Zhaozixiang1228/MMIF-CDDFuse), which later fusion papers reuse; its formulas
and constants carry over here, written in jnp. Images are grayscale 2-D arrays with
float values in [0, 1] (an 8-bit image divided by 255). The evaluator reads 8-bit
images as floats on the 0..255 scale, so every metric whose value depends on the scale
is computed on ``255 * x`` (each docstring says which scale its value is on):

* EN, entropy (bits): H(F) = -sum_l p_l log2 p_l over the 256-bin histogram of the
  uint8-rounded image. Information content of the fused image.
* SD, standard deviation (0..255 scale): sqrt(mean((F - mean F)^2)). Contrast.
* SF, spatial frequency (0..255 scale): sqrt(mean (F[i, j+1] - F[i, j])^2 +
  mean (F[i+1, j] - F[i, j])^2). Gradient (detail) content.
* MI, mutual information (nats): MI(A, F) + MI(B, F),
  MI(X, F) = sum_{x, f} p(x, f) log(p(x, f) / (p(x) p(f))) over the 256 x 256 joint
  histogram of the uint8-rounded images. Information carried over from the sources.
  The evaluator calls ``sklearn.metrics.mutual_info_score``, whose logarithm is the
  natural one: the figures papers report are in nats (divide by ln 2 for bits).
* SCD, sum of the correlations of differences (Aslantas & Bendes 2015):
  corr(F - B, A) + corr(F - A, B). Scale-free.
* VIF, visual information fidelity (Sheikh & Bovik 2006, pixel-domain multi-scale
  VIFP): VIFP(A, F) + VIFP(B, F), VIFP(R, D) = sum_{scales, pixels}
  log10(1 + g^2 s_R^2 / (s_V^2 + s_N^2)) / sum log10(1 + s_R^2 / s_N^2), with the local
  gain g = s_RD / s_R^2, the distortion variance s_V^2 = s_D^2 - g s_RD, local moments
  under a Gaussian window per scale (N = 17, 9, 5, 3; sigma = N / 5), the image
  filtered and decimated by 2 between scales, and the noise variance s_N^2 = 2 on the
  0..255 scale.
* Qabf, edge preservation (Petrovic & Xydeas 2000): with Sobel gradient magnitude g
  and angle alpha of each image, Q^{XF} = Q_g Q_a,
  Q_g = Tg / (1 + exp(kg (G^{XF} - Dg))), Q_a = Ta / (1 + exp(ka (A^{XF} - Da))),
  G^{XF} the ratio of the smaller to the larger magnitude,
  A^{XF} = 1 - |alpha_X - alpha_F| / (pi / 2), and
  Qabf = sum(Q^{AF} g_A + Q^{BF} g_B) / sum(g_A + g_B), (Tg, kg, Dg, Ta, ka, Da) =
  (0.9994, -15, 0.5, 0.9879, -22, 0.8). 0 (no edge kept) to about 0.975.
* SSIM (Wang et al. 2004) of F against each source, summed: SSIM(A, F) + SSIM(B, F),
  with the evaluator's settings (see ``fusion_ssim``). ``ssim`` itself is the standard
  Gaussian-window SSIM, used against a ground truth.
* PSNR: ``psnr`` against a ground truth (data range 1) and the evaluator's
  ``fusion_psnr`` (peak max(F), error averaged over the two sources).

Where the evaluator has a quirk, it is kept so that figures compare with papers; each
is named in its function's docstring (Qabf's ratio when both magnitudes are equal,
VIFP = 1 when undefined, SSIM's data range of 2 on the 0..255 scale). The arithmetic
follows the input dtype (float32, or float64 under jax x64) where the evaluator mixes
float32 and float64: on a 256 x 256 photograph with flat sky, float32 values agree
with a float64 run of the evaluator's code to 1e-6 relative, float64 ones to 1e-9.
For the exact figures of a paper's pipeline (which saves the fused image as an 8-bit
PNG), pass images on the 8-bit grid, ``jnp.round(255 x) / 255``.

Every function is pure jnp, jit-able and vmap-able over a leading batch axis
(``jax.vmap(entropy)(images)``). At the Python boundary, one-line ValueErrors name the
argument unless the images are 2-D, of one shape, large enough (41 x 41 for VIF and
``all_metrics``: the smallest size at which the evaluator's fourth VIF scale has a
window position; 11 x 11 for ``ssim``, 7 x 7 for ``fusion_ssim``) and, for concrete
arrays, finite and in [0, 1] up to half a grey level (a 0..255 image is refused).

References:
  Zhao et al., CDDFuse: Correlation-Driven Dual-Branch Feature Decomposition for
  Multi-Modality Image Fusion, CVPR 2023 (the evaluator).
  Petrovic & Xydeas, Objective image fusion performance measure, Electronics Letters
  36(4), 2000.
  Sheikh & Bovik, Image information and visual quality, IEEE TIP 15(2), 2006.
  Wang et al., Image quality assessment: from error visibility to structural
  similarity, IEEE TIP 13(4), 2004.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from common import checks

Array = jax.Array

NO_REFERENCE = ("EN", "SD", "SF", "MI", "SCD", "VIF", "Qabf", "SSIM")
FULL_REFERENCE = ("SSIM_gt", "PSNR_gt")
HIGHER_IS_BETTER = {name: True for name in NO_REFERENCE + FULL_REFERENCE}

SCALE = 255.0                  # the evaluator's grey-level scale
LEVELS = 256                   # histogram bins (uint8 grey levels)
VIF_MIN_SIZE = 41              # the smallest side for which all four VIF scales exist
_RANGE_TOLERANCE = 0.5 / SCALE  # half a grey level outside [0, 1] still rounds inside

# Qabf constants (Petrovic & Xydeas 2000, as the evaluator).
_TG, _KG, _DG = 0.9994, -15.0, 0.5
_TA, _KA, _DA = 0.9879, -22.0, 0.8
# scipy.signal.convolve2d(x, h, mode="same") is a correlation with h flipped; these are
# the evaluator's h3 (x) and h1 (y) Sobel kernels, flipped.
_SOBEL_X = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float64)[::-1, ::-1]
_SOBEL_Y = np.array([[1, 2, 1], [0, 0, 0], [-1, -2, -1]], np.float64)[::-1, ::-1]

_VIF_SIGMA_NSQ = 2.0
_VIF_EPS = 1e-10

_SSIM_K1, _SSIM_K2 = 0.01, 0.03
_SSIM_SIGMA, _SSIM_TRUNCATE = 1.5, 3.5   # skimage's Gaussian window: 11 x 11
_EVAL_SSIM_WIN = 7                       # skimage's default uniform window
_EVAL_SSIM_RANGE = 2.0                   # skimage 0.19's data range for float images


# ----------------------------------------------------------------------------- checks


def _prepare(fn: str, min_size: int, **images) -> list[Array]:
  """The images as float arrays of one dtype, after the boundary checks."""
  arrays = [checks.as_float(name, x) for name, x in images.items()]
  names = list(images)
  for name, x in zip(names, arrays):
    if x.ndim != 2:
      raise ValueError(f"{name} must be a 2-D grayscale image (H, W), got shape "
                       f"{tuple(x.shape)}; vmap {fn} for a batch")
  for name, x in zip(names[1:], arrays[1:]):
    checks.same_shape(f"{names[0]} and {name}", arrays[0], x)
  for name, x in zip(names, arrays):
    if min(x.shape) < min_size:
      raise ValueError(f"{name} must be at least {min_size}x{min_size} for {fn}, got "
                       f"shape {tuple(x.shape)}")
  for name, x in zip(names, arrays):
    if checks.is_concrete(x):
      checks.check_finite(name, x)
      lo, hi = float(jnp.min(x)), float(jnp.max(x))
      if lo < -_RANGE_TOLERANCE or hi > 1.0 + _RANGE_TOLERANCE:
        raise ValueError(f"{name} must hold values in [0, 1] (an 8-bit image divided "
                         f"by 255), got values in [{lo:.4g}, {hi:.4g}]")
  dtype = jnp.result_type(*arrays)
  return [x.astype(dtype) for x in arrays]


# ---------------------------------------------------------------------------- helpers


def _levels(x: Array) -> Array:
  """The uint8 grey levels round(255 x) (half to even, as np.round), as int32."""
  return jnp.clip(jnp.round(x * SCALE), 0, LEVELS - 1).astype(jnp.int32)


def _plogp_sum(p: Array, log) -> Array:
  """sum p log p over the nonzero entries."""
  return jnp.sum(jnp.where(p > 0, p * log(jnp.where(p > 0, p, 1)), 0))


def _conv_valid(x: Array, kernel: np.ndarray) -> Array:
  """Cross-correlation of each image of ``x`` (n, H, W) with each kernel (k, kh, kw)
  at the positions where the window fits: (n, k, H - kh + 1, W - kw + 1).

  Full precision on every backend (accelerators would otherwise round to bf16/tf32).
  """
  kernel = jnp.asarray(kernel, x.dtype)[:, None]
  return lax.conv_general_dilated(x[:, None], kernel, (1, 1), "VALID",
                                  precision=lax.Precision.HIGHEST)


def _separable_valid(x: Array, taps: np.ndarray) -> Array:
  """Valid filtering of each image of ``x`` (n, H, W) with the window outer(taps,
  taps)."""
  x = _conv_valid(x, np.asarray(taps)[None, :, None])[:, 0]
  return _conv_valid(x, np.asarray(taps)[None, None, :])[:, 0]


def _gaussian_taps(size: int, sigma: float) -> np.ndarray:
  """The normalised 1-D Gaussian of ``size`` taps (float64 constants)."""
  r = (size - 1) / 2.0
  g = np.exp(-np.arange(-r, r + 1) ** 2 / (2.0 * sigma * sigma))
  return g / g.sum()


def _corr(u: Array, v: Array) -> Array:
  """Pearson correlation of two images (NaN when one is constant, as the evaluator)."""
  du, dv = u - jnp.mean(u), v - jnp.mean(v)
  return jnp.sum(du * dv) / jnp.sqrt(jnp.sum(du * du) * jnp.sum(dv * dv))


# ------------------------------------------------------------------------ the metrics


@jax.jit
def _entropy(f: Array) -> Array:
  counts = jnp.bincount(_levels(f).ravel(), length=LEVELS)
  return -_plogp_sum(counts.astype(f.dtype) / f.size, jnp.log2)


def entropy(f: Array) -> Array:
  """EN: -sum_l p_l log2 p_l over the 256-bin histogram of round(255 f).

  Args:
    f: the fused image (H, W), values in [0, 1], H, W >= 1.

  Returns:
    The entropy in bits, 0 (constant image) to 8.

  Example:
    >>> entropy(jnp.array([[0.0, 1.0], [0.0, 1.0]]))   # two equal levels: 1 bit
  """
  (f,) = _prepare("entropy", 1, f=f)
  return _entropy(f)


@jax.jit
def _standard_deviation(f: Array) -> Array:
  return jnp.std(f * SCALE)


def standard_deviation(f: Array) -> Array:
  """SD: sqrt(mean((F - mean F)^2)) with F = 255 f (population, as np.std).

  Args:
    f: the fused image (H, W), values in [0, 1].

  Returns:
    The standard deviation on the 0..255 scale.

  Example:
    >>> standard_deviation(jnp.array([[0.0, 1.0], [1.0, 0.0]]))   # 127.5
  """
  (f,) = _prepare("standard_deviation", 1, f=f)
  return _standard_deviation(f)


@jax.jit
def _spatial_frequency(f: Array) -> Array:
  x = f * SCALE
  row = jnp.mean((x[:, 1:] - x[:, :-1]) ** 2)
  col = jnp.mean((x[1:, :] - x[:-1, :]) ** 2)
  return jnp.sqrt(row + col)


def spatial_frequency(f: Array) -> Array:
  """SF: sqrt(mean_{i,j} (F[i, j+1] - F[i, j])^2 + mean_{i,j} (F[i+1, j] - F[i, j])^2),
  F = 255 f; each mean over the differences that exist.

  Args:
    f: the fused image (H, W), values in [0, 1], H, W >= 2.

  Returns:
    The spatial frequency on the 0..255 scale.

  Example:
    >>> spatial_frequency(jnp.array([[0.0, 1.0], [0.0, 1.0]]))   # 255
  """
  (f,) = _prepare("spatial_frequency", 2, f=f)
  return _spatial_frequency(f)


def _mutual_information_pair(x: Array, f: Array) -> Array:
  joint = jnp.bincount((_levels(x) * LEVELS + _levels(f)).ravel(), length=LEVELS ** 2)
  pxf = joint.astype(f.dtype).reshape(LEVELS, LEVELS) / f.size
  px, pf = jnp.sum(pxf, 1), jnp.sum(pxf, 0)
  # MI = sum p(x, f) log p(x, f) - sum p(x) log p(x) - sum p(f) log p(f); clipped at
  # 0 as sklearn's mutual_info_score.
  mi = _plogp_sum(pxf, jnp.log) - _plogp_sum(px, jnp.log) - _plogp_sum(pf, jnp.log)
  return jnp.maximum(mi, 0)


@jax.jit
def _mutual_information(a: Array, b: Array, f: Array) -> Array:
  return _mutual_information_pair(a, f) + _mutual_information_pair(b, f)


def mutual_information(a: Array, b: Array, f: Array) -> Array:
  """MI: MI(A, F) + MI(B, F), MI(X, F) = sum_{x, f} p(x, f) log(p(x, f) / (p(x) p(f)))
  over the 256 x 256 joint histogram of the uint8-rounded images.

  Natural logarithm, as the evaluator (``sklearn.metrics.mutual_info_score``): the
  value is in nats, the unit papers that use this evaluator report. MI(X, X) = H(X).

  Args:
    a, b: the source images (H, W), values in [0, 1].
    f: the fused image, same shape.

  Returns:
    The summed mutual information in nats (divide by ln 2 for bits).

  Example:
    >>> x = jnp.array([[0.0, 1.0], [0.0, 1.0]])
    >>> mutual_information(x, x, x)   # 2 H(x) = 2 ln 2
  """
  a, b, f = _prepare("mutual_information", 1, a=a, b=b, f=f)
  return _mutual_information(a, b, f)


@jax.jit
def _scd(a: Array, b: Array, f: Array) -> Array:
  return _corr(f - b, a) + _corr(f - a, b)


def scd(a: Array, b: Array, f: Array) -> Array:
  """SCD: corr(F - B, A) + corr(F - A, B), Pearson correlations over the pixels.

  Scale-free (the same on [0, 1] and 0..255). NaN when an image or difference is
  constant, as the evaluator.

  Args:
    a, b: the source images (H, W), values in [0, 1].
    f: the fused image, same shape.

  Returns:
    The sum of the correlations of differences, in [-2, 2].

  Example:
    >>> a, b = 0.5 * jax.random.uniform(jax.random.PRNGKey(0), (2, 32, 32))
    >>> scd(a, b, a + b)   # F - B = A and F - A = B: 2
  """
  a, b, f = _prepare("scd", 2, a=a, b=b, f=f)
  return _scd(a, b, f)


def _sobel(x: Array) -> tuple[Array, Array]:
  """Gradient magnitude and angle as the evaluator's ``Qabf_getArray`` (0..255 scale).

  Sobel filtering as scipy ``convolve2d(mode="same")``: zero padding, so the border
  of a non-zero image has edges. The angle is arctan(gy / gx), and pi / 2 where
  gx == 0.
  """
  padded = jnp.pad(x * SCALE, 1)[None]
  gx, gy = _conv_valid(padded, np.stack([_SOBEL_X, _SOBEL_Y]))[0]
  magnitude = jnp.sqrt(gx * gx + gy * gy)
  flat = gx == 0
  angle = jnp.where(flat, math.pi / 2, jnp.arctan(gy / jnp.where(flat, 1, gx)))
  return magnitude, angle


def _edge_preservation(g_x: Array, a_x: Array, g_f: Array, a_f: Array) -> Array:
  """Q^{XF} per pixel, as the evaluator's ``Qabf_getQabf``."""
  # The evaluator's G^{XF}: g_F / g_X where g_X > g_F, g_X / g_F where g_X < g_F and
  # (its quirk, kept) g_F itself where they are equal, instead of 1.
  ratio = jnp.where(g_x > g_f, g_f / jnp.where(g_x > g_f, g_x, 1),
                    jnp.where(g_x < g_f, g_x / jnp.where(g_x < g_f, g_f, 1), g_f))
  orientation = 1 - jnp.abs(a_x - a_f) / (math.pi / 2)
  q_g = _TG / (1 + jnp.exp(_KG * (ratio - _DG)))
  q_a = _TA / (1 + jnp.exp(_KA * (orientation - _DA)))
  return q_g * q_a


@jax.jit
def _qabf(a: Array, b: Array, f: Array) -> Array:
  (g_a, a_a), (g_b, a_b), (g_f, a_f) = _sobel(a), _sobel(b), _sobel(f)
  q_af = _edge_preservation(g_a, a_a, g_f, a_f)
  q_bf = _edge_preservation(g_b, a_b, g_f, a_f)
  return jnp.sum(q_af * g_a + q_bf * g_b) / jnp.sum(g_a + g_b)


def qabf(a: Array, b: Array, f: Array) -> Array:
  """Qabf: sum(Q^{AF} g_A + Q^{BF} g_B) / sum(g_A + g_B), Q^{XF} = Q_g Q_a
  (Petrovic & Xydeas 2000, as the evaluator).

  Q_g = 0.9994 / (1 + exp(-15 (G - 0.5))), Q_a = 0.9879 / (1 + exp(-22 (A - 0.8))),
  G the ratio of the smaller to the larger Sobel magnitude (the evaluator takes g_F
  itself where the magnitudes are equal, which on the 0..255 scale is >= 1 wherever
  there is an edge) and A = 1 - |alpha_X - alpha_F| / (pi / 2), alpha = arctan(gy / gx)
  (pi / 2 where gx = 0). Sobel filters with zero padding, on 255 x. NaN when all three
  images are 0 (no gradient anywhere).

  Args:
    a, b: the source images (H, W), values in [0, 1].
    f: the fused image, same shape.

  Returns:
    The edge preservation, 0 (none) to 0.9994 * 0.9879 / (1 + e^-4.4) = 0.9753 (f
    equal to both sources, with strong edges).

  Example:
    >>> x = jnp.zeros((32, 32)).at[:, 16:].set(1.0)
    >>> qabf(x, x, x)   # 0.9753
  """
  a, b, f = _prepare("qabf", 1, a=a, b=b, f=f)
  return _qabf(a, b, f)


@jax.jit
def _vifp_mscale(ref: Array, dist: Array) -> Array:
  images = jnp.stack([ref, dist]) * SCALE
  num = den = 0.0
  for scale in range(1, 5):
    n = 2 ** (4 - scale + 1) + 1
    taps = _gaussian_taps(n, n / 5.0)
    if scale > 1:
      images = _separable_valid(images, taps)[:, ::2, ::2]
    ref, dist = images
    products = jnp.stack([ref * ref, dist * dist, ref * dist])
    moments = _separable_valid(jnp.concatenate([images, products]), taps)
    mu1, mu2 = moments[0], moments[1]
    # One op for the three (co)variances: for dist == ref they round alike in any
    # compiled program, so VIFP(R, R) is 1 exactly.
    sigma1_sq, sigma2_sq, sigma12 = moments[2:] - jnp.stack([mu1 * mu1, mu2 * mu2, mu1 * mu2])
    sigma1_sq, sigma2_sq = jnp.maximum(sigma1_sq, 0), jnp.maximum(sigma2_sq, 0)
    # The evaluator's masks, in its order.
    g = sigma12 / (sigma1_sq + _VIF_EPS)
    sv_sq = sigma2_sq - g * sigma12
    low1 = sigma1_sq < _VIF_EPS
    g = jnp.where(low1, 0, g)
    sv_sq = jnp.where(low1, sigma2_sq, sv_sq)
    sigma1_sq = jnp.where(low1, 0, sigma1_sq)
    low2 = sigma2_sq < _VIF_EPS
    g = jnp.where(low2, 0, g)
    sv_sq = jnp.where(low2, 0, sv_sq)
    sv_sq = jnp.where(g < 0, sigma2_sq, sv_sq)
    g = jnp.maximum(g, 0)
    sv_sq = jnp.where(sv_sq <= _VIF_EPS, _VIF_EPS, sv_sq)
    num = num + jnp.sum(jnp.log10(1 + g * g * sigma1_sq / (sv_sq + _VIF_SIGMA_NSQ)))
    den = den + jnp.sum(jnp.log10(1 + sigma1_sq / _VIF_SIGMA_NSQ))
  vifp = num / den
  return jnp.where(jnp.isnan(vifp), jnp.ones_like(vifp), vifp)


def vifp_mscale(ref: Array, dist: Array) -> Array:
  """VIFP(R, D) = sum_{s, p} log10(1 + g^2 s_R^2 / (s_V^2 + 2)) /
  sum_{s, p} log10(1 + s_R^2 / 2) over 4 scales s and pixels p (Sheikh & Bovik 2006,
  the evaluator's ``compare_viff``).

  At scale s a Gaussian window of N = 2^(5 - s) + 1 taps (sigma = N / 5) gives the
  local variances s_R^2, s_D^2 and covariance s_RD ('valid' positions only), the gain
  g = s_RD / s_R^2 and the distortion variance s_V^2 = s_D^2 - g s_RD (with the
  evaluator's clamps: g = 0 and s_V^2 = s_D^2 where s_R^2 < 1e-10, g = s_V^2 = 0 where
  s_D^2 < 1e-10, g < 0 set to 0 with s_V^2 = s_D^2, s_V^2 >= 1e-10); between scales the
  images are filtered and decimated by 2. Noise variance 2 on the 0..255 scale. 1 when
  the ratio is undefined (constant reference), as the evaluator.

  Args:
    ref: the reference image (H, W), values in [0, 1], H, W >= 41 (the smallest
      size for which all four scales have a window position).
    dist: the distorted (fused) image, same shape.

  Returns:
    VIFP, 1 for dist == ref, lower as information is lost (it can exceed 1 for a
    contrast-enhanced dist).

  Example:
    >>> x = jax.random.uniform(jax.random.PRNGKey(0), (64, 64))
    >>> vifp_mscale(x, x)   # 1.0
  """
  ref, dist = _prepare("vifp_mscale", VIF_MIN_SIZE, ref=ref, dist=dist)
  return _vifp_mscale(ref, dist)


@jax.jit
def _vif(a: Array, b: Array, f: Array) -> Array:
  return _vifp_mscale(a, f) + _vifp_mscale(b, f)


def vif(a: Array, b: Array, f: Array) -> Array:
  """VIF: VIFP(A, F) + VIFP(B, F), with ``vifp_mscale`` (the evaluator's ``VIFF``).

  Args:
    a, b: the source images (H, W), values in [0, 1], H, W >= 41.
    f: the fused image, same shape.

  Returns:
    The summed VIFP (2 when f equals both sources).

  Example:
    >>> x = jax.random.uniform(jax.random.PRNGKey(0), (64, 64))
    >>> vif(x, x, x)   # 2.0
  """
  a, b, f = _prepare("vif", VIF_MIN_SIZE, a=a, b=b, f=f)
  return _vif(a, b, f)


def _ssim_map(mu_x, mu_y, var_x, var_y, cov, c1, c2) -> Array:
  return ((2 * mu_x * mu_y + c1) * (2 * cov + c2)
          / ((mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2)))


@jax.jit
def _ssim(x: Array, y: Array) -> Array:
  radius = int(_SSIM_TRUNCATE * _SSIM_SIGMA + 0.5)
  taps = _gaussian_taps(2 * radius + 1, _SSIM_SIGMA)
  images = jnp.stack([x, y, x * x, y * y, x * y])
  mu_x, mu_y, xx, yy, xy = _separable_valid(images, taps)
  var_x, var_y, cov = xx - mu_x * mu_x, yy - mu_y * mu_y, xy - mu_x * mu_y
  c1, c2 = _SSIM_K1 ** 2, _SSIM_K2 ** 2   # data range 1
  return jnp.mean(_ssim_map(mu_x, mu_y, var_x, var_y, cov, c1, c2))


def ssim(x: Array, y: Array) -> Array:
  """SSIM = mean_p (2 mu_x mu_y + C1)(2 s_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(s_x^2 +
  s_y^2 + C2)) (Wang et al. 2004).

  Gaussian window (sigma 1.5, 11 x 11), population moments, C1 = (0.01 L)^2,
  C2 = (0.03 L)^2 with data range L = 1, averaged over the positions where the window
  fits: skimage's ``structural_similarity(x, y, data_range=1, gaussian_weights=True,
  sigma=1.5, use_sample_covariance=False)``. For fusion against a ground truth.

  Args:
    x, y: images (H, W), values in [0, 1], H, W >= 11.

  Returns:
    The mean SSIM, 1 for x == y.

  Example:
    >>> x = jax.random.uniform(jax.random.PRNGKey(0), (32, 32))
    >>> ssim(x, x)   # 1.0
  """
  x, y = _prepare("ssim", 11, x=x, y=y)
  return _ssim(x, y)


def _evaluator_ssim(x: Array, y: Array) -> Array:
  # skimage 0.19's structural_similarity(x, y) defaults on the 0..255 images: a 7 x 7
  # uniform window, sample moments (1 / 48), data range 2 (its float dtype range).
  # The moments are two-pass (deviations from the window mean), so exactly flat
  # windows give exact zeros: with C2 = 0.0036, E[x^2] - E[x]^2 in float32 would not.
  x, y = x * SCALE, y * SCALE
  k = _EVAL_SSIM_WIN
  h, w = x.shape[0] - k + 1, x.shape[1] - k + 1
  mu_x, mu_y = _conv_valid(jnp.stack([x, y]), np.ones((1, k, k)))[:, 0] / (k * k)

  def add_window_offset(index, sums):
    i, j = index // k, index % k
    dx = lax.dynamic_slice(x, (i, j), (h, w)) - mu_x
    dy = lax.dynamic_slice(y, (i, j), (h, w)) - mu_y
    return sums[0] + dx * dx, sums[1] + dy * dy, sums[2] + dx * dy

  zeros = jnp.zeros_like(mu_x)
  var_x, var_y, cov = lax.fori_loop(0, k * k, add_window_offset, (zeros,) * 3)
  n = k * k - 1
  c1 = (_SSIM_K1 * _EVAL_SSIM_RANGE) ** 2
  c2 = (_SSIM_K2 * _EVAL_SSIM_RANGE) ** 2
  return jnp.mean(_ssim_map(mu_x, mu_y, var_x / n, var_y / n, cov / n, c1, c2))


@jax.jit
def _fusion_ssim(a: Array, b: Array, f: Array) -> Array:
  return _evaluator_ssim(f, a) + _evaluator_ssim(f, b)


def fusion_ssim(a: Array, b: Array, f: Array) -> Array:
  """SSIM for fusion without ground truth: SSIM_e(F, A) + SSIM_e(F, B), as the
  evaluator.

  SSIM_e is what the evaluator's ``skimage.metrics.structural_similarity(F, A)`` call
  computes with skimage 0.19 (CDDFuse's pinned version) on its float32 0..255 images:
  a 7 x 7 uniform window, sample moments, and data range 2 (skimage's range for float
  images), so C1 = 0.02^2 and C2 = 0.06^2 on the 0..255 scale (almost no
  stabilisation); the mean is over the positions where the window fits. This is not
  ``ssim`` (Gaussian window, data range 1); papers' SSIM figures come from this one.

  Args:
    a, b: the source images (H, W), values in [0, 1], H, W >= 7.
    f: the fused image, same shape.

  Returns:
    The summed SSIM, 2 when f equals both sources.

  Example:
    >>> x = jax.random.uniform(jax.random.PRNGKey(0), (32, 32))
    >>> fusion_ssim(x, x, x)   # 2.0
  """
  a, b, f = _prepare("fusion_ssim", _EVAL_SSIM_WIN, a=a, b=b, f=f)
  return _fusion_ssim(a, b, f)


@jax.jit
def _psnr(x: Array, y: Array) -> Array:
  return -10 * jnp.log10(jnp.mean((x - y) ** 2))


def psnr(x: Array, y: Array) -> Array:
  """PSNR = 10 log10(L^2 / mean((x - y)^2)) with data range L = 1.

  Args:
    x, y: images (H, W), values in [0, 1].

  Returns:
    The PSNR in dB (inf for x == y).

  Example:
    >>> psnr(jnp.zeros((4, 4)), jnp.full((4, 4), 0.1))   # 20 dB
  """
  x, y = _prepare("psnr", 1, x=x, y=y)
  return _psnr(x, y)


@jax.jit
def _fusion_psnr(a: Array, b: Array, f: Array) -> Array:
  mse = (jnp.mean((a - f) ** 2) + jnp.mean((b - f) ** 2)) / 2
  return 10 * jnp.log10(jnp.max(f) ** 2 / mse)


def fusion_psnr(a: Array, b: Array, f: Array) -> Array:
  """The evaluator's fusion PSNR: 10 log10(max(F)^2 / MSE), MSE = (mean (A - F)^2 +
  mean (B - F)^2) / 2.

  The peak is the fused image's maximum, not the data range, so the value is the same
  on [0, 1] and on 0..255. Not among the eight metrics the evaluator's test scripts
  report (``NO_REFERENCE``), hence not in ``all_metrics``.

  Args:
    a, b: the source images (H, W), values in [0, 1].
    f: the fused image, same shape.

  Returns:
    The PSNR in dB.

  Example:
    >>> fusion_psnr(jnp.zeros((4, 4)), jnp.ones((4, 4)), jnp.full((4, 4), 0.5))
    >>> # max 0.5, MSE 0.25: 0 dB
  """
  a, b, f = _prepare("fusion_psnr", 1, a=a, b=b, f=f)
  return _fusion_psnr(a, b, f)


def all_metrics(a: Array, b: Array, f: Array,
                ground_truth: Array | None = None) -> dict[str, Array]:
  """Every no-reference metric of fused image f from sources a, b (``NO_REFERENCE``),
  plus ``FULL_REFERENCE`` = ("SSIM_gt", "PSNR_gt") = (ssim(f, gt), psnr(f, gt)) when a
  ground truth is given.

  "SSIM" is ``fusion_ssim`` (the evaluator's), "VIF" is ``vif``, "MI" is in nats; all
  metrics are higher-is-better (``HIGHER_IS_BETTER``).

  Args:
    a, b: the source images (H, W), values in [0, 1], H, W >= 41 (VIF's minimum).
    f: the fused image, same shape.
    ground_truth: optional reference image, same shape.

  Returns:
    A dict from metric name to a scalar array, in the order NO_REFERENCE +
    FULL_REFERENCE (under ``jax.jit`` jax returns a dict's keys sorted).

  Example:
    >>> a, b = jax.random.uniform(jax.random.PRNGKey(0), (2, 64, 64))
    >>> all_metrics(a, b, (a + b) / 2)["Qabf"]
  """
  images = dict(a=a, b=b, f=f)
  if ground_truth is not None:
    images["ground_truth"] = ground_truth
  arrays = _prepare("all_metrics", VIF_MIN_SIZE, **images)
  a, b, f = arrays[:3]
  out = {
      "EN": _entropy(f),
      "SD": _standard_deviation(f),
      "SF": _spatial_frequency(f),
      "MI": _mutual_information(a, b, f),
      "SCD": _scd(a, b, f),
      "VIF": _vif(a, b, f),
      "Qabf": _qabf(a, b, f),
      "SSIM": _fusion_ssim(a, b, f),
  }
  if ground_truth is not None:
    out["SSIM_gt"] = _ssim(f, arrays[3])
    out["PSNR_gt"] = _psnr(f, arrays[3])
  return out
