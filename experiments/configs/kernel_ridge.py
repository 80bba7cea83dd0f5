"""Two-stage kernel ridge dose-response: the error-vs-n study on confounded designs.

Launch:
  python -m experiments.main --config=experiments/configs/kernel_ridge.py:quick \
      --workdir=/tmp/kernel_ridge
  python -m experiments.main --config=experiments/configs/kernel_ridge.py:full \
      --workdir=/tmp/kernel_ridge_full
  python -m experiments.main --config=experiments/configs/kernel_ridge.py:quick \
      --workdir=/tmp/kernel_ridge_small --config.ns="(500,1000)"
  python -m experiments.main --config=experiments/configs/kernel_ridge.py:paper \
      --workdir=/tmp/kernel_ridge_paper

Scenarios: "overlap_strong" and "overlap_weak" are the single-confounder design
with E ~ U[-a, a] at a = data.strong_overlap / data.weak_overlap; "colangelo_lee"
has data.p correlated covariates. Sub-configs:
  data        the designs' parameters;
  evaluation  the grid the ISE is measured on (quantiles of T, number of points);
  estimator   ``fit_two_stage``'s keyword arguments (kernels, pseudo-outcomes, solver);
  selection   ``SelectionGrid`` (lengthscales are multiples of the median heuristic);
  baselines   the baselines' ridges; they are skipped above ``baselines.max_n``.
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
    data=dict(strong_overlap=1.0, weak_overlap=0.2, p=100),
    evaluation=dict(points=100, quantile=0.05),
    estimator=dict(kernel_t="rbf", kernel_x="rbf", pseudo="average", num_permutations=8,
                   solver="cholesky", num_landmarks=1000, chunk_size=2048),
    selection=dict(scales_t=(0.5, 1.0, 2.0), scales_x=(0.5, 1.0, 2.0),
                   lams1=(1e-5, 1e-4, 1e-3, 1e-2), scales_t2=(0.25, 0.5, 1.0, 2.0),
                   lams2=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2), val_fraction=0.5, max_n=1000),
    baselines=dict(lams=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1), max_n=8000),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    # n up to 2000 (4 sizes of 5), selection and baseline LOO on 500 points of 1000.
    "quick": {"ns": (250, 500, 1000, 2000), "selection.max_n": 500},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts.
    "full": {},
    # Paper scale, for accelerators: more seeds, larger n, larger selection samples.
    # solver "auto": exact below krr.NYSTROM_MIN_N points, Nystrom (num_landmarks) from
    # there on, which scales the two-stage fit to 10^5-10^6 points (e.g.
    # --config.ns="(4000,16000,100000)"); baselines stop at baselines.max_n. The quick
    # and full presets keep exact solves (n <= 4000) for their comparison with the baselines.
    "paper": {"ns": (250, 500, 1000, 2000, 4000, 8000, 16000), "num_seeds": 20,
              "selection.max_n": 4000, "baselines.max_n": 16000,
              "estimator.solver": "auto", "estimator.num_landmarks": 2000},
    # Seconds: what the claim test runs. Selection runs on min(ns) = 150 points at every
    # n, so both sizes share its compiled shapes.
    "tiny": {"scenarios": ("overlap_weak",), "ns": (150, 1200), "num_seeds": 2,
             "selection": dict(scales_t=(1.0,), scales_x=(0.5, 1.0), max_n=150)},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 1.5, "full": 4.6}


def get_config(preset: str | None = None):
  return config_lib.build("kernel_ridge", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.subset_of(config, "scenarios", SCENARIOS)
  c.sequence_of(config, "ns", lambda v: isinstance(v, int) and v >= 16, "integers >= 16")
  c.positive_int(config, "num_seeds")
  c.positive(config, "data.strong_overlap")
  c.positive(config, "data.weak_overlap")
  c.positive_int(config, "data.p")
  c.positive_int(config, "evaluation.points", minimum=2)
  c.in_range(config, "evaluation.quantile", 0.0, 0.5)
  c.one_of(config, "estimator.kernel_t", kernels.KERNELS)
  c.one_of(config, "estimator.kernel_x", kernels.KERNELS)
  c.one_of(config, "estimator.pseudo", two_stage.PSEUDO_OUTCOMES)
  c.positive_int(config, "estimator.num_permutations")
  c.one_of(config, "estimator.solver", krr.SOLVERS)
  c.positive_int(config, "estimator.num_landmarks")
  c.positive_int(config, "estimator.chunk_size")
  for key in ("selection.scales_t", "selection.scales_x", "selection.lams1",
              "selection.scales_t2", "selection.lams2", "baselines.lams"):
    c.sequence_of(config, key, lambda v: isinstance(v, (int, float)) and v > 0,
                  "numbers > 0")
  c.in_range(config, "selection.val_fraction", 0.0, 1.0)
  c.positive_int(config, "selection.max_n", minimum=16)
  c.positive_int(config, "baselines.max_n", minimum=16)
