"""The baselines, through the same roles and prompts as TSGD.

* zero-shot: the solver with an empty library (`ZERO_SHOT`, nothing to learn);
* append-only memory (ExpeL / Dynamic-Cheatsheet style): every rule the reflector
  proposes for a minibatch's failures is appended, with no capacity and no
  verification; the solver sees the newest rules that fit its context;
* static retrieval (RAG): every proposed rule is stored (exact duplicates once); each
  problem is solved with the top-k stored rules by TF-IDF cosine similarity to its text.

Both memories are tuples of rules, so a run can be checkpointed as JSON. In both, the
reflector sees the failures but not the memory (it writes experiences, it does not edit).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from methods.experience_library import problems as problems_lib
from methods.experience_library import roles as roles_lib
from methods.experience_library import tsgd

Problems = Sequence[problems_lib.Problem]
ZERO_SHOT: tuple[str, ...] = ()


def _collect(roles: roles_lib.Roles, rule_lists: Sequence[Sequence[str]], batch: Problems
             ) -> tuple[list[str], float, int]:
  """(proposed rules, minibatch accuracy, failures) of one reflection round."""
  answers, correct = roles_lib.solve(roles, rule_lists, batch)
  failures = [(p, a) for p, a, ok in zip(batch, answers, correct) if not ok]
  ops = roles_lib.reflect(roles, (), None, failures)
  rules = [" ".join(op.rule.split()) for op in ops if op.rule.strip()]
  rules = [r for r in rules if len(r) <= roles.max_rule_chars]
  return rules, sum(correct) / max(len(correct), 1), len(failures)


def append_only_step(memory: tuple[str, ...], roles: roles_lib.Roles, batch: Problems,
                     audit: Problems = ()) -> tuple[tuple[str, ...], tsgd.StepRecord]:
  """Append every proposed rule. The record's audit delta is the step's whole effect."""
  rules, acc, n_failed = _collect(roles, [memory] * len(batch), batch)
  new = memory + tuple(rules)
  deltas = ()
  if audit and rules:
    deltas = (roles_lib.accuracy(roles, new, audit) - roles_lib.accuracy(roles, memory, audit),)
  return new, tsgd.StepRecord(acc, n_failed, len(rules), tuple(f"ADD: {r}" for r in rules), {},
                              deltas)


def retrieve(store: Sequence[str], problems: Problems, k: int) -> list[list[str]]:
  """For each problem, the `k` stored rules most similar to its text (TF-IDF cosine over
  word tokens; ties keep the newer rule first), in decreasing similarity.

  Example:
    >>> retrieve(["1 florb = 7 grams", "x zorp y = (x + y) mod 10"],
    ...          [Problem("Compute 1 zorp 2.", "3")], k=1)
    [['x zorp y = (x + y) mod 10']]
  """
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k!r}")
  if not store:
    return [[] for _ in problems]
  vectorizer = TfidfVectorizer(token_pattern=r"[A-Za-z]{2,}")
  try:
    rules = vectorizer.fit_transform(store)
  except ValueError:        # no word in any rule
    return [[] for _ in problems]
  scores = (vectorizer.transform([p.text for p in problems]) @ rules.T).toarray()
  newest_first = np.arange(len(store))[::-1]
  out = []
  for row in scores:
    order = newest_first[np.argsort(-row[newest_first], kind="stable")]
    out.append([store[i] for i in order[:k] if row[i] > 0])
  return out


def retrieval_step(store: tuple[str, ...], roles: roles_lib.Roles, batch: Problems, k: int,
                   audit: Problems = ()) -> tuple[tuple[str, ...], tsgd.StepRecord]:
  """Solve with retrieved rules, then store every new proposed rule."""
  rules, acc, n_failed = _collect(roles, retrieve(store, batch, k), batch)
  new = store + tuple(dict.fromkeys(r for r in rules if r not in store))
  deltas = ()
  if audit and len(new) > len(store):
    before = roles_lib.solve(roles, retrieve(store, audit, k), audit)[1]
    after = roles_lib.solve(roles, retrieve(new, audit, k), audit)[1]
    deltas = ((sum(after) - sum(before)) / len(audit),)
  return new, tsgd.StepRecord(acc, n_failed, len(rules),
                              tuple(f"ADD: {r}" for r in new[len(store):]), {}, deltas)
