"""Experiment: AutoMS's SAES against NSGA-II, CMA-ES, random search, an LLM-only proposer
and SAES without its local gradient, on the 17 cross-physics design tasks at an equal
budget of homogenisation solves.

For every task in `config.tasks`, seed and method, `methods.automs.search.run` runs one
search (the agentic methods start from the requirement text; see `search.py`) and
appends one row to `workdir/searches.jsonl`, so an interrupted run resumes at the next
search. A task is solved when a simulated design meets every constraint of its true box
within `search.tol`.

Checked claims (the AutoMS abstract): (1) SAES's success rate over the tasks is above
NSGA-II's and CMA-ES's at the same simulator budget; (2) SAES beats the LLM-only
proposer; (3) the ablation without the local gradient is lower. Rows made with the
offline stand-in for the language roles say "offline agents".
"""

from __future__ import annotations

import os

import numpy as np

from common import llm
from common import physics
from common import report
from common import trials
from experiments.configs import automs as config_module
from experiments.plots import automs as plots
from methods.automs import agents
from methods.automs import cells
from methods.automs import search
from methods.automs import simulated
from methods.automs import tasks

_NOT_RESULTS = ("preset", "methods", "tasks", "num_seeds", "api_key_env", "request_timeout", "images")


def search_config(config) -> search.SearchConfig:
  s = config.search
  return search.SearchConfig(budget=s.budget, pop_size=s.pop_size, generations=s.generations,
                             tol=s.tol, n=config.mesh, solver_tol=config.solver_tol,
                             gradient_starts=s.gradient_starts,
                             material=physics.Material(**config.material.to_dict()))


def make_roles(config, seed: int, text_model) -> agents.Roles:
  model = simulated.OfflineAgents(seed) if text_model is None else text_model
  a = config.agents
  return agents.Roles(model, model, model, retries=a.retries, max_tokens=a.max_tokens,
                      temperature=a.temperature)


def success_rate(rows, method: str) -> float:
  got = [r["success"] for r in rows if r["method"] == method]
  return float(np.mean(got)) if got else float("nan")


def claims(rows: list[dict], config) -> list[report.Claim]:
  tag = " (offline agents)" if config.text_model == "offline" else ""
  n = f"{len(config.tasks)} tasks x {config.num_seeds} seeds, {config.search.budget} solves"
  rate = {m: success_rate(rows, m) for m in config.methods}
  out = []
  peers = [m for m in ("nsga2", "cmaes") if m in config.methods]
  if peers:
    out.append(report.Claim(
        f"SAES's success rate is above {' and '.join(peers)}'s at an equal simulator budget "
        f"({n}){tag}", "83.8% vs 43.7% (best evolutionary baseline)",
        "; ".join(f"{m} {100 * rate[m]:.1f}%" for m in ("saes", *peers)),
        [rate["saes"] - rate[m] for m in peers], ">", 0.0))
  if "llm_only" in config.methods:
    out.append(report.Claim(
        f"SAES beats the LLM-only proposer (success rate, {n}){tag}",
        "outperforms direct LLM proposals",
        f"saes {100 * rate['saes']:.1f}% vs llm_only {100 * rate['llm_only']:.1f}%",
        rate["saes"] - rate["llm_only"], ">", 0.0))
  if "saes_no_gradient" in config.methods:
    out.append(report.Claim(
        f"Local gradient approximation matters: SAES without it solves fewer tasks ({n}){tag}",
        "the ablation without local gradients is lower",
        f"saes {100 * rate['saes']:.1f}% vs no gradient "
        f"{100 * rate['saes_no_gradient']:.1f}%",
        rate["saes"] - rate["saes_no_gradient"], ">", 0.0))
  return out


def figures(rows: list[dict], config) -> dict[str, float]:
  out = {}
  for m in config.methods:
    mine = [r for r in rows if r["method"] == m]
    out[f"{m}_success_rate"] = success_rate(rows, m)
    solved = [r["first_success"] + 1 for r in mine if r["success"]]
    out[f"{m}_median_solves_to_success"] = float(np.median(solved)) if solved else float("nan")
    out[f"{m}_unparsed_replies"] = float(sum(r["unparsed"] for r in mine))
    out[f"{m}_agent_failures"] = float(sum(r["failure"] is not None for r in mine))
  return out


def best_designs(rows, config, method: str = "saes") -> list[dict]:
  """Per task, the design with the smallest worst violation over the method's seeds."""
  out = []
  for name in config.tasks:
    mine = [r for r in rows if r["task"] == name and r["method"] == method and
            r.get("best_violation") is not None]
    if mine:
      best = min(mine, key=lambda r: r["best_violation"])
      out.append({"task": name, **{k: best[k] for k in (
          "best_family", "best_params", "best_properties", "best_violation", "success")}})
  return out


@report.register("automs", title="AutoMS: SAES on cross-physics metamaterial tasks",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  config_module.preflight(config)
  text_model = None
  if config.text_model != "offline":
    text_model = llm.text_model_from_spec(config.text_model,
                                          **config_module.text_model_kwargs(config))
  cfg = search_config(config)
  fp = trials.config_fingerprint(config, exclude=_NOT_RESULTS)
  with trials.TrialLog(os.path.join(workdir, "searches.jsonl"), fp) as log:
    done = log.done(lambda r: (r["task"], r["method"], r["seed"]))
    rows = []
    for name in config.tasks:
      for seed in range(config.seed, config.seed + config.num_seeds):
        for method in config.methods:
          row = done.get((name, method, seed))
          if row is None:
            roles = make_roles(config, seed, text_model)
            row = log.append(search.run(method, tasks.get_task(name), seed, cfg, roles))
          rows.append(row)
  designs = best_designs(rows, config)
  files = [plots.success_rates(workdir, rows, config.methods, config.tasks),
           plots.designs(workdir, designs, cfg.n, config.images)]
  return report.Result(claims=report.claims_table(claims(rows, config)),
                       figures=figures(rows, config), plots=files,
                       notes=[_designs_note(designs)])


def _designs_note(designs: list[dict]) -> str:
  lines = ["SAES's best design per task (worst normalised violation; 0 = every constraint "
           "met):", "", "| task | family | worst violation | properties |", "|---|---|---|---|"]
  for d in designs:
    props = ", ".join(f"{k} {d['best_properties'][k]:.3g}" for c in
                      tasks.get_task(d["task"]).constraints for k in [c.key])
    lines.append(f"| {d['task']} | {d['best_family']} | {d['best_violation']:.3f} | {props} |")
  return "\n".join(lines)
