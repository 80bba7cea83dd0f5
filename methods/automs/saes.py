"""SAES: simulation-aware evolutionary search (our reading of the AutoMS paper and of
the public code's `tools/saes_optimizer.py`).

The search runs on x in [0, 1]^D against a black-box `evaluate(X) -> Y` (the
simulator); each of the m objectives is a target on one output column,
`target(y)` the nearest point of its interval. Minimised objectives are the
normalised violations v_j (fitness 1 / (1 + v_j) in the paper's terms).

**Local gradient** (`local_gradient`): around an anchor x_a, the weighted
least-squares slope of one output over the <= `history` (>= `min_history`)
most recent simulations, after dropping outliers whose modified z-score
|y - med| / (1.4826 MAD) exceeds 2.5:

    g = (dX^T W dX + 1e-6 I)^-1 dX^T W dy,    w_i = exp(-0.5 (n-1-i)/n) / (1 + |dx_i|^2),

with dx_i = x_i - x_a and dy_i = y_i - y_a, returned as g / |g| with the confidence

    conf = 0.4 R^2_w + 0.3 (1 - e^{-n/10}) + 0.3 (fraction of sign(g.dx) = sign(dy)).

**Directed mutation**: a child steps along the signed gradient of a randomly chosen
violated objective, c' = c + 0.3 conf s g + 0.1 (2 - conf) N(0, sigma_g^2),
sigma_g = 0.1 (1 - gen/50) + 0.01 (ranges are 1 on the unit box), s = sign(target - y).

**Guided candidates**: from the archive's best member (most summed fitness), the
confidence-weighted sum of every violated objective's signed local gradient, with
momentum 0.3 on the previous direction, and a step size adapted by success
(x1.5 when a guided candidate improves on its anchor, x0.7 otherwise, in [0.01, 0.3]).

**The rest**: SBX (eta 20, p 0.8) and polynomial mutation (eta 20, p 0.2) from
binary tournaments; NSGA-II survival on parents + children; an elite archive of 50
kept by the same rank-then-crowding order; a restart of all but the archive's best
`pop_size // 4` after `stagnation` generations without an improvement of the best
summed fitness above 0.005. `local_gradient=False` is the ablation: no directed
mutation (polynomial mutation instead) and no guided candidates.

The first column of x may be a categorical gene (the cell family, `categorical=True`):
then gradients use only simulations of the anchor's category and never move it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from methods.automs import evolution


class SAESConfig(NamedTuple):
  """SAES hyperparameters (the public code's values by default)."""
  pop_size: int = 20
  generations: int = 10
  stagnation: int = 3
  archive: int = 50
  eta_c: float = 20.0
  prob_c: float = 0.8
  eta_m: float = 20.0
  prob_m: float = 0.2
  history: int = 30
  min_history: int = 5
  mad_cut: float = 2.5
  ridge: float = 1e-6
  guided: int = 3
  local_gradient: bool = True
  categorical: bool = True
  categories: int = 1


class Objectives(NamedTuple):
  """How to score outputs: violations (P, m) >= 0 and the signed steering per objective.

  violations(Y) -> (P, m); targets(Y) -> (P, m) the nearest admissible value of the
  column `columns[j]` of Y.
  """
  violations: Callable[[np.ndarray], np.ndarray]
  targets: Callable[[np.ndarray], np.ndarray]
  columns: tuple[int, ...]


def _category(x: np.ndarray, k: int) -> np.ndarray:
  return np.minimum((np.asarray(x)[..., 0] * k).astype(int), k - 1)


def local_gradient(X: np.ndarray, y: np.ndarray, anchor: np.ndarray, anchor_value: float,
                   config: SAESConfig = SAESConfig()) -> tuple[np.ndarray, float]:
  """The weighted least-squares direction of y around `anchor` and its confidence.

  Args:
    X: (n, D) simulated inputs, oldest first.
    y: (n,) one output of those simulations.
    anchor: (D,) the point the slope is taken at; `anchor_value` its output.
    config: `history`, `min_history`, `mad_cut`, `ridge`.

  Returns:
    (g (D,) unit vector or zeros, confidence in [0, 1]; 0 without enough data).

  Example:
    >>> g, c = local_gradient(X, X @ w, X[-1], X[-1] @ w)   # g ~ w / |w|
  """
  X, y = np.asarray(X, float)[-config.history:], np.asarray(y, float)[-config.history:]
  keep = np.isfinite(y)
  X, y = X[keep], y[keep]
  if len(y) < config.min_history:
    return np.zeros_like(anchor, dtype=float), 0.0
  med = np.median(y)
  mad = np.median(np.abs(y - med))
  if mad > 1e-10:
    inlier = np.abs(y - med) / (1.4826 * mad) <= config.mad_cut
    X, y = X[inlier], y[inlier]
  n = len(y)
  dX, dy = X - anchor, y - anchor_value
  moved = np.linalg.norm(dX, axis=1) > 1e-6
  if moved.sum() < 3:
    return np.zeros_like(anchor, dtype=float), 0.0
  order = np.arange(n)[moved]
  dX, dy = dX[moved], dy[moved]
  w = np.exp(-0.5 * (n - 1 - order) / n) / (1.0 + np.sum(dX ** 2, 1))
  g = np.linalg.solve(dX.T @ (w[:, None] * dX) + config.ridge * np.eye(dX.shape[1]),
                      dX.T @ (w * dy))
  norm = np.linalg.norm(g)
  if norm <= 1e-10:
    return np.zeros_like(anchor, dtype=float), 0.0
  return g / norm, _confidence(dX, dy, w, g)


def _confidence(dX, dy, w, g) -> float:
  pred = dX @ g
  ss_tot = np.sum(w * (dy - np.average(dy, weights=w)) ** 2)
  r2 = 0.0 if ss_tot < 1e-10 else max(0.0, 1.0 - np.sum(w * (dy - pred) ** 2) / ss_tot)
  informative = (np.abs(dy) > 1e-10) & (np.abs(pred) > 1e-10)
  consistency = (np.mean(np.sign(pred[informative]) == np.sign(dy[informative]))
                 if informative.any() else 0.5)
  return float(np.clip(0.4 * r2 + 0.3 * (1 - np.exp(-len(dy) / 10)) + 0.3 * consistency,
                       0.0, 1.0))


class _Run:
  """The mutable state of one SAES run (all simulations, archive, step size)."""

  def __init__(self, evaluate, objectives, config, key):
    self.evaluate, self.obj, self.config, self.key = evaluate, objectives, config, key
    self.X = np.zeros((0, 0))
    self.Y = np.zeros((0, 0))
    self.step, self.momentum = 0.1, None
    self.rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel()[-1])

  def next_key(self):
    self.key, k = jax.random.split(self.key)
    return k

  def simulate(self, X: np.ndarray) -> np.ndarray:
    X = np.clip(np.asarray(X, float), 0.0, 1.0)
    Y = np.asarray(self.evaluate(X), float)
    self.X = X if self.X.size == 0 else np.concatenate([self.X, X])
    self.Y = Y if self.Y.size == 0 else np.concatenate([self.Y, Y])
    return Y

  def violations(self, rows) -> np.ndarray:
    v = np.asarray(self.obj.violations(self.Y[rows]), float)
    return np.where(np.isfinite(v), v, 1e6)

  def score(self, rows) -> np.ndarray:
    """Summed fitness sum_j 1 / (1 + v_j) of history rows."""
    return np.sum(1.0 / (1.0 + self.violations(rows)), axis=-1)

  def gradient(self, anchor_row: int, objective: int) -> tuple[np.ndarray, float, float]:
    """(signed unit direction, confidence, sign) of objective j at a history row."""
    c = self.config
    rows = np.arange(len(self.X))
    if c.categorical:
      rows = rows[_category(self.X[rows], c.categories) ==
                  _category(self.X[anchor_row], c.categories)]
    col = self.obj.columns[objective]
    g, conf = local_gradient(self.X[rows], self.Y[rows, col], self.X[anchor_row],
                             self.Y[anchor_row, col], c)
    if c.categorical:
      g[0] = 0.0
    target = self.obj.targets(self.Y[anchor_row:anchor_row + 1])[0, objective]
    sign = float(np.sign(target - self.Y[anchor_row, col]))
    return g, conf, sign


def _directed(run: _Run, parent_row: int, child: np.ndarray, gen: int) -> np.ndarray:
  """c' = c + 0.3 conf s g + 0.1 (2 - conf) N(0, sigma_g^2) for a violated objective."""
  violated = np.flatnonzero(run.violations([parent_row])[0] > 0)
  if violated.size == 0:
    return child
  g, conf, sign = run.gradient(parent_row, int(run.rng.choice(violated)))
  sigma = 0.1 * (1 - gen / 50) + 0.01
  noise = run.rng.normal(0.0, sigma, child.shape)
  if run.config.categorical:
    noise[0] = 0.0
  return np.clip(child + 0.3 * conf * sign * g + 0.1 * (2 - conf) * noise, 0.0, 1.0)


def _guided(run: _Run, anchor_row: int) -> np.ndarray:
  """`guided` candidates along the confidence-weighted signed gradients at the anchor."""
  direction = np.zeros(run.X.shape[1])
  for j in np.flatnonzero(run.violations([anchor_row])[0] > 0):
    g, conf, sign = run.gradient(anchor_row, int(j))
    direction += conf * sign * g
  if np.linalg.norm(direction) <= 1e-10:
    return np.zeros((0, run.X.shape[1]))
  direction /= np.linalg.norm(direction)
  if run.momentum is not None:
    direction = 0.7 * direction + 0.3 * run.momentum
    direction /= max(np.linalg.norm(direction), 1e-12)
  run.momentum = direction
  noise = run.rng.normal(0.0, 0.5 * run.step, (run.config.guided, run.X.shape[1]))
  if run.config.categorical:
    noise[:, 0] = 0.0
  return np.clip(run.X[anchor_row] + run.step * direction + noise, 0.0, 1.0)


def _children(run: _Run, pop: np.ndarray, ranks, crowding, n: int, gen: int) -> np.ndarray:
  """n children: tournament, SBX, then directed (p 0.5) or polynomial mutation."""
  c = run.config
  lo, hi = np.zeros(run.X.shape[1]), np.ones(run.X.shape[1])
  parents = np.asarray(evolution.binary_tournament(run.next_key(), ranks, crowding,
                                                   2 * ((n + 1) // 2)))
  a, b = run.X[pop[parents[0::2]]], run.X[pop[parents[1::2]]]
  c1, c2 = evolution.sbx(run.next_key(), a, b, lo, hi, c.eta_c, c.prob_c)
  kids = np.concatenate([np.asarray(c1), np.asarray(c2)])[:n]
  origin = np.concatenate([pop[parents[0::2]], pop[parents[1::2]]])[:n]
  mutated = np.array(evolution.polynomial_mutation(run.next_key(), kids, lo, hi, c.eta_m,
                                                     c.prob_m))
  for i in range(n):
    if c.local_gradient and run.rng.random() < 0.5:
      mutated[i] = _directed(run, int(origin[i]), kids[i], gen)
  return mutated


def _select(run: _Run, rows: np.ndarray, k: int, ranked: bool = True):
  """NSGA-II survival of k history rows: (kept rows, their ranks, their crowding).

  The violations are padded to a multiple of 32 rows with rows worse than any real one
  (they form the last front and never survive while k <= len(rows)), so the compiled
  survival program is reused across generations instead of traced per size.
  """
  F = run.violations(rows)
  size = -(-len(rows) // 32) * 32
  padded = np.full((size, F.shape[1]), 1e9)
  padded[:len(rows)] = F
  order = np.asarray(evolution.survival(padded, np.zeros(size), size))
  kept = rows[order[:k]]
  if not ranked:
    return kept, None, None
  Fk = run.violations(kept)
  ranks = evolution.non_dominated_ranks(Fk)
  return kept, ranks, evolution.crowding_distance(Fk, ranks)


class SAESResult(NamedTuple):
  X: np.ndarray         # (N, D) every simulated input, in order
  Y: np.ndarray         # (N, outputs)
  archive: np.ndarray   # rows of the final elite archive
  generations: int
  restarts: int


def saes(evaluate: Callable[[np.ndarray], np.ndarray], objectives: Objectives,
         initial: np.ndarray, key: jax.Array, config: SAESConfig = SAESConfig(),
         budget: int | None = None, stop: Callable[[], bool] = lambda: False) -> SAESResult:
  """Runs SAES from an initial population until `generations`, `budget` or `stop()`.

  Args:
    evaluate: X (P, D) in [0, 1] -> Y (P, outputs) (the simulator).
    objectives: `Objectives` over Y's columns.
    initial: (pop_size, D) first designs (from the Generator agent).
    key: a `jax.random` key.
    config: `SAESConfig`.
    budget: the most simulations (None: pop_size (generations + 1)).
    stop: called after every generation; True ends the search (e.g. a success).

  Returns:
    `SAESResult` with every simulation in order.
  """
  c = config
  budget = c.pop_size * (c.generations + 1) if budget is None else budget
  run = _Run(evaluate, objectives, c, key)
  run.simulate(initial[:budget])
  pop, ranks, crowd = _select(run, np.arange(len(run.X)), min(c.pop_size, len(run.X)))
  archive, best, stale, restarts, gen = pop, run.score(pop).max(), 0, 0, 0
  while gen < c.generations and len(run.X) < budget and not stop():
    gen += 1
    n_guided = c.guided if c.local_gradient else 0
    anchor = int(archive[np.argmax(run.score(archive))])
    guided = _guided(run, anchor) if n_guided else np.zeros((0, run.X.shape[1]))
    kids = _children(run, pop, ranks, crowd, c.pop_size - len(guided), gen)
    start = len(run.X)
    run.simulate(np.concatenate([guided, kids])[:budget - start])
    new = np.arange(start, len(run.X))
    if len(guided):
      improved = run.score(new[:len(guided)]).max() > run.score([anchor])[0]
      run.step = float(np.clip(run.step * (1.5 if improved else 0.7), 0.01, 0.3))
    archive = _select(run, np.union1d(archive, new), min(c.archive, len(archive) + len(new)),
                      ranked=False)[0]
    pop, ranks, crowd = _select(run, np.concatenate([pop, new]), c.pop_size)
    score = run.score(archive).max()
    stale = 0 if score > best + 0.005 else stale + 1
    best = max(best, score)
    if stale >= c.stagnation and len(run.X) < budget:
      pop, ranks, crowd = _restart(run, archive, budget)
      stale, restarts = 0, restarts + 1
  return SAESResult(run.X, run.Y, archive, gen, restarts)


def _restart(run: _Run, archive: np.ndarray, budget: int):
  """Keeps the archive's best pop_size // 4 and draws the rest uniformly (simulated)."""
  c = run.config
  keep = archive[np.argsort(-run.score(archive), kind="stable")[:max(1, c.pop_size // 4)]]
  fresh = run.rng.uniform(size=(c.pop_size - len(keep), run.X.shape[1]))
  if c.categorical:  # stay within the categories the initial population used
    fresh[:, 0] = run.X[run.rng.integers(0, len(run.X), len(fresh)), 0]
  start = len(run.X)
  run.simulate(fresh[:budget - start])
  rows = np.concatenate([keep, np.arange(start, len(run.X))])
  return _select(run, rows, len(rows))
