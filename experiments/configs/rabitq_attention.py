"""RaBitQ KV-cache attention: estimator, selection on real/synthetic caches, end to end.

Launch:
  python -m experiments.main --config=experiments/configs/rabitq_attention.py:quick \
      --workdir=results/rabitq_attention
  python -m experiments.main --config=experiments/configs/rabitq_attention.py:paper \
      --workdir=/tmp/rabitq_attention_paper

The trained LM comes from `experiments.lm.load_or_train(lm config <lm_preset>,
workdir/lm)`: it is restored if workdir/lm holds its checkpoint, trained otherwise.
"""

from common import config as config_lib

BASE = dict(
    method="rabitq_attention",
    seed=0,
    lm_preset="quick",
    # 1. Estimator study: unit keys/queries, many rotations and roundings per pair.
    est_dims=(32, 64, 128),
    est_pairs=48,
    est_rotations=300,
    eps0=1.9,
    # 2. Selection on caches. Forced (always attended) tokens: sinks + recent window.
    num_sink=4,
    recent_window=32,
    p_values=(0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999),
    topk_budgets=(16, 32, 64, 128, 256, 512, 1024, 2048),
    quest_chunk=16,
    quest_chunks=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
    recall_target=0.9,
    # Synthetic caches (non-zero key mean, outlier channels), half peaked / half flat.
    syn_contexts=(4096, 16384, 32768),
    syn_dim=128,
    syn_queries=16,
    syn_outlier_channels=4,
    # Real caches from the trained LM (the last real_queries positions of each head).
    real_context=4096,
    real_queries=16,
    real_prefill_chunk=512,
    # 3. End to end: teacher-forced sparse decoding of validation windows.
    # Windows stay within the LM's training length (128 bytes) so that full attention
    # is the model's own regime.
    e2e_windows=16,
    e2e_len=129,
    e2e_prefill=32,
    e2e_p_values=(0.5, 0.8, 0.9, 0.95, 0.99),
    e2e_num_sink=4,
    e2e_recent_window=8,
    e2e_interval=8,
    e2e_max_budget=40,
    # Claim thresholds (fixed before running).
    quest_ratio_min=2.0,
    adapt_ratio_min=2.0,
    e2e_p=0.95,
    e2e_agreement_min=0.95,
    e2e_loss_rel_max=0.02,
    memory_dim=128,
    memory_ratio_min=8.0,
)

PRESETS = {
    # CPU, a few minutes (the trained LM is reused from workdir/lm).
    "quick": {},
    # Accelerators: the paper's context lengths and the larger LM.
    "paper": dict(lm_preset="paper", est_dims=(32, 64, 128, 256, 512), est_rotations=4000, est_pairs=256,
                  syn_contexts=(4096, 32768, 131072), syn_queries=64, real_context=32768,
                  real_queries=64, topk_budgets=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
                  quest_chunks=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
                  e2e_windows=64,
                  e2e_len=2048, e2e_prefill=512, e2e_recent_window=64, e2e_interval=32,
                  e2e_max_budget=512),
    # Seconds: what the claim test runs (tiny LM, short contexts).
    "tiny": dict(lm_preset="tiny", est_dims=(32, 64), est_pairs=16, est_rotations=200,
                 syn_contexts=(2048,), syn_queries=8, real_context=512, real_queries=4,
                 real_prefill_chunk=256, topk_budgets=(16, 64, 256, 1024),
                 quest_chunks=(2, 8, 32, 128), p_values=(0.5, 0.8, 0.9, 0.95, 0.99),
                 e2e_windows=2, e2e_len=33, e2e_prefill=8, e2e_p_values=(0.9, 0.95),
                 e2e_num_sink=2, e2e_recent_window=4, e2e_interval=4, e2e_max_budget=16),
}


def get_config(preset: str | None = None):
  return config_lib.build("rabitq_attention", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.one_of(config, "lm_preset", ("quick", "paper", "tiny"))
  c.sequence_of(config, "est_dims", lambda v: isinstance(v, int) and v >= 32 and v % 32 == 0,
                "multiples of 32")
  for key in ("est_pairs", "est_rotations", "syn_queries", "real_queries", "e2e_windows",
              "recent_window", "e2e_recent_window", "e2e_interval", "e2e_max_budget",
              "quest_chunk", "real_prefill_chunk", "syn_outlier_channels"):
    c.positive_int(config, key)
  c.positive_int(config, "num_sink", minimum=0)
  c.positive_int(config, "e2e_num_sink", minimum=0)
  c.positive_int(config, "syn_dim", minimum=32)
  if config.syn_dim % 32:
    raise config_lib.ConfigError(f"config.syn_dim={config.syn_dim!r} is invalid: expected a "
                                 "multiple of 32")
  c.positive(config, "eps0")
  is_p = lambda v: isinstance(v, (int, float)) and 0.0 < v < 1.0
  c.sequence_of(config, "p_values", is_p, "numbers in (0, 1)")
  c.sequence_of(config, "e2e_p_values", is_p, "numbers in (0, 1)")
  c.in_range(config, "recall_target", 0.0, 1.0)
  c.in_range(config, "e2e_p", 0.0, 1.0)
  c.sequence_of(config, "topk_budgets", lambda v: isinstance(v, int) and v >= 1,
                "integers >= 1")
  c.sequence_of(config, "quest_chunks", lambda v: isinstance(v, int) and v >= 1,
                "integers >= 1")
  c.sequence_of(config, "syn_contexts", lambda v: isinstance(v, int) and v >= 256 and v % 256 == 0,
                "multiples of 256")
  c.positive_int(config, "real_context", minimum=64)
  forced = config.e2e_num_sink + config.e2e_recent_window + config.e2e_interval + 1
  if config.e2e_max_budget <= forced:
    raise config_lib.ConfigError(
        f"config.e2e_max_budget={config.e2e_max_budget!r} is invalid: expected more than the "
        f"always-attended tokens ({forced})")
  if not config.e2e_prefill + 1 < config.e2e_len:
    raise config_lib.ConfigError(f"config.e2e_prefill={config.e2e_prefill!r} is invalid: "
                                 f"expected less than e2e_len - 1 = {config.e2e_len - 1}")
  c.positive_int(config, "e2e_prefill", minimum=2)
  for key in ("quest_ratio_min", "adapt_ratio_min", "memory_ratio_min", "e2e_loss_rel_max"):
    c.positive(config, key)
  c.in_range(config, "e2e_agreement_min", 0.0, 1.0)
  c.positive_int(config, "memory_dim", minimum=32)
