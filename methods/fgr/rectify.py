"""FGR's gradient rectification: project the main-loss gradient so that the step does not
increase the ID calibration loss to first order, as pure pytree functions and as an
optax transformation.

With g_m = grad L_main (the loss on the batch with low-pass views), g_c = grad L_cal
(SoftBinnedECE on its clean images) and the step theta <- theta - eta g, the change of
the calibration loss is dL_cal = -eta <g, g_c> + O(eta^2). The two conflict when
<g_m, g_c> < 0 (the main step would raise L_cal); FGR then removes the conflicting
component,

    g = g_m - (<g_m, g_c> / |g_c|^2) g_c    if <g_m, g_c> < 0,   else   g = g_m,

so that <g, g_c> >= 0, i.e. the step d = -eta g has <d, g_c> <= 0: a first-order
non-increase of L_cal with no weight between the two losses (FGR, ICML 2026; code
YilinZhang107/FGR-Calib, `apply_fgr_update`: the same condition dot < 0 on the
gradients the optimizer descends). After a projection <g, g_c> = 0 exactly; the code
adds 1e-12 to |g_c|^2, we skip the projection when g_c = 0 instead, as it does.

Which parameters. By default only the classifier head (the code's `model.fc`) is
rectified, with the inner products taken over all its leaves together (weight and
bias: one flat vector); the other leaves keep g_m. `scope="all"` rectifies every leaf
(the code's --correct-all). `per_layer=True` projects each layer (the leaves that share
a parent in the tree, e.g. a Dense layer's kernel and bias) on its own instead of the
global vector, which is stricter: it makes every layer's inner product non-negative.

The PCGrad baseline (Yu et al., NeurIPS 2020) projects symmetrically and sums: with
the same conflict test,

    g_m' = g_m - (<g_m, g_c> / |g_c|^2) g_c,   g_c' = g_c - (<g_c, g_m> / |g_m|^2) g_m,
    g = g_m' + g_c'

(it optimises L_main + L_cal, with an implicit weight 1; the leaves outside the scope
keep g_m, as in FGR).

As an optax transformation, `fgr_rectify(...)` takes g_c as the extra argument
`constraint_grads`, so it heads any chain:

    tx = optax.chain(fgr_rectify(), optax.clip_by_global_norm(2.0),
                     optax.sgd(schedule, momentum=0.9))
    updates, state = tx.update(g_m, state, params, constraint_grads=g_c)

(the code clips the rectified gradient at global norm 2 before SGD with momentum 0.9 and
weight decay 5e-4). Before FGR's warm-up ends pass g_c = 0 (a zero constraint never
projects), or use a chain without it.

Example:
    >>> g_m = {"head": {"w": jnp.array([1.0, -1.0])}}
    >>> g_c = {"head": {"w": jnp.array([0.0, 1.0])}}
    >>> g, info = rectify_grads(g_m, g_c)
    >>> g["head"]["w"].tolist(), float(info.dot)
    ([1.0, 0.0], -1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

Array = jax.Array
PyTree = Any
HeadSpec = str | Sequence[str] | Callable[[tuple[str, ...]], bool]

DEFAULT_HEAD = ("head", "fc", "classifier")  # the code's model.fc / .classifier / .head
SCOPES = ("head", "all")
METHODS = ("fgr", "pcgrad")


class RectifyInfo(NamedTuple):
  """What a rectification did.

  Attributes:
    dot: <g_m, g_c> over the rectified leaves before the projection (summed over the
      layers when per layer); negative = conflict.
    conflict: the fraction of groups (1 when global, else layers) that were projected.
  """
  dot: Array
  conflict: Array


def _key_name(entry: Any) -> str:
  for attr in ("key", "name", "idx"):
    if hasattr(entry, attr):
      return str(getattr(entry, attr))
  return str(entry)


def leaf_paths(tree: PyTree) -> list[tuple[str, ...]]:
  """Each leaf's path as a tuple of names, e.g. ("params", "head", "kernel")."""
  flat, _ = jax.tree_util.tree_flatten_with_path(tree)
  return [tuple(_key_name(e) for e in path) for path, _ in flat]


def _head_predicate(head: HeadSpec) -> Callable[[tuple[str, ...]], bool]:
  if callable(head):
    return head
  names = (head,) if isinstance(head, str) else tuple(head)
  return lambda path: any(part in names for part in path)


def _groups(paths: list[tuple[str, ...]], scope: str, head: HeadSpec,
            per_layer: bool) -> list[int]:
  """A group id per leaf (-1: not rectified): one group, or one per parent path."""
  if scope not in SCOPES:
    raise ValueError(f"scope={scope!r}; expected one of {SCOPES}")
  selected = [True] * len(paths) if scope == "all" else \
      [bool(_head_predicate(head)(p)) for p in paths]
  if not any(selected):
    example = "/".join(paths[0]) if paths else "(no leaves)"
    raise ValueError(f"scope='head' but no parameter path matches head={head!r} (paths look "
                     f"like {example!r}); name the classifier head or use scope='all'")
  ids: dict[tuple[str, ...], int] = {}
  out = []
  for path, sel in zip(paths, selected):
    if not sel:
      out.append(-1)
      continue
    layer = path[:-1] if per_layer else ()
    out.append(ids.setdefault(layer, len(ids)))
  return out


def _vdot(xs: list[Array], ys: list[Array]) -> Array:
  return sum(jnp.vdot(x, y) for x, y in zip(xs, ys))


def _combine(gm: list[Array], gc: list[Array], method: str) -> tuple[list[Array], Array, Array]:
  """One group: (new leaves, <g_m, g_c>, projected?) for FGR or PCGrad."""
  dot = _vdot(gm, gc)
  cc = _vdot(gc, gc)
  conflict = (dot < 0) & (cc > 0)
  coef_m = jnp.where(conflict, dot / jnp.where(cc > 0, cc, 1.0), 0.0)
  new = [m - (coef_m * c).astype(m.dtype) for m, c in zip(gm, gc)]
  if method == "pcgrad":
    mm = _vdot(gm, gm)
    conflict_c = (dot < 0) & (mm > 0)
    coef_c = jnp.where(conflict_c, dot / jnp.where(mm > 0, mm, 1.0), 0.0)
    new = [n + c - (coef_c * m).astype(m.dtype) for n, m, c in zip(new, gm, gc)]
  return new, dot, conflict


def rectify_grads(grads: PyTree, constraint_grads: PyTree, *, scope: str = "head",
            head: HeadSpec = DEFAULT_HEAD, per_layer: bool = False,
            method: str = "fgr") -> tuple[PyTree, RectifyInfo]:
  """FGR's projection of the main gradient against the constraint gradient (module
  docstring), or the PCGrad baseline with method="pcgrad".

  Args:
    grads: g_m, a pytree (e.g. flax params' gradients).
    constraint_grads: g_c, a pytree of the same structure and shapes.
    scope: "head" (leaves whose path matches `head`) or "all".
    head: a leaf is in the head when a component of its path equals one of these names
      (default "head", "fc", "classifier"), or a predicate on the path tuple.
    per_layer: project each layer (leaves sharing a parent) separately, not globally.
    method: "fgr" (one-sided projection) or "pcgrad" (symmetric projection + sum).

  Returns:
    (g, RectifyInfo). Outside the scope g = g_m.

  Raises:
    ValueError: mismatched trees, unknown scope or method, or no head leaf.

  Example:
    >>> g, info = rectify_grads({"head": jnp.ones(2)}, {"head": -jnp.ones(2)})
    >>> g["head"].tolist()   # the whole conflicting component is removed
    [0.0, 0.0]
  """
  if method not in METHODS:
    raise ValueError(f"method={method!r}; expected one of {METHODS}")
  gm_leaves, treedef = jax.tree.flatten(grads)
  gc_leaves, gc_def = jax.tree.flatten(constraint_grads)
  if gc_def != treedef:
    raise ValueError(f"constraint_grads has tree structure {gc_def}; expected that of "
                     f"grads, {treedef}")
  for i, (m, c) in enumerate(zip(gm_leaves, gc_leaves)):
    if jnp.shape(m) != jnp.shape(c):
      raise ValueError(f"leaf {'/'.join(leaf_paths(grads)[i])}: grads {jnp.shape(m)} and "
                       f"constraint_grads {jnp.shape(c)} differ")
  ids = _groups(leaf_paths(grads), scope, head, per_layer)
  out = list(gm_leaves)
  dots, conflicts = [], []
  for gid in range(max(ids) + 1):
    members = [i for i, g in enumerate(ids) if g == gid]
    new, dot, conflict = _combine([gm_leaves[i] for i in members],
                                  [gc_leaves[i] for i in members], method)
    for i, leaf in zip(members, new):
      out[i] = leaf
    dots.append(dot)
    conflicts.append(conflict)
  info = RectifyInfo(dot=jnp.sum(jnp.stack(dots)).astype(jnp.float32),
                     conflict=jnp.mean(jnp.stack(conflicts).astype(jnp.float32)))
  return jax.tree.unflatten(treedef, out), info


def pcgrad(grads: PyTree, constraint_grads: PyTree, **kwargs) -> tuple[PyTree, RectifyInfo]:
  """The PCGrad baseline: `rectify_grads(..., method="pcgrad")` (module docstring)."""
  return rectify_grads(grads, constraint_grads, method="pcgrad", **kwargs)


def value_and_two_grads(fn: Callable[..., tuple[Array, Array]], params: PyTree, *args,
                        has_aux: bool = False):
  """(L_main, L_cal[, aux]) and both gradients from one forward pass and two VJPs.

      (l_m, l_c), vjp = jax.vjp(lambda p: fn(p, *args), params)
      g_m = vjp((1, 0)),   g_c = vjp((0, 1))

  Args:
    fn: `(params, *args) -> (main_loss, constraint_loss)` (or `((main, constraint), aux)`
      with has_aux), e.g. DFL on the mixed batch and SoftBinnedECE on its clean images,
      from one forward pass.
    params: the pytree to differentiate.

  Returns:
    ((l_m, l_c), g_m, g_c), or ((l_m, l_c), aux, g_m, g_c) with has_aux.

  Example:
    >>> fn = lambda p: (jnp.sum(p ** 2), jnp.sum(p))
    >>> (lm, lc), gm, gc = value_and_two_grads(fn, jnp.ones(2))
    >>> gm.tolist(), gc.tolist()
    ([2.0, 2.0], [1.0, 1.0])
  """
  if has_aux:
    (lm, lc), vjp, aux = jax.vjp(lambda p: fn(p, *args), params, has_aux=True)
  else:
    (lm, lc), vjp = jax.vjp(lambda p: fn(p, *args), params)
  (gm,) = vjp((jnp.ones_like(lm), jnp.zeros_like(lc)))
  (gc,) = vjp((jnp.zeros_like(lm), jnp.ones_like(lc)))
  return ((lm, lc), aux, gm, gc) if has_aux else ((lm, lc), gm, gc)


class FGRState(NamedTuple):
  """The last step's `RectifyInfo` (for logging): `dot` and `conflict`."""
  dot: Array
  conflict: Array


def fgr_rectify(*, scope: str = "head", head: HeadSpec = DEFAULT_HEAD,
                per_layer: bool = False, method: str = "fgr"
                ) -> optax.GradientTransformationExtraArgs:
  """FGR's rectification as the head of an optax chain; g_c is an extra argument.

      update(g_m, state, params, *, constraint_grads=g_c) = (rectify_grads(g_m, g_c), state')

  Args:
    scope, head, per_layer, method: as in `rectify_grads`.

  Returns:
    An `optax.GradientTransformationExtraArgs` with `FGRState` (the last step's inner
    product and conflict fraction). Its update needs the keyword `constraint_grads`
    (a pytree like the updates) and ignores other extra arguments, so it composes with
    `optax.chain` and any optimizer after it.

  Example:
    >>> tx = optax.chain(fgr_rectify(), optax.clip_by_global_norm(2.0), optax.sgd(0.1))
    >>> params = {"body": jnp.ones(2), "head": jnp.ones(2)}
    >>> state = tx.init(params)
    >>> g_m = {"body": jnp.ones(2), "head": jnp.array([1.0, -1.0])}
    >>> g_c = {"body": jnp.ones(2), "head": jnp.array([0.0, 1.0])}
    >>> updates, state = tx.update(g_m, state, params, constraint_grads=g_c)
  """
  if scope not in SCOPES:
    raise ValueError(f"scope={scope!r}; expected one of {SCOPES}")
  if method not in METHODS:
    raise ValueError(f"method={method!r}; expected one of {METHODS}")

  def init(params):
    del params
    return FGRState(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))

  def update(updates, state, params=None, *, constraint_grads=None, **extra):
    del state, params, extra
    if constraint_grads is None:
      raise ValueError("fgr_rectify needs update(..., constraint_grads=g_c), the gradient "
                       "of the ID calibration loss (zeros before the warm-up ends)")
    new, info = rectify_grads(updates, constraint_grads, scope=scope, head=head,
                        per_layer=per_layer, method=method)
    return new, FGRState(info.dot, info.conflict)

  return optax.GradientTransformationExtraArgs(init, update)


def pcgrad_rectify(**kwargs) -> optax.GradientTransformationExtraArgs:
  """The PCGrad baseline as an optax transformation: `fgr_rectify(method="pcgrad")`."""
  return fgr_rectify(method="pcgrad", **kwargs)
