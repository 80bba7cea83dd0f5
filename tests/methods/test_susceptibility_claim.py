"""Tiny-scale claim test (fixed seed): susceptibility clustering recovers the mechanisms
of the synthetic stream better than the per-token baselines, and induction tokens
respond most to the induction head.

Runs the experiment's synthetic part with the `tiny` preset: the 2-layer attention-only
transformer is trained with the common loop (1000 steps), SGLD is restricted to each
head, the embedding and the unembedding, and the stratified probe tokens are clustered.

Asserted: the head whose ablation hurts induction tokens most is the head on which
induction tokens have the largest standardized susceptibility (the paper's direction),
and the susceptibility clusters recover the mechanisms far above chance (ARI > 0.1),
while the same pipeline on token-shuffled susceptibilities does not (ARI < 0.05).

NOT asserted, because it does not reproduce at this scale: that the susceptibility ARI
is above the per-token gradient and residual-stream baselines. With this seed it is
0.21 against 0.31 and 0.41; at the quick preset it is 0.37 against 0.32 and 0.33, above
both but not by the report's margin of 0.15. The report states both as "not reproduced";
see docs/susceptibility.md.
"""

import json

import numpy as np

from experiments import susceptibility as experiment
import methods.susceptibility as sus
from experiments.configs import susceptibility as configs


def test_susceptibility_clusters_recover_mechanisms(tmp_path):
  config = configs.get_config("tiny")
  syn = experiment.synthetic(config, str(tmp_path))
  claims, figures = experiment.summarize(config, None, syn, None)
  induction = next(c for c in claims if c.claim.startswith("Induction tokens"))
  assert induction.reproduced, induction.our_figure
  assert figures["synthetic/ari_susceptibility"] > 0.1, figures
  arrays = np.load(tmp_path / "cache" / "synthetic" / "chi.npz")
  truth = arrays["labels"][arrays["select"]]
  chi = arrays["chi"][:, arrays["select"]].T
  shuffled = np.random.default_rng(0).permutation(chi)
  control = sus.cluster_tokens(shuffled, k=config.cluster_k,
                               max_conductance=config.cluster_max_conductance,
                               min_size=config.cluster_min_size, max_clusters=config.cluster_max)
  assert sus.adjusted_rand_index(truth, control) < 0.05
  # The model learned the mechanisms it is probed for (nats; uniform would be ln 44).
  assert figures["synthetic/loss_ngram"] < 0.2 and figures["synthetic/loss_induction"] < 2.5
  assert np.isfinite(list(figures.values())).all()
  # Cached: a second call returns the stored result without recomputing.
  stored = json.loads((tmp_path / "cache" / "synthetic" / "synthetic.json").read_text())
  assert stored["names"] == syn["names"]
  assert experiment.synthetic(config, str(tmp_path)) == syn
