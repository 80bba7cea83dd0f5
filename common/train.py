"""The one training loop every method that trains uses.

`train(init_fn=..., loss_fn=..., batch_fn=..., optimizer=..., config=..., workdir=...)`
runs `config.num_steps` optimizer updates of

    (loss, metrics), g = value_and_grad(loss_fn)(params, batch_fn(seed, s), fold_in(key, s))
    updates, opt_state = optimizer.update(g, opt_state, params)
    params = params + updates

as one jit-compiled step that donates its state. Gradient-free optimizers
(zeroth-order estimators, evolution strategies) run through the same loop with
`gradient_free=True`: the step then skips `value_and_grad` and hands the
optimizer, an `optax.GradientTransformationExtraArgs`, the loss, batch and key
as extra arguments,

    updates, opt_state = optimizer.update(params, opt_state, params,
                                          loss_fn=loss_fn, batch=batch, key=fold_in(key, s))

and logs the loss the optimizer measured, which it keeps in its state under the
name `loss` (read with `optax.tree.get`; e.g. `methods.zeroth_order.ZOState`).
Checkpoints, resume, metrics, the NaN guard and the mesh are the same for both.

On-policy methods (GRPO and other policy-gradient RL) sample their batch from the
current policy: with `on_policy=True` the loop calls `batch_fn(seed, s, params)`
with the parameters that update `s` starts from (`state.params` with
`state.step == s`), so the batch of update `s + 1` is made after update `s`
finishes. Such a batch function must be a pure function of (seed, step, params)
(e.g. `common.rl.rollout.make_grpo_batch_fn`); since a checkpoint restores the
parameters exactly, resuming stays exact. It must not keep or modify `params`
(the step donates them). The default, `on_policy=False`, calls `batch_fn(seed, s)`.

Batch functions with running statistics (the EMA threshold of an adaptive reward,
a replay counter) pass them explicitly: with `carry=c0` the loop calls
`batch_fn(seed, s, [params,] c_s) -> (batch, c_{s+1})`, starting from c_0 = `carry`,
and checkpoints c_{s+1} with the state of step s + 1 (as `CarryTrainState.carry`),
so the statistics resume with the parameters. The carry is a pytree of arrays whose
structure, shapes and dtypes never change.

Parameters are created by a jitted init whose outputs are pinned replicated on a
`jax.sharding.Mesh` (shapes for restoring come from `eval_shape`), batches are
split over the mesh `data` axis, so the same code runs on 1 CPU, N fake CPU
devices, GPUs and TPU pods (multi-host with `config.distributed`). Models too large
to replicate set `config.mesh` fsdp / tensor sizes: parameters that carry logical
axis names (flax's logical partitioning, as the transformer's do) are then created,
updated and checkpointed sharded, their optimizer state alike (`common.partitioning`;
docs/scaling.md). The init and step are jitted once at
module level with the user's functions, optimizer and mesh as static arguments:
calling `train` again with the same objects (resuming in a notebook) reuses the
compiled code.

Steps are numbered from 0: update `s` consumes `batch_fn(config.seed, s)` and
`fold_in(key, s)`, logs its metrics under step `s`, and turns `state.step` from
`s` into `s + 1`. A checkpoint filed under step `k` holds the state with
`state.step == k`, i.e. ready to run update `k`.

Small models spend more time dispatching steps than computing them: with
`config.steps_per_call=K` the loop makes the batches of K consecutive updates
(`batch_fn(seed, s)` for each, stacked on a new leading axis, the batch axis
still split over `data`) and runs them in ONE jitted, donating call that
`lax.scan`s the same update with the same per-step keys, so the result equals
K single steps (bitwise on CPU). A call never crosses a log step (it ends with
it), a checkpoint step or `num_steps`, so metrics, checkpoints and resume are
those of the 1-step loop; the shorter calls there compile once per length. The
carry threads through the K batch calls on the host; on-policy batches need the
parameters of the previous update, so `on_policy=True` requires K = 1.

Rerunning with the same workdir resumes from the newest checkpoint in
`workdir/checkpoints`; because batches and per-step keys are pure functions of
(seed, step), a killed-and-resumed run ends with exactly the parameters of an
uninterrupted one. The NaN guard is part of the compiled call: it records the
first update whose loss or metrics are non-finite (the step, which value, the
value; the gradient norm covers every gradient) in a few device scalars, which the
host reads only at log and checkpoint steps, with the metrics it fetches there
anyway; there the state (parameters and optimizer state) is also checked, once,
by a separate reduction rather than after every update. The run then stops with
`NonFiniteError` naming that update (or, for a state that went non-finite while
every metric stayed finite, that check's step), before anything after it is
checkpointed: the newest checkpoint is the last good state, and a rerun resumes
from it. A newest checkpoint that no longer restores (a damaged file) is skipped
with one logged line, and the run resumes from the newest one that does.

The checkpoints are of one run: `workdir/checkpoints.json` records what
determines their values (`seed`, `batch_size`, `gradient_free`, the optimizer's
hyperparameters and the shapes and dtypes of the parameters and optimizer state).
A rerun that differs in any of them, or asks for fewer `num_steps` than the
newest checkpoint holds, raises one `ValueError` naming the differences instead of
returning the old parameters: use a new workdir, or `overwrite=True` to discard
the old checkpoints. Raising `num_steps` continues the run (how a run is
extended); the logging, checkpointing, device and `steps_per_call` keys may change
freely. The optimizer counts by the numbers, strings and small arrays its
functions close over (`optax.adam(1e-3)` vs `optax.adam(2e-3)`; a schedule whose length is
`num_steps` makes a longer run a different optimizer); mutable containers and
other objects in those closures count by type only.

Example:
    >>> model = MLP((32, 1))
    >>> def loss_fn(params, batch, key):
    ...   err = model.apply(params, batch["x"]) - batch["y"]
    ...   return jnp.mean(err ** 2), {}
    >>> config = default_train_config()
    >>> config.num_steps, config.batch_size = 100, 32
    >>> result = train(
    ...     init_fn=lambda key: model.init(key, jnp.zeros((1, 4))),
    ...     loss_fn=loss_fn,
    ...     batch_fn=lambda seed, step: regression_batch(seed, step, 32, 4),
    ...     optimizer=optax.adam(1e-2), config=config, workdir="/tmp/run")
    >>> result.history[-1]["loss"]
"""

from __future__ import annotations

import functools
import json
import numbers
import os
import re
import shutil
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import tqdm
from absl import logging

from common import checkpoint
from common import partitioning
from common import trials
from common.metrics import MetricsWriter
from common.sharding import (DATA_AXIS, FSDP_AXIS, MESH_AXES, TENSOR_AXIS, batch_axes,
                             batch_sharding, batch_shards, check_batch,
                             maybe_initialize_distributed, mesh_from_sizes,
                             replicated_sharding, shard_batch)

CHECKPOINT_SUBDIR = "checkpoints"
RUN_RECORD = "checkpoints.json"  # Beside checkpoints/: what its steps are of.


class TrainState(NamedTuple):
  """Everything a step updates: the step counter, parameters and optimizer state.

  Attributes:
    step: int32 scalar, the number of updates applied so far.
    params: the parameter pytree, as returned by `init_fn`.
    opt_state: the optax state of `params`.
  """
  step: jax.Array
  params: Any
  opt_state: Any


class CarryTrainState(NamedTuple):
  """A `TrainState` plus the batch function's carry (runs with `train(..., carry=)`).

  Attributes:
    step, params, opt_state: as in `TrainState`.
    carry: the carry that the batch of update `step` is made from.
  """
  step: jax.Array
  params: Any
  opt_state: Any
  carry: Any


class TrainResult(NamedTuple):
  """What `train` returns.

  Attributes:
    state: the final `TrainState` (replicated over the mesh, or with its parameters
      and optimizer state sharded on a model-parallel mesh).
    history: one dict per logged step of this call, `{"step": s, "loss": ...,
      "grad_norm": ..., **metrics}` with Python floats (gradient-free runs:
      `{"step": s, "loss": ..., "update_norm": ...}`).
  """
  state: TrainState
  history: list[dict[str, float]]


class NonFiniteError(FloatingPointError):
  """A loss, metric or parameter became NaN or infinite; the run stopped unsaved.

  Attributes:
    step: the first update (0-based) that produced a non-finite value.
    name: the metric name, or "state" for the parameters / optimizer state.
    value: the offending value.
    last_good_step: the step of the newest checkpoint, the last good state a
      rerun resumes from (None: no checkpoint yet, a rerun starts afresh).
  """

  def __init__(self, step: int, name: str, value: float,
               last_good_step: int | None = None):
    self.step, self.name, self.value = step, name, value
    self.last_good_step = last_good_step
    where = ("" if last_good_step is None else
             f"; the last good state is checkpoint {last_good_step}, where a rerun resumes")
    super().__init__(f"non-finite {name}={value} at step {step}; stopped before "
                     f"checkpointing it (earlier checkpoints are intact){where}")


# Pure data parallelism over every device: the default `config.mesh`.
_DEFAULT_MESH = {DATA_AXIS: -1, FSDP_AXIS: 1, TENSOR_AXIS: 1}


def default_train_config(**overrides: Any) -> ml_collections.ConfigDict:
  """Returns the loop's settings with defaults (locked: a misspelt key fails).

  Experiment configs embed it as their `train` sub-config, with their own values:
  `train=default_train_config(num_steps=1500, batch_size=32)`.

  Keys:
    num_steps: total number of updates (>= 1); a resumed run continues to it.
    seed: seeds parameter init, the per-step loss keys and `batch_fn` (>= 0).
    batch_size: global batch size (>= 1), divisible by the mesh `data` size;
      every batch from `batch_fn` must have this leading size.
    checkpoint_every: save every this many updates (>= 0; 0 = only at the end).
    keep_checkpoints: how many of the newest checkpoints to retain (>= 1).
    log_every: log metrics at steps s with s % log_every == 0, and the last (>= 1).
    progress_bar: show a tqdm bar with the live loss.
    distributed: call `jax.distributed.initialize()` first (multi-host runs).
    nan_guard: raise `NonFiniteError` naming the first update whose loss or
      metrics are non-finite, or a non-finite state. The metrics are checked
      inside the compiled step and the state at log and checkpoint steps, both
      read there (no per-step transfer), so the
      error comes at the first of those at or after that update, before
      anything non-finite is saved. Off, the run goes on, and a checkpoint step
      whose update is non-finite is not saved.
    mesh: the sizes of the mesh axes data, fsdp and tensor (-1 = all devices left),
      used when `train` gets no mesh (`sharding.mesh_from_sizes`). The default
      {data: -1, fsdp: 1, tensor: 1} is pure data parallelism; with fsdp or tensor
      > 1, parameters that carry logical axis names (see `train`'s `param_axes`)
      and their optimizer state are sharded (`common.partitioning`), and batches
      are split over data x fsdp. docs/scaling.md says how to choose it.
    mesh_shape: the older way to give the data axis: (n,) is mesh.data = n; the
      default (-1,) defers to `mesh`. Set one or the other.
    steps_per_call: updates per compiled call (>= 1): K > 1 scans K stacked
      batches in one call (less dispatch overhead for small models) with the
      results of K = 1; calls end at log and checkpoint steps. K > 1 needs
      `on_policy=False`.
    compiler_options: XLA options for the compiled call, as
      "name=value,name=value" (names of XLA's DebugOptions, as in XLA_FLAGS without
      the dashes; "" = XLA's defaults). Options of another backend are ignored by
      XLA. CGFM sets "xla_cpu_experimental_ynn_fusion_type=" (docs/benchmarks.md).

  Args:
    **overrides: values for any of the keys above (an unknown key fails).

  Returns:
    A locked `ml_collections.ConfigDict`.
  """
  config = ml_collections.ConfigDict()
  config.num_steps = 1000
  config.seed = 0
  config.batch_size = 128
  config.checkpoint_every = 1000
  config.keep_checkpoints = 3
  config.log_every = 100
  config.progress_bar = True
  config.distributed = False
  config.nan_guard = True
  config.mesh = ml_collections.ConfigDict(_DEFAULT_MESH)
  config.mesh_shape = (-1,)
  config.steps_per_call = 1
  config.compiler_options = ""
  config.lock()
  config.update(overrides)
  return config


_INT_KEYS = (("num_steps", 1), ("seed", 0), ("batch_size", 1), ("checkpoint_every", 0),
             ("keep_checkpoints", 1), ("log_every", 1), ("steps_per_call", 1))
_BOOL_KEYS = ("progress_bar", "distributed", "nan_guard")
_ALL_KEYS = (*(key for key, _ in _INT_KEYS), *_BOOL_KEYS, "mesh_shape")
# Keys that configs written before them may lack, with the value they then mean.
_OPTIONAL_KEYS = {"mesh": _DEFAULT_MESH, "compiler_options": ""}
_XLA_OPTION = re.compile(r"xla_[a-z0-9_]+")


def stage_train_config(num_steps: int, batch_size: int, log_every: int = 500
                       ) -> ml_collections.ConfigDict:
  """The loop's config for a model an experiment trains as one stage of its pipeline
  (Q-Tab, TapSampling, token fusion): one checkpoint at the end (a rerun resumes from
  it), metrics every ``log_every`` steps, no progress bar, no NaN guard."""
  return default_train_config(num_steps=num_steps, batch_size=batch_size,
                              checkpoint_every=num_steps, log_every=log_every,
                              progress_bar=False, nan_guard=False)


def warmup_cosine_adamw(learning_rate: float, num_steps: int, weight_decay: float = 1e-4,
                        warmup: int = 100) -> optax.GradientTransformation:
  """clip_by_global_norm(1) -> AdamW with a linear warm-up over min(warmup, steps / 2)
  steps and a cosine decay to 5% of ``learning_rate``: the default optimizer of the
  methods that train small models from scratch (Q-Tab, token fusion)."""
  schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, min(warmup, num_steps // 2),
                                                num_steps, learning_rate * 0.05)
  return optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(schedule, weight_decay=weight_decay))


def validate_train_config(config: Any) -> None:
  """Checks every key of `default_train_config()` is present and valid.

  Args:
    config: a ConfigDict (or mapping) with at least the keys of
      `default_train_config()`; other keys are ignored.

  Raises:
    ValueError: naming the key, its value and what is expected.
  """
  for key in _ALL_KEYS:
    if key not in config:
      raise ValueError(f"config is missing key {key!r} (see default_train_config())")
  for key, low in _INT_KEYS:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
      raise ValueError(f"config.{key} must be an int >= {low}, got {value!r}")
  for key in _BOOL_KEYS:
    if not isinstance(config[key], (bool, np.bool_)):
      raise ValueError(f"config.{key} must be a bool, got {config[key]!r}")
  mesh_shape = config["mesh_shape"]
  if mesh_shape is not None and (
      isinstance(mesh_shape, (str, bytes)) or not hasattr(mesh_shape, "__len__") or
      not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
              for s in mesh_shape)):
    raise ValueError(f"config.mesh_shape must be None or a sequence of ints, "
                     f"got {mesh_shape!r}")
  mesh_sizes(config)
  compiler_options(config)


def compiler_options(config: Any) -> tuple[tuple[str, Any], ...]:
  """`config.compiler_options` ("name=value,..."; absent in older configs: none) as
  (name, value) pairs, for `jax.jit(compiler_options=dict(...))`; values true/false
  become bools and numbers numbers, the rest stay strings.

  Raises:
    ValueError: naming the value, if it is not a string of name=value parts with XLA
      option names (xla_...).
  """
  text = config["compiler_options"] if "compiler_options" in config else ""
  if not isinstance(text, str):
    raise ValueError(f"config.compiler_options must be a string 'name=value,...', "
                     f"got {text!r}")
  pairs = []
  for part in filter(None, (p.strip() for p in text.split(","))):
    name, equals, value = part.partition("=")
    if not equals or not _XLA_OPTION.fullmatch(name.strip()):
      raise ValueError(f"config.compiler_options: {part!r} in {text!r} is not "
                       "'name=value' with an XLA option name (xla_...)")
    pairs.append((name.strip(), _option_value(value.strip())))
  return tuple(pairs)


def _option_value(text: str) -> bool | int | float | str:
  """A compiler option's value as XLA's option setter takes it (bools as bools)."""
  if text.lower() in ("true", "false"):
    return text.lower() == "true"
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text


def mesh_sizes(config: Any) -> dict[str, int]:
  """The mesh axis sizes a train config asks for: `config.mesh`, with the data size
  from a non-default `config.mesh_shape` (the older key).

  Raises:
    ValueError: `config.mesh` is not a mapping of known axes to ints >= 1 or -1, or it
      and `config.mesh_shape` both set the data size.
  """
  sizes = config["mesh"] if "mesh" in config else _OPTIONAL_KEYS["mesh"]
  if isinstance(sizes, ml_collections.ConfigDict):
    sizes = sizes.to_dict()
  if not isinstance(sizes, Mapping):
    raise ValueError(f"config.mesh must map mesh axes {MESH_AXES} to sizes, got {sizes!r}")
  sizes = dict(sizes)
  for name, size in sizes.items():
    if name not in MESH_AXES or isinstance(size, bool) or not isinstance(
        size, numbers.Integral) or (size < 1 and size != -1):
      raise ValueError(f"config.mesh.{name}={size!r} is invalid: expected axes {MESH_AXES} "
                       "with sizes >= 1 or -1 (all the devices left)")
  legacy = config["mesh_shape"]
  if legacy is not None and tuple(legacy) != (-1,):
    if len(legacy) != 1:
      raise ValueError(f"config.mesh_shape={tuple(legacy)} must be (data size,); give "
                       "other axes in config.mesh")
    if sizes.get(DATA_AXIS, -1) not in (-1, legacy[0]):
      raise ValueError(f"config.mesh_shape={tuple(legacy)} and config.mesh.data="
                       f"{sizes[DATA_AXIS]} disagree; set the data size in config.mesh only")
    sizes[DATA_AXIS] = int(legacy[0])
  if list(sizes.values()).count(-1) > 1:
    raise ValueError(f"config.mesh={sizes} holds more than one -1; at most one axis takes "
                     "the devices left")
  return {name: int(size) for name, size in sizes.items()}


def _checked_loss(loss_fn: Callable, params: Any, batch: Any, key: jax.Array):
  """Calls loss_fn; a wrong return type fails at trace time with a clear message."""
  out = loss_fn(params, batch, key)
  if not isinstance(out, tuple) or len(out) != 2:
    raise TypeError(f"loss_fn must return (loss, metrics dict), got {type(out).__name__}")
  loss, metrics = out
  if jnp.shape(loss) != ():
    raise ValueError(f"loss_fn must return a scalar loss, got shape {jnp.shape(loss)}")
  if not isinstance(metrics, Mapping):
    raise TypeError(f"loss_fn metrics must be a dict, got {type(metrics).__name__}")
  for name, value in metrics.items():
    if jnp.shape(value) != ():
      raise ValueError(f"loss_fn metric {name!r} must be a scalar, got shape "
                       f"{jnp.shape(value)}")
  return loss, metrics


def _all_finite(tree: Any) -> jax.Array:
  """Whether every floating-point leaf of `tree` is finite, as one bool.

  sum(x * 0) is 0 when every element of x is finite and NaN as soon as one is NaN or
  infinite (and, unlike sum(x), cannot overflow): one reduction per leaf with the
  multiply fused into it, against isfinite + all + a stack, which on a small model
  costs as many kernels as the update itself.
  """
  sums = [jnp.sum(x * 0, dtype=jnp.float32) for x in jax.tree.leaves(tree)
          if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.isfinite(sum(sums)) if sums else jnp.array(True)


def _make_state(key: jax.Array, init_fn: Callable, opt_init: Callable) -> TrainState:
  params = nn.meta.unbox(init_fn(key))  # Plain arrays, also from a boxed flax init.
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_init(params))


def _with_carry(state: TrainState, carry: Any) -> TrainState | CarryTrainState:
  return state if carry is None else CarryTrainState(*state[:3], carry=carry)


class _Shardings:
  """A pytree of shardings as a jit static argument (hashed by its leaves and structure)."""

  def __init__(self, tree: Any):
    self.tree = tree
    leaves, treedef = jax.tree.flatten(tree)
    self._key = (treedef, tuple(leaves))
    self._hash = hash(self._key)  # Looked up on every compiled call of the loop.

  def __hash__(self):
    return self._hash

  def __eq__(self, other):
    return isinstance(other, _Shardings) and self._key == other._key


def _pin_state(state: TrainState, mesh: jax.sharding.Mesh,
               shardings: _Shardings | None) -> TrainState:
  """`state` constrained to `shardings` (None: replicated over `mesh`)."""
  return jax.lax.with_sharding_constraint(
      state, replicated_sharding(mesh) if shardings is None else shardings.tree)


# The functions, optimizer, mesh and shardings are static arguments, so repeated
# `train` calls with the same ones (resuming in a notebook, tests) reuse the compiled
# step. Output shardings are pinned with sharding constraints: state replicated, or
# as `shardings` says (parameters sharded from their logical axis names).
@functools.partial(jax.jit, static_argnames=("init_fn", "opt_init", "mesh", "shardings"))
def _init_state(key: jax.Array, *, init_fn: Callable, opt_init: Callable,
                mesh: jax.sharding.Mesh, shardings: _Shardings | None = None) -> TrainState:
  """Creates the state directly with its final sharding (no host copy)."""
  return _pin_state(_make_state(key, init_fn, opt_init), mesh, shardings)


def _gradient_free_update(opt_update: Callable, loss_fn: Callable, params: Any,
                          opt_state: Any, batch: Any, key: jax.Array):
  """updates, opt_state and metrics of a gradient-free optimizer (no value_and_grad)."""
  updates, opt_state = opt_update(params, opt_state, params,
                                  loss_fn=functools.partial(_checked_loss, loss_fn),
                                  batch=batch, key=key)
  loss = optax.tree.get(opt_state, "loss")
  if loss is None or jnp.shape(loss) != ():
    raise TypeError("a gradient-free optimizer must keep the scalar loss it measured in "
                    "its state under the name 'loss' (e.g. a NamedTuple field), got "
                    f"{loss!r}; with gradient_free=False the loop computes gradients")
  return updates, opt_state, {"loss": loss, "update_norm": optax.tree.norm(updates)}


def _metric_order(names: Any) -> list[str]:
  """Metric names as logged: loss first, then grad_norm, then the rest by name."""
  return sorted(names, key=lambda k: (k != "loss", k != "grad_norm", k))


def _update(state: TrainState, batch: Any, key: jax.Array, *, loss_fn: Callable,
            opt_update: Callable, gradient_free: bool):
  """One update (traced): (new state, metrics incl. loss and grad_norm, bool[n]:
  whether each metric, in `_metric_order`, is finite)."""
  step_key = jax.random.fold_in(key, state.step)
  if gradient_free:
    updates, opt_state, metrics = _gradient_free_update(
        opt_update, loss_fn, state.params, state.opt_state, batch, step_key)
  else:
    (loss, metrics), grads = jax.value_and_grad(
        functools.partial(_checked_loss, loss_fn), has_aux=True)(state.params, batch, step_key)
    updates, opt_state = opt_update(grads, state.opt_state, state.params)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **metrics}
  params = optax.apply_updates(state.params, updates)
  new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
  finite = jnp.stack([jnp.all(jnp.isfinite(metrics[k])) for k in _metric_order(metrics)])
  return new_state, metrics, finite


@functools.partial(jax.jit, donate_argnums=0,
                   static_argnames=("loss_fn", "opt_update", "mesh", "gradient_free",
                                    "shardings"))
def _train_step(state: TrainState, batch: Any, key: jax.Array, *, loss_fn: Callable,
                opt_update: Callable, mesh: jax.sharding.Mesh, gradient_free: bool = False,
                shardings: _Shardings | None = None):
  """One update; returns (new state, metrics incl. loss and grad_norm, all-finite flag)."""
  new_state, metrics, finite = _update(state, batch, key, loss_fn=loss_fn,
                                       opt_update=opt_update, gradient_free=gradient_free)
  outputs = (metrics, jnp.all(finite) & _all_finite(new_state[1:]))
  return (_pin_state(new_state, mesh, shardings),
          *jax.lax.with_sharding_constraint(outputs, replicated_sharding(mesh)))


class _Guard(NamedTuple):
  """The NaN guard's record of the first update with a non-finite value (device scalars).

  Attributes:
    step: int32, that update; -1 while every update was finite.
    index: int32, which value: a metric's index in `_metric_order`.
    value: float32, that metric's value.
  """
  step: jax.Array
  index: jax.Array
  value: jax.Array


def _clean_guard(mesh: jax.sharding.Mesh) -> _Guard:
  guard = _Guard(jnp.int32(-1), jnp.int32(0), jnp.float32(0.0))
  return jax.device_put(guard, replicated_sharding(mesh))


def _record(guard: _Guard, step: jax.Array, metrics: Mapping[str, jax.Array],
            finite: jax.Array) -> _Guard:
  """`guard`, or update `step`'s first non-finite value if it is the first one."""
  values = jnp.stack([jnp.asarray(metrics[k]).astype(jnp.float32)
                      for k in _metric_order(metrics)])
  first = jnp.argmin(finite).astype(jnp.int32)  # The first False (0 if none: unused).
  trips = (guard.step < 0) & ~jnp.all(finite)
  return _Guard(jnp.where(trips, step, guard.step), jnp.where(trips, first, guard.index),
                jnp.where(trips, values[first], guard.value))


def _steps_body(state: TrainState, guard: _Guard, batches: Any, key: jax.Array, *,
                loss_fn: Callable, opt_update: Callable, mesh: jax.sharding.Mesh,
                gradient_free: bool, shardings: _Shardings | None):
  """The K updates of the batches stacked on `batches`' leading axis, a `lax.scan` of
  `_update` (K = 1: the update itself); traced by `_compiled_steps`.

  Returns:
    (state after the K updates, `guard` with their first non-finite metric recorded,
    the metrics of the last update, whether all of them are finite).
  """
  update = functools.partial(_update, key=key, loss_fn=loss_fn, opt_update=opt_update,
                             gradient_free=gradient_free)

  def body(carry, batch):
    state, guard, _ = carry
    new_state, metrics, finite = update(state, batch)
    return (new_state, _record(guard, state.step, metrics, finite), jnp.all(finite)), metrics

  if jax.tree.leaves(batches)[0].shape[0] == 1:
    (state, guard, finite), metrics = body((state, guard, True),
                                           jax.tree.map(lambda x: x[0], batches))
  else:
    (state, guard, finite), metrics = jax.lax.scan(body, (state, guard, jnp.bool_(True)),
                                                   batches)
    metrics = jax.tree.map(lambda m: m[-1], metrics)
  outputs = (guard, metrics, finite)
  return (_pin_state(state, mesh, shardings),
          *jax.lax.with_sharding_constraint(outputs, replicated_sharding(mesh)))


@functools.lru_cache(maxsize=64)
def _compiled_steps(loss_fn: Callable, opt_update: Callable, mesh: jax.sharding.Mesh,
                    gradient_free: bool, shardings: _Shardings | None,
                    options: tuple[tuple[str, Any], ...] = ()) -> Callable:
  """The loop's jitted, state-donating call for these static arguments.

  Its batches argument is placed with `batch_sharding(mesh, batch_axis=1)` by jit
  itself, so host (NumPy) batches go to the devices in jit's C++ dispatch: on a small
  model a Python `shard_batch` per call costs as much as the update. Global
  `jax.Array` batches (multi-process runs) already carry that sharding.
  """
  body = functools.partial(_steps_body, loss_fn=loss_fn, opt_update=opt_update, mesh=mesh,
                           gradient_free=gradient_free, shardings=shardings)
  return jax.jit(body, donate_argnums=0, compiler_options=dict(options) or None,
                 in_shardings=(None, None, batch_sharding(mesh, batch_axis=1), None))


def _train_steps(state: TrainState, guard: _Guard, batches: Any, key: jax.Array, *,
                 loss_fn: Callable, opt_update: Callable, mesh: jax.sharding.Mesh,
                 gradient_free: bool = False, shardings: _Shardings | None = None,
                 options: tuple[tuple[str, Any], ...] = ()):
  """The loop's compiled call (`_steps_body`), compiled once per static arguments and K."""
  return _compiled_steps(loss_fn, opt_update, mesh, bool(gradient_free), shardings,
                         options)(state, guard, batches, key)


def _hashable(fn: Callable) -> Callable:
  """Returns `fn` if it can be a jit static argument, else a wrapper hashed by identity."""
  try:
    hash(fn)
  except TypeError:
    return functools.partial(fn)
  return fn


def init_train_state(key: jax.Array, *, init_fn: Callable[[jax.Array], Any],
                     optimizer: optax.GradientTransformation,
                     mesh: jax.sharding.Mesh, state_shardings: Any = None) -> TrainState:
  """Creates `TrainState(0, params, optimizer.init(params))` on `mesh`.

  Jit-compiled (once per init_fn, optimizer, mesh and shardings, which must be
  hashable, as functions are), so the parameters are created on the devices with
  their final sharding.

  Args:
    key: the PRNG key passed to `init_fn`.
    init_fn: `key -> params` pytree (flax's boxed `nn.LogicallyPartitioned` leaves
      are unboxed).
    optimizer: an `optax.GradientTransformation`.
    mesh: the device mesh.
    state_shardings: None (every leaf replicated), or a `TrainState` of shardings
      (e.g. parameters sharded by `common.partitioning.param_shardings`).

  Returns:
    The initial `TrainState`, with `state_shardings` (default
    `replicated_sharding(mesh)` on every leaf).
  """
  return _init_state(key, init_fn=init_fn, opt_init=optimizer.init, mesh=mesh,
                     shardings=None if state_shardings is None else _Shardings(state_shardings))


def train_step(state: TrainState, batch: Any, key: jax.Array, *, loss_fn: Callable,
               optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh,
               gradient_free: bool = False, state_shardings: Any = None
               ) -> tuple[TrainState, dict[str, jax.Array], jax.Array]:
  """The loop's jit-compiled update (for callers who write their own loop).

      (loss, metrics), g = value_and_grad(loss_fn)(params, batch, fold_in(key, state.step))
      updates, opt_state = optimizer.update(g, opt_state, params)
      params = params + updates

  or, with `gradient_free=True` (no gradients are computed),

      updates, opt_state = optimizer.update(params, opt_state, params, loss_fn=loss_fn,
                                            batch=batch, key=fold_in(key, state.step))
      params = params + updates;   loss = optax.tree.get(opt_state, "loss")

  Compiled once per (loss_fn, optimizer, mesh) and batch shapes (loss_fn and
  optimizer must be hashable, as functions are; wrap others in
  `functools.partial` once). `state` is donated: its buffers are reused for the
  result and must not be used again.

  Args:
    state: the current `TrainState` (replicated over `mesh`).
    batch: a pytree of global arrays (e.g. from `shard_batch`).
    key: the base PRNG key; the step's key is `fold_in(key, state.step)`.
    loss_fn: `(params, batch, key) -> (scalar loss, {name: scalar})`.
    optimizer: an `optax.GradientTransformation` (gradient-free: one that
      accepts the extra arguments, e.g. an `optax.chain` headed by a
      zeroth-order estimator, and keeps a scalar `loss` in its state).
    mesh: the device mesh; outputs are replicated over it.
    gradient_free: skip `value_and_grad` (see above).
    state_shardings: None (the new state replicated), or the `TrainState` of
      shardings it keeps (as for `init_train_state`).

  Returns:
    (new state, metrics with "loss", "grad_norm" and loss_fn's metrics (gradient
    free: "loss" and "update_norm"), bool scalar: the loss, all metrics, the new
    params and the optimizer state are finite).
  """
  return _train_step(state, batch, key, loss_fn=loss_fn, opt_update=optimizer.update,
                     mesh=mesh, gradient_free=bool(gradient_free),
                     shardings=None if state_shardings is None else _Shardings(state_shardings))


def _ordered_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
  """Host metrics as floats, loss first, then grad_norm, then the rest by name."""
  return {k: float(metrics[k]) for k in _metric_order(metrics)}


def _tripped(guard: _Guard, names: list[str], state_finite: bool,
             step: int) -> tuple[int, str, float] | None:
  """(step, name, value) of the first non-finite metric a host copy of the guard
  recorded (`names`: the metric names in `_metric_order`), else ("state" at `step`,
  the update just checked) if the state is not finite, else None."""
  first, index = int(guard.step), int(guard.index)
  if first >= 0:
    return first, names[index], float(guard.value)
  return None if state_finite else (step, "state", float("nan"))


# The state's finiteness, checked where the loop reads the guard (not every update).
_state_finite = jax.jit(lambda state: _all_finite((state.params, state.opt_state)))


def _call_end(begin: int, config: Any) -> int:
  """Where the compiled call starting at update `begin` ends (exclusive): after at most
  `config.steps_per_call` updates, and at the first log step (included), checkpoint
  step or `num_steps`, so those are always the last update of a call."""
  next_log = -(-begin // config.log_every) * config.log_every + 1
  every = config.checkpoint_every
  next_checkpoint = -(-(begin + 1) // every) * every if every else config.num_steps
  return min(begin + config.steps_per_call, config.num_steps, next_log, next_checkpoint)


def _stack(batches: list[Any], call: str) -> Any:
  """The batches of one call stacked on a new leading axis (host arrays)."""
  if len(batches) == 1:
    return jax.tree.map(lambda x: np.asarray(x)[None], batches[0])
  try:
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *batches)
  except ValueError as e:
    raise ValueError(f"{call} returned batches of different structures or shapes, which "
                     f"a call of {len(batches)} updates (config.steps_per_call) stacks: "
                     f"{e}") from None


# Loop keys that never change what a run computes (logging, checkpointing, devices):
# experiments leave them out of the fingerprints that key their runs.
BOOKKEEPING_KEYS = ("log_every", "checkpoint_every", "keep_checkpoints", "progress_bar",
                    "distributed", "nan_guard", "mesh_shape", "steps_per_call", "mesh",
                    "compiler_options")
# Keys that do not change the trained values: they may differ on resume.
_NOT_RESULT_KEYS = ("num_steps", *BOOKKEEPING_KEYS)
_SMALL_ARRAY = 64  # Arrays an optimizer closes over up to this size count by value.


def _summary(obj: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
  """What a function computes with, as JSON: its name, the numbers, strings and small
  arrays it closes over, and the same of the functions and tuples it closes over.

  Mutable containers and other objects count by type only (a list a loss function
  appends to must not change the fingerprint); large arrays by dtype and shape. At
  most 12 levels deep and 5000 nodes, in a fixed order (so equal in every process).
  """
  budget = [5000] if budget is None else budget
  if obj is None or isinstance(obj, (bool, int, str)):
    return obj
  if isinstance(obj, float):
    return f"{obj:.10g}"
  budget[0] -= 1
  if depth > 12 or budget[0] < 0:
    return "..."
  go = functools.partial(_summary, depth=depth + 1, budget=budget)
  if isinstance(obj, (np.ndarray, np.generic, jax.Array)) and not isinstance(
      obj, jax.core.Tracer):
    if np.size(obj) <= _SMALL_ARRAY:
      return [str(obj.dtype), list(np.shape(obj)),
              [f"{v:.10g}" if isinstance(v, float) else v
               for v in np.asarray(obj).ravel().tolist()]]
    return f"{obj.dtype}{list(np.shape(obj))}"
  if isinstance(obj, tuple):
    return [go(x) for x in obj]
  if isinstance(obj, functools.partial):
    return {"partial": go(obj.func), "args": go(obj.args),
            "keywords": {k: go(v) for k, v in sorted(obj.keywords.items())}}
  if hasattr(obj, "__wrapped__") and callable(obj):
    return go(obj.__wrapped__)
  if getattr(obj, "__code__", None) is not None:
    cells = []
    for cell in getattr(obj, "__closure__", None) or ():
      try:
        cells.append(go(cell.cell_contents))
      except ValueError:  # an empty cell
        cells.append(None)
    return {"fn": f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}",
            "defaults": go(getattr(obj, "__defaults__", None)), "closure": cells}
  return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _tree_signature(tree: Any) -> dict[str, str]:
  """{leaf path: "dtype[shape]"} of an abstract pytree."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): f"{leaf.dtype}{list(leaf.shape)}"
          for path, leaf in leaves}


def _plain_number(value: Any) -> Any:
  return int(value) if isinstance(value, numbers.Integral) else value


def _run_record(config: Any, abstract_state: TrainState | CarryTrainState, optimizer: Any,
                gradient_free: bool, on_policy: bool) -> dict:
  """What determines the checkpoints' values (see the module docstring)."""
  blob = json.dumps(_summary((optimizer.init, optimizer.update)), sort_keys=True)
  keys = [key for key in _ALL_KEYS if key not in _NOT_RESULT_KEYS]  # seed, batch_size
  flags = {"gradient_free": bool(gradient_free)}
  if on_policy:  # Only when set, so the records of earlier runs still match.
    flags["on_policy"] = True
  record = {"num_steps": int(config.num_steps),
            "config": {**{key: _plain_number(getattr(config, key)) for key in keys}, **flags},
            "optimizer": trials.config_fingerprint({"optimizer": blob}),
            "params": _tree_signature(abstract_state.params),
            "opt_state": _tree_signature(abstract_state.opt_state)}
  if isinstance(abstract_state, CarryTrainState):
    record["carry"] = _tree_signature(abstract_state.carry)
  return record


def _tree_difference(name: str, old: dict, new: dict) -> str | None:
  if old == new:
    return None
  for path in (*new, *old):
    if old.get(path) != new.get(path):
      return (f"{name} tree: {name}{path} {old.get(path, 'absent')} -> "
              f"{new.get(path, 'absent')}")
  return f"{name} tree: leaf order"


def _differences(old: dict, new: dict) -> list[str]:
  """The differences that matter between two run records, one phrase each."""
  config_keys = dict.fromkeys([*new["config"], *old["config"]])
  out = [f"config.{key}: {old['config'].get(key)!r} -> {new['config'].get(key)!r}"
         for key in config_keys if old["config"].get(key) != new["config"].get(key)]
  if old.get("optimizer") != new["optimizer"]:
    out.append("the optimizer (its hyperparameters or structure)")
  out += [d for d in (_tree_difference(name, old.get(name, {}), new[name])
                      for name in ("params", "opt_state", "carry")
                      if name in new or name in old) if d]
  return out


def _read_run_record(path: str) -> dict | None:
  try:
    with open(path) as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) and "config" in record else None


def _check_run(directory: str, path: str, record: dict, newest: int | None) -> None:
  """Raises the one-line mismatch error if `directory`'s checkpoints are of another run
  than `record` (the record of theirs is at `path`)."""
  if newest is None:
    return
  old = _read_run_record(path)
  if old is None:
    logging.warning("%s has checkpoints but no readable %s (written before it existed): "
                    "resuming from them unchecked", directory, path)
    differences = []
  else:
    differences = _differences(old, record)
  if newest > record["num_steps"]:
    differences.append(f"config.num_steps={record['num_steps']} is below the newest "
                       f"checkpoint's step {newest}")
  if differences:
    raise ValueError(f"{directory} holds checkpoints of a different training run "
                     f"({'; '.join(differences)}); use a new workdir, or "
                     "train(..., overwrite=True) to discard them")


def train(*, init_fn: Callable[[jax.Array], Any],
          loss_fn: Callable[[Any, Any, jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]],
          batch_fn: Callable[..., Any],
          optimizer: optax.GradientTransformation,
          config: ml_collections.ConfigDict,
          workdir: str | os.PathLike,
          mesh: jax.sharding.Mesh | None = None,
          gradient_free: bool = False,
          overwrite: bool = False,
          on_policy: bool = False,
          carry: Any = None,
          param_axes: Any = None) -> TrainResult:
  """Trains `init_fn`'s parameters on `loss_fn` with `optimizer`, resuming from `workdir`.

  Args:
    init_fn: `key -> params` pytree (e.g. `lambda k: model.init(k, x)`).
    loss_fn: `(params, batch, key) -> (scalar loss, {name: scalar metric})`,
      traceable; `key` is `fold_in(step_key, s)` at update `s`. With
      `gradient_free` it is handed to the optimizer (which may evaluate its own).
    batch_fn: `(seed, step) -> batch` pytree with leading axis
      `config.batch_size`, a pure function of its arguments (resuming relies
      on it). Host-side; returns NumPy or JAX arrays. With `on_policy`,
      `(seed, step, params) -> batch`, a pure function of the three.
    optimizer: an `optax.GradientTransformation`. With `gradient_free`, its
      update takes the extra arguments `loss_fn`, `batch` and `key` (as
      `optax.GradientTransformationExtraArgs` and `optax.chain` do) and its
      state holds the scalar `loss` it measured.
    config: the loop's settings, see `default_train_config()`.
    workdir: run directory: checkpoints in `workdir/checkpoints`, metrics in
      `workdir/metrics.jsonl` and `workdir/events.out.tfevents.*`.
    mesh: the device mesh; default `sharding.mesh_from_sizes(mesh_sizes(config))`
      (`config.mesh`). It must have a "data" axis; batches are split over it (and
      over "fsdp"). Parameters are replicated, unless the mesh has an fsdp or
      tensor axis of size > 1 and the parameters carry logical axis names (below):
      then they and their optimizer state are sharded by
      `common.partitioning.LOGICAL_AXIS_RULES`.
    gradient_free: update without gradients (zeroth-order estimators,
      evolution strategies): see the module docstring.
    overwrite: discard the checkpoints already in `workdir/checkpoints` and
      train from scratch (e.g. after changing the config on purpose).
    on_policy: call `batch_fn(seed, s, params)` with the parameters update `s`
      starts from (see the module docstring), for batches sampled from the policy;
      needs `config.steps_per_call=1`.
    carry: None, or the initial carry c_0 (a pytree of arrays) of a batch function
      with running statistics: it is then called as `batch_fn(seed, s, [params,]
      c_s)` and returns `(batch, c_{s+1})`; the carry is checkpointed with the
      state (a `CarryTrainState`) and keeps its structure, shapes and dtypes.
    param_axes: the parameters' logical axis names, a pytree like the params of
      `PartitionSpec`s (e.g. `transformer.logical_axes(model)`). Default: the names
      `init_fn` boxes its params with (flax's `nn.with_logical_partitioning`, as
      `Transformer.init` does); plain params without names are replicated.

  Returns:
    `TrainResult(state, history)`: the state after `config.num_steps` updates
    (or the restored state if the workdir's checkpoint is already that far)
    and the metrics logged by this call. With `carry`, the state is a
    `CarryTrainState` whose carry is the one after the last batch.

  Raises:
    ValueError / TypeError: for invalid config or arguments (`steps_per_call` > 1
      with `on_policy`), or a workdir that is a file or not writable, before any work.
    ValueError: if `workdir` holds checkpoints of a different run (another
      seed, batch size, optimizer, parameter or optimizer-state shapes, or more
      steps than `config.num_steps`), or holds checkpoints none of which
      restores; the message names the differences and the ways out.
    NonFiniteError: (a FloatingPointError) with `config.nan_guard`, if a loss,
      metric or the state is NaN/Inf; it names the first such update, raised at
      the next log or checkpoint step; nothing from it on is checkpointed.
  """
  validate_train_config(config)
  sizes, options = mesh_sizes(config), compiler_options(config)
  # A snapshot of the settings, so any mapping works and later edits cannot leak in.
  config = types.SimpleNamespace(**{key: config[key] for key in _ALL_KEYS})
  if on_policy and config.steps_per_call > 1:
    raise ValueError(f"config.steps_per_call={config.steps_per_call} needs on_policy=False: "
                     "an on-policy batch is sampled from the parameters of the update before "
                     "it, so each call can run only one update; use steps_per_call=1")
  for name, fn in (("init_fn", init_fn), ("loss_fn", loss_fn), ("batch_fn", batch_fn)):
    if not callable(fn):
      raise TypeError(f"{name} must be callable, got {fn!r}")
  if not isinstance(optimizer, optax.GradientTransformation):
    raise TypeError(f"optimizer must be an optax.GradientTransformation, got {optimizer!r}")
  if mesh is not None and not isinstance(mesh, jax.sharding.Mesh):
    raise TypeError(f"mesh must be a jax.sharding.Mesh or None, got {type(mesh).__name__}")
  workdir = trials.ensure_directory(workdir, "workdir")
  user_optimizer = optimizer
  # Unhashable callables cannot be jit static arguments: wrap them once per call.
  init_fn, loss_fn = _hashable(init_fn), _hashable(loss_fn)
  if gradient_free:  # Extra arguments reach the transformations that take them.
    optimizer = optax.with_extra_args_support(optimizer)
  optimizer = optax.GradientTransformation(_hashable(optimizer.init),
                                           _hashable(optimizer.update))
  maybe_initialize_distributed(bool(config.distributed))
  if mesh is None:
    mesh = mesh_from_sizes(sizes)
  if DATA_AXIS not in mesh.shape:
    raise ValueError(f"mesh axes {tuple(mesh.shape)} must include {DATA_AXIS!r}")
  if config.batch_size % batch_shards(mesh):
    axes = batch_axes(mesh)
    where = f"axis {axes!r}" if isinstance(axes, str) else f"axes {axes}"
    raise ValueError(f"config.batch_size={config.batch_size} is not divisible by the "
                     f"{batch_shards(mesh)} devices on mesh {where}")

  num_steps, seed = int(config.num_steps), int(config.seed)
  is_chief = jax.process_index() == 0
  init_key, step_key = jax.random.split(jax.random.PRNGKey(seed))

  if carry is not None:
    carry = _check_carry(carry)
  abstract_state = _with_carry(
      jax.eval_shape(functools.partial(_make_state, init_fn=init_fn, opt_init=optimizer.init),
                     init_key), None if carry is None else _abstract(carry))
  shardings = _state_shardings(abstract_state, init_fn, init_key, optimizer, mesh, param_axes)
  state_shardings = jax.tree.map(lambda _: replicated_sharding(mesh), abstract_state)
  if shardings is not None:
    state_shardings = _with_carry(shardings.tree, getattr(state_shardings, "carry", None))
  call_fn = functools.partial(_train_steps, loss_fn=loss_fn, opt_update=optimizer.update,
                              mesh=mesh, gradient_free=bool(gradient_free), shardings=shardings,
                              options=options)

  def place_batches(begin, end, state):
    """The batches of updates begin..end-1, stacked and sharded, and the carry after them."""
    batches, next_carry = [], getattr(state, "carry", None)
    for step in range(begin, end):
      args = (seed, step) + ((state.params,) if on_policy else ())
      call = ", ".join([str(seed), str(step)] + ["params"] * on_policy)
      if carry is None:
        batch = batch_fn(*args)
      else:
        batch, next_carry = _split_carry(batch_fn(*args, next_carry), f"batch_fn({call}, carry)",
                                         abstract_state.carry, mesh)
      for leaf in jax.tree.leaves(batch):
        if np.ndim(leaf) == 0 or np.shape(leaf)[0] != config.batch_size:
          raise ValueError(f"batch_fn({call}) returned a leaf of shape "
                           f"{np.shape(leaf)}; expected leading size "
                           f"config.batch_size={config.batch_size}")
      batches.append(batch)
    stacked = _stack(batches, f"batch_fn for steps {begin}..{end - 1}")
    if jax.process_count() == 1:  # jit places host arrays (`_compiled_steps`).
      return check_batch(stacked, mesh, batch_axis=1), next_carry
    return shard_batch(stacked, mesh, batch_axis=1), next_carry

  directory = os.path.abspath(os.path.join(workdir, CHECKPOINT_SUBDIR))
  record_path = os.path.join(workdir, RUN_RECORD)
  record = _run_record(config, abstract_state, user_optimizer, bool(gradient_free),
                       bool(on_policy))
  if overwrite and os.path.isdir(directory):
    if is_chief:
      logging.warning("overwrite=True: discarding the checkpoints in %s", directory)
      shutil.rmtree(directory)
      if os.path.exists(record_path):
        os.remove(record_path)
    _sync("overwrite")
  manager = checkpoint.make_manager(directory, keep=int(config.keep_checkpoints))
  try:
    _check_run(directory, record_path, record, checkpoint.latest_step(manager))

    def check_step(step, restored):
      if int(jax.device_get(restored.step)) != step:
        raise ValueError(f"it holds state.step={int(jax.device_get(restored.step))}")

    start, state = checkpoint.restore_newest(manager, abstract_state, state_shardings,
                                             check=check_step)
    if start is None:
      start = 0
      state = _with_carry(
          _init_state(init_key, init_fn=init_fn, opt_init=optimizer.init, mesh=mesh,
                      shardings=shardings),
          None if carry is None else jax.device_put(carry, replicated_sharding(mesh)))
    else:
      logging.info("Resuming from checkpoint step %d in %s", start, workdir)
    if is_chief:
      trials.atomic_write_bytes(record_path, json.dumps(record, indent=1).encode())
    if start >= num_steps:
      logging.info("Checkpoint step %d is config.num_steps=%d: nothing to train.",
                   start, num_steps)
      return TrainResult(state, [])

    history = []
    with MetricsWriter(workdir, enabled=is_chief, purge_after_step=start - 1) as writer, \
        tqdm.tqdm(total=num_steps, initial=start, desc="train", dynamic_ncols=True,
                  disable=not (config.progress_bar and is_chief)) as progress:
      done = saved = start  # state.step of `state`; of the newest checkpoint.
      guard = _clean_guard(mesh)  # The first non-finite update since `start`, on device.
      finite = None  # Whether the last update's values are all finite (device bool).
      saving = False
      try:
        end = _call_end(start, config)
        batches, next_carry = place_batches(start, end, state)
        while done < num_steps:
          # The call sees (and donates) the TrainState part only; the carry is host data.
          state, guard, metrics, finite = call_fn(TrainState(*state[:3]), guard, batches,
                                                  step_key)
          state, begin, done = _with_carry(state, next_carry), done, end
          if done < num_steps:
            # Host work, overlapping the device's call (on-policy: after it, as it
            # samples from the new parameters).
            end = _call_end(done, config)
            batches, next_carry = place_batches(done, end, state)
          is_log = (done - 1) % config.log_every == 0 or done == num_steps
          is_checkpoint = done == num_steps or (
              config.checkpoint_every and done % config.checkpoint_every == 0)
          if is_log or is_checkpoint:
            host_metrics, host_guard, host_finite, state_finite = jax.device_get(
                (metrics, guard, finite, _state_finite(state)))
            host_metrics = _ordered_floats(host_metrics)
            bad = _tripped(host_guard, list(host_metrics), state_finite, done - 1)
            if bad is not None and config.nan_guard:
              raise NonFiniteError(*bad, last_good_step=saved or None)
            progress.set_postfix(loss=f"{host_metrics['loss']:.4g}", refresh=False)
            if is_log:
              history.append({"step": done - 1, **host_metrics})
              writer.write_scalars(done - 1, host_metrics)
            if is_checkpoint:
              if host_finite and state_finite:
                saving = True
                checkpoint.save(manager, done, state)
                saving, saved = False, done
              else:
                logging.warning("Not checkpointing step %d: its update has a non-finite "
                                "value (the first was %s=%s at step %d)", done, bad[1],
                                bad[2], bad[0])
          progress.update(done - begin)
      except NonFiniteError:
        raise
      except BaseException:
        # KeyboardInterrupt or an error in batch_fn: keep the progress made, if the
        # state is alive (not donated mid-call), finite, and not mid-save.
        if done > saved and not saving:
          _save_on_exit(manager, done, state, guard if config.nan_guard else None, finite)
        raise
    return TrainResult(state, history)
  finally:
    manager.wait_until_finished()
    manager.close()


def _state_shardings(abstract_state: Any, init_fn: Callable, init_key: jax.Array,
                     optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                     param_axes: Any) -> _Shardings | None:
  """The `TrainState` shardings of a model-parallel run, or None (replicated): on a
  mesh with fsdp or tensor > 1, parameters sharded from their logical names
  (`param_axes`, else the boxes of `init_fn`'s output), optimizer state alike."""
  if all(mesh.shape.get(name, 1) == 1 for name in (FSDP_AXIS, TENSOR_AXIS)):
    return None
  if param_axes is None:
    param_axes = nn.get_partition_spec(jax.eval_shape(init_fn, init_key))
  if not any(len(spec) for spec in jax.tree.leaves(
      param_axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))):
    logging.warning("mesh %s has fsdp/tensor axes but the parameters carry no logical axis "
                    "names: they are replicated (pass train(..., param_axes=))",
                    dict(mesh.shape))
    return None
  params = partitioning.param_shardings(abstract_state.params, param_axes, mesh)
  opt_state = partitioning.opt_state_shardings(optimizer, abstract_state.opt_state, params,
                                               mesh)
  return _Shardings(TrainState(replicated_sharding(mesh), params, opt_state))


def _abstract(tree: Any) -> Any:
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _check_carry(carry: Any) -> Any:
  """The initial carry as jax arrays; one-line error for a non-array leaf."""
  def convert(path, leaf):
    if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, numbers.Number)):
      raise TypeError(f"carry{jax.tree_util.keystr(path)} must be an array or number, got "
                      f"{type(leaf).__name__}")
    return jnp.asarray(leaf)
  return jax.tree_util.tree_map_with_path(convert, carry)


def _split_carry(out: Any, call: str, abstract_carry: Any, mesh: jax.sharding.Mesh):
  """(batch, next carry placed replicated) from a carrying batch function's output."""
  if not (isinstance(out, tuple) and len(out) == 2):
    raise TypeError(f"{call} must return (batch, carry) when train(..., carry=) is given, "
                    f"got {type(out).__name__}")
  batch, next_carry = out
  new = _abstract(jax.tree.map(jnp.asarray, next_carry))
  if jax.tree.structure(new) != jax.tree.structure(abstract_carry) or new != abstract_carry:
    raise ValueError(f"{call} returned a carry of another structure, shape or dtype: "
                     f"{_tree_signature(new)} != {_tree_signature(abstract_carry)}")
  return batch, jax.device_put(next_carry, replicated_sharding(mesh))


def _sync(name: str) -> None:
  """A barrier across processes (a no-op with one process)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def _save_on_exit(manager, step: int, state: TrainState, guard: _Guard | None,
                  finite: jax.Array) -> None:
  """Checkpoints `state` (at `step`) on an interrupt, unless it was donated, its update
  was non-finite, or (`guard` given: with the NaN guard) any update of the run was."""
  try:
    if any(leaf.is_deleted() for leaf in jax.tree.leaves(state)):
      return
    guard_step = -1 if guard is None else int(jax.device_get(guard.step))
    if not (bool(jax.device_get(finite)) and bool(_state_finite(state))) or guard_step >= 0:
      logging.warning("Not checkpointing step %d on exit: non-finite values", step)
      return
    logging.warning("Interrupted: checkpointing step %d before exiting", step)
    checkpoint.save(manager, step, state)
  except Exception as e:  # Never mask the original exception.
    logging.exception("Could not checkpoint step %d on exit: %s", step, e)
