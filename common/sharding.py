"""Device mesh and data-parallel placement for the training loop.

Everything runs under `jax.jit` on global arrays over a `jax.sharding.Mesh`. By
default the mesh puts all visible devices (of all processes) on one `data` axis;
batches are split along their leading axis over `data` and parameters are
replicated. The same code runs on 1 CPU, on N fake CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=8`), on GPUs and on TPU pods.
Multi-process runs (hosts of a pod, or processes on one machine) first call
`maybe_initialize_distributed` with the launcher's coordinator address, process
count and id (auto-detected on Cloud TPU, SLURM and Open MPI); every process then
sees all devices, builds the same mesh and feeds the same global batch.

Models too large to replicate use a mesh with `fsdp` and `tensor` axes as well
(`mesh_from_sizes({"data": 2, "fsdp": 4})`): batches are then split over data x fsdp,
and `common.partitioning` shards the parameters over fsdp and tensor from their
logical axis names. See docs/scaling.md.

Example:
    >>> mesh = make_mesh()
    >>> batch = shard_batch({"x": np.zeros((16, 3))}, mesh)
    >>> batch["x"].sharding == batch_sharding(mesh)
    True
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
FSDP_AXIS = "fsdp"
TENSOR_AXIS = "tensor"
MESH_AXES = (DATA_AXIS, FSDP_AXIS, TENSOR_AXIS)  # Outer to inner: tensor on the fastest links.
BATCH_AXES = (DATA_AXIS, FSDP_AXIS)  # The mesh axes a batch is split over.


def make_mesh(mesh_shape: Sequence[int] | None = None,
              axis_names: Sequence[str] = (DATA_AXIS,)) -> Mesh:
  """Builds a mesh over all visible devices.

  Args:
    mesh_shape: sizes of the mesh axes; one entry may be -1, meaning "all the
      devices left". `None` means `(-1,)`: every device on one axis.
    axis_names: one name per axis of `mesh_shape`; must include "data", the
      axis batches are split over.

  Returns:
    A `Mesh` whose axes are `axis_names` (Auto axis types, so sharding is
    propagated by the compiler).

  Raises:
    TypeError: if a size is not an int (1.5 would be truncated) or `axis_names`
      is a bare string.
    ValueError: if the shape does not use exactly the visible devices, has a
      bad entry, or the names do not match it.
  """
  num_devices = jax.device_count()
  if mesh_shape is not None and (
      isinstance(mesh_shape, (str, bytes)) or not hasattr(mesh_shape, "__len__") or
      not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in mesh_shape)):
    raise TypeError(f"mesh_shape must be None or a sequence of ints, got {mesh_shape!r}")
  if isinstance(axis_names, (str, bytes)):
    raise TypeError(f"axis_names must be a sequence of names such as ('data',), got "
                    f"{axis_names!r}")
  shape = [-1] if mesh_shape is None else [int(s) for s in mesh_shape]
  names = tuple(axis_names)
  if len(shape) != len(names):
    raise ValueError(f"mesh_shape {tuple(shape)} has {len(shape)} axes but axis_names "
                     f"{names} has {len(names)}")
  if DATA_AXIS not in names:
    raise ValueError(f"axis_names {names} must include {DATA_AXIS!r}")
  if any(s == 0 or s < -1 for s in shape) or shape.count(-1) > 1:
    raise ValueError(f"mesh_shape {tuple(shape)} must hold positive sizes and at most "
                     "one -1")
  known = int(np.prod([s for s in shape if s != -1]))
  if -1 in shape:
    if num_devices % known:
      raise ValueError(f"mesh_shape {tuple(shape)}: {num_devices} devices do not "
                       f"divide into axes of known size {known}")
    shape[shape.index(-1)] = num_devices // known
  elif known != num_devices:
    raise ValueError(f"mesh_shape {tuple(shape)} needs {known} devices, but "
                     f"{num_devices} are visible")
  return jax.make_mesh(tuple(shape), names, axis_types=(AxisType.Auto,) * len(names))


def mesh_from_sizes(sizes: Mapping[str, int] | None = None) -> Mesh:
  """A mesh with axes `MESH_AXES` from their sizes, e.g. {"data": 2, "fsdp": 4}.

  Missing axes have size 1, except `data`, which defaults to -1 ("all the devices
  left"); one size may be -1. When fsdp and tensor both have size 1 the mesh is
  `make_mesh((data,))`, the data-only mesh of every unsharded run.

  Raises:
    ValueError: an unknown axis name, a size that is not a positive int or -1, or
      sizes that do not multiply to the number of visible devices.
  """
  sizes = dict(sizes or {})
  unknown = sorted(set(sizes) - set(MESH_AXES))
  if unknown:
    raise ValueError(f"mesh axes {unknown} are unknown; expected sizes for some of "
                     f"{MESH_AXES}")
  for name, size in sizes.items():
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or (
        size < 1 and size != -1):
      raise ValueError(f"mesh size {name}={size!r}; expected a positive int or -1 "
                       "(all the devices left)")
  shape = [int(sizes.get(name, -1 if name == DATA_AXIS else 1)) for name in MESH_AXES]
  if shape.count(-1) > 1:
    raise ValueError(f"mesh sizes {dict(zip(MESH_AXES, shape))} hold more than one -1")
  mesh = make_mesh(shape, MESH_AXES)
  if mesh.shape[FSDP_AXIS] == mesh.shape[TENSOR_AXIS] == 1:
    return make_mesh((mesh.shape[DATA_AXIS],))
  return mesh


def batch_axes(mesh: Mesh) -> str | tuple[str, ...]:
  """The mesh axes a batch is split over: "data", or ("data", "fsdp") on a mesh
  with an fsdp axis."""
  names = tuple(name for name in BATCH_AXES if name in mesh.shape)
  return names[0] if len(names) == 1 else names


def batch_shards(mesh: Mesh) -> int:
  """How many slices a batch is split into: the product of the `batch_axes` sizes."""
  return int(np.prod([mesh.shape[name] for name in BATCH_AXES if name in mesh.shape]))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
  """Returns the sharding that keeps a full copy of an array on every device of `mesh`."""
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh, batch_axis: int = 0) -> NamedSharding:
  """Returns the sharding that splits an array's axis `batch_axis` (default: the leading
  one) over the mesh `data` axis (and `fsdp`, if the mesh has one) and keeps the axes
  before it whole."""
  return NamedSharding(mesh, PartitionSpec(*(None,) * batch_axis, batch_axes(mesh)))


def check_batch(batch: Any, mesh: Mesh, batch_axis: int = 0) -> Any:
  """`batch` with NumPy leaves, checked for what `shard_batch` needs.

  For a caller that hands host batches to a jitted function whose `in_shardings`
  place them (cheaper than a `shard_batch` per call in a single-process run).

  Args:
    batch: a pytree of arrays (NumPy or JAX) that share a batch axis.
    mesh: the mesh whose `data` (and `fsdp`) axes split the batch axis.
    batch_axis: which axis of every leaf is the batch axis.

  Returns:
    The same pytree with every leaf as a NumPy array.

  Raises:
    ValueError, TypeError: as `shard_batch`.
  """
  num_shards = batch_shards(mesh)
  leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(batch)
  if not leaves_with_paths:
    raise ValueError("batch has no array leaves")
  batch_size = None
  checked = []
  for path, leaf in leaves_with_paths:
    name = jax.tree_util.keystr(path) or "<root>"
    host = np.asarray(leaf)
    if host.dtype.kind in "OUSmM":  # Objects, strings, dates: not device arrays.
      raise TypeError(f"batch leaf {name} has dtype {host.dtype}; expected numeric or "
                      "bool arrays")
    if host.ndim <= batch_axis:
      raise ValueError(f"batch leaf {name} is a scalar; every leaf needs a leading "
                       "batch axis" if host.ndim == 0 else
                       f"batch leaf {name} has shape {host.shape}, no batch axis {batch_axis}")
    size = host.shape[batch_axis]
    if batch_size is None:
      batch_size = size
    elif size != batch_size:
      where = "leading size" if batch_axis == 0 else f"size on axis {batch_axis}:"
      raise ValueError(f"batch leaf {name} has {where} {size}, but other leaves have "
                       f"{batch_size}")
    if size % num_shards:
      axes = batch_axes(mesh)
      where = f"axis {axes!r}" if isinstance(axes, str) else f"axes {axes}"
      raise ValueError(f"batch size {size} (leaf {name}) is not divisible by "
                       f"the {num_shards} devices on mesh {where}")
    checked.append(host)
  return jax.tree_util.tree_unflatten(treedef, checked)


def shard_batch(batch: Any, mesh: Mesh, batch_axis: int = 0) -> Any:
  """Places a host batch on the mesh as global arrays split along their batch axis.

  Every process passes the same global batch (e.g. from a pure function of
  (seed, step)); each device receives its slice, so this also works for
  multi-host runs. A stack of K batches (leaves `[K, batch, ...]`, what
  `common.train` scans over with `steps_per_call=K`) is placed with
  `batch_axis=1`: every device holds its slice of each of the K batches.

  Args:
    batch: a pytree of arrays (NumPy or JAX) that share a batch axis.
    mesh: the mesh; the batch axis is split over its `data` axis (and `fsdp`).
    batch_axis: which axis of every leaf is the batch axis (0: the leading one).

  Returns:
    The same pytree of `jax.Array`s with sharding `batch_sharding(mesh, batch_axis)`.

  Raises:
    ValueError: if a leaf has no axis `batch_axis` (a scalar), leaves disagree on
      the batch size, or the batch size is not divisible by the size of the
      `data` axis (times the `fsdp` axis).
  """
  sharding = batch_sharding(mesh, batch_axis)
  return jax.tree.map(
      lambda host: jax.make_array_from_callback(host.shape, sharding,
                                                lambda index: host[index]),
      check_batch(batch, mesh, batch_axis))


def check_launcher_args(coordinator_address: str | None = None,
                        num_processes: int | None = None, process_id: int | None = None,
                        local_device_ids: int | Sequence[int] | None = None) -> None:
  """Checks the arguments a launcher passes to `maybe_initialize_distributed`.

  `jax.distributed.initialize` would reject some of them only after waiting for
  its peers, or with a multi-line message; entrypoints call this while parsing
  their flags, before any work. None means "auto-detect" and is always valid.

  Args:
    coordinator_address: 'host:port' (IPv6 as '[addr]:port'), port in 1..65535.
    num_processes: an int >= 1.
    process_id: an int in 0..num_processes-1 (>= 0 if num_processes is None).
    local_device_ids: an int >= 0 or a sequence of them.

  Raises:
    TypeError: if `coordinator_address` is not a string.
    ValueError: naming the first bad argument and what was expected.
  """
  def is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))

  if coordinator_address is not None:
    if not isinstance(coordinator_address, str):
      raise TypeError(f"coordinator_address must be a 'host:port' string, got "
                      f"{coordinator_address!r}")
    host, _, port = coordinator_address.rpartition(":")
    bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
    if not host or bare_ipv6 or not port.isdigit() or not 0 < int(port) < 65536:
      raise ValueError(f"coordinator_address {coordinator_address!r} must be 'host:port' "
                       "with a port in 1..65535 (IPv6 as '[addr]:port'), e.g. "
                       "'10.0.0.1:1234'")
  if num_processes is not None and not (is_int(num_processes) and num_processes >= 1):
    raise ValueError(f"num_processes must be an int >= 1, got {num_processes!r}")
  if process_id is not None:
    if not (is_int(process_id) and process_id >= 0):
      raise ValueError(f"process_id must be an int >= 0, got {process_id!r}")
    if num_processes is not None and process_id >= num_processes:
      raise ValueError(f"process_id {process_id} is out of range for num_processes="
                       f"{num_processes}; expected 0..{num_processes - 1}")
  if local_device_ids is not None:
    ids = [local_device_ids] if is_int(local_device_ids) else local_device_ids
    if (isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__") or
        not all(is_int(i) and i >= 0 for i in ids)):
      raise ValueError(f"local_device_ids must be an int >= 0 or a sequence of them, got "
                       f"{local_device_ids!r}")


def maybe_initialize_distributed(flag: bool = True, *,
                                 coordinator_address: str | None = None,
                                 num_processes: int | None = None,
                                 process_id: int | None = None,
                                 local_device_ids: int | Sequence[int] | None = None,
                                 initialization_timeout: int = 300) -> bool:
  """Starts JAX's multi-process runtime when `flag` is true.

  Call it in every process before anything touches a device (`jax.devices()`,
  an array, a jitted call). A launcher passes the coordinator address (process
  0's host and a free port), the number of processes and this process's id.
  Arguments left as None are auto-detected by `jax.distributed.initialize` on
  Cloud TPU, SLURM and Open MPI (and the address read from
  `JAX_COORDINATOR_ADDRESS`), so on those clusters `maybe_initialize_distributed()`
  is enough. Afterwards `jax.devices()` lists the devices of all processes, and
  `make_mesh` spans them.

  On CPU, cross-process collectives (the gradient all-reduce) need an
  implementation: if `jax_cpu_collectives_implementation` is unset, it is set to
  "gloo" (over TCP; already the default of the jax versions we support), and an
  explicit choice such as "mpi" is kept. That is how several processes on one
  machine run the data-parallel loop (tests/common/test_multiprocess.py).

  Args:
    flag: whether this is a multi-process run (e.g. `config.distributed`, or
      true whenever a launcher argument is given).
    coordinator_address: 'host:port' of process 0's coordinator service.
    num_processes: the number of processes (>= 1).
    process_id: this process's id, in 0..num_processes-1.
    local_device_ids: the local devices this process uses (GPU launchers that
      start one process per device); None: all of them.
    initialization_timeout: seconds to wait for all processes to connect.

  Returns:
    True if the runtime is initialised (now or before), False if `flag` is false.

  Raises:
    TypeError: if `flag` is not a bool or `coordinator_address` not a string.
    ValueError: if `flag` is false but a launcher argument is given, an argument
      is out of range (a process id >= num_processes, an address without port),
      missing with no cluster to auto-detect it from, or the runtime is already
      initialised with another process count or id.
    RuntimeError: from jax, if a device was touched before this call.
  """
  if not isinstance(flag, (bool, np.bool_)):
    raise TypeError(f"distributed flag must be a bool, got {flag!r}")
  given = {name: value for name, value in (
      ("coordinator_address", coordinator_address), ("num_processes", num_processes),
      ("process_id", process_id), ("local_device_ids", local_device_ids)) if value is not None}
  if not flag:
    if given:
      raise ValueError(f"launcher arguments {sorted(given)} were given, but the distributed "
                       "flag is false; pass True to start the multi-process runtime")
    return False
  check_launcher_args(coordinator_address, num_processes, process_id, local_device_ids)
  if isinstance(initialization_timeout, bool) or not (
      isinstance(initialization_timeout, numbers.Integral) and initialization_timeout >= 1):
    raise ValueError(f"initialization_timeout must be an int >= 1 (seconds), got "
                     f"{initialization_timeout!r}")
  if jax.distributed.is_initialized():
    for name, value, actual in (("num_processes", num_processes, jax.process_count()),
                                ("process_id", process_id, jax.process_index())):
      if value is not None and value != actual:
        raise ValueError(f"the distributed runtime is already initialised with "
                         f"{name}={actual}, not {value}")
    return True
  if num_processes != 1 and jax.config.jax_cpu_collectives_implementation is None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  as_int = lambda value: None if value is None else int(value)  # jax wants Python ints.
  if local_device_ids is not None:
    local_device_ids = [int(i) for i in np.atleast_1d(local_device_ids)]
  try:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=as_int(num_processes),
                               process_id=as_int(process_id),
                               local_device_ids=local_device_ids,
                               initialization_timeout=int(initialization_timeout))
  except ValueError as e:  # An argument neither given nor auto-detected.
    raise ValueError(f"jax.distributed cannot start: {e} No cluster (Cloud TPU, SLURM, "
                     "Open MPI) was detected to fill it in; pass coordinator_address, "
                     "num_processes and process_id") from e
  return True
