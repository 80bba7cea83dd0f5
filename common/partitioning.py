"""Parameter, optimizer-state and KV-cache shardings from logical axis names.

Models name the axes of their parameters with flax's logical partitioning
(`nn.with_logical_partitioning` on the initializers): the transformer's MLP kernel is
("embed", "mlp"), its query kernel ("embed", "heads"), its embedding ("vocab", "embed").
`LOGICAL_AXIS_RULES` maps those names onto the mesh axes of `common.sharding`:

    data    batches are split over it (pure data parallelism: parameters replicated);
    fsdp    batches are split over it too, and every parameter's "embed" axis is
            sharded over it (fully-sharded data parallelism, ZeRO-3: each device holds
            1/fsdp of the parameters and optimizer state and all-gathers a layer's
            weights when it runs);
    tensor  the heads, MLP and vocabulary axes are sharded over it (Megatron-style
            tensor parallelism: each device computes a slice of every layer).

A mesh axis that does not divide an array axis leaves that axis whole (e.g. two kv
heads on tensor=4), so every model runs on every mesh; the per-device bytes then drop
by less. The KV cache (layers, batch, length, kv_heads, head_dim) is split over the
batch axes and `tensor` (`cache_shardings`); the transformer also constrains the
cache it returns to that layout when rules are active (`axis_rules`).

Example:
    >>> mesh = sharding.mesh_from_sizes({"data": 2, "fsdp": 4})
    >>> axes = transformer.logical_axes(model)
    >>> shardings = param_shardings(jax.eval_shape(lambda: params), axes, mesh)
    >>> params = jax.device_put(params, shardings)   # 1/4 of each kernel per device
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from common.models.transformer import CACHE_AXES
from common.sharding import DATA_AXIS, FSDP_AXIS, TENSOR_AXIS, replicated_sharding

# Logical name -> mesh axes (None: never sharded). Batches go over data and fsdp; the
# model width over fsdp; heads, MLP width and vocabulary over tensor.
LOGICAL_AXIS_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", (DATA_AXIS, FSDP_AXIS)),
    ("embed", FSDP_AXIS),
    ("vocab", TENSOR_AXIS),
    ("heads", TENSOR_AXIS),
    ("kv_heads", TENSOR_AXIS),
    ("mlp", TENSOR_AXIS),
    ("norm", None),
    ("layers", None),
    ("length", None),
    ("head_dim", None),
)


def check_rules(rules: Any) -> tuple:
  """`rules` as a tuple of (logical name, mesh axes) pairs.

  Raises:
    ValueError: a rule that is not a (str, str | tuple of str | None) pair.
  """
  if isinstance(rules, (str, bytes)) or not isinstance(rules, Sequence):
    raise ValueError(f"axis rules must be a sequence of (logical name, mesh axes) pairs, "
                     f"got {rules!r}")
  for rule in rules:
    ok = isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)
    target = rule[1] if ok else None
    ok = ok and (target is None or isinstance(target, str) or (
        isinstance(target, (tuple, list)) and all(isinstance(a, str) for a in target)))
    if not ok:
      raise ValueError(f"axis rule {rule!r}; expected (logical name, mesh axis name, "
                       "tuple of names or None)")
  return tuple((name, tuple(t) if isinstance(t, list) else t) for name, t in rules)


def rules_for_mesh(mesh: Mesh, rules: Sequence = LOGICAL_AXIS_RULES) -> tuple:
  """`rules` with the mesh axes that `mesh` lacks (or has with size 1) dropped, so the
  same table serves a data-only mesh and a data x fsdp x tensor one."""
  def keep(target):
    names = (target,) if isinstance(target, str) else tuple(target or ())
    names = tuple(n for n in names if mesh.shape.get(n, 1) > 1)
    return None if not names else names[0] if len(names) == 1 else names
  return tuple((name, keep(target)) for name, target in check_rules(rules))


def _mesh_spec(logical: Any, shape: tuple[int, ...], mesh: Mesh, rules: tuple) -> PartitionSpec:
  """The mesh PartitionSpec of one array from its logical names; axes whose size the
  mesh axes do not divide stay whole."""
  if logical is None or len(logical) == 0:
    return PartitionSpec()
  if len(logical) != len(shape):
    raise ValueError(f"logical axes {tuple(logical)} do not match an array of shape {shape}")
  spec = nn.logical_to_mesh_axes(tuple(logical), rules)
  out = []
  for size, target in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = (target,) if isinstance(target, str) else tuple(target or ())
    kept = []
    for name in names:  # Keep the leading mesh axes whose product divides the size.
      if size % (int(np.prod([mesh.shape[n] for n in kept])) * mesh.shape[name]):
        break
      kept.append(name)
    out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  return PartitionSpec(*out)


def param_shardings(abstract_params: Any, logical_axes: Any, mesh: Mesh,
                    rules: Sequence = LOGICAL_AXIS_RULES) -> Any:
  """The `NamedSharding` of every parameter from its logical axis names.

  Args:
    abstract_params: the parameters or their `jax.eval_shape` (plain leaves).
    logical_axes: a matching pytree of logical `PartitionSpec`s (e.g.
      `transformer.logical_axes(model)` or `nn.get_partition_spec` of boxed params);
      P() or None for a leaf without names (replicated).
    mesh: the device mesh.
    rules: logical name -> mesh axes (default `LOGICAL_AXIS_RULES`).

  Returns:
    A pytree like `abstract_params` of `NamedSharding`s on `mesh`.

  Raises:
    ValueError: if the trees differ in structure or a leaf's names do not match its rank.
  """
  rules = rules_for_mesh(mesh, rules)
  leaves, treedef = jax.tree.flatten(abstract_params)
  axes = jax.tree.leaves(logical_axes, is_leaf=lambda x: isinstance(x, PartitionSpec) or x is None)
  if len(axes) != len(leaves):
    raise ValueError(f"logical_axes has {len(axes)} leaves but the parameters have "
                     f"{len(leaves)}; pass the names of these parameters")
  return jax.tree.unflatten(treedef, [
      NamedSharding(mesh, _mesh_spec(a, tuple(leaf.shape), mesh, rules))
      for leaf, a in zip(leaves, axes)])


def axes_at_paths(logical_axes: Any, params: Any) -> Any:
  """The names in `logical_axes` (a model's full tree) at the paths of `params`, a
  subset of that model's parameters (e.g. only the linear kernels a zeroth-order run
  tunes), for `train(..., param_axes=)`; P() where a path has no names.

  Example:
      >>> trainable = {"layer_0": {"mlp": {"up_proj": {"kernel": w}}}}
      >>> axes_at_paths(transformer.logical_axes(model), trainable)
      {'layer_0': {'mlp': {'up_proj': {'kernel': PartitionSpec('embed', 'mlp')}}}}
  """
  def lookup(path, _):
    node = logical_axes
    for entry in path:
      key = getattr(entry, "key", getattr(entry, "idx", getattr(entry, "name", None)))
      try:
        node = node[key]
      except (KeyError, IndexError, TypeError):
        return PartitionSpec()
    return node if isinstance(node, PartitionSpec) else PartitionSpec()
  return jax.tree_util.tree_map_with_path(lookup, params)


def opt_state_shardings(optimizer: optax.GradientTransformation, abstract_opt_state: Any,
                        shardings: Any, mesh: Mesh) -> Any:
  """Shardings of an optimizer state whose parameter-shaped parts (Adam's moments,
  momentum traces) follow the parameters' `shardings`; counters, keys and other leaves
  are replicated (`optax.tree_map_params`). An optimizer whose init cannot be traced
  that way (it reads the parameters' shapes) gets a replicated state, with a warning.
  """
  replicated = replicated_sharding(mesh)
  try:
    return optax.tree_map_params(optimizer.init, lambda _, s: s, abstract_opt_state, shardings,
                                 transform_non_params=lambda _: replicated)
  except Exception as e:  # pylint: disable=broad-except
    logging.warning("optimizer state replicated: its init does not trace with "
                    "optax.tree_map_params (%s)", str(e).splitlines()[0] if str(e) else e)
    return jax.tree.map(lambda _: replicated, abstract_opt_state)


def cache_shardings(cache: Any, mesh: Mesh, rules: Sequence = LOGICAL_AXIS_RULES) -> Any:
  """Shardings of a `transformer.KVCache`: keys and values (layers, batch, length,
  kv_heads, head_dim) split over the batch axes and `tensor` (where they divide), the
  per-row `left_pad` over the batch axes, `length` and attention state replicated."""
  rules = rules_for_mesh(mesh, rules)
  kv = NamedSharding(mesh, _mesh_spec(CACHE_AXES, tuple(cache.k.shape), mesh, rules))
  replicated = replicated_sharding(mesh)
  left_pad = None if cache.left_pad is None else NamedSharding(
      mesh, _mesh_spec(("batch",), tuple(cache.left_pad.shape), mesh, rules))
  state = None if cache.state is None else jax.tree.map(lambda _: replicated, cache.state)
  return type(cache)(kv, kv, replicated, state, left_pad)


def shard_cache(cache: Any, mesh: Mesh, rules: Sequence = LOGICAL_AXIS_RULES) -> Any:
  """Places a `KVCache` on `mesh` with `cache_shardings` (e.g. an `init_cache` before
  `sampling.generate(..., cache=)`)."""
  return jax.device_put(cache, cache_shardings(cache, mesh, rules))


@contextlib.contextmanager
def axis_rules(mesh: Mesh, rules: Sequence = LOGICAL_AXIS_RULES) -> Iterator[None]:
  """Makes `mesh` and `rules` the ambient ones while tracing, so that flax's
  `nn.with_logical_constraint` inside models (the transformer's KV cache) pins those
  layouts. Outside it such constraints are no-ops.

  Example:
      >>> with axis_rules(mesh):
      ...   tokens = sampling.generate(model, sharded_params, prompt, key, max_new_tokens=8)
  """
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules_for_mesh(mesh, rules)):
    yield


def per_device_bytes(tree: Any) -> int:
  """Bytes of `tree`'s arrays held by the first local device: the sum over leaves of
  `addressable_shards[0].data.nbytes` (what sharding divides)."""
  return int(sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree)))
