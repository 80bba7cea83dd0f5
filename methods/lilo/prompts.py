"""The text-model prompts of LILO's two LLM roles, their reply parsers, and their readers.

Our own wording of the public code's intent:

* **Translator** (LILO's feedback -> preferences step): given the outcomes (names,
  other names, ranges), every evaluated arm's outcomes, the DM's goal statements and all
  its feedback messages, and one pair (option_0, option_1), decide which option the DM
  prefers. Reply: a ```json block {"reasoning": "...", "answer": 0 or 1}.
* **Optimizer** (the LLM-only baseline): given the problem, its inputs scaled to
  [0, 1]^d, the table of evaluated (x, y) and the DM's feedback, propose n new x as a
  ```json block {"0": [...], ..., "n-1": [...]}.

The parsers never invent an answer: a reply without a usable JSON object is `None`.
`read_translator_prompt` / `read_optimizer_prompt` invert the prompt builders; the
simulated roles (`simulated.py`) read their context with them, as an LLM reads the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from methods.lilo import problems as problems_lib

TRANSLATOR = """You help a decision maker (DM) choose among experimental results. Each \
result is a vector of outcomes y = [{symbols}].

## Outcomes
{outcomes}

## Results evaluated so far
{table}

## What the DM has told us
{feedback}

## Your task
Judging only from the DM's goals and messages above, decide which of these two results \
the DM would prefer:

{pair}

First work out what the messages say about the DM's priorities and targets, then \
compare the two options. Reply with a JSON object in a ```json block and nothing else:
```json
{{"reasoning": "<one line: what the DM wants and how the two options compare>", \
"answer": <0 or 1>}}
```
"answer" is 0 if the DM prefers option_0 and 1 if the DM prefers option_1.
"""

OPTIMIZER = """You tune the {d} parameters x = [{xs}] of a system to maximise a decision \
maker's (DM) utility u(x) = g(f(x)), where y = f(x) = [{symbols}] are measured outcomes \
and g is the DM's utility over them, which you do not know. Every parameter is scaled \
to [0, 1].

## The problem
{description}

## Outcomes
{outcomes}

## Results evaluated so far
{table}

## What the DM has told us
{feedback}

## Your task
Propose {n} new parameter vectors for the next round, trading off exploring new regions \
against exploiting what the DM has said and what worked. First work out from the \
messages what the DM wants, then reply with a JSON object in a ```json block that maps \
"0", ..., "{last}" to lists of {d} numbers, each in [0, 1]:
```json
{{"0": [<{d} numbers>], ..., "{last}": [<{d} numbers>]}}
```
Only the JSON: no code and no comments.
"""

NO_FEEDBACK = "(no messages yet)"


class Outcome(NamedTuple):
  """One outcome as the prompts describe it."""
  symbol: str                 # "y_1"
  name: str
  aliases: tuple[str, ...]
  lower: float
  upper: float


class TranslatorRequest(NamedTuple):
  """What a translator prompt holds (`read_translator_prompt`)."""
  outcomes: list[Outcome]
  arms: dict[int, np.ndarray]
  feedback: list[str]
  pair: tuple[tuple[int, np.ndarray], tuple[int, np.ndarray]]


class OptimizerRequest(NamedTuple):
  """What an optimizer prompt holds (`read_optimizer_prompt`)."""
  outcomes: list[Outcome]
  X: np.ndarray               # (N, d) in [0, 1]
  Y: np.ndarray               # (N, k)
  feedback: list[str]
  n: int


# ---------------------------------------------------------------------------------------
# Builders.

def outcomes_of(problem) -> list[Outcome]:
  """The problem's outcomes as the prompts list them."""
  p = problems_lib.get_problem(problem)
  return [Outcome(f"y_{i + 1}", p.outcome_names[i], tuple(p.outcome_aliases[i]),
                  float(p.y_lower[i]), float(p.y_upper[i])) for i in range(p.num_outcomes)]


def _fmt(v: float) -> str:
  return f"{float(v):.4f}"


def _outcome_lines(outcomes: Sequence[Outcome]) -> str:
  lines = []
  for o in outcomes:
    also = f" (also called: {', '.join(o.aliases)})" if o.aliases else ""
    lines.append(f"- {o.symbol}: {o.name}{also}; range [{o.lower:g}, {o.upper:g}]; "
                 "higher is better")
  return "\n".join(lines)


def _feedback_lines(feedback: Sequence[str]) -> str:
  msgs = [" ".join(str(m).split()) for m in feedback]
  msgs = [m for m in msgs if m]
  return "\n".join(f"- {m}" for m in msgs) if msgs else NO_FEEDBACK


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(r) + " |" for r in rows]
  return "\n".join(lines)


def _check_outcomes(name: str, y, k: int) -> np.ndarray:
  y = np.asarray(y, float).ravel()
  if y.shape != (k,):
    raise ValueError(f"{name} must have {k} outcome values, got shape {y.shape}")
  if not np.all(np.isfinite(y)):
    raise ValueError(f"{name} has a non-finite outcome {y.tolist()}")
  return y


def translator_prompt(problem, feedback: Sequence[str], arms: Mapping[int, np.ndarray],
                      pair: tuple[int, int]) -> str:
  """The translator's prompt for one pair of arms.

  Args:
    problem: a `problems.Problem` or its name.
    feedback: the DM's goal statements and messages, oldest first.
    arms: arm index -> outcomes y (k,), every evaluated arm.
    pair: (arm of option_0, arm of option_1), both in `arms`.

  Returns:
    The prompt text; the reply is parsed by `parse_translator_reply`.

  Example:
    >>> text = translator_prompt("vehicle_safety", ["I like arm 1."],
    ...                          {0: [0.1, 0.2, 0.3], 1: [0.5, 0.6, 0.7]}, (0, 1))
    >>> read_translator_prompt(text).pair[1][0]
    1
  """
  outs = outcomes_of(problem)
  k = len(outs)
  a, b = (int(v) for v in pair)
  for arm in (a, b):
    if arm not in arms:
      raise ValueError(f"pair {tuple(pair)} references unknown arm {arm}; known arms: "
                       f"{len(arms)}")
  ys = {int(i): _check_outcomes(f"arm {i}", y, k) for i, y in arms.items()}
  symbols = [o.symbol for o in outs]
  table = _table(["arm", *symbols], [[str(i), *map(_fmt, ys[i])] for i in sorted(ys)])
  pair_table = _table(["option", "arm", *symbols],
                      [[f"option_{j}", str(i), *map(_fmt, ys[i])] for j, i in enumerate((a, b))])
  return TRANSLATOR.format(symbols=", ".join(symbols), outcomes=_outcome_lines(outs),
                           table=table, feedback=_feedback_lines(feedback), pair=pair_table)


def optimizer_prompt(problem, feedback: Sequence[str], X_unit, Y, n: int) -> str:
  """The LLM-only optimiser's prompt.

  Args:
    problem: a `problems.Problem` or its name.
    feedback: the DM's goal statements and messages, oldest first.
    X_unit: (N, d) evaluated inputs scaled to [0, 1].
    Y: (N, k) their outcomes.
    n: how many new points to ask for.

  Returns:
    The prompt text; the reply is parsed by `parse_optimizer_reply`.

  Example:
    >>> text = optimizer_prompt("vehicle_safety", [], np.full((1, 5), 0.5),
    ...                         np.full((1, 3), 0.5), 2)
    >>> read_optimizer_prompt(text).n
    2
  """
  p = problems_lib.get_problem(problem)
  outs = outcomes_of(p)
  X = np.asarray(X_unit, float).reshape(-1, p.dim) if np.size(X_unit) else np.zeros((0, p.dim))
  Y = np.asarray(Y, float).reshape(-1, p.num_outcomes) if np.size(Y) else np.zeros(
      (0, p.num_outcomes))
  if len(X) != len(Y):
    raise ValueError(f"X_unit and Y must have the same number of rows, got {len(X)} and "
                     f"{len(Y)}")
  if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):
    raise ValueError("X_unit and Y must be finite")
  if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
    raise ValueError(f"n must be an int >= 1, got {n!r}")
  xs = [f"x_{j + 1}" for j in range(p.dim)]
  symbols = [o.symbol for o in outs]
  rows = [[str(i), *map(_fmt, x), *map(_fmt, y)] for i, (x, y) in enumerate(zip(X, Y))]
  table = _table(["arm", *xs, *symbols], rows) if rows else "(none yet)"
  return OPTIMIZER.format(d=p.dim, xs=", ".join(xs), symbols=", ".join(symbols),
                          description=p.description, outcomes=_outcome_lines(outs),
                          table=table, feedback=_feedback_lines(feedback), n=int(n),
                          last=int(n) - 1)


# ---------------------------------------------------------------------------------------
# Reply parsers.

_BAD_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')


def json_objects(text: str) -> list:
  """Every JSON value that starts at a "{" in `text`, in order (```json blocks
  included; stray backslashes, as in LaTeX, are escaped first)."""
  out = []
  for source in (text, _BAD_ESCAPE.sub(r"\\\\", text)):
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", source):
      try:
        value, _ = decoder.raw_decode(source, m.start())
      except ValueError:
        continue
      out.append(value)
    if out:
      break
  return out


def parse_translator_reply(text: str) -> int | None:
  """The translator's answer: 0 (option_0 preferred), 1, or None when no JSON object
  in the reply has an "answer" of 0 or 1 (never a guessed label).

  Example:
    >>> parse_translator_reply('```json\\n{"reasoning": "r", "answer": 1}\\n```')
    1
    >>> parse_translator_reply("option 1, I think") is None
    True
  """
  if not isinstance(text, str):
    return None
  for obj in json_objects(text):
    if not isinstance(obj, dict) or "answer" not in obj:
      continue
    a = obj["answer"]
    if isinstance(a, bool):
      continue
    if isinstance(a, int) and a in (0, 1):
      return int(a)
    if isinstance(a, str) and a.strip() in ("0", "1"):
      return int(a.strip())
  return None


def parse_optimizer_reply(text: str, n: int, d: int) -> np.ndarray | None:
  """The proposed points: (n, d) floats clipped to [0, 1], or None when no JSON object
  in the reply maps exactly n keys to lists of d finite numbers.

  Example:
    >>> parse_optimizer_reply('{"0": [0.2, 1.5], "1": [0.0, 0.3]}', 2, 2).tolist()
    [[0.2, 1.0], [0.0, 0.3]]
  """
  if not isinstance(text, str):
    return None
  for obj in json_objects(text):
    if not isinstance(obj, dict) or len(obj) != n:
      continue
    try:
      keys = sorted(obj, key=int)
    except (TypeError, ValueError):
      continue
    rows = [obj[key] for key in keys]
    if not all(isinstance(r, list) and len(r) == d and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in r) for r in rows):
      continue
    X = np.asarray(rows, float)
    if np.all(np.isfinite(X)):
      return np.clip(X, 0.0, 1.0)
  return None


# ---------------------------------------------------------------------------------------
# Readers (the inverse of the builders).

def _section(prompt: str, title: str) -> str:
  head = f"## {title}\n"
  if head not in prompt:
    raise ValueError(f"not a LILO prompt: no '## {title}' section")
  body = prompt.split(head, 1)[1]
  return body.split("\n## ", 1)[0].strip("\n")


def _read_outcomes(prompt: str) -> list[Outcome]:
  line = re.compile(r"- (y_\d+): (.*?)(?: \(also called: (.*)\))?; range \[([^,]+), ([^\]]+)\]")
  out = []
  for raw in _section(prompt, "Outcomes").splitlines():
    m = line.match(raw)
    if m:
      aliases = tuple(a.strip() for a in m.group(3).split(",")) if m.group(3) else ()
      out.append(Outcome(m.group(1), m.group(2), aliases, float(m.group(4)),
                         float(m.group(5))))
  if not out:
    raise ValueError("not a LILO prompt: no outcomes listed")
  return out


def _read_rows(block: str) -> list[list[str]]:
  rows = []
  for raw in block.splitlines():
    raw = raw.strip()
    if raw.startswith("|") and not raw.startswith("|---"):
      rows.append([c.strip() for c in raw.strip("|").split("|")])
  return rows[1:]   # without the header


def _read_feedback(prompt: str) -> list[str]:
  body = _section(prompt, "What the DM has told us")
  if body.strip() == NO_FEEDBACK:
    return []
  return [ln[2:] for ln in body.splitlines() if ln.startswith("- ")]


def read_translator_prompt(prompt: str) -> TranslatorRequest:
  """The contents of a prompt written by `translator_prompt` (a ValueError if the text
  is not one).

  Example:
    >>> text = translator_prompt("dtlz2", [], {3: [0.1] * 4, 5: [0.2] * 4}, (5, 3))
    >>> [arm for arm, _ in read_translator_prompt(text).pair]
    [5, 3]
  """
  outcomes = _read_outcomes(prompt)
  arms = {int(r[0]): np.asarray(r[1:], float)
          for r in _read_rows(_section(prompt, "Results evaluated so far"))}
  pair_rows = [r for r in _read_rows(_section(prompt, "Your task")) if r[0].startswith("option_")]
  if len(pair_rows) != 2:
    raise ValueError("not a translator prompt: the pair table needs two options")
  pair = tuple((int(r[1]), np.asarray(r[2:], float)) for r in pair_rows)
  return TranslatorRequest(outcomes, arms, _read_feedback(prompt), pair)


def read_optimizer_prompt(prompt: str) -> OptimizerRequest:
  """The contents of a prompt written by `optimizer_prompt` (a ValueError if the text is
  not one).

  Example:
    >>> text = optimizer_prompt("dtlz2", ["hi"], np.zeros((1, 8)), np.ones((1, 4)), 3)
    >>> read_optimizer_prompt(text).X.shape
    (1, 8)
  """
  outcomes = _read_outcomes(prompt)
  m = re.search(r"You tune the (\d+) parameters", prompt)
  n = re.search(r"Propose (\d+) new parameter vectors", prompt)
  if m is None or n is None:
    raise ValueError("not an optimizer prompt")
  d, k = int(m.group(1)), len(outcomes)
  rows = _read_rows(_section(prompt, "Results evaluated so far"))
  values = np.asarray([r[1:] for r in rows], float).reshape(len(rows), d + k)
  return OptimizerRequest(outcomes, values[:, :d], values[:, d:], _read_feedback(prompt),
                          int(n.group(1)))
