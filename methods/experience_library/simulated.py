"""Simulated roles for CPU-scale runs: an explicit solver and an explicit rule inducer.

Both are `TextModel`s: they read the same prompts an LLM gets (`prompts.py`) and write
replies in the same format, so TSGD and every baseline run unchanged against them or
against a real LLM. Their behaviour is an explicit, stated model (docs/experience_library.md);
every report row produced with them says "simulated roles".

**Solver.** It reads the numbered rules and the problem from its prompt. Let R be the
rules that apply to the problem (its family, and its first operand for an over-specific
rule) and n_d the number of other rules in context (distractors). With probability
(1 - eps)^n_d it attends to R: if R is non-empty it answers with the first rule of R
(a wrong rule gives a wrong answer), else with the problem's natural reading. Otherwise
(distracted) it answers with the natural reading. Then with probability `slip` it makes
an arithmetic slip (answer + 1). Problems it cannot read get "Answer: unknown".
Its two uniform draws (attention, slip) are a hash of (seed, problem text), plus a call
counter at temperature > 0: at temperature 0 a problem always gets the same draws, as
greedy decoding is deterministic, and they are common to every library, so an edit
changes an answer only through the rules it changes and the distractor count.

**Reflector (inducer).** For each failed generated problem it enumerates the rule
grammar's hypotheses for the problem's family that reproduce every gold answer of that
family among the failures it was shown, and proposes one of them at random -- a
hypothesis consistent with one example may still be wrong in general (the operator
family has 36 hypotheses; one example leaves about 4). On top of that, stated errors:
with probability `p_wrong` it proposes a random hypothesis of the grammar, with
`p_over` an over-specific rule ("when x is 7: ..."), with `p_duplicate` it re-adds a
rule already in the library. If the library has a rule for the family whose answer is
already right for all shown examples, it proposes nothing (the failure was a slip or
a distraction). If it has a wrong one, it proposes EDIT of that rule; else ADD, or at
capacity REPLACE of a random rule about a family not among the failures. Two rules
about one family get a DELETE of the later one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from common import llm
from methods.experience_library import problems as problems_lib
from methods.experience_library import prompts


def _rng(seed: int, *parts: str) -> np.random.Generator:
  digest = hashlib.sha256("\x00".join((str(seed), *parts)).encode()).digest()
  return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class _Simulated:
  """The request handling the simulated roles share (checks, context, stop strings)."""

  def __init__(self, seed: int, context_chars: int):
    if isinstance(context_chars, bool) or not isinstance(context_chars, int) or context_chars < 1:
      raise ValueError(f"context_chars must be an int >= 1, got {context_chars!r}")
    self.seed, self.context = seed, context_chars
    self._calls = 0

  def complete(self, prompts_: Sequence[str], *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] = ()) -> list[str]:
    """One reply per prompt (the `TextModel` protocol; a token is one character)."""
    prompts_ = llm.check_request(prompts_, max_tokens, temperature, stop)
    for i, p in enumerate(prompts_):
      if len(p) + max_tokens > self.context:
        raise ValueError(f"prompts[{i}] has {len(p)} characters; with max_tokens={max_tokens} "
                         f"that exceeds the simulated role's context of {self.context}")
    call = "0" if temperature == 0 else str(self._calls)
    self._calls += 1
    return [llm.apply_stop(self._reply(p, call)[:max_tokens], stop) for p in prompts_]

  def _reply(self, prompt: str, call: str) -> str:
    raise NotImplementedError


class SimulatedSolver(_Simulated):
  """The explicit solver (module docstring). eps: distraction per irrelevant rule;
  slip: arithmetic slip probability."""

  def __init__(self, *, eps: float = 0.01, slip: float = 0.03, seed: int = 0,
               context_chars: int = 8192):
    super().__init__(seed, context_chars)
    for name, value in (("eps", eps), ("slip", slip)):
      if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    self.eps, self.slip = eps, slip

  def answer(self, rules: Sequence[str], problem: str, rng: np.random.Generator) -> str:
    read = problems_lib.read_problem(problem)
    if read is None:
      return "unknown"
    family, kind, inputs = read.family, read.kind, read.inputs
    parsed = [problems_lib.parse_rule(r) for r in rules]
    relevant = [r for r in parsed if r is not None and problems_lib.applies(r, family, inputs)]
    distractors = len(rules) - len(relevant)
    value = problems_lib.natural_answer(kind, inputs)
    attend, slip = rng.random(2)
    if relevant and attend < (1.0 - self.eps) ** distractors:
      rule = relevant[0]
      if rule.kind == kind:
        value = problems_lib.evaluate(kind, rule.params, inputs)
    if slip < self.slip:
      value += 1
    return str(value)

  def _reply(self, prompt: str, call: str) -> str:
    rules, problem = prompts.read_solver_prompt(prompt)
    return f"Answer: {self.answer(rules, problem, _rng(self.seed, call, problem))}"


def hypotheses(kind: str) -> list[tuple[int, ...]]:
  """Every parameter tuple of the grammar for a family kind (the inducer's search space)."""
  if kind == "operator":
    return [(a, b) for a in range(1, 7) for b in range(1, 7)]
  if kind == "unit":
    return [(k, u) for k in range(2, 13) for u in range(len(problems_lib.BASE_UNITS))]
  return [(p,) for p in range(5, 14)]


class SimulatedReflector(_Simulated):
  """The explicit inducer (module docstring), with its stated error rates."""

  def __init__(self, *, p_wrong: float = 0.1, p_over: float = 0.1, p_duplicate: float = 0.05,
               seed: int = 0, context_chars: int = 1 << 20):
    super().__init__(seed, context_chars)
    for name, value in (("p_wrong", p_wrong), ("p_over", p_over), ("p_duplicate", p_duplicate)):
      if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    if p_wrong + p_over + p_duplicate > 1.0:
      raise ValueError(f"p_wrong + p_over + p_duplicate must be <= 1, got "
                       f"{p_wrong + p_over + p_duplicate}")
    self.p_wrong, self.p_over, self.p_duplicate = p_wrong, p_over, p_duplicate

  def _induce(self, family: str, kind: str, examples: list[tuple[tuple[int, ...], int]],
              fixed: tuple[int, ...], rng: np.random.Generator) -> problems_lib.ParsedRule:
    """A hypothesis consistent with the examples; `fixed` pins a unit's base unit."""
    space = [h for h in hypotheses(kind) if not fixed or h[1:] == fixed]
    consistent = [h for h in space
                  if all(problems_lib.evaluate(kind, h, x) == y for x, y in examples)]
    pool = consistent or space
    return problems_lib.ParsedRule(family, kind, pool[rng.integers(len(pool))])

  def _propose(self, family: str, cases: list, rules: list[str],
               rng: np.random.Generator) -> tuple[str, bool] | None:
    """(rule text, whether it is a duplicate to re-add) for one failed family; None if
    its rule is already right."""
    read = cases[0][0]
    kind, examples = read.kind, [(r.inputs, y) for r, y in cases]
    fixed = () if read.base_unit is None else (read.base_unit,)
    own = [problems_lib.parse_rule(r) for r in rules]
    own = [r for r in own if r is not None and r.family == family]
    if own and own[0].only_x is None and all(
        problems_lib.evaluate(kind, own[0].params, x) == y for x, y in examples):
      return None  # the rule is right: the failure was a slip or a distraction
    u = rng.random()
    if u < self.p_duplicate and rules:
      return rules[rng.integers(len(rules))], True
    rule = self._induce(family, kind, examples, fixed, rng)
    if u < self.p_duplicate + self.p_wrong:
      space = [h for h in hypotheses(kind) if not fixed or h[1:] == fixed]
      rule = rule._replace(params=space[rng.integers(len(space))])
    elif u < self.p_duplicate + self.p_wrong + self.p_over:
      rule = rule._replace(only_x=examples[0][0][0])
    return problems_lib.rule_text(rule), False

  def _reply(self, prompt: str, call: str) -> str:
    rng = _rng(self.seed, call, prompt)
    rules, capacity, failures = prompts.read_reflector_prompt(prompt)
    parsed = [problems_lib.parse_rule(r) for r in rules]
    by_family: dict[str, list] = {}
    for problem, _, gold in failures:
      read = problems_lib.read_problem(problem)
      if read is not None and gold.lstrip("-").isdigit():
        by_family.setdefault(read.family, []).append((read, int(gold)))
    lines, size = [], len(rules)
    for family, cases in by_family.items():
      proposal = self._propose(family, cases, rules, rng)
      if proposal is None:
        continue
      text, duplicate = proposal
      own = [i for i, r in enumerate(parsed) if r is not None and r.family == family]
      if duplicate:
        lines.append(f"ADD: {text}")
      elif own:
        lines.append(f"EDIT {own[0] + 1}: {text}")
        lines += [f"DELETE {extra + 1}" for extra in own[1:]]
      elif capacity is not None and size >= capacity:
        others = [i for i, r in enumerate(parsed) if r is None or r.family not in by_family]
        if others:
          lines.append(f"REPLACE {others[rng.integers(len(others))] + 1}: {text}")
      else:
        lines.append(f"ADD: {text}")
        size += 1
    return "\n".join(lines) + "\n" if lines else "No update.\n"
