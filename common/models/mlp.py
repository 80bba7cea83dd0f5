"""A multilayer perceptron as a flax.linen module, used functionally.

    h_0 = x,   h_i = activation(W_i h_{i-1} + b_i)  (i < L),   y = W_L h_{L-1} + b_L

Example:
    >>> model = MLP(features=(32, 32, 1))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.ones((4, 3)))
    >>> model.apply(params, jnp.ones((4, 3))).shape
    (4, 1)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax


class MLP(nn.Module):
  """Dense layers with `activation` between them and a linear last layer.

  Attributes:
    features: output width of each layer; the last entry is the output size.
    activation: the nonlinearity applied after every layer but the last.
  """

  features: Sequence[int]
  activation: Callable[[jax.Array], jax.Array] = nn.gelu

  def __post_init__(self):
    features = tuple(self.features)
    if not features or any(isinstance(f, bool) or not isinstance(f, numbers.Integral) or f < 1
                           for f in features):
      raise ValueError(f"MLP features must be a non-empty sequence of positive ints, "
                       f"got {self.features!r}")
    if not callable(self.activation):
      raise TypeError(f"MLP activation must be callable, got {self.activation!r}")
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps inputs (..., d) to outputs (..., features[-1])."""
    for i, width in enumerate(self.features):
      x = nn.Dense(width, name=f"dense_{i}")(x)
      if i < len(self.features) - 1:
        x = self.activation(x)
    return x
