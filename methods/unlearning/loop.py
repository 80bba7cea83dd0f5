"""Stage fits by an optimizer, for models Newton cannot fit: on the shared training loop
(`common.train`), or as one compiled scan (the retrain oracle at its fastest).

A stage of (1) is trained by full-batch gradient steps of an optax optimizer from the
anchor:

    theta_0 = a,   theta_{s+1} = optimizer update of grad L_t(theta_s; a, D_t),
    s < train_config.num_steps,

with a frozen (stop_gradient, `optax.set_to_zero`) copy of the anchor in the loop's
parameters, params = {"theta": theta, "anchor": a}, so the loop's loss is a function of
(params, batch) alone. The fitter returned by `loop_stage_fitter` is a `fit_stage` for
`continual.train_sequence` and `baselines.retrain`. It builds its loss function and
optimizer once, so every stage reuses the loop's compiled step.

Each stage trains in its own directory under `root`: named by a hash of (anchor, task),
so a rerun resumes from the stage's checkpoint, or, from `.fresh()`, a new temporary
directory that is deleted afterwards (for a timed retrain that must not reuse anything).
The checkpoints and metrics are the loop's I/O; the functions here only choose where.

`scan_stage_fitter` runs the same steps as one jitted `lax.scan` on device-resident
data: no host transfer, log or checkpoint between steps (nothing to resume from), so a
timed retrain measures the optimizer's arithmetic alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import tempfile
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from common import train as train_lib
from methods.unlearning.objective import Objective, Task, stage_loss


def stage_loss_fn(obj: Objective, params, batch, key):
  """The loop's loss: (L_t(theta; stop_gradient(a), D), {}) for params {"theta", "anchor"}.

  Args:
    obj: the objective (1) (bind it with functools.partial).
    params: {"theta": theta, "anchor": a}.
    batch: {"x", "y", "w"} arrays of one task.
    key: unused (the loop's per-step key).

  Returns:
    (scalar loss, empty metrics).

  Example:
    >>> loss_fn = functools.partial(stage_loss_fn, obj)
  """
  del key
  task = Task(batch["x"], batch["y"], batch["w"])
  anchor = jax.lax.stop_gradient(params["anchor"])
  return stage_loss(obj, params["theta"], anchor, task), {}


def anchored(optimizer: optax.GradientTransformation) -> optax.GradientTransformation:
  """`optimizer` on params["theta"], and no update of the frozen params["anchor"].

  Args:
    optimizer: the optimizer of theta.

  Returns:
    An `optax.multi_transform` over {"theta", "anchor"}.

  Example:
    >>> opt = anchored(optax.adam(1e-2))
  """
  label = lambda p: {"theta": jax.tree.map(lambda _: "theta", p["theta"]),
                     "anchor": jax.tree.map(lambda _: "anchor", p["anchor"])}
  return optax.multi_transform({"theta": optimizer, "anchor": optax.set_to_zero()}, label)


@dataclasses.dataclass(frozen=True)
class LoopStageFitter:
  """fit_stage(anchor, task) -> theta on `common.train` (see `loop_stage_fitter`)."""
  loss_fn: Callable
  optimizer: optax.GradientTransformation
  train_config: Any
  root: str
  fresh_workdirs: bool = False

  def fresh(self) -> "LoopStageFitter":
    """The same fitter (and compiled step), training every stage in a new temporary
    directory under `root` that is deleted afterwards."""
    return dataclasses.replace(self, fresh_workdirs=True)

  def workdir(self, anchor, batch) -> str:
    """`root/<hash of (anchor, batch)>`: the same stage always trains in the same place."""
    digest = hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes() for a in (
        ravel_pytree(anchor)[0], *batch.values()))).hexdigest()[:16]
    return os.path.join(self.root, digest)

  def __call__(self, anchor, task: Task):
    batch = {"x": np.asarray(task.x), "y": np.asarray(task.y), "w": np.asarray(task.w)}
    config = {**dict(self.train_config.items()), "batch_size": int(task.x.shape[0])}
    if self.fresh_workdirs:
      os.makedirs(self.root, exist_ok=True)
      workdir = tempfile.mkdtemp(prefix="fresh-", dir=self.root)
    else:
      workdir = self.workdir(anchor, batch)
    try:
      result = train_lib.train(
          init_fn=lambda key: {"theta": anchor, "anchor": anchor}, loss_fn=self.loss_fn,
          batch_fn=lambda seed, step: batch, optimizer=self.optimizer, config=config,
          workdir=workdir)
      return jax.tree.map(jnp.asarray, result.state.params["theta"])
    finally:
      if self.fresh_workdirs:
        shutil.rmtree(workdir, ignore_errors=True)


def loop_stage_fitter(obj: Objective, optimizer: optax.GradientTransformation,
                      train_config, root: str) -> LoopStageFitter:
  """A fit_stage that runs `train_config.num_steps` full-batch steps of `optimizer` on (1).

  Args:
    obj: the objective (1).
    optimizer: the optax optimizer of theta (e.g. `optax.adam(1e-2)`).
    train_config: the loop's settings (`common.train.default_train_config()`); its
      batch_size is replaced by the task's size (full batch).
    root: the folder of the stages' workdirs.

  Returns:
    A `LoopStageFitter`, called as fit(anchor, task) -> theta.

  Example:
    >>> fit = loop_stage_fitter(obj, optax.adam(1e-2), config.train, "/tmp/stages")
    >>> anchors = continual.train_sequence(fit, init, tasks)
    >>> target = baselines.retrain(fit.fresh(), anchors, forget_task(tasks, 0), 0)
  """
  return LoopStageFitter(loss_fn=functools.partial(stage_loss_fn, obj),
                         optimizer=anchored(optimizer), train_config=train_config, root=root)


def _scan_fit(obj: Objective, optimizer: optax.GradientTransformation, num_steps: int,
              anchor, task: Task):
  """theta after `num_steps` full-batch steps of `optimizer` on L(. ; anchor, task)."""
  def step(carry, _):
    theta, opt_state = carry
    grad = jax.grad(stage_loss, argnums=1)(obj, theta, anchor, task)
    updates, opt_state = optimizer.update(grad, opt_state, theta)
    return (optax.apply_updates(theta, updates), opt_state), None

  (theta, _), _ = jax.lax.scan(step, (anchor, optimizer.init(anchor)), None,
                               length=num_steps)
  return theta


def scan_stage_fitter(obj: Objective, optimizer: optax.GradientTransformation,
                      num_steps: int) -> Callable[[Any, Task], Any]:
  """A fit_stage running `num_steps` full-batch steps of `optimizer` on (1) in one jit.

      theta_0 = a,   theta_{s+1} = optimizer update of grad L_t(theta_s; a, D_t)

  as `loop_stage_fitter` computes it, as a `lax.scan` compiled once per (task shape,
  dtype): the retrain oracle with no per-step host transfer, log or checkpoint write.

  Args:
    obj: the objective (1).
    optimizer: the optax optimizer of theta.
    num_steps: steps per stage (>= 1).

  Returns:
    fit(anchor, task) -> theta, a jitted function.

  Raises:
    ValueError: num_steps < 1.

  Example:
    >>> fit = scan_stage_fitter(obj, optax.adam(1e-2), 1500)
    >>> target = baselines.retrain(fit, anchors, forget_task(tasks, 0), 0)
  """
  if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
    raise ValueError(f"scan_stage_fitter: num_steps={num_steps!r}; expected an int >= 1")
  return jax.jit(functools.partial(_scan_fit, obj, optimizer, num_steps))
