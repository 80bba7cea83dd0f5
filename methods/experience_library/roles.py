"""The two roles every method shares -- a solver and a reflector, each a `TextModel` --
and the calls TSGD and the baselines make through them.

`solve` puts each problem's rules in the solver's prompt (`prompts.solver_prompt`),
keeping the newest rules that fit the solver's context, and checks the final answers;
`reflect` shows the reflector a minibatch's failures and parses the operations it
proposes (`library.parse_operations`). Both send one batched `complete` call, so an
HTTP backend or a local checkpoint decodes the whole minibatch together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from absl import logging

from common import llm
from methods.experience_library import library as library_lib
from methods.experience_library import problems as problems_lib
from methods.experience_library import prompts

# Characters reserved for the problem in the solver's prompt when sizing rules.
PROBLEM_ALLOWANCE = 256


class Roles(NamedTuple):
  """The solver and reflector models and their budgets. `context_chars` is the
  solver's context in characters (a byte-level model's tokens; a conservative bound
  for subword tokenizers)."""
  solver: llm.TextModel
  reflector: llm.TextModel
  context_chars: int
  solver_max_tokens: int = 64
  reflector_max_tokens: int = 256

  @property
  def max_rule_chars(self) -> int:
    """The longest rule one solver prompt can hold beside its template and problem."""
    return max_rule_chars(self.context_chars, self.solver_max_tokens)


def max_rule_chars(context_chars: int, solver_max_tokens: int) -> int:
  """The longest rule that fits a solver prompt of `context_chars` with room for a
  problem of `PROBLEM_ALLOWANCE` characters and a reply of `solver_max_tokens`."""
  return (context_chars - solver_max_tokens - PROBLEM_ALLOWANCE
          - len(prompts.solver_prompt(["x"], "")))


def check_roles(roles: Roles) -> Roles:
  """`roles` if the budgets leave room for a rule; a one-line ValueError otherwise."""
  for name in ("context_chars", "solver_max_tokens", "reflector_max_tokens"):
    value = getattr(roles, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  if roles.max_rule_chars < 1:
    raise ValueError(f"context_chars={roles.context_chars} leaves no room for a rule beside "
                     f"the solver prompt and max_tokens={roles.solver_max_tokens}")
  return roles


def fit_rules(rules: Sequence[str], problem: str, roles: Roles) -> list[str]:
  """The newest rules (from the end of `rules`) whose prompt fits the solver context."""
  budget = roles.context_chars - roles.solver_max_tokens - len(prompts.solver_prompt([], problem))
  kept, used = [], 0
  for i in range(len(rules) - 1, -1, -1):
    cost = len(rules[i]) + len(str(len(rules))) + 3
    if used + cost > budget:
      break
    kept.append(rules[i])
    used += cost
  return kept[::-1]


def solve(roles: Roles, rule_lists: Sequence[Sequence[str]],
          problems: Sequence[problems_lib.Problem]) -> tuple[list[str], list[bool]]:
  """(final answers, correct flags): problem i solved with `rule_lists[i]` in context."""
  if not problems:
    return [], []
  texts = [prompts.solver_prompt(fit_rules(rules, p.text, roles), p.text)
           for rules, p in zip(rule_lists, problems)]
  replies = roles.solver.complete(texts, max_tokens=roles.solver_max_tokens,
                                  stop=prompts.SOLVER_STOP)
  answers = [problems_lib.extract_answer(r) for r in replies]
  return answers, [problems_lib.is_correct(a, p.answer) for a, p in zip(answers, problems)]


def accuracy(roles: Roles, rules: Sequence[str], problems: Sequence[problems_lib.Problem]
             ) -> float:
  """The solver's accuracy on `problems` with the same `rules` for each."""
  _, correct = solve(roles, [rules] * len(problems), problems)
  return sum(correct) / max(len(correct), 1)


def reflect(roles: Roles, rules: Sequence[str], capacity: int | None,
            failures: Sequence[tuple[problems_lib.Problem, str]]
            ) -> list[library_lib.Operation]:
  """The operations the reflector proposes for (problem, solver's answer) failures.

  The prompt shows as many failures as fit in `context_chars` with the reply; none
  (nothing to reflect on, or not even one failure fits beside the rules) gives []."""
  shown = [(p.text, a, p.answer) for p, a in failures]
  budget = roles.context_chars - roles.reflector_max_tokens
  while shown and len(prompts.reflector_prompt(rules, capacity, shown)) > budget:
    shown.pop()
  if not shown:
    if failures:
      logging.warning("reflector prompt: %d rules leave no room for a failure in %d "
                      "characters; no reflection this step", len(rules), roles.context_chars)
    return []
  prompt = prompts.reflector_prompt(rules, capacity, shown)
  reply = roles.reflector.complete([prompt], max_tokens=roles.reflector_max_tokens)[0]
  return library_lib.parse_operations(reply, len(rules))
