"""The Action-VAE: a posterior over action chunks that resamples a policy's proposals.

A chunk x in R^{H x a} (normalised, ``windows``) is encoded to a Gaussian posterior
q(z | x) = N(mu(x), diag sigma(x)^2) over one latent token z in R^k, and decoded by
x_hat = g(z). Both maps are MLPs (TapSampling's settings: H = 10, k = 24, 7 layers of
width 256, GELU; log sigma^2 clipped to [-10, 10]). The loss is TapSampling's

    L = Huber_1(g(z), x) + beta KL(q(z | x) || N(0, I)),   z ~ q(z | x),  beta = 1e-6,

with the KL averaged over latent dimensions. The VAE sees no observation: it learns
the manifold of demonstrated chunks, and the policy supplies the state dependence.

Resampling (``resample``): the policy's N chunks give N posteriors; M components are
picked uniformly with replacement, j_m ~ U{1..N}, a latent z_m ~ q(z | x_{j_m}) is
drawn from each, and g(z_m) is the m-th new candidate.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from common.models import MLP

Array = jax.Array


class ActionVAE(nn.Module):
  """Encoder (x -> mu, log sigma^2) and decoder (z -> x) MLPs over flattened chunks.

  Attributes:
    horizon, action_dim: the chunk shape (H, a).
    latent_dim: k.
    width: hidden width.
    depth: layers per MLP (the last one linear).
  """
  horizon: int
  action_dim: int
  latent_dim: int = 24
  width: int = 256
  depth: int = 7

  def setup(self):
    hidden = (self.width,) * (self.depth - 1)
    self.encoder = MLP(hidden + (2 * self.latent_dim,))
    self.decoder = MLP(hidden + (self.horizon * self.action_dim,))

  def encode(self, chunks: Array) -> tuple[Array, Array]:
    """(n, H, a) -> mu (n, k), log sigma^2 (n, k)."""
    mu, logvar = jnp.split(self.encoder(chunks.reshape(chunks.shape[0], -1)), 2, axis=-1)
    return mu, jnp.clip(logvar, -10.0, 10.0)

  def decode(self, z: Array) -> Array:
    """(n, k) -> (n, H, a)."""
    return self.decoder(z).reshape(z.shape[0], self.horizon, self.action_dim)

  def __call__(self, chunks: Array, key: Array):
    mu, logvar = self.encode(chunks)
    z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape)
    return self.decode(z), mu, logvar


def kl_to_standard_normal(mu: Array, logvar: Array) -> Array:
  """KL(N(mu, e^logvar) || N(0, 1)) per dimension: (mu^2 + e^logvar - 1 - logvar) / 2."""
  return 0.5 * (jnp.square(mu) + jnp.exp(logvar) - 1.0 - logvar)


def make_loss_fn(vae: ActionVAE, kl_weight: float = 1e-6):
  """``loss_fn(params, batch, key)`` for ``common.train``: Huber + beta KL (module docstring).

  Args:
    vae: the module.
    kl_weight: beta.

  Returns:
    The loss function over ``batch = {"chunks": (B, H, a)}``, with metrics
    ``{"rec": Huber, "kl": mean KL}``.
  """
  def loss_fn(params, batch, key):
    recon, mu, logvar = vae.apply(params, batch["chunks"], key)
    rec = jnp.mean(optax.huber_loss(recon, batch["chunks"], delta=1.0))
    kl = jnp.mean(kl_to_standard_normal(mu, logvar))
    return rec + kl_weight * kl, {"rec": rec, "kl": kl}
  return loss_fn


def reconstruct(vae: ActionVAE, params, chunks: Array) -> Array:
  """g(mu(x)): the posterior mean's decoding, (n, H, a)."""
  mu, _ = vae.apply(params, chunks, method=ActionVAE.encode)
  return vae.apply(params, mu, method=ActionVAE.decode)


def resample(vae: ActionVAE, params, key: Array, chunks: Array, num: int) -> Array:
  """M new chunks from the mixture of the N chunks' posteriors (module docstring).

  Args:
    vae: the module.
    params: its parameters.
    key: PRNG key.
    chunks: (N, H, a) proposals.
    num: M (static).

  Returns:
    (M, H, a) decoded chunks, clipped to [-1, 1].

  Example:
    >>> extra = resample(vae, params, key, policy_chunks, 12)
  """
  k_pick, k_z = jax.random.split(key)
  mu, logvar = vae.apply(params, chunks, method=ActionVAE.encode)
  pick = jax.random.randint(k_pick, (num,), 0, chunks.shape[0])
  z = mu[pick] + jnp.exp(0.5 * logvar[pick]) * jax.random.normal(k_z, (num, mu.shape[-1]))
  return jnp.clip(vae.apply(params, z, method=ActionVAE.decode), -1.0, 1.0)


class EmaState(NamedTuple):
  ema: optax.Params
  count: Array


def with_parameter_ema(inner: optax.GradientTransformation,
                       decay: float) -> optax.GradientTransformation:
  """``inner``, plus an exponential moving average of the parameters in its state.

  After each update, ema <- decay ema + (1 - decay) (params + updates) (TapSampling
  keeps an EMA of the VAE with decay 0.999 and samples from it). The EMA is part of
  the optimizer state, so ``common.train`` checkpoints and resumes it; read it with
  ``parameter_ema(opt_state)``. Updates are ``inner``'s, unchanged.

  Args:
    inner: the optimizer.
    decay: in [0, 1).

  Returns:
    An ``optax.GradientTransformation`` (needs ``params`` in ``update``).
  """
  if not 0.0 <= decay < 1.0:
    raise ValueError(f"EMA decay must be in [0, 1), got {decay}")

  def init_fn(params):
    return (inner.init(params), EmaState(jax.tree.map(jnp.asarray, params),
                                         jnp.zeros((), jnp.int32)))

  def update_fn(updates, state, params=None):
    inner_state, ema_state = state
    updates, inner_state = inner.update(updates, inner_state, params)
    new_params = optax.apply_updates(params, updates)
    ema = optax.tree.update_moment(new_params, ema_state.ema, decay, 1)
    return updates, (inner_state, EmaState(ema, ema_state.count + 1))

  return optax.GradientTransformation(init_fn, update_fn)


def parameter_ema(opt_state):
  """The parameter EMA kept by ``with_parameter_ema`` (found anywhere in ``opt_state``)."""
  found = [s for s in jax.tree.leaves(opt_state, is_leaf=lambda s: isinstance(s, EmaState))
           if isinstance(s, EmaState)]
  if len(found) != 1:
    raise ValueError(f"expected one parameter EMA in the optimizer state, found {len(found)}")
  return found[0].ema
