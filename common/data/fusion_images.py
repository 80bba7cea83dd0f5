"""Image fusion data: bundled real photos, simulated source pairs, and the paper datasets' folders.

Everything here is numpy, float32 grayscale in [0, 1], batches shaped (n, H, W).

Bundled photos (``load_photos``) are real photographs that ship inside installed wheels
and are read from the wheel's own files (never through a downloader): scikit-image's
``skimage/data/`` and scikit-learn's ``sklearn/datasets/images/``. RGB becomes
luminance (``skimage.color.rgb2gray``: 0.2125 R + 0.7154 G + 0.0721 B).

| name | file | size (H x W) | what |
|---|---|---|---|
| camera | skimage camera.png | 512 x 512 | cameraman, grayscale |
| astronaut | skimage astronaut.png | 512 x 512 | portrait (Eileen Collins) |
| coffee | skimage coffee.png | 400 x 600 | cup of coffee on a table |
| chelsea | skimage chelsea.png | 300 x 451 | cat |
| rocket | skimage rocket.jpg | 427 x 640 | launch pad at dusk, lights |
| motorcycle | skimage motorcycle_left.png | 500 x 741 | indoor scene (left stereo view) |
| coins | skimage coins.png | 303 x 384 | Greek coins |
| moon | skimage moon.png | 512 x 512 | lunar surface |
| brick | skimage brick.png | 512 x 512 | brick wall texture |
| grass | skimage grass.png | 512 x 512 | grass texture |
| gravel | skimage gravel.png | 512 x 512 | gravel texture |
| immunohistochemistry | skimage ihc.png | 512 x 512 | stained tissue, microscope |
| retina | skimage retina.jpg | 1411 x 1411 | fundus photograph |
| china | sklearn china.jpg | 427 x 640 | temple and trees |
| flower | sklearn flower.jpg | 427 x 640 | dahlia close-up |

``TEST_PHOTOS`` (held out for evaluation) = camera, chelsea, flower, gravel (a gray
scene, fur, a colour close-up, a texture); ``TRAIN_PHOTOS`` = the other 11. Left out
on purpose: motorcycle_right (the stereo twin of motorcycle_left: train/test leakage),
hubble_deep_field (almost all black), clock_motion (motion-blurred: no sharp ground
truth), cell and microaneurysms (nearly flat), and the binary, text or synthetic ones
(horse, logo, page, text, phantom, color, chessboards).

Simulated tasks (``make_pairs``; ``TASKS``) turn clean images x into source pairs
(a, b) with a known ground truth where one exists; see each simulator's docstring for
the exact model and the ranges of its random parameters:
- ``multi_exposure``: a under-exposed, b over-exposed; ground truth x.
- ``multi_focus``: a blurred inside a smooth random region, b blurred outside it;
  ground truth x.
- ``infrared_visible``: a a thermal-like rendering with planted hot targets, b a noisy
  low-light visible image; no ground truth.

Paper datasets (MSRS, TNO, RoadScene, M3FD) are read from the user's copy by
``load_fusion_folder`` (a = infrared, b = visible), and ``write_fusion_folder`` writes
the same layout (8-bit PNG).

Example:
    >>> photos = load_photos(TRAIN_PHOTOS)
    >>> x = random_crops(photos, 0, num=8, size=64)        # (8, 64, 64)
    >>> photos = prepare_photos(photos, 64)                # resize once, then
    >>> x = random_crops(photos, 1, num=8, size=64, scale=None)   # in a training loop
    >>> pair = make_pairs("multi_focus", x, seed=1)        # pair.a, pair.b, pair.ground_truth
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple, Sequence

import numpy as np

PHOTO_FILES = {
    "camera": ("skimage", "camera.png"),
    "astronaut": ("skimage", "astronaut.png"),
    "coffee": ("skimage", "coffee.png"),
    "chelsea": ("skimage", "chelsea.png"),
    "rocket": ("skimage", "rocket.jpg"),
    "motorcycle": ("skimage", "motorcycle_left.png"),
    "coins": ("skimage", "coins.png"),
    "moon": ("skimage", "moon.png"),
    "brick": ("skimage", "brick.png"),
    "grass": ("skimage", "grass.png"),
    "gravel": ("skimage", "gravel.png"),
    "immunohistochemistry": ("skimage", "ihc.png"),
    "retina": ("skimage", "retina.jpg"),
    "china": ("sklearn", "china.jpg"),
    "flower": ("sklearn", "flower.jpg"),
}
PHOTOS = tuple(PHOTO_FILES)
TEST_PHOTOS = ("camera", "chelsea", "flower", "gravel")
TRAIN_PHOTOS = tuple(n for n in PHOTOS if n not in TEST_PHOTOS)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
INFRARED_DIRS = ("ir", "inf", "infrared", "ir_images")
VISIBLE_DIRS = ("vi", "vis", "visible", "vi_images")
_IGNORED_FILES = ("thumbs.db", "desktop.ini")


class FusionPair(NamedTuple):
  """Source images of one fusion task, (n, H, W) float32 in [0, 1].

  ``mask`` is task-specific: for ``multi_focus`` the weight (n, H, W) in [0, 1] of the
  blurred image in ``a`` (1 - mask in ``b``); for ``infrared_visible`` the planted hot
  targets' shape (1 at a target's core); None otherwise. ``names`` are the file stems
  for a loaded folder.
  """
  a: np.ndarray
  b: np.ndarray
  ground_truth: np.ndarray | None
  task: str
  names: tuple[str, ...] | None = None
  mask: np.ndarray | None = None


# ----------------------------------------------------------------------------- photos


def photo_path(name: str) -> str:
  """The bundled file of photo ``name``, inside the installed skimage or sklearn wheel."""
  if name not in PHOTO_FILES:
    raise ValueError(f"unknown photo {name!r}; expected one of {', '.join(PHOTOS)}")
  package, filename = PHOTO_FILES[name]
  if package == "skimage":
    import skimage
    return os.path.join(os.path.dirname(skimage.__file__), "data", filename)
  import sklearn
  return os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images", filename)


def load_photos(names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
  """Bundled photos by name (default: all of ``PHOTOS``) as 2-D float32 in [0, 1].

  Read straight from the wheels' files with Pillow (no network, no cache folder), once
  per process; each call returns fresh copies.

  Example:
    >>> load_photos(["camera"])["camera"].shape
    (512, 512)
  """
  names = PHOTOS if names is None else tuple(names)
  if isinstance(names, str) or not names:
    raise ValueError(f"names must be a non-empty sequence of photo names, got {names!r}")
  return {n: _load_photo(n).copy() for n in names}


@functools.lru_cache(maxsize=None)
def _load_photo(name: str) -> np.ndarray:
  return read_image(photo_path(name))


def read_image(path: str) -> np.ndarray:
  """One image file as 2-D float32 in [0, 1]: RGB -> luminance, alpha dropped, 16-bit scaled."""
  from PIL import Image, UnidentifiedImageError
  try:
    with Image.open(path) as im:
      im.load()
      mode = im.mode
      if mode in ("P", "PA", "CMYK", "YCbCr", "LAB", "HSV", "1"):
        im, mode = im.convert("RGB"), "RGB"
      x = np.asarray(im)
  except (UnidentifiedImageError, OSError) as e:
    raise ValueError(f"{path}: not a readable image ({e})") from None
  if mode.startswith("I;16") or mode == "I":
    x = x.astype(np.float64) / 65535.0
  elif mode == "F":
    x = x.astype(np.float64)
  else:
    x = x.astype(np.float64) / 255.0
  if x.ndim == 3:
    if x.shape[-1] in (2, 4):  # LA / RGBA: drop alpha
      x = x[..., :-1]
    if x.shape[-1] == 1:
      x = x[..., 0]
    else:
      from skimage.color import rgb2gray
      x = rgb2gray(x[..., :3])
  return np.clip(x, 0.0, 1.0).astype(np.float32)


def _rng(key_or_seed: Any) -> np.random.Generator:
  """A numpy Generator from an int seed or a jax PRNG key (typed or raw uint32)."""
  if isinstance(key_or_seed, (int, np.integer)) and not isinstance(key_or_seed, bool):
    return np.random.default_rng(int(key_or_seed))
  try:
    import jax
    data = np.asarray(jax.random.key_data(key_or_seed))
  except Exception:  # pylint: disable=broad-except
    raise ValueError(f"seed must be an int or a jax PRNG key, got {key_or_seed!r}") from None
  return np.random.default_rng([int(v) for v in data.ravel()])


def prepare_photos(photos: dict[str, np.ndarray] | Sequence[np.ndarray], size: int,
                   scale: float | None = 3.0) -> dict[str, np.ndarray] | list[np.ndarray]:
  """Photos resized once for cropping ``size`` x ``size`` patches (same keys or order).

  A photo whose short side exceeds ``round(scale * size)`` is shrunk
  (``skimage.transform.resize``, anti-aliased, aspect kept) to that short side, so a
  crop covers about 1/scale of the photo's short side rather than a featureless patch
  of a big photo; one whose short side is under ``size`` is enlarged to ``size``; the
  rest are kept. ``scale=None`` keeps full resolution (only enlarging small photos).
  ``random_crops(prepare_photos(p, size, scale), seed, num, size, scale=None)`` equals
  ``random_crops(p, seed, num, size, scale=scale)`` without resizing at every call.

  Example:
    >>> photos = prepare_photos(load_photos(TRAIN_PHOTOS), 64)   # short sides 192
  """
  from skimage.transform import resize
  items = list(photos.items()) if isinstance(photos, dict) else list(enumerate(photos))
  if not items or any(np.ndim(p) != 2 for _, p in items):
    raise ValueError("photos must be a non-empty dict or sequence of 2-D images")
  if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
    raise ValueError(f"size must be an int >= 1, got {size!r}")
  if scale is not None and not scale >= 1.0:
    raise ValueError(f"scale must be >= 1 or None, got {scale!r}")
  out = []
  for _, p in items:
    p = np.asarray(p, np.float32)
    short = min(p.shape)
    target = short if scale is None else min(short, int(round(scale * size)))
    target = max(target, size)
    if target != short:
      f = target / short
      shape = tuple(max(size, int(round(s * f))) for s in p.shape)
      p = np.clip(resize(p, shape, anti_aliasing=f < 1, preserve_range=True), 0, 1)
      p = p.astype(np.float32)
    out.append(p)
  if isinstance(photos, dict):
    return {k: p for (k, _), p in zip(items, out)}
  return out


def random_crops(photos: dict[str, np.ndarray] | Sequence[np.ndarray], key_or_seed: Any,
                 num: int, size: int, *, scale: float | None = 3.0) -> np.ndarray:
  """``num`` random ``size`` x ``size`` crops, float32 (num, size, size); same seed, same crops.

  The photos are first resized by ``prepare_photos(photos, size, scale)``: with the
  default ``scale=3`` a photo's short side becomes 3 * size (when it is longer), so a
  crop covers about a third of it. Pass photos already prepared with ``scale=None`` to
  skip that work in a training loop. Each crop picks a photo uniformly, then a uniform
  top-left corner.

  Args:
    photos: a dict of 2-D images (``load_photos``) or a sequence of them, in [0, 1].
    key_or_seed: an int seed or a jax PRNG key.
    num: number of crops.
    size: crop side in pixels.
    scale: see ``prepare_photos``; None keeps the photos' resolution.

  Returns:
    (num, size, size) float32 in [0, 1].

  Example:
    >>> random_crops(load_photos(TRAIN_PHOTOS), 0, num=4, size=64).shape
    (4, 64, 64)
  """
  if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
    raise ValueError(f"num must be an int >= 1, got {num!r}")
  prepared = prepare_photos(photos, size, scale)
  resized = list(prepared.values()) if isinstance(prepared, dict) else prepared
  rng = _rng(key_or_seed)
  out = np.empty((num, size, size), np.float32)
  which = rng.integers(0, len(resized), size=num)
  for i, j in enumerate(which):
    p = resized[j]
    r = rng.integers(0, p.shape[0] - size + 1)
    c = rng.integers(0, p.shape[1] - size + 1)
    out[i] = p[r:r + size, c:c + size]
  return out


# -------------------------------------------------------------------------- simulators


def _check_images(images: Any) -> np.ndarray:
  x = np.asarray(images)
  if x.ndim != 3 or x.shape[0] < 1 or min(x.shape[1:]) < 2:
    raise ValueError(f"images must be a (n, H, W) batch, got shape {x.shape}")
  if not np.issubdtype(x.dtype, np.floating) or not np.all(np.isfinite(x)) or \
      x.min() < 0.0 or x.max() > 1.0:
    raise ValueError(f"images must be finite floats in [0, 1], got dtype {x.dtype}, "
                     f"range [{float(np.min(x)):g}, {float(np.max(x)):g}]")
  return x.astype(np.float32)


def _blur(x: np.ndarray, sigma: float) -> np.ndarray:
  from scipy import ndimage
  return ndimage.gaussian_filter(x, sigma, mode="reflect", truncate=4.0)


def _quantise(x: np.ndarray) -> np.ndarray:
  return (np.round(np.clip(x, 0.0, 1.0) * 255.0) / 255.0).astype(np.float32)


def multi_exposure(images: Any, seed: Any) -> FusionPair:
  """Under- and over-exposed shots of each clean image; ground truth = the image.

  Per image, with U the uniform distribution::

      a = q( clip(f_a x, 0, 1) ^ g_a ),  f_a ~ U[0.3, 0.6], g_a ~ U[1.0, 1.6]
      b = q( clip(f_b x, 0, 1) ^ g_b ),  f_b ~ U[1.5, 2.5], g_b ~ U[0.6, 0.9]

  q rounds to 8 bits (so a loses its shadows to quantisation); every x >= 1 / f_b
  saturates to 1 in b. Pixelwise a <= x <= b before rounding.

  Args:
    images: (n, H, W) floats in [0, 1].
    seed: an int or a jax PRNG key.

  Returns:
    ``FusionPair(a, b, ground_truth=images, task="multi_exposure")``.

  Example:
    >>> pair = multi_exposure(np.full((2, 8, 8), 0.5, np.float32), seed=0)
  """
  x = _check_images(images)
  rng = _rng(seed)
  n = len(x)
  col = lambda v: v[:, None, None]
  f_a, g_a = rng.uniform(0.3, 0.6, n), rng.uniform(1.0, 1.6, n)
  f_b, g_b = rng.uniform(1.5, 2.5, n), rng.uniform(0.6, 0.9, n)
  a = _quantise(np.clip(col(f_a) * x, 0, 1) ** col(g_a))
  b = _quantise(np.clip(col(f_b) * x, 0, 1) ** col(g_b))
  return FusionPair(a, b, x, "multi_exposure")


def _focus_mask(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
  """A smooth region in [0, 1]: a half-plane or blobs, edge softened over ~2 px."""
  yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
  if rng.random() < 0.5:
    theta = rng.uniform(0, 2 * np.pi)
    d = (xx - (w - 1) / 2) * np.cos(theta) + (yy - (h - 1) / 2) * np.sin(theta)
    d = d - rng.uniform(-0.25, 0.25) * min(h, w)
  else:
    field = _blur(rng.standard_normal((h, w)), min(h, w) / 8)
    d = (field - np.median(field)) / (field.std() + 1e-12) * min(h, w) / 8
  return 1.0 / (1.0 + np.exp(-d / 1.0))  # logistic edge, 10-90% width ~4.4 px


def multi_focus(images: Any, seed: Any) -> FusionPair:
  """Two shots focused on complementary regions; ground truth = the image.

  Per image a focus map m in [0, 1] is drawn: with probability 1/2 a half-plane
  (normal angle ~ U[0, 2 pi), offset ~ U[-0.25, 0.25] min(H, W) from the centre), else
  blobs (white noise smoothed by a Gaussian of sigma min(H, W) / 8, thresholded at its
  median). The signed distance d to the boundary (in pixels; for blobs the normalised
  field times min(H, W) / 8) is softened as m = sigmoid(d / 1 px). With
  B = x * Gaussian(sigma), sigma ~ U[1.5, 4.0] px (reflected border)::

      a = m B + (1 - m) x        b = (1 - m) B + m x

  Args:
    images: (n, H, W) floats in [0, 1].
    seed: an int or a jax PRNG key.

  Returns:
    ``FusionPair(a, b, ground_truth=images, task="multi_focus", mask=m)``.

  Example:
    >>> pair = multi_focus(np.random.rand(2, 32, 32).astype(np.float32), seed=0)
  """
  x = _check_images(images)
  rng = _rng(seed)
  n, h, w = x.shape
  masks = np.stack([_focus_mask(rng, h, w) for _ in range(n)])
  sigmas = rng.uniform(1.5, 4.0, n)
  blurred = np.stack([_blur(x[i].astype(np.float64), sigmas[i]) for i in range(n)])
  a = masks * blurred + (1 - masks) * x
  b = (1 - masks) * blurred + masks * x
  f32 = lambda v: np.clip(v, 0, 1).astype(np.float32)
  return FusionPair(f32(a), f32(b), x, "multi_focus", mask=masks.astype(np.float32))


def _hot_targets(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
  """1 to 4 targets, each a Gaussian blob or a soft-edged rectangle, peak 1, in [0, 1]."""
  s = min(h, w)
  yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
  shape = np.zeros((h, w))
  for _ in range(rng.integers(1, 5)):
    cy, cx = rng.uniform(0.1, 0.9) * (h - 1), rng.uniform(0.1, 0.9) * (w - 1)
    if rng.random() < 0.5:
      sd = rng.uniform(0.03, 0.08) * s
      t = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sd ** 2))
    else:
      hh, hw = rng.uniform(0.025, 0.075, 2) * s + 1.0
      t = ((np.abs(yy - cy) <= hh) & (np.abs(xx - cx) <= hw)).astype(np.float64)
      t = np.minimum(_blur(t, 1.0) / max(_blur(t, 1.0).max(), 1e-12), 1.0)
    shape = np.maximum(shape, t)
  return shape


def infrared_visible(images: Any, seed: Any) -> FusionPair:
  """A thermal-like infrared image and a noisy low-light visible image of each scene.

  Per image (s = min(H, W), U uniform, all draws independent):

  Visible b (low light, Poisson-Gaussian sensor noise)::

      v = k x ^ g,    g ~ U[1.5, 2.5], k ~ U[0.25, 0.5]
      b = clip( Poisson(P v) / P + N(0, r^2), 0, 1 ),  P ~ U[30, 100], r ~ U[0.005, 0.02]

  Infrared a (no texture, a different intensity mapping, hot targets)::

      S = x * Gaussian(sigma_s),   sigma_s = max(1, U[0.01, 0.025] s) px  (texture removed)
      S' = S or 1 - S (polarity, even odds: emissivity is not reflectance)
      G = ramp along a random direction through the centre, from -1/2 to 1/2 over the
          image, times an amplitude ~ U[0.05, 0.15] (cold sky to warm ground)
      base = 0.1 + c S' + G,   c ~ U[0.25, 0.45]           (base in [0.025, 0.625])
      T = 1 to 4 targets, each with even odds a Gaussian blob (sd ~ U[0.03, 0.08] s)
          or a rectangle (half-sides ~ U[0.025, 0.075] s + 1 px, edges blurred by a
          1 px Gaussian), centres ~ U[0.1, 0.9] of each side, combined by max, peak 1
      a = clip( base (1 - T) + L T + N(0, r_ir^2), 0, 1 ),  L ~ U[0.85, 1.0],
          r_ir ~ U[0.005, 0.02]

  so a target's core (T = 1) reads at least 0.85, above any background pixel (<= 0.625)
  before noise. The targets are absent from the visible image (hidden in the dark).

  Args:
    images: (n, H, W) floats in [0, 1].
    seed: an int or a jax PRNG key.

  Returns:
    ``FusionPair(a=infrared, b=visible, ground_truth=None, task="infrared_visible",
    mask=T)``.

  Example:
    >>> pair = infrared_visible(np.random.rand(2, 32, 32).astype(np.float32), seed=0)
  """
  x = _check_images(images)
  rng = _rng(seed)
  n, h, w = x.shape
  s = min(h, w)
  yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
  a = np.empty((n, h, w), np.float32)
  b = np.empty((n, h, w), np.float32)
  targets = np.empty((n, h, w), np.float32)
  for i in range(n):
    xi = x[i].astype(np.float64)
    v = rng.uniform(0.25, 0.5) * xi ** rng.uniform(1.5, 2.5)
    peak, read = rng.uniform(30, 100), rng.uniform(0.005, 0.02)
    b[i] = np.clip(rng.poisson(peak * v) / peak + read * rng.standard_normal((h, w)), 0, 1)
    smooth = _blur(xi, max(1.0, rng.uniform(0.01, 0.025) * s))
    if rng.random() < 0.5:
      smooth = 1.0 - smooth
    theta = rng.uniform(0, 2 * np.pi)
    proj = (xx - (w - 1) / 2) * np.cos(theta) + (yy - (h - 1) / 2) * np.sin(theta)
    ramp = proj / (2 * np.abs(proj).max() + 1e-12) * rng.uniform(0.05, 0.15)
    base = 0.1 + rng.uniform(0.25, 0.45) * smooth + ramp
    t = _hot_targets(rng, h, w)
    level, r_ir = rng.uniform(0.85, 1.0), rng.uniform(0.005, 0.02)
    a[i] = np.clip(base * (1 - t) + level * t + r_ir * rng.standard_normal((h, w)), 0, 1)
    targets[i] = t
  return FusionPair(a, b, None, "infrared_visible", mask=targets)


TASKS = {
    "multi_exposure": multi_exposure,
    "multi_focus": multi_focus,
    "infrared_visible": infrared_visible,
}


def make_pairs(task: str, images: Any, seed: Any) -> FusionPair:
  """``TASKS[task](images, seed)``: simulated source pairs for one task.

  Example:
    >>> make_pairs("multi_exposure", np.full((1, 8, 8), 0.5, np.float32), 0).a.shape
    (1, 8, 8)
  """
  if task not in TASKS:
    raise ValueError(f"unknown fusion task {task!r}; expected one of {', '.join(TASKS)}")
  return TASKS[task](images, seed)


def check_pair(a: Any, b: Any) -> None:
  """Raises a one-line ValueError unless the two source images have the same shape.

  Example:
    >>> check_pair(np.zeros((4, 4)), np.zeros((4, 4)))
  """
  sa, sb = np.shape(a), np.shape(b)
  if sa != sb:
    raise ValueError(f"source images a and b must have the same shape, got {sa} and {sb}")


# ------------------------------------------------------------------ dataset folders


def _modality_dir(path: str, subdirs: list[str], accepted: tuple[str, ...],
                  what: str) -> str:
  found = [d for d in subdirs if d.lower() in accepted]
  expected = ", ".join(d + "/" for d in accepted)
  if not found:
    raise ValueError(f"{path}: no {what} folder; expected one of {expected} (any case), "
                     f"found {sorted(subdirs) or 'no subfolders'}")
  if len(found) > 1:
    raise ValueError(f"{path}: more than one {what} folder ({', '.join(sorted(found))}); "
                     "expected exactly one")
  return os.path.join(path, found[0])


def _image_files(folder: str) -> dict[str, str]:
  """stem -> file name for the images in ``folder``; anything else is an error."""
  files = {}
  for name in sorted(os.listdir(folder)):
    full = os.path.join(folder, name)
    if name.startswith(".") or name.lower() in _IGNORED_FILES:
      continue
    stem, ext = os.path.splitext(name)
    if os.path.isdir(full) or ext.lower() not in IMAGE_EXTENSIONS:
      raise ValueError(f"{full}: not an image file; expected only "
                       f"{'/'.join(IMAGE_EXTENSIONS)} files in {folder}")
    if stem in files:
      raise ValueError(f"{full}: two files with stem {stem!r} in {folder} "
                       f"({files[stem]} and {name})")
    files[stem] = name
  if not files:
    raise ValueError(f"{folder}: empty; expected {'/'.join(IMAGE_EXTENSIONS)} images")
  return files


def read_fusion_pairs(path: str, *, max_images: int | None = None
                      ) -> list[tuple[str, np.ndarray, np.ndarray]]:
  """(stem, infrared, visible) for each pair of a dataset folder, each at its own size.

  The layout and the checks are ``load_fusion_folder``'s; use this one for datasets
  whose pairs differ in size (TNO) at native resolution.

  Example:
    >>> for name, ir, vi in read_fusion_pairs("data/TNO"): ...  # doctest: +SKIP
  """
  if not os.path.isdir(path):
    raise ValueError(f"{path}: not a folder; expected a dataset root with ir/ and vi/")
  if max_images is not None and (not isinstance(max_images, (int, np.integer))
                                 or max_images < 1):
    raise ValueError(f"max_images must be an int >= 1 or None, got {max_images!r}")
  subdirs = [d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))]
  ir_dir = _modality_dir(path, subdirs, INFRARED_DIRS, "infrared")
  vi_dir = _modality_dir(path, subdirs, VISIBLE_DIRS, "visible")
  ir_files, vi_files = _image_files(ir_dir), _image_files(vi_dir)
  for folder, mine, other_dir, other in ((ir_dir, ir_files, vi_dir, vi_files),
                                         (vi_dir, vi_files, ir_dir, ir_files)):
    for stem, name in mine.items():
      if stem not in other:
        raise ValueError(f"{os.path.join(folder, name)}: no file with stem {stem!r} in "
                         f"{other_dir}; expected paired files")
  pairs = []
  for stem in sorted(ir_files)[:max_images]:
    ir_path, vi_path = os.path.join(ir_dir, ir_files[stem]), os.path.join(vi_dir, vi_files[stem])
    ir, vi = read_image(ir_path), read_image(vi_path)
    if ir.shape != vi.shape:
      raise ValueError(f"{ir_path} is {ir.shape[0]}x{ir.shape[1]} but {vi_path} is "
                       f"{vi.shape[0]}x{vi.shape[1]}; expected a pair of the same size")
    pairs.append((stem, ir, vi))
  return pairs


def _fit(x: np.ndarray, size: tuple[int, int] | None, multiple: int | None) -> np.ndarray:
  if size is not None:
    from skimage.transform import resize
    f = max(size[0] / x.shape[0], size[1] / x.shape[1])
    shape = (max(size[0], int(round(x.shape[0] * f))), max(size[1], int(round(x.shape[1] * f))))
    if shape != x.shape:
      x = resize(x, shape, anti_aliasing=f < 1, preserve_range=True)
    r, c = (shape[0] - size[0]) // 2, (shape[1] - size[1]) // 2
    x = x[r:r + size[0], c:c + size[1]]
  if multiple is not None:
    h, w = x.shape[0] // multiple * multiple, x.shape[1] // multiple * multiple
    r, c = (x.shape[0] - h) // 2, (x.shape[1] - w) // 2
    x = x[r:r + h, c:c + w]
  return np.clip(x, 0, 1).astype(np.float32)


def load_fusion_folder(path: str, *, max_images: int | None = None,
                       size: int | tuple[int, int] | None = None,
                       multiple: int | None = None) -> FusionPair:
  """An infrared-visible dataset in the MSRS / TNO / RoadScene / M3FD layout.

  ``path`` holds one infrared folder (ir/, inf/, infrared/ or ir_images/; M3FD's Ir/)
  and one visible folder (vi/, vis/, visible/ or vi_images/; M3FD's Vis/), names in
  any case. Files are paired by stem (ir/00001.png with vi/00001.jpg), taken in sorted
  stem order (the first ``max_images``), read with Pillow as grayscale float32 in
  [0, 1] (RGB -> luminance; 16-bit scaled by 65535). Hidden files and Thumbs.db /
  desktop.ini are skipped; any other non-image file or subfolder is an error. For
  MSRS, point ``path`` at its train/ or test/ folder.

  Sizes: with ``size`` (an int or (h, w)) each image is resized (anti-aliased, aspect
  kept) to cover (h, w) and center-cropped to it; with ``multiple`` it is then
  center-cropped to the largest multiple of ``multiple`` in each side (a patch size
  or 2**levels). Without ``size`` all pairs must share one size (else use
  ``read_fusion_pairs``).

  Returns:
    ``FusionPair(a=infrared (n, H, W), b=visible (n, H, W), ground_truth=None,
    task="infrared_visible", names=stems)``.

  Raises:
    ValueError (one line, naming the path or file): a missing modality folder, a file
    without its partner, a non-image file, a pair of different sizes, an empty folder,
    pairs of different sizes without ``size``.

  Example:
    >>> pair = load_fusion_folder("data/MSRS/test", size=256)  # doctest: +SKIP
  """
  if isinstance(size, (int, np.integer)):
    size = (int(size), int(size))
  if size is not None and (len(size) != 2 or min(size) < 1):
    raise ValueError(f"size must be an int or (h, w) of positive ints, got {size!r}")
  if multiple is not None and (not isinstance(multiple, (int, np.integer)) or multiple < 1):
    raise ValueError(f"multiple must be an int >= 1 or None, got {multiple!r}")
  pairs = read_fusion_pairs(path, max_images=max_images)
  ir = [_fit(p[1], size, multiple) for p in pairs]
  vi = [_fit(p[2], size, multiple) for p in pairs]
  shapes = {x.shape for x in ir}
  if len(shapes) > 1:
    first = pairs[0]
    other = next(p for p, x in zip(pairs, ir) if x.shape != ir[0].shape)
    raise ValueError(f"{path}: pairs differ in size ({first[0]!r} is {first[1].shape}, "
                     f"{other[0]!r} is {other[1].shape}); pass size= or use read_fusion_pairs")
  return FusionPair(np.stack(ir), np.stack(vi), None, "infrared_visible",
                    names=tuple(p[0] for p in pairs))


def write_images(folder: str, images: Any, names: Sequence[str]) -> None:
  """Writes each 2-D image in [0, 1] as ``folder/<name>.png`` (8-bit, values rounded).

  Example:
    >>> write_images("out/fused", fused, names)  # doctest: +SKIP
  """
  from PIL import Image
  images = list(images)
  names = list(names)
  if len(images) != len(names):
    raise ValueError(f"got {len(images)} images but {len(names)} names")
  if len(set(names)) != len(names):
    raise ValueError(f"names must be unique, got {names}")
  for name in names:
    if not isinstance(name, str) or not name or os.sep in name or name.startswith("."):
      raise ValueError(f"bad image name {name!r}; expected a plain file stem")
  os.makedirs(folder, exist_ok=True)
  for name, x in zip(names, images):
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
      raise ValueError(f"image {name!r} must be 2-D, got shape {x.shape}")
    Image.fromarray(np.round(np.clip(x, 0, 1) * 255).astype(np.uint8), mode="L").save(
        os.path.join(folder, name + ".png"))


def write_fusion_folder(path: str, a: Any, b: Any, names: Sequence[str], *,
                        ir_dir: str = "ir", vi_dir: str = "vi") -> None:
  """Writes a = infrared and b = visible as ``path/ir/<name>.png`` and ``path/vi/<name>.png``.

  8-bit grayscale PNG (values clipped to [0, 1], rounded to k / 255), the layout
  ``load_fusion_folder`` reads back.

  Example:
    >>> write_fusion_folder("out/sim", pair.a, pair.b, ["0", "1"])  # doctest: +SKIP
  """
  a_list, b_list, names = list(a), list(b), list(names)
  if not len(a_list) == len(b_list) == len(names):
    raise ValueError(f"a, b and names must have the same length, got {len(a_list)}, "
                     f"{len(b_list)} and {len(names)}")
  for name, x, y in zip(names, a_list, b_list):
    if np.shape(x) != np.shape(y):
      raise ValueError(f"pair {name!r}: source images a and b must have the same shape, "
                       f"got {np.shape(x)} and {np.shape(y)}")
  write_images(os.path.join(path, ir_dir), a_list, names)
  write_images(os.path.join(path, vi_dir), b_list, names)
