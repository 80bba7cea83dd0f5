"""Certified unlearning in continual learning: Newton removal against exact retraining,
the certificate's noise formula and bound, Hessian-vector solves against dense
Hessians, storage accounting against pytree sizes, and the MIA AUC against sklearn."""

import functools

from hypothesis import given, settings, strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from common.models.mlp import MLP
from methods import unlearning as ul
from methods.unlearning import accounting
from methods.unlearning import baselines
from methods.unlearning import certificate
from methods.unlearning import hessian
from methods.unlearning import metrics
from methods.unlearning import objective

T = 3


def _tasks(loss, n=40, p=5, classes=3, seed=0):
  rng = np.random.default_rng(seed)
  tasks = []
  for t in range(T):
    x = rng.normal(size=(n, p)) + 0.5 * t
    if loss == "squared":
      y = x @ rng.normal(size=p) + 0.1 * rng.normal(size=n)
    else:
      y = rng.integers(0, classes, size=n)
    tasks.append(ul.make_task(x, y))
  return tasks


def _linear(loss, tasks, lam=0.5, mu=0.05, classes=3):
  net = MLP((1 if loss == "squared" else classes,))
  obj = ul.Objective(net.apply, loss, lam, mu)
  init = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float64),
                      net.init(jax.random.PRNGKey(0), tasks[0].x[:1]))
  fit = functools.partial(ul.fit_stage_newton, obj, tol=1e-11)
  return obj, init, fit


@functools.lru_cache(maxsize=None)
def _sequence(loss, seed=0):
  """(tasks, obj, fit, anchors): a linear model trained on the T tasks, once per module."""
  with jax.enable_x64(True):
    tasks = _tasks(loss, seed=seed)
    obj, init, fit = _linear(loss, tasks)
    return tasks, obj, fit, ul.train_sequence(fit, init, tasks)


def _flat(params):
  return np.asarray(jax.flatten_util.ravel_pytree(params)[0])


@pytest.mark.parametrize("k, subset", [(0, False), (1, True)])
def test_newton_removal_on_ridge_equals_retraining(x64, k, subset):
  tasks, obj, fit, anchors = _sequence("squared")
  state = ul.build_state(obj, anchors, tasks, ul.uniform_plan("full", T))
  mask = (np.arange(40) < 15) if subset else np.ones(40, bool)
  retained = [ul.forget(t, mask) if j == k else t for j, t in enumerate(tasks)]
  removed = ul.only(tasks[k], mask)
  target = baselines.retrain(fit, anchors, retained, k)
  out = ul.unlearn(obj, state, retained, k, ul.uniform_plan("full", T), removed=removed)
  np.testing.assert_allclose(_flat(out.params), _flat(target), atol=1e-9)
  assert out.bound < 1e-8
  # The Hessian-vector (CG) route gives the same exact answer without stored curvature.
  cg_state = ul.build_state(obj, anchors, tasks, ul.uniform_plan("cg", T))
  cg = ul.unlearn(obj, cg_state, retained, k, ul.uniform_plan("cg", T), removed=removed)
  np.testing.assert_allclose(_flat(cg.params), _flat(target), atol=1e-8)


def test_newton_removal_on_logistic_converges_to_retraining(x64):
  tasks, obj, fit, anchors = _sequence("softmax_ce")
  plan = ul.uniform_plan("full", T)
  state = ul.build_state(obj, anchors, tasks, plan)
  mask = np.arange(40) < 10
  retained = [ul.forget(t, mask) if j == 0 else t for j, t in enumerate(tasks)]
  removed = ul.only(tasks[0], mask)
  target = _flat(baselines.retrain(fit, anchors, retained, 0))
  start = np.linalg.norm(_flat(anchors[-1]) - target)
  one = ul.unlearn(obj, state, retained, 0, plan, removed=removed)
  many = ul.unlearn(obj, state, retained, 0, plan, removed=removed,
                    config=ul.UnlearnConfig(newton_steps=40))
  # One Newton step removes most of the change (second-order residual) ...
  assert np.linalg.norm(_flat(one.params) - target) < 0.05 * start
  # ... and iterating the stored-Hessian step reaches retraining to solver tolerance.
  np.testing.assert_allclose(_flat(many.params), target, atol=1e-7)
  assert many.bound < 1e-6


@pytest.mark.parametrize("kind", ["full", "diag", "cg", "lissa", "gradient"])
def test_propagated_bound_covers_the_true_distance(x64, kind):
  tasks, obj, fit, anchors = _sequence("softmax_ce", seed=1)
  plan = ul.uniform_plan(kind, T)
  state = ul.build_state(obj, anchors, tasks, plan)
  retained = [ul.forget(t, np.ones(40, bool)) if j == 0 else t for j, t in enumerate(tasks)]
  target = _flat(baselines.retrain(fit, anchors, retained, 0))
  out = ul.unlearn(obj, state, retained, 0, plan, config=ul.UnlearnConfig(
      grad_steps=3, newton_steps=2, lissa_depth=300))
  dist = np.linalg.norm(_flat(out.params) - target)
  assert 0 < dist <= out.bound
  assert out.stage_bounds[0] == 0.0  # the forgotten stage is skipped exactly


def test_gradient_steps_contract_as_the_a_priori_bound_says(x64):
  tasks = _tasks("softmax_ce", seed=2)
  obj, init, fit = _linear("softmax_ce", tasks)
  anchor = fit(init, tasks[0])
  opt = fit(anchor, tasks[1])
  # A random direction, plus one along which softmax is flat (the bound is tight there).
  noise = jax.random.normal(jax.random.PRNGKey(4), _flat(opt).shape, jnp.float64)
  start = jax.flatten_util.ravel_pytree(opt)[1](_flat(opt) + 0.1 * noise + 0.3)
  smooth = ul.gradient.linear_smoothness(obj, tasks[1])
  g0 = float(objective.stage_grad_norm(obj, start, anchor, tasks[1]))
  for steps in (1, 5, 20):
    out = ul.gradient.gradient_descent(obj, start, anchor, tasks[1], steps, 1.0 / smooth)
    bound = certificate.gd_distance_bound(g0, obj.strong_convexity, smooth, steps)
    assert np.linalg.norm(_flat(out) - _flat(opt)) <= bound * (1 + 1e-12)


def test_noise_scale_matches_the_gaussian_mechanism(rng):
  sigma = certificate.gaussian_sigma(0.2, 0.5, 1e-5)
  assert sigma == pytest.approx(0.2 * np.sqrt(2 * np.log(1.25e5)) / 0.5, rel=1e-12)
  cert = certificate.certify(0.2, 0.5, 1e-5)
  assert cert.sigma == sigma and cert.bound == 0.2
  params = {"w": jnp.zeros((200, 50)), "b": jnp.zeros((50,))}
  noisy = certificate.release(rng, params, sigma)
  flat = _flat(noisy)
  assert np.std(flat) == pytest.approx(sigma, rel=0.03)
  assert abs(np.mean(flat)) < 5 * sigma / np.sqrt(flat.size)


@settings(max_examples=40, deadline=None)
@given(bound=st.floats(1e-4, 10.0), epsilon=st.floats(0.05, 0.99),
       log_delta=st.floats(-12, -1))
def test_gaussian_mechanism_delta_stays_below_nominal(bound, epsilon, log_delta):
  delta = 10.0 ** log_delta
  sigma = certificate.gaussian_sigma(bound, epsilon, delta)
  exact = certificate.gaussian_delta(bound, sigma, epsilon)
  assert exact <= delta * (1 + 1e-9)


def test_gaussian_mechanism_is_not_vacuous_at_the_experiment_settings():
  # At (epsilon, delta) = (0.5, 1e-5), half the calibrated noise is no longer enough.
  sigma = certificate.gaussian_sigma(1.0, 0.5, 1e-5)
  assert certificate.gaussian_delta(1.0, sigma, 0.5) <= 1e-5
  assert certificate.gaussian_delta(1.0, sigma / 2, 0.5) > 1e-5


def test_propagated_bound_recursion():
  r, lam, mu = [0.1, 0.02, 0.005], 1.0, 0.25
  b = 0.0
  for x in r:
    b = x / (lam + mu) + lam / (lam + mu) * b
  assert certificate.propagated_bound(r, lam, mu) == pytest.approx(b)


def test_hvp_cg_lissa_and_ggn_match_dense_on_a_small_mlp(x64, rng):
  net = MLP((6, 3), activation=jnp.tanh)
  x = jax.random.normal(rng, (25, 4))
  y = jax.random.randint(jax.random.PRNGKey(1), (25,), 0, 3)
  task = ul.make_task(x, y, (jnp.arange(25) < 20).astype(x.dtype))
  params = jax.tree.map(lambda a: a.astype(jnp.float64),
                        net.init(jax.random.PRNGKey(2), x[:1]))
  obj = ul.Objective(net.apply, "softmax_ce", 0.5, 0.1)
  flat, unravel = jax.flatten_util.ravel_pytree(params)
  dense = np.asarray(jax.jit(jax.hessian(
      lambda v: objective.data_loss(obj, unravel(v), task)))(flat))
  np.testing.assert_allclose(hessian.data_hessian(obj, params, task), dense, atol=1e-10)
  v = jax.random.normal(jax.random.PRNGKey(3), flat.shape, flat.dtype)
  hvp = jax.jit(hessian.hvp(obj, params, task))
  ggn_vp = jax.jit(hessian.hvp(obj, params, task, gauss_newton=True))
  np.testing.assert_allclose(hvp(v), dense @ v, atol=1e-10)
  # GGN: J^T H_z J from the full Jacobian, against the library's and its products.
  jac = jax.jit(jax.jacobian(lambda p: net.apply(unravel(p), x)))(flat)   # (n, C, d)
  p = jax.nn.softmax(net.apply(params, x))
  hz = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
  ggn = np.asarray(jnp.einsum("n,ncd,nce,nef->df", task.w / task.w.sum(), jac, hz, jac))
  np.testing.assert_allclose(hessian.data_ggn(obj, params, task), ggn, atol=1e-10)
  np.testing.assert_allclose(ggn_vp(v), ggn @ v, atol=1e-10)
  np.testing.assert_allclose(hessian.data_ggn_diag(obj, params, task), np.abs(ggn).sum(1),
                             atol=1e-10)
  # Solves of (G + m I) x = v: CG and LiSSA (matrix-free) against the dense solve.
  m = obj.strong_convexity
  exact = np.linalg.solve(ggn + m * np.eye(flat.size), np.asarray(v))
  cg = jax.jit(lambda b: hessian.cg_solve(ggn_vp, b, m, maxiter=500))
  np.testing.assert_allclose(cg(v), exact, atol=1e-8)
  scale = float(np.linalg.eigvalsh(ggn).max()) + m + 0.1
  lissa = jax.jit(lambda b: hessian.lissa_solve(ggn_vp, b, m, scale, depth=3000))
  np.testing.assert_allclose(lissa(v), exact, atol=1e-6)
  # The Hessian CG route (PSD here: damping above the most negative eigenvalue).
  damp = max(m, 0.1 - float(np.linalg.eigvalsh(dense).min()))
  exact_h = np.linalg.solve(dense + damp * np.eye(flat.size), np.asarray(v))
  cg_h = jax.jit(lambda b: hessian.cg_solve(hvp, b, damp, maxiter=500))
  np.testing.assert_allclose(cg_h(v), exact_h, atol=1e-8)
  # The diagonal majorizer dominates the matrix: diag(|C| 1) - C is PSD.
  gap = np.diag(np.asarray(hessian.row_sums(ggn))) - ggn
  assert np.linalg.eigvalsh(gap).min() > -1e-12


@pytest.mark.parametrize("method,gauss_newton", [("cg", True), ("cg", False),
                                                  ("lissa", False)])
def test_compiled_matrix_free_stage_equals_step_by_step_newton(x64, method, gauss_newton):
  # One jitted program for all the stage's Newton steps (the model linearized once) =
  # the steps one by one, each with a fresh product at the stage's start.
  net = MLP((6, 3), activation=jnp.tanh)
  rng = np.random.default_rng(1)
  task = ul.make_task(rng.normal(size=(30, 4)), rng.integers(0, 3, size=30),
                      (np.arange(30) < 24).astype(float))
  obj = ul.Objective(net.apply, "softmax_ce", 0.5, 0.1)
  start = jax.tree.map(lambda a: a.astype(jnp.float64),
                       net.init(jax.random.PRNGKey(0), task.x[:1]))
  start = ul.fit_stage_newton(obj, start, task, tol=1e-12)   # theta_t of the old anchor
  anchor = jax.tree.map(lambda a: a + 0.05, start)          # the anchor moved
  m, scale = obj.strong_convexity, 50.0
  flat, unravel = jax.flatten_util.ravel_pytree(start)
  dense = (hessian.data_ggn if gauss_newton else hessian.data_hessian)(obj, start, task)
  matvec, x = lambda v: dense @ v, flat
  for _ in range(3):
    g = _flat(ul.stage_grad(obj, unravel(x), anchor, task))
    x = x - (hessian.cg_solve(matvec, g, m, maxiter=100) if method == "cg"
             else hessian.lissa_solve(matvec, g, m, scale, depth=100))
  out = hessian.newton_matrix_free(obj, start, anchor, task, 3, method, 100, gauss_newton,
                                   scale if method == "lissa" else None)
  np.testing.assert_allclose(_flat(out), np.asarray(x), atol=1e-9)
  # The stage converges to the minimiser of L(. ; anchor, task), and a loose CG
  # tolerance stops earlier at a nearby point.
  before, after = (float(objective.stage_grad_norm(obj, p, anchor, task))
                   for p in (start, out))
  assert after < 0.1 * before
  if method == "cg":
    loose = hessian.newton_matrix_free(obj, start, anchor, task, 3, method, 100,
                                       gauss_newton, None, 1e-2)
    assert 0 < np.abs(_flat(loose) - _flat(out)).max() < 1e-2
  # CG stops at 1e-10, or at 10 float32 epsilons in float32.
  assert hessian.default_cg_tol(jnp.float64) == 1e-10
  assert hessian.default_cg_tol(jnp.float32) == pytest.approx(1.19e-6, rel=1e-2)


def test_storage_accounting_matches_pytree_sizes(x64):
  tasks, obj, fit, anchors = _sequence("softmax_ce")
  d = 5 * 3 + 3
  sizes = {}
  for name, plan in {"full": ul.uniform_plan("full", T), "diag": ul.uniform_plan("diag", T),
                     "gradient": ul.uniform_plan("gradient", T),
                     "hybrid": ul.hybrid_plan(T, 1, rest="diag")}.items():
    state = ul.build_state(obj, anchors, tasks, plan)
    storage = accounting.state_bytes(state)
    by_hand = sum(x.nbytes for a in state.anchors[:-1] for x in jax.tree.leaves(a))
    assert storage.checkpoints == by_hand == T * d * 8
    assert storage.curvature == sum(np.asarray(c).nbytes for c in state.curvature
                                    if c is not None)
    sizes[name] = storage.curvature
  assert sizes == {"full": T * d * d * 8, "diag": T * d * 8, "gradient": 0,
                   "hybrid": (d * d + (T - 1) * d) * 8}
  assert accounting.tree_bytes({"a": jnp.zeros((3, 4), jnp.float32), "b": None}) == 48


def test_mia_auc_matches_sklearn_with_ties():
  rng = np.random.default_rng(0)
  a = np.round(rng.normal(0.3, 1, 50), 1)
  b = np.round(rng.normal(0.0, 1, 70), 1)
  expected = roc_auc_score(np.r_[np.ones(50), np.zeros(70)], np.r_[a, b])
  assert metrics.auc(a, b) == pytest.approx(expected, abs=1e-12)
  assert metrics.auc(a, a) == pytest.approx(0.5)


def test_expected_unlearning_loss_is_bias_plus_noise():
  a = {"w": jnp.ones((4,))}
  b = {"w": jnp.zeros((4,))}
  assert metrics.expected_unlearning_loss(a, b, 0.5) == pytest.approx(4 + 4 * 0.25)


def test_bad_inputs_raise_clear_errors():
  with pytest.raises(ValueError, match="shapes"):
    ul.make_task(np.zeros((3, 2)), np.zeros(4))
  with pytest.raises(ValueError, match="unknown stage kind"):
    ul.uniform_plan("newton", 3)
  with pytest.raises(ValueError, match="num_full"):
    ul.hybrid_plan(3, 4)
  with pytest.raises(ValueError, match="epsilon"):
    certificate.gaussian_sigma(1.0, 0.0, 1e-5)
