"""Certified unlearning, the public API around the method: the single-model entry point
against the one-task continual path and exact retraining, named plans, shared
curvature, explicit keys, the shared-loop and compiled-scan stage fitters against a
hand-written optax loop, task padding, and the package's import graph (no cycle)."""

import ast
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common import train as train_lib
from common.models.mlp import MLP
from methods import unlearning as ul

N, P, CLASSES = 40, 5, 3
MASK = np.arange(N) < 12


@functools.lru_cache(maxsize=None)
def _problem(loss: str):
  """(obj, init, data): a plain linear model (no anchor term, lam = 0) with ridge 0.1,
  trained once on one task."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, P))
    y = (x @ rng.normal(size=P) + 0.1 * rng.normal(size=N) if loss == "squared"
         else rng.integers(0, CLASSES, size=N))
    net = MLP((1 if loss == "squared" else CLASSES,))
    obj = ul.Objective(net.apply, loss, 0.0, 0.1)
    init = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float64),
                        net.init(jax.random.PRNGKey(0), x[:1]))
    return obj, init, ul.make_task(x, y)


@functools.lru_cache(maxsize=None)
def _fitted(loss: str, kind: str):
  obj, init, data = _problem(loss)
  with jax.enable_x64(True):
    return ul.fit_model(obj, init, data, kind=kind, tol=1e-11)


def _flat(params):
  return np.asarray(jax.flatten_util.ravel_pytree(params)[0])


def _retrained(loss: str):
  obj, init, data = _problem(loss)
  return ul.fit_stage_newton(obj, init, ul.forget(data, MASK), tol=1e-11)


@pytest.mark.parametrize("kind", ["full", "gradient", "cg"])
def test_single_model_removal_is_the_one_task_continual_path(x64, kind):
  obj, init, data = _problem("softmax_ce")
  model = _fitted("softmax_ce", kind)
  config = ul.UnlearnConfig(newton_steps=2, grad_steps=3)
  key = jax.random.PRNGKey(3)
  out = ul.remove(key, obj, model, data, MASK, epsilon=0.5, delta=1e-5, config=config)
  # The same request phrased as continual learning with one task.
  fit = functools.partial(ul.fit_stage_newton, obj, tol=1e-11)
  anchors = ul.train_sequence(fit, init, [data])
  state = ul.build_state(obj, anchors, [data], (kind,))
  noise_key, power_key = jax.random.split(key)
  cl = ul.unlearn(obj, state, [ul.forget(data, MASK)], 0, (kind,),
                  removed=ul.only(data, MASK), config=config, key=power_key)
  cert = ul.certificate.certify(cl.bound, 0.5, 1e-5)
  np.testing.assert_array_equal(_flat(model.params), _flat(anchors[-1]))
  np.testing.assert_array_equal(_flat(out.params), _flat(cl.params))
  assert out.certificate == cert and out.residual == cl.residuals[0]
  released = ul.certificate.release(noise_key, cl.params, cert.sigma)
  np.testing.assert_array_equal(_flat(out.released), _flat(released))
  # The bound certifies the distance to exact retraining (convex model), with noise.
  dist = np.linalg.norm(_flat(out.params) - _flat(_retrained("softmax_ce")))
  assert 0 < dist <= out.certificate.bound and out.certificate.sigma > 0


def test_single_model_newton_removal_on_ridge_is_exact(x64):
  obj, _, data = _problem("squared")
  out = ul.remove(jax.random.PRNGKey(0), obj, _fitted("squared", "full"), data, MASK,
                  epsilon=0.5, delta=1e-5)
  np.testing.assert_allclose(_flat(out.params), _flat(_retrained("squared")), atol=1e-9)
  assert out.certificate.bound < 1e-8 and out.certificate.convex
  noise = _flat(out.released) - _flat(out.params)
  assert 0 < np.abs(noise).max() < 10 * out.certificate.sigma


def test_single_model_entry_points_agree_and_removing_everything_is_exact(x64):
  obj, init, data = _problem("softmax_ce")
  fitted = _fitted("softmax_ce", "full")
  prepared = ul.prepare_model(obj, init, fitted.params, data, kind="full")
  np.testing.assert_array_equal(prepared.curvature, fitted.curvature)
  assert fitted.curvature.shape == (P * CLASSES + CLASSES,) * 2
  everything = ul.remove(jax.random.PRNGKey(0), obj, fitted, data, np.ones(N, bool),
                         epsilon=0.5, delta=1e-5)
  np.testing.assert_array_equal(_flat(everything.params), _flat(init))
  assert everything.certificate.bound == 0.0 and everything.certificate.sigma == 0.0


def test_named_methods_map_to_plans():
  assert ul.method_plan("hessian", 3, linear=True) == ("full",) * 3
  assert ul.method_plan("hessian", 3, linear=False) == ("ggn",) * 3
  assert ul.method_plan("hessian_cg", 2, linear=False) == ("cg_ggn",) * 2
  assert ul.method_plan("hessian_diag", 2, linear=True) == ("diag",) * 2
  assert ul.method_plan("hybrid", 4, linear=False, num_full=1) == ("diag_ggn",) * 3 + ("ggn",)
  assert ul.method_plan("hybrid", 3, linear=True, rest="gradient") == (
      "gradient", "full", "full")
  assert set(ul.METHODS) == {"hessian", "hessian_diag", "hessian_cg", "hessian_lissa",
                             "gradient", "hybrid"}
  with pytest.raises(ValueError, match="unknown method"):
    ul.method_plan("newton", 3, linear=True)


def test_build_states_matches_build_state_per_plan(x64):
  obj, init, data = _problem("softmax_ce")
  tasks = [data, ul.make_task(data.x + 1.0, data.y)]
  anchors = ul.train_sequence(functools.partial(ul.fit_stage_newton, obj), init, tasks)
  plans = {"hessian": ("full", "full"), "diag": ("diag", "diag"), "hybrid": ("diag", "full"),
           "gradient": ("gradient", "gradient")}
  states = ul.build_states(obj, anchors, tasks, plans)
  for name, plan in plans.items():
    alone = ul.build_state(obj, anchors, tasks, plan)
    for shared, single in zip(states[name].curvature, alone.curvature):
      if single is None:
        assert shared is None
      else:
        np.testing.assert_allclose(shared, single, rtol=1e-12, atol=1e-14)


def test_power_iteration_smoothness_takes_an_explicit_key(x64):
  obj, init, data = _problem("softmax_ce")
  model = _fitted("softmax_ce", "gradient")
  config = ul.UnlearnConfig(grad_steps=2, smoothness="power")
  args = (obj, model.state(), [ul.forget(data, MASK)], 0, ("gradient",))
  with pytest.raises(ValueError, match="explicit key"):
    ul.unlearn(*args, config=config)
  a, b = (ul.unlearn(*args, config=config, key=jax.random.PRNGKey(s)) for s in (1, 1))
  np.testing.assert_array_equal(_flat(a.params), _flat(b.params))
  # The analytic smoothness of a linear model needs no key.
  ul.unlearn(*args, config=ul.UnlearnConfig(grad_steps=2))


def test_loop_stage_fitter_runs_the_optimizer_on_the_stage_objective(tmp_path):
  net = MLP((4, CLASSES), activation=jnp.tanh)
  rng = np.random.default_rng(0)
  task = ul.make_task(rng.normal(size=(16, 3)).astype(np.float32),
                      rng.integers(0, CLASSES, size=16))
  obj = ul.Objective(net.apply, "softmax_ce", 1.0, 0.1)
  anchor = net.init(jax.random.PRNGKey(0), task.x[:1])
  config = train_lib.default_train_config()
  config.update(num_steps=5, checkpoint_every=0, log_every=5, progress_bar=False)
  fit = ul.loop_stage_fitter(obj, optax.adam(1e-2), config, str(tmp_path))
  theta = fit(anchor, task)
  # By hand: five Adam steps on L(theta; anchor, task) from the anchor.
  opt, params = optax.adam(1e-2), anchor
  state = opt.init(params)
  for _ in range(5):
    updates, state = opt.update(ul.stage_grad(obj, params, anchor, task), state, params)
    params = optax.apply_updates(params, updates)
  np.testing.assert_allclose(_flat(theta), _flat(params), rtol=1e-5, atol=1e-6)
  # The retrain oracle's compiled scan takes the same steps.
  scan = ul.scan_stage_fitter(obj, optax.adam(1e-2), 5)(anchor, task)
  np.testing.assert_allclose(_flat(scan), _flat(params), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="num_steps=0"):
    ul.scan_stage_fitter(obj, optax.adam(1e-2), 0)
  assert os.listdir(tmp_path) == [os.path.basename(fit.workdir(anchor, {
      "x": np.asarray(task.x), "y": np.asarray(task.y), "w": np.asarray(task.w)}))]
  # A rerun restores the stage's checkpoint; a fresh fit retrains and leaves nothing.
  np.testing.assert_array_equal(_flat(fit(anchor, task)), _flat(theta))
  np.testing.assert_allclose(_flat(fit.fresh()(anchor, task)), _flat(theta), rtol=1e-6)
  assert len(os.listdir(tmp_path)) == 1


def test_pad_tasks_and_forget_task():
  a, b = ul.pad_tasks([(np.ones((3, 2)), np.zeros(3, np.int32)),
                       (np.ones((5, 2)), np.ones(5, np.int32))])
  assert a.x.shape == b.x.shape == (5, 2)
  np.testing.assert_array_equal(a.w, [1, 1, 1, 0, 0])
  kept = ul.forget_task([a, b], 1)
  assert float(kept[1].w.sum()) == 0.0 and kept[0] is a


def _imports(path: str) -> set:
  with open(path) as f:
    tree = ast.parse(f.read())
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "methods.unlearning":
      found |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "methods.unlearning."):
      found.add(node.module.split(".")[2])
  return found


def test_the_package_has_no_import_cycle():
  folder = os.path.dirname(ul.__file__)
  graph = {f[:-3]: _imports(os.path.join(folder, f)) for f in os.listdir(folder)
           if f.endswith(".py") and f != "__init__.py"}
  assert graph["objective"] == set()
  assert graph["hessian"] == {"objective"}
  assert "hessian" in graph["continual"]
  done, active = set(), []

  def visit(module):
    assert module not in active, f"import cycle: {' -> '.join(active + [module])}"
    if module not in done:
      active.append(module)
      for dependency in graph[module]:
        visit(dependency)
      active.pop()
      done.add(module)

  for module in graph:
    visit(module)
