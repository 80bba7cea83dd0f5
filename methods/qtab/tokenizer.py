"""Q-Tab's tokenizer of the numeric columns: residual LFQ with residual corruption.

An MLP encoder maps the (quantile-normalised) numeric part x of a row to a latent
z in R^b; residual LFQ (``common.models.lfq``, MAGVIT-v2's lookup-free quantiser)
turns z into L tokens, one per level,

  q_l = s_l sign(r_l),  r_{l+1} = r_l - q_l,  r_0 = z,  s_l = s_0 / 2^l,

each an integer in [0, 2^b); an MLP decoder reconstructs x from z_hat = sum_l q_l.
Encoder and decoder are trained jointly on

  L = ||D(z_hat) - x||^2 + w_c ||D(z_tilde) - x||^2 + 0.1 L_entropy + 0.25 L_commit,

where z_tilde decodes the codes after *residual corruption*: each bit of level l is
flipped (or resampled) with probability rho_l. The corrupted codes are codes no
training row produced, and the second term teaches the decoder to map them to rows
near the one they came from, so that the code space the generator samples from is
larger than the data (Q-Tab, ICML 2026). Because the encoder moves while the decoder
learns, the targets of the corrupted codes move too (the paper's moving-target
regression); the corruption *structure* rho_1..rho_L sets how far a corrupted code
lands from its row: a flipped bit at level l moves z_hat by 2 s_l, so corrupting fine
levels stays local and corrupting coarse levels supervises far-away codes.

Structures (``CORRUPTIONS``), with rate rho:
  none:     rho_l = 0 (the no-corruption ablation);
  uniform:  rho_l = rho;
  fine:     rho_l = rho (l + 1) / L (more corruption at the finer levels);
  coarse:   rho_l = rho (L - l) / L (more at the coarser levels).

The ablation the paper argues against, residual VQ with a learned codebook
(``quantizer="rvq"``), replaces each level's sign by the nearest of K learned code
vectors with the VQ-VAE codebook and commitment losses (van den Oord et al. 2017):
||sg(r_l) - e||^2 + 0.25 ||r_l - sg(e)||^2.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.models import lfq
from common.models.mlp import MLP

CORRUPTIONS = ("none", "uniform", "fine", "coarse")
QUANTIZERS = ("lfq", "rvq")


class TokenizerConfig(NamedTuple):
  """bits b and levels L of the residual quantiser (vocabulary 2^b per level; with
  ``quantizer="rvq"`` K = 2^b learned codes per level); the MLPs' width and depth;
  the corruption structure, rate rho, mode (flip / resample) and weight w_c; the LFQ
  loss constants of MAGVIT-v2 (beta, gamma, 0.1, 0.25)."""
  bits: int = 8
  levels: int = 4
  hidden: int = 256
  depth: int = 2
  quantizer: str = "lfq"
  corruption: str = "fine"
  corruption_rate: float = 0.1
  corruption_mode: str = "flip"
  corruption_weight: float = 1.0
  scale: float = 1.0
  beta: float = 1.0
  gamma: float = 1.0
  entropy_weight: float = 0.1
  commit_weight: float = 0.25

  @property
  def vocab(self) -> int:
    return 2 ** self.bits


def check_config(config: TokenizerConfig) -> None:
  """One-line ValueErrors naming the bad field."""
  if config.quantizer not in QUANTIZERS:
    raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {config.quantizer!r}")
  if config.corruption not in CORRUPTIONS:
    raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {config.corruption!r}")
  if config.corruption_mode not in lfq.CORRUPTION_MODES:
    raise ValueError(f"corruption_mode must be one of {lfq.CORRUPTION_MODES}, "
                     f"got {config.corruption_mode!r}")
  if not 1 <= config.bits <= lfq.MAX_ENTROPY_BITS:
    raise ValueError(f"bits must be in [1, {lfq.MAX_ENTROPY_BITS}], got {config.bits}")
  if config.levels < 1:
    raise ValueError(f"levels must be >= 1, got {config.levels}")
  if not 0.0 <= config.corruption_rate <= 1.0:
    raise ValueError(f"corruption_rate must be in [0, 1], got {config.corruption_rate}")


def corruption_rates(config: TokenizerConfig) -> np.ndarray:
  """rho_1..rho_L of the configured structure (see the module docstring)."""
  levels, rho = config.levels, config.corruption_rate
  l = np.arange(levels, dtype=np.float64)
  return {"none": np.zeros(levels), "uniform": np.full(levels, rho),
          "fine": rho * (l + 1) / levels, "coarse": rho * (levels - l) / levels
          }[config.corruption]


class NumericTokenizer(nn.Module):
  """Encoder x (..., d) -> z (..., b), decoder z_hat (..., b) -> x (..., d); with
  ``quantizer="rvq"`` also the learned codebooks (L, K, b)."""
  config: TokenizerConfig
  features: int

  def setup(self):
    c = self.config
    self.encoder = MLP((c.hidden,) * c.depth + (c.bits,))
    self.decoder = MLP((c.hidden,) * c.depth + (self.features,))
    if c.quantizer == "rvq":
      centred = lambda key, shape: jax.random.uniform(key, shape, minval=-c.scale,
                                                      maxval=c.scale)
      self.codebooks = self.param("codebooks", centred, (c.levels, c.vocab, c.bits))

  def encode(self, x):
    return self.encoder(x)

  def decode(self, z_hat):
    return self.decoder(z_hat)

  def __call__(self, x):
    z = self.encode(x)
    return z, self.decode(z)


def init(key, config: TokenizerConfig, features: int):
  """Parameters of the tokenizer for rows with `features` numeric columns."""
  check_config(config)
  return NumericTokenizer(config, features).init(key, jnp.zeros((1, features)))


class RVQ(NamedTuple):
  z_hat: jax.Array      # (..., b) straight-through sum of the chosen code vectors
  indices: jax.Array    # (..., L)
  losses: jax.Array     # () the codebook + 0.25 commitment losses summed over levels


def rvq_quantize(z, codebooks) -> RVQ:
  """Residual VQ: at level l pick e = argmin_k ||r_l - C_l[k]||, r_{l+1} = r_l - e."""
  residual, total, indices, loss = z, jnp.zeros_like(z), [], 0.0
  for book in codebooks:
    d2 = jnp.sum((residual[..., None, :] - book) ** 2, axis=-1)
    k = jnp.argmin(d2, axis=-1)
    e = book[k]
    loss = loss + jnp.mean((jax.lax.stop_gradient(residual) - e) ** 2) \
        + 0.25 * jnp.mean((residual - jax.lax.stop_gradient(e)) ** 2)
    indices.append(k)
    total = total + e
    residual = residual - e
  z_hat = z + jax.lax.stop_gradient(total - z)
  return RVQ(z_hat, jnp.stack(indices, axis=-1).astype(jnp.int32), loss)


def rvq_dequantize(indices, codebooks):
  """(..., L) tokens -> (..., b) the sum of the chosen code vectors."""
  return sum(codebooks[l][indices[..., l]] for l in range(codebooks.shape[0]))


def tokenize(params, x, config: TokenizerConfig):
  """Rows (n, d) -> tokens (n, L) int32."""
  model = NumericTokenizer(config, x.shape[-1])
  z = model.apply(params, x, method=NumericTokenizer.encode)
  if config.quantizer == "rvq":
    return rvq_quantize(z, params["params"]["codebooks"]).indices
  return lfq.quantize(z, config.levels, config.scale).indices


def detokenize(params, tokens, config: TokenizerConfig, features: int):
  """Tokens (n, L) -> reconstructed rows (n, d): the decoder at the dequantised code."""
  model = NumericTokenizer(config, features)
  if config.quantizer == "rvq":
    z_hat = rvq_dequantize(tokens, params["params"]["codebooks"])
  else:
    z_hat = lfq.dequantize(tokens, config.bits, config.scale)
  return model.apply(params, z_hat, method=NumericTokenizer.decode)


def loss(params, x, key, config: TokenizerConfig):
  """The joint encoder-decoder loss of the module docstring -> (loss, metrics)."""
  model = NumericTokenizer(config, x.shape[-1])
  z = model.apply(params, x, method=NumericTokenizer.encode)
  dec = lambda zh: model.apply(params, zh, method=NumericTokenizer.decode)
  if config.quantizer == "rvq":
    q = rvq_quantize(z, params["params"]["codebooks"])
    recon = jnp.mean((dec(q.z_hat) - x) ** 2)
    return recon + q.losses, {"recon": recon, "vq": q.losses}
  q = lfq.quantize(z, config.levels, config.scale)
  recon = jnp.mean((dec(q.z_hat) - x) ** 2)
  reg = lfq.lfq_losses(z, q, config.scale, config.beta, config.gamma,
                       config.entropy_weight, config.commit_weight)
  metrics = {"recon": recon, "entropy": reg["entropy"], "commitment": reg["commitment"]}
  total = recon + reg["total"]
  rates = corruption_rates(config)
  if np.any(rates > 0):
    codes = lfq.corrupt_codes(key, q.codes, rates, config.corruption_mode)
    z_tilde = q.z_hat + jax.lax.stop_gradient(lfq.dequantize_codes(codes, config.scale)
                                              - q.z_hat)
    corrupted = jnp.mean((dec(z_tilde) - x) ** 2)
    total = total + config.corruption_weight * corrupted
    metrics["recon_corrupted"] = corrupted
  return total, metrics


def make_loss_fn(config: TokenizerConfig):
  """`loss_fn(params, batch, key)` for ``common.train.train``; batch = {"x": (B, d)}."""
  check_config(config)

  def loss_fn(params, batch, key):
    return loss(params, batch["x"], key, config)
  return loss_fn
