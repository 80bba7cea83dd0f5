"""Tiny-scale claim test (fixed seed): the paper's direction on split digits with
multinomial logistic regression, through the real experiment pipeline.

Checks, at the `tiny` preset (images average-pooled to 4x4, so d = 170; forget tasks
1, 4 and 5 of 5; Hessian, Hessian-CG, gradient and hybrid methods):
  * the Hessian-based method has a lower unlearning loss than the gradient-based one
    for every forgotten task before the last (the report's first claim);
  * the gradient-based method stores under 1% of the Hessian-based method's bytes;
  * every certificate's bound covers the true distance to retraining (the logistic
    model is convex, so (2) is a proof, and this checks it is computed right);
  * the hybrid is never worse than the gradient method and equals the Hessian method
    on requests inside its full-curvature window (the two most recent tasks);
  * forgetting the last task is exact for every method (its stage is skipped).

Not asserted here: "most clearly for recent tasks", the hybrid's closeness to the
Hessian on old tasks and the speed-up, which the quick preset reports (the first two
are not reproduced at our scale; see docs/unlearning.md). Timings never go into tests.
"""

import os

import jax

from experiments import unlearning as experiment
from experiments.configs import unlearning as configs


def test_hessian_beats_gradient_and_the_certificates_hold(tmp_path):
  config = configs.get_config("tiny")
  result = experiment.run(config, str(tmp_path))
  by_start = {c.claim.split(" (")[0]: c for c in result.claims}
  lower = by_start["[logistic] The Hessian-based method has lower unlearning loss"]
  storage = by_start["The gradient-based method stores almost nothing"]
  assert lower.reproduced, lower.our_figure
  assert storage.reproduced, storage.our_figure
  assert result.figures["logistic/gradient_over_hessian/loss_ratio_oldest"] > 10
  assert all(os.path.isfile(tmp_path / plot) for plot in result.plots)
  # Rows are logged one per request, so an interrupted run resumes where it stopped; a
  # rerun of the trials reads them back without recomputing.
  lines = (tmp_path / "trials.jsonl").read_text().splitlines()
  assert len(lines) == len(config.forget_tasks)
  with jax.enable_x64(True):
    per_k = experiment.run_trials(config, str(tmp_path))["logistic"]
  for k, row in per_k.items():
    for method, r in row["methods"].items():
      assert r["certified"]
      assert r["dist"] <= r["bound"] * (1 + 1e-9) + 1e-12, (k, method, r["dist"], r["bound"])
      if k == 4:
        assert r["unlearning_loss"] == 0.0 and r["bound"] == 0.0
    h, g, hy = (row["methods"][m]["unlearning_loss"] for m in ("hessian", "gradient", "hybrid"))
    assert hy <= g
    if k >= 5 - config.unlearn.hybrid_full_tasks:
      assert hy == h
    # Matrix-free CG reproduces the stored-Hessian result.
    assert abs(row["methods"]["hessian_cg"]["dist"] - row["methods"]["hessian"]["dist"]) <= (
        1e-6 * max(row["methods"]["hessian"]["dist"], 1e-12) + 1e-9)
