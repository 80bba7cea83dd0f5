"""Base policies over action chunks, conditioned on the observation.

Both propose normalised chunks x in R^{H x a} (``windows``) given an observation o:

* ``FlowPolicy``: conditional flow matching on ``methods.flow_matching``. The velocity
  v_theta(t, x, o) is a ``ConditionalMLP`` trained with the CFM loss
  E |v_theta(t, (1 - t) x_0 + t x_1, o) - (x_1 - x_0)|^2 (x_0 ~ N(0, I), x_1 a
  demonstrated chunk); a sample is the Euler solution of dx/dt = v_theta(t, x, o) from
  x_0 ~ N(0, I), clipped to [-1, 1].
* ``GaussianPolicy``: behaviour cloning with a diagonal Gaussian head,
  x ~ N(mu_theta(o), diag sigma_theta(o)^2), trained by maximum likelihood
  (log sigma clipped to [-5, 1]). It is unimodal, so on multimodal demonstrations its
  samples straddle the modes: a deliberately different base policy.

A policy is a NamedTuple of static settings with pure methods: ``init(key, obs_dim)``,
``loss_fn(params, batch, key)`` for ``common.train`` (batch ``{"obs", "chunks"}``) and
``sample(params, key, obs (o,), n) -> (n, H, a)``.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from common.models import MLP
from methods.flow_matching import losses as fm_losses
from methods.flow_matching import networks as fm_networks
from methods.flow_matching import sampling as fm_sampling

Array = jax.Array
POLICIES = ("flow", "gaussian")


class FlowPolicy(NamedTuple):
  """A conditional flow-matching chunk policy (see the module docstring).

  Attributes:
    horizon, action_dim: the chunk's shape (H, a).
    hidden: the velocity MLP's hidden widths.
    num_steps: Euler steps of the sampler.
  """
  horizon: int
  action_dim: int
  hidden: Sequence[int] = (256, 256, 256)
  num_steps: int = 10

  @property
  def net(self) -> fm_networks.ConditionalMLP:
    return fm_networks.ConditionalMLP(hidden=tuple(self.hidden),
                                      dim=self.horizon * self.action_dim)

  def init(self, key: Array, obs_dim: int):
    d = self.horizon * self.action_dim
    return self.net.init(key, jnp.zeros((1,)), jnp.zeros((1, d)), jnp.zeros((1, obs_dim)))

  def loss_fn(self, params, batch, key):
    flat = batch["chunks"].reshape(batch["chunks"].shape[0], -1)
    cfm = fm_losses.make_loss_fn(self.net.apply, p_uncond=0.0)
    return cfm(params, {"x1": flat, "cond": batch["obs"]}, key)

  def sample(self, params, key: Array, obs: Array, n: int) -> Array:
    d = self.horizon * self.action_dim
    cond = jnp.broadcast_to(obs, (n, obs.shape[-1]))
    field = lambda t, x: self.net.apply(params, t, x, cond)
    x1 = fm_sampling.sample_ode(field, jax.random.normal(key, (n, d)),
                                num_steps=self.num_steps)
    return jnp.clip(x1, -1.0, 1.0).reshape(n, self.horizon, self.action_dim)


class GaussianPolicy(NamedTuple):
  """Behaviour cloning with a diagonal Gaussian head (see the module docstring)."""
  horizon: int
  action_dim: int
  hidden: Sequence[int] = (256, 256, 256)

  @property
  def net(self) -> MLP:
    return MLP(tuple(self.hidden) + (2 * self.horizon * self.action_dim,))

  def init(self, key: Array, obs_dim: int):
    return self.net.init(key, jnp.zeros((1, obs_dim)))

  def _moments(self, params, obs: Array):
    mean, log_std = jnp.split(self.net.apply(params, obs), 2, axis=-1)
    return mean, jnp.clip(log_std, -5.0, 1.0)

  def loss_fn(self, params, batch, key):
    del key
    flat = batch["chunks"].reshape(batch["chunks"].shape[0], -1)
    mean, log_std = self._moments(params, batch["obs"])
    nll = 0.5 * jnp.square((flat - mean) / jnp.exp(log_std)) + log_std
    return jnp.mean(jnp.sum(nll, axis=-1)), {"mse": jnp.mean(jnp.square(flat - mean))}

  def sample(self, params, key: Array, obs: Array, n: int) -> Array:
    mean, log_std = self._moments(params, obs[None])
    eps = jax.random.normal(key, (n, mean.shape[-1]))
    x = jnp.clip(mean + jnp.exp(log_std) * eps, -1.0, 1.0)
    return x.reshape(n, self.horizon, self.action_dim)


def make_policy(name: str, horizon: int, action_dim: int, **kwargs):
  """The base policy called ``name`` ("flow" or "gaussian"); unknown names raise."""
  if name == "flow":
    return FlowPolicy(horizon, action_dim, **kwargs)
  if name == "gaussian":
    kwargs.pop("num_steps", None)
    return GaussianPolicy(horizon, action_dim, **kwargs)
  raise ValueError(f"unknown policy {name!r}; expected one of {POLICIES}")
