"""FGR's training step and its baselines' steps, as pure jitted functions.

FGR's update needs two gradients of one forward pass (the main loss on the mixed batch
and SoftBinnedECE on its clean images) and the optax chain of the paper's code,

    g_m, g_c = grad L_main(theta; x~, y),  grad L_cal(theta; x~[clean], y[clean])
    g        = rectify(g_m, a g_c)          (a = 1 from the FGR start epoch, else 0)
    theta   <- SGD_momentum(clip_2(g) + wd theta; lr(step)),

so it does not fit the one-gradient `common.train` step; here one epoch (a shuffled
pass over the training set in minibatches) is one `lax.scan` inside one `jit`, and
the caller owns the loop over epochs, the checkpoints and the evaluation. With a = 0
the projection never fires (g_c = 0 is skipped), so warm-up and FGR epochs share one
compiled program. Every method (`METHODS`) is a `MethodSpec`: its loss, whether it
trains on low-pass views, and its rectifier ("none", "fgr", "pcgrad").

Example:
    >>> from common.models.classifier import SmallCNN
    >>> x = jax.random.uniform(jax.random.PRNGKey(0), (64, 8, 8, 1))
    >>> y = jnp.arange(64) % 10
    >>> net = SmallCNN()
    >>> spec = SPECS["fgr"]
    >>> tx = make_optimizer(spec, learning_rate=0.1, boundaries=(100,))
    >>> loss_fn = make_loss_fn(net.apply, spec, num_classes=10)
    >>> epoch = make_epoch_fn(loss_fn, tx, spec, batch_size=32)
    >>> state = init_state(jax.random.PRNGKey(0), lambda k: net.init(k, x[:1]), tx)
    >>> views, clean = epoch_views(jax.random.PRNGKey(2), x, spec, rho=0.05, active=True)
    >>> state, metrics = epoch(state, views, y, clean, jax.random.PRNGKey(1), 1.0)
    >>> sorted(metrics)
    ['calibration', 'conflict', 'loss']
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax

from common.train import TrainState
from methods.fgr import filters, losses, rectify

Array = jax.Array

METHODS = ("ce", "focal", "dfl", "label_smoothing", "mixup", "pcgrad", "filter_only",
           "projection_only", "fgr")
RECTIFIERS = ("none", "fgr", "pcgrad")


class MethodSpec(NamedTuple):
  """What a method changes in the step.

  Attributes:
    loss: "cross_entropy", "focal", "dual_focal", "label_smoothing" or "mixup".
    views: train on low-pass views of a fraction rho of the images (from the FGR start).
    rectifier: "none", "fgr" (one-sided projection) or "pcgrad" (symmetric + sum).
  """
  loss: str
  views: bool
  rectifier: str


SPECS = {
    "ce": MethodSpec("cross_entropy", False, "none"),
    "focal": MethodSpec("focal", False, "none"),
    "dfl": MethodSpec("dual_focal", False, "none"),
    "label_smoothing": MethodSpec("label_smoothing", False, "none"),
    "mixup": MethodSpec("mixup", False, "none"),
    "pcgrad": MethodSpec("dual_focal", True, "pcgrad"),
    "filter_only": MethodSpec("dual_focal", True, "none"),
    "projection_only": MethodSpec("dual_focal", False, "fgr"),
    "fgr": MethodSpec("dual_focal", True, "fgr"),
}


def make_optimizer(spec: MethodSpec, *, learning_rate: float, boundaries: Sequence[int] = (),
                   decay: float = 0.1, momentum: float = 0.9, weight_decay: float = 5e-4,
                   clip_norm: float = 2.0, scope: str = "head", per_layer: bool = False
                   ) -> optax.GradientTransformationExtraArgs:
  """The paper code's optimizer with the method's rectifier in front:

      chain(rectify, clip_by_global_norm(2), add_decayed_weights(wd), sgd(lr(t), 0.9)),
      lr(t) = learning_rate * decay^(number of boundaries <= t)   (t in steps).

  Clipping applies to every method, as in the code; the rectifier gets g_c through
  `update(..., constraint_grads=g_c)`.
  """
  if spec.rectifier not in RECTIFIERS:
    raise ValueError(f"rectifier={spec.rectifier!r}; expected one of {RECTIFIERS}")
  schedule = optax.piecewise_constant_schedule(
      learning_rate, {int(b): decay for b in boundaries})
  head = (optax.identity() if spec.rectifier == "none" else
          rectify.fgr_rectify(scope=scope, per_layer=per_layer, method=spec.rectifier))
  return optax.chain(head, optax.clip_by_global_norm(clip_norm),
                     optax.add_decayed_weights(weight_decay),
                     optax.sgd(schedule, momentum=momentum))


def make_loss_fn(apply_fn: Callable, spec: MethodSpec, num_classes: int, *,
                 focal_gamma: float = 3.0, dfl_gamma: float = 5.0, smoothing: float = 0.05,
                 mixup_alpha: float = 0.2) -> Callable:
  """`(params, images, labels, clean, key) -> (L_main, L_cal)` from one forward pass.

  L_main: the method's loss on the (mixed) batch; L_cal: SoftBinnedECE on the rows
  with clean = 1 (15 bins, T = 0.1, p = 2). Mixup mixes the batch first (L_cal is then
  of the mixed batch, and only logged).
  """
  kwargs = {"focal": dict(gamma=focal_gamma), "dual_focal": dict(gamma=dfl_gamma),
            "label_smoothing": dict(alpha=smoothing), "cross_entropy": {}}

  def loss_fn(params, images, labels, clean, key):
    if spec.loss == "mixup":
      images, targets = losses.mixup(key, images, labels, num_classes, alpha=mixup_alpha)
      logits = apply_fn(params, images)
      main = losses.soft_cross_entropy(logits, targets)
    else:
      logits = apply_fn(params, images)
      main = losses.classification_loss(spec.loss, logits, labels, **kwargs[spec.loss])
    return main, losses.soft_binned_ece(logits, labels, weights=clean)

  return loss_fn


def init_state(key: Array, init_fn: Callable[[Array], Any],
               tx: optax.GradientTransformation) -> TrainState:
  """TrainState(step=0, params=init_fn(key), opt_state=tx.init(params))."""
  params = init_fn(key)
  return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))


def make_step(loss_fn: Callable, tx: optax.GradientTransformationExtraArgs,
              spec: MethodSpec) -> Callable:
  """One update `(state, (images, labels, clean), key, active) -> (state, metrics)`.

  metrics: loss (main), calibration (L_cal of the batch), conflict (1 where the
  rectifier projected: <g_m, g_c> < 0 with a g_c != 0; 0 for rectifier "none").
  """
  def step(state: TrainState, batch, key, active):
    images, labels, clean = batch
    if spec.rectifier == "none":
      (main, cal), g_m = jax.value_and_grad(
          lambda p: loss_fn(p, images, labels, clean, key), has_aux=True)(state.params)
      updates, opt_state = tx.update(g_m, state.opt_state, state.params)
      conflict = jnp.zeros((), jnp.float32)
    else:
      (main, cal), g_m, g_c = rectify.value_and_two_grads(
          loss_fn, state.params, images, labels, clean, key)
      g_c = jax.tree.map(lambda g: g * jnp.asarray(active, g.dtype), g_c)
      updates, opt_state = tx.update(g_m, state.opt_state, state.params,
                                     constraint_grads=g_c)
      conflict = opt_state[0].conflict
    params = optax.apply_updates(state.params, updates)
    return (TrainState(state.step + 1, params, opt_state),
            dict(loss=main, calibration=cal, conflict=conflict))

  return step


def make_epoch_fn(loss_fn: Callable, tx: optax.GradientTransformationExtraArgs,
                  spec: MethodSpec, batch_size: int) -> Callable:
  """A jitted epoch `(state, images, labels, clean, key, active) -> (state, metrics)`:
  floor(N / batch_size) updates over a permutation drawn from `key` (the last partial
  batch is dropped), metrics averaged over them.

  Args:
    images: (N, H, W, C) the epoch's training images (low-pass views included).
    labels: (N,) int classes.
    clean: (N,) 1.0 for the images that were not filtered (the constraint's rows).
    active: 1.0 from the FGR start epoch on (the constraint gradient counts), else 0.0.
  """
  step = make_step(loss_fn, tx, spec)

  @jax.jit
  def epoch(state, images, labels, clean, key, active):
    n = images.shape[0]
    num_batches = n // batch_size
    if num_batches < 1:
      raise ValueError(f"{n} training images make no batch of {batch_size}")
    k_perm, k_steps = jax.random.split(key)
    order = jax.random.permutation(k_perm, n)[:num_batches * batch_size]
    order = order.reshape(num_batches, batch_size)

    def body(state, xs):
      idx, i = xs
      batch = (images[idx], labels[idx], clean[idx])
      return step(state, batch, jax.random.fold_in(k_steps, i), active)

    state, metrics = jax.lax.scan(body, state, (order, jnp.arange(num_batches)))
    return state, jax.tree.map(jnp.mean, metrics)

  return epoch


def epoch_views(key: Array, images: Array, spec: MethodSpec, rho: float, active: bool,
                filter_fn: filters.FilterFn | None = None) -> tuple[Array, Array]:
  """The epoch's training images and clean weights: for a method with views and an
  active FGR phase, int(N rho) images drawn without replacement (redrawn every epoch,
  as the paper's `reset_corruption_selection`) replaced by `filter_fn` views.

  Returns:
    (images (N, H, W, C), clean (N,) float: 0.0 for the filtered images).
  """
  n = images.shape[0]
  if not (spec.views and active) or int(n * rho) == 0:
    return images, jnp.ones((n,), images.dtype)
  k_pick, k_filter = jax.random.split(key)
  selected = filters.epoch_selection(k_pick, n, rho)
  # Filter only the selected images (int(N rho) of them), not the whole set.
  idx = jnp.flatnonzero(selected, size=int(n * rho))
  filter_fn = filters.make_filter() if filter_fn is None else filter_fn
  images = images.at[idx].set(filter_fn(k_filter, images[idx]))
  return images, (~selected).astype(images.dtype)
