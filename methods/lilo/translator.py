"""LILO's translator step: the DM's language -> pairwise comparisons between arms.

For every pair (a, b) the translator `TextModel` reads `prompts.translator_prompt` (the
outcomes, every evaluated arm, the DM's goals and feedback, the pair as option_0 /
option_1) and answers 0 (a preferred) or 1 (b preferred); the comparison row is then
(winner, loser). As in the public code, each prompt may be sampled several times and
every parsed sample is its own row (they may disagree), and labels are regenerated from
all the feedback each time. A reply that does not parse is logged, counted and skipped:
never a guessed label.

Accuracy against the true utility U (when given) is the fraction of rows whose winner
has U(winner) > U(loser) (an exact tie counts as right).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from absl import logging
import numpy as np

from methods.lilo import problems as problems_lib
from methods.lilo import prompts


class Translation(NamedTuple):
  """The translator's labels.

  Attributes:
    comparisons: (m, 2) int rows (winner, loser), arm indices.
    unparsed: how many replies did not parse (and were skipped).
    accuracy: the fraction of rows that agree with the true utility (nan without one or
      without rows).
  """
  comparisons: np.ndarray
  unparsed: int
  accuracy: float


def _check_pairs(pairs, arms: Mapping[int, np.ndarray]) -> np.ndarray:
  pairs = np.asarray(pairs)
  if pairs.size == 0:
    return np.zeros((0, 2), int)
  if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
    raise ValueError(f"pairs must be an integer array of shape (p, 2), got shape "
                     f"{pairs.shape} and dtype {pairs.dtype}")
  for r, (a, b) in enumerate(pairs.tolist()):
    for arm in (a, b):
      if arm not in arms:
        known = (f"the {len(arms)} known arms are {min(arms)}..{max(arms)}" if arms
                 else "no arm is known")
        raise ValueError(f"pairs[{r}] = ({a}, {b}) references unknown arm {arm}; {known}")
    if a == b:
      raise ValueError(f"pairs[{r}] compares arm {a} with itself")
  return pairs.astype(int)


def _check_arms(problem, arms: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
  k = problems_lib.get_problem(problem).num_outcomes
  checked = {}
  for i, y in arms.items():
    y = np.asarray(y, float).ravel()
    if y.shape != (k,):
      raise ValueError(f"arm {i} must have {k} outcome values, got shape {y.shape}")
    if not np.all(np.isfinite(y)):
      raise ValueError(f"arm {i} has a non-finite outcome {y.tolist()}")
    checked[int(i)] = y
  return checked


def accuracy(comparisons: np.ndarray, true_utility) -> float:
  """The fraction of (winner, loser) rows with U(winner) >= U(loser); nan if none.

  Example:
    >>> accuracy(np.array([[0, 1], [1, 0]]), np.array([0.9, 0.1]))
    0.5
  """
  comparisons = np.asarray(comparisons, int).reshape(-1, 2)
  if not len(comparisons):
    return float("nan")
  u = np.asarray([true_utility[int(i)] for i in comparisons.ravel()], float).reshape(-1, 2)
  return float(np.mean(u[:, 0] >= u[:, 1]))


def translate(model, problem, feedback: Sequence[str], arms: Mapping[int, np.ndarray],
              pairs, *, samples: int = 1, max_tokens: int = 512, temperature: float = 0.0,
              true_utility=None) -> Translation:
  """Labels `pairs` from the DM's feedback with one batched call of `model`.

      prompt_(a,b) = translator_prompt(problem, feedback, arms, (a, b)),
      answer 0 -> (a, b), answer 1 -> (b, a), anything else -> skipped and counted.

  Args:
    model: a `common.llm.TextModel` (a real LLM or `simulated.OfflineTranslator`).
    problem: a `problems.Problem` or its name.
    feedback: the DM's goal statements and messages, oldest first.
    arms: arm index -> outcomes y (k,), finite.
    pairs: (p, 2) arm indices to label, all in `arms`.
    samples: replies per pair (each parsed reply is a row).
    max_tokens: the reply budget of each call.
    temperature: the sampling temperature (0: greedy).
    true_utility: optional, indexable by arm index (array or dict): the DM's utility,
      only to measure `accuracy`.

  Returns:
    A `Translation`.

  Example:
    >>> from methods.lilo import simulated
    >>> t = translate(simulated.OfflineTranslator(), "vehicle_safety",
    ...               ["I prefer arm 1 to arm 0."], {0: [0.2] * 3, 1: [0.3] * 3}, [(0, 1)])
    >>> t.comparisons.tolist(), t.unparsed
    ([[1, 0]], 0)
  """
  if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
    raise ValueError(f"samples must be an int >= 1, got {samples!r}")
  checked = _check_arms(problem, arms)
  pairs = _check_pairs(pairs, checked)
  if not len(pairs):
    return Translation(np.zeros((0, 2), int), 0, float("nan"))
  feedback = [str(m) for m in feedback]
  requests = [tuple(p) for p in pairs.tolist() for _ in range(samples)]
  texts = [prompts.translator_prompt(problem, feedback, checked, p) for p in requests]
  replies = model.complete(texts, max_tokens=max_tokens, temperature=temperature)
  if len(replies) != len(texts):
    raise ValueError(f"the translator returned {len(replies)} replies for {len(texts)} "
                     "prompts")
  rows, unparsed = [], 0
  for (a, b), reply in zip(requests, replies):
    answer = prompts.parse_translator_reply(reply)
    if answer is None:
      unparsed += 1
    else:
      rows.append((a, b) if answer == 0 else (b, a))
  if unparsed:
    logging.warning("translator: %d of %d replies did not parse and were skipped",
                    unparsed, len(replies))
  comparisons = np.asarray(rows, int).reshape(-1, 2)
  acc = float("nan") if true_utility is None else accuracy(comparisons, true_utility)
  return Translation(comparisons, unparsed, acc)
