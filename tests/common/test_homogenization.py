"""Homogenisation of periodic cells (common/physics) against closed forms and bounds.

Exact: the solid cell, laminates (series/parallel conductivity, the laminate
stiffness formula; Q4 represents their piecewise-linear fields exactly), Levin's
formula for the expansion of any two-phase cell. Bounds: Voigt/Reuss in the Loewner
order, Hashin-Shtrikman for square-symmetric disc cells. Then SPD-ness, gradients
against central differences, vmap = loop, one trace per shape, float32.

Most checks share one compiled program (n = 8, float64); the disc cells use n = 32.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common import physics

N = 8
# 10:1 contrast, binary densities: exactly two phases whatever the SIMP exponent.
TWO_PHASE = physics.Material(E_solid=1.0, E_void=0.1, nu=0.3, kappa_solid=1.0,
                             kappa_void=0.1, alpha_solid=1.0, alpha_void=2.5, penal=3.0)
M = np.array([1.0, 1.0, 0.0])


def stiffness(E, nu):
  return E / (1 - nu**2) * np.array([[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu) / 2]])


def binary_cell(seed, n=N, fraction=0.5):
  return (np.random.default_rng(seed).uniform(size=(n, n)) < fraction).astype(np.float64)


def disc_cell(n, radius):
  centres = (np.arange(n) + 0.5) / n
  x, y = np.meshgrid(centres, centres, indexing="ij")
  return ((x - 0.5)**2 + (y - 0.5)**2 < radius**2).astype(np.float64)


def laminate_stiffness(layers, fractions):
  """Exact C* of layers normal to x (Voigt n = (xx, xy) carries continuous traction,
  t = (yy) continuous strain):
    C*_nn = <C_nn^-1>^-1,  C*_nt = C*_nn <C_nn^-1 C_nt>,
    C*_tt = <C_tt - C_tn C_nn^-1 C_nt> + <C_tn C_nn^-1> C*_nn <C_nn^-1 C_nt>."""
  n, t = [0, 2], [1]
  avg = lambda f: sum(fr * f(c) for c, fr in zip(layers, fractions))
  inv_nn = lambda c: np.linalg.inv(c[np.ix_(n, n)])
  c_nn = np.linalg.inv(avg(inv_nn))
  right = avg(lambda c: inv_nn(c) @ c[np.ix_(n, t)])
  left = avg(lambda c: c[np.ix_(t, n)] @ inv_nn(c))
  c_tt = avg(lambda c: c[np.ix_(t, t)] - c[np.ix_(t, n)] @ inv_nn(c) @ c[np.ix_(n, t)])
  out = np.zeros((3, 3))
  out[np.ix_(n, n)] = c_nn
  out[np.ix_(n, t)] = c_nn @ right
  out[np.ix_(t, n)] = left @ c_nn
  out[np.ix_(t, t)] = c_tt + left @ c_nn @ right
  return out


def hashin_shtrikman(p_hi, p_lo, f_hi, shift_hi, shift_lo):
  """2-D HS bounds for a well-ordered two-phase composite: p* in [lower, upper] with
  upper = p_hi + f_lo / (1 / (p_lo - p_hi) + f_hi / (p_hi + shift_hi)) and the lower
  one with the phases swapped (shift = kappa for conductivity, mu for bulk)."""
  f_lo = 1 - f_hi
  upper = p_hi + f_lo / (1 / (p_lo - p_hi) + f_hi / (p_hi + shift_hi))
  lower = p_lo + f_hi / (1 / (p_hi - p_lo) + f_lo / (p_lo + shift_lo))
  return lower, upper


def loewner_geq(a, b, tol):
  """True when a - b is positive semi-definite up to tol (relative to ||a||)."""
  return np.linalg.eigvalsh(0.5 * ((a - b) + (a - b).T)).min() >= -tol * np.abs(a).max()


def test_solid_cell_recovers_the_base_material(x64):
  material = physics.Material(E_solid=2.5, nu=0.25, kappa_solid=3.0, alpha_solid=0.7)
  props = physics.homogenize(jnp.ones((N, N)), material)
  np.testing.assert_allclose(props.C, stiffness(2.5, 0.25), rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(props.kappa, 3.0 * np.eye(2), rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(props.alpha, 0.7 * M, rtol=1e-12, atol=1e-14)
  assert float(props.volume_fraction) == 1.0
  eng = physics.engineering_constants(props.C)
  np.testing.assert_allclose([eng.E1, eng.E2, eng.G12, eng.nu12, eng.nu21],
                             [2.5, 2.5, 2.5 / 2.5, 0.25, 0.25], rtol=1e-12)


@pytest.mark.parametrize("normal", ["x", "y"])
def test_laminate_matches_the_exact_formulas(x64, normal):
  rho = np.zeros((N, N))
  rho[:3] = 1.0                      # layers normal to x: 3 solid columns of 8
  if normal == "y":
    rho = rho.T
  props = physics.homogenize(jnp.asarray(rho), TWO_PHASE)
  f = np.array([3 / 8, 5 / 8])
  kappa_series = 1 / (f[0] / 1.0 + f[1] / 0.1)
  kappa_parallel = f[0] * 1.0 + f[1] * 0.1
  C = laminate_stiffness([stiffness(1.0, 0.3), stiffness(0.1, 0.3)], f)
  if normal == "y":                  # swap x and y: Voigt (xx, yy, xy) -> (yy, xx, xy)
    C = C[np.ix_([1, 0, 2], [1, 0, 2])]
  kappa = np.diag([kappa_series, kappa_parallel] if normal == "x"
                  else [kappa_parallel, kappa_series])
  np.testing.assert_allclose(props.kappa, kappa, rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(props.C, C, rtol=1e-9, atol=1e-12)


def test_voigt_reuss_bounds_hold_for_random_cells(x64):
  rng = np.random.default_rng(0)
  material = physics.Material()
  for _ in range(3):
    rho = rng.uniform(size=(N, N))
    props = physics.homogenize(jnp.asarray(rho), material)
    E, kappa, _ = (np.asarray(v) for v in physics.interpolate(jnp.asarray(rho), material))
    voigt = stiffness(E.mean(), 0.3)
    reuss = np.linalg.inv(np.linalg.inv(stiffness(1.0, 0.3)) * np.mean(1 / E))
    C = np.asarray(props.C)
    assert loewner_geq(voigt, C, 1e-10) and loewner_geq(C, reuss, 1e-10)
    k = np.asarray(props.kappa)
    assert loewner_geq(kappa.mean() * np.eye(2), k, 1e-10)
    assert loewner_geq(k, np.eye(2) / np.mean(1 / kappa), 1e-10)


@pytest.mark.parametrize("preconditioner", ["multigrid", "fft"])
def test_hashin_shtrikman_bounds_hold_for_disc_cells(x64, preconditioner):
  """Square-symmetric two-phase cells (stiff discs in a soft matrix and the reverse):
  kappa* is isotropic and the plane bulk modulus K* = (C11 + C12) / 2 is the
  eigenvalue of the hydrostatic mode; both lie within the 2-D HS bounds."""
  nu, lo = 0.3, 0.1
  bulk = lambda E: E / (2 * (1 - nu))
  shear = lambda E: E / (2 * (1 + nu))
  material = TWO_PHASE._replace(penal=1.0)
  for rho in (disc_cell(32, 0.3), 1 - disc_cell(32, 0.3), 1 - disc_cell(32, 0.45)):
    props = physics.homogenize(jnp.asarray(rho), material, preconditioner=preconditioner)
    C, k = np.asarray(props.C), np.asarray(props.kappa)
    f = rho.mean()
    np.testing.assert_allclose([C[0, 0] - C[1, 1], C[0, 2], k[0, 0] - k[1, 1], k[0, 1]],
                               0.0, atol=1e-12)
    k_lower, k_upper = hashin_shtrikman(1.0, lo, f, 1.0, lo)
    assert k_lower < k[0, 0] < k_upper
    b_lower, b_upper = hashin_shtrikman(bulk(1.0), bulk(lo), f, shear(1.0), shear(lo))
    assert b_lower < 0.5 * (C[0, 0] + C[0, 1]) < b_upper


def test_uniform_expansion_is_recovered(x64):
  material = TWO_PHASE._replace(alpha_solid=1.7, alpha_void=1.7)
  props = physics.homogenize(jnp.asarray(np.random.default_rng(1).uniform(size=(N, N))),
                             material)
  np.testing.assert_allclose(props.alpha, 1.7 * M, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", [2, 3])
def test_two_phase_expansion_obeys_levins_formula(x64, seed):
  """alpha* = alpha_2 + (S* - S_2)(S_1 - S_2)^-1 (alpha_1 - alpha_2), any geometry."""
  rho = binary_cell(seed)
  props = physics.homogenize(jnp.asarray(rho), TWO_PHASE)
  s1, s2 = np.linalg.inv(stiffness(1.0, 0.3)), np.linalg.inv(stiffness(0.1, 0.3))
  a1, a2 = 1.0 * M, 2.5 * M
  levin = a2 + (np.linalg.inv(np.asarray(props.C)) - s2) @ np.linalg.solve(s1 - s2, a1 - a2)
  np.testing.assert_allclose(props.alpha, levin, rtol=1e-6, atol=1e-9)
  assert abs(props.alpha[0] - props.alpha[1]) > 1e-3  # anisotropic: not a trivial check


def test_effective_tensors_are_symmetric_positive_definite(x64):
  rng = np.random.default_rng(4)
  for _ in range(3):
    props = physics.homogenize(jnp.asarray(rng.uniform(size=(N, N))))
    for tensor in (np.asarray(props.C), np.asarray(props.kappa)):
      np.testing.assert_allclose(tensor, tensor.T, atol=1e-14)
      assert np.linalg.eigvalsh(tensor).min() > 0


def test_gradients_match_central_differences(x64):
  """d(E1, nu12, kappa_11, alpha_1) / d theta for rho = sigmoid(theta), along random
  directions: the adjoint solves against central differences."""
  material = TWO_PHASE._replace(E_void=1e-2, kappa_void=1e-2)

  def properties(theta):
    props = physics.homogenize(jax.nn.sigmoid(theta), material, tol=1e-12)
    eng = physics.engineering_constants(props.C)
    return jnp.stack([eng.E1, eng.nu12, props.kappa[0, 0], props.alpha[0]])

  theta = jax.random.normal(jax.random.PRNGKey(0), (N, N))
  jacobian = np.asarray(jax.jacrev(properties)(theta)).reshape(4, -1)
  h = 1e-5
  for key in jax.random.split(jax.random.PRNGKey(1), 2):
    v = jax.random.normal(key, (N, N))
    fd = (np.asarray(properties(theta + h * v)) - np.asarray(properties(theta - h * v))) / (2 * h)
    np.testing.assert_allclose(jacobian @ np.asarray(v).ravel(), fd, rtol=1e-5)


def test_vmap_equals_the_loop_and_jit_traces_once(x64):
  @jax.jit
  @chex.assert_max_traces(n=1)
  def batched(rho):
    return jax.vmap(physics.homogenize)(rho)

  rng = np.random.default_rng(5)
  for _ in range(2):
    rho = jnp.asarray(rng.uniform(size=(3, N, N)))
    out = batched(rho)
    for i in range(3):
      one = physics.homogenize(rho[i])
      for a, b in zip(out[:4], one[:4]):
        np.testing.assert_allclose(a[i], b, rtol=1e-9, atol=1e-12)


def test_float32_runs_and_agrees_with_float64():
  rho = np.random.default_rng(6).uniform(size=(N, N))
  props = physics.homogenize(jnp.asarray(rho, jnp.float32))
  assert props.C.dtype == jnp.float32
  with jax.enable_x64(True):
    ref = jax.tree.map(np.asarray, physics.homogenize(jnp.asarray(rho)))
  np.testing.assert_allclose(props.C, ref.C, rtol=1e-4, atol=1e-5 * ref.C.max())
  np.testing.assert_allclose(props.alpha, ref.alpha, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(props.kappa, ref.kappa, rtol=1e-4, atol=1e-5)


def test_separate_entries_agree_with_homogenize(x64):
  rho = jnp.asarray(binary_cell(7))
  props = physics.homogenize(rho, TWO_PHASE)
  np.testing.assert_allclose(physics.elastic_tensor(rho, TWO_PHASE), props.C, rtol=1e-9)
  np.testing.assert_allclose(physics.conductivity_tensor(rho, TWO_PHASE), props.kappa,
                             rtol=1e-9)
  np.testing.assert_allclose(physics.thermal_expansion(rho, TWO_PHASE), props.alpha,
                             rtol=1e-9)
