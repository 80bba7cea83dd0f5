"""Tiny-scale claim test for Brownian diffusion flow matching (fixed seed, exact drift).

Runs the real experiment (``experiments.dfm_convergence.run``, the registered runner) at
the ``tiny`` preset:
N in {8, 32, 128}, d in {1, 4, 16}, a 2-D mixture. Asserts the paper's direction:
the Euler-Maruyama discretisation error vanishes at least linearly in h in KL and
W2 (Gaussian targets, exact laws) and the W2 coupling bound does too for the
mixture; the errors grow with d. The comparison of the d-exponents with the bound's
is checked at the quick preset over d = 1..64 (results/dfm_convergence): with only
d in {1, 4, 16} the d = 1 point (a single small eigenvalue) tilts the W2 fit.
"""

import json

import numpy as np

from experiments import dfm_convergence as experiment
from experiments.configs import dfm_convergence as configs


def test_discretisation_error_vanishes_linearly_in_h(tmp_path):
  config = configs.get_config("tiny")
  result = experiment.run(config, str(tmp_path))
  by_start = {c.claim.split(" (")[0]: c for c in result.claims}
  kl = [c for k, c in by_start.items() if k.startswith("KL(target")][0]
  w2 = [c for k, c in by_start.items() if k.startswith("W2 between")][0]
  mix = [c for k, c in by_start.items() if k.startswith("Gaussian-mixture")][0]
  assert kl.reproduced and w2.reproduced and mix.reproduced, (kl, w2, mix)
  f = result.figures
  for d in config.gaussian.dims:
    assert 1.8 < f[f"gaussian/kl/slope_in_h/d={d}"] < 2.2      # KL ~ h^2 here
    assert 0.9 < f[f"gaussian/w2/slope_in_h/d={d}"] < 1.1
  assert f["gaussian/kl/d_exponent_at_N=32"] > 0 and f["gaussian/w2/d_exponent_at_N=32"] > 0
  assert f["sampler_check/max_abs_moment_error"] < 0.15
  for name in ("error_vs_h.png", "error_vs_d.png", "result.json"):
    assert (tmp_path / name).exists(), name
  saved = json.loads((tmp_path / "result.json").read_text())
  assert [c["reproduced"] for c in saved["claims"]] == [c.reproduced for c in result.claims]
  assert np.isfinite(list(f.values())).all()


def test_claim_table_thresholds():
  """The claim table decides each row from the fitted exponents alone (no run)."""
  config = configs.get_config("tiny")
  good = {"kl": [2.0, 2.0, 2.0], "w2": [1.0, 0.95, 1.0], "d_kl": 0.7, "d_w2": 0.55,
          "mixture": {2: 1.05}}
  assert [c.reproduced for c in experiment.claims(good, config)] == [True] * 5
  bad = {"kl": [2.0, 0.85, 2.0], "w2": [1.0, float("nan"), 1.0], "d_kl": 1.2, "d_w2": 0.61,
         "mixture": {2: 0.5}}
  checks = experiment.claims(bad, config)
  assert [c.reproduced for c in checks] == [False] * 5
  assert checks[0].our_figure == "slopes d=1: 2.00, d=4: 0.85, d=16: 2.00"
