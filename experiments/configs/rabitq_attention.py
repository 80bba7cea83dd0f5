"""RaBitQ KV-cache attention: estimator, selection on real/synthetic caches, end to end.

Launch:
  python -m experiments.main --config=experiments/configs/rabitq_attention.py:quick \
      --workdir=results/rabitq_attention
  python -m experiments.main --config=experiments/configs/rabitq_attention.py:paper \
      --workdir=/tmp/rabitq_attention_paper
  python -m experiments.main --config=experiments/configs/rabitq_attention.py:tiny \
      --workdir=/tmp/rabitq_attention_tiny --config.synthetic.contexts="(4096,)" \
      --config.lm_workdir=/tmp/lm

Sub-configs: `estimator` (the estimator study), `selection` (what every selection
study on a cache shares), `synthetic` and `real` (the synthetic and the LM caches),
`e2e` (sparse decoding inside the LM), `memory`, and `claims` (thresholds fixed
before running). The trained LM is `common.lm.trained_lm(config.lm, workdir,
lm_workdir=config.lm_workdir)`: with `lm_workdir` empty, `<parent of workdir>/lm` if
it holds this LM, else `workdir/lm` (restored, or trained there first).
"""

from common import config as config_lib
from common import lm as lm_lib

BASE = dict(
    method="rabitq_attention",
    seed=0,
    lm=lm_lib.get_config("quick"),
    lm_workdir="",
    # 1. Estimator study: unit keys/queries, many rotations and roundings per pair.
    estimator=dict(dims=(32, 64, 128), pairs=48, rotations=300, eps0=1.9),
    # 2. Selection on caches. Forced (always attended) tokens: sinks + recent window.
    selection=dict(
        num_sink=4,
        recent_window=32,
        p_values=(0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999),
        topk_budgets=(16, 32, 64, 128, 256, 512, 1024, 2048),
        quest_chunk=16,
        quest_chunks=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
    ),
    # Synthetic caches (non-zero key mean, outlier channels), half peaked / half flat.
    synthetic=dict(contexts=(4096, 16384, 32768), dim=128, queries=16, outlier_channels=4),
    # Real caches from the trained LM (the last `queries` positions of each head).
    real=dict(context=4096, queries=16, prefill_chunk=512),
    # 3. End to end: teacher-forced sparse decoding of validation windows. Windows stay
    # within the LM's training length (128 bytes), so full attention is the model's
    # own regime.
    e2e=dict(windows=16, length=129, prefill=32, p_values=(0.5, 0.8, 0.9, 0.95, 0.99),
             num_sink=4, recent_window=8, interval=8, max_budget=40),
    # 4. Memory: bytes per token of the key cache at this head width (and at 32).
    memory=dict(dim=128),
    # Claim thresholds (fixed before running).
    claims=dict(recall_target=0.9, quest_ratio_min=2.0, adapt_ratio_min=2.0, e2e_p=0.95,
                e2e_agreement_min=0.95, e2e_loss_rel_max=0.02, memory_ratio_min=8.0),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]), after
    # the LM exists (the quick LM, reused from <parent of workdir>/lm).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. The full LM; twice the estimator pairs and cache
    # queries, 4x the end-to-end windows.
    "full": {"lm": lm_lib.PRESETS["full"], "estimator.pairs": 96, "synthetic.queries": 32,
             "real.queries": 32, "e2e.windows": 64},
    # Accelerators: the paper's context lengths and the larger LM.
    "paper": {
        "lm": lm_lib.PRESETS["paper"],
        "estimator": dict(dims=(32, 64, 128, 256, 512), rotations=4000, pairs=256),
        "selection": dict(
            topk_budgets=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
            quest_chunks=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)),
        "synthetic": dict(contexts=(4096, 32768, 131072), queries=64),
        "real": dict(context=32768, queries=64),
        "e2e": dict(windows=64, length=2048, prefill=512, recent_window=64, interval=32,
                    max_budget=512),
    },
    # Seconds: what the claim test runs (tiny LM, short contexts).
    "tiny": {
        "lm": lm_lib.PRESETS["tiny"],
        "estimator": dict(dims=(32, 64), pairs=16, rotations=200),
        "selection": dict(topk_budgets=(16, 64, 256, 1024), quest_chunks=(2, 8, 32, 128),
                          p_values=(0.5, 0.8, 0.9, 0.95, 0.99)),
        "synthetic": dict(contexts=(2048,), queries=8),
        "real": dict(context=512, queries=4, prefill_chunk=256),
        "e2e": dict(windows=2, length=33, prefill=8, p_values=(0.9, 0.95), num_sink=2,
                    recent_window=4, interval=4, max_budget=16),
    },
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 1.3, "full": 1.9}


def get_config(preset: str | None = None):
  return config_lib.build("rabitq_attention", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  lm_lib.validate(config, "lm.")
  is_p = lambda v: isinstance(v, (int, float)) and 0.0 < v < 1.0
  is_count = lambda v: isinstance(v, int) and v >= 1
  c.sequence_of(config, "estimator.dims",
                lambda v: isinstance(v, int) and v >= 32 and v % 32 == 0, "multiples of 32")
  for key in ("estimator.pairs", "estimator.rotations", "selection.recent_window",
              "selection.quest_chunk", "synthetic.queries", "synthetic.outlier_channels",
              "real.queries", "real.prefill_chunk", "e2e.windows", "e2e.recent_window",
              "e2e.interval", "e2e.max_budget"):
    c.positive_int(config, key)
  for key in ("selection.num_sink", "e2e.num_sink"):
    c.positive_int(config, key, minimum=0)
  c.positive(config, "estimator.eps0")
  c.sequence_of(config, "selection.p_values", is_p, "numbers in (0, 1)")
  c.sequence_of(config, "selection.topk_budgets", is_count, "integers >= 1")
  c.sequence_of(config, "selection.quest_chunks", is_count, "integers >= 1")
  c.sequence_of(config, "synthetic.contexts",
                lambda v: isinstance(v, int) and v >= 256 and v % 256 == 0, "multiples of 256")
  c.positive_int(config, "synthetic.dim", minimum=32)
  c.require(config, "synthetic.dim", config.synthetic.dim % 32 == 0, "a multiple of 32")
  c.positive_int(config, "real.context", minimum=64)
  c.require(config, "real.context",
            config.real.context % min(config.real.prefill_chunk, config.real.context) == 0,
            f"a multiple of real.prefill_chunk={config.real.prefill_chunk}")
  _validate_e2e(config)
  c.in_range(config, "claims.recall_target", 0.0, 1.0)
  c.in_range(config, "claims.e2e_p", 0.0, 1.0)
  for key in ("quest_ratio_min", "adapt_ratio_min", "memory_ratio_min", "e2e_loss_rel_max"):
    c.positive(config, f"claims.{key}")
  c.in_range(config, "claims.e2e_agreement_min", 0.0, 1.0)
  c.positive_int(config, "memory.dim", minimum=32)


def _validate_e2e(config) -> None:
  c, e2e = config_lib, config.e2e
  c.sequence_of(config, "e2e.p_values",
                lambda v: isinstance(v, (int, float)) and 0.0 < v < 1.0, "numbers in (0, 1)")
  forced = e2e.num_sink + e2e.recent_window + e2e.interval + 1
  c.require(config, "e2e.max_budget", e2e.max_budget > forced,
            f"more than the always-attended tokens ({forced})")
  c.positive_int(config, "e2e.prefill", minimum=2)
  c.require(config, "e2e.prefill", e2e.prefill + 1 < e2e.length,
            f"less than e2e.length - 1 = {e2e.length - 1}")
