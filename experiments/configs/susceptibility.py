"""Spectroscopy of a language model: SGLD, LLC, per-token susceptibilities, clustering.

Launch:
  python -m experiments.main --config=experiments/configs/susceptibility.py:quick \
      --workdir=/tmp/susceptibility
  python -m experiments.main --config=experiments/configs/susceptibility.py:paper \
      --workdir=/tmp/susceptibility_paper
  # One part, a shorter training run, the LM of an earlier `lm` run:
  python -m experiments.main --config=experiments/configs/susceptibility.py:quick \
      --workdir=/tmp/susceptibility --config.parts="('synthetic',)" \
      --config.train.num_steps=500 --config.synthetic.sgld.draws=30
  python -m experiments.main --config=experiments/configs/susceptibility.py:quick \
      --workdir=/tmp/susceptibility --config.parts="('lm',)" --config.lm_workdir=/tmp/lm

Three parts (`parts`), each a sub-config:
  1. `calibration`: SGLD LLC on linear regression (true lambda = d / 2) over step sizes;
  2. synthetic: a 2-layer attention-only transformer (`model`, trained with `train`)
     on the mechanism stream (`data`, `common.data.mechanisms`); `synthetic` holds the
     probe, the SGLD settings (`synthetic.sgld`) and the baselines; susceptibility
     clustering vs per-token gradient and residual-stream baselines (adjusted Rand
     index against the known mechanisms);
  3. lm: the shared byte-level LM (`common.lm`, config `lm`; from `lm_workdir`, or
     empty: the `lm` run beside the workdir, else workdir/lm, trained there first);
     `real_lm` holds its probe and SGLD settings; its token clusters as a table.
`cluster` is the clustering shared by every feature set. SGLD settings: n_beta = 0
means the default m / ln m (m = predictions per minibatch).
"""

from common import config as config_lib
from common import lm as lm_lib
from common import train as train_lib



BASE = dict(
    method="susceptibility",
    seed=0,
    parts=("calibration", "synthetic", "lm"),
    # 1. Calibration on linear regression y = x.w* + noise, loss = Gaussian NLL.
    calibration=dict(dim=10, n=4096, batch_size=256, noise=1.0, step_size=1e-3,
                     step_sizes=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 6e-2), localization=1.0,
                     chains=8, burnin=200, draws=2000, tolerance=0.1),
    # 2. Synthetic mechanisms: the stream, the attention-only model and its training.
    data=dict(seq_len=64, p_pair=0.12),
    model=dict(d_model=64, num_layers=2, num_heads=4, learning_rate=1e-2),
    train=train_lib.default_train_config(num_steps=1500, batch_size=32, checkpoint_every=0,
                                         log_every=150, progress_bar=False),
    # Its susceptibilities: SGLD pool and settings, the probe, the baselines, the bar.
    synthetic=dict(pool_size=512, probe_seqs=24, per_mechanism=60, grad_dim=64,
                   ari_margin=0.15,
                   sgld=dict(batch=8, step_size=2e-3, localization=100.0, n_beta=20.0,
                             chains=4, burnin=40, draws=60, thin=2)),
    # Clustering (shared by every feature set).
    cluster=dict(k=10, max_conductance=0.35, min_size=12, max_clusters=8),
    # 3. The shared LM on the stdlib corpus, and its probe.
    lm=lm_lib.get_config("quick"),
    lm_workdir="",
    real_lm=dict(seq_len=64, pool_size=256, probe_windows=16, examples=4,
                 sgld=dict(batch=8, step_size=1e-4, localization=3000.0, n_beta=0.0,
                           chains=2, burnin=40, draws=20, thin=4)),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]), plus
    # the quick LM (reused from the `lm` run or workdir/lm).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. The full LM; twice the SGLD chains (calibration,
    # synthetic, LM) and the LM's probe windows.
    "full": {"lm": lm_lib.PRESETS["full"], "calibration.chains": 16,
             "synthetic.sgld.chains": 8,
             "real_lm": dict(probe_windows=32, sgld=dict(chains=4))},
    # Accelerators: longer chains, more probe tokens, the paper-size LM.
    "paper": {"calibration": dict(chains=16, draws=10000),
              "model.d_model": 128, "train": dict(num_steps=6000, log_every=600),
              "synthetic": dict(probe_seqs=256, per_mechanism=400,
                                sgld=dict(chains=8, burnin=500, draws=400, thin=5)),
              "cluster": dict(min_size=40, max_clusters=12),
              "lm": lm_lib.PRESETS["paper"],
              "real_lm": dict(seq_len=256, pool_size=2048, probe_windows=128,
                              sgld=dict(batch=32, chains=4, burnin=500, draws=200,
                                        thin=5))},
    # What the claim test runs (synthetic part only; ~80 CPU-s). Its induction claim
    # needs 1000 training steps and 4 chains x 40 draws (with half of either it failed
    # at some seeds); SGLD minibatches of 4 sequences (not 8) keep it, at 2/3 the cost.
    "tiny": {"parts": ("synthetic",), "train": dict(num_steps=1000, log_every=100),
             "synthetic": dict(per_mechanism=40, grad_dim=32,
                               sgld=dict(batch=4, burnin=20, draws=40)),
             "cluster.min_size": 8, "lm": lm_lib.PRESETS["tiny"]},
}

PARTS = ("calibration", "synthetic", "lm")
SGLD = ("synthetic.sgld", "real_lm.sgld")


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 3.9, "full": 10.5}


def get_config(preset: str | None = None):
  return config_lib.build("susceptibility", BASE, PRESETS, preset)


def _validate_sgld(config, key: str) -> None:
  c = config_lib
  for name in ("batch", "chains", "draws", "thin"):
    c.positive_int(config, f"{key}.{name}")
  c.positive_int(config, f"{key}.burnin", minimum=0)
  c.positive(config, f"{key}.step_size")
  c.positive(config, f"{key}.localization")
  n_beta = config_lib.get(config, f"{key}.n_beta")
  c.require(config, f"{key}.n_beta", not isinstance(n_beta, bool) and
            isinstance(n_beta, (int, float)) and n_beta >= 0,
            "a number >= 0 (0: the default m / ln m)")


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.subset_of(config, "parts", PARTS)
  for key in ("calibration.dim", "calibration.n", "calibration.batch_size",
              "calibration.chains", "calibration.draws", "model.d_model",
              "model.num_layers", "model.num_heads", "synthetic.pool_size",
              "synthetic.probe_seqs", "synthetic.per_mechanism", "synthetic.grad_dim",
              "cluster.k", "cluster.min_size", "real_lm.pool_size", "real_lm.probe_windows",
              "real_lm.examples"):
    c.positive_int(config, key)
  c.positive_int(config, "calibration.burnin", minimum=0)
  c.positive_int(config, "cluster.max_clusters", minimum=2)
  c.positive_int(config, "data.seq_len", minimum=8)
  c.positive_int(config, "real_lm.seq_len", minimum=8)
  c.require(config, "calibration.batch_size",
            config.calibration.batch_size <= config.calibration.n,
            f"an integer <= calibration.n={config.calibration.n}")
  c.require(config, "model.d_model", config.model.d_model % config.model.num_heads == 0,
            f"a multiple of model.num_heads={config.model.num_heads}")
  for key in ("calibration.noise", "calibration.step_size", "calibration.localization",
              "model.learning_rate"):
    c.positive(config, key)
  for key in SGLD:
    _validate_sgld(config, key)
  c.sequence_of(config, "calibration.step_sizes",
                lambda v: isinstance(v, (int, float)) and v > 0, "numbers > 0")
  c.in_range(config, "calibration.tolerance", 0.0, 1.0)
  c.in_range(config, "data.p_pair", 0.0, 0.5)
  c.in_range(config, "cluster.max_conductance", 0.0, 2.0)
  c.in_range(config, "synthetic.ari_margin", 0.0, 1.0)
  c.check_train(config, "train")
  lm_lib.validate(config, "lm.")
