"""Classical fusion baselines: Laplacian pyramid (jnp) and wavelet (PyWavelets) fusion."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods.token_fusion import baselines


@pytest.fixture(scope="module")
def image():
  from common.data import fusion_images
  return fusion_images.random_crops(fusion_images.load_photos(["camera"]), 0, num=2, size=64)


def test_laplacian_identical_images_return_the_image(image):
  fused = baselines.laplacian_pyramid_fusion(image, image, levels=4)
  assert fused.shape == image.shape and fused.dtype == jnp.float32
  np.testing.assert_allclose(fused, image, atol=1e-5)


def test_laplacian_pyramid_reconstructs_and_keeps_constants():
  x = jax.random.uniform(jax.random.key(0), (32, 48))
  pyr = baselines.laplacian_pyramid(x, 3)
  assert [p.shape for p in pyr] == [(32, 48), (16, 24), (8, 12), (4, 6)]
  np.testing.assert_allclose(baselines.reconstruct_laplacian(pyr), x, atol=1e-5)
  for detail in baselines.laplacian_pyramid(jnp.full((32, 48), 0.3), 3)[:-1]:
    np.testing.assert_allclose(detail, 0.0, atol=1e-6)


def test_laplacian_fusion_keeps_details_of_the_textured_source(image):
  flat = jnp.full_like(image, 0.3)
  fused = baselines.laplacian_pyramid_fusion(image, flat, levels=4)
  fine_fused = baselines.laplacian_pyramid(fused, 4)[0]
  fine_a = baselines.laplacian_pyramid(image, 4)[0]
  assert float(jnp.abs(fine_fused - fine_a).max()) < 0.01 * float(jnp.abs(fine_a).max())
  # Only the base is shared: the fused image is a plus a smooth correction.
  np.testing.assert_allclose(jnp.mean(fused), (jnp.mean(image) + 0.3) / 2, atol=0.01)


def test_laplacian_jit_and_vmap(image):
  fn = jax.jit(baselines.laplacian_pyramid_fusion, static_argnames="levels")
  a, b = image, image[::-1]
  eager = baselines.laplacian_pyramid_fusion(a, b, levels=4)
  np.testing.assert_allclose(fn(a, b, levels=4), eager, atol=1e-6)
  vmapped = jax.vmap(lambda x, y: baselines.laplacian_pyramid_fusion(x, y, 4))(a, b)
  np.testing.assert_allclose(vmapped, eager, atol=1e-6)


def test_laplacian_bad_input():
  with pytest.raises(ValueError, match=r"60x64 must be divisible by 2\*\*levels = 8"):
    baselines.laplacian_pyramid_fusion(jnp.zeros((60, 64)), jnp.zeros((60, 64)), levels=3)
  with pytest.raises(ValueError, match=r"same shape, got \(64, 64\) and \(32, 32\)"):
    baselines.laplacian_pyramid_fusion(jnp.zeros((64, 64)), jnp.zeros((32, 32)))
  with pytest.raises(ValueError, match="levels must be an int >= 1"):
    baselines.laplacian_pyramid_fusion(jnp.zeros((64, 64)), jnp.zeros((64, 64)), levels=0)


def test_wavelet_fusion(image):
  np.testing.assert_allclose(baselines.wavelet_fusion(image, image), image, atol=1e-5)
  odd = np.asarray(image[0, :45, :37])
  fused = baselines.wavelet_fusion(odd, np.full_like(odd, 0.3), wavelet="haar", levels=2)
  assert fused.shape == odd.shape and fused.dtype == np.float32
  with pytest.raises(ValueError, match="same shape"):
    baselines.wavelet_fusion(odd, odd[:-1])
  with pytest.raises(ValueError, match=r"levels must be an int in \[1, "):
    baselines.wavelet_fusion(odd, odd, levels=9)
  with pytest.raises(ValueError, match="unknown discrete wavelet 'nope'"):
    baselines.wavelet_fusion(odd, odd, wavelet="nope")
