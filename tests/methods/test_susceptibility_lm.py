"""The calibration and LM parts of the susceptibility experiment, end to end at toy size.

The LM part runs on the shared tiny LM (the session fixture `tiny_lm_dir`, passed as
`lm_workdir`), with a few SGLD draws per component (no burn-in); calibration with short
chains. Checked: the report rows and figures of both parts, the plots, the LM's cluster table
and the cached stages. The calibration claim itself is asserted at full length in
test_susceptibility.py (the LLC of linear regression is d / 2).
"""

import os

import numpy as np

from common import trials
from experiments import susceptibility as experiment
from experiments.configs import susceptibility as configs


def test_calibration_and_lm_parts_run_on_the_tiny_lm(tiny_lm_dir, tmp_path):
  config = configs.get_config("tiny")
  config.parts = ("calibration", "lm")
  config.lm_workdir = tiny_lm_dir
  # The regression has the shapes of the LLC test's (test_susceptibility.py), whose
  # compiled eager ops it reuses in a full run. Compiling the LM's SGLD scan is most
  # of this test's time: no burn-in leaves one copy of the step in the program.
  config.calibration.update(dict(dim=4, n=2048, batch_size=128, step_sizes=(3e-2,),
                                 chains=2, burnin=20, draws=200))
  config.real_lm.update(dict(seq_len=16, pool_size=32, probe_windows=4, examples=2))
  config.real_lm.sgld.update(dict(chains=2, burnin=0, draws=4, thin=1))
  result = experiment.run(config, str(tmp_path))
  starts = ("On linear regression (regular, d=4) the SGLD LLC estimate recovers d/2",
            "The estimate degrades when eps is too large",
            "On the byte-level LM, susceptibility clustering splits validation tokens")
  assert len(result.claims) == 3
  assert all(c.claim.startswith(s) for c, s in zip(result.claims, starts)), result.claims
  figures = result.figures
  assert figures["calibration/true_llc"] == 2.0
  assert set(k for k in figures if k.startswith("calibration/llc_at")) == {
      "calibration/llc_at_eps=0.001", "calibration/llc_at_eps=0.03"}
  assert figures["lm/tokens"] == 64 and figures["lm/clusters"] >= 1
  phis = [k for k in figures if k.startswith("lm/phi_")]
  assert phis == ["lm/phi_L0.attn", "lm/phi_L0.mlp", "lm/phi_embed", "lm/phi_lm_head"]
  assert np.isfinite([figures[k] for k in phis]).all()
  assert list(result.plots) == ["calibration.png", "lm_traces.png"]
  table = open(tmp_path / "lm_clusters.md").read()
  assert table.startswith("# Susceptibility clusters of the tiny byte-level LM (64 validation")
  assert table.count("\n| ") == figures["lm/clusters"] + 1   # header + one row a cluster
  for name, kind in (("calibration", "json"), ("lm", "json")):
    assert os.path.exists(trials.stage_path(str(tmp_path), name, kind))
  assert not os.path.exists(tmp_path / "lm")   # the shared LM was reused, not retrained
