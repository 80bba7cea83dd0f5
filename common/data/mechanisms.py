"""A synthetic token stream that mixes known mechanisms, with the mechanism of every token.

Each sequence is generated left to right by a small state machine over a vocabulary of
`NUM_TEXT` text tokens plus bracket and trigger tokens (`vocab_size()`):

  bigram    (label 0) the next text token ~ a fixed sparse Markov chain P(. | previous
            text token): each text token has three successors with probabilities
            0.6 / 0.3 / 0.1 (the chain depends only on `NUM_TEXT`, not on the seed);
  induction (label 1) [A][B] ... [A] -> [B]: each sequence binds each of three copy
            triggers A to its own uniform random text token B; with probability
            `p_pair` a trigger is emitted, always followed by its B. The B after the
            second and later occurrences of A has label 1: only copying what followed
            A earlier in the context predicts it (the trigger/output task of Bietti
            et al. 2023, "Birth of a transformer: a memory viewpoint");
  bracket   (label 2) with probability `p_open` one of three openers "( [ {" is emitted
            (nesting depth <= 2); 2..8 positions later the closer matching the
            innermost open bracket is emitted; closers have label 2;
  ngram     (label 3) with probability `p_ngram` one of three trigger tokens is emitted,
            followed by that trigger's fixed continuation of three text tokens, which
            have label 3.

Tokens whose value no mechanism makes predictable (copy and n-gram triggers, the B after
a trigger's first occurrence, openers, the first token) have label -1 (`UNPREDICTABLE`).
Mechanisms share the text vocabulary, so the identity of a token does not give its
mechanism away (closers are the exception: only the bracket mechanism emits them).

A batch is a pure function of (seed, step): NumPy's generator seeded with
(seed, step) draws it on the host, as the common training loop requires.
`stratified_sample` picks a probe set with the same number of tokens of every mechanism.

Example:
    >>> batch = mechanism_batch(seed=0, step=0, batch_size=4, seq_len=32)
    >>> batch["tokens"].shape, batch["labels"].shape
    ((4, 33), (4, 33))
"""

from __future__ import annotations

import numbers

import numpy as np

NUM_TEXT = 32
OPENERS = (NUM_TEXT, NUM_TEXT + 1, NUM_TEXT + 2)
CLOSERS = (NUM_TEXT + 3, NUM_TEXT + 4, NUM_TEXT + 5)
TRIGGERS = (NUM_TEXT + 6, NUM_TEXT + 7, NUM_TEXT + 8)
COPY_TRIGGERS = (NUM_TEXT + 9, NUM_TEXT + 10, NUM_TEXT + 11)
NGRAM_LENGTH = 3
MAX_DEPTH = 2
MECHANISMS = ("bigram", "induction", "bracket", "ngram")
BIGRAM, INDUCTION, BRACKET, NGRAM = range(4)
UNPREDICTABLE = -1
_CHAIN_SEED = 20260612
_SUCCESSOR_PROBS = (0.6, 0.3, 0.1)


def vocab_size() -> int:
  """Text tokens, three openers, closers, n-gram triggers and copy triggers each."""
  return NUM_TEXT + 12


def markov_chain() -> tuple[np.ndarray, np.ndarray]:
  """(successors (NUM_TEXT, 3) int, probabilities (3,)): the fixed bigram chain."""
  rng = np.random.default_rng(_CHAIN_SEED)
  successors = np.stack([rng.choice(NUM_TEXT, size=3, replace=False)
                         for _ in range(NUM_TEXT)])
  return successors.astype(np.int32), np.asarray(_SUCCESSOR_PROBS)


def ngram_continuations() -> np.ndarray:
  """(len(TRIGGERS), NGRAM_LENGTH) int: the fixed text continuation of each trigger."""
  rng = np.random.default_rng(_CHAIN_SEED + 1)
  return rng.choice(NUM_TEXT, size=(len(TRIGGERS), NGRAM_LENGTH)).astype(np.int32)


def _sequence(rng: np.random.Generator, length: int, p_pair: float, p_open: float,
              p_ngram: float, successors: np.ndarray, cumulative: np.ndarray,
              continuations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  # All randomness of the sequence is drawn up front (fast), then consumed by position.
  event = rng.random(length)
  successor = np.searchsorted(cumulative, rng.random(length), side="right")
  outputs = rng.integers(NUM_TEXT, size=len(COPY_TRIGGERS))
  seen = [False] * len(COPY_TRIGGERS)
  kind = rng.integers(3, size=length)
  delay = rng.integers(2, 9, size=length)
  tokens = np.empty(length, np.int32)
  labels = np.empty(length, np.int32)
  queue: list[tuple[int, int]] = []   # forced (token, label) emissions, in order
  stack: list[tuple[int, int]] = []   # open brackets: (closer, due position)
  state = int(rng.integers(NUM_TEXT))
  tokens[0], labels[0] = state, UNPREDICTABLE
  for t in range(1, length):
    if queue:
      token, label = queue.pop(0)
    elif stack and t >= stack[-1][1]:
      token, label = stack.pop()[0], BRACKET
    else:
      u = event[t]
      if u < p_pair:
        token, label = COPY_TRIGGERS[kind[t]], UNPREDICTABLE
        queue.append((int(outputs[kind[t]]), INDUCTION if seen[kind[t]] else UNPREDICTABLE))
        seen[kind[t]] = True
      elif u < p_pair + p_open and len(stack) < MAX_DEPTH:
        token, label = OPENERS[kind[t]], UNPREDICTABLE
        due = t + int(delay[t])
        if stack:  # an inner bracket closes first
          due = max(min(due, stack[-1][1] - 1), t + 1)
        stack.append((CLOSERS[kind[t]], due))
      elif u < p_pair + p_open + p_ngram:
        token, label = TRIGGERS[kind[t]], UNPREDICTABLE
        queue.extend((int(c), NGRAM) for c in continuations[kind[t]])
      else:
        token, label = int(successors[state, min(successor[t], 2)]), BIGRAM
    if token < NUM_TEXT:
      state = token
    tokens[t], labels[t] = token, label
  return tokens, labels


def _check_int(name: str, value, low: int) -> None:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
    raise ValueError(f"mechanism_batch: {name}={value!r}; expected an int >= {low}")


def mechanism_batch(seed: int, step: int, batch_size: int, seq_len: int,
                    p_pair: float = 0.1, p_open: float = 0.05,
                    p_ngram: float = 0.04) -> dict[str, np.ndarray]:
  """Batch `step` of run `seed`: token windows with the mechanism of every token.

  Args:
    seed, step: ints >= 0; the batch is a pure function of them.
    batch_size: sequences (>= 1); seq_len: predictions per sequence (>= 2), so each
      sequence has seq_len + 1 tokens.
    p_pair, p_open, p_ngram: per-position probabilities of emitting a copy
      trigger, opening a bracket and emitting a trigger (each >= 0, sum < 1).

  Returns:
    dict(tokens=int32 (batch_size, seq_len + 1), labels=int32 (batch_size,
    seq_len + 1)); labels[:, t] is the mechanism (`MECHANISMS` index, or -1) that
    generated tokens[:, t], i.e. of the prediction made at position t - 1.

  Raises:
    ValueError: naming the argument if one is out of range.
  """
  _check_int("seed", seed, 0)
  _check_int("step", step, 0)
  _check_int("batch_size", batch_size, 1)
  _check_int("seq_len", seq_len, 2)
  ps = (p_pair, p_open, p_ngram)
  if not all(np.isfinite(p) for p in ps) or any(p < 0 for p in ps) or sum(ps) >= 1:
    raise ValueError(f"mechanism_batch: probabilities {ps} must be >= 0 and sum to < 1")
  rng = np.random.default_rng((seed, step))
  successors, probs = markov_chain()
  cumulative = np.cumsum(probs)[:-1]
  continuations = ngram_continuations()
  pairs = [_sequence(rng, seq_len + 1, p_pair, p_open, p_ngram, successors, cumulative,
                     continuations) for _ in range(batch_size)]
  return {"tokens": np.stack([p[0] for p in pairs]),
          "labels": np.stack([p[1] for p in pairs])}


def stratified_sample(labels: np.ndarray, per_mechanism: int, seed: int) -> np.ndarray:
  """Sorted indices of up to `per_mechanism` positions of each mechanism.

  For every mechanism i (in `MECHANISMS` order) it draws min(per_mechanism, #{labels ==
  i}) of the positions with label i without replacement; unpredictable positions
  (label -1) are never chosen. A probe set balanced this way gives every mechanism the
  same weight in a clustering score.

  Args:
    labels: (N,) int mechanism labels (e.g. `mechanism_batch(...)["labels"][:, 1:]`
      flattened).
    per_mechanism: positions per mechanism (>= 1).
    seed: NumPy generator seed.

  Returns:
    int64 indices into `labels`, ascending.

  Example:
    >>> stratified_sample(np.array([0, 0, 0, 1, -1, 1]), per_mechanism=1, seed=0).shape
    (2,)
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"stratified_sample: labels has shape {labels.shape} and dtype "
                     f"{labels.dtype}; expected (N,) integer mechanism labels")
  if isinstance(per_mechanism, bool) or not isinstance(per_mechanism, numbers.Integral) \
      or per_mechanism < 1:
    raise ValueError(f"stratified_sample: per_mechanism={per_mechanism!r}; expected an "
                     f"int >= 1")
  rng = np.random.default_rng(seed)
  picks = []
  for i in range(len(MECHANISMS)):
    where = np.flatnonzero(labels == i)
    picks.append(rng.choice(where, size=min(per_mechanism, len(where)), replace=False))
  return np.sort(np.concatenate(picks))
