"""Figures are made without pyplot and saved atomically."""

import os
import subprocess
import sys

import numpy as np

from common import plotting


def test_save_figure_writes_a_png_atomically(tmp_path):
  fig, axes = plotting.subplots(1, 2, figsize=(4, 2))
  axes[0].plot([1, 2], [3, 4])
  path = plotting.save_figure(fig, str(tmp_path / "sub" / "plot.png"))
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert os.listdir(tmp_path / "sub") == ["plot.png"]


def test_loglog_slope_recovers_a_power_law():
  n = np.array([100, 200, 400, 800])
  assert abs(plotting.loglog_slope(n, 3.0 * n ** -0.5) + 0.5) < 1e-12


def test_importing_the_experiments_does_not_touch_pyplot():
  code = ("import sys; from experiments import registry; registry.load_all(); "
          "print('matplotlib.pyplot' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                       timeout=300)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip().splitlines()[-1] == "False"
