"""Lookup-free quantisation (LFQ), plain and residual, with MAGVIT-v2's entropy term.

LFQ (Yu et al. 2024, "Language Model Beats Diffusion -- Tokenizer is Key to Visual
Generation", MAGVIT-v2) quantises each of b latent dimensions to its sign: the codebook
{-1, +1}^b is implicit (2^b codes, no lookup, nothing to learn), and the token is the
integer whose bits are the signs, index = sum_i 2^i [z_i > 0].

Residual LFQ quantises what the previous levels left: with scales s_l = s_0 / 2^l,

  q_l = s_l sign(r_l),   r_{l+1} = r_l - q_l,   r_0 = z,   z_hat = sum_l q_l,

a binary expansion of z: if |z_i| <= 2 s_0 then |z_i - z_hat_i| <= s_0 / 2^{L-1}.
Gradients pass straight through (z_hat = z + stop_gradient(z_hat - z)).

Training losses (per level l, on the residual's code assignment
p_l(c | r) = softmax_c(beta <r / s_l, c>) over the 2^b codes):

  L_entropy = mean_r H(p_l(. | r)) - gamma H(mean_r p_l(. | r))   (weight 0.1)
  L_commit  = mean ||z - stop_gradient(z_hat)||^2                  (weight 0.25)

Low per-sample entropy makes assignments confident; high entropy of the batch's mean
assignment spreads the batch over the codebook. `corrupt_codes` flips or resamples
code bits at a per-level rate (Q-Tab's residual corruption: the decoder learns codes
no training row produced).

Shared by Q-Tab (a tokenizer of numeric table columns) and the 1D image tokenizer of
token fusion.
"""

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

MAX_ENTROPY_BITS = 16  # the entropy term enumerates all 2^b codes
CORRUPTION_MODES = ("flip", "resample")


class Quantized(NamedTuple):
  """z_hat: (..., b) the straight-through reconstruction sum_l q_l; codes: (..., L, b)
  the signs in {-1, +1}; indices: (..., L) int32 tokens in [0, 2^b); residuals:
  (..., L, b) what each level quantised (r_l)."""
  z_hat: jax.Array
  codes: jax.Array
  indices: jax.Array
  residuals: jax.Array


def scales(levels: int, scale: float = 1.0) -> jnp.ndarray:
  """s_l = scale / 2^l for l = 0..levels-1."""
  return scale / 2.0 ** jnp.arange(levels)


def signs(x):
  """sign with sign(0) = +1, so every input maps to a code."""
  return jnp.where(x >= 0, 1.0, -1.0).astype(x.dtype)


def codes_to_indices(codes):
  """(..., b) signs -> (...,) int32, bit i set where codes[..., i] > 0."""
  b = codes.shape[-1]
  return jnp.sum((codes > 0).astype(jnp.int32) << jnp.arange(b, dtype=jnp.int32), axis=-1)


def indices_to_codes(indices, bits: int, dtype=jnp.float32):
  """(...,) int tokens -> (..., bits) signs in {-1, +1}."""
  bit = (jnp.asarray(indices)[..., None] >> jnp.arange(bits)) & 1
  return (2 * bit - 1).astype(dtype)


def quantize(z, levels: int = 1, scale: float = 1.0) -> Quantized:
  """Residual LFQ of z (..., b) with `levels` levels (1: plain LFQ)."""
  if levels < 1:
    raise ValueError(f"levels must be >= 1, got {levels}")
  s = scales(levels, scale).astype(z.dtype)
  residual, codes, residuals = z, [], []
  for l in range(levels):
    c = signs(residual)
    residuals.append(residual)
    codes.append(c)
    residual = residual - s[l] * c
  codes = jnp.stack(codes, axis=-2)
  z_q = dequantize_codes(codes, scale)
  z_hat = z + jax.lax.stop_gradient(z_q - z)
  return Quantized(z_hat, codes, codes_to_indices(codes), jnp.stack(residuals, axis=-2))


def dequantize_codes(codes, scale: float = 1.0):
  """(..., L, b) signs -> (..., b) sum_l s_l c_l."""
  s = scales(codes.shape[-2], scale).astype(codes.dtype)
  return jnp.einsum("...lb,l->...b", codes, s)


def dequantize(indices, bits: int, scale: float = 1.0, dtype=jnp.float32):
  """(..., L) tokens -> (..., b) the reconstruction sum_l s_l c_l."""
  return dequantize_codes(indices_to_codes(indices, bits, dtype), scale)


def all_codes(bits: int, dtype=jnp.float32):
  """(2^bits, bits): code c for every index (row j has the bits of j)."""
  return indices_to_codes(jnp.arange(2**bits), bits, dtype)


def entropy_terms(residuals, scale: float = 1.0, beta: float = 1.0):
  """Per level: (mean per-sample entropy, entropy of the mean assignment), in nats.

  Args:
    residuals: (N, L, b) the residuals each level quantised (`Quantized.residuals`,
      flattened over the batch).
  Returns:
    two (L,) arrays.
  """
  n, levels, b = residuals.shape
  if b > MAX_ENTROPY_BITS:
    raise ValueError(f"the entropy term enumerates 2^b codes; b={b} > {MAX_ENTROPY_BITS}")
  s = scales(levels, scale).astype(residuals.dtype)
  logits = beta * jnp.einsum("nlb,cb->nlc", residuals / s[:, None], all_codes(b, residuals.dtype))
  logp = jax.nn.log_softmax(logits, axis=-1)
  p = jnp.exp(logp)
  per_sample = -jnp.mean(jnp.sum(p * logp, axis=-1), axis=0)
  mean_p = jnp.mean(p, axis=0)
  batch = -jnp.sum(mean_p * jnp.log(jnp.maximum(mean_p, 1e-30)), axis=-1)
  return per_sample, batch


def lfq_losses(z, quantized: Quantized, scale: float = 1.0, beta: float = 1.0,
               gamma: float = 1.0, entropy_weight: float = 0.1, commit_weight: float = 0.25):
  """{"entropy", "commitment", "total"}: the LFQ regularisers of MAGVIT-v2 (the
  entropy term summed over levels), to add to a reconstruction loss."""
  b = z.shape[-1]
  flat = quantized.residuals.reshape(-1, *quantized.residuals.shape[-2:])
  per_sample, batch = entropy_terms(flat, scale, beta)
  entropy = jnp.sum(per_sample - gamma * batch)
  z_q = jax.lax.stop_gradient(dequantize_codes(quantized.codes, scale))
  commitment = jnp.mean(jnp.sum((z - z_q) ** 2, axis=-1)) / b
  return {"entropy": entropy, "commitment": commitment,
          "total": entropy_weight * entropy + commit_weight * commitment}


def corrupt_codes(key, codes, rates: Sequence[float], mode: str = "flip"):
  """Corrupts code bits level by level: each bit of level l is, with probability
  rates[l], flipped ("flip") or replaced by a uniform random sign ("resample", which
  changes it with probability rates[l] / 2).

  Args:
    codes: (..., L, b) signs.
    rates: L probabilities in [0, 1].
  """
  if mode not in CORRUPTION_MODES:
    raise ValueError(f"mode must be one of {CORRUPTION_MODES}, got {mode!r}")
  rates = np.asarray(rates, dtype=np.float64)
  if rates.shape != (codes.shape[-2],) or np.any((rates < 0) | (rates > 1)):
    raise ValueError(f"rates must be {codes.shape[-2]} probabilities in [0, 1] (one per "
                     f"level), got {rates.tolist()}")
  k_hit, k_sign = jax.random.split(key)
  hit = jax.random.uniform(k_hit, codes.shape) < jnp.asarray(rates, codes.dtype)[:, None]
  if mode == "flip":
    replacement = -codes
  else:
    replacement = jnp.where(jax.random.bernoulli(k_sign, 0.5, codes.shape), 1.0, -1.0)
  return jnp.where(hit, replacement.astype(codes.dtype), codes)
