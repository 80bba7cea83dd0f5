"""A generated diagnostic-reasoning task with known chain depth k, and a MedQA JSONL loader.

Knowledge base (``make_knowledge_base``), from a seed:

* nodes: presenting findings ``f0..f{F-1}`` and intermediate conditions ``c0..c{C-1}``;
* modifying findings ``m0..m{M-1}``;
* ``step[node, m]``: a node seen together with finding m leads to a condition;
* ``resolve[node]``: the diagnosis ``d0..d{D-1}`` a node points to.

A case of depth k lists a start node x_0 and k modifying findings m_1..m_k; its chain is
x_j = step[x_{j-1}, m_j] (k inferences) and its answer is resolve[x_k]. k = 0 is direct
recall (x_0 is any node); for k >= 1 the start is a presenting finding.

Text format (plain ASCII, so ``common.data.tokenizers.ByteTokenizer`` encodes it byte by
byte and an HF tokenizer works on the same strings)::

    prompt:  "f3 m1 m0 m2\\n"
    target:  "<think>f3 -m1-> c5 -m0-> c2 -m2-> c9</think><answer>d4</answer>"

The SFT target thinks the full chain for every k (the start node first, so even k = 0
writes "<think>f3</think>"); answer-only is "<think></think><answer>d4</answer>".

Splits: the held-out cases are new compositions. Every held-out case's steps
(x_{j-1}, m_j) and its final resolve[x_k] occur in some training case, but the case itself
(its prompt) never does, so held-out accuracy measures composing known facts, not recall.

``load_medqa_jsonl`` reads MedQA-style multiple-choice JSONL from a local path.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple, Sequence

import numpy as np

from common import checks

THINK_RE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)


class KnowledgeBase(NamedTuple):
  """Node ids: 0..F-1 presenting findings, F..F+C-1 conditions.

  Attributes:
    num_findings: F.
    num_conditions: C.
    num_modifiers: M.
    num_diagnoses: D.
    step: (F + C, M) int, the node (always a condition, id >= F) a node and finding lead to.
    resolve: (F + C,) int, each node's diagnosis.
  """
  num_findings: int
  num_conditions: int
  num_modifiers: int
  num_diagnoses: int
  step: np.ndarray
  resolve: np.ndarray


class Case(NamedTuple):
  """One generated case.

  Attributes:
    start: the start node x_0.
    modifiers: the k modifying findings, in order.
    chain: the k inferred nodes x_1..x_k.
    answer: the diagnosis id.
    prompt: the prompt text.
    answer_text: the diagnosis as text ("d4"), what ``is_correct`` compares with.
  """
  start: int
  modifiers: tuple[int, ...]
  chain: tuple[int, ...]
  answer: int
  prompt: str
  answer_text: str

  @property
  def k(self) -> int:
    return len(self.modifiers)


class Task(NamedTuple):
  """The knowledge base and its two disjoint splits of cases."""
  kb: KnowledgeBase
  train: list[Case]
  test: list[Case]


class MCQuestion(NamedTuple):
  """A multiple-choice question; ``answer_text`` is the correct option's letter."""
  question: str
  options: dict[str, str]
  answer_text: str


def node_name(kb: KnowledgeBase, node: int) -> str:
  """"f<i>" for a presenting finding, "c<j>" for a condition."""
  return f"f{node}" if node < kb.num_findings else f"c{node - kb.num_findings}"


def make_knowledge_base(seed: int, num_findings: int = 8, num_conditions: int = 24,
                        num_modifiers: int = 4, num_diagnoses: int = 8) -> KnowledgeBase:
  """A random knowledge base: step[x, m] uniform over conditions, resolve[x] uniform.

  Args:
    seed: the NumPy seed.
    num_findings, num_conditions, num_modifiers, num_diagnoses: F, C, M, D (each >= 1;
      C >= 2 and M >= 2 so chains branch).

  Returns:
    A ``KnowledgeBase``.

  Example:
    >>> kb = make_knowledge_base(0)
    >>> kb.step.shape
    (32, 4)
  """
  checks.positive_int("num_findings", num_findings)
  checks.positive_int("num_conditions", num_conditions, low=2)
  checks.positive_int("num_modifiers", num_modifiers, low=2)
  checks.positive_int("num_diagnoses", num_diagnoses, low=2)
  rng = np.random.default_rng([seed, 18])
  nodes = num_findings + num_conditions
  step = num_findings + rng.integers(0, num_conditions, size=(nodes, num_modifiers))
  resolve = rng.integers(0, num_diagnoses, size=nodes)
  return KnowledgeBase(num_findings, num_conditions, num_modifiers, num_diagnoses,
                       step.astype(np.int64), resolve.astype(np.int64))


def follow_chain(kb: KnowledgeBase, start: int, modifiers: Sequence[int]
                 ) -> tuple[tuple[int, ...], int]:
  """x_j = step[x_{j-1}, m_j]; returns ((x_1..x_k), resolve[x_k])."""
  node, chain = int(start), []
  for m in modifiers:
    node = int(kb.step[node, m])
    chain.append(node)
  return tuple(chain), int(kb.resolve[node])


def make_case(kb: KnowledgeBase, start: int, modifiers: Sequence[int]) -> Case:
  """The case with this start node and modifying findings (chain and answer filled in)."""
  modifiers = tuple(int(m) for m in modifiers)
  chain, answer = follow_chain(kb, start, modifiers)
  words = [node_name(kb, start)] + [f"m{m}" for m in modifiers]
  return Case(int(start), modifiers, chain, answer, " ".join(words) + "\n", f"d{answer}")


def sft_target(kb: KnowledgeBase, case: Case) -> str:
  """"<think>x_0 -m_1-> x_1 ... -m_k-> x_k</think><answer>d</answer>": the full chain,
  each intermediate conclusion with the finding that licenses it (so every step is a
  fact seen in training, and held-out chains compose)."""
  steps = "".join(f" -m{m}-> {node_name(kb, x)}" for m, x in zip(case.modifiers, case.chain))
  return f"<think>{node_name(kb, case.start)}{steps}</think><answer>{case.answer_text}</answer>"


def answer_only(case: Case) -> str:
  """"<think></think><answer>d</answer>": the shortest well-formatted correct response."""
  return f"<think></think><answer>{case.answer_text}</answer>"


def parse_response(response: str) -> tuple[str, str] | None:
  """(think, answer) of a well-formatted response, else None."""
  match = THINK_RE.fullmatch(response)
  if match is None or "<" in match.group(1) or "<" in match.group(2):
    return None
  return match.group(1).strip(), match.group(2).strip()


def is_well_formatted(response: str) -> bool:
  """True iff the response is "<think>...</think><answer>...</answer>" (whitespace around
  the blocks allowed, no tags inside them, a non-empty answer).

  Example:
    >>> is_well_formatted("<think></think><answer>d1</answer>")
    True
  """
  parsed = parse_response(response)
  return parsed is not None and parsed[1] != ""


def is_correct(response: str, case: Case | MCQuestion) -> bool:
  """True iff the response is well formatted and its answer equals ``case.answer_text``.

  Works for generated ``Case``s and ``MCQuestion``s (the answer is the option letter).

  Example:
    >>> is_correct("<think>c1</think><answer>d3</answer>", case)  # doctest: +SKIP
  """
  parsed = parse_response(response)
  return parsed is not None and parsed[1] == case.answer_text


def think_length(response: str) -> int | None:
  """Characters inside the think block (0: answer-only), None when badly formatted."""
  parsed = parse_response(response)
  return None if parsed is None else len(parsed[0])


def _sample_cases(kb: KnowledgeBase, k: int, count: int, rng: np.random.Generator
                  ) -> list[tuple[int, tuple[int, ...]]]:
  """Up to ``count`` distinct (start, modifiers) keys of depth k."""
  starts = kb.num_findings + kb.num_conditions if k == 0 else kb.num_findings
  total = starts * kb.num_modifiers ** k
  if total <= 4 * count:                                          # enumerate and choose
    idx = rng.permutation(total)[:count]
    keys = []
    for i in idx:
      i, mods = int(i), []
      for _ in range(k):
        i, m = divmod(i, kb.num_modifiers)
        mods.append(m)
      keys.append((i, tuple(mods)))
    return keys
  seen: dict[tuple[int, tuple[int, ...]], None] = {}
  while len(seen) < count:
    key = (int(rng.integers(starts)), tuple(int(m) for m in rng.integers(kb.num_modifiers, size=k)))
    seen.setdefault(key, None)
  return list(seen)


def _facts(kb: KnowledgeBase, case: Case) -> set[tuple]:
  """The facts a case uses: its steps (node, m) and its final resolve."""
  nodes = (case.start,) + case.chain
  facts = {("step", nodes[j], m) for j, m in enumerate(case.modifiers)}
  facts.add(("resolve", nodes[-1]))
  return facts


def make_task(seed: int, cases_per_k: int = 64, max_k: int = 6, holdout: float = 0.25,
              kb: KnowledgeBase | None = None) -> Task:
  """Cases of every depth k = 0..max_k, split into training and held-out cases.

  Per k, ``cases_per_k`` distinct cases (fewer when fewer exist) are drawn; a fraction
  ``holdout`` goes to the test split, except cases using a fact (step or resolve) that no
  training case uses, which move to training. The splits share no prompt.

  Args:
    seed: the NumPy seed (also the knowledge base's, unless ``kb`` is given).
    cases_per_k: cases per depth.
    max_k: the deepest chain (6 in the issue).
    holdout: the held-out fraction in (0, 1).
    kb: a knowledge base, or None for ``make_knowledge_base(seed)``.

  Returns:
    A ``Task``; each split is ordered by k.

  Example:
    >>> task = make_task(0)
    >>> sorted({c.k for c in task.test})
    [0, 1, 2, 3, 4, 5, 6]
  """
  checks.positive_int("cases_per_k", cases_per_k)
  checks.positive_int("max_k", max_k, low=0)
  checks.scalar("holdout", holdout, low=0.0, high=1.0)
  if holdout >= 1.0:
    raise ValueError(f"holdout must be in (0, 1), got {holdout}")
  kb = make_knowledge_base(seed) if kb is None else kb
  rng = np.random.default_rng([seed, 1818])
  train, test = [], []
  for k in range(max_k + 1):
    cases = [make_case(kb, s, mods) for s, mods in _sample_cases(kb, k, cases_per_k, rng)]
    held = rng.random(len(cases)) < holdout
    train.extend(c for c, h in zip(cases, held) if not h)
    test.extend(c for c, h in zip(cases, held) if h)
  known = set().union(*(_facts(kb, c) for c in train)) if train else set()
  while True:                       # moving a case to training can only add known facts
    unseen = [c for c in test if not _facts(kb, c) <= known]
    if not unseen:
      break
    for c in unseen:
      known |= _facts(kb, c)
    train.extend(unseen)
    test = [c for c in test if c not in unseen]
  return Task(kb, sorted(train, key=lambda c: c.k), sorted(test, key=lambda c: c.k))


# ----------------------------------------------------------------------------- MedQA


def load_medqa_jsonl(path: str | os.PathLike) -> list[MCQuestion]:
  """MedQA-style multiple-choice questions from a local JSONL file.

  Each non-blank line is a JSON object with ``question`` (str), ``options`` (a dict
  letter -> text) and ``answer_idx`` (the letter) or, failing that, ``answer`` (the letter
  or the correct option's text). Any malformed line raises a one-line ValueError naming
  the file and line number.

  Args:
    path: the .jsonl file.

  Returns:
    The questions, in file order.

  Example:
    >>> questions = load_medqa_jsonl("medqa/test.jsonl")  # doctest: +SKIP
  """
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no MedQA JSONL file at {path!r}")
  questions = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      if line.strip():
        questions.append(_parse_medqa_line(line, f"{path} line {number}"))
  return questions


def _parse_medqa_line(line: str, where: str) -> MCQuestion:
  try:
    row = json.loads(line)
  except json.JSONDecodeError as e:
    raise ValueError(f"{where}: invalid JSON ({e.msg}); expected one object per line") from None
  if not isinstance(row, dict):
    raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
  question, options = row.get("question"), row.get("options")
  if not isinstance(question, str) or not question.strip():
    raise ValueError(f"{where}: 'question' must be a non-empty string")
  if (not isinstance(options, dict) or len(options) < 2
      or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items())):
    raise ValueError(f"{where}: 'options' must be a dict of >= 2 letter -> text strings")
  answer = row.get("answer_idx")
  if answer is None:
    text = row.get("answer")
    answer = text if text in options else next(
        (k for k, v in options.items() if isinstance(text, str) and v.strip() == text.strip()),
        None)
    if answer is None:
      raise ValueError(f"{where}: no 'answer_idx', and 'answer' {text!r} is neither an option "
                       f"letter nor an option's text")
  if answer not in options:
    raise ValueError(f"{where}: answer_idx {answer!r} is not one of the options "
                     f"{sorted(options)}")
  return MCQuestion(question, dict(options), answer)


def medqa_prompt(q: MCQuestion) -> str:
  """The question and its lettered options, one per line, then a newline."""
  lines = [q.question] + [f"{k}. {v}" for k, v in sorted(q.options.items())]
  return "\n".join(lines) + "\n"
