"""The role prompts: every method (TSGD, its ablations and the baselines) and every
backend (an HTTP LLM, a local checkpoint, the simulated roles) sees exactly these.

The solver gets the current rules and one problem and ends with "Answer: <answer>".
The reflector gets the rules, the capacity, and a minibatch's failures (problem, the
solver's answer, the gold answer) -- the "textual gradient" it writes is a list of
operations, one per line, in the format `library.parse_operations` reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from methods.experience_library import library as library_lib

SOLVER = """You solve short problems. These rules from past experience may help:
{rules}

Problem: {problem}
Reply with your reasoning, then a last line "Answer: <final answer>".
"""

REFLECTOR = """You maintain a library of at most {capacity} rules that a solver reads before \
each problem. It now holds {size} rules:
{rules}

The solver got these problems wrong:
{failures}

For each failure, say what went wrong and which rule would have fixed it. Then write \
the library updates, one per line, in exactly one of these forms (i is a rule number):
ADD: <rule>
EDIT i: <rewritten rule>
DELETE i
REPLACE i: <rule>
Use ADD only while the library has fewer than {capacity} rules; at capacity, REPLACE a \
rule or merge into one with EDIT. Keep each rule one general sentence.
Updates:
"""

FAILURE = "- Problem: {problem}\n  Solver's answer: {answer}\n  Correct answer: {gold}"

SOLVER_STOP = ("\nProblem:",)


def solver_prompt(rules: Sequence[str], problem: str) -> str:
  """The solver's prompt for one problem with `rules` in context."""
  return SOLVER.format(rules=library_lib.render(rules), problem=problem)


def reflector_prompt(rules: Sequence[str], capacity: int | None,
                     failures: Sequence[tuple[str, str, str]]) -> str:
  """The reflector's prompt: the library and (problem, solver's answer, gold) failures.
  `capacity` None is an unbounded memory (append-only baselines)."""
  shown = "\n".join(FAILURE.format(problem=p, answer=a or "(none)", gold=g)
                    for p, a, g in failures)
  return REFLECTOR.format(capacity="unlimited" if capacity is None else capacity,
                          size=len(rules), rules=library_lib.render(rules), failures=shown)


def read_solver_prompt(prompt: str) -> tuple[list[str], str]:
  """(rules, problem) of a prompt written by `solver_prompt` (the simulated solver's
  reading of its context)."""
  head, _, tail = prompt.partition("\nProblem: ")
  problem = tail.split("\n", 1)[0].strip()
  return library_lib.parse_rules(head), problem


def read_reflector_prompt(prompt: str) -> tuple[list[str], int | None,
                                                list[tuple[str, str, str]]]:
  """(rules, capacity, failures) of a prompt written by `reflector_prompt`."""
  first, _, rest = prompt.partition("\n")
  words = first.split("at most ", 1)[1].split(" ", 1)[0]
  capacity = None if words == "unlimited" else int(words)
  rules_text, _, failures_text = rest.partition("\nThe solver got these problems wrong:\n")
  failures_text = failures_text.split("\n\nFor each failure", 1)[0]
  failures = []
  for block in failures_text.split("- Problem: ")[1:]:
    lines = block.split("\n")
    answer = lines[1].split("Solver's answer: ", 1)[1]
    failures.append((lines[0].strip(), "" if answer == "(none)" else answer,
                     lines[2].split("Correct answer: ", 1)[1].strip()))
  return library_lib.parse_rules(rules_text), capacity, failures
