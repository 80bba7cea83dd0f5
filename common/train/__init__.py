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
K single steps up to the order of float sums (a different compiled program, whose
reductions XLA may vectorise differently: within float32 rounding, relative 1e-6 over
tens of updates; bitwise only when the same K is replayed, as in a resume). A call
never crosses a log step (it ends with
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

The package's modules, one concern each: `config` (the settings), `step` (the state
and one update), `calls` (K updates as one compiled call, and its batches), `guard`
(the NaN guard), `resume` (the run record, overwrite and resuming) and `actions` (the
work at log and checkpoint steps and on exit); `train` and its loop are here.

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
import os
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import ml_collections
import optax
import tqdm
from absl import logging

from common import trials
from common.metrics import MetricsWriter
from common.sharding import (DATA_AXIS, batch_axes, batch_shards, maybe_initialize_distributed,
                             mesh_from_sizes, replicated_sharding)
from common.train import actions
from common.train.calls import _call_end, _check_carry, _train_steps, batch_maker
from common.train.config import (BOOKKEEPING_KEYS, compiler_options, default_train_config,
                                 mesh_sizes, snapshot, stage_train_config,
                                 validate_train_config, warmup_cosine_adamw)
from common.train.guard import NonFiniteError, _clean_guard
from common.train.resume import (CHECKPOINT_SUBDIR, RUN_RECORD, _run_record, checkpoints,
                                 restore_or_init)
from common.train.step import (CarryTrainState, TrainState, _abstract, _init_state,
                               _make_state, _Shardings, _state_shardings, _with_carry,
                               init_train_state, train_step)

# Private names tests reach into. The loop calls `_train_steps` through this module, so
# patching `common.train._train_steps` reaches it.
from common.train.calls import _compiled_steps  # noqa: F401  pylint: disable=unused-import
from common.train.resume import _summary  # noqa: F401  pylint: disable=unused-import
from common.train.step import _all_finite  # noqa: F401  pylint: disable=unused-import

__all__ = ["BOOKKEEPING_KEYS", "CHECKPOINT_SUBDIR", "RUN_RECORD", "CarryTrainState",
           "NonFiniteError", "TrainResult", "TrainState", "compiler_options",
           "default_train_config", "init_train_state", "mesh_sizes", "stage_train_config",
           "train", "train_step", "validate_train_config", "warmup_cosine_adamw"]

_InitFn = Callable[[jax.Array], Any]
_LossFn = Callable[[Any, Any, jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]


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


def train(*, init_fn: _InitFn, loss_fn: _LossFn, batch_fn: Callable[..., Any],
          optimizer: optax.GradientTransformation, config: ml_collections.ConfigDict,
          workdir: str | os.PathLike, mesh: jax.sharding.Mesh | None = None,
          gradient_free: bool = False, overwrite: bool = False, on_policy: bool = False,
          carry: Any = None, param_axes: Any = None) -> TrainResult:
  """Trains `init_fn`'s parameters on `loss_fn` with `optimizer`, resuming from `workdir`.

  Args:
    init_fn: `key -> params` pytree (e.g. `lambda k: model.init(k, x)`).
    loss_fn: `(params, batch, key) -> (scalar loss, {name: scalar metric})`, traceable;
      `key` is `fold_in(step_key, s)` at update `s`. With `gradient_free` it is handed to
      the optimizer (which may evaluate its own).
    batch_fn: `(seed, step) -> batch` (with `on_policy`: `(seed, step, params)`), NumPy or
      JAX arrays with leading axis `config.batch_size`, made on the host; a pure function
      of its arguments (resuming relies on it).
    optimizer: an `optax.GradientTransformation`. With `gradient_free`, its update takes
      the extra arguments `loss_fn`, `batch` and `key` (as
      `optax.GradientTransformationExtraArgs` and `optax.chain` do) and its state holds
      the scalar `loss` it measured.
    config: the loop's settings, see `default_train_config()`.
    workdir: `workdir/checkpoints`, `workdir/metrics.jsonl`, `workdir/events.out.tfevents.*`.
    mesh: default `sharding.mesh_from_sizes(mesh_sizes(config))`, with a "data" axis
      (batches are split over it and "fsdp"). Parameters are replicated, unless an fsdp or
      tensor axis > 1 meets parameters with logical axis names (below): then they and
      their optimizer state are sharded by `common.partitioning.LOGICAL_AXIS_RULES`.
    gradient_free: update without gradients (zeroth-order estimators, evolution
      strategies): see the module docstring.
    overwrite: discard `workdir`'s checkpoints and train from scratch.
    on_policy: call `batch_fn(seed, s, params)` with the parameters update `s` starts
      from (batches sampled from the policy); needs `config.steps_per_call=1`.
    carry: None, or the initial carry c_0 (a pytree of arrays) of a batch function with
      running statistics, then called as `batch_fn(seed, s, [params,] c_s) -> (batch,
      c_{s+1})`; checkpointed with the state, it keeps its structure, shapes and dtypes.
    param_axes: the parameters' logical axis names, a pytree like the params of
      `PartitionSpec`s (e.g. `transformer.logical_axes(model)`). Default: the names
      `init_fn` boxes them with (`nn.with_logical_partitioning`); plain params have none.

  Returns:
    `TrainResult(state, history)`: the state after `config.num_steps` updates (or the
    restored one, if already that far; with `carry` a `CarryTrainState` holding the carry
    after the last batch) and the metrics logged by this call.

  Raises:
    ValueError / TypeError: for an invalid config or argument (`steps_per_call` > 1 with
      `on_policy`), or a workdir that is a file or not writable, before any work.
    ValueError: `workdir` holds checkpoints of another run (seed, batch size, optimizer,
      parameter or optimizer-state shapes, or more steps than `config.num_steps`), or
      none that restores; the message names the differences and the ways out.
    NonFiniteError: (a FloatingPointError) with `config.nan_guard`, a NaN/Inf loss,
      metric or state; it names the first such update, raised at the next log or
      checkpoint step; nothing from it on is checkpointed.
  """
  run = _prepare(init_fn, loss_fn, batch_fn, optimizer, config, workdir, mesh,
                 gradient_free, on_policy, carry, param_axes)
  with checkpoints(run.workdir, keep=int(run.config.keep_checkpoints),
                   overwrite=overwrite) as manager:
    start, state = restore_or_init(manager, run.workdir, run.record, run.abstract_state,
                                   run.state_shardings, run.fresh_state)
    return _loop(run, manager, start, state)


class _Run(NamedTuple):
  """What `train` runs, made from its checked arguments and fixed for the whole run.

  `init_fn`, `loss_fn` and the optimizer's functions are hashable (jit static arguments).
  """
  config: types.SimpleNamespace  # A snapshot of the settings (`config.snapshot`).
  workdir: str
  mesh: jax.sharding.Mesh
  init_fn: Callable
  loss_fn: Callable
  optimizer: optax.GradientTransformation
  gradient_free: bool
  options: tuple[tuple[str, Any], ...]  # XLA options of the compiled call.
  init_key: jax.Array
  step_key: jax.Array
  carry: Any  # The initial carry, as jax arrays, or None.
  abstract_state: TrainState | CarryTrainState
  shardings: _Shardings | None  # A model-parallel state's; None: replicated.
  state_shardings: Any
  record: dict  # What determines the checkpoints' values (`resume`).
  batches: Callable  # (begin, end, state) -> (batches, carry): `calls.batch_maker`.

  def fresh_state(self) -> TrainState | CarryTrainState:
    """The state before update 0, created on the devices with its final sharding."""
    state = _init_state(self.init_key, init_fn=self.init_fn, opt_init=self.optimizer.init,
                        mesh=self.mesh, shardings=self.shardings)
    return _with_carry(state, None if self.carry is None else
                       jax.device_put(self.carry, replicated_sharding(self.mesh)))


def _prepare(init_fn, loss_fn, batch_fn, optimizer, config, workdir, mesh, gradient_free,
             on_policy, carry, param_axes) -> _Run:
  """`train`'s arguments checked before any work (one-line errors), and the run they make:
  the mesh, the keys, the abstract state and its shardings, the batches, the run record."""
  validate_train_config(config)
  sizes, options = mesh_sizes(config), compiler_options(config)
  config = snapshot(config)
  _check_arguments(config, init_fn, loss_fn, batch_fn, optimizer, mesh, on_policy)
  workdir = trials.ensure_directory(workdir, "workdir")
  user_optimizer = optimizer
  init_fn, loss_fn = _hashable(init_fn), _hashable(loss_fn)
  if gradient_free:  # Extra arguments reach the transformations that take them.
    optimizer = optax.with_extra_args_support(optimizer)
  optimizer = optax.GradientTransformation(_hashable(optimizer.init),
                                           _hashable(optimizer.update))
  maybe_initialize_distributed(bool(config.distributed))
  mesh = _data_mesh(mesh, sizes, config.batch_size)
  init_key, step_key = jax.random.split(jax.random.PRNGKey(int(config.seed)))
  carry = None if carry is None else _check_carry(carry)
  abstract_state = _with_carry(
      jax.eval_shape(functools.partial(_make_state, init_fn=init_fn, opt_init=optimizer.init),
                     init_key), None if carry is None else _abstract(carry))
  shardings = _state_shardings(abstract_state, init_fn, init_key, optimizer, mesh, param_axes)
  state_shardings = jax.tree.map(lambda _: replicated_sharding(mesh), abstract_state)
  if shardings is not None:
    state_shardings = _with_carry(shardings.tree, getattr(state_shardings, "carry", None))
  batches = batch_maker(batch_fn, seed=int(config.seed), batch_size=config.batch_size,
                        mesh=mesh, on_policy=on_policy,
                        abstract_carry=getattr(abstract_state, "carry", None))
  record = _run_record(config, abstract_state, user_optimizer, bool(gradient_free),
                       bool(on_policy))
  return _Run(config, workdir, mesh, init_fn, loss_fn, optimizer, bool(gradient_free), options,
              init_key, step_key, carry, abstract_state, shardings, state_shardings, record,
              batches)


def _check_arguments(config, init_fn, loss_fn, batch_fn, optimizer, mesh, on_policy) -> None:
  """One-line errors for `train` arguments of the wrong kind."""
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


def _data_mesh(mesh: jax.sharding.Mesh | None, sizes: dict[str, int],
               batch_size: int) -> jax.sharding.Mesh:
  """`mesh`, or the one of `sizes` (`config.mesh`); its data axes must split the batch."""
  if mesh is None:
    mesh = mesh_from_sizes(sizes)
  if DATA_AXIS not in mesh.shape:
    raise ValueError(f"mesh axes {tuple(mesh.shape)} must include {DATA_AXIS!r}")
  if batch_size % batch_shards(mesh):
    axes = batch_axes(mesh)
    where = f"axis {axes!r}" if isinstance(axes, str) else f"axes {axes}"
    raise ValueError(f"config.batch_size={batch_size} is not divisible by the "
                     f"{batch_shards(mesh)} devices on mesh {where}")
  return mesh


def _hashable(fn: Callable) -> Callable:
  """Returns `fn` if it can be a jit static argument, else a wrapper hashed by identity."""
  try:
    hash(fn)
  except TypeError:
    return functools.partial(fn)
  return fn


def _loop(run: _Run, manager, start: int, state) -> TrainResult:
  """Runs updates `start`..`num_steps - 1` in compiled calls, making the batches of each
  call while the device runs the one before (on-policy: after it, as they need its
  parameters), with the work of log and checkpoint steps after the calls that end there."""
  config, is_chief = run.config, jax.process_index() == 0
  if start >= config.num_steps:
    logging.info("Checkpoint step %d is config.num_steps=%d: nothing to train.",
                 start, int(config.num_steps))
    return TrainResult(state, [])
  call = functools.partial(_train_steps, loss_fn=run.loss_fn, opt_update=run.optimizer.update,
                           mesh=run.mesh, gradient_free=run.gradient_free,
                           shardings=run.shardings, options=run.options)
  history, at = [], actions.Position(state, _clean_guard(run.mesh), done=start, saved=start)
  with MetricsWriter(run.workdir, enabled=is_chief, purge_after_step=start - 1) as writer, \
      tqdm.tqdm(total=int(config.num_steps), initial=start, desc="train", dynamic_ncols=True,
                disable=not (config.progress_bar and is_chief)) as progress, \
      actions.saving_on_exit(manager, at, config.nan_guard):
    end = _call_end(start, config)
    batches, next_carry = run.batches(start, end, at.state)
    while at.done < config.num_steps:
      # The call sees (and donates) the TrainState part only; the carry is host data.
      new, at.guard, metrics, at.finite = call(TrainState(*at.state[:3]), at.guard, batches,
                                               run.step_key)
      at.state, begin, at.done = _with_carry(new, next_carry), at.done, end
      if at.done < config.num_steps:  # The next call's batches, made while this runs.
        end = _call_end(at.done, config)
        batches, next_carry = run.batches(at.done, end, at.state)
      actions.after_call(at, metrics, config, manager, writer, progress, history)
      progress.update(at.done - begin)
  return TrainResult(at.state, history)
