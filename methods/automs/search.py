"""One search: a method on a task with a seed, at a fixed simulator budget.

The agentic methods (SAES, its no-gradient ablation, the LLM-only proposer) start from
the requirement text: the Manager picks the families, the Parser the box they optimise,
the Generator (SAES) the first population. The evolutionary and random baselines and
the gradient reference get the true box and search all six families, as a library
user would run them. Success is always judged on the task's true box.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from common import physics
from methods.automs import agents
from methods.automs import baselines
from methods.automs import cells
from methods.automs import saes as saes_lib
from methods.automs import simulator as simulator_lib
from methods.automs import tasks

AGENTIC = ("saes", "saes_no_gradient", "llm_only")
METHODS = AGENTIC + ("nsga2", "cmaes", "random", "gradient")


class SearchConfig(NamedTuple):
  budget: int = 200
  pop_size: int = 20
  generations: int = 10
  tol: float = 0.02
  n: int = 32
  solver_tol: float = 1e-6
  gradient_starts: int = 4
  material: physics.Material = physics.Material()


def _objectives(box) -> saes_lib.Objectives:
  return saes_lib.Objectives(
      violations=lambda Y: tasks.violations(box, Y),
      targets=lambda Y: tasks.targets(box, Y),
      columns=tuple(tasks.PROPERTY_KEYS.index(c.key) for c in box))


def _agentic(method, task, roles, key, config, usage):
  """(budget, families, failure) after the agents and the search."""
  plan, usage = roles.manage(task.requirement, usage)
  box, usage = roles.parse(task.requirement, usage)
  if plan is None or box is None:
    return None, (), ("manager" if plan is None else "parser"), usage
  families = plan[1]
  sim = simulator_lib.Simulator(families, n=config.n, material=config.material,
                                tol=config.solver_tol, batch=config.pop_size)
  budget = baselines.Budget(sim, task.constraints, config.budget, config.tol)
  if method == "llm_only":
    usage = baselines.llm_only(budget, roles, task.requirement, families, config.pop_size,
                               usage)
    return budget, families, None, usage
  designs, usage = roles.generate(task.requirement, families, config.pop_size, usage)
  if designs is None:
    return budget, families, "generator", usage
  initial = np.stack([simulator_lib.encode(f, u, families) for f, u in designs])
  cfg = saes_lib.SAESConfig(pop_size=config.pop_size, generations=config.generations,
                            local_gradient=method == "saes", categories=len(families))
  # SAES steers by the parsed box; success stays judged on the true one (`Budget`).
  saes_lib.saes(budget, _objectives(box), initial, key, cfg, budget=config.budget,
                stop=lambda: budget.done)
  return budget, families, None, usage


def _baseline(method, task, key, config):
  sim = simulator_lib.Simulator(cells.FAMILY_NAMES, n=config.n, material=config.material,
                                tol=config.solver_tol, batch=config.pop_size)
  budget = baselines.Budget(sim, task.constraints, config.budget, config.tol)
  if method == "random":
    baselines.random_search(budget, key, config.pop_size)
  elif method == "nsga2":
    baselines.nsga2(budget, key, config.pop_size)
  elif method == "cmaes":
    baselines.cmaes(budget, key, config.pop_size)
  else:
    baselines.gradient(budget, key, sim, config.gradient_starts)
  return budget, cells.FAMILY_NAMES


def run(method: str, task: tasks.Task, seed: int, config: SearchConfig,
        roles: agents.Roles | None = None) -> dict[str, Any]:
  """Runs one search and returns its JSON row (success, solves, best design, usage).

  Example:
    >>> row = run("random", tasks.get_task("stiff_light"), 0, SearchConfig(budget=40))
  """
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  key = jax.random.fold_in(jax.random.key(seed), METHODS.index(method))
  usage, failure = agents.Usage(), None
  if method in AGENTIC:
    if roles is None:
      raise ValueError(f"method {method!r} needs the agents' text models (roles)")
    budget, families, failure, usage = _agentic(method, task, roles, key, config, usage)
  else:
    budget, families = _baseline(method, task, key, config)
  return _row(method, task, seed, budget, families, failure, usage)


def _row(method, task, seed, budget, families, failure, usage) -> dict[str, Any]:
  X, Y = budget.record() if budget is not None else (np.zeros((0, 7)), np.zeros((0, 11)))
  row = {"task": task.name, "method": method, "seed": seed, "families": list(families),
         "failure": failure, "calls": usage.calls, "unparsed": usage.unparsed,
         "solves": 0 if budget is None else budget.used,
         "success": bool(budget is not None and budget.first_success is not None),
         "first_success": None if budget is None else budget.first_success}
  finite = np.all(np.isfinite(Y), axis=1) if len(Y) else np.zeros(0, bool)
  if finite.any():
    worst = tasks.violations(task.constraints, Y[finite]).max(-1)
    best = int(np.flatnonzero(finite)[np.argmin(worst)])
    family, u = simulator_lib.decode(X[best:best + 1], families)
    row.update(best_violation=float(worst.min()), best_family=cells.FAMILY_NAMES[family[0]],
               best_params=[float(v) for v in u[0]],
               best_properties=dict(zip(tasks.PROPERTY_KEYS, map(float, Y[best]))))
  else:
    row.update(best_violation=None)
  return row
