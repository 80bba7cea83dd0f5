"""AutoMS's four roles. The language roles are `common.llm.TextModel`s.

  Manager    requirement -> sub-goals (one per physics) and the cell families to search;
  Parser     requirement -> the constraint box (`tasks.Constraint`s);
  Generator  requirement + families -> initial designs (family, 6 parameters in [0, 1]);
  Simulator  designs -> homogenised properties (`simulator.Simulator`, no language).

The LLM-only baseline's proposer is the Generator's prompt with the designs simulated
so far. Every reply must hold one JSON object; a reply that does not parse, or parses to
something invalid, is counted and the request is retried, at most `retries` more times;
after that the role returns None and the caller records the failure. Nothing is ever
filled in with a default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from methods.automs import cells
from methods.automs import tasks


class Usage(NamedTuple):
  """Text-model calls and the replies that could not be parsed."""
  calls: int = 0
  unparsed: int = 0


def _families_text() -> str:
  return "\n".join(f"- {f.name}: parameters {', '.join(f.params)}" for f in cells.FAMILIES)


def _properties_text() -> str:
  return "\n".join(f"- {p.key}: {p.phrase}" for p in tasks.PROPERTIES)


def manager_prompt(requirement: str) -> str:
  return ("You are the manager of a metamaterial design team. Split the requirement into "
          "sub-goals, one per physics (elastic, thermal, geometric), and choose one to "
          "three unit-cell families to search.\n"
          f"Cell families:\n{_families_text()}\n"
          f"Requirement: {requirement}\n"
          'Answer with one JSON object: {"subgoals": ["..."], "families": ["..."]}\n')


def parser_prompt(requirement: str) -> str:
  return ("Turn the design requirement into a box of property constraints.\n"
          f"Properties:\n{_properties_text()}\n"
          f"Requirement: {requirement}\n"
          'Answer with one JSON object: {"constraints": [{"property": "E1", "min": 0.1, '
          '"max": null}, ...]} (null for an open side).\n')


def generator_prompt(requirement: str, families: Sequence[str], count: int,
                     history: Sequence[dict] = ()) -> str:
  lines = [f"Propose {count} unit-cell designs for the requirement.",
           f"Requirement: {requirement}",
           f"Allowed families (parameters in [0, 1] each):",
           *(f"- {f}: {', '.join(cells.FAMILIES[cells.family_index(f)].params)}"
             for f in families)]
  if history:
    lines.append("Designs simulated so far (best first):")
    for h in history:
      props = ", ".join(f"{k}={v:.4g}" for k, v in h["properties"].items())
      lines.append(f"- family={h['family']} params={json.dumps(h['params'])} -> {props}")
  lines.append('Answer with one JSON object: {"designs": [{"family": "...", "params": '
               '[six numbers]}, ...]}')
  return "\n".join(lines) + "\n"


def _json_object(text: str) -> Any:
  start, end = text.find("{"), text.rfind("}")
  if start < 0 or end <= start:
    raise ValueError("no JSON object in the reply")
  return json.loads(text[start:end + 1])


def _read_manager(text: str) -> tuple[list[str], list[str]]:
  obj = _json_object(text)
  families = [f for f in obj["families"] if f in cells.FAMILY_NAMES]
  if not families or len(families) != len(obj["families"]):
    raise ValueError(f"unknown or no families: {obj['families']}")
  return [str(s) for s in obj.get("subgoals", [])], list(dict.fromkeys(families))


def _bound(v: Any, default: float) -> float:
  return default if v is None else float(v)


def _read_parser(text: str) -> tuple[tasks.Constraint, ...]:
  obj = _json_object(text)
  box = tuple(tasks.Constraint(str(c["property"]), _bound(c.get("min"), -math.inf),
                               _bound(c.get("max"), math.inf)) for c in obj["constraints"])
  tasks.check_box(box, where="parsed requirement")
  return box


def _read_designs(text: str, families: Sequence[str], count: int
                  ) -> list[tuple[str, np.ndarray]]:
  obj = _json_object(text)
  out = []
  for d in obj["designs"][:count]:
    u = np.asarray(d["params"], float)
    if d["family"] not in families or u.shape != (cells.NUM_PARAMS,) or not np.all(
        np.isfinite(u)):
      raise ValueError(f"invalid design {d!r}")
    out.append((d["family"], np.clip(u, 0.0, 1.0)))
  if not out:
    raise ValueError("no designs")
  return out


def _ask(model, prompt: str, read, usage: Usage, retries: int, max_tokens: int,
         temperature: float):
  """One role call with bounded retries: (parsed value or None, updated usage)."""
  for attempt in range(retries + 1):
    reply = model.complete([prompt], max_tokens=max_tokens,
                           temperature=temperature if attempt == 0 else max(temperature, 0.7))[0]
    usage = usage._replace(calls=usage.calls + 1)
    try:
      return read(reply), usage
    except (ValueError, KeyError, TypeError, IndexError, json.JSONDecodeError):
      usage = usage._replace(unparsed=usage.unparsed + 1)
  return None, usage


class Roles(NamedTuple):
  """The language roles' text models and reply settings (one model may play all)."""
  manager: Any
  parser: Any
  generator: Any
  retries: int = 2
  max_tokens: int = 512
  temperature: float = 0.0

  def manage(self, requirement: str, usage: Usage = Usage()):
    """((sub-goals, families) or None, usage)."""
    return _ask(self.manager, manager_prompt(requirement), _read_manager, usage,
                self.retries, self.max_tokens, self.temperature)

  def parse(self, requirement: str, usage: Usage = Usage()):
    """(constraints or None, usage)."""
    return _ask(self.parser, parser_prompt(requirement), _read_parser, usage, self.retries,
                self.max_tokens, self.temperature)

  def generate(self, requirement: str, families: Sequence[str], count: int,
               usage: Usage = Usage(), history: Sequence[dict] = ()):
    """([(family, u), ...] or None, usage): designs from the Generator (or, with
    `history`, the LLM-only proposer)."""
    prompt = generator_prompt(requirement, families, count, history)
    return _ask(self.generator, prompt, lambda t: _read_designs(t, families, count), usage,
                self.retries, max(self.max_tokens, 48 * count), self.temperature)

