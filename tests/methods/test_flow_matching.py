"""Unit tests of methods/flow_matching against closed forms and brute force."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common import train as train_lib
from common.models.cnn import ConditionalCNN
from methods import flow_matching as fm
from methods.flow_matching import closed_form, coupling, divergences, losses, paths, sampling


def _target(d, key=jax.random.PRNGKey(3)):
  q, _ = jnp.linalg.qr(jax.random.normal(key, (d, d)))
  s = jnp.linspace(0.3, 2.5, d)
  return fm.Gaussian(jnp.linspace(-1.0, 1.5, d), (q * s) @ q.T)


def _affine_pushforward(map_fn, d):
  """Law of map_fn(X0), X0 ~ N(0, I), for an affine map_fn on (B, d) batches."""
  pts = jnp.concatenate([jnp.zeros((1, d)), jnp.eye(d)], axis=0)
  out = map_fn(pts)
  b = out[0]
  m = (out[1:] - b).T
  return fm.Gaussian(b, m @ m.T)


def test_paths_hit_their_endpoints(rng):
  k0, k1, kz = jax.random.split(rng, 3)
  x0, x1, z = (jax.random.normal(k, (5, 3)) for k in (k0, k1, kz))
  zeros, ones = jnp.zeros(5), jnp.ones(5)
  np.testing.assert_allclose(paths.linear_interpolant(x0, x1, zeros), x0)
  np.testing.assert_allclose(paths.linear_interpolant(x0, x1, ones), x1)
  np.testing.assert_allclose(paths.brownian_bridge(x0, x1, zeros, z, 0.7), x0)
  np.testing.assert_allclose(paths.brownian_bridge(x0, x1, ones, z, 0.7), x1)
  # The bridge drift target equals X1 - X0 - sigma sqrt(t/(1-t)) Z.
  t = jnp.full((5,), 0.3)
  ps = paths.sample_path("brownian_bridge", x0, x1, t, z, 0.7)
  np.testing.assert_allclose(ps.target, x1 - x0 - 0.7 * jnp.sqrt(0.3 / 0.7) * z, rtol=1e-5,
                             atol=1e-5)
  with pytest.raises(ValueError, match="unknown path"):
    paths.sample_path("curved", x0, x1, t)


def test_bridge_marginal_matches_samples(x64):
  target = _target(2)
  n, t, sigma = 40000, 0.4, 0.8
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  x0 = jax.random.normal(keys[0], (n, 2))
  x1 = target.mean + jax.random.normal(keys[1], (n, 2)) @ jnp.linalg.cholesky(target.cov).T
  xt = paths.brownian_bridge(x0, x1, jnp.full((n,), t), jax.random.normal(keys[2], (n, 2)), sigma)
  emp = divergences.empirical_gaussian(xt)
  law = closed_form.bridge_marginal(target, t, sigma)
  np.testing.assert_allclose(emp.mean, law.mean, atol=0.03)
  np.testing.assert_allclose(emp.cov, law.cov, atol=0.05)


@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_analytic_drift_transports_to_gaussian_target(x64, sigma):
  target = _target(4)
  law = closed_form.euler_maruyama_law(target, sigma, 4096)
  assert float(divergences.gaussian_kl(law, target)) < 1e-5
  assert float(divergences.gaussian_w2(law, target)) < 2e-3
  # Halving h shrinks the error (first-order scheme).
  e = [float(divergences.gaussian_w2(closed_form.euler_maruyama_law(target, sigma, n), target))
       for n in (32, 64)]
  assert 1.6 < e[0] / e[1] < 2.4


def test_diffrax_ode_solvers_match_exact_law(x64):
  target = _target(3)
  drift = lambda t, x: closed_form.gaussian_drift(target, t, x, 0.0)
  law_dopri = _affine_pushforward(lambda p: sampling.sample_ode(
      drift, p, solver="dopri5", rtol=1e-9, atol=1e-9, num_steps=20), 3)
  assert float(divergences.gaussian_kl(law_dopri, target)) < 1e-8
  # diffrax Euler on the grid is exactly the linear recursion of euler_maruyama_law.
  law_euler = _affine_pushforward(lambda p: sampling.sample_ode(drift, p, num_steps=16), 3)
  rec = closed_form.euler_maruyama_law(target, 0.0, 16)
  np.testing.assert_allclose(law_euler.mean, rec.mean, atol=1e-10)
  np.testing.assert_allclose(law_euler.cov, rec.cov, atol=1e-10)
  law_heun = _affine_pushforward(lambda p: sampling.sample_ode(
      drift, p, solver="heun", num_steps=16), 3)
  assert (float(divergences.gaussian_w2(law_heun, target))
          < 0.5 * float(divergences.gaussian_w2(law_euler, target)))


@pytest.mark.parametrize("solver", ["euler", "heun"])
def test_fixed_grid_scan_equals_diffrax(solver):
  # The lax.scan fast path takes diffrax's steps: a nonlinear, time-dependent field
  # (an MLP-like tanh layer), jitted, matches diffrax's Euler / Heun on the same grid.
  w = jax.random.normal(jax.random.PRNGKey(0), (3, 3))
  field = lambda t, x: jnp.tanh(x @ w + t) - 0.5 * x
  x0 = jax.random.normal(jax.random.PRNGKey(1), (7, 3))
  fast = jax.jit(lambda x: sampling.sample_ode(field, x, num_steps=13, solver=solver))(x0)
  ref = jax.jit(lambda x: sampling.sample_ode(field, x, num_steps=13,
                                              solver="diffrax_" + solver))(x0)
  np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)
  assert float(jnp.max(jnp.abs(fast - x0))) > 0.1   # The field moved the points.
  with pytest.raises(ValueError, match="unknown ODE solver 'rk4'"):
    sampling.sample_ode(field, x0, solver="rk4")


def test_diffrax_sde_sampler_matches_exact_em_law(x64):
  target = _target(2)
  law = closed_form.euler_maruyama_law(target, 1.0, 8)
  x0 = jax.random.normal(jax.random.PRNGKey(5), (40000, 2))
  drift = lambda t, x: closed_form.gaussian_drift(target, t, x, 1.0)
  x1 = jax.jit(lambda x, k: sampling.sample_sde(drift, x, k, sigma=1.0, num_steps=8))(
      x0, jax.random.PRNGKey(6))
  emp = divergences.empirical_gaussian(x1)
  np.testing.assert_allclose(emp.mean, law.mean, atol=0.03)
  np.testing.assert_allclose(emp.cov, law.cov, atol=0.06)


def test_mixture_drift_reduces_to_gaussian_and_transports(x64):
  target = _target(2)
  one = fm.GaussianMixture(jnp.ones(1), target.mean[None], target.cov[None])
  x = jax.random.normal(jax.random.PRNGKey(0), (7, 2))
  np.testing.assert_allclose(closed_form.mixture_drift(one, 0.6, x, 0.5),
                             closed_form.gaussian_drift(target, 0.6, x, 0.5), atol=1e-10)
  mix = fm.GaussianMixture(jnp.array([0.7, 0.3]), jnp.array([[-2.0, 0.0], [2.0, 1.0]]),
                           jnp.broadcast_to(0.2 * jnp.eye(2), (2, 2, 2)))
  n = 4000
  x0 = jax.random.normal(jax.random.PRNGKey(1), (n, 2))
  dw = sampling.brownian_increments(jax.random.PRNGKey(2), 256, (n, 2), x0.dtype)
  x1 = sampling.euler_maruyama_with_increments(
      lambda t, x: closed_form.mixture_drift(mix, t, x, 1.0), x0, dw, sigma=1.0)
  mean = mix.weights @ mix.means
  np.testing.assert_allclose(jnp.mean(x1, 0), mean, atol=0.1)
  frac_left = float(jnp.mean(x1[:, 0] < 0))
  assert abs(frac_left - 0.7) < 0.03


def test_gaussian_kl_and_w2_closed_forms(x64):
  p, q = _target(3, jax.random.PRNGKey(0)), _target(3, jax.random.PRNGKey(1))
  q = fm.Gaussian(q.mean + 0.5, q.cov)
  # KL by Monte Carlo: E_p[log p - log q].
  x = p.mean + jax.random.normal(jax.random.PRNGKey(2), (200000, 3)) @ jnp.linalg.cholesky(p.cov).T
  logpdf = lambda g, x: jax.scipy.stats.multivariate_normal.logpdf(x, g.mean, g.cov)
  mc = float(jnp.mean(logpdf(p, x) - logpdf(q, x)))
  assert abs(float(divergences.gaussian_kl(p, q)) - mc) < 0.02
  assert abs(float(divergences.gaussian_kl(p, p))) < 1e-10
  # W2 between diagonal Gaussians: |m1-m2|^2 + sum (sqrt s1 - sqrt s2)^2.
  a = fm.Gaussian(jnp.array([0.0, 1.0]), jnp.diag(jnp.array([1.0, 4.0])))
  b = fm.Gaussian(jnp.array([1.0, 1.0]), jnp.diag(jnp.array([4.0, 1.0])))
  assert abs(float(divergences.gaussian_w2(a, b)) - np.sqrt(1 + 1 + 1)) < 1e-8
  # 1-D: W2 by the sorted (quantile) coupling of large samples.
  g1, g2 = fm.Gaussian(jnp.array([0.3]), jnp.array([[0.5]])), fm.Gaussian(
      jnp.array([-0.4]), jnp.array([[2.0]]))
  k1, k2 = jax.random.split(jax.random.PRNGKey(4))
  s1 = jnp.sort(g1.mean + jnp.sqrt(g1.cov[0, 0]) * jax.random.normal(k1, (100000,)))
  s2 = jnp.sort(g2.mean + jnp.sqrt(g2.cov[0, 0]) * jax.random.normal(k2, (100000,)))
  assert abs(float(jnp.sqrt(jnp.mean((s1 - s2) ** 2))) - float(divergences.gaussian_w2(g1, g2))) < 0.02


def test_exact_and_sinkhorn_w2_against_brute_force(x64):
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(5, 2)), rng.normal(size=(5, 2)) + 1.0
  brute = min(np.mean([np.sum((x[i] - y[p[i]]) ** 2) for i in range(5)])
              for p in itertools.permutations(range(5)))
  assert abs(divergences.exact_w2(x, y) ** 2 - brute) < 1e-10
  s = float(divergences.sinkhorn_divergence(jnp.asarray(x), jnp.asarray(y), eps=0.01,
                                            num_iters=2000))
  assert abs(s - brute) < 0.05 * brute


def test_minibatch_ot_coupling_shortens_pairs(rng):
  k0, k1, kc = jax.random.split(rng, 3)
  x0 = jax.random.normal(k0, (64, 2))
  x1 = jax.random.normal(k1, (64, 2))
  a0, a1 = coupling.couple(kc, x0, x1, "minibatch_ot")[:2]
  ind = float(jnp.mean(jnp.sum((x1 - x0) ** 2, 1)))
  ot = float(jnp.mean(jnp.sum((a1 - a0) ** 2, 1)))
  exact = divergences.exact_w2(x0, x1) ** 2
  assert exact <= ot < 0.5 * ind


def test_cfm_loss_is_minimised_by_the_exact_velocity(rng):
  means = jnp.array([[[-2.0, 0.0], [2.0, 0.0]], [[0.0, 2.0], [0.0, -2.0]]])
  weights = jnp.array([[0.7, 0.3], [0.5, 0.5]])
  apply = closed_form.conditional_mixture_velocity(means, weights, 0.3)
  k = jax.random.split(rng, 5)
  n = 4096
  labels = jax.random.bernoulli(k[0], 0.5, (n,)).astype(jnp.int32)
  comp = jax.random.categorical(k[1], jnp.log(weights[labels]))
  x1 = means[labels, comp] + 0.3 * jax.random.normal(k[2], (n, 2))
  x0 = jax.random.normal(k[3], (n, 2))
  t = jax.random.uniform(k[4], (n,), maxval=0.95)
  cond = jax.nn.one_hot(labels, 2)
  exact = losses.cfm_loss(apply, None, x0, x1, t, cond)
  shifted = losses.cfm_loss(lambda p, t, x, c: apply(p, t, x, c) + 0.3, None, x0, x1, t, cond)
  assert float(exact) < float(shifted)
  dropped = losses.drop_conditions(rng, jnp.ones((20000, 3)), 0.25)
  assert abs(float(jnp.mean(jnp.sum(dropped, 1) == 0)) - 0.25) < 0.015


def test_guided_field_weights_and_vmap_over_w(rng):
  apply = lambda p, t, x, c: -x * (1.0 + t)[:, None] + jnp.tanh(x) * jnp.sum(c, -1)[:, None]
  cond = jnp.broadcast_to(jax.nn.one_hot(0, 2), (4, 2))
  x = jax.random.normal(rng, (4, 2))
  t = jnp.full((4,), 0.3)
  f1 = fm.guided_field(apply, None, cond, 1.0)
  f0 = fm.guided_field(apply, None, cond, 0.0)
  np.testing.assert_allclose(f1(0.3, x), apply(None, t, x, cond), rtol=1e-5)
  np.testing.assert_allclose(f0(0.3, x), apply(None, t, x, jnp.zeros_like(cond)), rtol=1e-5)
  sample = jax.jit(jax.vmap(lambda w: fm.sample_ode(fm.guided_field(apply, None, cond, w), x,
                                                    num_steps=8)))
  ws = jnp.array([1.0, 4.0])
  out = sample(ws)
  for i, w in enumerate(ws):
    np.testing.assert_allclose(out[i], fm.sample_ode(fm.guided_field(apply, None, cond, w), x,
                                                     num_steps=8), rtol=1e-4, atol=1e-4)


def test_networks_train_through_the_common_loop(tmp_path):
  model = fm.ConditionalMLP(hidden=(32, 32), dim=2)
  loss_fn = fm.make_loss_fn(model.apply, p_uncond=0.2)

  def batch_fn(seed, step):
    r = np.random.default_rng([seed, step])
    labels = r.integers(0, 2, 64)
    x1 = np.where(labels[:, None] == 0, -2.0, 2.0) + 0.3 * r.standard_normal((64, 2))
    return {"x1": x1.astype(np.float32), "cond": np.eye(2, dtype=np.float32)[labels]}

  config = train_lib.default_train_config()
  config.num_steps, config.batch_size, config.log_every = 80, 64, 10
  config.progress_bar = False
  result = train_lib.train(
      init_fn=lambda k: model.init(k, jnp.zeros((1,)), jnp.zeros((1, 2)), jnp.zeros((1, 2))),
      loss_fn=loss_fn, batch_fn=batch_fn, optimizer=optax.adam(3e-3), config=config,
      workdir=str(tmp_path))
  losses_seen = [h["loss"] for h in result.history]
  assert np.mean(losses_seen[-3:]) < 0.7 * np.mean(losses_seen[:2])
  cnn = ConditionalCNN(channels=8, num_blocks=1)
  x = jnp.zeros((3, 8, 8, 1))
  params = cnn.init(jax.random.PRNGKey(0), jnp.zeros((3,)), x, jnp.zeros((3, 10)))
  assert cnn.apply(params, jnp.ones((3,)), x, jnp.ones((3, 10))).shape == (3, 8, 8, 1)
  with pytest.raises(ValueError, match="expects x of shape"):
    cnn.apply(params, jnp.ones((3,)), jnp.zeros((3, 64)), jnp.ones((3, 10)))


def test_random_targets_have_the_stated_laws(x64):
  g = fm.rotated_gaussian(jax.random.PRNGKey(0), 5, mean_scale=0.5, cov_min=0.25, cov_max=4.0)
  np.testing.assert_allclose(g.mean, 0.5 * np.ones(5))
  np.testing.assert_allclose(jnp.linalg.eigvalsh(g.cov), np.geomspace(0.25, 4.0, 5), rtol=1e-10)
  np.testing.assert_allclose(g.cov, g.cov.T, atol=1e-12)
  mix = fm.sphere_mixture(jax.random.PRNGKey(1), 3, num_components=4, radius=2.0, std=0.5)
  np.testing.assert_allclose(mix.weights, [0.4, 0.3, 0.2, 0.1])
  np.testing.assert_allclose(jnp.linalg.norm(mix.means, axis=1), 2.0, rtol=1e-12)
  np.testing.assert_allclose(mix.covs, np.broadcast_to(0.25 * np.eye(3), (4, 3, 3)))


def test_coupling_bound_is_an_upper_bound_on_w2(x64):
  """(mean |x_i - y_i|^2)^(1/2) >= the optimal assignment's W2; equal for sorted 1-D pairs."""
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(6, 2)), rng.normal(size=(6, 2)) + 0.5
  bound = float(fm.coupling_w2_bound(jnp.asarray(x), jnp.asarray(y)))
  np.testing.assert_allclose(bound, np.sqrt(np.mean(np.sum((x - y) ** 2, 1))), rtol=1e-12)
  assert bound >= fm.exact_w2(x, y) - 1e-12
  a, b = np.sort(rng.normal(size=(7, 1)), 0), np.sort(rng.normal(size=(7, 1)), 0)
  np.testing.assert_allclose(float(fm.coupling_w2_bound(jnp.asarray(a), jnp.asarray(b))),
                             fm.exact_w2(a, b), rtol=1e-10)


# Issue 17, item 11: the batch keys lived only in docstrings; a wrong batch gave a bare
# KeyError (or a concatenate error) deep inside the traced loss.

def _tiny_model():
  model = fm.ConditionalMLP(hidden=(4,), dim=2)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1,)), jnp.zeros((1, 2)),
                      jnp.zeros((1, 3)))
  return model, params


@pytest.mark.parametrize("batch, error, match", [
    ({"x": jnp.zeros((4, 2)), "cond": jnp.zeros((4, 3))}, ValueError,
     r"missing keys \['x1'\]: expected keys \['x1', 'cond'\], got keys \['cond', 'x'\]"),
    ({"x1": jnp.zeros((4, 2))}, ValueError, r"missing keys \['cond'\]"),
    ((jnp.zeros((4, 2)), jnp.zeros((4, 3))), TypeError, r"batch must be a dict with keys"),
    ({"x1": jnp.zeros((4, 2)), "cond": jnp.zeros((5, 3))}, ValueError,
     r"batch\['cond'\] must have shape \(4, C\)"),
    ({"x1": jnp.zeros((4, 2), jnp.int32), "cond": jnp.zeros((4, 3))}, TypeError,
     r"batch\['x1'\] must be floating point"),
])
def test_loss_fn_checks_the_batch_structure_at_trace_time(batch, error, match):
  model, params = _tiny_model()
  loss_fn = jax.jit(fm.make_loss_fn(model.apply))
  with pytest.raises(error, match=match):
    loss_fn(params, batch, jax.random.PRNGKey(1))


def test_sweep_integer_starts_are_promoted_and_bad_scalars_raise():
  x_int = jnp.ones((4, 2), jnp.int32)
  key = jax.random.PRNGKey(0)
  drift = lambda t, x: -x
  # An integer x0 gave an integer time grid (0, 0, ..., 1) to the SDE sampler.
  np.testing.assert_allclose(sampling.sample_sde(drift, x_int, key, sigma=0.0, num_steps=4),
                             sampling.sample_sde(drift, x_int.astype(jnp.float32), key,
                                                 sigma=0.0, num_steps=4))
  np.testing.assert_allclose(sampling.sample_ode(drift, x_int, num_steps=4),
                             jnp.full((4, 2), 0.75 ** 4), rtol=1e-6)
  cases = [
      (lambda: sampling.sample_sde(drift, x_int, key, sigma=float("nan")), "sigma must be"),
      (lambda: sampling.sample_ode(drift, x_int, num_steps=0), "num_steps must be an int >= 1"),
      (lambda: fm.rotated_gaussian(key, 3, cov_min=0.0), "cov_min must be finite and > 0"),
      (lambda: fm.sphere_mixture(key, 2, num_components=0), "num_components must be"),
      (lambda: fm.sinkhorn_divergence(jnp.zeros((3, 2)), jnp.ones((3, 2)), eps=0.0),
       "eps must be finite and > 0"),
      (lambda: coupling.ot_pairing(key, jnp.zeros((3, 2)), jnp.ones((3, 2)), eps=0.0),
       "eps must be finite and > 0"),
      (lambda: fm.euler_maruyama_law(closed_form.Gaussian(jnp.zeros(2), jnp.eye(2)), 1.0, 0),
       "num_steps must be an int >= 1, got 0"),
      (lambda: fm.empirical_gaussian(jnp.ones((1, 2))), "n >= 2"),
      (lambda: fm.mixture_sample(key, closed_form.GaussianMixture(
          jnp.array([0.5, 0.7]), jnp.zeros((2, 2)), jnp.stack([jnp.eye(2)] * 2)), 5),
       "target.weights must be non-empty, >= 0 and sum to 1"),
      (lambda: fm.make_loss_fn(lambda *a: 0.0, p_uncond=2.0), "p_uncond must be finite"),
      (lambda: fm.make_loss_fn(lambda *a: 0.0, path="brownian_bridge", t_max=1.0),
       "t_max must be < 1"),
      (lambda: fm.sample_path("linear", jnp.zeros((4, 2)), jnp.zeros((4, 2)), jnp.ones(3)),
       r"times t must be a scalar or have shape \(4,\)"),
      (lambda: fm.gaussian_kl(closed_form.Gaussian(jnp.zeros(2), jnp.eye(2)),
                              closed_form.Gaussian(jnp.zeros(3), jnp.eye(3))),
       "p and q must have the same dimension"),
  ]
  for call, match in cases:
    with pytest.raises(ValueError, match=match):
      call()
