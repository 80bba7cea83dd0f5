"""Single-prover interactive proofs for oracle-aided computations: completeness, measured
soundness, and verifier / prover cost against recomputation.

Launch:
  python -m experiments.main --config=experiments/configs/interactive_proofs.py:quick \
      --workdir=results/interactive_proofs
  python -m experiments.main --config=experiments/configs/interactive_proofs.py:tiny \
      --workdir=/tmp/ip_tiny

Sub-configs:
  completeness  honest provers on the large field `prime`: `runs` sum-checks of a random
                sum of `terms` products of `degree` multilinear tables in `num_vars`
                variables; `gkr_runs` GKR runs on 2^`gkr_log2` inputs, from a table and
                from a low-degree oracle (degree `oracle_degree` per variable, CP rank
                `oracle_rank`); `spot_runs` spot checks of `spot_k` items out of
                `spot_items`.
  soundness     every cheating strategy of methods/interactive_proofs/provers.py on the
                small field `prime` (so the acceptance rate is measurable), `num_vars`
                variables, degree `degree`, `runs` batched runs each; the bound n d / |F|
                is compared with the Clopper-Pearson upper limit at `confidence`.
  robust        majority of `num_items` 0/1 judgments, robustness `delta`; provers lying on
                a fraction f in `lie_fractions` of the items, k spot checks for k in
                `ks`, `runs` runs each; measured against (1 - f)^k: every cell within
                z standard errors, z the two-sided Bonferroni bar of family-wise level
                `alpha` over the cells.
  scaling       GKR (a tree of `ops` over a low-degree oracle) at N = 2^m for m in
                `log2_sizes`: median wall time of the verifier (of
                `verifier_repeats`: it runs in ~0.2 ms, where single calls are noisy),
                the prover and recomputation (of `repeats`) (querying the oracle on all N points and
                evaluating the circuit), and oracle calls; slopes are fitted on the
                sizes >= 2^`fit_from_log2`.
  application   the library's LM (`lm`, reused from `lm_workdir` or the `lm`
                experiment beside the workdir) judges N windows of held-out text
                (`window` bytes) for N in `num_items`: 1 when the mean log-likelihood per
                byte exceeds the `quantile` of the scores; the majority and the
                fraction are verified with `k` spot checks against recomputing all N.
  claims        the slope bars of claim 4, fixed before running.
"""

from common import config as config_lib
from common import lm as lm_lib
from methods.interactive_proofs import field, gkr, provers

BASE = dict(
    method="interactive_proofs",
    seed=0,
    x64=True,
    prime=2**31 - 1,
    completeness=dict(runs=2000, num_vars=10, degree=3, terms=2, gkr_runs=100, gkr_log2=8,
                      oracle_degree=2, oracle_rank=4, spot_runs=2000, spot_items=1024,
                      spot_k=16),
    soundness=dict(prime=97, num_vars=4, degree=3, runs=100_000,
                   strategies=provers.STRATEGIES, confidence=0.95),
    robust=dict(num_items=1000, delta=0.1, lie_fractions=(0.1, 0.2), ks=(1, 2, 4, 8, 16, 32),
                runs=20_000, alpha=0.01),
    scaling=dict(log2_sizes=(8, 10, 12, 14, 16, 18), fit_from_log2=12, ops="add",
                 oracle_degree=2, oracle_rank=4, test_lines=1, repeats=5,
                 verifier_repeats=50),
    application=dict(num_items=(256, 1024, 4096), window=64, quantile=0.3, k=32, delta=0.1,
                     repeats=3),
    lm=lm_lib.get_config("quick"),
    lm_workdir="",
    # Claim 4's bars on log-log slopes against N.
    claims=dict(verifier_slope_max=0.25, recompute_slope_min=0.75, prover_ratio_slope_max=0.2),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]), after
    # the LM exists (the quick LM).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. The full LM; 2.5-4x the completeness, soundness and
    # robust runs (tighter Clopper-Pearson and Bonferroni bars).
    "full": {"lm": lm_lib.PRESETS["full"],
             "completeness": dict(runs=5000, gkr_runs=250, spot_runs=5000),
             "soundness.runs": 400_000, "robust.runs": 50_000},
    # Accelerators: bigger circuits and more runs.
    "paper": {"lm": lm_lib.PRESETS["full"], "completeness.runs": 100_000,
              "soundness.runs": 10_000_000,
              "robust.runs": 1_000_000,
              "scaling": dict(log2_sizes=(10, 12, 14, 16, 18, 20, 22), fit_from_log2=14),
              "application": dict(num_items=(1024, 4096, 16384, 65536))},
    # Seconds: what the claim test runs.
    "tiny": {"lm": lm_lib.PRESETS["tiny"],
             "completeness": dict(runs=200, num_vars=6, gkr_runs=10, gkr_log2=4, spot_runs=200,
                                  spot_items=128),
             "soundness": dict(runs=20_000),
             "robust": dict(num_items=200, ks=(1, 4, 16), runs=4000),
             # Oracle-call slope (4 + 2 m calls) over 2^4..2^7: log(18 / 12) / log(8) = 0.19.
             "scaling": dict(log2_sizes=(4, 7), fit_from_log2=4, repeats=3),
             "application": dict(num_items=(64, 256), window=32, k=8, repeats=2)},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 4.9, "full": 8.8}


def get_config(preset: str | None = None):
  return config_lib.build("interactive_proofs", BASE, PRESETS, preset)


def _posint(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  lm_lib.validate(config, "lm.")
  c.require(config, "lm_workdir", isinstance(config.lm_workdir, str),
            "a directory, or '' for the default")
  for key in ("prime", "soundness.prime"):
    c.positive_int(config, key, minimum=3)
    value = c.get(config, key)
    c.require(config, key, value < 2**field.MAX_BITS and field.is_prime(value),
              f"a prime below 2^{field.MAX_BITS} (the field's word size)")
  for key in ("completeness.runs", "completeness.num_vars", "completeness.degree",
              "completeness.terms", "completeness.gkr_runs", "completeness.gkr_log2",
              "completeness.oracle_degree", "completeness.oracle_rank",
              "completeness.spot_runs", "completeness.spot_items", "completeness.spot_k",
              "soundness.num_vars", "soundness.degree", "soundness.runs", "robust.num_items",
              "robust.runs", "scaling.oracle_degree", "scaling.oracle_rank",
              "scaling.test_lines", "scaling.repeats", "scaling.verifier_repeats",
              "application.window",
              "application.k", "application.repeats"):
    c.positive_int(config, key)
  c.require(config, "soundness.prime", config.soundness.prime > config.soundness.degree + 2,
            f"a prime > soundness.degree + 2 = {config.soundness.degree + 2} (an optimal "
            "lie needs that many distinct points)")
  c.subset_of(config, "soundness.strategies", provers.STRATEGIES)
  c.in_range(config, "soundness.confidence", 0.0, 1.0)
  c.in_range(config, "robust.delta", 0.0, 0.5)
  c.in_range(config, "application.delta", 0.0, 0.5)
  c.in_range(config, "application.quantile", 0.0, 1.0)
  c.sequence_of(config, "robust.lie_fractions", lambda f: isinstance(f, float) and 0 < f < 1,
                "fractions in (0, 1)")
  c.in_range(config, "robust.alpha", 0.0, 1.0)
  for key in ("robust.ks", "application.num_items"):
    c.sequence_of(config, key, _posint, "integers >= 1")
  c.sequence_of(config, "scaling.log2_sizes", lambda m: _posint(m) and m >= 2, "integers >= 2")
  sizes = config.scaling.log2_sizes
  c.require(config, "scaling.fit_from_log2",
            sum(m >= config.scaling.fit_from_log2 for m in sizes) >= 2,
            "a size with at least two of scaling.log2_sizes at or above it (a slope is fitted)")
  c.require(config, "application.num_items", len(config.application.num_items) >= 2,
            "at least two sizes (a slope is fitted)")
  c.one_of(config, "scaling.ops", gkr.OPS)
  c.positive(config, "claims.verifier_slope_max")
  c.positive(config, "claims.recompute_slope_min")
  c.positive(config, "claims.prover_ratio_slope_max")
