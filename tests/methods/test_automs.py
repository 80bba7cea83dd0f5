"""AutoMS parts: the cell families, the task logic, the agents' parsing, the local
gradient against jax.grad, and SAES on a quadratic toy problem."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage

from methods.automs import agents
from methods.automs import baselines
from methods.automs import cells
from methods.automs import saes
from methods.automs import simulated
from methods.automs import simulator
from methods.automs import tasks


def _percolates(solid: np.ndarray) -> bool:
  """A solid component of the 3 x 3 tiling crosses the middle tile in x and in y."""
  n = solid.shape[0]
  labels, _ = ndimage.label(np.tile(solid, (3, 3)))
  middle = labels[n:2 * n, n:2 * n]
  for lab in np.unique(middle[middle > 0]):
    rows, cols = np.nonzero(labels == lab)
    if np.ptp(rows) >= 2 * n - 1 and np.ptp(cols) >= 2 * n - 1:
      return True
  return False


@pytest.mark.parametrize("family", cells.FAMILY_NAMES)
def test_families_give_connected_cells_at_their_centre_parameters(family):
  rho = np.asarray(cells.density(cells.family_index(family), jnp.full(6, 0.5), 48))
  assert rho.shape == (48, 48) and np.all((rho >= 0) & (rho <= 1))
  assert _percolates(rho > 0.5), family


def test_disconnected_cells_are_told_apart():
  # Rods with every bar and node at width 0: no solid path; an inclusion with a hole
  # that nearly fills the cell leaves a thin, still connected frame.
  rods = np.asarray(cells.density(cells.family_index("rods"), jnp.zeros(6), 32))
  assert not _percolates(rods > 0.5)
  shell = np.asarray(cells.density(cells.family_index("shell"),
                                   jnp.array([0.5, 0.5, 0.5, 0.0, 0.0, 0.0]), 32))
  assert not _percolates(shell > 0.5)   # a ring without connectors floats


def test_density_is_differentiable_in_the_shape_parameters():
  # (Under vmap the family is traced and dispatched by lax.switch: the claim test's
  # searches run that path through `simulator.Simulator`.)
  g = jax.grad(lambda u: cells.density(2, u, 16).mean())(jnp.full(6, 0.4))
  assert np.all(np.isfinite(g)) and np.abs(g).sum() > 0


def test_task_box_logic_success_fitness_and_targets():
  box = (tasks.Constraint("nu12", hi=-0.2), tasks.Constraint("E1", lo=0.1, hi=0.2))
  y = np.zeros((3, len(tasks.PROPERTY_KEYS)))
  i_nu, i_e = tasks.PROPERTY_KEYS.index("nu12"), tasks.PROPERTY_KEYS.index("E1")
  y[:, i_nu] = [-0.3, -0.2 + 0.2 * 0.01, 0.0]     # met; within tol 2%; violated by 1.0
  y[:, i_e] = [0.15, 0.2, 0.25]                     # met; met; above by 0.05 / 0.2
  v = tasks.violations(box, y)
  np.testing.assert_allclose(v, [[0, 0], [0.01, 0], [1.0, 0.25]], atol=1e-12)
  assert tasks.success(box, y).tolist() == [True, True, False]
  np.testing.assert_allclose(tasks.fitness(box, y)[2], [0.5, 0.8])
  np.testing.assert_allclose(tasks.targets(box, y)[2], [-0.2, 0.2])
  y[0, i_e] = np.nan
  assert not tasks.success(box, y)[0]


def test_every_task_is_feasible_and_its_requirement_parses_back():
  assert len(tasks.TASKS) == 17
  for t in tasks.TASKS:
    assert tasks.parse_box(t.requirement) == t.constraints


def test_empty_or_inverted_boxes_are_refused_in_one_line():
  with pytest.raises(ValueError, match="constraint box is empty"):
    tasks.make_task("x", ())
  with pytest.raises(ValueError, match=r"box for E1 is empty: \[0.5, 0.1\]"):
    tasks.make_task("x", (tasks.Constraint("E1", 0.5, 0.1),))
  with pytest.raises(ValueError, match="unknown property 'stiffness'"):
    tasks.make_task("x", (tasks.Constraint("stiffness", 0.1),))


class _Scripted:
  def __init__(self, replies):
    self.replies, self.prompts = list(replies), []

  def complete(self, prompts, max_tokens=256, temperature=0.0, stop=()):
    self.prompts += prompts
    return [self.replies.pop(0) for _ in prompts]


def test_unparsable_replies_are_counted_retried_and_never_defaulted():
  good = json.dumps({"constraints": [{"property": "E1", "min": 0.1, "max": None}]})
  model = _Scripted(["no json here", '{"constraints": [{"property": "E9"}]}', good])
  box, usage = agents.Roles(model, model, model, retries=2).parse("anything")
  assert box == (tasks.Constraint("E1", 0.1, math.inf),)
  assert usage == agents.Usage(calls=3, unparsed=2)
  model = _Scripted(["?"] * 3)
  box, usage = agents.Roles(model, model, model, retries=2).parse("anything")
  assert box is None and usage == agents.Usage(calls=3, unparsed=3)
  model = _Scripted(['{"designs": [{"family": "rods", "params": [0.5, 0.5]}]}'])
  designs, usage = agents.Roles(model, model, model, retries=0).generate("r", ["rods"], 2)
  assert designs is None and usage.unparsed == 1


def test_offline_agents_answer_every_role_from_the_prompt():
  model = simulated.OfflineAgents(seed=0)
  roles = agents.Roles(model, model, model)
  task = tasks.get_task("auxetic_light")
  (subgoals, families), _ = roles.manage(task.requirement)
  assert families[:2] == ["reentrant", "chiral"] and subgoals
  assert roles.parse(task.requirement)[0] == task.constraints
  designs, usage = roles.generate(task.requirement, families, 8)
  assert len(designs) == 8 and usage.unparsed == 0
  assert {f for f, _ in designs} == set(families)


def test_local_gradient_points_along_jax_grad():
  """The WLS direction from simulated perturbations vs the true jax.grad, for a
  simulator output that is cheap to differentiate (the volume fraction of a cell)."""
  fam = cells.family_index("plates")
  prop = lambda u: cells.density(fam, u, 24).mean()
  anchor = jnp.array([0.5, 0.3, 0.4, 0.2, 0.6, 0.5])
  true = np.asarray(jax.grad(prop)(anchor))
  rng = np.random.default_rng(0)
  X = np.asarray(anchor) + 0.01 * rng.normal(size=(25, 6))
  y = np.array([float(prop(jnp.asarray(x))) for x in X])
  g, conf = saes.local_gradient(X, y, np.asarray(anchor), float(prop(anchor)))
  cosine = g @ true / np.linalg.norm(true)
  assert cosine > 0.95 and conf > 0.6
  # Too little history gives no direction at all (not a guess).
  g, conf = saes.local_gradient(X[:3], y[:3], np.asarray(anchor), float(prop(anchor)))
  assert conf == 0.0 and not g.any()


def test_saes_solves_a_quadratic_toy_box_faster_than_random():
  centre = np.array([0.3, 0.7, 0.2, 0.8])
  evaluate = lambda X: np.stack([np.sum((X - centre) ** 2, 1), X[:, 0] - X[:, 1]], 1)
  objectives = saes.Objectives(
      violations=lambda Y: np.stack([np.maximum(Y[:, 0] - 1e-3, 0) / 1e-3,
                                     np.maximum(Y[:, 1] + 0.3, 0) / 0.3], 1),
      targets=lambda Y: np.stack([np.minimum(Y[:, 0], 1e-3), np.minimum(Y[:, 1], -0.3)], 1),
      columns=(0, 1))
  rng = np.random.default_rng(0)
  cfg = saes.SAESConfig(pop_size=10, generations=30, categorical=False)
  result = saes.saes(evaluate, objectives, rng.uniform(size=(10, 4)), jax.random.key(0), cfg)
  worst = objectives.violations(result.Y).max(1)
  random_worst = objectives.violations(evaluate(rng.uniform(size=(len(worst), 4)))).max(1)
  assert worst.min() < 0.5 * random_worst.min()
  assert len(result.X) <= cfg.pop_size * (cfg.generations + 1)


def test_budget_stops_at_the_first_success_and_never_overspends():
  box = (tasks.Constraint("E1", lo=0.5),)
  calls = []

  def fake(X):
    calls.append(len(X))
    y = np.zeros((len(X), len(tasks.PROPERTY_KEYS)))
    y[:, 0] = X[:, 0]
    return y

  budget = baselines.Budget(fake, box, budget=25, tol=0.0)
  out = budget(np.array([[0.1] + [0] * 6, [0.7] + [0] * 6, [0.9] + [0] * 6]))
  assert budget.first_success == 1 and budget.done and np.isfinite(out).all()
  assert np.isnan(budget(np.zeros((4, 7)))).all() and calls == [3]
  budget = baselines.Budget(fake, box, budget=5, tol=0.0)
  budget(np.zeros((8, 7)))
  assert budget.used == 5 and calls[-1] == 5 and budget.first_success is None


def test_smooth_loss_is_zero_inside_the_box_and_quadratic_outside():
  box = (tasks.Constraint("E1", lo=0.2), tasks.Constraint("nu12", hi=-0.1))
  row = jnp.zeros(len(tasks.PROPERTY_KEYS)).at[0].set(0.1).at[3].set(0.0)
  # (0.1 / 0.2)^2 + (0.1 / 0.1)^2
  np.testing.assert_allclose(baselines.smooth_loss(box, row), 0.25 + 1.0)
  inside = row.at[0].set(0.3).at[3].set(-0.2)
  assert float(baselines.smooth_loss(box, inside)) == 0.0


def test_simulator_refuses_bad_designs_and_meshes():
  with pytest.raises(ValueError, match=r"designs must have shape \(P, 7\)"):
    simulator.decode(np.zeros((2, 5)), ("rods",))
  with pytest.raises(ValueError, match="unknown cell family 'lattice'"):
    simulator.Simulator(("lattice",))
  with pytest.raises(ValueError, match="mesh size n must be >= 8"):
    simulator.Simulator(("rods",), n=4)
