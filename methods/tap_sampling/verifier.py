"""The task-progress verifier: per-step progress of a candidate chunk from a state.

v_phi(o, x) in R^H predicts the progress labels of ``windows.progress_windows`` (the
demonstrations' own time structure: forward windows rise, backward ones fall) from the
observation o and a normalised chunk x; it is an MLP on [o, vec(x)] trained by mean
squared error,

    L(phi) = E_{(o, x, y)} (1/H) sum_h (v_phi(o, x)_h - y_h)^2.

A candidate's score is its mean predicted progress, s(o, x) = (1/H) sum_h v_phi(o, x)_h
(TapSampling averages the verifier's per-step outputs over the chunk).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from common.models import MLP

Array = jax.Array


class ProgressVerifier(NamedTuple):
  """MLP verifier over (observation, chunk) (see the module docstring).

  Attributes:
    horizon, action_dim: the chunk shape (H, a).
    hidden: hidden widths.
  """
  horizon: int
  action_dim: int
  hidden: Sequence[int] = (256, 256, 256)

  @property
  def net(self) -> MLP:
    return MLP(tuple(self.hidden) + (self.horizon,))

  def init(self, key: Array, obs_dim: int):
    return self.net.init(key, jnp.zeros((1, obs_dim + self.horizon * self.action_dim)))

  def predict(self, params, obs: Array, chunks: Array) -> Array:
    """Per-step progress (n, H) for obs (n, o) or (o,) and chunks (n, H, a)."""
    n = chunks.shape[0]
    obs = jnp.broadcast_to(obs, (n, obs.shape[-1]))
    return self.net.apply(params, jnp.concatenate([obs, chunks.reshape(n, -1)], axis=-1))

  def score(self, params, obs: Array, chunks: Array) -> Array:
    """s(o, x): the mean predicted progress of each chunk, (n,)."""
    return jnp.mean(self.predict(params, obs, chunks), axis=-1)

  def loss_fn(self, params, batch, key):
    del key
    err = self.predict(params, batch["obs"], batch["chunks"]) - batch["labels"]
    return jnp.mean(jnp.square(err)), {}
