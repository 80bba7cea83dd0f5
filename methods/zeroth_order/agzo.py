"""AGZO: activation-guided zeroth-order estimation (perturbations inside the span of
each linear layer's input activations).

The mechanism. A linear layer y = x W with W stored (d_in, d_out), as in our
transformer, applied to the N token rows of H (N x d_in) has gradient

    dL/dW = H^T G,        G = dL/dY  (N x d_out),

so every column of dL/dW lies in the row space of H, span(H^T) in R^{d_in}. AGZO
takes, during the unperturbed forward pass, a rank-r orthonormal basis A (d_in x r) of
the dominant part of that row space by randomized subspace (power) iteration

    Q_0 = qr(Omega),  Omega ~ N(0, 1)^{d_in x r};   Q_{j+1} = qr(H^T (H Q_j)),  j < q;
    A = Q_q,

(a few iterations, O(N d_in r) each; H itself is never kept) and perturbs that
layer's weight only inside the subspace:

    Delta = A R^T,        R ~ N(0, 1)^{d_out x r}.

The paper writes weights (d_out x d_in) with y = W x and Delta = R A^T; our kernels are
the transpose, hence A R^T. vec(Delta) is an isotropic Gaussian in the
(r d_out)-dimensional subspace {A M^T}; all other parameters (embeddings, norms,
biases) get z ~ N(0, I). With c the one-sided difference (L(theta + eps Delta) - L(theta))
/ eps (the unperturbed pass that gives the activations also gives L(theta)) or the
two-sided one, the estimate is g_hat = c * Delta (regenerated from the key), and

    E[g_hat] = P grad L + O(eps),    P = projection onto the subspace,
    E cos(g_hat, grad L) = (|P grad L| / |grad L|) * kappa(k),
    kappa(k) = Gamma(k/2) / (sqrt(pi) Gamma((k+1)/2)) ~ sqrt(2 / (pi k)),

k the subspace dimension, against kappa(D) for isotropic (MeZO) perturbations of all
D parameters: higher whenever the activations are close to low-rank (|P g| / |g| >>
sqrt(k / D)), and no better when they are isotropic (see `alignment.py`).

Which inputs are read. AGZO needs, for the kernel at `params[path]["kernel"]`, its
input at `taps[path]["input"]` (the convention of `common.models.taps`): the
transformer's linear layers record it, and so does any flax model built with
`common.models.TappedDense` or applied with `common.models.apply_with_taps` (which
taps every `nn.Dense`). A linear kernel without a tap is an error (AGZO would quietly
be MeZO on that layer); `untapped="isotropic"` opts in to isotropic Gaussian noise
for such kernels.

References:
  Activation-Guided Zeroth-Order optimization (AGZO), ICML 2026 (abstract in
  papers/icml2026-abstracts.txt; evaluated on Qwen3 and Pangu models). Halko, Martinsson, Tropp,
  "Finding structure with randomness", SIAM Review 2011 (subspace iteration).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from common.models import taps as taps_lib
from methods.zeroth_order import perturbation
from methods.zeroth_order import transform

Path = tuple[str, ...]
_SKETCH_STREAM = 2**31 - 2
UNTAPPED = ("error", "isotropic")


def _check_untapped(fn: str, untapped: str) -> None:
  if untapped not in UNTAPPED:
    raise ValueError(f"{fn}: untapped={untapped!r}; expected one of {UNTAPPED}")


def power_iteration_basis(h: jax.Array, rank: int, key: jax.Array,
                          num_iters: int = 2, rel_tol: float = 1e-4) -> jax.Array:
  """A (d_in, r'): orthonormal basis of the dominant rank-r' row space of h.

      Q_0 = qr(Omega),  Omega ~ N(0, 1)^{d_in x r'};   Q_{j+1} = qr(H^T (H Q_j));   A = Q_q

  Args:
    h: (..., d_in) activations; all leading axes are token rows (N = their product).
    rank: r; the basis has r' = min(r, N, d_in) columns, so it always lies in the
      row space of h.
    key: draws the starting block Omega.
    num_iters: q >= 1 subspace iterations Q <- qr(H^T H Q).
    rel_tol: columns whose last |R_jj| is below rel_tol * max_j |R_jj| (directions
      with sigma_j^2 / sigma_1^2 below ~rel_tol, including those outside the row
      space when rank(H) < r) are set to zero, so A stays inside span(H^T).

  Returns:
    float32 (d_in, r'): orthonormal columns (some possibly zero) spanning the
    dominant rank-r' right singular subspace of H.

  Example:
      >>> h = jax.random.normal(jax.random.PRNGKey(0), (64, 8))
      >>> power_iteration_basis(h, 3, jax.random.PRNGKey(1)).shape
      (8, 3)

  References:
    Halko, Martinsson, Tropp, "Finding structure with randomness", SIAM Review 2011.
  """
  perturbation.check_positive_int("power_iteration_basis", rank=rank, num_iters=num_iters)
  hm = _token_rows(h)
  r = min(rank, hm.shape[0], hm.shape[1])
  omega = jax.random.normal(key, (hm.shape[1], r), jnp.float32)
  return _subspace_iteration([hm], [0], omega[None], num_iters, rel_tol)[0]


def _token_rows(h: jax.Array) -> jax.Array:
  """h (..., d_in) as float32 (N, d_in), N the product of the leading axes."""
  return h.reshape(-1, h.shape[-1]).astype(jnp.float32)


def _subspace_iteration(hs: list[jax.Array], owner: list[int], omegas: jax.Array,
                        num_iters: int, rel_tol: float) -> jax.Array:
  """`power_iteration_basis` of L layers at once: A_j from H_{owner[j]} and Omega_j.

      Q_0 = Omega_j;   Q_{i+1} = qr(H^T (H Q_i)) for all j

  Layers that read the same activations (a transformer's q/k/v projections, gate/up)
  share one product H^T (H [Q_a Q_b Q_c]): the columns of a product do not interact,
  so each block is the layer's own H^T H Q_j, computed in one matmul pair instead of
  three.

  Args:
    hs: distinct float32 (N, d_in) activations.
    owner: owner[j], the index in `hs` of layer j's activations.
    omegas: (L, d_in, r) starting blocks.
    num_iters: q >= 1.
    rel_tol: see `power_iteration_basis`.

  Returns:
    (L, d_in, r): the bases, with columns below rel_tol zeroed.
  """
  members = [[j for j, o in enumerate(owner) if o == u] for u in range(len(hs))]
  q = list(omegas)
  for _ in range(num_iters):
    for h, js in zip(hs, members):
      prod = h.T @ (h @ jnp.concatenate([q[j] for j in js], axis=1))
      for j, block in zip(js, jnp.split(prod, len(js), axis=1)):
        q[j] = block
    # One QR per layer: with one batched jnp.linalg.qr over the group, the compiled
    # bases hung in every try on the CPU backend (jax 0.10.2, 18+ blocks of 128 x 16).
    q, upper = map(list, zip(*[jnp.linalg.qr(block) for block in q]))
  q, upper = jnp.stack(q), jnp.stack(upper)
  # When rank(H) < r, QR completes the basis with directions outside the row space;
  # their |R_jj| is at rounding level, so those columns are zeroed (dropped).
  diag = jnp.abs(jnp.diagonal(upper, axis1=-2, axis2=-1))
  keep = diag > rel_tol * jnp.max(diag, axis=-1, keepdims=True)
  return q * keep[:, None, :].astype(q.dtype)


def _path_of(key_path) -> Path:
  return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in key_path)


def activation_bases(params: Any, taps: Any, key: jax.Array, *, rank: int,
                     num_iters: int = 2, untapped: str = "error") -> dict[Path, jax.Array]:
  """{path of each tapped linear layer: A (d_in, r')} from its input activations.

      A_path = power_iteration_basis(taps[path]["input"], rank, fold_in(key, i))

  for the i-th linear layer of `taps.linear_paths(params)`.

  Args:
    params: the parameter pytree (linear layers hold a 2-D "kernel").
    taps: the "taps" collection (`common.models.taps`): taps[path]["input"] is
      the input of params[path]["kernel"].
    key: the power iterations' starting blocks.
    rank: r.
    num_iters: power iterations q.
    untapped: "error" (default): a linear layer without a tap (or params without
      any linear layer) raises; "isotropic": such layers are left out of the
      bases, so `agzo_direction` gives them isotropic Gaussian noise.

  Returns:
    {path: A}.

  Raises:
    ValueError: an untapped linear layer (untapped="error"), or a tap whose last
    axis is not the kernel's d_in. Both are structural, found when tracing.

  Example:
      >>> params = {"lin": {"kernel": jnp.zeros((16, 7))}}
      >>> taps = {"lin": {"input": jnp.ones((40, 16))}}
      >>> activation_bases(params, taps, jax.random.PRNGKey(0), rank=3)[("lin",)].shape
      (16, 3)
  """
  _check_untapped("activation_bases", untapped)
  paths = taps_lib.linear_paths(params)
  if not paths and untapped == "error":
    raise ValueError("AGZO: params have no linear layer (no dict holding a 2-D 'kernel'), "
                     "so there is nothing to guide; pass untapped='isotropic' to run it as "
                     "MeZO")
  groups, missing = {}, []
  for i, path in enumerate(paths):
    h = taps_lib.tapped_input(taps, path)
    if h is None:
      missing.append("/".join(path) or "<root>")
      continue
    d_in = _kernel_at(params, path).shape[0]
    if getattr(h, "ndim", 0) < 1 or h.shape[-1] != d_in:
      raise ValueError(f"AGZO: taps[{']['.join(path)}]['input'] has shape "
                       f"{getattr(h, 'shape', None)}; expected (..., {d_in}), the kernel's d_in")
    n = math.prod(h.shape[:-1])
    groups.setdefault((d_in, min(rank, n, d_in)), []).append((i, path, h))
  if missing and untapped == "error":
    raise ValueError(f"AGZO: no tap recorded for {len(missing)} of {len(paths)} linear layers "
                     f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}); "
                     "taps[path]['input'] must hold each kernel's input: build the model with "
                     "common.models.TappedDense, run it with common.models.apply_with_taps, "
                     "or pass untapped='isotropic' to give those kernels isotropic noise")
  bases = {}
  for (d_in, r), layers in groups.items():
    bases.update(_group_bases(layers, d_in, r, key, num_iters))
  return bases


def _group_bases(layers: list, d_in: int, r: int, key: jax.Array,
                 num_iters: int) -> dict[Path, jax.Array]:
  """{path: A} of layers [(i, path, h)] with equal (d_in, r'), in one batched iteration.

  Omega_i ~ N(0, 1)^{d_in x r'} from fold_in(key, i), drawn for the whole group by one
  vmapped call (the same numbers as one call per layer); layers whose taps are the
  same array (the same traced value) share its matmuls (`_subspace_iteration`).
  """
  hs, owner, index = [], [], {}
  for _, _, h in layers:
    if id(h) not in index:
      index[id(h)] = len(hs)
      hs.append(h)
    owner.append(index[id(h)])
  keys = jnp.stack([jax.random.fold_in(key, i) for i, _, _ in layers])
  omegas = jax.vmap(lambda k: jax.random.normal(k, (d_in, r), jnp.float32))(keys)
  q = _subspace_iteration([_token_rows(h) for h in hs], owner, omegas, num_iters, 1e-4)
  return {path: q[j] for j, (_, path, _) in enumerate(layers)}


def _kernel_at(params: Any, path: Path) -> jax.Array:
  node = params
  for name in path:
    node = node[name]
  return node["kernel"]


def _basis_of(key_path, leaf, bases: dict[Path, jax.Array]) -> jax.Array | None:
  """A of the kernel at `key_path`, or None for any other leaf."""
  path = _path_of(key_path)
  if path and path[-1] == "kernel" and leaf.ndim == 2:
    return bases.get(path[:-1])
  return None


def agzo_direction(params: Any, bases: dict[Path, jax.Array], key: jax.Array) -> Any:
  """Delta = A R^T (R ~ N(0, 1)^{d_out x r'}) for kernels with a basis, z ~ N(0, I)
  for every other leaf (leaf i drawn from fold_in(key, i)).

  Args:
    params: the pytree whose structure, shapes and dtypes Delta takes.
    bases: {path: A} from `activation_bases`.
    key: a PRNG key.

  Returns:
    Delta, a pytree like `params`.

  Example:
      >>> delta = agzo_direction(params, bases, jax.random.PRNGKey(1))
  """
  keys = jax.tree.leaves(perturbation.leaf_keys(params, key))
  flat, treedef = jax.tree_util.tree_flatten_with_path(params)
  groups = {}  # leaves of one shape, dtype and basis width draw together
  for j, (key_path, p) in enumerate(flat):
    a = _basis_of(key_path, p, bases)
    groups.setdefault((p.shape, p.dtype, None if a is None else a.shape[1]), []).append((j, a))
  out = [None] * len(flat)
  for (shape, dtype, r), leaves in groups.items():
    draw_shape = shape if r is None else (shape[1], r)
    draws = jax.vmap(lambda k, s=draw_shape, t=(dtype if r is None else jnp.float32):
                     jax.random.normal(k, s, t))(jnp.stack([keys[j] for j, _ in leaves]))
    if r is not None:  # Delta_j = A_j R_j^T for the group in one batched matmul
      draws = jnp.einsum("lir,lor->lio", jnp.stack([a for _, a in leaves]),
                         draws).astype(dtype)
    for (j, _), draw in zip(leaves, draws):
      out[j] = draw
  return jax.tree.unflatten(treedef, out)


def subspace_dimension(params: Any, bases: dict[Path, jax.Array]) -> int:
  """k = sum over guided kernels of (non-zero columns of A) * d_out, plus the size of
  every other leaf: the dimension AGZO's perturbations span.

  Args:
    params: the parameter pytree.
    bases: {path: A}, concrete (call this outside jit).

  Returns:
    k, a Python int.

  Example:
      >>> subspace_dimension(params, bases)   # r' * d_out + (other sizes)
  """
  total = 0
  for key_path, p in jax.tree_util.tree_flatten_with_path(params)[0]:
    a = _basis_of(key_path, p, bases)
    total += p.size if a is None else int(jnp.sum(jnp.any(a != 0, axis=0))) * p.shape[1]
  return int(total)


def project(grads: Any, bases: dict[Path, jax.Array]) -> Any:
  """P g: A A^T g for guided kernels (in our (in, out) layout), g elsewhere.

  Args:
    grads: a pytree like the params.
    bases: {path: A} from `activation_bases`.

  Returns:
    P g, a pytree like `grads`.

  Example:
      >>> ratio = optax.tree.norm(project(g, bases)) / optax.tree.norm(g)
  """
  flat, treedef = jax.tree_util.tree_flatten_with_path(grads)
  out = []
  for key_path, g in flat:
    a = _basis_of(key_path, g, bases)
    out.append(g if a is None else (a @ (a.T @ g.astype(jnp.float32))).astype(g.dtype))
  return jax.tree.unflatten(treedef, out)


def agzo_gradient(loss_and_taps_fn: Callable[[Any, Any], tuple[jax.Array, Any]],
                  params: Any, batch: Any, key: jax.Array, step, *, eps: float = 1e-3,
                  rank: int = 4, num_iters: int = 2, two_sided: bool = False,
                  untapped: str = "error") -> perturbation.ZOEstimate:
  """One AGZO estimate.

      L0, taps = loss_and_taps_fn(theta, B)
      A_l = power_iteration_basis(taps[l]["input"], r)        per linear layer l
      Delta = A_l R_l^T  (linear kernels),  z ~ N(0, I)  (other leaves)
      c = (L(theta + eps Delta) - L0) / eps    (or two-sided),    g_hat = c Delta

  Args:
    loss_and_taps_fn: (params, batch) -> (loss, taps), e.g.
      `common.models.apply_with_taps` under a loss; the perturbed passes discard
      the taps.
    params: theta.
    batch: the minibatch.
    key: the run's base key; Delta comes from fold_in(key, step), the power
      iterations start from a separate stream of the same step.
    step: the step index.
    eps: perturbation size.
    rank: r.
    num_iters: power iterations q.
    two_sided: (L+ - L-) / (2 eps) (3 forward passes) instead of (L+ - L0) / eps (2).
    untapped: "error" (default) or "isotropic" (see `activation_bases`).

  Returns:
    `ZOEstimate`; num_forward counts the unperturbed pass.

  Example:
      >>> est = agzo_gradient(loss_and_taps, params, batch, jax.random.PRNGKey(0), 0,
      ...                     rank=4)
  """
  step_key = jax.random.fold_in(key, step)
  base_loss, taps = loss_and_taps_fn(params, batch)
  bases = activation_bases(params, taps, jax.random.fold_in(step_key, _SKETCH_STREAM),
                           rank=rank, num_iters=num_iters, untapped=untapped)
  sample = lambda: agzo_direction(params, bases, step_key)
  loss_fn = lambda p, b: loss_and_taps_fn(p, b)[0]
  return perturbation.finite_difference(loss_fn, params, batch, sample, eps,
                                        two_sided=two_sided, base_loss=base_loss,
                                        base_forward=1)


def agzo(loss_and_taps_fn: Callable[[Any, Any], tuple[jax.Array, Any]], eps: float = 1e-3,
         *, key: jax.Array, rank: int = 4, num_iters: int = 2, two_sided: bool = False,
         untapped: str = "error") -> optax.GradientTransformationExtraArgs:
  """AGZO's estimator as the head of an optax chain.

      g_hat_t = c_t Delta_t,  Delta_t = A_l R_l^T per linear layer l (A_l from the
      layer's inputs on B_t), c_t = (L(theta + eps Delta_t; B_t) - L(theta; B_t)) / eps

  Args:
    loss_and_taps_fn: (params, batch) -> (loss, taps), where taps[path]["input"] is
      the input of params[path]["kernel"] (`common.models.taps`), e.g.

          def loss_and_taps(params, batch):
            logits, taps = apply_with_taps(model, {"params": params}, batch["x"])
            return xent(logits, batch["y"]), taps

    eps: perturbation size (> 0).
    key: the run's base PRNG key (kept in `ZOState`).
    rank: r >= 1 of each layer's activation basis.
    num_iters: power iterations q >= 1.
    two_sided: central difference (3 forward passes) instead of one-sided (2).
    untapped: "error" (default): a linear kernel whose input is not in the taps
      raises when the step is traced; "isotropic": such kernels get isotropic
      Gaussian noise (AGZO is then MeZO on them).

  Returns:
    An `optax.GradientTransformationExtraArgs`; `update(updates, state, params,
    batch=batch)` returns g_hat.

  Example:
      >>> tx = optax.chain(agzo(loss_and_taps, 1e-3, key=jax.random.PRNGKey(0), rank=4),
      ...                  optax.sgd(1e-3))
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state, params, batch=batch)

  References:
    Activation-Guided Zeroth-Order optimization (AGZO), ICML 2026.
  """
  perturbation.check_eps("agzo", eps)
  perturbation.check_positive_int("agzo", rank=rank, num_iters=num_iters)
  _check_untapped("agzo", untapped)
  return transform.zeroth_order(
      functools.partial(agzo_gradient, loss_and_taps_fn, eps=eps, rank=rank,
                        num_iters=num_iters, two_sided=two_sided, untapped=untapped), key=key)
