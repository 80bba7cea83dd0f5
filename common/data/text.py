"""A real English + code corpus that every Python installation ships, and LM batches over it.

English: the language-reference and library topics of `pydoc_data.topics` (the text
behind `help("if")`, `help("FORMATTING")`, ...). Code: the source of a fixed list of
standard-library modules (`STDLIB_MODULES`, located with importlib, never imported).
Documents are split into train/validation by name, deterministically: within each kind
(English, code) the documents whose names have the smallest CRC-32 go to validation
(`validation_fraction` of each kind, at least one), so the split does not depend on
the order files are listed in or on a random seed.

Batches are windows of `seq_len + 1` token ids at offsets drawn from the seed sequence
(seed, step), a pure function of (seed, step) as the common training loop requires.

Example:
    >>> corpus = stdlib_corpus()
    >>> batch = window_batch(corpus.train, seed=0, step=0, batch_size=4, seq_len=64)
    >>> batch["tokens"].shape
    (4, 65)
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from common.data.tokenizers import ByteTokenizer

STDLIB_MODULES = (
    "argparse", "bisect", "calendar", "csv", "dataclasses", "difflib", "enum",
    "fractions", "functools", "gettext", "heapq", "inspect", "ipaddress", "pprint",
    "queue", "random", "shlex", "shutil", "statistics", "string", "textwrap",
    "threading", "tokenize", "traceback", "uuid",
)
DOCUMENT_SEPARATOR = "\n\n"


class Document(NamedTuple):
  name: str  # "topic:<name>" or "module:<name>"
  text: str


class TextCorpus(NamedTuple):
  """Token ids of the concatenated train and validation documents.

  Attributes:
    train, validation: 1-D integer arrays of token ids.
    train_names, validation_names: the document names in each split, in order.
  """
  train: np.ndarray
  validation: np.ndarray
  train_names: tuple[str, ...]
  validation_names: tuple[str, ...]


def stdlib_documents(modules: tuple[str, ...] = STDLIB_MODULES) -> list[Document]:
  """The pydoc topics, then the named modules' sources; modules this Python lacks are
  skipped."""
  from pydoc_data import topics

  docs = [Document(f"topic:{name}", topics.topics[name]) for name in sorted(topics.topics)]
  for module in modules:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
      continue
    with open(spec.origin, encoding="utf-8") as f:
      docs.append(Document(f"module:{module}", f.read()))
  return docs


def split_documents(docs: list[Document], validation_fraction: float = 0.1
                    ) -> tuple[list[Document], list[Document]]:
  """(train, validation): per kind, the ceil(fraction * count) smallest-CRC-32 names
  go to validation."""
  if not 0.0 < validation_fraction < 1.0:
    raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction!r}")
  held = set()
  for kind in sorted({d.name.split(":", 1)[0] for d in docs}):
    names = sorted((d.name for d in docs if d.name.startswith(kind + ":")),
                   key=lambda n: (zlib.crc32(n.encode()), n))
    if len(names) < 2:
      continue
    held.update(names[:min(len(names) - 1, math.ceil(validation_fraction * len(names)))])
  return [d for d in docs if d.name not in held], [d for d in docs if d.name in held]


def stdlib_corpus(validation_fraction: float = 0.1, tokenizer=None) -> TextCorpus:
  """The standard-library corpus tokenized (bytes by default), split by document."""
  tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
  train, validation = split_documents(stdlib_documents(), validation_fraction)

  def encode(docs):
    text = DOCUMENT_SEPARATOR.join(d.text for d in docs)
    if isinstance(tokenizer, ByteTokenizer):
      return tokenizer.encode_array(text).astype(np.int32)
    return np.asarray(tokenizer.encode(text), dtype=np.int32)

  return TextCorpus(encode(train), encode(validation), tuple(d.name for d in train),
                    tuple(d.name for d in validation))


def _check_tokens(name: str, data) -> np.ndarray:
  """`data` as a 1-D integer array of token ids (float ids would be truncated)."""
  array = np.asarray(data)
  if array.ndim != 1:
    raise ValueError(f"{name} has shape {array.shape}; expected a 1-D array of token ids")
  if not np.issubdtype(array.dtype, np.integer):
    raise TypeError(f"{name} has dtype {array.dtype}; expected integer token ids")
  return array


def _check_positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f"{name}={value!r}; expected an int >= 1")


def window_batch(data: np.ndarray, seed: int, step: int, batch_size: int,
                 seq_len: int) -> dict[str, np.ndarray]:
  """{"tokens": (batch_size, seq_len + 1) int32} windows at uniform random offsets
  drawn from numpy's generator seeded with (seed, step)."""
  data = _check_tokens("data", data)
  _check_positive_int("batch_size", batch_size)
  _check_positive_int("seq_len", seq_len)
  if len(data) < seq_len + 2:
    raise ValueError(f"data of {len(data)} tokens is too short for seq_len={seq_len}")
  rng = np.random.default_rng((seed, step))
  starts = rng.integers(0, len(data) - seq_len - 1, size=batch_size)
  index = starts[:, None] + np.arange(seq_len + 1)[None, :]
  return {"tokens": np.asarray(data[index], dtype=np.int32)}


def eval_windows(data: np.ndarray, seq_len: int, batch_size: int,
                 max_windows: int | None = None) -> Iterator[np.ndarray]:
  """Consecutive non-overlapping (batch, seq_len + 1) windows covering `data` in order
  (the last partial batch dropped), at most `max_windows` of them."""
  data = _check_tokens("data", data)
  _check_positive_int("seq_len", seq_len)
  _check_positive_int("batch_size", batch_size)
  if max_windows is not None:
    _check_positive_int("max_windows", max_windows)
  count = (len(data) - 1) // seq_len
  if max_windows is not None:
    count = min(count, max_windows)
  count -= count % batch_size
  if count == 0:
    raise ValueError(f"data of {len(data)} tokens gives no full batch of {batch_size} "
                     f"windows of {seq_len}")
  for first in range(0, count, batch_size):
    starts = (first + np.arange(batch_size)) * seq_len
    yield np.asarray(data[starts[:, None] + np.arange(seq_len + 1)[None, :]], dtype=np.int32)


def unigram_cross_entropy_bits(train: np.ndarray, evaluate: np.ndarray,
                               vocab_size: int = 256) -> float:
  """Bits per token of `evaluate` under the add-one-smoothed unigram model of `train`:
  -mean log2 p(x), p(v) = (count_train(v) + 1) / (len(train) + V)."""
  train = _check_vocab("train", train, vocab_size)
  evaluate = _check_vocab("evaluate", evaluate, vocab_size)
  counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
  logp = np.log2(counts / counts.sum())
  return float(-np.mean(logp[evaluate]))


def unigram_entropy_bits(data: np.ndarray, vocab_size: int = 256) -> float:
  """Entropy in bits of the empirical unigram distribution of `data`."""
  data = _check_vocab("data", data, vocab_size)
  p = np.bincount(data, minlength=vocab_size).astype(np.float64)
  p = p[p > 0] / p.sum()
  return float(-np.sum(p * np.log2(p)))


def _check_vocab(name: str, data, vocab_size: int) -> np.ndarray:
  """Non-empty 1-D token ids in 0..vocab_size-1: an id past the vocabulary would
  silently grow it (and change the add-one smoothing), an empty array gives NaN."""
  _check_positive_int("vocab_size", vocab_size)
  data = _check_tokens(name, data)
  if data.size == 0:
    raise ValueError(f"{name} is empty; expected at least one token id")
  bad = np.flatnonzero((data < 0) | (data >= vocab_size))
  if bad.size:
    raise ValueError(f"{name}[{bad[0]}]={data[bad[0]]} is outside the vocabulary; "
                     f"expected ids in 0..{vocab_size - 1}")
  return data
