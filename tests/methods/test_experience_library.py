"""Tests of methods/experience_library: library operations and the capacity invariant,
the problem generator against brute force, the rule grammar, answer checking, the JSONL
loader, the simulated roles' stated model, retrieval, and dual verification on a
constructed case."""

import json

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

from methods import experience_library as el
from methods.experience_library import library as L
from methods.experience_library import problems as P
from methods.experience_library import prompts


# ------------------------------------------------------------------------ the library


def test_operations_do_what_they_say():
  lib = el.new_library(3, 100, ["a rule", "b rule"])
  assert el.apply(lib, el.Operation("add", "c rule")).rules == ("a rule", "b rule", "c rule")
  assert el.apply(lib, el.Operation("edit", "B  rule\n2", 1)).rules == ("a rule", "B rule 2")
  assert el.apply(lib, el.Operation("delete", index=0)).rules == ("b rule",)
  assert el.apply(lib, el.Operation("replace", "z", 0)).rules == ("b rule", "z")
  full = el.apply(lib, el.Operation("add", "c rule"))
  with pytest.raises(ValueError, match="add at capacity K=3: an Add must come with a Delete"):
    el.apply(full, el.Operation("add", "d rule"))
  with pytest.raises(ValueError, match="edit names rule 4, but the library has 3 rules"):
    el.apply(full, el.Operation("edit", "x", 3))
  with pytest.raises(ValueError, match="longer than the solver's context allows"):
    el.apply(lib, el.Operation("add", "x" * 101))


OPS = st.lists(st.tuples(st.sampled_from(L.KINDS), st.integers(-1, 6),
                         st.text("abc ", min_size=0, max_size=6)), max_size=40)


@hypothesis.given(capacity=st.integers(1, 5), ops=OPS)
@hypothesis.settings(max_examples=200, deadline=None)
def test_capacity_invariant_and_semantics_over_random_operation_sequences(capacity, ops):
  lib, model = el.new_library(capacity, 8), []
  for kind, index, rule in ops:
    op = el.Operation(kind, rule, index)
    try:
      lib = el.apply(lib, op)
    except ValueError:
      continue                      # refused: the library is unchanged
    finally:
      assert len(lib.rules) <= capacity
    rule = " ".join(rule.split())
    if kind == "add":
      model.append(rule)
    elif kind == "edit":
      model[index] = rule
    elif kind == "delete":
      del model[index]
    else:
      del model[index]
      model.append(rule)
    assert list(lib.rules) == model
  assert list(lib.rules) == model


def test_reflector_replies_parse_into_operations():
  reply = ("The rule was wrong.\nEDIT 2: x zorp y = (x + y) mod 10\nADD: 1 florb = 7 grams\n"
           "delete 1\nDELETE 7\nREPLACE 1: new\nADD:\nNo update.")
  ops = el.parse_operations(reply, 3)
  assert ops == [el.Operation("edit", "x zorp y = (x + y) mod 10", 1),
                 el.Operation("add", "1 florb = 7 grams"), el.Operation("delete", index=0),
                 el.Operation("replace", "new", 0)]
  assert el.parse_operations("\n".join(op.describe() for op in ops), 3) == ops
  assert L.parse_rules(el.render(["a", "1 b"])) == ["a", "1 b"] and el.render([]) == "(none)"


# ------------------------------------------------------------- problems and grammar


def _brute_force(family: P.Family, inputs) -> int:
  """The answer by reading the rule's own text / counting days one at a time."""
  if family.kind == "operator":
    expr = P.rule_text(family).split(" = ", 1)[1].replace("mod", "%")
    return eval(expr, {}, {"x": inputs[0], "y": inputs[1]})  # pylint: disable=eval-used
  if family.kind == "unit":
    return sum(family.params[0] for _ in range(inputs[0]))
  day = inputs[0]
  for _ in range(inputs[1]):
    day = 0 if day == family.params[0] - 1 else day + 1
  return day


def test_generated_answers_are_correct_and_problems_read_back():
  families = el.make_families(12, seed=3)
  assert len({f.name for f in families}) == 12
  assert {f.kind for f in families} == set(P.FAMILY_KINDS)
  problems = el.sample_problems(families, P.family_weights(12, 1.0), 400,
                                np.random.default_rng(0))
  by_name = {f.name: f for f in families}
  for p in problems:
    family = by_name[p.family]
    assert p.answer == str(_brute_force(family, p.inputs)), p
    read = P.read_problem(p.text)
    assert (read.family, read.kind, read.inputs) == (family.name, family.kind, p.inputs)
    parsed = P.parse_rule(P.rule_text(family))
    assert (parsed.family, parsed.kind, parsed.params) == (family.name, family.kind,
                                                           family.params)
  # Without the rule, the natural reading is mostly wrong (the rules matter).
  natural = [str(P.natural_answer(by_name[p.family].kind, p.inputs)) == p.answer
             for p in problems]
  assert np.mean(natural) < 0.2
  assert P.parse_rule("always double-check your work") is None


def test_over_specific_rules_apply_to_their_operand_only():
  rule = P.parse_rule("when x is 7: x zorp y = (2*x + 3*y) mod 10")
  assert rule.only_x == 7 and P.applies(rule, "zorp", (7, 1))
  assert not P.applies(rule, "zorp", (6, 1)) and not P.applies(rule, "blick", (7, 1))
  assert P.rule_text(rule) == "when x is 7: x zorp y = (2*x + 3*y) mod 10"


@pytest.mark.parametrize("reply, answer", [
    ("7*2 = 14, so\nAnswer: 14.", "14"), ("Answer: $\\boxed{3/4}$", "3/4"),
    ("so the result is \\boxed{12}", "12"), ("it is 5 or maybe 6", "6"), ("no idea", "")])
def test_extract_answer(reply, answer):
  assert el.extract_answer(reply) == answer


def test_is_correct_compares_normalised_and_numeric_answers():
  assert el.is_correct("14.0", "14") and el.is_correct(" $7$ ", "7")
  assert el.is_correct("\\boxed{x+1}", "x+1") and not el.is_correct("15", "14")
  assert not el.is_correct("", "")


def test_jsonl_loader_reads_problems_and_names_the_bad_line(tmp_path):
  good = tmp_path / "math.jsonl"
  good.write_text(json.dumps({"problem": "1+1?", "answer": "2", "level": 1}) + "\n\n" +
                  json.dumps({"problem": "2+2?", "answer": 4}) + "\n")
  assert el.load_problems_jsonl(good) == [P.Problem("1+1?", "2"), P.Problem("2+2?", "4")]
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n" +
                 json.dumps({"question": "2+2?", "solution": "4"}) + "\n")
  with pytest.raises(ValueError, match=r"bad.jsonl:2: expected an object with non-empty "
                     r"'problem' and 'answer' fields, got keys \['question', 'solution'\]"):
    el.load_problems_jsonl(bad)
  bad.write_text("{not json\n")
  with pytest.raises(ValueError, match=r"bad.jsonl:1: not valid JSON"):
    el.load_problems_jsonl(bad)
  bad.write_text("\n")
  with pytest.raises(ValueError, match="no problems"):
    el.load_problems_jsonl(bad)
  with pytest.raises(FileNotFoundError, match="does not exist"):
    el.load_problems_jsonl(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------ simulated roles

ZORP = P.Family("zorp", "operator", (2, 3))
FLORB = P.Family("florb", "unit", (7, 0))


def _roles(solver=None, reflector=None, context=4096):
  return el.check_roles(el.Roles(solver or el.SimulatedSolver(eps=0.0, slip=0.0),
                                 reflector or el.SimulatedReflector(p_wrong=0, p_over=0,
                                                                    p_duplicate=0),
                                 context_chars=context))


def test_simulated_solver_follows_its_stated_model():
  roles = _roles()
  problems = [P.make_problem(ZORP, (x, y)) for x in range(10) for y in range(0, 10, 3)]
  assert el.accuracy(roles, [P.rule_text(ZORP)], problems) == 1.0
  wrong = P.rule_text(ZORP._replace(params=(1, 1)))
  _, correct = el.solve(roles, [[wrong]] * len(problems), problems)
  assert np.mean(correct) < 0.3          # a wrong rule gives wrong answers
  # Distractors lower attention monotonically (common random numbers per problem).
  solver = el.SimulatedSolver(eps=0.05, slip=0.0)
  distracted = _roles(solver)
  fillers = [f"1 filler{i} = 2 grams" for i in range(40)]
  accs = [el.accuracy(distracted, fillers[:n] + [P.rule_text(ZORP)], problems)
          for n in (0, 10, 40)]
  assert accs[0] == 1.0 and accs[0] >= accs[1] >= accs[2]
  assert accs[2] < 0.5                   # (0.95 ** 40 = 0.13 attention)
  assert solver.complete([prompts.solver_prompt([], "What?")], max_tokens=12) == ["Answer: unkn"]
  with pytest.raises(ValueError, match="exceeds the simulated role's context of 8192"):
    solver.complete(["x" * 8190], max_tokens=8)


def test_simulated_reflector_induces_consistent_rules_and_respects_capacity():
  roles = _roles()
  failures = [(P.make_problem(ZORP, (3, 4)), "7"), (P.make_problem(FLORB, (5,)), "5")]
  ops = el.reflect(roles, [], 4, failures)
  assert [op.kind for op in ops] == ["add", "add"]
  for op, (problem, _) in zip(ops, failures):
    assert el.accuracy(roles, [op.rule], [problem]) == 1.0   # consistent with its example
  assert P.parse_rule(ops[1].rule).params == FLORB.params     # one example pins a unit
  # A right rule already there: the failure was a slip, no operation.
  assert el.reflect(roles, [P.rule_text(ZORP)], 4, failures[:1]) == []
  # A wrong rule there: EDIT it. At capacity: REPLACE a rule of another family.
  wrong = P.rule_text(ZORP._replace(params=(1, 1)))
  assert [op.kind for op in el.reflect(roles, ["keep", wrong], 4, failures[:1])] == ["edit"]
  (op,) = el.reflect(roles, [P.rule_text(ZORP), "other"], 2, failures[1:])
  assert op.kind == "replace" and op.rule == P.rule_text(FLORB)


def test_reflector_prompt_round_trips():
  text = prompts.reflector_prompt(["r1", "r2"], 5, [("Compute 1 zorp 2.", "", "8")])
  assert prompts.read_reflector_prompt(text) == (["r1", "r2"], 5,
                                                 [("Compute 1 zorp 2.", "", "8")])
  text = prompts.reflector_prompt([], None, [("p", "1", "2"), ("q", "3", "4")])
  assert prompts.read_reflector_prompt(text) == ([], None, [("p", "1", "2"), ("q", "3", "4")])


def test_retrieval_ranks_the_family_rule_first():
  store = ["1 florb = 7 grams", "x zorp y = (2*x + 3*y) mod 10", "1 blick = 2 meters"]
  got = el.retrieve(store, [P.make_problem(ZORP, (1, 2)), P.make_problem(FLORB, (3,))], k=1)
  assert got == [[store[1]], [store[0]]]
  assert el.retrieve([], [P.make_problem(ZORP, (1, 2))], k=3) == [[]]


def test_fit_rules_keeps_the_newest_rules_that_fit():
  roles = _roles(context=900)
  rules = [f"rule number {i} " + "x" * 50 for i in range(40)]
  kept = el.roles.fit_rules(rules, "Compute 1 zorp 2.", roles)
  assert 0 < len(kept) < 40 and kept == rules[-len(kept):]
  prompt = prompts.solver_prompt(kept, "Compute 1 zorp 2.")
  assert len(prompt) + roles.solver_max_tokens <= roles.context_chars


# ----------------------------------------------------------------- dual verification


class _FixedReflector:
  """A reflector that always proposes the same reply (for constructed cases)."""

  def __init__(self, reply):
    self.reply = reply

  def complete(self, prompts_, *, max_tokens, temperature=0.0, stop=()):
    del max_tokens, temperature, stop
    return [self.reply for _ in prompts_]


def test_dual_verification_rejects_an_operation_that_breaks_held_out_cases():
  # The minibatch fails on florb; held-out is all zorp, which rule 1 solves. Replacing
  # rule 1 with the florb rule fixes the minibatch but breaks every held-out case.
  batch = [P.make_problem(FLORB, (4,))]
  heldout = [P.make_problem(ZORP, (x, 1)) for x in range(8)]
  roles = _roles(reflector=_FixedReflector(f"REPLACE 1: {P.rule_text(FLORB)}"))
  lib = el.new_library(1, roles.max_rule_chars, [P.rule_text(ZORP)])
  kept, record = el.step(lib, roles, batch, heldout)
  assert kept == lib and record.accepted == () and record.rejected == {"heldout": 1}
  assert el.accuracy(roles, [P.rule_text(FLORB)], batch) == 1.0   # it did fix the failure
  # Without verification it is accepted, and the audit sees the damage.
  changed, record = el.step(lib, roles, batch, heldout, el.TSGDConfig(verify=False),
                            audit=heldout)
  assert changed.rules == (P.rule_text(FLORB),) and record.audit_deltas == (-1.0,)
  # An operation that does not fix its failure fails the local check.
  roles = _roles(reflector=_FixedReflector("ADD: 1 florb = 3 grams"))
  lib = el.new_library(2, roles.max_rule_chars, [P.rule_text(ZORP)])
  _, record = el.step(lib, roles, batch, heldout)
  assert record.rejected == {"local": 1}
  # A harmless fix passes both checks; the no-Delete/Edit ablation refuses a REPLACE.
  roles = _roles(reflector=_FixedReflector(f"ADD: {P.rule_text(FLORB)}"))
  new, record = el.step(lib, roles, batch, heldout)
  assert new.rules == (P.rule_text(ZORP), P.rule_text(FLORB)) and record.rejected == {}
  roles = _roles(reflector=_FixedReflector(f"REPLACE 1: {P.rule_text(FLORB)}"))
  _, record = el.step(lib, roles, batch, heldout, el.TSGDConfig(kinds=("add",)))
  assert record.rejected == {"kind": 1}


def test_bad_inputs_give_one_line_errors():
  with pytest.raises(ValueError, match="capacity K must be an int >= 1, got 0"):
    el.new_library(0, 100)
  with pytest.raises(ValueError, match=r"rules\[0\] has 300 characters, longer than"):
    el.new_library(4, 200, ["y" * 300])
  with pytest.raises(ValueError, match="context_chars=300 leaves no room for a rule"):
    _roles(context=300)
