"""Two-stage kernel ridge dose-response: the error-vs-n study on confounded designs.

Launch:
  python -m experiments.main --config=experiments/configs/kernel_ridge.py:quick \
      --workdir=/tmp/kernel_ridge
  python -m experiments.main --config=experiments/configs/kernel_ridge.py:paper \
      --workdir=/tmp/kernel_ridge_paper --config.solver=nystrom

Scenarios: "overlap_strong" and "overlap_weak" are the single-confounder design
with E ~ U[-a, a] at a = strong_overlap / weak_overlap; "colangelo_lee" has p
correlated covariates. Selection lengthscales are multiples of the median heuristic.
"""

from common import config as config_lib
from common import kernels
from methods.kernel_ridge import krr
from methods.kernel_ridge import two_stage

SCENARIOS = ("overlap_strong", "overlap_weak", "colangelo_lee")

BASE = dict(
    method="kernel_ridge",
    seed=0,
    x64=True,
    scenarios=SCENARIOS,
    ns=(250, 500, 1000, 2000, 4000),
    num_seeds=3,
    strong_overlap=1.0,
    weak_overlap=0.2,
    p=100,
    kernel_t="rbf",
    kernel_x="rbf",
    pseudo="average",
    num_permutations=8,
    solver="cholesky",
    num_landmarks=1000,
    chunk_size=2048,
    scales_t=(0.5, 1.0, 2.0),
    scales_x=(0.5, 1.0, 2.0),
    lams1=(1e-5, 1e-4, 1e-3, 1e-2),
    scales_t2=(0.25, 0.5, 1.0, 2.0),
    lams2=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2),
    baseline_lams=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1),
    val_fraction=0.5,
    selection_max_n=1000,
    baseline_max_n=8000,
    eval_points=100,
    eval_quantile=0.05,
)

PRESETS = {
    # CPU, a few minutes: what `make reproduce` runs.
    "quick": {},
    # Paper scale, for accelerators: more seeds, larger n, larger selection samples.
    # With --config.solver=nystrom (and e.g. --config.ns="(4000,16000,100000)") the
    # two-stage fit scales to 10^5 points; baselines stop at baseline_max_n.
    "paper": dict(ns=(250, 500, 1000, 2000, 4000, 8000, 16000), num_seeds=20,
                  selection_max_n=4000, baseline_max_n=16000, num_landmarks=2000),
    # Seconds: what the claim test runs.
    "tiny": dict(scenarios=("overlap_weak",), ns=(150, 1200), num_seeds=2,
                 scales_t=(1.0,), scales_x=(0.5, 1.0), selection_max_n=400),
}


def get_config(preset: str | None = None):
  return config_lib.build("kernel_ridge", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.subset_of(config, "scenarios", SCENARIOS)
  c.sequence_of(config, "ns", lambda v: isinstance(v, int) and v >= 16, "integers >= 16")
  c.positive_int(config, "num_seeds")
  c.positive(config, "strong_overlap")
  c.positive(config, "weak_overlap")
  c.positive_int(config, "p")
  c.one_of(config, "kernel_t", kernels.KERNELS)
  c.one_of(config, "kernel_x", kernels.KERNELS)
  c.one_of(config, "pseudo", two_stage.PSEUDO_OUTCOMES)
  c.positive_int(config, "num_permutations")
  c.one_of(config, "solver", krr.SOLVERS)
  c.positive_int(config, "num_landmarks")
  c.positive_int(config, "chunk_size")
  for key in ("scales_t", "scales_x", "lams1", "scales_t2", "lams2", "baseline_lams"):
    c.sequence_of(config, key, lambda v: isinstance(v, (int, float)) and v > 0,
                  "numbers > 0")
  c.in_range(config, "val_fraction", 0.0, 1.0)
  c.positive_int(config, "selection_max_n", minimum=16)
  c.positive_int(config, "baseline_max_n", minimum=16)
  c.positive_int(config, "eval_points", minimum=2)
  c.in_range(config, "eval_quantile", 0.0, 0.5)
