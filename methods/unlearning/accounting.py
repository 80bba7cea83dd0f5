"""Storage accounting: bytes of the state each unlearning method must keep.

    bytes(tree) = sum over array leaves of size * itemsize

A method's stored state is the part of `CLState` it reads: the per-task checkpoints
theta_0..theta_{T-1} (every method, retraining included, needs the anchor of the
forgotten task and the start of each later stage; theta_T is the deployed model and is
not counted) plus, for Hessian-based stages, the curvature (d^2 numbers per task for
full/GGN, d for diagonals, 0 for gradient and Hessian-vector-product stages).

Reference: the ICML 2026 CL-unlearning paper (abstract 5) compares methods by their
storage overhead: near zero for gradient-based, O(d^2) per task for Hessian-based.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from methods.unlearning.objective import CLState


class Storage(NamedTuple):
  """Bytes a method keeps: `checkpoints` (theta_0..theta_{T-1}) + `curvature`."""
  checkpoints: int  # bytes of theta_0..theta_{T-1}
  curvature: int    # bytes of the stored curvature

  @property
  def total(self) -> int:
    return self.checkpoints + self.curvature


def tree_bytes(tree) -> int:
  """bytes(tree) = sum over array leaves of size * itemsize (None is empty).

  Args:
    tree: any pytree of arrays.

  Returns:
    The byte count.

  Example:
    >>> tree_bytes({"a": jnp.zeros((3, 4), jnp.float32), "b": None})
    48
  """
  return int(sum(np.size(x) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def state_bytes(state: CLState) -> Storage:
  """The bytes a method keeps to unlearn: checkpoints before the deployed model + curvature.

  Args:
    state: the method's `CLState`.

  Returns:
    `Storage(checkpoints=bytes(theta_0..theta_{T-1}), curvature=bytes(curvature))`.

  Example:
    >>> state_bytes(state).total
  """
  return Storage(checkpoints=tree_bytes(state.anchors[:-1]),
                 curvature=tree_bytes(state.curvature))
