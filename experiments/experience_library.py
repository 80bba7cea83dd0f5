"""Experiment: TSGD on the experience library against zero-shot, append-only memory,
static retrieval and TSGD without verification / without Delete and Edit.

Every method runs for `num_seeds` seeds (a new task draw and role seed each; curves
are seed means) and uses the same two roles (`config.text_model`: the simulated solver and
rule inducer at quick scale, or one real LLM behind an OpenAI-compatible URL or a local
HF folder) and the same minibatches: at step s, `batch_size` training problems, a fresh
`heldout_size` validation batch (TSGD's held-out check) and an `audit_size` validation
batch on which the held-out effect of every accepted operation is measured for every
method alike. The test set is scored every `eval_every` steps.

Checked claims (the experience-library abstract): (1) TSGD raises accuracy well above
zero-shot; (2) append-only memory saturates (its accuracy falls from its peak as it
grows) while TSGD holds or improves at a fixed budget; (3) without dual verification,
accepted operations that lower held-out accuracy are frequent; (4) the final library
is compact: a fraction of the append-only memory at higher accuracy. With the simulated
roles, every claim's text says "simulated roles".

Each method's every step is a row of `workdir/steps.jsonl` (a `TrialLog` keyed by the
config's fingerprint) holding its memory's rules, so an interrupted run resumes at the
next step of each method.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from common import llm
from common import report
from common import trials
from experiments.configs import experience_library as config_module
from experiments.plots import experience_library as plots
from methods import experience_library as el
from methods.experience_library import problems as problems_lib

_STREAMS = {"batch": 0, "heldout": 1, "audit": 2, "test": 3}
# Keys that do not change what is computed (left out of the fingerprint).
_NOT_RESULTS = ("preset", "methods", "min_gain", "min_append_drop", "hold_tolerance",
                "min_harmful_fraction", "max_size_ratio", "api_key_env", "roles.request_timeout")


class Task(NamedTuple):
  """`sample(stream, step, n)`: the n problems of a stream ("batch", "heldout", "audit")
  at a step, a pure function of (seed, stream, step); `test`: the fixed test set."""
  sample: Callable[[str, int, int], list[problems_lib.Problem]]
  test: list[problems_lib.Problem]
  source: str


def make_task(config, seed: int) -> Task:
  """The generated hidden-rule task, or the JSONL file split into train / validation /
  test pools (training batches come from train, held-out and audit from validation)."""
  data = config.data
  if not data.problems_path:
    families = problems_lib.make_families(data.num_families, seed)
    weights = problems_lib.family_weights(data.num_families, data.zipf)

    def generated(stream: str, step: int, n: int) -> list[problems_lib.Problem]:
      rng = np.random.default_rng([seed, _STREAMS[stream], step])
      return problems_lib.sample_problems(families, weights, n, rng)

    return Task(generated, generated("test", 0, data.test_size), "generated")
  pool = el.load_problems_jsonl(data.problems_path)
  order = np.random.default_rng([seed, 7]).permutation(len(pool))
  n_test = max(1, int(round(data.test_fraction * len(pool))))
  n_val = max(1, int(round(data.validation_fraction * len(pool))))
  if n_test + n_val >= len(pool):
    raise ValueError(f"{data.problems_path}: {len(pool)} problems are too few to split into "
                     f"test ({n_test}), validation ({n_val}) and a non-empty train pool")
  test = [pool[i] for i in order[:n_test][:data.test_size]]
  val = [pool[i] for i in order[n_test:n_test + n_val]]
  train = [pool[i] for i in order[n_test + n_val:]]

  def from_pools(stream: str, step: int, n: int) -> list[problems_lib.Problem]:
    source = train if stream == "batch" else val
    rng = np.random.default_rng([seed, _STREAMS[stream], step])
    return [source[i] for i in rng.choice(len(source), size=min(n, len(source)), replace=False)]

  return Task(from_pools, test, data.problems_path)


def make_roles(config, seed: int) -> el.Roles:
  """The solver and reflector (`config.text_model`), checked to leave room for a rule."""
  r = config.roles
  if config.text_model == "simulated":
    s = config.simulated
    solver = el.SimulatedSolver(eps=s.eps, slip=s.slip, seed=seed,
                                context_chars=r.context_chars)
    reflector = el.SimulatedReflector(p_wrong=s.p_wrong, p_over=s.p_over,
                                      p_duplicate=s.p_duplicate, seed=seed)
  else:
    solver = reflector = llm.text_model_from_spec(config.text_model,
                                                  **config_module.text_model_kwargs(config))
  return el.check_roles(el.Roles(solver, reflector, r.context_chars, r.solver_max_tokens,
                                 r.reflector_max_tokens))


def simulated(config) -> bool:
  return config.text_model == "simulated"


def _rules_for(method: str, memory: tuple[str, ...], problems, config) -> list[list[str]]:
  if method == "retrieval":
    return el.retrieve(memory, problems, config.retrieval_k)
  return [list(memory)] * len(problems)


def _test_accuracy(method: str, memory, task: Task, roles: el.Roles, config) -> float:
  _, correct = el.solve(roles, _rules_for(method, memory, task.test, config), task.test)
  return float(np.mean(correct))


def _step(method: str, memory: tuple[str, ...], roles: el.Roles, task: Task, s: int, config):
  batch = task.sample("batch", s, config.batch_size)
  audit = task.sample("audit", s, config.audit_size)
  if method == "append_only":
    return el.append_only_step(memory, roles, batch, audit)
  if method == "retrieval":
    return el.retrieval_step(memory, roles, batch, config.retrieval_k, audit)
  tsgd_config = el.TSGDConfig(verify=method != "tsgd_no_verify",
                              kinds=("add",) if method == "tsgd_no_edit_delete" else el.KINDS)
  lib = el.new_library(config.capacity, roles.max_rule_chars, memory)
  lib, record = el.step(lib, roles, batch, task.sample("heldout", s, config.heldout_size),
                        tsgd_config, audit)
  return lib.rules, record


def run_method(method: str, seed: int, roles: el.Roles, task: Task, config,
               log: trials.TrialLog) -> list[dict]:
  """Every step of one method and seed: rows {method, seed, step, rules, size, record,
  test_accuracy} (test accuracy at step 0, every `eval_every` steps and the last step;
  NaN between). Rows already in `log` are reused; the run continues after the last one."""
  rows = sorted((r for r in log.rows if r["method"] == method and r["seed"] == seed),
                key=lambda r: r["step"])
  if rows:
    memory = tuple(rows[-1]["rules"])
  else:
    memory = el.new_library(config.capacity, roles.max_rule_chars, config.initial_rules).rules
    acc = _test_accuracy(method, memory, task, roles, config)
    rows.append(log.append({"method": method, "seed": seed, "step": 0, "rules": list(memory),
                            "size": len(memory), "record": None, "test_accuracy": acc}))
  last = 0 if method == "zero_shot" else config.steps
  for s in range(rows[-1]["step"] + 1, last + 1):
    memory, record = _step(method, memory, roles, task, s, config)
    evaluate = s % config.eval_every == 0 or s == last
    acc = _test_accuracy(method, memory, task, roles, config) if evaluate else float("nan")
    rows.append(log.append({"method": method, "seed": seed, "step": s, "rules": list(memory),
                            "size": len(memory), "record": record.to_json(),
                            "test_accuracy": acc}))
  return rows


class Curves(NamedTuple):
  """Per method, averaged over seeds: evaluation steps and accuracies, sizes per step;
  the first seed's final memory; the audited effects of every seed's accepted
  operations."""
  eval_steps: dict[str, list[int]]
  accuracy: dict[str, list[float]]
  sizes: dict[str, list[int]]
  final_rules: dict[str, list[str]]
  audit: dict[str, list[float]]


def curves(runs: dict[str, list[list[dict]]]) -> Curves:
  """`runs`: {method: [rows of one seed, for each seed]}."""
  evals, accs, sizes, final, audit = {}, {}, {}, {}, {}
  for method, seeds in runs.items():
    scored = [[r for r in rows if r["test_accuracy"] == r["test_accuracy"]] for rows in seeds]
    evals[method] = [r["step"] for r in scored[0]]
    accs[method] = np.mean([[r["test_accuracy"] for r in rows] for rows in scored], 0).tolist()
    sizes[method] = np.mean([[r["size"] for r in rows] for rows in seeds], 0).tolist()
    final[method] = seeds[0][-1]["rules"]
    audit[method] = [d for rows in seeds for r in rows if r["record"]
                     for d in r["record"]["audit_deltas"]]
  return Curves(evals, accs, sizes, final, audit)


def _harmful(deltas: list[float]) -> tuple[int, int, float]:
  harmful = sum(d < 0 for d in deltas)
  return harmful, len(deltas), harmful / len(deltas) if deltas else float("nan")


def _third(c: Curves, method: str, which: int) -> float:
  """Mean test accuracy over the evaluations in the middle (1) or last (2) third of the
  steps (several evaluations, so one noisy test score does not decide a claim)."""
  steps, acc = np.asarray(c.eval_steps[method]), np.asarray(c.accuracy[method])
  last = steps[-1]
  inside = (steps > which * last / 3) & (steps <= (which + 1) * last / 3)
  return float(acc[inside].mean()) if inside.any() else float(acc[-1])


def _peak_before_last_third(c: Curves, method: str) -> float:
  steps, acc = np.asarray(c.eval_steps[method]), np.asarray(c.accuracy[method])
  return float(acc[steps <= 2 * steps[-1] / 3].max())


def claims(c: Curves, config) -> list[report.Claim]:
  roles = " (simulated roles)" if simulated(config) else ""
  zero, tsgd = c.accuracy["zero_shot"][0], c.accuracy["tsgd"][-1]
  rows = [report.Claim(
      f"TSGD raises accuracy at least {100 * config.min_gain:.0f} pts above zero-shot within "
      f"{config.steps} steps{roles}", "up to +18.7 pts (MATH/AIME)",
      f"{zero:.1%} -> {tsgd:.1%} ({100 * (tsgd - zero):+.1f} pts)", tsgd - zero, ">=",
      config.min_gain)]
  if "append_only" in c.accuracy:
    late, t_mid, t_late = _third(c, "append_only", 2), _third(c, "tsgd", 1), _third(c, "tsgd", 2)
    peak = _peak_before_last_third(c, "append_only")
    rows.append(report.Claim(
        f"Append-only memory saturates (last-third accuracy >= "
        f"{100 * config.min_append_drop:.0f} pts below its earlier peak) while TSGD holds at "
        f"K={config.capacity} (last third >= middle third - "
        f"{100 * config.hold_tolerance:.0f} pts){roles}",
        "memory saturation of append-only RAG",
        f"append-only peak {peak:.1%} -> last third {late:.1%} with "
        f"{c.sizes['append_only'][-1]:.0f} rules; TSGD middle third {t_mid:.1%} -> last third "
        f"{t_late:.1%}", peak - late, ">=", config.min_append_drop,
        also=((t_late - t_mid, ">=", -config.hold_tolerance),)))
  if "tsgd_no_verify" in c.audit:
    bad, n, frac = _harmful(c.audit["tsgd_no_verify"])
    vbad, vn, vfrac = _harmful(c.audit["tsgd"])
    rows.append(report.Claim(
        f"Without dual verification, accepted operations that lower held-out accuracy are "
        f"frequent (>= {config.min_harmful_fraction:.0%} of them, and more of them than "
        f"with it){roles}", "verification prevents overfitting to local errors",
        f"harmful accepted ops: {bad}/{n} ({frac:.0%}) without, {vbad}/{vn} ({vfrac:.0%}) "
        f"with verification", frac, ">=", config.min_harmful_fraction,
        also=((bad - vbad, ">", 0),)))
  if "append_only" in c.sizes:
    size, app_size = c.sizes["tsgd"][-1], c.sizes["append_only"][-1]   # seed means
    app_acc = c.accuracy["append_only"][-1]
    rows.append(report.Claim(
        f"The final library is compact: at most {config.max_size_ratio:.0%} of the "
        f"append-only memory's rules, at higher accuracy{roles}", "about 30 rules",
        f"{size:.0f} rules (K={config.capacity}) vs {app_size:.0f}; {tsgd:.1%} vs "
        f"{app_acc:.1%}",
        size / max(app_size, 1), "<=", config.max_size_ratio,
        also=((tsgd - app_acc, ">", 0.0),)))
  return rows


def figures(c: Curves) -> dict[str, float]:
  out = {}
  for method in c.accuracy:
    out[f"{method}_accuracy"] = c.accuracy[method][-1]
    out[f"{method}_size"] = float(c.sizes[method][-1])
    if c.audit.get(method):
      out[f"{method}_harmful_fraction"] = _harmful(c.audit[method])[2]
  return out


def library_note(c: Curves, config) -> str:
  """The final TSGD library as a markdown list, for the report."""
  rules = c.final_rules["tsgd"]
  kind = "simulated roles" if simulated(config) else config.text_model
  lines = [f"Final TSGD library of seed {config.seed} ({len(rules)} rules, "
           f"K={config.capacity}, {kind}):", ""]
  lines += [f"{i}. `{r}`" for i, r in enumerate(rules, 1)] or ["(empty)"]
  return "\n".join(lines)


def oracle_accuracy(config, setups: dict) -> float:
  """Generated task only: the seed-mean test accuracy of the best library a capacity K
  admits by frequency, the hidden rules of the K most frequent families (a reference
  ceiling for the learned libraries, not a claim)."""
  accs = []
  for seed, (roles, task) in setups.items():
    families = problems_lib.make_families(config.data.num_families, seed)
    rules = [problems_lib.rule_text(f) for f in families[:config.capacity]]
    accs.append(el.accuracy(roles, rules, task.test))
  return float(np.mean(accs))


@report.register("experience_library", title="Experience library (TSGD)",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  config_module.preflight(config)
  seeds = [config.seed + i for i in range(config.num_seeds)]
  setups = {seed: (make_roles(config, seed), make_task(config, seed)) for seed in seeds}
  fp = trials.config_fingerprint(config, exclude=_NOT_RESULTS)
  with trials.TrialLog(os.path.join(workdir, "steps.jsonl"), fp) as log:
    runs = {m: [run_method(m, seed, *setups[seed], config, log) for seed in seeds]
            for m in config.methods}
  c = curves(runs)
  files = [plots.curves(workdir, c.eval_steps, c.accuracy, c.sizes, config.capacity)]
  figs = figures(c)
  if not config.data.problems_path:
    figs["oracle_top_k_accuracy"] = oracle_accuracy(config, setups)
  return report.Result(claims=report.claims_table(claims(c, config)), figures=figs,
                       plots=files, notes=(library_note(c, config),))
