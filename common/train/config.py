"""The loop's settings: `default_train_config()`, its checks, and the settings and
optimizer that experiments training one model as a stage of their pipeline share."""

from __future__ import annotations

import numbers
import re
import types
from collections.abc import Mapping
from typing import Any

import ml_collections
import numpy as np
import optax

from common.sharding import DATA_AXIS, FSDP_AXIS, MESH_AXES, TENSOR_AXIS

# Pure data parallelism over every device: the default `config.mesh`.
_DEFAULT_MESH = {DATA_AXIS: -1, FSDP_AXIS: 1, TENSOR_AXIS: 1}


def default_train_config(**overrides: Any) -> ml_collections.ConfigDict:
  """Returns the loop's settings with defaults (locked: a misspelt key fails).

  Experiment configs embed it as `train=default_train_config(num_steps=1500, batch_size=32)`.

  Keys:
    num_steps: total number of updates (>= 1); a resumed run continues to it.
    seed: seeds parameter init, the per-step loss keys and `batch_fn` (>= 0).
    batch_size: global batch size (>= 1), divisible by the mesh `data` size; every batch
      from `batch_fn` must have this leading size.
    checkpoint_every: save every this many updates (>= 0; 0 = only at the end).
    keep_checkpoints: how many of the newest checkpoints to retain (>= 1).
    log_every: log metrics at steps s with s % log_every == 0, and the last (>= 1).
    progress_bar: show a tqdm bar with the live loss.
    distributed: call `jax.distributed.initialize()` first (multi-host runs).
    nan_guard: raise `NonFiniteError` naming the first update whose loss or metrics are
      non-finite, or a non-finite state. The metrics are checked inside the compiled step
      and the state at log and checkpoint steps, both read there (no per-step transfer), so
      the error comes at the first of those at or after that update, before anything
      non-finite is saved. Off, the run goes on, and a checkpoint step whose update is
      non-finite is not saved.
    mesh: the sizes of the mesh axes data, fsdp and tensor (-1 = all devices left), used
      when `train` gets no mesh (`sharding.mesh_from_sizes`). The default {data: -1, fsdp:
      1, tensor: 1} is pure data parallelism; with fsdp or tensor > 1, parameters that carry
      logical axis names (see `train`'s `param_axes`) and their optimizer state are sharded
      (`common.partitioning`), and batches are split over data x fsdp. docs/scaling.md says
      how to choose it.
    mesh_shape: the older way to give the data axis: (n,) is mesh.data = n; the default
      (-1,) defers to `mesh`. Set one or the other.
    steps_per_call: updates per compiled call (>= 1): K > 1 scans K stacked batches in one
      call (less dispatch overhead for small models) with the results of K = 1; calls end at
      log and checkpoint steps. K > 1 needs `on_policy=False`.
    compiler_options: XLA options for the compiled call, as "name=value,name=value" (names
      of XLA's DebugOptions, as in XLA_FLAGS without the dashes; "" = XLA's defaults).
      Options of another backend are ignored by XLA. CGFM sets
      "xla_cpu_experimental_ynn_fusion_type=" (docs/benchmarks.md).

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


def snapshot(config: Any) -> types.SimpleNamespace:
  """The settings of a valid `config` (any mapping), copied: later edits cannot leak in."""
  return types.SimpleNamespace(**{key: config[key] for key in _ALL_KEYS})


# Loop keys that never change what a run computes (logging, checkpointing, devices):
# experiments leave them out of the fingerprints that key their runs.
BOOKKEEPING_KEYS = ("log_every", "checkpoint_every", "keep_checkpoints", "progress_bar",
                    "distributed", "nan_guard", "mesh_shape", "steps_per_call", "mesh",
                    "compiler_options")
