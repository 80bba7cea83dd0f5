"""FGR's low-pass views: an FFT Gaussian low-pass and the JPEG-style DCT quantiser, and
the replacement of a fraction rho of the training images by filtered views.

FGR (Frequency-aware Gradient Rectification, ICML 2026; code YilinZhang107/FGR-Calib)
filters a fraction rho = 5% of the training images each epoch to weaken spurious
high-frequency cues. Two filters, each with five strengths ("severities"); the paper
draws one of severities 1, 2, 3 per image, uniformly:

    jpeg_compression (default)  the JPEG round trip at quality (25, 18, 15, 10, 7)[s - 1]
                                (`common.data.corruptions.jpeg_round_trip`)
    fft_lowpass                 x -> |IFFT2( FFT2(x) * M )| per channel, clipped, with the
                                Gaussian mask centred on frequency 0
                                    M(f) = exp(-|f|^2 / (2 sigma^2)),
                                    sigma = R / 1.5,  R = max(min(H, W) r / 2, 1),
                                r = (0.8, 0.6, 0.4, 0.3, 0.2)[s - 1]; |f| in cycles per
                                image, so R is at most the Nyquist radius min(H, W) / 2.

The modulus after the inverse FFT is the paper's: the mask is real and symmetric, so
the result is real up to rounding, and the modulus only folds the (small) negative
ringing of strong filters back up.

Which images are filtered. The paper draws, at the start of each epoch with FGR
active, int(N rho) training indices without replacement (`epoch_selection`); the
batches are then ordinary shuffled batches, so a batch holds about rho of filtered
images. `lowpass_views` does the same within one batch (exactly int(B rho) images),
for loops that draw batches rather than epochs. Both return the mask of filtered
images: the ID calibration constraint is computed on the others.

Example:
    >>> key = jax.random.PRNGKey(0)
    >>> x = jax.random.uniform(key, (16, 8, 8, 1))
    >>> views, filtered = lowpass_views(key, x, 0.25, make_filter("fft_lowpass"))
    >>> int(filtered.sum())
    4
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from common.data import corruptions

Array = jax.Array
FilterFn = Callable[[Array, Array], Array]  # (key, images) -> filtered images

FILTERS = ("jpeg_compression", "fft_lowpass")
FFT_RATIOS = (0.8, 0.6, 0.4, 0.3, 0.2)
JPEG_QUALITIES = (25, 18, 15, 10, 7)
DEFAULT_SEVERITIES = (1, 2, 3)


def nyquist_radius(height: int, width: int) -> float:
  """The largest frequency radius both axes resolve: min(H, W) / 2 cycles per image."""
  return min(height, width) / 2.0


def gaussian_lowpass_mask(height: int, width: int, radius: float) -> Array:
  """(H, W) Gaussian mask over the unshifted FFT grid, exp(-|f|^2 / (2 (radius/1.5)^2)).

  f = (f_y, f_x) are integer frequencies (`fftfreq(n) * n`), so the mask equals the
  paper's mask on the fftshift-ed spectrum centred at (H // 2, W // 2).

  Args:
    height, width: the image size.
    radius: the cutoff radius R in cycles per image, in (0, min(H, W) / 2].

  Raises:
    ValueError: radius <= 0 or above the Nyquist radius min(H, W) / 2.

  Example:
    >>> float(gaussian_lowpass_mask(8, 8, 2.0)[0, 0])
    1.0
  """
  checks.scalar("radius", radius)
  nyquist = nyquist_radius(height, width)
  if radius > nyquist:
    raise ValueError(f"cutoff radius={radius:g} is larger than the Nyquist radius "
                     f"{nyquist:g} of {height}x{width} images; expected 0 < radius <= "
                     f"min(H, W) / 2")
  fy = np.fft.fftfreq(height) * height
  fx = np.fft.fftfreq(width) * width
  d2 = fy[:, None] ** 2 + fx[None, :] ** 2
  sigma = radius / 1.5
  return jnp.asarray(np.exp(-d2 / (2.0 * sigma ** 2)))


@jax.jit
def _apply_mask(images: Array, mask: Array) -> Array:
  spectrum = jnp.fft.fft2(images, axes=(1, 2))
  out = jnp.abs(jnp.fft.ifft2(spectrum * mask[None, :, :, None], axes=(1, 2)))
  return jnp.clip(out, 0.0, 1.0).astype(images.dtype)


def fft_lowpass(images: Array, ratio: float) -> Array:
  """The paper's FFT Gaussian low-pass at cutoff ratio r (module docstring):

      R = max(min(H, W) r / 2, 1),   x -> clip(|IFFT2(FFT2(x) exp(-|f|^2 / (2 (R/1.5)^2)))|)

  Args:
    images: (N, H, W, C) floats in [0, 1], C = 1 or 3.
    ratio: r in (0, 1]; r > 1 would put the cutoff beyond the Nyquist radius. The
      paper's severities 1..5 use 0.8, 0.6, 0.4, 0.3, 0.2.

  Returns:
    The filtered images, same shape and dtype.

  Example:
    >>> y = fft_lowpass(jnp.full((1, 8, 8, 1), 0.5), 0.4)   # a constant passes unchanged
  """
  corruptions.check_images(images)
  _, h, w, _ = images.shape
  checks.scalar("ratio", ratio)
  radius = max(min(h, w) * float(ratio) / 2.0, 1.0)
  if radius > nyquist_radius(h, w):
    raise ValueError(f"ratio={ratio:g} gives a cutoff radius {radius:g} larger than the "
                     f"Nyquist radius {nyquist_radius(h, w):g} of {h}x{w} images; expected "
                     "ratio in (0, 1]")
  return _apply_mask(images, gaussian_lowpass_mask(h, w, radius).astype(images.dtype))


def jpeg_filter(images: Array, quality: int) -> Array:
  """The JPEG round trip at `quality` (the paper's default filter; qualities 25, 18, 15).

  One implementation with the corruption suite: `common.data.corruptions.jpeg_round_trip`.
  """
  return corruptions.jpeg_round_trip(images, quality)


def _check_filter(kind: str) -> None:
  if kind not in FILTERS:
    raise ValueError(f"unknown filter {kind!r}; expected one of {', '.join(FILTERS)}")


def filter_images(images: Array, kind: str, severity: int) -> Array:
  """All images through filter `kind` at one severity in 1..5 (module docstring).

  Example:
    >>> y = filter_images(jnp.zeros((2, 8, 8, 1)), "jpeg_compression", 1)   # quality 25
  """
  _check_filter(kind)
  severity = corruptions.check_severity(severity)
  if kind == "fft_lowpass":
    return fft_lowpass(images, FFT_RATIOS[severity - 1])
  return jpeg_filter(images, JPEG_QUALITIES[severity - 1])


def make_filter(kind: str = "jpeg_compression",
                severities: Sequence[int] = DEFAULT_SEVERITIES) -> FilterFn:
  """A filter `(key, images) -> views` that gives each image one of `severities`, drawn
  uniformly from `key` (the paper: jpeg_compression, severities 1, 2, 3).

  Every image is filtered at every listed severity and the drawn one is kept, so the
  result is a fixed-shape jnp computation (jit-able) at len(severities) times the
  cost of one filter.

  Args:
    kind: "jpeg_compression" or "fft_lowpass".
    severities: a non-empty sequence of ints in 1..5.

  Example:
    >>> f = make_filter("fft_lowpass", (4, 5))
    >>> views = f(jax.random.PRNGKey(0), jnp.zeros((3, 8, 8, 1)))
  """
  _check_filter(kind)
  severities = tuple(corruptions.check_severity(s) for s in severities)
  if not severities:
    raise ValueError("severities is empty; expected at least one severity in 1..5")

  def apply(key: Array, images: Array) -> Array:
    corruptions.check_images(images)
    return _pick_views(key, *[filter_images(images, kind, s) for s in severities])

  return apply


@jax.jit
def _pick_views(key: Array, *views: Array) -> Array:
  """Image i from views[s_i], s_i uniform over the views."""
  pick = jax.random.randint(key, (views[0].shape[0],), 0, len(views))
  stacked = jnp.stack(views)
  return jnp.take_along_axis(stacked, pick[None, :, None, None, None], axis=0)[0]


@functools.partial(jax.jit, static_argnames=("n", "k"))
def _selection(key: Array, n: int, k: int) -> Array:
  order = jax.random.permutation(key, n)
  return jnp.zeros((n,), bool).at[order[:k]].set(True)


@jax.jit
def _replace(selected: Array, views: Array, images: Array) -> Array:
  return jnp.where(selected[:, None, None, None], views, images)


def _check_rho(rho: float) -> float:
  if isinstance(rho, jax.core.Tracer):
    raise TypeError("rho must be a Python float (it fixes how many images are filtered), "
                    "got a traced value")
  checks.scalar("rho", rho, strict=False, high=1.0)
  return float(rho)


def epoch_selection(key: Array, num_examples: int, rho: float) -> Array:
  """(num_examples,) bool: exactly int(num_examples rho) indices, drawn without
  replacement (the paper redraws them at the start of every epoch with FGR active).

  Raises:
    ValueError: rho outside [0, 1].

  Example:
    >>> int(epoch_selection(jax.random.PRNGKey(0), 100, 0.05).sum())
    5
  """
  rho = _check_rho(rho)
  checks.positive_int("num_examples", num_examples)
  return _selection(key, int(num_examples), int(num_examples * rho))


def apply_views(key: Array, images: Array, selected: Array,
                filter_fn: FilterFn | None = None) -> Array:
  """Images with the `selected` (N,) ones replaced by their filtered views.

  Example:
    >>> x = jnp.zeros((4, 8, 8, 1))
    >>> y = apply_views(jax.random.PRNGKey(0), x, jnp.array([True, False, False, False]))
  """
  corruptions.check_images(images)
  if jnp.shape(selected) != images.shape[:1]:
    raise ValueError(f"selected has shape {jnp.shape(selected)}; expected "
                     f"({images.shape[0]},), one flag per image")
  filter_fn = make_filter() if filter_fn is None else filter_fn
  return _replace(selected, filter_fn(key, images), images)


def lowpass_views(key: Array, images: Array, rho: float,
                  filter_fn: FilterFn | None = None) -> tuple[Array, Array]:
  """A batch with exactly int(B rho) images, drawn without replacement, replaced by
  low-pass views, and the mask of those images.

      S ~ uniform subsets of size floor(B rho),   x_i <- filter(x_i) for i in S

  Args:
    key: PRNG key for the subset and the filter's severities.
    images: (B, H, W, C) floats in [0, 1], C = 1 or 3.
    rho: the filtered fraction in [0, 1] (paper: 0.05), a Python float.
    filter_fn: `(key, images) -> views`, default `make_filter()` (JPEG, severities
      1, 2, 3).

  Returns:
    (views (B, H, W, C), filtered (B,) bool). The ID calibration constraint uses the
    images with filtered == False.

  Raises:
    ValueError: rho outside [0, 1]; images not NHWC with 1 or 3 channels.

  Example:
    >>> x = jnp.zeros((20, 8, 8, 1))
    >>> views, filtered = lowpass_views(jax.random.PRNGKey(0), x, 0.05)
    >>> int(filtered.sum())
    1
  """
  rho = _check_rho(rho)
  corruptions.check_images(images)
  k_pick, k_filter = jax.random.split(key)
  selected = epoch_selection(k_pick, images.shape[0], rho)
  return apply_views(k_filter, images, selected, filter_fn), selected
