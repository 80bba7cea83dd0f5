"""Classical multi-scale fusion baselines: Laplacian pyramid (jnp) and wavelets (PyWavelets).

Both apply the same rule to two registered source images a and b of one shape: on each
detail band keep the coefficient of larger absolute value (the "choose max" rule,
larger magnitude = more local contrast = the in-focus / well-exposed / salient
source), and average the coarsest approximation band (the overall brightness).

References:
  P. J. Burt and E. H. Adelson, "The Laplacian pyramid as a compact image code",
  IEEE Trans. Communications 31(4), 1983; and "Merging images through pattern
  decomposition", Proc. SPIE 575, 1985.
  H. Li, B. S. Manjunath and S. K. Mitra, "Multisensor image fusion using the wavelet
  transform", Graphical Models and Image Processing 57(3), 1995.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from common import checks

# Burt & Adelson's generating kernel with a = 3/8: [1, 4, 6, 4, 1] / 16, applied separably.
BINOMIAL_5 = (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16)


def _blur(x: jax.Array, gain: float = 1.0) -> jax.Array:
  """x convolved with the separable 5-tap binomial (times ``gain`` per axis) over the last
  two axes, reflected border (no edge repeat): one 5x5 convolution."""
  w = jnp.asarray(BINOMIAL_5, x.dtype) * gain
  kernel = (w[:, None] * w[None, :])[None, None]  # OIHW
  lead, (h, wd) = x.shape[:-2], x.shape[-2:]
  xp = jnp.pad(x.reshape((-1, 1, h, wd)), ((0, 0), (0, 0), (2, 2), (2, 2)), mode="reflect")
  out = jax.lax.conv_general_dilated(xp, kernel, (1, 1), "VALID",
                                     precision=jax.lax.Precision.HIGHEST)
  return out.reshape(lead + (h, wd))


def _reduce(x: jax.Array) -> jax.Array:
  """REDUCE: binomial blur, then keep every second row and column."""
  return _blur(x)[..., ::2, ::2]


def _expand(x: jax.Array) -> jax.Array:
  """EXPAND: zeros between samples (2x each side), then binomial blur with gain 2 per axis."""
  up = jnp.zeros(x.shape[:-2] + (2 * x.shape[-2], 2 * x.shape[-1]), x.dtype)
  return _blur(up.at[..., ::2, ::2].set(x), gain=2.0)


def _check_levels(shape: tuple[int, ...], levels: int) -> None:
  if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels < 1:
    raise ValueError(f"levels must be an int >= 1, got {levels!r}")
  if len(shape) < 2:
    raise ValueError(f"images must have at least 2 dims (..., H, W), got shape {shape}")
  h, w = shape[-2:]
  m = 2 ** levels
  if h % m or w % m:
    raise ValueError(f"image size {h}x{w} must be divisible by 2**levels = {m} "
                     f"(levels={levels})")


def laplacian_pyramid(x: Any, levels: int) -> list[jax.Array]:
  """Burt & Adelson's Laplacian pyramid [L_0, ..., L_{levels-1}, G_levels] of (..., H, W).

      G_0 = x,  G_{k+1} = REDUCE(G_k),  L_k = G_k - EXPAND(G_{k+1})

  REDUCE blurs with the separable 5-tap binomial w = [1, 4, 6, 4, 1] / 16 (one 5x5
  convolution by w w^T, reflected border) and keeps every second pixel; EXPAND inserts
  zeros between pixels and blurs with 2 w per axis (so a constant stays constant). H
  and W must be divisible by 2**levels.

  Example:
    >>> [p.shape for p in laplacian_pyramid(jnp.zeros((32, 32)), levels=2)]
    [(32, 32), (16, 16), (8, 8)]
  """
  x = checks.as_float("x", x)
  _check_levels(x.shape, levels)
  return _pyramid(x, int(levels))


@functools.partial(jax.jit, static_argnums=1)
def _pyramid(x: jax.Array, levels: int) -> list[jax.Array]:
  pyramid, g = [], x
  for _ in range(levels):
    g_next = _reduce(g)
    pyramid.append(g - _expand(g_next))
    g = g_next
  return pyramid + [g]


def reconstruct_laplacian(pyramid: list[jax.Array]) -> jax.Array:
  """Inverse of ``laplacian_pyramid``: G_k = L_k + EXPAND(G_{k+1}), exact up to rounding.

  Example:
    >>> x = jnp.ones((16, 16))
    >>> bool(jnp.allclose(reconstruct_laplacian(laplacian_pyramid(x, 2)), x))
    True
  """
  return _reconstruct(list(pyramid))


@jax.jit
def _reconstruct(pyramid: list[jax.Array]) -> jax.Array:
  g = pyramid[-1]
  for detail in reversed(pyramid[:-1]):
    g = detail + _expand(g)
  return g


def laplacian_pyramid_fusion(a: Any, b: Any, levels: int = 4) -> jax.Array:
  """Laplacian pyramid fusion (Burt & Adelson): max-abs details, averaged base.

      L_k^F = L_k^a  where |L_k^a| >= |L_k^b|,  else L_k^b     (k < levels, per pixel)
      G_levels^F = (G_levels^a + G_levels^b) / 2
      F = reconstruct(L_0^F, ..., L_{levels-1}^F, G_levels^F)

  with the pyramid of ``laplacian_pyramid`` (the separable 5-tap binomial as one 5x5
  ``lax.conv``, reflected border; down-sampling by strided slicing, up-sampling by zero
  insertion). Pure jnp: jit with ``levels`` static, vmap over pairs; leading batch dims
  are fused independently. Integer inputs become float32; otherwise a's dtype is kept.
  F is not clipped (max-abs can overshoot [0, 1] slightly at strong edges).

  Args:
    a, b: source images (..., H, W) of one shape, H and W divisible by 2**levels.
    levels: number of detail levels.

  Returns:
    The fused image, shape and dtype of a.

  Example:
    >>> a, b = jnp.zeros((64, 64)), jnp.ones((64, 64))
    >>> float(laplacian_pyramid_fusion(a, b, levels=3)[0, 0])
    0.5
  """
  a, b = checks.as_float("a", a), checks.as_float("b", b)
  checks.same_shape("source images a and b", a, b)
  _check_levels(a.shape, levels)
  return _fuse(a, b, int(levels))


@functools.partial(jax.jit, static_argnums=2)
def _fuse(a: jax.Array, b: jax.Array, levels: int) -> jax.Array:
  pa, pb = _pyramid(a, levels), _pyramid(b, levels)
  fused = [jnp.where(jnp.abs(la) >= jnp.abs(lb), la, lb) for la, lb in zip(pa[:-1], pb[:-1])]
  fused.append((pa[-1] + pb[-1]) / 2)
  return _reconstruct(fused)


def wavelet_fusion(a: Any, b: Any, wavelet: str = "db2", levels: int = 3) -> np.ndarray:
  """Discrete wavelet fusion with PyWavelets: max-abs details, averaged approximation.

      (A^x, D_levels^x, ..., D_1^x) = wavedec2(x, wavelet, levels)   (x = a, b; D = H, V, D bands)
      D_k^F = D_k^a where |D_k^a| >= |D_k^b| else D_k^b,   A^F = (A^a + A^b) / 2
      F = waverec2(A^F, D^F) cropped to the input's (H, W)

  Symmetric boundary extension (PyWavelets' default), so any size works; the transform
  runs over the last two axes, leading dims are batch.

  Args:
    a, b: numpy source images (..., H, W) of one shape.
    wavelet: a PyWavelets discrete wavelet name ("haar", "db2", "sym4", ...).
    levels: decomposition levels, at most ``pywt.dwt_max_level(min(H, W), wavelet)``.

  Returns:
    The fused image as a numpy array of a's shape (float32 for float32 or integer inputs,
    else a's float dtype). Not clipped.

  Example:
    >>> x = np.random.rand(32, 32).astype(np.float32)
    >>> bool(np.allclose(wavelet_fusion(x, x), x, atol=1e-5))
    True
  """
  import pywt  # Lazy: only this baseline needs PyWavelets.
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape:
    raise ValueError(f"source images a and b must have the same shape, got {a.shape} "
                     f"and {b.shape}")
  if a.ndim < 2:
    raise ValueError(f"images must have at least 2 dims (..., H, W), got shape {a.shape}")
  try:
    w = pywt.Wavelet(wavelet)
  except ValueError:
    raise ValueError(f"unknown discrete wavelet {wavelet!r}; see pywt.wavelist(kind="
                     "'discrete')") from None
  max_level = pywt.dwt_max_level(min(a.shape[-2:]), w.dec_len)
  if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or \
      not 1 <= levels <= max_level:
    raise ValueError(f"levels must be an int in [1, {max_level}] for {wavelet} on "
                     f"{a.shape[-2]}x{a.shape[-1]} images, got {levels!r}")
  dtype = a.dtype if np.issubdtype(a.dtype, np.floating) else np.float32
  ca = pywt.wavedec2(a.astype(np.float64), w, level=levels, axes=(-2, -1))
  cb = pywt.wavedec2(b.astype(np.float64), w, level=levels, axes=(-2, -1))
  pick = lambda x, y: np.where(np.abs(x) >= np.abs(y), x, y)
  coeffs = [(ca[0] + cb[0]) / 2]
  coeffs += [tuple(pick(x, y) for x, y in zip(da, db)) for da, db in zip(ca[1:], cb[1:])]
  fused = pywt.waverec2(coeffs, w, axes=(-2, -1))
  return fused[..., :a.shape[-2], :a.shape[-1]].astype(dtype)
