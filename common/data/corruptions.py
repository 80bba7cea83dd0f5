"""CIFAR-C-style image corruptions in pure jnp: batched, jit-able, deterministic per key.

`corrupt(key, images, name, severity)` applies one of the common corruptions of
Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions
and Perturbations" (ICLR 2019) to NHWC float images in [0, 1] (C = 1 or 3), and
returns an array of the same shape and dtype, clipped to [0, 1]. The random ones
(noise, elastic) draw from `key`; the same key gives the same images, and each image
of a batch gets its own draw. The names are the CIFAR-10-C file names, so a model can
be evaluated on our corruptions of any data set and on the released `.npy` files alike
(`common.data.cifar.load_cifar_c`).

What each corruption computes (x in [0, 1], c the severity's parameter):

    gaussian_noise     x + c * N(0, 1)
    shot_noise         Poisson(c * x) / c                    (c photons per unit)
    impulse_noise      each value set to 0 or 1 (even odds) with probability c
    defocus_blur       x * disk(radius) blurred by a 3x3 Gaussian (alias sigma)
    gaussian_blur      x * Gaussian(sigma), truncated at 4 sigma, edge padding
    contrast           mean + c (x - mean), mean per image and channel
    brightness         HSV value V -> min(V + c, 1) at fixed hue and saturation,
                       i.e. x * min(V + c, 1) / V with V = max over channels
    pixelate           area downsampling to floor(c * side) pixels and back up
    elastic_transform  resample x at A^{-1}(p + alpha * G_sigma(U[-1, 1]^2)(p)), A a
                       random affine moving three anchor points by U[-c, c], bilinear,
                       reflected at the border
    jpeg_compression   the JPEG round trip at quality c: YCbCr (4:2:0 chroma), 8x8
                       block DCT, quantisation with the IJG tables scaled to quality
                       c, inverse DCT, 8-bit rounding (`jpeg_round_trip`)

Severities. Images whose shorter side is at least 16 pixels use CIFAR-10-C's
parameters (the values of its generator, for 32x32); the spatial ones (blur sigma and
radius, elastic alpha/sigma/affine, in pixels) are scaled by side/32, so 32x32 gets
exactly CIFAR-10-C's values and 64x64 twice them. Smaller images (the 8x8 digits of
`common.data.digits`) use a table of their own, chosen so that accuracy falls
gradually from severity 1 to 5, as it does on CIFAR-10-C: at 8x8 a 0.4-pixel blur or a
2-pixel affine jitter means something else than at 32x32, and every stroke of a digit
covers many of its 64 pixels, so noise must be stronger to matter.

| name | parameter | CIFAR (side >= 16; at 32 px) | small (side < 16) |
|---|---|---|---|
| gaussian_noise | sigma | .04 .06 .08 .09 .10 | .10 .20 .30 .40 .50 |
| shot_noise | photons c | 500 250 100 75 50 | 25 12 6 3 1.5 |
| impulse_noise | fraction | .01 .02 .03 .05 .07 | .04 .08 .13 .20 .28 |
| defocus_blur | radius px | .3 .4 .5 1 1.5 | .5 1 1 1.5 2 |
|  | alias sigma px | .4 .5 .6 .2 .1 | .4 .2 .5 .3 .3 |
| gaussian_blur | sigma px | .4 .6 .7 .8 1 | .5 .7 .9 1.1 1.4 |
| contrast | factor | .75 .5 .4 .3 .15 | .8 .65 .5 .4 .3 |
| brightness | V shift | .05 .1 .15 .2 .3 | .08 .16 .24 .32 .4 |
| pixelate | side fraction | .95 .9 .85 .75 .65 | .875 .75 .625 .5 .375 |
| elastic_transform | alpha px | 0 1.6 2.56 3.2 3.2 | 0 .6 .9 1.2 1.5 |
|  | sigma px | 0 6.4 1.92 1.28 .96 | 0 1 1 1 1 |
|  | affine px | 2.56 2.24 1.92 1.6 .96 | .4 .5 .6 .7 .8 |
| jpeg_compression | quality | 80 65 58 50 40 | 25 15 10 6 3 |

With a small MLP trained on clean 8x8 digits (97% test accuracy), the small table takes
accuracy from 93-97% at severity 1 to 31-82% at severity 5, depending on the corruption.

Differences from the CIFAR-10-C generator, all deliberate: the whole pipeline runs in
float (no 8-bit rounding between steps; only the JPEG round trip rounds, as a codec
does); the elastic warp composes its affine and elastic parts into one bilinear
resampling instead of two; pixelate uses exact area weights both ways (PIL's BOX
filter up-samples with a unit-width box); the JPEG chroma is up-sampled by
replication (libjpeg interpolates).

Example:
    >>> x = jnp.full((2, 8, 8, 1), 0.5)
    >>> y = corrupt(jax.random.PRNGKey(0), x, "gaussian_noise", 3)
    >>> y.shape, y.dtype
    ((2, 8, 8, 1), dtype('float32'))
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur",
               "gaussian_blur", "contrast", "brightness", "pixelate", "elastic_transform",
               "jpeg_compression")
SEVERITIES = (1, 2, 3, 4, 5)
SMALL_SIDE = 16  # images with min(H, W) below this use the small-image table
REFERENCE_SIDE = 32  # the CIFAR table's spatial parameters are in pixels at this side

# Parameters per severity 1..5 (the module docstring's table).
CIFAR_TABLE: dict[str, tuple[Any, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    "shot_noise": (500.0, 250.0, 100.0, 75.0, 50.0),
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1)),
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
    "elastic_transform": ((0.0, 0.0, 2.56), (1.6, 6.4, 2.24), (2.56, 1.92, 1.92),
                          (3.2, 1.28, 1.6), (3.2, 0.96, 0.96)),
    "jpeg_compression": (80, 65, 58, 50, 40),
}
SMALL_TABLE: dict[str, tuple[Any, ...]] = {
    "gaussian_noise": (0.10, 0.20, 0.30, 0.40, 0.50),
    "shot_noise": (25.0, 12.0, 6.0, 3.0, 1.5),
    "impulse_noise": (0.04, 0.08, 0.13, 0.20, 0.28),
    "defocus_blur": ((0.5, 0.4), (1.0, 0.2), (1.0, 0.5), (1.5, 0.3), (2.0, 0.3)),
    "gaussian_blur": (0.5, 0.7, 0.9, 1.1, 1.4),
    "contrast": (0.8, 0.65, 0.5, 0.4, 0.3),
    "brightness": (0.08, 0.16, 0.24, 0.32, 0.4),
    "pixelate": (0.875, 0.75, 0.625, 0.5, 0.375),
    "elastic_transform": ((0.0, 0.0, 0.4), (0.6, 1.0, 0.5), (0.9, 1.0, 0.6),
                          (1.2, 1.0, 0.7), (1.5, 1.0, 0.8)),
    "jpeg_compression": (25, 15, 10, 6, 3),
}
_SPATIAL = {"defocus_blur", "gaussian_blur", "elastic_transform"}


# --- Argument checks (one line each, before any work) -----------------------------------

def check_images(images: Any, name: str = "images") -> None:
  """Raises unless `images` is an NHWC float array with C = 1 or 3.

  Shape and dtype only, so it also works on tracers (inside `jit`).

  Example:
    >>> check_images(jnp.zeros((2, 8, 8, 1)))
  """
  shape, dtype = jnp.shape(images), jnp.result_type(images)
  if len(shape) != 4 or shape[-1] not in (1, 3):
    hint = (" (channels first? move them last)" if len(shape) == 4 and shape[1] in (1, 3)
            else "")
    raise ValueError(f"{name} has shape {tuple(shape)}; expected NHWC (batch, height, width, "
                     f"channels) with 1 or 3 channels last{hint}")
  if not jnp.issubdtype(dtype, jnp.floating):
    raise TypeError(f"{name} has dtype {dtype}; expected floats in [0, 1] (divide uint8 "
                    "images by 255)")


def check_severity(severity: Any) -> int:
  """`severity` as an int in 1..5, or a one-line ValueError."""
  if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or \
      not 1 <= int(severity) <= 5:
    raise ValueError(f"severity={severity!r}; expected an int in 1..5")
  return int(severity)


def check_name(name: Any) -> str:
  """`name` if it is one of CORRUPTIONS, else a one-line ValueError listing them."""
  if name not in CORRUPTIONS:
    raise ValueError(f"unknown corruption {name!r}; expected one of {', '.join(CORRUPTIONS)}")
  return name


# --- Host-side operators (numpy; fixed shapes per image size, so one compile per size) ---

def _scale(side: int) -> float:
  return 1.0 if side < SMALL_SIDE else side / REFERENCE_SIDE


def table_for(height: int, width: int) -> dict[str, tuple[Any, ...]]:
  """The severity table that images of this size use (module docstring)."""
  return SMALL_TABLE if min(height, width) < SMALL_SIDE else CIFAR_TABLE


def severity_parameters(name: str, severity: int, height: int, width: int) -> Any:
  """The parameter of `name` at `severity` for HxW images, spatial ones in pixels.

  Example:
    >>> severity_parameters("gaussian_blur", 5, 64, 64)
    2.0
  """
  value = table_for(height, width)[check_name(name)][check_severity(severity) - 1]
  if name in _SPATIAL:
    s = _scale(min(height, width))
    return tuple(v * s for v in value) if isinstance(value, tuple) else value * s
  return value


def _gaussian_taps(sigma: float, truncate: float, radius: int) -> np.ndarray:
  """A normalised 1-D Gaussian of `sigma` truncated at `truncate` sigma, zero-padded to
  2 radius + 1 taps (sigma = 0 is the identity)."""
  taps = np.zeros(2 * radius + 1)
  if sigma <= 0:
    taps[radius] = 1.0
    return taps
  r = min(int(truncate * sigma + 0.5), radius)
  t = np.arange(-r, r + 1)
  g = np.exp(-0.5 * (t / sigma) ** 2)
  taps[radius - r: radius + r + 1] = g / g.sum()
  return taps


def _gaussian_radius(sigma: float, truncate: float) -> int:
  return int(truncate * sigma + 0.5) if sigma > 0 else 0


def _disk_kernel(radius: float, alias_sigma: float, half: int) -> np.ndarray:
  """The defocus kernel: a normalised disk on the integer grid, smoothed by a 3x3
  Gaussian of `alias_sigma`, on a (2 half + 1)^2 grid."""
  t = np.arange(-half, half + 1)
  yy, xx = np.meshgrid(t, t, indexing="ij")
  disk = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float64)
  disk /= disk.sum()
  g = np.exp(-0.5 * (np.arange(-1, 2) / max(alias_sigma, 1e-12)) ** 2)
  k3 = np.outer(g, g) / g.sum() ** 2
  padded = np.pad(disk, 1)
  out = sum(k3[i, j] * padded[i: i + 2 * half + 1, j: j + 2 * half + 1]
            for i in range(3) for j in range(3))
  return out / out.sum()


def _area_matrix(n_out: int, n_in: int) -> np.ndarray:
  """(n_out, n_in) area-resampling weights: output pixel i averages the input over its
  footprint [i n_in / n_out, (i + 1) n_in / n_out]."""
  edges_out = np.arange(n_out + 1) * (n_in / n_out)
  lo = np.maximum(edges_out[:-1, None], np.arange(n_in)[None, :])
  hi = np.minimum(edges_out[1:, None], np.arange(1, n_in + 1)[None, :])
  w = np.clip(hi - lo, 0.0, None)
  return w / w.sum(axis=1, keepdims=True)


def _pixelate_matrix(n: int, fraction: float) -> np.ndarray:
  m = max(int(n * fraction), 1)
  return _area_matrix(n, m) @ _area_matrix(m, n)


# JPEG (ITU-T T.81 Annex K) base quantisation tables, scaled by the IJG quality rule.
_LUMA_TABLE = np.array([
    [16, 11, 10, 16, 24, 40, 51, 61], [12, 12, 14, 19, 26, 58, 60, 55],
    [14, 13, 16, 24, 40, 57, 69, 56], [14, 17, 22, 29, 51, 87, 80, 62],
    [18, 22, 37, 56, 68, 109, 103, 77], [24, 35, 55, 64, 81, 104, 113, 92],
    [49, 64, 78, 87, 103, 121, 120, 101], [72, 92, 95, 98, 112, 100, 103, 99]], np.float64)
_CHROMA_TABLE = np.full((8, 8), 99.0)
_CHROMA_TABLE[:4, :4] = [[17, 18, 24, 47], [18, 21, 26, 66], [24, 26, 56, 99],
                         [47, 66, 99, 99]]


def quantisation_tables(quality: int) -> np.ndarray:
  """(2, 8, 8) luminance and chrominance tables at JPEG `quality` in 1..100 (IJG rule:
  scale = 5000 / q below 50, 200 - 2 q above; entries floor((T scale + 50) / 100) clipped
  to 1..255, as baseline JPEG stores them).

  Example:
    >>> quantisation_tables(50)[0, 0, 0]
    16.0
  """
  if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or \
      not 1 <= quality <= 100:
    raise ValueError(f"quality={quality!r}; expected an int JPEG quality in 1..100")
  scale = 5000.0 / quality if quality < 50 else 200.0 - 2.0 * quality
  tables = np.stack([_LUMA_TABLE, _CHROMA_TABLE])
  return np.clip(np.floor((tables * scale + 50.0) / 100.0), 1.0, 255.0)


def _dct_matrix(n: int = 8) -> np.ndarray:
  """The orthonormal DCT-II matrix D (rows = frequencies): X = D x D^T for a block x."""
  k = np.arange(n)[:, None]
  i = np.arange(n)[None, :]
  d = np.sqrt(2.0 / n) * np.cos(np.pi * (2 * i + 1) * k / (2 * n))
  d[0] /= np.sqrt(2.0)
  return d


_DCT8 = _dct_matrix(8)


# --- The JPEG round trip (shared with methods.fgr.filters) -------------------------------

def _pad_to(x: Array, multiple: int) -> Array:
  """(N, H, W) -> edge-padded to multiples of `multiple`."""
  ph, pw = (-x.shape[1]) % multiple, (-x.shape[2]) % multiple
  return jnp.pad(x, ((0, 0), (0, ph), (0, pw)), mode="edge") if ph or pw else x


def dct_quantise(plane: Array, table: Array) -> Array:
  """One plane (N, H, W) of level-shifted 8-bit samples through 8x8 block DCT,
  quantisation by `table` (8, 8), dequantisation and inverse DCT:

      X = D x D^T,   X_hat = table * round(X / table),   x_hat = D^T X_hat D

  per 8x8 block (planes are edge-padded to multiples of 8 and cropped back).

  Example:
    >>> dct_quantise(jnp.zeros((1, 8, 8)), jnp.ones((8, 8))).shape
    (1, 8, 8)
  """
  n, h, w = plane.shape
  x = _pad_to(plane, 8)
  hb, wb = x.shape[1] // 8, x.shape[2] // 8
  blocks = x.reshape(n, hb, 8, wb, 8)
  d = jnp.asarray(_DCT8, plane.dtype)
  coef = jnp.einsum("ui,nbicj,vj->nbucv", d, blocks, d)  # (n, hb, 8, wb, 8)
  table = jnp.asarray(table, plane.dtype)[None, None, :, None, :]
  coef = jnp.round(coef / table) * table
  out = jnp.einsum("ui,nbucv,vj->nbicj", d, coef, d)
  return out.reshape(n, hb * 8, wb * 8)[:, :h, :w]


def _jpeg(images: Array, tables: Array, subsample_chroma: bool) -> Array:
  x = jnp.round(jnp.clip(images, 0.0, 1.0) * 255.0)
  n, h, w, c = x.shape
  if c == 1:
    y = dct_quantise(x[..., 0] - 128.0, tables[0]) + 128.0
    return (jnp.clip(jnp.round(y), 0.0, 255.0) / 255.0)[..., None].astype(images.dtype)
  r, g, b = x[..., 0], x[..., 1], x[..., 2]
  y = 0.299 * r + 0.587 * g + 0.114 * b
  cb = -0.168736 * r - 0.331264 * g + 0.5 * b
  cr = 0.5 * r - 0.418688 * g - 0.081312 * b
  y = dct_quantise(y - 128.0, tables[0]) + 128.0

  def chroma(p):
    if not subsample_chroma:
      return dct_quantise(p, tables[1])
    q = _pad_to(p, 2)
    hh, ww = q.shape[1] // 2, q.shape[2] // 2
    small = q.reshape(n, hh, 2, ww, 2).mean(axis=(2, 4))
    small = dct_quantise(small, tables[1])
    return jnp.repeat(jnp.repeat(small, 2, axis=1), 2, axis=2)[:, :h, :w]

  cb, cr = chroma(cb), chroma(cr)
  rgb = jnp.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], -1)
  return (jnp.clip(jnp.round(rgb), 0.0, 255.0) / 255.0).astype(images.dtype)


_jpeg_jit = jax.jit(_jpeg, static_argnames=("subsample_chroma",))


def jpeg_round_trip(images: Array, quality: int, subsample_chroma: bool = True) -> Array:
  """Images (N, H, W, C in {1, 3}) in [0, 1] through a JPEG encode/decode at `quality`.

      8-bit RGB -> YCbCr (JFIF) -> [Cb, Cr 2x2 averaged] -> per plane `dct_quantise`
      with the luminance / chrominance tables at `quality` -> RGB -> round to 8 bits

  Grayscale images are one luminance plane. This is the JPEG corruption of CIFAR-C and
  the default low-pass filter of FGR (qualities 25 / 18 / 15): the quantisation zeroes
  the small high-frequency DCT coefficients first. Not differentiable (rounding).

  Args:
    images: (N, H, W, C) floats in [0, 1]; C = 1 or 3.
    quality: JPEG quality, an int in 1..100 (lower = coarser).
    subsample_chroma: 4:2:0 chroma subsampling (what PIL and libjpeg do by default).

  Returns:
    The decoded images, same shape and dtype, multiples of 1/255.

  Example:
    >>> x = jnp.linspace(0, 1, 64).reshape(1, 8, 8, 1)
    >>> y = jpeg_round_trip(x, 15)
  """
  check_images(images)
  return _jpeg_jit(images, jnp.asarray(quantisation_tables(quality), images.dtype),
                   subsample_chroma=bool(subsample_chroma))


# --- The corruptions (jnp; parameters arrive as arrays of fixed shape) -------------------

def _filter2d(x: Array, kernel: Array, mode: str) -> Array:
  """Depthwise 2-D correlation of NHWC `x` with a square odd `kernel`, padded by `mode`."""
  r = kernel.shape[0] // 2
  xp = jnp.pad(x, ((0, 0), (r, r), (r, r), (0, 0)), mode=mode)
  c = x.shape[-1]
  k = jnp.tile(kernel[:, :, None, None].astype(x.dtype), (1, 1, 1, c))
  return jax.lax.conv_general_dilated(xp, k, (1, 1), "VALID",
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                      feature_group_count=c)


@jax.jit
def _gaussian_noise(key, x, sigma):
  return x + sigma * jax.random.normal(key, x.shape, x.dtype)


@jax.jit
def _shot_noise(key, x, photons):
  counts = jax.random.poisson(key, jnp.clip(x, 0.0, 1.0) * photons, x.shape)
  return counts.astype(x.dtype) / photons


@jax.jit
def _impulse_noise(key, x, amount):
  k_flip, k_salt = jax.random.split(key)
  flip = jax.random.uniform(k_flip, x.shape) < amount
  salt = jax.random.uniform(k_salt, x.shape) < 0.5
  return jnp.where(flip, salt.astype(x.dtype), x)


@functools.partial(jax.jit, static_argnames=("mode",))
def _blur(key, x, kernel, mode):
  del key
  return _filter2d(x, kernel, mode)


@jax.jit
def _contrast(key, x, factor):
  del key
  mean = x.mean(axis=(1, 2), keepdims=True)
  return mean + factor * (x - mean)


@jax.jit
def _brightness(key, x, shift):
  del key
  v = x.max(axis=-1, keepdims=True)
  v_new = jnp.clip(v + shift, 0.0, 1.0)
  safe_v = jnp.where(v > 0, v, 1.0)
  return jnp.where(v > 0, x * (v_new / safe_v), v_new)


@jax.jit
def _pixelate(key, x, rows, cols):
  del key
  return jnp.einsum("hi,nijc,wj->nhwc", rows.astype(x.dtype), x, cols.astype(x.dtype))


@jax.jit
def _elastic(key, x, alpha, smooth, affine):
  n, h, w, c = x.shape
  k_pts, k_field = jax.random.split(key)
  # Random affine from three anchor points moved by U[-affine, affine] (x, y order).
  center = jnp.array([w // 2, h // 2], x.dtype)
  s = float(min(h, w) // 3)
  src = jnp.stack([center + s, center + jnp.array([s, -s], x.dtype), center - s])
  dst = src[None] + jax.random.uniform(k_pts, (n, 3, 2), x.dtype, -1.0, 1.0) * affine
  lhs = jnp.concatenate([src, jnp.ones((3, 1), x.dtype)], axis=1)      # (3, 3)
  m = jnp.linalg.solve(jnp.broadcast_to(lhs, (n, 3, 3)), dst)           # (n, 3, 2): [A^T; t]
  a, t = jnp.swapaxes(m[:, :2], 1, 2), m[:, 2]                          # p' = A p + t
  # Elastic displacement: uniform noise smoothed by a Gaussian, scaled by alpha.
  field = jax.random.uniform(k_field, (n, h, w, 2), x.dtype, -1.0, 1.0)
  field = _filter2d(field, smooth, "symmetric") * alpha
  yy, xx = jnp.meshgrid(jnp.arange(h, dtype=x.dtype), jnp.arange(w, dtype=x.dtype),
                        indexing="ij")
  px = xx[None] + field[..., 0]
  py = yy[None] + field[..., 1]
  # Source of output pixel p: A^{-1} (p + d(p) - t).
  inv = jnp.linalg.inv(a)
  qx = px - t[:, 0, None, None]
  qy = py - t[:, 1, None, None]
  sx = inv[:, 0, 0, None, None] * qx + inv[:, 0, 1, None, None] * qy
  sy = inv[:, 1, 0, None, None] * qx + inv[:, 1, 1, None, None] * qy

  def one(img, sy_, sx_):
    zz = jnp.broadcast_to(jnp.arange(c, dtype=x.dtype), (h, w, c))
    coords = [jnp.broadcast_to(sy_[..., None], (h, w, c)),
              jnp.broadcast_to(sx_[..., None], (h, w, c)), zz]
    return jax.scipy.ndimage.map_coordinates(img, coords, order=1, mode="reflect")

  return jax.vmap(one)(x, sy, sx)


def _operands(name: str, severity: int, h: int, w: int, dtype) -> tuple[Callable, dict]:
  """The jitted implementation of `name` and its parameters at `severity` as arrays whose
  shapes depend only on the image size (so all severities share one compilation)."""
  p = severity_parameters(name, severity, h, w)
  arr = lambda v: jnp.asarray(v, dtype)
  if name == "gaussian_noise":
    return _gaussian_noise, dict(sigma=arr(p))
  if name == "shot_noise":
    return _shot_noise, dict(photons=arr(p))
  if name == "impulse_noise":
    return _impulse_noise, dict(amount=arr(p))
  if name == "contrast":
    return _contrast, dict(factor=arr(p))
  if name == "brightness":
    return _brightness, dict(shift=arr(p))
  if name == "pixelate":
    return _pixelate, dict(rows=arr(_pixelate_matrix(h, p)), cols=arr(_pixelate_matrix(w, p)))
  if name == "jpeg_compression":
    return (lambda key, x, tables: _jpeg_jit(x, tables, subsample_chroma=True),
            dict(tables=arr(quantisation_tables(p))))
  all_params = [severity_parameters(name, s, h, w) for s in SEVERITIES]
  if name == "gaussian_blur":
    radius = max(_gaussian_radius(v, 4.0) for v in all_params)
    taps = _gaussian_taps(p, 4.0, radius)
    return functools.partial(_blur, mode="edge"), dict(kernel=arr(np.outer(taps, taps)))
  if name == "defocus_blur":
    half = max(math.ceil(r) for r, _ in all_params) + 1
    return (functools.partial(_blur, mode="reflect"),
            dict(kernel=arr(_disk_kernel(p[0], p[1], half))))
  # elastic_transform
  radius = max(_gaussian_radius(v[1], 3.0) for v in all_params)
  taps = _gaussian_taps(p[1], 3.0, radius)
  return _elastic, dict(alpha=arr(p[0]), smooth=arr(np.outer(taps, taps)), affine=arr(p[2]))


def corrupt(key: Array, images: Array, name: str, severity: int) -> Array:
  """One CIFAR-C-style corruption of a batch of images at a severity in 1..5.

  Args:
    key: a PRNG key; the noise and the elastic warp draw from it (each image its own
      draw), the other corruptions ignore it.
    images: (N, H, W, C) floats in [0, 1], C = 1 or 3 (NHWC).
    name: one of `CORRUPTIONS`.
    severity: an int in 1..5 (parameters in the module docstring's table; images with
      a side below 16 pixels use the small-image column).

  Returns:
    The corrupted images, same shape and dtype, clipped to [0, 1].

  Raises:
    ValueError: unknown name, severity outside 1..5, or images not NHWC with 1 or 3
      channels; TypeError for non-float images. All before any work.

  Example:
    >>> x = jax.random.uniform(jax.random.PRNGKey(0), (4, 32, 32, 3))
    >>> y = corrupt(jax.random.PRNGKey(1), x, "elastic_transform", 2)
  """
  check_name(name)
  severity = check_severity(severity)
  check_images(images)
  _, h, w, _ = images.shape
  fn, params = _operands(name, severity, h, w, jnp.result_type(images))
  out = fn(key, images, **params)
  return jnp.clip(out, 0.0, 1.0).astype(images.dtype)
