"""The experience library: natural-language rules under a capacity budget K.

The library is TSGD's parameter. An update is one `Operation`:

    Add(r):          L -> L + [r]                  (only while |L| < K)
    Edit(i, r):      L -> L[:i] + [r] + L[i+1:]    (also how two rules merge at capacity)
    Delete(i):       L -> L[:i] + L[i+1:]
    Replace(i, r):   Delete(i) then Add(r)         (how an Add is made at capacity)

so |L| <= K holds after every operation (`apply` refuses one that would break it).
Rules are numbered from 1 in prompts and in the reflector's operations, from 0 here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

KINDS = ("add", "edit", "delete", "replace")


class Operation(NamedTuple):
  """One library update. `index` is 0-based (unused by "add"); `rule` is unused by
  "delete"."""
  kind: str
  rule: str = ""
  index: int = -1

  def describe(self) -> str:
    """The operation in the reflector's output format (1-based indices)."""
    if self.kind == "add":
      return f"ADD: {self.rule}"
    if self.kind == "delete":
      return f"DELETE {self.index + 1}"
    return f"{self.kind.upper()} {self.index + 1}: {self.rule}"


class Library(NamedTuple):
  """An ordered tuple of rules with capacity `capacity` and rules of at most
  `max_rule_chars` characters (the solver's context, less its prompt)."""
  rules: tuple[str, ...]
  capacity: int
  max_rule_chars: int

  @property
  def full(self) -> bool:
    return len(self.rules) >= self.capacity


def check_rule(rule: str, max_rule_chars: int, name: str = "rule") -> str:
  """`rule` stripped; a one-line ValueError if it is not a non-empty line that fits."""
  if not isinstance(rule, str) or not rule.strip():
    raise ValueError(f"{name} must be a non-empty string, got {rule!r}")
  rule = " ".join(rule.split())
  if len(rule) > max_rule_chars:
    raise ValueError(f"{name} has {len(rule)} characters, longer than the solver's context "
                     f"allows for one rule ({max_rule_chars}): {rule[:40]!r}...")
  return rule


def new_library(capacity: int, max_rule_chars: int, rules: Sequence[str] = ()) -> Library:
  """A library holding `rules` (checked), with capacity K = `capacity`.

  Example:
    >>> lib = new_library(2, 200, ["x zorp y = (2*x + y) mod 10"])
    >>> len(apply(lib, Operation("add", "1 florb = 7 grams")).rules), lib.full
    (2, False)
  """
  for name, value in (("capacity K", capacity), ("max_rule_chars", max_rule_chars)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  if len(rules) > capacity:
    raise ValueError(f"{len(rules)} initial rules exceed the capacity K={capacity}")
  checked = tuple(check_rule(r, max_rule_chars, f"rules[{i}]") for i, r in enumerate(rules))
  return Library(checked, capacity, max_rule_chars)


def apply(library: Library, op: Operation) -> Library:
  """The library after `op`; a one-line ValueError if `op` is malformed, names a rule
  that does not exist, or would exceed the capacity."""
  rules, n = list(library.rules), len(library.rules)
  if op.kind not in KINDS:
    raise ValueError(f"operation kind must be one of {KINDS}, got {op.kind!r}")
  if op.kind != "add" and not 0 <= op.index < n:
    raise ValueError(f"{op.kind} names rule {op.index + 1}, but the library has {n} rules")
  if op.kind != "delete":
    rule = check_rule(op.rule, library.max_rule_chars)
  if op.kind == "add":
    if library.full:
      raise ValueError(f"add at capacity K={library.capacity}: an Add must come with a "
                       "Delete (replace) or merge through an Edit")
    rules.append(rule)
  elif op.kind == "edit":
    rules[op.index] = rule
  elif op.kind == "delete":
    del rules[op.index]
  else:
    del rules[op.index]
    rules.append(rule)
  return library._replace(rules=tuple(rules))


def render(rules: Sequence[str]) -> str:
  """Rules as the numbered list the prompts show ("1. ...\\n2. ..."), or "(none)"."""
  if not rules:
    return "(none)"
  return "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1))


def parse_rules(text: str) -> list[str]:
  """The rules of a numbered list written by `render` (the inverse of `render`)."""
  return [m.group(1).strip() for m in re.finditer(r"^\d+\.\s+(.+)$", text, re.M)]


_OP_LINE = re.compile(r"^[ \t]*(ADD|EDIT|DELETE|REPLACE)\b[ \t]*(\d+)?[ \t]*:?[ \t]*(.*)$",
                      re.I | re.M)


def parse_operations(text: str, library_size: int) -> list[Operation]:
  """The operations in a reflector's reply, one per line:

      ADD: <rule>   |   EDIT <i>: <rule>   |   DELETE <i>   |   REPLACE <i>: <rule>

  with 1-based i. Lines that are not operations, or name no valid rule, are skipped
  (an LLM reflector's reply is untrusted text).

  Example:
    >>> parse_operations("EDIT 2: x zorp y = (x + y) mod 10\\nDELETE 9", 3)
    [Operation(kind='edit', rule='x zorp y = (x + y) mod 10', index=1)]
  """
  ops = []
  for m in _OP_LINE.finditer(text):
    kind, number, rule = m.group(1).lower(), m.group(2), m.group(3).strip()
    if kind == "add":
      if rule:
        ops.append(Operation("add", rule))
      continue
    if number is None or not 1 <= int(number) <= library_size:
      continue
    if kind == "delete":
      ops.append(Operation("delete", index=int(number) - 1))
    elif rule:
      ops.append(Operation(kind, rule, int(number) - 1))
  return ops
