"""Plots of the kernel-ridge dose-response study."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from common import plotting

LABELS = {"two_stage": "two-stage KRR", "plug_in": "plug-in (Singh et al.)",
          "naive": "naive KRR on T", "doubly_robust": "DR (Kennedy et al.)"}


def error_vs_n(errors: Mapping[str, Mapping[str, np.ndarray]], ns: Sequence[int],
               path: str) -> str:
  """One log-log panel per scenario: the median ISE of each estimator against n, with
  its min-max band over seeds and its fitted slope.

  Args:
    errors: {scenario: {estimator: (len(ns), num_seeds) ISE}}, NaN where not run.
    ns: the sample sizes (rows of each array).
    path: the PNG to write.

  Returns:
    ``path``.
  """
  ns = np.asarray(ns)
  panels = {}
  for scenario, per in errors.items():
    panels[scenario] = {
        LABELS[e]: (ns, np.nanmedian(err, axis=1), np.nanmin(err, axis=1),
                    np.nanmax(err, axis=1))
        for e, err in per.items() if np.isfinite(err).any()}
  return plotting.error_vs_n_panels(panels, path)
