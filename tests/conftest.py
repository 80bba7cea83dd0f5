"""Shared pytest fixtures."""

import jax
import pytest


@pytest.fixture
def rng():
  return jax.random.PRNGKey(0)


@pytest.fixture
def x64():
  """Runs the test with 64-bit floats (kernel solves are checked at tight tolerances)."""
  with jax.enable_x64(True):
    yield
