"""Unit tests of methods/adathink/data.py: the generated diagnosis task and the MedQA loader."""

import json

import pytest

from common.data.tokenizers import ByteTokenizer
from methods.adathink import data


@pytest.fixture(scope="module")
def task():
  return data.make_task(0, cases_per_k=48)


def _walk(kb, prompt):
  """Follows a prompt through the knowledge base independently of the generator."""
  words = prompt.split()
  start = words[0]
  node = int(start[1:]) + (kb.num_findings if start[0] == "c" else 0)
  names = [start]
  for w in words[1:]:
    assert w[0] == "m"
    node = int(kb.step[node][int(w[1:])])
    names.append(f"c{node - kb.num_findings}")
  return names, f"d{kb.resolve[node]}"


def test_answers_follow_the_knowledge_base(task):
  for case in task.train + task.test:
    names, answer = _walk(task.kb, case.prompt)
    assert case.answer_text == answer
    steps = "".join(f" -{m}-> {n}" for m, n in zip(case.prompt.split()[1:], names[1:]))
    assert data.sft_target(task.kb, case) == (
        f"<think>{names[0]}{steps}</think><answer>{answer}</answer>")
    assert len(case.chain) == case.k == len(case.prompt.split()) - 1


def test_every_depth_in_both_splits_and_disjoint(task):
  assert {c.k for c in task.train} == set(range(7))
  assert {c.k for c in task.test} == set(range(7))
  assert not {c.prompt for c in task.train} & {c.prompt for c in task.test}
  assert len({c.prompt for c in task.train}) == len(task.train)


def test_held_out_cases_use_only_trained_facts(task):
  known = set().union(*(data._facts(task.kb, c) for c in task.train))
  assert all(data._facts(task.kb, c) <= known for c in task.test)


def test_deterministic_from_seed(task):
  again = data.make_task(0, cases_per_k=48)
  assert again.train == task.train and again.test == task.test
  assert data.make_task(1, cases_per_k=48).train != task.train


def test_checkers(task):
  case = task.test[-1]
  target = data.sft_target(task.kb, case)
  assert data.is_well_formatted(target) and data.is_correct(target, case)
  assert data.is_correct(data.answer_only(case), case)
  assert data.think_length(data.answer_only(case)) == 0
  wrong = f"d{(case.answer + 1) % task.kb.num_diagnoses}"
  assert not data.is_correct(target.replace(case.answer_text + "<", wrong + "<"), case)
  for bad in [case.answer_text, f"<answer>{case.answer_text}</answer>",
              f"<think>x</think><answer></answer>",
              f"<think><think></think><answer>{case.answer_text}</answer>"]:
    assert not data.is_well_formatted(bad) and not data.is_correct(bad, case)
  tok = ByteTokenizer()
  assert tok.decode(tok.encode(case.prompt + target)) == case.prompt + target


def test_bad_task_arguments():
  with pytest.raises(ValueError, match="holdout"):
    data.make_task(0, holdout=1.0)
  with pytest.raises(ValueError, match="num_modifiers"):
    data.make_knowledge_base(0, num_modifiers=1)


def _write(tmp_path, rows):
  path = tmp_path / "medqa.jsonl"
  path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
  return path


def test_medqa_loader(tmp_path):
  opts = {"A": "Aspirin", "B": "Heparin", "C": "Warfarin"}
  path = _write(tmp_path, [{"question": "Q1?", "options": opts, "answer_idx": "B",
                            "answer": "Heparin"},
                           "",
                           {"question": "Q2?", "options": opts, "answer": "Warfarin"}])
  qs = data.load_medqa_jsonl(path)
  assert [q.answer_text for q in qs] == ["B", "C"]
  assert data.is_correct("<think>bleeding</think><answer>B</answer>", qs[0])
  assert data.medqa_prompt(qs[0]).splitlines() == ["Q1?", "A. Aspirin", "B. Heparin",
                                                   "C. Warfarin"]


@pytest.mark.parametrize("line,match", [
    ("{not json", "line 2: invalid JSON"),
    ('["a"]', "line 2: expected a JSON object"),
    ('{"options": {"A": "x", "B": "y"}, "answer_idx": "A"}', "line 2: 'question'"),
    ('{"question": "q", "options": ["x", "y"], "answer_idx": "A"}', "line 2: 'options'"),
    ('{"question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": "E"}',
     "line 2: answer_idx 'E'"),
    ('{"question": "q", "options": {"A": "x", "B": "y"}, "answer": "z"}', "line 2: no 'answer_idx'"),
])
def test_medqa_malformed_line(tmp_path, line, match):
  good = {"question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}
  path = _write(tmp_path, [good, line])
  with pytest.raises(ValueError, match=match) as err:
    data.load_medqa_jsonl(path)
  assert "\n" not in str(err.value)


def test_medqa_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="no MedQA JSONL file"):
    data.load_medqa_jsonl(tmp_path / "absent.jsonl")
