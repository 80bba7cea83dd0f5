"""Weight-space baselines for experts fine-tuned from one base model.

    average:          theta = (1 / E) sum_e theta_e
    task arithmetic:  theta = theta_0 + lambda sum_e (theta_e - theta_0)   (Ilharco et al., 2023)

Both need experts of one architecture (identical parameter trees).

Example:
    >>> merged = average([p_a, p_b])
    >>> ta = task_arithmetic(p_base, [p_a, p_b], 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import optax


def _check_same(trees: Sequence[Any]) -> None:
  if len(trees) < 1:
    raise ValueError("need at least one parameter tree")
  shapes = [jax.tree.map(lambda x: x.shape, t) for t in trees]
  for i, s in enumerate(shapes[1:], 1):
    if jax.tree.structure(s) != jax.tree.structure(shapes[0]) or s != shapes[0]:
      raise ValueError(f"parameter tree {i} differs from tree 0 in structure or shapes; "
                       "weight merging needs experts of one architecture")


def average(params: Sequence[Any]) -> Any:
  """The uniform average of the parameter trees."""
  _check_same(params)
  return jax.tree.map(lambda *x: sum(x) / len(x), *params)


def task_arithmetic(base: Any, params: Sequence[Any], scale: float) -> Any:
  """base + scale * sum_e (params_e - base)."""
  _check_same([base, *params])
  vectors = [optax.tree.sub(p, base) for p in params]
  return optax.tree.add(base, optax.tree.scale(scale, jax.tree.map(lambda *v: sum(v),
                                                                      *vectors)))
