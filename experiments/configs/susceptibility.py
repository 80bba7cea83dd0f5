"""Spectroscopy of a language model: SGLD, LLC, per-token susceptibilities, clustering.

Launch:
  python -m experiments.main --config=experiments/configs/susceptibility.py:quick \
      --workdir=/tmp/susceptibility
  python -m experiments.main --config=experiments/configs/susceptibility.py:paper \
      --workdir=/tmp/susceptibility_paper

Three parts (keys prefixed cal_, syn_ and lm_):
  1. calibration: SGLD LLC on linear regression (true lambda = d / 2) over step sizes;
  2. synthetic: a 2-layer attention-only transformer on the mechanism stream
     (`common.data.mechanisms`); susceptibility clustering vs per-token gradient and
     residual-stream baselines (adjusted Rand index against the known mechanisms);
  3. lm: the shared byte-level LM (`experiments.lm`, preset `lm_preset`, restored from
     workdir/lm or trained there first); its token clusters as a table.
SGLD settings: n_beta = 0 means the default m / ln m (m = predictions per minibatch).
"""

from common import config as config_lib

BASE = dict(
    method="susceptibility",
    seed=0,
    parts=("calibration", "synthetic", "lm"),
    # 1. Calibration on linear regression y = x.w* + noise, loss = Gaussian NLL.
    cal_dim=10,
    cal_n=4096,
    cal_batch_size=256,
    cal_noise=1.0,
    cal_step_size=1e-3,
    cal_step_sizes=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 6e-2),
    cal_localization=1.0,
    cal_chains=8,
    cal_burnin=200,
    cal_draws=2000,
    cal_tolerance=0.1,
    # 2. Synthetic mechanisms: model and training.
    syn_d_model=64,
    syn_layers=2,
    syn_heads=4,
    syn_seq_len=64,
    syn_batch_size=32,
    syn_steps=1500,
    syn_learning_rate=1e-2,
    syn_p_pair=0.12,
    # SGLD for the susceptibilities.
    syn_pool_size=512,
    syn_sgld_batch=8,
    syn_step_size=2e-3,
    syn_localization=100.0,
    syn_n_beta=20.0,
    syn_chains=4,
    syn_burnin=40,
    syn_draws=60,
    syn_thin=2,
    syn_probe_seqs=24,
    syn_per_mechanism=60,
    syn_grad_dim=64,
    # Clustering (shared by every feature set).
    cluster_k=10,
    cluster_max_conductance=0.35,
    cluster_min_size=12,
    cluster_max=8,
    syn_ari_margin=0.15,
    # 3. The shared LM on the stdlib corpus.
    lm_preset="quick",
    lm_seq_len=64,
    lm_pool_size=256,
    lm_sgld_batch=8,
    lm_step_size=1e-4,
    lm_localization=3000.0,
    lm_n_beta=0.0,
    lm_chains=2,
    lm_burnin=40,
    lm_draws=20,
    lm_thin=4,
    lm_probe_windows=16,
    lm_examples=4,
)

PRESETS = {
    # CPU, a few minutes (plus the LM, reused from workdir/lm when present).
    "quick": {},
    # Accelerators: longer chains, more probe tokens, the paper-size LM preset.
    "paper": dict(cal_chains=16, cal_draws=10000, syn_steps=6000, syn_d_model=128,
                  syn_chains=8, syn_burnin=500, syn_draws=400, syn_thin=5,
                  syn_probe_seqs=256, syn_per_mechanism=400, cluster_min_size=40,
                  cluster_max=12, lm_preset="paper", lm_seq_len=256, lm_pool_size=2048,
                  lm_sgld_batch=32, lm_chains=4, lm_burnin=500, lm_draws=200, lm_thin=5,
                  lm_probe_windows=128),
    # Seconds: what the claim test runs (synthetic part only).
    "tiny": dict(parts=("synthetic",), syn_steps=1000, syn_burnin=20,
                 syn_draws=40, syn_per_mechanism=40, cluster_min_size=8, syn_grad_dim=32,
                 lm_preset="tiny"),
}

PARTS = ("calibration", "synthetic", "lm")


def get_config(preset: str | None = None):
  return config_lib.build("susceptibility", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.subset_of(config, "parts", PARTS)
  for key in ("cal_dim", "cal_n", "cal_batch_size", "cal_chains", "cal_draws",
              "syn_d_model", "syn_layers", "syn_heads", "syn_batch_size", "syn_steps",
              "syn_pool_size", "syn_sgld_batch", "syn_chains", "syn_draws", "syn_thin",
              "syn_probe_seqs", "syn_per_mechanism", "syn_grad_dim", "cluster_k",
              "cluster_min_size", "lm_pool_size", "lm_sgld_batch", "lm_chains", "lm_draws",
              "lm_thin", "lm_probe_windows", "lm_examples"):
    c.positive_int(config, key)
  for key in ("cal_burnin", "syn_burnin", "lm_burnin"):
    c.positive_int(config, key, minimum=0)
  c.positive_int(config, "cluster_max", minimum=2)
  c.positive_int(config, "syn_seq_len", minimum=8)
  c.positive_int(config, "lm_seq_len", minimum=8)
  if config.cal_batch_size > config.cal_n:
    raise config_lib.ConfigError(f"config.cal_batch_size={config.cal_batch_size!r} must be "
                                 f"<= config.cal_n={config.cal_n!r}")
  if config.syn_d_model % config.syn_heads:
    raise config_lib.ConfigError(f"config.syn_d_model={config.syn_d_model!r} must be "
                                 f"divisible by config.syn_heads={config.syn_heads!r}")
  for key in ("cal_noise", "cal_step_size", "cal_localization", "syn_learning_rate",
              "syn_step_size", "syn_localization", "lm_step_size", "lm_localization"):
    c.positive(config, key)
  for key in ("syn_n_beta", "lm_n_beta"):
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
      raise config_lib.ConfigError(f"config.{key}={value!r} is invalid: expected a number "
                                   ">= 0 (0: the default m / ln m)")
  c.sequence_of(config, "cal_step_sizes", lambda v: isinstance(v, (int, float)) and v > 0,
                "numbers > 0")
  c.in_range(config, "cal_tolerance", 0.0, 1.0)
  c.in_range(config, "syn_p_pair", 0.0, 0.5)
  c.in_range(config, "cluster_max_conductance", 0.0, 2.0)
  c.in_range(config, "syn_ari_margin", 0.0, 1.0)
  c.one_of(config, "lm_preset", ("quick", "paper", "tiny"))
