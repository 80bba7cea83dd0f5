"""The D2Q9 lattice-Boltzmann solver: conservation, Poiseuille, shedding, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.data import lbm


def test_mass_is_conserved_in_a_closed_periodic_box():
  # Periodic in x, bounce-back walls and an obstacle, random initial density.
  g = lbm.make_geometry(40, 20, diameter=6.0)
  solid = lbm.solid_mask(g)
  rng = np.random.default_rng(0)
  rho = 1.0 + 0.01 * rng.standard_normal(solid.shape)
  u = 0.05 * rng.standard_normal((2,) + solid.shape)
  f0 = lbm.equilibrium(jnp.asarray(rho, jnp.float32), jnp.asarray(u, jnp.float32))
  f0 = jnp.where(jnp.asarray(solid), jnp.asarray(lbm.WEIGHTS).reshape(9, 1, 1), f0)
  step = lbm.make_step(solid, regularized=True)
  wp, wm = lbm.relaxation_rates(jnp.float32(0.6), "regularized")
  f = jax.jit(lambda f: jax.lax.fori_loop(0, 400, lambda _, f: step(f, wp, wm), f))(f0)
  fluid = ~solid
  m0 = float(np.asarray(f0, np.float64).sum(0)[fluid].sum())
  m1 = float(np.asarray(f, np.float64).sum(0)[fluid].sum())
  assert abs(m1 - m0) / m0 < 1e-5


@pytest.mark.parametrize("collision", ["trt", "regularized"])
def test_poiseuille_matches_the_parabola(collision):
  r = lbm.simulate_poiseuille(22, 0.8, 1e-5, 4000, collision=collision)
  fluid = slice(1, -1)
  err = np.abs(r.u[fluid] - r.exact[fluid]).max() / r.exact.max()
  assert err < 0.02
  assert abs(r.mass[1] - r.mass[0]) / r.mass[0] < 1e-4


def test_wake_sheds_at_re_100_and_is_steady_at_re_20():
  g = lbm.make_geometry(80, 24, diameter=6.0)
  flow = lbm.simulate_channel_flow(g, jnp.array([20.0, 100.0]), spinup_steps=1500,
                                   windows=2, window_length=30, record_every=20,
                                   window_gap=40)
  fields = np.asarray(flow.fields)
  assert fields.shape == (2, 60, 80, 24, 3) and np.all(np.isfinite(fields))
  assert flow.window.tolist() == [0] * 30 + [1] * 30
  assert np.all(np.diff(flow.time) > 0)
  probe = fields[:, :, int(g.cx + 2 * g.diameter), int(round(g.cy)), 1]
  steady, shedding = probe[0], probe[1]
  assert np.ptp(steady[30:]) < 0.01                       # steady wake at Re = 20
  late = shedding[30:]
  assert late.min() < -0.2 and late.max() > 0.2           # oscillates, sign changes
  assert np.all(fields[:, :, lbm.solid_mask(g)] == 0)
  # Inflow is the parabola of mean 1 (in units of U).
  inflow = fields[1, -1, 0, 1:-1, 0]
  assert abs(inflow.mean() - 1.0) < 0.05


def test_bad_inputs_raise_before_work():
  g = lbm.make_geometry(80, 24, diameter=6.0)
  with pytest.raises(ValueError, match=r"Re=\[5000.0\] gives tau=\[0.5003"):
    lbm.simulate_channel_flow(g, [5000.0], spinup_steps=1, window_length=1,
                              record_every=1)
  with pytest.raises(ValueError, match="tau must be > 0.5, got 0.5"):
    lbm.simulate_poiseuille(10, 0.5, 1e-5, 10)
  with pytest.raises(ValueError, match="unknown obstacle kind 'square'"):
    lbm.make_geometry(80, 24, "square")
  with pytest.raises(ValueError, match="obstacle spans y"):
    lbm.make_geometry(80, 24, diameter=20.0)
  with pytest.raises(ValueError, match="obstacle spans x"):
    lbm.make_geometry(80, 24, diameter=6.0, center=(78.0, 12.0))
  with pytest.raises(ValueError, match="ellipse needs axes"):
    lbm.make_geometry(80, 24, "ellipse")
  with pytest.raises(ValueError, match="record_every must be an integer >= 1"):
    lbm.simulate_channel_flow(g, [50.0], spinup_steps=1, window_length=1,
                              record_every=0)


def test_ellipse_geometry_size_and_mask():
  g = lbm.make_geometry(100, 40, "ellipse", axes=(6.0, 2.0), angle=np.pi / 2)
  assert abs(g.diameter - 12.0) < 1e-9
  solid = lbm.solid_mask(g)
  obstacle = solid[:, 1:-1]
  ys = np.nonzero(obstacle.any(axis=0))[0]
  xs = np.nonzero(obstacle.any(axis=1))[0]
  assert np.ptp(ys) > np.ptp(xs)                              # tall, not wide


def test_nan_and_non_integer_settings_are_errors():
  """NaN passed every range check before (comparisons with NaN are False)."""
  with pytest.raises(ValueError, match="offset=nan; expected a finite number"):
    lbm.make_geometry(80, 24, diameter=6.0, offset=float("nan"))
  with pytest.raises(ValueError, match="angle=nan; expected a finite number"):
    lbm.make_geometry(80, 24, "ellipse", axes=(4.0, 2.0), angle=float("nan"))
  with pytest.raises(TypeError, match=r"nx=80.7; expected an int"):
    lbm.make_geometry(80.7, 24, diameter=6.0)       # was truncated to 80
  with pytest.raises(ValueError, match="force=nan; expected a finite number"):
    lbm.simulate_poiseuille(10, 0.8, float("nan"), 10)
  with pytest.raises(ValueError, match="magic=nan; expected a finite TRT magic"):
    lbm.simulate_poiseuille(10, 0.8, 1e-5, 10, magic=float("nan"))
  with pytest.raises(ValueError, match=r"ny=7.5; expected an int >= 5"):
    lbm.simulate_poiseuille(7.5, 0.8, 1e-5, 10)
  g = lbm.make_geometry(80, 24, diameter=6.0)
  with pytest.raises(ValueError, match="magic=nan"):
    lbm.simulate_channel_flow(g, [50.0], spinup_steps=1, window_length=1, record_every=1,
                              collision="trt", magic=float("nan"))
