"""Unit tests of methods/divin: Langevin invariance, the potential, baselines, metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from methods import divin
from methods.divin import baselines, langevin, metrics, potential
from methods.flow_matching import closed_form
from methods.flow_matching import sampling as fm_sampling


def _exact_flow():
  means = jnp.array([[[4.0, 0.0], [0.0, 4.0]], [[-4.0, 0.0], [0.0, -4.0]]])
  weights = jnp.array([[0.8, 0.2], [0.8, 0.2]])
  return closed_form.conditional_mixture_velocity(means, weights, 0.3)


def _toy_apply(params, t, x, cond):
  """A cheap smooth conditional field (for identities that hold for any network)."""
  w = jnp.array([[1.0, -0.5], [0.3, 2.0]])
  return -x * (1.0 + t)[:, None] + 2.0 * jnp.tanh(x) * jnp.sum(cond, -1, keepdims=True) + cond @ w


def test_langevin_leaves_standard_normal_invariant_at_tau_zero(rng):
  """Statistical test: after 40 updates from N(0, I) the draws are still N(0, I)."""
  n, d = 20000, 2
  k0, k1 = jax.random.split(rng)
  z0 = jax.random.normal(k0, (n, d))
  z = divin.divin_init(k1, z0, jnp.zeros((n, 1)), lambda z, c: jnp.zeros_like(z),
                       tau=0.0, eta=0.2, num_steps=40)
  assert jnp.all(jnp.isfinite(z))
  # mean ~ N(0, 1/n), variance ~ N(1, 2/n): 4-sigma bands; KS test on each coordinate.
  assert np.all(np.abs(np.asarray(jnp.mean(z, 0))) < 4 / np.sqrt(n))
  assert np.all(np.abs(np.asarray(jnp.var(z, 0)) - 1) < 4 * np.sqrt(2 / n))
  for j in range(d):
    assert stats.kstest(np.asarray(z[:, j]), "norm").pvalue > 1e-3
  # The chain moved: the output is nearly independent of the input.
  assert abs(float(jnp.corrcoef(z0[:, 0], z[:, 0])[0, 1])) < 0.05


def test_euler_scheme_has_the_predicted_variance_inflation(rng):
  """Literal update z - eta z + sqrt(2 eta) xi: stationary variance 1 / (1 - eta/2)."""
  eta, n = 0.4, 40000
  z = divin.divin_init(rng, jnp.zeros((n, 1)), jnp.zeros((n, 1)),
                       lambda z, c: jnp.zeros_like(z), tau=0.0, eta=eta, num_steps=60,
                       scheme="euler")
  assert abs(float(jnp.var(z)) - 1 / (1 - eta / 2)) < 0.04
  with pytest.raises(ValueError, match="unknown Langevin scheme"):
    langevin.divin_init(rng, z, z, lambda z, c: z, tau=0.0, eta=0.1, num_steps=1, scheme="x")


def test_langevin_targets_the_tilted_prior(rng):
  """U(z) = |z - a|^2: p(z) ~ N(0,I) exp(-tau U) = N(2 tau a/(1 + 2 tau), I/(1 + 2 tau))."""
  a, tau, n = jnp.array([1.0, -2.0]), 0.5, 20000
  grad_fn = lambda z, c: 2 * (z - a)
  z = divin.divin_init(rng, jax.random.normal(rng, (n, 2)), jnp.zeros((n, 1)), grad_fn,
                       tau=tau, eta=0.02, num_steps=400)
  np.testing.assert_allclose(jnp.mean(z, 0), 2 * tau * a / (1 + 2 * tau), atol=0.05)
  np.testing.assert_allclose(jnp.var(z, 0), 1 / (1 + 2 * tau), atol=0.05)


def test_guidance_potential_on_the_exact_flow(rng):
  apply = _exact_flow()
  z = jax.random.normal(rng, (24, 2))
  cond = jnp.broadcast_to(jax.nn.one_hot(0, 2), (24, 2))
  # One-shot prediction at t = 0 is E[X1|c] for every z: U is constant, grad U = 0.
  u1 = jax.jit(lambda z, c: potential.guidance_potential(apply, None, z, c, 1))(z, cond)
  np.testing.assert_allclose(u1, u1[0], rtol=1e-4)
  grad1 = jax.jit(potential.potential_grad(apply, None, 1))
  np.testing.assert_allclose(grad1(z, cond), 0.0, atol=1e-3)
  # K-step rollouts depend on z; the null condition has U = 0.
  u_fn = jax.jit(lambda z, c: potential.guidance_potential(apply, None, z, c, 3))
  u3 = u_fn(z, cond)
  assert float(jnp.std(u3)) > 0.1
  np.testing.assert_allclose(u_fn(z, 0 * cond), 0.0, atol=1e-6)
  # vmapped per-sample gradient equals the gradient of the batch sum.
  g = jax.jit(potential.potential_grad(_toy_apply, None, 3))(z, cond)
  g_sum = jax.jit(jax.grad(
      lambda z: jnp.sum(potential.guidance_potential(_toy_apply, None, z, cond, 3))))(z)
  np.testing.assert_allclose(g, g_sum, rtol=1e-4, atol=1e-4)
  # The tilt lowers the potential: same chain noise, tau = 1 vs tau = 0.
  zb = jax.random.normal(jax.random.PRNGKey(9), (512, 2))
  cb = jnp.broadcast_to(jax.nn.one_hot(0, 2), (512, 2))
  grad_fn = potential.potential_grad(_toy_apply, None, 3)
  u_toy = lambda z: jnp.mean(potential.guidance_potential(_toy_apply, None, z, cb, 3))
  run = jax.jit(lambda tau: u_toy(divin.divin_init(rng, zb, cb, grad_fn, tau=tau, eta=0.05,
                                                    num_steps=40)))
  assert float(run(1.0)) < 0.8 * float(run(0.0))


def test_baseline_fields(rng):
  apply = _toy_apply
  cond = jnp.broadcast_to(jax.nn.one_hot(1, 2), (6, 2))
  x = jax.random.normal(rng, (6, 2))
  assert float(baselines.cads_gamma(0.1, 0.2, 0.6)) == 0.0
  assert float(baselines.cads_gamma(0.9, 0.2, 0.6)) == 1.0
  assert abs(float(baselines.cads_gamma(0.4, 0.2, 0.6)) - 0.5) < 1e-6
  np.testing.assert_allclose(baselines.anneal_condition(rng, cond, 1.0, 0.5, rescale=False), cond)
  # Late in sampling (gamma = 1) CADS is plain CFG.
  np.testing.assert_allclose(baselines.anneal_condition(rng, cond, 1.0, 0.5), cond, atol=1e-5)
  cads = baselines.cads_field(apply, None, cond, 3.0, rng, num_steps=10, rescale=False)
  np.testing.assert_allclose(cads(0.9, x), baselines.cfg_field(apply, None, cond, 3.0)(0.9, x),
                             rtol=1e-5)
  # Particle-guidance repulsion is -grad_{x_i} (1/B) sum_j k(x_i, x_j) (median bandwidth).
  rep = baselines.rbf_repulsion(x)
  sq = jnp.sum((x[:, None] - x[None]) ** 2, -1)
  ell2 = jnp.median(sq[np.triu_indices(6, 1)]) / (2 * jnp.log(7.0))
  ksum = lambda y: jnp.sum(jnp.exp(-jnp.sum((y[:, None] - y[None]) ** 2, -1) / (2 * ell2)))
  np.testing.assert_allclose(rep, -0.5 * jax.grad(ksum)(x) / 6, rtol=1e-4, atol=1e-6)
  pg = baselines.particle_guidance_field(apply, None, cond, 2.0, alpha=0.0)
  np.testing.assert_allclose(pg(0.3, x), baselines.cfg_field(apply, None, cond, 2.0)(0.3, x))


def test_vendi_and_pairwise_against_brute_force(rng):
  x = jax.random.normal(rng, (9, 3))
  xn = np.asarray(x, np.float64)
  k = np.exp(-((xn[:, None] - xn[None]) ** 2).sum(-1) / (2 * 1.5 ** 2))
  lam = np.linalg.eigvalsh(k / 9)
  lam = lam[lam > 1e-12]
  np.testing.assert_allclose(metrics.vendi_score(x, 1.5), np.exp(-np.sum(lam * np.log(lam))),
                             rtol=1e-4)
  assert abs(float(metrics.vendi_score(jnp.zeros((7, 2)))) - 1.0) < 1e-4
  assert abs(float(metrics.vendi_score(100.0 * jnp.eye(7))) - 7.0) < 1e-3
  pair = np.mean([np.linalg.norm(xn[i] - xn[j]) for i in range(9) for j in range(9) if i != j])
  np.testing.assert_allclose(metrics.mean_pairwise_distance(x), pair, rtol=1e-4)


def test_mode_metrics_against_brute_force(rng):
  means = jnp.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
  scales = jnp.array([0.5, 1.0, 0.5])
  weights = jnp.array([0.5, 0.3, 0.2])
  x = jnp.concatenate([jax.random.normal(rng, (30, 2)) * 0.5, jnp.array([[5.5, 0.2],
                                                                        [20.0, 20.0]])])
  xn, mn, sn = np.asarray(x), np.asarray(means), np.asarray(scales)
  assign = []
  for p in xn:
    dist = np.linalg.norm(p - mn, axis=1) / sn
    assign.append(int(np.argmin(dist)) if dist.min() <= 3.0 else -1)
  assign = np.array(assign)
  np.testing.assert_array_equal(metrics.mode_assignment(x, means, scales), assign)
  counts = np.array([(assign == k).sum() for k in range(3)])
  np.testing.assert_array_equal(metrics.mode_counts(x, means, scales), counts)
  assert float(metrics.mode_coverage(x, means, scales)) == pytest.approx(np.mean(counts >= 1))
  assert float(metrics.precision(x, means, scales)) == pytest.approx(np.mean(assign >= 0))
  np.testing.assert_allclose(metrics.per_mode_precision(x, means, scales, weights),
                             counts / len(xn) / np.asarray(weights), rtol=1e-6)


def test_density_coverage_against_brute_force(rng):
  k1, k2 = jax.random.split(rng)
  real, fake = jax.random.normal(k1, (25, 3)), jax.random.normal(k2, (20, 3)) + 0.5
  r, f = np.asarray(real), np.asarray(fake)
  k = 3
  radii = [sorted(np.linalg.norm(r - r[i], axis=1))[k] for i in range(25)]
  inside = np.array([[np.linalg.norm(f[j] - r[i]) <= radii[i] for i in range(25)]
                     for j in range(20)])
  density, coverage = metrics.density_coverage(real, fake, k)
  assert float(density) == pytest.approx(inside.sum() / (k * 20), rel=1e-5)
  assert float(coverage) == pytest.approx(inside.any(axis=0).mean(), rel=1e-5)


def test_pareto_and_hypervolume_against_brute_force():
  rng = np.random.default_rng(0)
  pts = rng.uniform(0.1, 1.0, (12, 2))
  dominated = [any(np.all(pts[j] >= pts[i]) and np.any(pts[j] > pts[i]) for j in range(12))
               for i in range(12)]
  np.testing.assert_array_equal(metrics.pareto_mask(pts), ~np.array(dominated))
  g = (np.arange(2000) + 0.5) / 2000
  gx, gy = np.meshgrid(g, g)
  cells = np.zeros_like(gx, dtype=bool)
  for p in pts:
    cells |= (gx <= p[0]) & (gy <= p[1])
  assert metrics.hypervolume_2d(pts) == pytest.approx(cells.mean(), abs=2e-3)
  assert metrics.hypervolume_2d(np.zeros((0, 2))) == 0.0


def test_ring_modes_and_batches():
  means, weights = divin.ring_modes(3, (3.0, 1.0), 5.0)
  assert means.shape == (3, 2, 2) and means.dtype == np.float32
  np.testing.assert_allclose(weights, [0.75, 0.25])
  np.testing.assert_allclose(np.linalg.norm(means, axis=-1), 5.0, rtol=1e-6)
  # The 6 modes are interleaved: mode k of class c sits at angle 2 pi (k C + c) / (C K).
  angles = np.mod(np.arctan2(means[..., 1], means[..., 0]), 2 * np.pi)
  np.testing.assert_allclose(angles, 2 * np.pi * np.array([[0, 3], [1, 4], [2, 5]]) / 6,
                             atol=1e-5)
  b = divin.mixture_batch(4, 9, means=means, weights=weights, std=0.1, batch_size=600)
  again = divin.mixture_batch(4, 9, means=means, weights=weights, std=0.1, batch_size=600)
  np.testing.assert_array_equal(b["x1"], again["x1"])               # pure in (seed, step)
  assert b["x1"].shape == (600, 2) and b["cond"].shape == (600, 3)
  labels = b["cond"].argmax(1)
  nearest = np.linalg.norm(b["x1"][:, None, :] - means[labels], axis=-1).argmin(1)
  assert abs(np.mean(nearest == 0) - 0.75) < 0.06                   # mode weights respected
  assert np.all(np.abs(np.bincount(labels, minlength=3) / 600 - 1 / 3) < 0.06)
  x, y = np.arange(20.0)[:, None], np.arange(20) % 4
  d = divin.dataset_batch(1, 2, x=x, labels=y, num_classes=4, batch_size=8)
  np.testing.assert_array_equal(d["cond"].argmax(1), d["x1"][:, 0].astype(int) % 4)


def test_class_metrics_average_the_per_class_metrics(rng):
  means = jnp.array([[[0.0, 0.0], [4.0, 0.0]], [[0.0, 4.0], [4.0, 4.0]]])
  samples = 0.3 * jax.random.normal(rng, (2, 16, 2)) + means[:, :1]    # mode 0 of each class
  out = divin.class_mode_metrics(samples, means, 0.3, 3.0, 1.0)
  scales = jnp.full((2,), 0.3)
  for name, fn in (("precision", lambda x, c: metrics.precision(x, means[c], scales)),
                   ("coverage", lambda x, c: metrics.mode_coverage(x, means[c], scales)),
                   ("vendi", lambda x, c: metrics.vendi_score(x, 1.0)),
                   ("pairwise", lambda x, c: metrics.mean_pairwise_distance(x))):
    assert out[name] == pytest.approx(np.mean([float(fn(samples[c], c)) for c in range(2)]),
                                      rel=1e-6)
  assert out["coverage"] == pytest.approx(0.5)
  real = [samples[0] + 0.01, samples[1] + 5.0]
  dens = divin.class_density_metrics(samples, real, k=3, lengthscale=1.0)
  per_class = [metrics.density_coverage(r, samples[c], 3) for c, r in enumerate(real)]
  assert dens["density"] == pytest.approx(np.mean([float(d) for d, _ in per_class]), rel=1e-6)
  assert dens["coverage"] == pytest.approx(0.5)                     # class 1 is far off


def test_sample_classes_composes_the_named_pieces(rng):
  """divin = Euler on cfg_field from divin_init's noise, with the documented keys."""
  apply = _toy_apply
  out = divin.sample_classes(None, rng, 3.0, 0.5, 0.3, 2.0, 0.1, apply_fn=apply, method="divin",
                             shape=(8, 2), num_classes=2, num_steps=6, divin_steps=5,
                             rollout_steps=2)
  assert out.shape == (2, 8, 2)

  @jax.jit
  def reference(key_c):                                             # one class, by hand
    k_z, k_l, _ = jax.random.split(key_c, 3)
    cond = jnp.broadcast_to(jax.nn.one_hot(1, 2), (8, 2))
    z = divin.divin_init(k_l, jax.random.normal(k_z, (8, 2)), cond,
                         potential.potential_grad(apply, None, 2), tau=0.5, eta=0.1,
                         num_steps=5)
    return fm_sampling.sample_ode(baselines.cfg_field(apply, None, cond, 3.0), z, num_steps=6)

  np.testing.assert_allclose(out[1], reference(jax.random.split(rng, 2)[1]), rtol=1e-5,
                             atol=1e-5)
  with pytest.raises(ValueError, match="unknown method"):
    divin.method_field("nope", apply, None, jnp.zeros((8, 2)), 1.0, rng, num_steps=4)


def test_sweep_bad_arguments_raise_before_tracing(rng):
  # Each of these was silent: NaN samples (eta < 0, t1 = t2), a clamped k-NN radius
  # (k >= N), a wrapped one-hot (label -1), NaN mode weights (all zero).
  kwargs = dict(apply_fn=_toy_apply, method="divin", shape=(8, 2), num_classes=2,
                num_steps=4, divin_steps=2, rollout_steps=1)
  with pytest.raises(ValueError, match="eta must be finite and > 0"):
    divin.sample_classes(None, rng, 3.0, 0.5, 0.0, 0.0, -0.1, **kwargs)
  with pytest.raises(ValueError, match=r"CADS window \(t1, t2\) must satisfy"):
    divin.sample_classes(None, rng, 3.0, 0.5, 0.0, 0.0, 0.1, cads_t1=0.5, cads_t2=0.5,
                         **kwargs)
  with pytest.raises(ValueError, match="unknown method"):
    divin.sample_classes(None, rng, 3.0, 0.5, 0.0, 0.0, 0.1, **{**kwargs, "method": "x"})
  with pytest.raises(ValueError, match=r"k must be an int in \[1, N - 1\]"):
    metrics.density_coverage(jnp.zeros((5, 2)), jnp.zeros((3, 2)), k=5)
  with pytest.raises(ValueError, match=r"labels must lie in \[0, num_classes\)"):
    divin.dataset_batch(0, 0, x=np.zeros((4, 2)), labels=np.array([-1, -1, -1, -1]),
                        num_classes=3, batch_size=2)
  with pytest.raises(ValueError, match="mode_weights must be"):
    divin.ring_modes(3, (0.0, 0.0), 5.0)
  with pytest.raises(ValueError, match="lengthscale must be finite and > 0"):
    divin.vendi_score(jnp.zeros((3, 2)), lengthscale=0.0)
  with pytest.raises(ValueError, match="n >= 2"):
    metrics.mean_pairwise_distance(jnp.zeros((1, 2)))
  with pytest.raises(ValueError, match="num_rollout_steps must be an int >= 1"):
    potential.clean_prediction(_toy_apply, None, jnp.zeros((2, 2)), jnp.zeros((2, 2)), 0)
