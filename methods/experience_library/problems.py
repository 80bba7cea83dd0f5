"""Problems with hidden rules, the rule grammar, answer checking and a JSONL loader.

The generated task (the quick and tiny presets) has F problem families. Each family
has a made-up name and a hidden rule that a solver only gets right when the rule is
in its context; without it, the natural reading of the problem gives another answer:

  operator   "Compute 7 zorp 4."                          x zorp y = (a*x + b*y) mod 10
             natural reading: x + y                       a, b in 1..6
  unit       "How many grams are 6 florbs?"               1 florb = k grams, k in 2..12
             natural reading: 1 florb = 1 gram
  calendar   "On the glorp calendar, what day comes 23    the glorp calendar has p days,
             days after day 4?"                           numbered 0 to p-1 (p in 5..13)
             natural reading: no wrap-around

Rules are written in that grammar (`rule_text`) and read back by `parse_rule`, which
also reads the over-specific form "when x is 7: x zorp y = ..." (a rule that only
applies to one first operand). Family frequencies follow a Zipf law, so which rules
a capacity-limited library keeps matters.

The paper-scale task is a MATH-style JSONL file (`load_problems_jsonl`): one object per
line with "problem" and "answer" fields, checked by `is_correct` on the final answer.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

FAMILY_KINDS = ("operator", "unit", "calendar")
_SYLLABLES = ("zo", "rp", "bli", "ck", "flo", "rb", "gla", "mu", "tre", "vok", "sna", "dil",
              "qua", "pe", "fen", "dro", "wix", "lu", "ber", "tum")
BASE_UNITS = ("grams", "meters", "seconds", "liters")


class Family(NamedTuple):
  """A problem family: its name, kind and hidden-rule parameters (operator: (a, b);
  unit: (k, base-unit index); calendar: (p,))."""
  name: str
  kind: str
  params: tuple[int, ...]


class Problem(NamedTuple):
  """One problem: its text, gold answer, and (generated task only) its family name and
  inputs."""
  text: str
  answer: str
  family: str = ""
  inputs: tuple[int, ...] = ()


class ParsedRule(NamedTuple):
  """A rule read by `parse_rule`: which family, its parameters, and the first operand
  it is restricted to (None: general)."""
  family: str
  kind: str
  params: tuple[int, ...]
  only_x: int | None = None


# ----------------------------------------------------------------------- families


def make_families(num_families: int, seed: int) -> list[Family]:
  """`num_families` families with distinct names, kinds in turn, random parameters.

  Example:
    >>> [f.kind for f in make_families(4, 0)]
    ['operator', 'unit', 'calendar', 'operator']
  """
  if isinstance(num_families, bool) or not isinstance(num_families, int) or num_families < 1:
    raise ValueError(f"num_families must be an int >= 1, got {num_families!r}")
  rng = np.random.default_rng(seed)
  names: list[str] = []
  while len(names) < num_families:
    name = "".join(rng.choice(_SYLLABLES, size=2))
    if name not in names:
      names.append(name)
  families = []
  for i, name in enumerate(names):
    kind = FAMILY_KINDS[i % len(FAMILY_KINDS)]
    if kind == "operator":
      params = (int(rng.integers(1, 7)), int(rng.integers(1, 7)))
    elif kind == "unit":
      params = (int(rng.integers(2, 13)), int(rng.integers(len(BASE_UNITS))))
    else:
      params = (int(rng.integers(5, 14)),)
    families.append(Family(name, kind, params))
  return families


def family_weights(num_families: int, zipf: float) -> np.ndarray:
  """Sampling probabilities p_f proportional to (f + 1)^-zipf."""
  w = (np.arange(num_families) + 1.0) ** -float(zipf)
  return w / w.sum()


def evaluate(kind: str, params: Sequence[int], inputs: Sequence[int]) -> int:
  """The answer a rule gives: the hidden rule's when `params` are the family's."""
  if kind == "operator":
    (a, b), (x, y) = params, inputs
    return (a * x + b * y) % 10
  if kind == "unit":
    return params[0] * inputs[0]
  if kind == "calendar":
    return (inputs[0] + inputs[1]) % params[0]
  raise ValueError(f"unknown family kind {kind!r}; expected one of {FAMILY_KINDS}")


def natural_answer(kind: str, inputs: Sequence[int]) -> int:
  """The answer without the family's rule (the problem read at face value)."""
  if kind == "operator":
    return inputs[0] + inputs[1]
  if kind == "unit":
    return inputs[0]
  return inputs[0] + inputs[1]


def problem_text(family: Family, inputs: Sequence[int]) -> str:
  if family.kind == "operator":
    return f"Compute {inputs[0]} {family.name} {inputs[1]}."
  if family.kind == "unit":
    return f"How many {BASE_UNITS[family.params[1]]} are {inputs[0]} {family.name}s?"
  return (f"On the {family.name} calendar, what day comes {inputs[1]} days after day "
          f"{inputs[0]}?")


def sample_inputs(family: Family, rng: np.random.Generator) -> tuple[int, ...]:
  if family.kind == "operator":
    return int(rng.integers(0, 10)), int(rng.integers(0, 10))
  if family.kind == "unit":
    return (int(rng.integers(2, 20)),)
  p = family.params[0]
  return int(rng.integers(0, p)), int(rng.integers(p, 4 * p))


def make_problem(family: Family, inputs: Sequence[int]) -> Problem:
  inputs = tuple(int(v) for v in inputs)
  return Problem(problem_text(family, inputs), str(evaluate(family.kind, family.params, inputs)),
                 family.name, inputs)


def sample_problems(families: Sequence[Family], weights: np.ndarray, n: int,
                    rng: np.random.Generator) -> list[Problem]:
  """`n` problems: families drawn with `weights`, inputs uniform."""
  picks = rng.choice(len(families), size=n, p=weights)
  return [make_problem(families[f], sample_inputs(families[f], rng)) for f in picks]


# -------------------------------------------------------------------- rule grammar


def rule_text(family: Family | ParsedRule) -> str:
  """The family's rule in the grammar `parse_rule` reads.

  Example:
    >>> rule_text(Family("zorp", "operator", (2, 3)))
    'x zorp y = (2*x + 3*y) mod 10'
  """
  name, kind, params = family.name if isinstance(family, Family) else family.family, \
      family.kind, family.params
  if kind == "operator":
    text = f"x {name} y = ({params[0]}*x + {params[1]}*y) mod 10"
  elif kind == "unit":
    text = f"1 {name} = {params[0]} {BASE_UNITS[params[1]]}"
  else:
    text = (f"the {name} calendar has {params[0]} days, numbered 0 to {params[0] - 1}; "
            "day numbers wrap around")
  only_x = getattr(family, "only_x", None)
  return text if only_x is None else f"when x is {only_x}: {text}"


_OPERATOR = re.compile(r"^x (\w+) y = \((\d+)\*x \+ (\d+)\*y\) mod 10$")
_UNIT = re.compile(r"^1 (\w+) = (\d+) (\w+)$")
_CALENDAR = re.compile(r"^the (\w+) calendar has (\d+) days\b")
_ONLY_X = re.compile(r"^when x is (\d+): (.*)$")


def parse_rule(text: str) -> ParsedRule | None:
  """The rule as data if it is in the grammar, else None (free text)."""
  text = " ".join(text.split()).rstrip(".")
  only_x = None
  m = _ONLY_X.match(text)
  if m:
    only_x, text = int(m.group(1)), m.group(2)
  if m := _OPERATOR.match(text):
    return ParsedRule(m.group(1), "operator", (int(m.group(2)), int(m.group(3))), only_x)
  if (m := _UNIT.match(text)) and m.group(3) in BASE_UNITS:
    return ParsedRule(m.group(1), "unit", (int(m.group(2)), BASE_UNITS.index(m.group(3))),
                      only_x)
  if (m := _CALENDAR.match(text)) and int(m.group(2)) >= 1:
    return ParsedRule(m.group(1), "calendar", (int(m.group(2)),), only_x)
  return None


_PROBLEMS = (
    ("operator", re.compile(r"^Compute (\d+) (\w+) (\d+)\.$"), (2,), (1, 3)),
    ("unit", re.compile(r"^How many (\w+) are (\d+) (\w+)s\?$"), (3,), (2,)),
    ("calendar", re.compile(r"^On the (\w+) calendar, what day comes (\d+) days after day "
                            r"(\d+)\?$"), (1,), (3, 2)),
)


class ReadProblem(NamedTuple):
  """A generated problem as data: family name and kind, inputs, and (unit problems)
  the base unit's index, which the problem states."""
  family: str
  kind: str
  inputs: tuple[int, ...]
  base_unit: int | None = None


def read_problem(text: str) -> ReadProblem | None:
  """A generated problem's text read back as data, or None for any other text."""
  text = " ".join(text.split())
  for kind, pattern, name_group, input_groups in _PROBLEMS:
    if m := pattern.match(text):
      unit = None
      if kind == "unit":
        if m.group(1) not in BASE_UNITS:
          return None
        unit = BASE_UNITS.index(m.group(1))
      return ReadProblem(m.group(name_group[0]), kind,
                         tuple(int(m.group(g)) for g in input_groups), unit)
  return None


def applies(rule: ParsedRule, family: str, inputs: Sequence[int]) -> bool:
  """Whether `rule` speaks about this problem (its family, and its operand if restricted)."""
  return rule.family == family and (rule.only_x is None or rule.only_x == inputs[0])


# ------------------------------------------------------------------ answer checking

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str:
  """The final answer in a solver's reply: after the last "Answer:", else the last
  \\boxed{...}, else the last number; "" if there is none.

  Example:
    >>> extract_answer("7*2 = 14, so\\nAnswer: 14.")
    '14'
  """
  found = re.findall(r"Answer:\s*([^\n]*)", text)
  if found:
    return _normalize(found[-1])
  boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
  if boxed:
    return _normalize(boxed[-1])
  numbers = _NUMBER.findall(text)
  return numbers[-1] if numbers else ""


def _normalize(answer: str) -> str:
  answer = answer.strip().strip("$").strip()
  boxed = re.fullmatch(r"\\boxed\{(.*)\}", answer)
  answer = boxed.group(1) if boxed else answer
  return answer.rstrip(".").strip()


def is_correct(predicted: str, gold: str) -> bool:
  """Equal after normalising, or numerically equal (so "14.0" matches "14")."""
  predicted, gold = _normalize(predicted), _normalize(gold)
  if predicted == gold:
    return bool(gold)
  try:
    return math.isclose(float(predicted), float(gold), rel_tol=1e-9, abs_tol=1e-9)
  except ValueError:
    return False


# -------------------------------------------------------------------- JSONL problems


def load_problems_jsonl(path: str | os.PathLike) -> list[Problem]:
  """Problems from a MATH-style JSONL file: one object per line with a "problem" and an
  "answer" field (other fields ignored; blank lines skipped).

  Raises:
    FileNotFoundError: no such file.
    ValueError: one line naming the line number of a row that is not a JSON object with
      non-empty "problem" and "answer", or an empty file.
  """
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"problem file {path!r} does not exist")
  problems = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{number}: not valid JSON ({e.msg})") from None
      if not isinstance(row, dict) or any(
          not str(row.get(k, "")).strip() for k in ("problem", "answer")):
        raise ValueError(f"{path}:{number}: expected an object with non-empty 'problem' and "
                         f"'answer' fields, got keys {sorted(row) if isinstance(row, dict) else type(row).__name__}")
      problems.append(Problem(str(row["problem"]).strip(), str(row["answer"]).strip()))
  if not problems:
    raise ValueError(f"{path}: no problems (expected JSON lines with 'problem' and 'answer')")
  return problems
