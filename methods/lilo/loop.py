"""The optimisation loops: LILO and its baselines on one problem, one iteration at a time.

Every method spends the same budget of decision-maker (DM) interactions per iteration
(`LoopConfig.feedback_per_iter`): LILO and the LLM-only optimiser get that many
free-form feedback messages, preferential BO that many pairwise comparisons, scalar BO
that many 1-10 ratings. The true-utility oracle and random search use no DM.

LILO, iteration t (after an initial random design of `initial` points):
  1. pairs: every pair of evaluated arms, or the `max_pairs` with the highest analytic
     EUBO under a pairwise GP on outcomes fitted to the previous labels;
  2. the translator (a `TextModel`) labels each pair from the DM's goals and all its
     feedback so far (labels are regenerated every iteration, as in the public code);
  3. a pairwise GP on inputs is fitted to those labels (the proxy utility);
  4. qLogNEI on the proxy picks the next `batch_size` inputs, which are evaluated;
  5. the DM writes `feedback_per_iter` messages about the new arms and the best so far.

A `Run` is the whole BO state (inputs, outcomes, feedback, labels, ratings, counters)
and serialises to JSON, so a run is checkpointed after every iteration.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

from absl import logging
import jax
import numpy as np

from methods.lilo import acquisition
from methods.lilo import dm as dm_lib
from methods.lilo import gp as gp_lib
from methods.lilo import problems as problems_lib
from methods.lilo import prompts
from methods.lilo import translator as translator_lib

METHODS = ("lilo", "pbo", "scalar_bo", "oracle_bo", "random", "llm_only")


class LoopConfig(NamedTuple):
  """Budgets of one run (see the module docstring)."""
  initial: int = 8
  batch_size: int = 4
  feedback_per_iter: int = 2
  max_pairs: int = 64
  translator_samples: int = 1
  translator_max_tokens: int = 256
  proposer_max_tokens: int = 512
  gp_steps: int = 100
  raw_samples: int = 256
  restarts: int = 4
  acq_steps: int = 60
  mc_samples: int = 128


class Run(NamedTuple):
  """The BO state after some iterations. X in [0, 1]^d (unit cube), Y the outcomes."""
  X: np.ndarray
  Y: np.ndarray
  feedback: tuple[str, ...]
  comparisons: np.ndarray     # (m, 2) winner, loser: LILO's latest labels, PBO's answers
  rated: np.ndarray           # scalar BO: indices of rated arms
  ratings: np.ndarray         # and their 1-10 ratings
  interactions: int
  iteration: int
  translator_accuracy: tuple[float, ...]
  unparsed: int

  def to_json(self) -> dict:
    return {"X": self.X.tolist(), "Y": self.Y.tolist(), "feedback": list(self.feedback),
            "comparisons": self.comparisons.tolist(), "rated": self.rated.tolist(),
            "ratings": self.ratings.tolist(), "interactions": self.interactions,
            "iteration": self.iteration,
            "translator_accuracy": list(self.translator_accuracy), "unparsed": self.unparsed}

  @classmethod
  def from_json(cls, d: dict) -> "Run":
    k = len(d["Y"][0]) if d["Y"] else 0
    return cls(np.asarray(d["X"], float), np.asarray(d["Y"], float).reshape(-1, k),
               tuple(d["feedback"]), np.asarray(d["comparisons"], int).reshape(-1, 2),
               np.asarray(d["rated"], int), np.asarray(d["ratings"], float),
               int(d["interactions"]), int(d["iteration"]),
               tuple(float(a) for a in d["translator_accuracy"]), int(d["unparsed"]))


class Context(NamedTuple):
  """What a run needs besides its state: the problem, the DM, the text-model roles."""
  problem: problems_lib.Problem
  dm: dm_lib.SimulatedDM
  translator: Any          # a TextModel (LILO's translator)
  proposer: Any            # a TextModel (the LLM-only optimiser)
  config: LoopConfig
  seed: int


def true_utility(ctx: Context, Y: np.ndarray) -> np.ndarray:
  return np.asarray(problems_lib.utility(ctx.problem, Y), float)


def best_utility(ctx: Context, run: Run) -> float:
  """The metric: the best true utility among the evaluated arms."""
  return float(true_utility(ctx, run.Y).max())


def _evaluate(ctx: Context, U: np.ndarray) -> np.ndarray:
  X_raw = problems_lib.from_unit(ctx.problem, U)
  return np.asarray(ctx.problem.outcomes(X_raw), float)


def _arms(run: Run) -> dict[int, np.ndarray]:
  return {i: y for i, y in enumerate(run.Y)}


def _shown(ctx: Context, run: Run, new: range) -> list[int]:
  """The arms a DM message is about: the newest batch and the best arm so far (the DM
  sees its own utility; the optimiser does not)."""
  best = int(np.argmax(true_utility(ctx, run.Y)))
  return sorted(set(new) | {best})


def _dm_messages(ctx: Context, run: Run, new: range) -> list[str]:
  shown = _shown(ctx, run, new)
  return [ctx.dm.feedback(_arms(run), shown, rng_step=run.iteration * 97 + j)
          for j in range(ctx.config.feedback_per_iter)]


def _key(ctx: Context, run: Run, salt: int) -> jax.Array:
  return jax.random.fold_in(jax.random.PRNGKey(ctx.seed), run.iteration * 16 + salt)


def start(method: str, ctx: Context) -> Run:
  """Iteration 0: `initial` uniform points; the DM's first feedback (goals are prior
  knowledge, given up front and not counted), comparisons of random pairs, or ratings of
  random arms, by method."""
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  rng = np.random.default_rng([ctx.seed, 0])
  U = rng.random((ctx.config.initial, ctx.problem.dim))
  empty = np.zeros((0, 2), int)
  run = Run(U, _evaluate(ctx, U), (), empty, np.zeros(0, int), np.zeros(0), 0, 0, (), 0)
  return _feedback(method, ctx, run, range(len(U)), rng)


def _feedback(method: str, ctx: Context, run: Run, new: range,
              rng: np.random.Generator) -> Run:
  """The iteration's DM interactions."""
  F = ctx.config.feedback_per_iter
  if method in ("lilo", "llm_only"):
    goals = (ctx.dm.goals(),) if not run.feedback else ()
    return run._replace(feedback=run.feedback + goals + tuple(_dm_messages(ctx, run, new)),
                        interactions=run.interactions + F)
  if method == "pbo":
    pairs = _pbo_pairs(ctx, run, rng)
    answers = [(a, b) if ctx.dm.compare(run.Y[a], run.Y[b]) == 0 else (b, a) for a, b in pairs]
    comparisons = np.concatenate([run.comparisons, np.asarray(answers, int).reshape(-1, 2)])
    return run._replace(comparisons=comparisons, interactions=run.interactions + F)
  if method == "scalar_bo":
    unrated = [i for i in range(len(run.Y)) if i not in set(run.rated.tolist())]
    chosen = list(rng.choice(unrated, size=min(F, len(unrated)), replace=False))
    ratings = [float(ctx.dm.rate(run.Y[i])) for i in chosen]
    return run._replace(rated=np.concatenate([run.rated, np.asarray(chosen, int)]),
                        ratings=np.concatenate([run.ratings, ratings]),
                        interactions=run.interactions + F)
  return run


def _pbo_pairs(ctx: Context, run: Run, rng: np.random.Generator) -> list[tuple[int, int]]:
  """PBO's queries: random pairs at first, then the top-EUBO pairs of the pairwise GP on
  inputs (not already asked)."""
  F, n = ctx.config.feedback_per_iter, len(run.Y)
  asked = {tuple(sorted(c)) for c in run.comparisons.tolist()}
  pool = [p for p in itertools.combinations(range(n), 2) if p not in asked]
  if not len(run.comparisons):
    return [pool[i] for i in rng.choice(len(pool), size=F, replace=False)]
  gp = gp_lib.fit_pairwise_gp(run.X, run.comparisons, steps=ctx.config.gp_steps)
  mean, cov = gp_lib.pairwise_posterior(gp, run.X)
  ranked = np.asarray(acquisition.top_eubo_pairs(mean, cov, len(pool) + len(asked)))
  picked = [tuple(int(v) for v in p) for p in ranked if tuple(sorted(p)) not in asked]
  return [tuple(sorted(p)) for p in picked[:F]]


def _lilo_pairs(ctx: Context, run: Run, rng: np.random.Generator) -> np.ndarray:
  n = len(run.Y)
  pairs = np.asarray(list(itertools.combinations(range(n), 2)), int)
  if len(pairs) <= ctx.config.max_pairs:
    return pairs
  if len(run.comparisons):   # EUBO under a pairwise GP on outcomes, fitted to the last labels
    lo, hi = np.asarray(ctx.problem.y_lower, float), np.asarray(ctx.problem.y_upper, float)
    gp = gp_lib.fit_pairwise_gp((run.Y - lo) / (hi - lo), run.comparisons,
                                steps=ctx.config.gp_steps)
    mean, cov = gp_lib.pairwise_posterior(gp, (run.Y - lo) / (hi - lo))
    return np.asarray(acquisition.top_eubo_pairs(mean, cov, ctx.config.max_pairs), int)
  return pairs[rng.choice(len(pairs), size=ctx.config.max_pairs, replace=False)]


def _nei_pairwise(X, args):
  gp, baseline, key, samples = args
  return acquisition.q_log_nei(lambda Z: gp_lib.pairwise_posterior_unchecked(gp, Z),
                               baseline, X, key, num_samples=samples.shape[0])


def _ei_regression(X, args):
  gp, best_f, key, samples = args
  return acquisition.q_log_ei(lambda Z: gp_lib.gp_posterior_unchecked(gp, Z), best_f, X,
                              key, num_samples=samples.shape[0])


def _acquire(ctx: Context, run: Run, model, key, best_f: float | None) -> np.ndarray:
  """The next batch: qLogNEI over the evaluated points on a pairwise GP (`best_f` None),
  or qLogEI over `best_f` on a regression GP. The acquisition functions are module-level
  and the model travels as data, so each shape compiles once per process."""
  c = ctx.config
  samples = np.zeros(c.mc_samples)      # only its length is read (a static shape)
  if best_f is None:
    acq, args = _nei_pairwise, (model, run.X, key, samples)
  else:
    acq, args = _ei_regression, (model, np.float64(best_f), key, samples)
  return np.asarray(acquisition.optimize_acqf(
      acq, c.batch_size, ctx.problem.dim, jax.random.fold_in(key, 1), args=args,
      raw_samples=c.raw_samples, restarts=c.restarts, steps=c.acq_steps), float)


def _propose(method: str, ctx: Context, run: Run, rng: np.random.Generator) -> tuple[np.ndarray, Run]:
  """The next batch of inputs in [0, 1]^d (and the run with LILO's new labels)."""
  c, key = ctx.config, _key(ctx, run, 0)
  if method == "random":
    return rng.random((c.batch_size, ctx.problem.dim)), run
  if method == "llm_only":
    prompt = prompts.optimizer_prompt(ctx.problem, list(run.feedback), run.X, run.Y,
                                      c.batch_size)
    reply = ctx.proposer.complete([prompt], max_tokens=c.proposer_max_tokens)[0]
    X = prompts.parse_optimizer_reply(reply, c.batch_size, ctx.problem.dim)
    if X is None:
      logging.warning("llm_only: the proposer's reply did not parse; random points instead")
      return rng.random((c.batch_size, ctx.problem.dim)), run._replace(unparsed=run.unparsed + 1)
    return np.asarray(X, float), run
  if method == "lilo":
    pairs = _lilo_pairs(ctx, run, rng)
    t = translator_lib.translate(ctx.translator, ctx.problem, list(run.feedback), _arms(run),
                                 pairs, samples=c.translator_samples,
                                 max_tokens=c.translator_max_tokens,
                                 true_utility=true_utility(ctx, run.Y))
    run = run._replace(comparisons=np.asarray(t.comparisons, int).reshape(-1, 2),
                       translator_accuracy=run.translator_accuracy + (float(t.accuracy),),
                       unparsed=run.unparsed + int(t.unparsed))
    if not len(run.comparisons):
      logging.warning("lilo: no usable labels this iteration; random points instead")
      return rng.random((c.batch_size, ctx.problem.dim)), run
  if method in ("lilo", "pbo"):
    gp = gp_lib.fit_pairwise_gp(run.X, run.comparisons, steps=c.gp_steps)
    return _acquire(ctx, run, gp, key, None), run
  if method == "scalar_bo":
    X, y = run.X[run.rated], run.ratings
  else:                                   # oracle_bo: the true utility of every arm
    X, y = run.X, true_utility(ctx, run.Y)
  model = gp_lib.fit_gp(X, y, steps=c.gp_steps)
  return _acquire(ctx, run, model, key, float(y.max())), run


def iterate(method: str, ctx: Context, run: Run) -> Run:
  """One iteration: propose a batch, evaluate it, then the DM interactions."""
  rng = np.random.default_rng([ctx.seed, run.iteration + 1])
  U, run = _propose(method, ctx, run, rng)
  Y = _evaluate(ctx, U)
  n = len(run.X)
  run = run._replace(X=np.concatenate([run.X, U]), Y=np.concatenate([run.Y, Y]),
                     iteration=run.iteration + 1)
  return _feedback(method, ctx, run, range(n, n + len(U)), rng)
