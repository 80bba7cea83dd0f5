"""Fine-tuning recipes by name: "first_order", "mezo", "lozo", "agzo_r<r>".

What the experiment and the benchmark compare, in one place: the estimator and the
optax chain each name stands for, its forward passes per step, and the ZO-SGD step

    lr = zo_lr_scale / k,

k the dimension of the method's perturbation space (the 1/(L k) step of
Gaussian-smoothing ZO theory): D for MeZO and LOZO (LOZO's estimate has MeZO's
variance), sum over linear kernels of min(r, d_in) d_out plus the other tuned sizes
for AGZO. First order uses Adam at `lr_first_order`. `peak_bytes` reads the
compiled memory of one step.

`spec` arguments are any object with the named attributes, e.g. the experiment's
`config.estimator` (eps, power_iters, agzo_two_sided, lozo_rank, lozo_interval) and
`config.fine_tune` (lr_first_order, zo_lr_scale, first_order_pass_cost).

Example:
    >>> names = method_names(("mezo", "agzo"), (1, 4))          # mezo, agzo_r1, agzo_r4
    >>> tx = optimizer("agzo_r4", loss_fn, loss_and_taps,
    ...                learning_rate("agzo_r4", params, config.fine_tune),
    ...                config.estimator, key=jax.random.PRNGKey(1))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import optax

from common.models import taps as taps_lib
from methods.zeroth_order.agzo import agzo
from methods.zeroth_order.agzo import agzo_gradient
from methods.zeroth_order.baselines import first_order
from methods.zeroth_order.baselines import first_order_gradient
from methods.zeroth_order.lozo import lozo
from methods.zeroth_order.lozo import lozo_gradient
from methods.zeroth_order.spsa import mezo
from methods.zeroth_order.spsa import spsa_gradient
from methods.zeroth_order.transform import make_step


ESTIMATORS = ("first_order", "mezo", "lozo", "agzo")


def method_names(estimators: Sequence[str], agzo_ranks: Sequence[int]) -> list[str]:
  """The run's method names: each estimator, with "agzo" expanded to "agzo_r<r>"."""
  names = []
  for e in estimators:
    if e not in ESTIMATORS:
      raise ValueError(f"method_names: estimator {e!r}; expected one of {ESTIMATORS}")
    names += [f"agzo_r{r}" for r in agzo_ranks] if e == "agzo" else [e]
  for name in names:
    check_name(name)
  return names


def check_name(name: str) -> None:
  """name is "first_order", "mezo", "lozo" or "agzo_r<r>" with r >= 1."""
  ok = name in ESTIMATORS[:3] or (
      isinstance(name, str) and name.startswith("agzo_r") and name[6:].isdigit()
      and int(name[6:]) >= 1)
  if not ok:
    raise ValueError(f"name={name!r}; expected 'first_order', 'mezo', 'lozo' or 'agzo_r<r>'")


def agzo_rank(name: str) -> int:
  """r of "agzo_r<r>"."""
  check_name(name)
  return int(name.split("_r")[1])


def estimator(name: str, loss_fn: Callable, loss_and_taps: Callable, spec) -> Callable:
  """`estimate(params, batch, key, step) -> ZOEstimate` of a method name.

  Args:
    name: a method name.
    loss_fn: (params, batch) -> loss.
    loss_and_taps: (params, batch) -> (loss, taps), for AGZO.
    spec: eps, lozo_rank, lozo_interval, power_iters, agzo_two_sided.

  Returns:
    The estimator.
  """
  check_name(name)
  if name == "first_order":
    return lambda p, b, k, s: first_order_gradient(loss_fn, p, b, k, s)
  if name == "mezo":
    return lambda p, b, k, s: spsa_gradient(loss_fn, p, b, k, s, eps=spec.eps)
  if name == "lozo":
    return lambda p, b, k, s: lozo_gradient(
        loss_fn, p, b, k, s, eps=spec.eps, rank=spec.lozo_rank, interval=spec.lozo_interval)
  return lambda p, b, k, s: agzo_gradient(
      loss_and_taps, p, b, k, s, eps=spec.eps, rank=agzo_rank(name),
      num_iters=spec.power_iters, two_sided=bool(spec.agzo_two_sided))


def optimizer(name: str, loss_fn: Callable, loss_and_taps: Callable, lr: float, spec, *,
              key: jax.Array) -> optax.GradientTransformationExtraArgs:
  """The method's estimator at the head of an optax chain: Adam for first order,
  SGD for the ZO methods.

  Args:
    name: a method name.
    loss_fn: (params, batch) -> loss.
    loss_and_taps: (params, batch) -> (loss, taps), for AGZO.
    lr: the learning rate.
    spec: eps, lozo_rank, lozo_interval, power_iters, agzo_two_sided.
    key: the ZO heads' base key (unused by first order).

  Returns:
    `optax.chain(head, optax.sgd(lr))`, or `optax.chain(first_order(loss_fn),
    optax.adam(lr))`.
  """
  check_name(name)
  if name == "first_order":
    return optax.chain(first_order(loss_fn), optax.adam(lr))
  if name == "mezo":
    head = mezo(loss_fn, spec.eps, key=key)
  elif name == "lozo":
    head = lozo(loss_fn, spec.eps, key=key, rank=spec.lozo_rank, interval=spec.lozo_interval)
  else:
    head = agzo(loss_and_taps, spec.eps, key=key, rank=agzo_rank(name),
                num_iters=spec.power_iters, two_sided=bool(spec.agzo_two_sided))
  return optax.chain(head, optax.sgd(lr))


def perturbation_dimension(name: str, trainable: Any) -> int:
  """k of a method: D for MeZO, LOZO and first order; for AGZO, D with every
  linear kernel's d_in d_out replaced by min(r, d_in) d_out."""
  check_name(name)
  total = sum(x.size for x in jax.tree.leaves(trainable))
  if not name.startswith("agzo"):
    return int(total)
  r = agzo_rank(name)
  for path in taps_lib.linear_paths(trainable):
    node = trainable
    for p in path:
      node = node[p]
    d_in, d_out = node["kernel"].shape
    total += min(r, d_in) * d_out - d_in * d_out
  return int(total)


def learning_rate(name: str, trainable: Any, spec) -> float:
  """lr_first_order for first order, zo_lr_scale / k for the ZO methods."""
  check_name(name)
  if name == "first_order":
    return spec.lr_first_order
  return spec.zo_lr_scale / perturbation_dimension(name, trainable)


def passes_per_step(name: str, first_order_pass_cost: int, agzo_two_sided: bool) -> int:
  """Forward-pass equivalents of one step: first_order_pass_cost for first order,
  3 for two-sided AGZO, else 2."""
  check_name(name)
  if name == "first_order":
    return first_order_pass_cost
  if name.startswith("agzo"):
    return 3 if agzo_two_sided else 2
  return 2


def peak_bytes(compiled) -> float:
  """argument + output - aliased + temporaries of a compiled executable (bytes; NaN
  where the backend gives no memory analysis)."""
  m = compiled.memory_analysis()
  if m is None:
    return float("nan")
  return float(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
               + m.temp_size_in_bytes)


def step_peak_bytes(tx: optax.GradientTransformation, params: Any, batch: Any) -> float:
  """`peak_bytes` of `make_step(tx, donate=True)` compiled for (params, its state, batch)."""
  return peak_bytes(make_step(tx, donate=True).lower(params, tx.init(params), batch).compile())
