"""Tiny-scale claim test for the interactive-proofs experiment.

Runs the registered experiment at the `tiny` preset (fixed seeds, the session's tiny LM
as the oracle of the application) and asserts the first three rows and the fourth's
oracle-call counts: honest provers always
accepted; every sum-check cheater's Clopper-Pearson upper limit below n d / |F| on
F_97; spot-check acceptance within the Bonferroni bar of (1 - f)^k; the GKR verifier's
oracle calls flat in N while recomputation's grow as N, and the spot-check verifier's
k calls at every N (GKR at N = 2^4 and 2^7: its 2 + (2 m + 2) calls give a slope of
0.19 against the bar 0.25). No wall time is asserted: at these sizes (N <= 2^7)
timings are dispatch noise, so the fourth row's wall-time slopes are measured at the
quick preset (results/interactive_proofs), not here.
"""

import json

import numpy as np

from experiments import interactive_proofs as experiment
from experiments.configs import interactive_proofs as configs


def test_the_four_claims_hold_at_tiny_scale(tmp_path, tiny_lm_dir):
  config = configs.get_config("tiny")
  with config.unlocked():
    config.lm_workdir = tiny_lm_dir
  result = experiment.run(config, str(tmp_path))
  assert [c.reproduced for c in result.claims[:3]] == [True] * 3, result.claims
  f = result.figures
  # Oracle calls, not wall times (timings belong to the quick preset and the benchmark).
  assert f["scaling/slope/verifier_queries"] < 0.25
  assert abs(f["scaling/slope/compute_queries"] - 1.0) < 1e-9
  assert all(f[f"application/N={n}/verifier_calls"] == config.application.k
             for n in config.application.num_items)
  assert f["soundness/constant/rate"] == 0.0
  exact = f["soundness/optimal_exact"]
  assert abs(f["soundness/optimal/rate"] - exact) < 0.01  # 20k runs: s.e. 0.0023
  for name in ("soundness.png", "spot_checks.png", "scaling.png", "result.json"):
    assert (tmp_path / name).exists(), name
  saved = json.loads((tmp_path / "result.json").read_text())
  assert [c["reproduced"] for c in saved["claims"]] == [c.reproduced for c in result.claims]
  assert np.isfinite(list(f.values())).all()
