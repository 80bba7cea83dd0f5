"""Prompt-style fine-tuning of an LM classifier: the task, the trainable subset, the loss.

The downstream task of the experiment: is a window of the stdlib corpus English (a
pydoc topic) or Python (module source)? Windows come from the LM's own document
split (`common.data.text`). The label y in {0, 1} is read from the LM's next-byte
logits of two verbaliser bytes v_0, v_1 at the window's last position,

    z = (logit_T[v_0], logit_T[v_1]),     L = -(1/B) sum_b log softmax(z_b)[y_b],

as in MeZO's prompt-based fine-tuning. Which parameters are tuned is a split of
the LM's parameter tree into (trainable, frozen); the trainable part keeps the
linear layers' paths, so their taps still line up for AGZO.

Example:
    >>> task = make_task(0.1)
    >>> batch = task_batch(task.train, seed=0, step=0, batch_size=8, window=32)
    >>> params, frozen = split_trainable(trained.params, "linear")
    >>> losses = verbaliser_losses(trained.model, [ord("E"), ord("C")])
    >>> losses.loss_fn(params, {**batch, "frozen": frozen})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common.data import text
from common.models import taps as taps_lib


class Task(NamedTuple):
  """Byte arrays of each class (0 = English, 1 = code), per split."""
  train: tuple[np.ndarray, np.ndarray]
  validation: tuple[np.ndarray, np.ndarray]


def make_task(validation_fraction: float) -> Task:
  """English vs code, split by document exactly as the LM's corpus is.

  Args:
    validation_fraction: the LM's `validation_fraction` (same document split).

  Returns:
    The `Task`: per split, the joined bytes of the pydoc topics and of the modules.
  """
  train_docs, val_docs = text.split_documents(text.stdlib_documents(), validation_fraction)

  def encode(docs, kind):
    joined = text.DOCUMENT_SEPARATOR.join(d.text for d in docs if d.name.startswith(kind))
    return np.frombuffer(joined.encode("utf-8"), np.uint8).astype(np.int32)

  return Task((encode(train_docs, "topic:"), encode(train_docs, "module:")),
              (encode(val_docs, "topic:"), encode(val_docs, "module:")))


def task_batch(split: tuple[np.ndarray, np.ndarray], seed: int, step: int, batch_size: int,
               window: int) -> dict[str, np.ndarray]:
  """{"tokens": (B, window) int32, "labels": (B,) int32}: a pure function of (seed, step).

  Each row picks a class uniformly, then a uniform window of that class's bytes.
  """
  shortest = min(len(data) for data in split)
  if not 1 <= window < shortest:
    raise ValueError(f"task_batch: window={window!r}; expected 1 <= window < {shortest}, the "
                     "shorter class's length")
  rng = np.random.default_rng((seed, step))
  labels = rng.integers(0, 2, size=batch_size)
  tokens = np.empty((batch_size, window), np.int32)
  for i, y in enumerate(labels):
    data = split[y]
    start = rng.integers(0, len(data) - window)
    tokens[i] = data[start:start + window]
  return {"tokens": tokens, "labels": labels.astype(np.int32)}


def split_trainable(params: Any, mode: str) -> tuple[Any, Any]:
  """(trainable, frozen) parameter trees.

  Args:
    params: the LM's parameters.
    mode: "all" tunes everything (frozen = {}); "linear" tunes only the linear
      layers' kernels, at their usual paths (so taps still line up).

  Returns:
    (trainable, frozen); `merge(frozen, trainable)` gives the full tree back.
  """
  if mode not in ("all", "linear"):
    raise ValueError(f"split_trainable: mode={mode!r}; expected 'all' or 'linear'")
  if mode == "all":
    return params, {}
  trainable = {}
  for path in taps_lib.linear_paths(params):
    node, src = trainable, params
    for p in path:
      node, src = node.setdefault(p, {}), src[p]
    node["kernel"] = src["kernel"]
  return trainable, params


def merge(frozen: Any, trainable: Any) -> Any:
  """`frozen` with the leaves of `trainable` substituted at their paths."""
  if not isinstance(trainable, dict) or not isinstance(frozen, dict):
    return trainable
  out = dict(frozen)
  for k, v in trainable.items():
    out[k] = merge(frozen.get(k, {}), v)
  return out


class ClassifierLosses(NamedTuple):
  """The verbaliser classifier, as functions of (trainable params, batch) where the
  batch holds "tokens", "labels" and the "frozen" parameters.

  Attributes:
    loss_fn: (params, batch) -> mean cross-entropy L.
    loss_and_taps: (params, batch) -> (L, taps) (AGZO's input).
    accuracy: (params, batch) -> (accuracy, mean cross-entropy, its standard error).
  """
  loss_fn: Callable[[Any, Any], jax.Array]
  loss_and_taps: Callable[[Any, Any], tuple[jax.Array, Any]]
  accuracy: Callable[[Any, Any], tuple[jax.Array, jax.Array, jax.Array]]


def _per_example_xent(z: jax.Array, labels: jax.Array) -> jax.Array:
  return jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, labels[:, None], 1)[:, 0]


def verbaliser_losses(model, verbaliser_ids: Sequence[int]) -> ClassifierLosses:
  """The classifier z = logits[:, -1, verbaliser_ids] of a `Transformer` and its losses.

      L = mean_b [logsumexp(z_b) - z_b[y_b]]

  Args:
    model: a `common.models.Transformer` (its linear layers record their taps).
    verbaliser_ids: the token ids read as class 0, 1, ...

  Returns:
    `ClassifierLosses`.
  """
  ids = np.asarray(verbaliser_ids)
  vocab = model.config.vocab_size
  if ids.ndim != 1 or len(set(ids.tolist())) != len(ids) or len(ids) < 2:
    raise ValueError(f"verbaliser_ids={list(np.ravel(ids))}; expected at least two distinct "
                     "token ids, one per class")
  if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= vocab:
    raise ValueError(f"verbaliser_ids={ids.tolist()}; expected integer ids in [0, {vocab})")
  verb = jnp.asarray(ids, jnp.int32)

  def class_logits(logits):
    return logits[:, -1, :][:, verb]

  def full(params, batch):
    return {"params": merge(batch["frozen"], params)}

  def loss_and_taps(params, batch):
    logits, state = model.apply(full(params, batch), batch["tokens"], mutable=[taps_lib.TAPS])
    return jnp.mean(_per_example_xent(class_logits(logits), batch["labels"])), state[taps_lib.TAPS]

  def loss_fn(params, batch):
    z = class_logits(model.apply(full(params, batch), batch["tokens"]))
    return jnp.mean(_per_example_xent(z, batch["labels"]))

  def accuracy(params, batch):
    z = class_logits(model.apply(full(params, batch), batch["tokens"]))
    labels = batch["labels"]
    per = _per_example_xent(z, labels)
    acc = jnp.mean((jnp.argmax(z, -1) == labels).astype(jnp.float32))
    return acc, jnp.mean(per), jnp.std(per) / jnp.sqrt(per.shape[0])

  return ClassifierLosses(loss_fn, loss_and_taps, accuracy)


def with_frozen(fn: Callable, frozen: Any) -> Callable:
  """`fn(params, batch)` with batch["frozen"] = frozen bound: the form the common loop
  needs, whose batches hold only per-example arrays."""
  return lambda params, batch: fn(params, {**batch, "frozen": frozen})


def labelled_batch(split: tuple[np.ndarray, np.ndarray], seed: int, step: int,
                   batch_size: int, window: int, frozen: Any) -> dict[str, Any]:
  """`task_batch` as device arrays, with the frozen parameters under "frozen" (the
  batch `ClassifierLosses` functions take)."""
  batch = jax.tree.map(jnp.asarray, task_batch(split, seed, step, batch_size, window))
  return {**batch, "frozen": frozen}
