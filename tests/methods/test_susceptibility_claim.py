"""Tiny-scale claim test (fixed seed): susceptibility clustering recovers the mechanisms
of the synthetic stream better than chance, and induction tokens respond most to the
induction head.

Runs the experiment (its runner) with the `tiny` preset, which runs the synthetic part
only: the 2-layer attention-only transformer is trained with the common loop (1000
steps), SGLD is restricted to each head, the embedding and the unembedding, and the
stratified probe tokens are clustered. The run is shared by the tests of this module.
It is bound by running compiled code, not compiling it, so it runs in a subprocess at
XLA's optimisation level 1 (`optimized_run`: half the CPU time of the suite's level 0).

Asserted: the head whose ablation hurts induction tokens most is the head on which
induction tokens have the largest standardized susceptibility (the paper's direction),
and the susceptibility clusters recover the mechanisms far above chance (ARI > 0.1),
while the same pipeline on token-shuffled susceptibilities does not (ARI < 0.05). A
rerun in the same workdir reuses the cached stage and reports the same figures.

NOT asserted, because it does not reproduce at this scale: that the susceptibility ARI
is above the per-token gradient and residual-stream baselines. With this seed it is
0.20 against 0.31 and 0.41; at the quick preset it is 0.37 against 0.32 and 0.33, above
both but not by the report's margin of 0.15. The report states both as "not reproduced";
see docs/susceptibility.md.
"""

import numpy as np
import pytest

from common import trials
from experiments import susceptibility as experiment
from experiments.configs import susceptibility as configs
import methods.susceptibility as sus
import optimized_run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  config = configs.get_config("tiny")
  workdir = str(tmp_path_factory.mktemp("susceptibility"))
  return config, workdir, optimized_run.run("susceptibility", config, workdir)


def test_susceptibility_clusters_recover_mechanisms(tiny_run):
  config, workdir, result = tiny_run
  figures = result.figures
  induction = next(c for c in result.claims if c.claim.startswith("Induction tokens"))
  assert induction.reproduced, induction.our_figure
  assert figures["synthetic/ari_susceptibility"] > 0.1, figures
  arrays = np.load(trials.stage_path(workdir, "synthetic", "npz"))
  truth = arrays["labels"][arrays["select"]]
  chi = arrays["chi"][:, arrays["select"]].T
  shuffled = np.random.default_rng(0).permutation(chi)
  c = config.cluster
  control = sus.cluster_tokens(shuffled, k=c.k, max_conductance=c.max_conductance,
                               min_size=c.min_size, max_clusters=c.max_clusters)
  assert sus.adjusted_rand_index(truth, control) < 0.05
  # The model learned the mechanisms it is probed for (nats; uniform would be ln 44).
  assert figures["synthetic/loss_ngram"] < 0.2 and figures["synthetic/loss_induction"] < 2.5
  assert np.isfinite(list(figures.values())).all()
  assert list(result.plots) == ["synthetic_heatmap.png", "synthetic_traces.png"]


def test_rerun_reuses_the_cached_stage(tiny_run):
  config, workdir, result = tiny_run
  again = experiment.run(config, workdir)
  # Timings are stored in the stage, so a reused stage reports the very same figures.
  assert again.figures == result.figures
  assert again.claims == result.claims
