"""An offline stand-in for AutoMS's language roles, as one `common.llm.TextModel`.

It reads the same prompts a real model gets (`agents.py`) and answers in the same JSON,
so the agents run unchanged against it or against a real model. Report rows made with
it say "offline agents". What it does, per prompt:

  Parser     reads the requirement with `tasks.parse_box`, which knows exactly the
             phrasing `tasks.describe` writes (so at quick scale parsing is exact);
  Manager    one sub-goal per physics named in the box, and families by fixed rules of
             thumb: a Poisson's ratio capped below 0.1 -> reentrant, chiral; an anisotropy
             floor -> plates, rods; a conductivity or stiffness floor -> plates,
             inclusion; thermal expansion -> inclusion, plates; a shear floor -> rods;
             otherwise every family; at most three, in that order;
  Generator  uniform designs over the allowed families (a Latin-hypercube draw seeded by
             a hash of the prompt);
  Proposer   (the Generator prompt with simulated designs, the LLM-only baseline) ranks
             the listed designs by their summed fitness on the parsed box and proposes
             each new design as the clip to [0, 1] of one of the 3 best plus N(0, 0.1^2)
             noise (the family kept).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence

import numpy as np

from methods.automs import cells
from methods.automs import tasks


def _requirement(prompt: str) -> str:
  m = re.search(r"^Requirement: (.*)$", prompt, flags=re.MULTILINE)
  return m.group(1) if m else ""


def _families(box: Sequence[tasks.Constraint]) -> list[str]:
  picks = []
  for c in box:
    if c.key == "nu12" and c.hi < 0.1:
      picks += ["reentrant", "chiral"]
    elif c.key in ("E_ratio", "k_ratio") and c.lo > 1.5:
      picks += ["plates", "rods"]
    elif c.key in ("alpha1", "alpha2"):
      picks += ["inclusion", "plates"]
    elif c.key == "G12" and math.isfinite(c.lo):
      picks += ["rods"]
    elif c.key in ("E1", "E2", "k11", "k22") and math.isfinite(c.lo):
      picks += ["plates", "inclusion"]
  picks = list(dict.fromkeys(picks))[:3]
  return picks or list(cells.FAMILY_NAMES)


_PHYSICS = {"E1": "elastic", "E2": "elastic", "G12": "elastic", "nu12": "elastic",
            "E_ratio": "elastic", "k11": "thermal", "k22": "thermal", "k_ratio": "thermal",
            "alpha1": "thermal", "alpha2": "thermal", "vf": "geometric"}


def _manager(prompt: str) -> dict:
  box = tasks.parse_box(_requirement(prompt))
  subgoals = {}
  for c in box:
    subgoals.setdefault(_PHYSICS[c.key], []).append(c.key)
  return {"subgoals": [f"{k}: {', '.join(v)}" for k, v in subgoals.items()],
          "families": _families(box)}


def _parser(prompt: str) -> dict:
  box = tasks.parse_box(_requirement(prompt))
  side = lambda v: None if math.isinf(v) else v
  return {"constraints": [{"property": c.key, "min": side(c.lo), "max": side(c.hi)}
                          for c in box]}


def _history(prompt: str) -> list[tuple[str, np.ndarray, dict]]:
  rows = []
  for m in re.finditer(r"^- family=(\w+) params=(\[[^\]]*\]) -> (.*)$", prompt, re.MULTILINE):
    props = dict((k, float(v)) for k, v in re.findall(r"(\w+)=([-+\d.eE]+|nan|inf)", m.group(3)))
    rows.append((m.group(1), np.asarray(json.loads(m.group(2)), float), props))
  return rows


def _generator(prompt: str, rng: np.random.Generator) -> dict:
  count = int(re.search(r"Propose (\d+)", prompt).group(1))
  families = re.findall(r"^- (\w+): ", prompt.split("Allowed families")[1], re.MULTILINE)
  families = [f for f in families if f in cells.FAMILY_NAMES]
  history = _history(prompt)
  if history:
    box = tasks.parse_box(_requirement(prompt))
    rows = np.array([[h[2].get(k, np.nan) for k in tasks.PROPERTY_KEYS] for h in history])
    order = np.argsort(-tasks.fitness(box, rows).sum(-1), kind="stable")[:3]
    picks = rng.integers(0, len(order), count)
    designs = [(history[order[p]][0], np.clip(history[order[p]][1] +
                                               rng.normal(0, 0.1, cells.NUM_PARAMS), 0, 1))
               for p in picks]
  else:
    strata = (rng.permuted(np.tile(np.arange(count), (cells.NUM_PARAMS, 1)), axis=1).T
              + rng.uniform(size=(count, cells.NUM_PARAMS))) / count
    designs = [(families[i % len(families)], strata[i]) for i in range(count)]
  return {"designs": [{"family": f, "params": [round(float(x), 4) for x in u]}
                      for f, u in designs]}


class OfflineAgents:
  """A `TextModel` answering the Manager, Parser, Generator and proposer prompts.

  Example:
    >>> roles = agents.Roles(*(OfflineAgents(seed=0),) * 3)
  """

  def __init__(self, seed: int = 0):
    self.seed, self.calls = seed, 0

  def complete(self, prompts: Sequence[str], max_tokens: int = 256, temperature: float = 0.0,
               stop: Sequence[str] = ()) -> list[str]:
    del max_tokens, stop
    out = []
    for prompt in prompts:
      self.calls += 1
      digest = hashlib.sha256(f"{self.seed}|{prompt}|{self.calls if temperature else 0}"
                              .encode()).digest()
      rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
      if prompt.startswith("You are the manager"):
        reply = _manager(prompt)
      elif prompt.startswith("Turn the design requirement"):
        reply = _parser(prompt)
      else:
        reply = _generator(prompt, rng)
      out.append(json.dumps(reply))
    return out
