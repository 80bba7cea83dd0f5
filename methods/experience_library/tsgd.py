"""Textual stochastic gradient descent (TSGD) on the experience library.

One step on library L (capacity K) with minibatch B and a fresh held-out minibatch H:

  1. solve B with L in context; F = the failures;
  2. the reflector reads F and writes a textual gradient: operations o_1..o_m
     (Add / Edit / Delete / Replace, `library.Operation`);
  3. each o_j, in order, is applied to the current L' = o_j(L) and accepted only if it
     passes dual verification:
       local:    acc(L', F) > 0             -- it fixes some failure that triggered it,
       held-out: acc(L', H) >= acc(L, H)    -- it does not lower held-out accuracy;
  4. at capacity an Add is refused (`library.apply`): it must come as a Replace
     (Add + Delete) or as a merge through Edit, so |L| <= K throughout.

Ablations: `verify=False` accepts every valid operation; `kinds=("add",)` is TSGD
without Delete/Edit. `audit` measures each accepted operation's held-out effect
acc(L', A) - acc(L, A) on an independent minibatch A, for every variant alike (it
decides nothing): claim 3 counts the accepted operations with a negative effect.

Compared with ExpeL (insights updated by AGREE / REMOVE / EDIT / ADD with importance
counts, no test of an update before it lands) and SEO-style stochastic validation of
prompt edits (an edit kept if a sampled validation score improves), TSGD gates every
operation twice: on the failures that caused it and on fresh held-out problems.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from methods.experience_library import library as library_lib
from methods.experience_library import problems as problems_lib
from methods.experience_library import roles as roles_lib

Problems = Sequence[problems_lib.Problem]


class TSGDConfig(NamedTuple):
  """verify: dual verification on; kinds: the operation kinds TSGD may apply."""
  verify: bool = True
  kinds: tuple[str, ...] = library_lib.KINDS


class StepRecord(NamedTuple):
  """What one step did: minibatch accuracy before the update, failures, operations
  proposed / accepted, rejections by reason, and the audited effect of each accepted
  operation (empty without an audit batch)."""
  batch_accuracy: float
  failures: int
  proposed: int
  accepted: tuple[str, ...]
  rejected: dict[str, int]
  audit_deltas: tuple[float, ...]

  def to_json(self) -> dict:
    return {**self._asdict(), "accepted": list(self.accepted),
            "audit_deltas": list(self.audit_deltas)}


def _retarget(lib: library_lib.Library, op: library_lib.Operation,
              original: Sequence[str]) -> library_lib.Operation | None:
  """`op` (indexed into `original`) re-indexed into `lib`; None if its rule is gone."""
  if op.kind == "add":
    return op
  target = original[op.index]
  if target not in lib.rules:
    return None
  return op._replace(index=lib.rules.index(target))


def step(lib: library_lib.Library, roles: roles_lib.Roles, batch: Problems,
         heldout: Problems, config: TSGDConfig = TSGDConfig(),
         audit: Problems = ()) -> tuple[library_lib.Library, StepRecord]:
  """One TSGD step (module docstring): the updated library and what happened.

  Example:
    >>> lib = library.new_library(20, roles.max_rule_chars)
    >>> lib, record = step(lib, roles, batch, heldout)
  """
  answers, correct = roles_lib.solve(roles, [lib.rules] * len(batch), batch)
  failures = [(p, a) for p, a, ok in zip(batch, answers, correct) if not ok]
  ops = roles_lib.reflect(roles, lib.rules, lib.capacity, failures)
  failed = [p for p, _ in failures]
  original, rejected, accepted, deltas = lib.rules, Counter(), [], []
  # The current library's held-out and audit accuracies are only needed when there is an
  # operation to check (each costs a batch of solver calls, an LLM's at paper scale).
  heldout_acc = roles_lib.accuracy(roles, lib.rules, heldout) if config.verify and ops else None
  audit_acc = roles_lib.accuracy(roles, lib.rules, audit) if audit and ops else None
  for op in ops:
    if op.kind not in config.kinds:
      rejected["kind"] += 1
      continue
    op = _retarget(lib, op, original)
    if op is None:
      rejected["stale"] += 1
      continue
    try:
      edited = library_lib.apply(lib, op)
    except ValueError:
      rejected["invalid"] += 1
      continue
    if edited.rules == lib.rules:
      rejected["no_change"] += 1
      continue
    if config.verify:
      if roles_lib.accuracy(roles, edited.rules, failed) == 0.0:
        rejected["local"] += 1
        continue
      edited_acc = roles_lib.accuracy(roles, edited.rules, heldout)
      if edited_acc < heldout_acc:
        rejected["heldout"] += 1
        continue
      heldout_acc = edited_acc
    if audit:
      after = roles_lib.accuracy(roles, edited.rules, audit)
      deltas.append(after - audit_acc)
      audit_acc = after
    lib = edited
    accepted.append(op.describe())
  record = StepRecord(sum(correct) / max(len(correct), 1), len(failures), len(ops),
                      tuple(accepted), dict(rejected), tuple(deltas))
  return lib, record
