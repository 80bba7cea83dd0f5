"""Experiment: single-prover interactive proofs for oracle-aided computations.

"How to avoid debate" (ICML 2026, papers/icml2026-abstracts.txt) gives doubly-efficient
single-prover proofs for computations with oracle access when the oracle is a
low-degree polynomial or the computation is robust to a fraction of wrong answers. We
measure, with methods/interactive_proofs:

1. completeness: honest sum-check, GKR (table and low-degree-oracle inputs) and
   spot-check provers are always accepted;
2. sum-check soundness: each cheating strategy's acceptance rate over 10^5 batched runs
   on a small field, against the bound n d / |F| (Clopper-Pearson upper limit);
3. robust-oracle soundness: the acceptance rate of a prover lying on a fraction f of
   the oracle answers against (1 - f)^k as k varies;
4. double efficiency: GKR over a low-degree oracle at N = 2^m, verifier / prover /
   recomputation wall time and oracle calls against N (log-log slopes), and the
   library's LM as the oracle of a robust majority / fraction, spot-checked with k
   calls instead of N.

Cheap except the LM (reused from the `lm` experiment or trained once in workdir/lm);
everything else recomputes on rerun. Plots: soundness.png, spot_checks.png,
scaling.png.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from common import lm as lm_lib
from common import plotting
from common import report
from common import timing
from experiments.configs import interactive_proofs as config_module
from experiments.plots import interactive_proofs as plots
from methods.interactive_proofs import gkr, judges, oracles, simulation, spot_check, sumcheck
from methods.interactive_proofs.field import PrimeField


def _rates(trials: dict, runs: int, chunk: int = 20_000) -> dict[str, int]:
  """{name: accepted runs} of vmapped trials fn(key) -> (accept, reason), each trial
  (fn, key) on the keys split from its own key in chunks, all in one compiled program
  (a program per trial compiled ~1.6x slower: XLA's cost per program dominates)."""
  batched = jax.jit(lambda keys: {name: jnp.sum(jax.vmap(trials[name][0])(k)[0])
                                  for name, k in keys.items()})
  accepted = dict.fromkeys(trials, 0)
  for start in range(0, runs, chunk):
    size = min(chunk, runs - start)
    keys = {name: jax.random.split(jax.random.fold_in(key, start), size)
            for name, (_, key) in trials.items()}
    for name, count in batched(keys).items():
      accepted[name] += int(count)
  return accepted


def _rate(fn, key, runs: int) -> tuple[int, int]:
  """(accepted, runs) of one vmapped trial fn(key) -> (accept, reason)."""
  return _rates({"trial": (fn, key)}, runs)["trial"], runs


def completeness(config) -> dict:
  """Acceptance rates of the honest provers (the large field)."""
  c, F = config.completeness, PrimeField(config.prime)
  key = jax.random.PRNGKey(config.seed)
  ops = ("mul",) + ("add",) * (c.gkr_log2 - 1)
  trials = {
      "sumcheck": (lambda k: simulation.sumcheck_trial(F, k, c.num_vars, c.degree, c.terms),
                   c.runs),
      "gkr_table": (lambda k: simulation.gkr_trial(F, k, ops, c.gkr_log2), c.gkr_runs),
      "gkr_oracle": (lambda k: simulation.gkr_trial(F, k, ops, c.gkr_log2, c.oracle_degree,
                                                     c.oracle_rank), c.gkr_runs),
  }
  truth = simulation.majority_answers(key, c.spot_items, 0.7)
  trials["spot_check"] = (lambda k: simulation.spot_trial(k, truth, "majority", c.spot_k,
                                                          0.1), c.spot_runs)
  keyed = {name: (fn, jax.random.fold_in(key, i)) for i, (name, (fn, _)) in
           enumerate(trials.items())}
  accepted = {}
  for runs in set(runs for _, runs in trials.values()):  # a program per run count
    accepted.update(_rates({name: keyed[name] for name, (_, r) in trials.items()
                            if r == runs}, runs))
  return {name: {"accepted": accepted[name], "runs": runs,
                 "rate": accepted[name] / runs} for name, (_, runs) in trials.items()}


def soundness(config) -> dict:
  """Per cheating strategy: accepted / runs, the Clopper-Pearson interval, the bound."""
  s = config.soundness
  F = PrimeField(s.prime)
  out = {"bound": s.num_vars * s.degree / s.prime,
         "optimal_exact": 1 - (1 - s.degree / s.prime) ** s.num_vars,
         "one_round_exact": s.degree / s.prime, "strategies": {}}
  trials = {st: (lambda k, st=st: simulation.sumcheck_trial(F, k, s.num_vars, s.degree, 1, st),
                 jax.random.PRNGKey(config.seed + 100 + i)) for i, st in enumerate(s.strategies)}
  accepted = _rates(trials, s.runs)
  for strategy in s.strategies:
    lo, hi = spot_check.binomial_interval(accepted[strategy], s.runs, s.confidence)
    out["strategies"][strategy] = {"accepted": accepted[strategy], "runs": s.runs,
                                   "rate": accepted[strategy] / s.runs, "lower": lo,
                                   "upper": hi}
  return out


def robust(config) -> dict:
  """Acceptance of spot-checked majority claims lying on a fraction f of the items."""
  r = config.robust
  truth = simulation.majority_answers(jax.random.PRNGKey(config.seed + 7), r.num_items,
                                      0.5 + 2 * r.delta)
  out = {"theory": {}, "measured": {}, "z": {}}
  for f in r.lie_fractions:
    lies = round(f * r.num_items)
    for j, k in enumerate(r.ks):
      fn = lambda key, k=k: simulation.spot_trial(key, truth, "majority", k, 0.0, lies)
      accepted, runs = _rate(fn, jax.random.PRNGKey(config.seed + 1000 * j + lies), r.runs)
      theory = spot_check.acceptance_probability(lies, r.num_items, k)
      rate = accepted / runs
      se = max(np.sqrt(theory * (1 - theory) / runs), 1.0 / runs)
      name = f"f={f:g}/k={k}"
      out["theory"][name], out["measured"][name] = theory, rate
      out["z"][name] = abs(rate - theory) / se
  out["z_bar"] = spot_check.bonferroni_z(r.alpha, len(out["z"]))
  return out


def _gkr_programs(F, ops, m: int):
  def oracle_of(cp):
    return simulation.cp_oracle(F, cp)

  compute = jax.jit(lambda cp: gkr.evaluate(F, ops, oracle_of(cp).fn(
      sumcheck.cube(m)))[-1])
  prove = jax.jit(lambda cp, coins: gkr.prove(F, ops, coins, oracle=oracle_of(cp)))
  check = jax.jit(lambda cp, t, coins, lines: gkr.check(F, ops, t, coins, oracle=oracle_of(cp),
                                                        test_lines=lines), static_argnums=3)
  return compute, prove, check


def scaling(config) -> dict:
  """GKR over a low-degree oracle: times and oracle calls of each side against N."""
  s, F = config.scaling, PrimeField(config.prime)
  rows = []
  for m in s.log2_sizes:
    ops = (s.ops,) * m
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed + 3), m)
    cp = oracles.random_cp(F, key, m, s.oracle_degree, s.oracle_rank)
    coins = gkr.draw_coins(F, jax.random.fold_in(key, 1), ops, m)
    compute, prove, check = _gkr_programs(F, ops, m)
    transcript = prove(cp, coins)
    accept, _ = check(cp, transcript, coins, s.test_lines)
    oracle = simulation.cp_oracle(F, cp)
    rows.append({
        "log2_n": m, "n": 2**m, "accepted": bool(accept),
        "compute_s": timing.median_seconds(lambda: compute(cp), s.repeats),
        "prover_s": timing.median_seconds(lambda: prove(cp, coins), s.repeats),
        "verifier_s": timing.median_seconds(
            lambda: check(cp, transcript, coins, s.test_lines), s.verifier_repeats),
        "verifier_queries": gkr.verifier_queries(oracle, s.test_lines),
        "prover_queries": _prover_queries(ops, s.oracle_degree, m), "compute_queries": 2**m})
    jax.clear_caches()  # each size compiles new programs
  fit = [r for r in rows if r["log2_n"] >= s.fit_from_log2]
  ns = [r["n"] for r in fit]
  slopes = {k: plotting.loglog_slope(ns, [r[k] for r in fit])
            for k in ("compute_s", "prover_s", "verifier_s", "verifier_queries",
                      "compute_queries")}
  slopes["prover_over_compute"] = plotting.loglog_slope(
      ns, [r["prover_s"] / r["compute_s"] for r in fit])
  return {"rows": rows, "slopes": slopes}


def _prover_queries(ops, degree: int, m: int) -> int:
  """Oracle queries of the honest prover: N to evaluate the circuit, then 2 per point of
  the bottom sum-check ((D + 1) 2^{m-2-i} in round i, padding included:
  `sumcheck.oracle_evaluations`), and 2 at its end."""
  d = gkr.layer_degree(ops[0], degree)
  return 2**m + 2 * sumcheck.oracle_evaluations(m - 1, d) + 2


def application(config, workdir: str) -> dict:
  """The LM judges N text windows; spot-checked majority and fraction vs recomputing."""
  a = config.application
  trained = lm_lib.trained_lm(config.lm, workdir, lm_workdir=config.lm_workdir)
  data = np.asarray(trained.corpus.validation)
  n_max = max(a.num_items)
  starts = np.random.default_rng(config.seed).integers(0, len(data) - a.window - 1, n_max)
  windows = data[starts[:, None] + np.arange(a.window + 1)[None, :]]
  scorer = judges.lm_scorer(trained.model, trained.params, windows)
  threshold = float(np.quantile(scorer(np.arange(min(256, n_max))), a.quantile))
  judge = judges.threshold_judge(scorer, threshold)
  rows = []
  for n in a.num_items:
    rows.append(_application_row(judge, n, a, config.seed))
  ns = [r["n"] for r in rows]
  slopes = {k: plotting.loglog_slope(ns, [r[k] for r in rows])
            for k in ("recompute_s", "verifier_s")}
  return {"threshold_nats": threshold, "rows": rows, "slopes": slopes}


def _application_row(judge, n: int, a, seed: int) -> dict:
  everything = np.arange(n)
  truth = judge(everything)  # the prover's work: every oracle call
  recompute = timing.median_seconds(lambda: judge(everything), a.repeats)
  out = {"n": n, "fraction": float(truth.mean()), "recompute_s": recompute,
         "verifier_calls": a.k, "recompute_calls": n}
  key = jax.random.PRNGKey(seed + n)
  truth_j = jnp.asarray(truth)
  for kind in spot_check.AGGREGATES:
    claim = spot_check.honest_claim(truth_j, kind)
    accept, reason = spot_check.check(claim, lambda idx: jnp.asarray(judge(idx)), a.k, key,
                                      kind, a.delta)
    out[f"{kind}_honest_reason"] = int(reason)
    lying = spot_check.lying_claim(truth_j, kind, round(2 * a.delta * n), key)
    out[f"{kind}_liar_accepted"] = bool(spot_check.check(
        lying, lambda idx: jnp.asarray(judge(idx)), a.k, jax.random.fold_in(key, 1), kind,
        a.delta)[0])
  claim = spot_check.honest_claim(truth_j, "fraction")
  out["verifier_s"] = timing.median_seconds(lambda: spot_check.check(
      claim, lambda idx: jnp.asarray(judge(idx)), a.k, key, "fraction", a.delta)[0],
                                            a.repeats)
  return out


def figures(comp: dict, sound: dict, rob: dict, scale: dict, app: dict) -> dict:
  """The named figures of result.json."""
  out = {}
  for k, v in comp.items():
    out[f"completeness/{k}/accepted"], out[f"completeness/{k}/runs"] = v["accepted"], v["runs"]
  out["soundness/bound_nd_over_p"] = sound["bound"]
  out["soundness/optimal_exact"] = sound["optimal_exact"]
  for name, v in sound["strategies"].items():
    out[f"soundness/{name}/rate"] = v["rate"]
    out[f"soundness/{name}/upper"] = v["upper"]
  for name in rob["measured"]:
    out[f"robust/{name}/measured"] = rob["measured"][name]
    out[f"robust/{name}/theory"] = rob["theory"][name]
  for k, v in scale["slopes"].items():
    out[f"scaling/slope/{k}"] = v
  for row in scale["rows"]:
    for k in ("compute_s", "prover_s", "verifier_s", "verifier_queries"):
      out[f"scaling/N=2^{row['log2_n']}/{k}"] = row[k]
  out["application/threshold_nats"] = app["threshold_nats"]
  for k, v in app["slopes"].items():
    out[f"application/slope/{k}"] = v
  for row in app["rows"]:
    for k in ("fraction", "recompute_s", "verifier_s", "verifier_calls",
              "majority_liar_accepted", "fraction_liar_accepted"):
      out[f"application/N={row['n']}/{k}"] = row[k]
  return out


def claims(comp: dict, sound: dict, rob: dict, scale: dict, app: dict, config):
  """The four claim rows (thresholds from the config)."""
  s, r, c = config.soundness, config.robust, config.claims
  rates = {k: v["rate"] for k, v in comp.items()}
  uppers = {k: v["upper"] for k, v in sound["strategies"].items()}
  sl, asl = scale["slopes"], app["slopes"]
  worst_z = max(rob["z"].values())
  honest_app = [row[f"{kind}_honest_reason"] == spot_check.ACCEPT for row in app["rows"]
                for kind in spot_check.AGGREGATES]
  return report.claims_table([
      report.Claim(
          "Completeness: honest sum-check, GKR (table and low-degree oracle inputs) and "
          "spot-check provers are accepted in 100% of runs",
          "honest provers always accepted",
          ", ".join(f"{k} {v['accepted']}/{v['runs']}" for k, v in comp.items()),
          rates, "==", 1.0, also=((honest_app, "==", True),)),
      report.Claim(
          f"Sum-check soundness: every cheating prover's acceptance rate (Clopper-Pearson "
          f"{s.confidence:.0%} upper limit, {s.runs:,} runs, F_{s.prime}) is <= n d / |F|",
          f"<= n d / |F| = {sound['bound']:.4f}",
          ", ".join(f"{k} {v['rate']:.4f} (<= {v['upper']:.4f})"
                    for k, v in sound["strategies"].items()),
          uppers, "<=", sound["bound"]),
      report.Claim(
          "Robust-oracle soundness: a prover lying on a fraction f of the answers is "
          "accepted with probability (1 - f)^k (every (f, k) cell within the Bonferroni "
          f"bar at family-wise level {r.alpha:g})",
          "accepted w.p. <= (1 - delta)^k",
          f"largest deviation {worst_z:.2f} s.e. over {len(rob['z'])} (f, k) cells "
          f"(bar {rob['z_bar']:.2f})",
          worst_z, "<=", rob["z_bar"]),
      report.Claim(
          "Doubly efficient: verifier time and oracle calls flat in N (GKR over a "
          "low-degree oracle; k spot checks with the LM as the oracle), recomputation "
          "linear, prover / computation ratio bounded",
          "verifier polylog(N), prover O(computation)",
          f"slopes vs N: GKR verifier {sl['verifier_s']:.2f}, its oracle calls "
          f"{sl['verifier_queries']:.2f}, recompute {sl['compute_s']:.2f}, prover "
          f"{sl['prover_s']:.2f}, prover/compute {sl['prover_over_compute']:.2f}; LM "
          f"spot-check verifier {asl['verifier_s']:.2f} vs recompute {asl['recompute_s']:.2f}",
          [sl["verifier_s"], sl["verifier_queries"], asl["verifier_s"]], "<=",
          c.verifier_slope_max,
          also=(([sl["compute_s"], asl["recompute_s"]], ">=", c.recompute_slope_min),
                (sl["prover_over_compute"], "<=", c.prover_ratio_slope_max))),
  ])


@report.register("interactive_proofs", title="Single-prover interactive proofs for "
                 "oracle-aided computations", validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  """Measures the four studies, writes the three plots and returns the claims."""
  comp, sound, rob = completeness(config), soundness(config), robust(config)
  scale, app = scaling(config), application(config, workdir)
  names = ["soundness.png", "spot_checks.png", "scaling.png"]
  plots.soundness(os.path.join(workdir, names[0]), sound)
  plots.spot_checks(os.path.join(workdir, names[1]), rob, config.robust)
  plots.scaling(os.path.join(workdir, names[2]), scale, app)
  return report.Result(claims=claims(comp, sound, rob, scale, app, config),
                       figures=figures(comp, sound, rob, scale, app), plots=names)
