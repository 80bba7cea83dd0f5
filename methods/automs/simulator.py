"""The Simulator role's tool: designs x in [0, 1]^7 -> homogenised property rows.

A design is x = (family gene, u_1..u_6): the gene picks one of the task's allowed
families, `families[min(floor(x_0 k), k - 1)]`, and u the family's shape parameters
(`cells`). `Simulator` renders every design's density field (`cells.density`),
homogenises it (`common.physics.homogenize`) and returns one row per design in
`tasks.PROPERTY_KEYS` order; it is one jitted, vmapped program over a fixed batch size
(shorter batches are padded), and it counts the solves it performs (the budget unit).
"""

from __future__ import annotations

from collections.abc import Sequence
import functools

import jax
import jax.numpy as jnp
import numpy as np

from common import physics
from methods.automs import cells
from methods.automs import tasks

DIM = 1 + cells.NUM_PARAMS


def family_indices(families: Sequence[str]) -> np.ndarray:
  """Indices into `cells.FAMILIES`; one-line ValueError for an unknown or empty list."""
  if not families:
    raise ValueError("families is empty; expected at least one of "
                     f"{cells.FAMILY_NAMES}")
  return np.array([cells.family_index(f) for f in families], np.int32)


def decode(X: np.ndarray, families: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
  """(family index into `cells.FAMILIES` (P,), shape parameters (P, 6)) of designs X."""
  X = np.asarray(X, np.float64)
  if X.ndim != 2 or X.shape[1] != DIM:
    raise ValueError(f"designs must have shape (P, {DIM}), got {X.shape}")
  index = family_indices(families)
  k = len(index)
  gene = np.minimum((np.clip(X[:, 0], 0, 1) * k).astype(int), k - 1)
  return index[gene], np.clip(X[:, 1:], 0.0, 1.0)


def encode(family: str, u: Sequence[float], families: Sequence[str]) -> np.ndarray:
  """The design x of (family, u): the gene at the centre of the family's bin."""
  k = list(families).index(family)
  return np.concatenate([[(k + 0.5) / len(families)], np.clip(u, 0.0, 1.0)])


def property_row(props: physics.Properties) -> jax.Array:
  """One cell's row in `tasks.PROPERTY_KEYS` order from its `Properties`."""
  e = physics.engineering_constants(props.C)
  k11, k22 = props.kappa[0, 0], props.kappa[1, 1]
  return jnp.stack([e.E1, e.E2, e.G12, e.nu12, k11, k22, props.alpha[0], props.alpha[1],
                    props.volume_fraction, e.E1 / e.E2, k11 / k22])


def properties(family: jax.Array, u: jax.Array, n: int, material: physics.Material,
               tol: float | None = None) -> jax.Array:
  """The property row of one design (differentiable in u; vmap over designs)."""
  return property_row(physics.homogenize(cells.density(family, u, n), material, tol=tol))


@functools.lru_cache(maxsize=None)
def _compiled(n: int, material: physics.Material, tol: float | None):
  """One jitted, vmapped program per (mesh, material, tolerance), shared by simulators."""
  return jax.jit(jax.vmap(lambda f, u: properties(f, u, n, material, tol)))


class Simulator:
  """Counts and runs homogenisation solves for batches of designs.

  Example:
    >>> sim = Simulator(("reentrant",), n=32, batch=8)
    >>> rows = sim(np.full((3, 7), 0.5))      # (3, len(tasks.PROPERTY_KEYS))
  """

  def __init__(self, families: Sequence[str], *, n: int = 64,
               material: physics.Material = physics.Material(), tol: float | None = None,
               batch: int = 20):
    family_indices(families)
    if n < 8:
      raise ValueError(f"mesh size n must be >= 8 for the cell families, got {n}")
    self.families, self.n, self.batch, self.calls = tuple(families), n, batch, 0
    self.material, self.tol = material, tol
    self._run = _compiled(n, material, tol)

  def __call__(self, X: np.ndarray) -> np.ndarray:
    family, u = decode(X, self.families)
    rows = []
    for start in range(0, len(family), self.batch):
      f, uu = family[start:start + self.batch], u[start:start + self.batch]
      pad = self.batch - len(f)
      out = self._run(jnp.asarray(np.pad(f, (0, pad))),
                      jnp.asarray(np.pad(uu, ((0, pad), (0, 0))), jnp.result_type(float)))
      rows.append(np.asarray(out)[:len(f)])
    self.calls += len(family)
    return np.concatenate(rows) if rows else np.zeros((0, len(tasks.PROPERTY_KEYS)))
