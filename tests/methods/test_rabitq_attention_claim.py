"""Tiny-scale claim test (fixed seed): the paper's directions on a synthetic cache.

Runs the experiment's own pipeline on the `tiny` preset: a 2048-token synthetic cache
with a non-zero key mean and outlier channels (d = 128), RaBitQ top-p against Quest,
oracle top-k and the no-centring ablation, and the estimator study at d = 32, 64.
Asserted: at recall 0.9 RaBitQ top-p touches at least 2x fewer tokens than Quest; the
top-p budget is larger for flat than for peaked queries (>= 2x); centring lowers the
score error; the estimator is unbiased under randomised rounding and its bound covers
the stated fraction. The LM-cache and end-to-end parts need the trained LM and are
checked at the quick preset (results/rabitq_attention/result.json).
"""

import jax
import numpy as np

from experiments import rabitq_attention as experiment
from experiments.configs import rabitq_attention as configs
from methods import rabitq_attention as ra


def test_rabitq_top_p_beats_quest_adapts_and_centring_helps():
  config = configs.get_config("tiny")
  # The same key the experiment's run() uses for this stage.
  syn = experiment.synthetic_selection(
      config, jax.random.fold_in(jax.random.PRNGKey(config.seed), 2))
  (s, summ), = syn.items()
  target = config.recall_target
  t_r = experiment.tokens_at_recall(summ["rabitq"]["all"]["tokens"],
                                    summ["rabitq"]["all"]["recall"], target)
  t_q = experiment.tokens_at_recall(summ["quest"]["all"]["tokens"],
                                    summ["quest"]["all"]["recall"], target)
  assert np.isfinite(t_r) and np.isfinite(t_q)
  assert t_q / t_r >= 2.0, (t_q, t_r)
  ip = list(config.p_values).index(0.9)
  flat, peaked = summ["rabitq"]["flat"]["tokens"][ip], summ["rabitq"]["peaked"]["tokens"][ip]
  assert flat >= 2.0 * peaked, (flat, peaked)
  assert summ["rabitq_no_centering"]["logit_rmse"] > summ["rabitq"]["logit_rmse"]
  # Output error falls as p rises (more of the mass is attended exactly).
  err = summ["rabitq"]["all"]["out_err"]
  assert err[-1] < err[0]


def test_estimator_claims_at_tiny_scale():
  config = configs.get_config("tiny")
  est = experiment.estimator_study(config,
                                   jax.random.fold_in(jax.random.PRNGKey(config.seed), 1))
  for d, res in est.items():
    assert res["randomized"]["bias_t_rms"] <= 1.5, (d, res["randomized"])
    assert res["float"]["inside_bound"] >= ra.bound_rate(config.eps0) - 0.02, (d, res)
  assert est[32]["float"]["rmse"] > est[64]["float"]["rmse"]
