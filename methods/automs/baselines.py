"""The baselines, all at the same simulator budget (homogenisation solves) on the same
design space x in [0, 1]^7 (`simulator.py`):

  random     uniform designs;
  nsga2      NSGA-II on the per-constraint violations (`evolution.nsga2`: our JAX
             operators, checked against pymoo in the tests);
  cmaes      CMA-ES from `evosax` on the summed violation, clipped to the box;
  llm_only   the proposer role suggests every generation's designs from the designs
             simulated so far (no evolutionary operators);
  gradient   a reference no black-box method has: Adam on u through `jax.grad` of the
             smooth loss sum_j (max(lo_j - y_j, 0, y_j - hi_j) / s_j)^2, from several
             starts per allowed family; one value-and-gradient counts as 2 solves (a
             forward and an adjoint solve per right-hand side).

`Budget` wraps the simulator for every method: it counts solves, records the first
successful design and, once the budget is spent or a design succeeds, stops simulating
(later rows are NaN: nothing after that point can change the outcome).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from methods.automs import agents
from methods.automs import evolution
from methods.automs import simulator as simulator_lib
from methods.automs import tasks

DIM = simulator_lib.DIM


class Budget:
  """The simulator behind a budget and a stop-at-first-success rule."""

  def __init__(self, simulate, constraints, budget: int, tol: float):
    self.simulate, self.constraints, self.budget, self.tol = simulate, constraints, budget, tol
    self.X, self.Y, self.used, self.first_success = [], [], 0, None

  @property
  def done(self) -> bool:
    return self.first_success is not None or self.used >= self.budget

  def observe(self, X: np.ndarray, Y: np.ndarray, cost: int) -> None:
    """Records simulated rows that cost `cost` solves (and the first success)."""
    ok = np.flatnonzero(tasks.success(self.constraints, Y, self.tol))
    if ok.size and self.first_success is None:
      self.first_success = self.used + int(ok[0]) * cost // max(len(X), 1)
    self.X.append(np.asarray(X, np.float64))
    self.Y.append(np.asarray(Y, np.float64))
    self.used += cost

  def __call__(self, X) -> np.ndarray:
    X = np.asarray(X, np.float64)
    out = np.full((len(X), len(tasks.PROPERTY_KEYS)), np.nan)
    take = 0 if self.done else min(len(X), self.budget - self.used)
    if take:
      out[:take] = np.asarray(self.simulate(X[:take]))
      self.observe(X[:take], out[:take], take)
    return out

  def record(self) -> tuple[np.ndarray, np.ndarray]:
    if not self.X:
      return np.zeros((0, DIM)), np.zeros((0, len(tasks.PROPERTY_KEYS)))
    return np.concatenate(self.X), np.concatenate(self.Y)


def _violations(constraints, Y) -> np.ndarray:
  v = tasks.violations(constraints, Y)
  return np.where(np.isfinite(v), v, 1e6)


def random_search(budget: Budget, key: jax.Array, batch: int) -> None:
  """Uniform designs in batches until the budget ends or a design succeeds."""
  while not budget.done:
    key, sub = jax.random.split(key)
    budget(np.asarray(jax.random.uniform(sub, (batch, DIM), jnp.float64)))


def nsga2(budget: Budget, key: jax.Array, pop_size: int, initial: np.ndarray | None = None
          ) -> None:
  """NSGA-II on the violations (minimised), pop_size (generations + 1) = budget."""
  generations = max(budget.budget // pop_size - 1, 0)
  evolution.nsga2(lambda X: (_violations(budget.constraints, budget(X)), None), key,
                  np.zeros(DIM), np.ones(DIM), pop_size=pop_size, generations=generations,
                  initial=initial)


def cmaes(budget: Budget, key: jax.Array, pop_size: int, sigma: float = 0.3) -> None:
  """evosax's CMA-ES on the summed violation, started at the box centre."""
  # Imported here: evosax builds jax arrays at import time, which would start the
  # backend (and its log lines) whenever the experiment registry is loaded.
  from evosax.algorithms import CMA_ES  # pylint: disable=import-outside-toplevel
  es = CMA_ES(population_size=pop_size, solution=jnp.zeros(DIM))
  params = es.default_params.replace(std_init=sigma)
  key, k_init = jax.random.split(key)
  state = es.init(k_init, jnp.full(DIM, 0.5), params)
  while not budget.done:
    key, k_ask, k_tell = jax.random.split(key, 3)
    x, state = es.ask(k_ask, state, params)
    v = _violations(budget.constraints, budget(np.clip(np.asarray(x), 0.0, 1.0)))
    # Clipping is the repair; the fitness is taken at the repaired point plus the
    # distance moved, so the search distribution is pulled back into the box.
    fitness = v.sum(-1) + np.sum((np.asarray(x) - np.clip(np.asarray(x), 0, 1)) ** 2, -1)
    state, _ = es.tell(k_tell, x, jnp.asarray(fitness), state, params)


def llm_only(budget: Budget, roles: agents.Roles, requirement: str,
             families: Sequence[str], pop_size: int, usage: agents.Usage,
             shown: int = 10) -> agents.Usage:
  """Rounds of designs proposed by the text model from the best `shown` designs so far.

  A round whose replies never parse ends the search (its failure is in `usage`).
  """
  history: list[dict] = []
  while not budget.done:
    designs, usage = roles.generate(requirement, families, pop_size, usage, history)
    if designs is None:
      break
    X = np.stack([simulator_lib.encode(f, u, families) for f, u in designs])
    Y = budget(X)
    for (f, u), y in zip(designs, Y):
      if np.all(np.isfinite(y)):
        history.append({"family": f, "params": [round(float(v), 4) for v in u],
                        "properties": dict(zip(tasks.PROPERTY_KEYS, y.tolist()))})
    score = [np.sum(tasks.fitness(budget.constraints, np.array(
        [h["properties"][k] for k in tasks.PROPERTY_KEYS]))) for h in history]
    history = [history[i] for i in np.argsort(score)[::-1][:shown]]
  return usage


def smooth_loss(constraints, row: jax.Array) -> jax.Array:
  """sum_j (max(lo_j - y_j, 0, y_j - hi_j) / s_j)^2 on one property row."""
  idx, lo, hi, scale = tasks.bounds(constraints)
  y = row[idx]
  below = jnp.where(jnp.isfinite(lo), jnp.maximum(jnp.asarray(lo) - y, 0.0), 0.0)
  above = jnp.where(jnp.isfinite(hi), jnp.maximum(y - jnp.asarray(hi), 0.0), 0.0)
  return jnp.sum(((below + above) / scale) ** 2)


def gradient(budget: Budget, key: jax.Array, sim: simulator_lib.Simulator, starts: int,
             learning_rate: float = 0.05) -> None:
  """Adam on u through jax.grad of `smooth_loss`, `starts` starts in parallel.

  Each step's value-and-gradient is charged 2 solves per start (forward + adjoint).
  """
  family_ids = simulator_lib.family_indices(sim.families)
  slot = np.arange(starts) % len(family_ids)
  fam = jnp.asarray(family_ids[slot])

  def loss(f, u):
    row = simulator_lib.properties(f, u, sim.n, sim.material, sim.tol)
    return smooth_loss(budget.constraints, row), row

  value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(loss, argnums=1, has_aux=True)))
  u = jax.random.uniform(key, (starts, DIM - 1), jnp.float64)
  opt = optax.adam(learning_rate)
  state = opt.init(u)
  while not budget.done and budget.used + 2 * starts <= budget.budget:
    (_, rows), g = value_and_grad(fam, u)
    X = np.concatenate([((slot + 0.5) / len(family_ids))[:, None], np.asarray(u)], 1)
    budget.observe(X, np.asarray(rows), 2 * starts)
    updates, state = opt.update(g, state, u)
    u = jnp.clip(optax.apply_updates(u, updates), 0.0, 1.0)
