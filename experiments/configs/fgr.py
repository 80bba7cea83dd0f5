"""FGR: frequency-aware gradient rectification for calibration under distribution shift.

Launch:
  python -m experiments.main --config=experiments/configs/fgr.py:quick --workdir=results/fgr
  python -m experiments.main --config=experiments/configs/fgr.py:tiny --workdir=/tmp/fgr_tiny
  python -m experiments.main --config=experiments/configs/fgr.py:paper --workdir=/tmp/fgr_paper \
      --config.data.cifar_root=/data/cifar-10-batches-py --config.data.cifar_c_root=/data/CIFAR-10-C

Every method in `methods` (methods/fgr/training.py: ce, focal, dfl, label_smoothing,
mixup, pcgrad, filter_only, projection_only, fgr) trains the same network on the same
data for the same schedule, `seeds` seeds each; FGR is also run with every filter in
`fgr.extra_filters` (run names "fgr_<filter>", e.g. "fgr_fft_lowpass"). The evaluated
parameters are those of the epoch with the lowest validation ECE (the paper's `_best.pt`).
Each is evaluated with and without temperature scaling (fit on the ID validation split):
on the clean ID test split, on every corruption x severity of it (`shift`), and on the
style-shift split.

Data (quick, tiny): scikit-learn's 8x8 digits. Style shift: within each class, images
are ranked by ink (sum of pixel values); the lightest `data.id_quantile` fraction is
the in-distribution pool (train / val / test, stratified), the heaviest rest is the
"heavy-ink" test set, a shift in how the digits were written (stroke width and size),
not a synthetic corruption. Corruptions: `common.data.corruptions` (its small-image
table) on the ID test split. Paper: CIFAR-10 (45k / 5k train / val) and the released
CIFAR-10-C `.npy` files from local paths, ResNet (`common/models/classifier.py`).

Sub-configs:
  data      dataset ("digits" | "cifar10"), test_fraction, val_fraction, id_quantile,
            cifar_root, cifar_c_root
  model     name ("small_cnn" | "resnet"), channels, dense, stage_sizes, widths
  schedule  epochs, batch_size, milestones (lr x decay at these epochs), decay,
            fgr_start (epoch from which views and the constraint are active),
            select_from (the evaluated parameters are those of the lowest validation
            ECE among epochs >= select_from, for every method; 0 = the paper's choice
            over all epochs), checkpoint_every (epochs)
  optim     lr, momentum, weight_decay, clip_norm (all methods, as in the paper code)
  fgr       rho, filter, severities (the filter's, drawn per image), extra_filters,
            scope ("head" | "all"), per_layer
  losses    focal_gamma, dfl_gamma, smoothing, mixup_alpha
  shift     corruptions, severities
  claims    beats_se (claim 1: FGR "beats" = lower by more than this many standard
            errors of the difference of seed means), gap_se (claim 3: "hurts" / "gains
            less" = worse than FGR by more than this many), within_se (claims 2, 4:
            "no worse" = higher by at most this many), acc_points (claim 2: ID
            accuracy tolerance, percentage points)
"""

from common import config as config_lib

METHODS = ("ce", "focal", "dfl", "label_smoothing", "mixup", "pcgrad", "filter_only",
           "projection_only", "fgr")
FILTERS = ("jpeg_compression", "fft_lowpass")
CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur",
               "gaussian_blur", "contrast", "brightness", "pixelate", "elastic_transform",
               "jpeg_compression")
# CIFAR-10-C's released files (common.data.cifar.CIFAR_C_CORRUPTIONS).
CIFAR_C = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur",
           "motion_blur", "zoom_blur", "snow", "frost", "fog", "brightness", "contrast",
           "elastic_transform", "pixelate", "jpeg_compression")

BASE = dict(
    method="fgr",
    seed=0,
    seeds=3,
    methods=METHODS,
    data=dict(dataset="digits", test_fraction=0.2, val_fraction=0.15, id_quantile=0.7,
              cifar_root="", cifar_c_root=""),
    model=dict(name="small_cnn", channels=(16, 32), dense=64, stage_sizes=(3, 3, 3),
               widths=(16, 32, 64)),
    # The paper's 350 epochs (lr drops at 150 / 250, FGR from 200), scaled by 1/10.
    schedule=dict(epochs=35, batch_size=64, milestones=(15, 25), decay=0.1, fgr_start=20,
                  select_from=20, checkpoint_every=5),
    optim=dict(lr=0.05, momentum=0.9, weight_decay=5e-4, clip_norm=2.0),
    fgr=dict(rho=0.05, filter="jpeg_compression", severities=(1, 2, 3),
             extra_filters=("fft_lowpass",), scope="head", per_layer=False),
    losses=dict(focal_gamma=3.0, dfl_gamma=5.0, smoothing=0.05, mixup_alpha=0.2),
    shift=dict(corruptions=CORRUPTIONS, severities=(1, 2, 3, 4, 5)),
    claims=dict(beats_se=2.0, gap_se=1.0, within_se=1.0, acc_points=1.0),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. 20 paired seeds (quick: 3), the same schedule: 16.0
    # minutes measured on the idle 2-core machine.
    "full": {"seeds": 20},
    # Accelerators: CIFAR-10 / CIFAR-10-C from local paths, ResNet-110, the paper's
    # schedule (SGD 0.1, 350 epochs, drops at 150 / 250, FGR from 200, batch 128).
    "paper": {"seeds": 3,
              "data": dict(dataset="cifar10", val_fraction=0.1),
              "model": dict(name="resnet", stage_sizes=(18, 18, 18)),
              "schedule": dict(epochs=350, batch_size=128, milestones=(150, 250),
                               fgr_start=200, select_from=200, checkpoint_every=10),
              "optim.lr": 0.1, "shift.corruptions": CIFAR_C},
    # Seconds: what the claim test runs.
    "tiny": {"seeds": 1, "methods": ("dfl", "filter_only", "projection_only", "fgr"),
             "model": dict(channels=(8, 16), dense=32),
             "schedule": dict(epochs=6, milestones=(4,), fgr_start=3, select_from=3,
                              checkpoint_every=2),
             "fgr": dict(rho=0.2, extra_filters=()),
             "shift": dict(corruptions=("gaussian_noise", "gaussian_blur"),
                           severities=(1, 5))},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 3.9, "full": 16.1}


def get_config(preset: str | None = None):
  return config_lib.build("fgr", BASE, PRESETS, preset)


def _ints(values, low: int, high: int) -> bool:
  return all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
             for v in values)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.subset_of(config, "methods", METHODS)
  c.require(config, "methods", len(set(config.methods)) == len(config.methods),
            "distinct method names")
  c.positive_int(config, "seeds")
  c.positive_int(config, "seed", minimum=0)
  c.one_of(config, "data.dataset", ("digits", "cifar10"))
  c.in_range(config, "data.test_fraction", 0.0, 1.0)
  c.in_range(config, "data.val_fraction", 0.0, 1.0)
  c.in_interval(config, "data.id_quantile", 0.0, 1.0, closed="high")
  c.one_of(config, "model.name", ("small_cnn", "resnet"))
  for key in ("model.channels", "model.stage_sizes", "model.widths"):
    c.sequence_of(config, key, lambda v: isinstance(v, int) and v > 0, "positive integers")
  c.positive_int(config, "model.dense")
  _validate_schedule(config)
  for key in ("optim.lr", "optim.clip_norm", "losses.dfl_gamma", "losses.mixup_alpha"):
    c.positive(config, key)
  c.in_interval(config, "optim.momentum", 0.0, 1.0, closed="low")
  c.in_interval(config, "optim.weight_decay", 0.0, 1.0, closed="low")
  c.in_interval(config, "losses.focal_gamma", 0.0, 100.0, closed="low")
  c.in_interval(config, "losses.smoothing", 0.0, 1.0, closed="low")
  c.in_interval(config, "fgr.rho", 0.0, 1.0, closed="both")
  c.one_of(config, "fgr.filter", FILTERS)
  c.sequence_of(config, "fgr.severities", lambda v: _ints([v], 1, 5), "severities in 1..5")
  c.require(config, "fgr.extra_filters", all(f in FILTERS for f in config.fgr.extra_filters)
            and config.fgr.filter not in config.fgr.extra_filters,
            f"filters from {', '.join(FILTERS)} other than fgr.filter")
  c.one_of(config, "fgr.scope", ("head", "all"))
  c.require(config, "fgr.per_layer", isinstance(config.fgr.per_layer, bool), "a bool")
  known = CIFAR_C if config.data.dataset == "cifar10" else CORRUPTIONS
  c.subset_of(config, "shift.corruptions", known)
  c.sequence_of(config, "shift.severities", lambda v: _ints([v], 1, 5), "severities in 1..5")
  for key in ("claims.beats_se", "claims.gap_se", "claims.within_se", "claims.acc_points"):
    c.positive(config, key)


def _validate_schedule(config) -> None:
  c = config_lib
  s = config.schedule
  for key in ("schedule.epochs", "schedule.batch_size", "schedule.checkpoint_every"):
    c.positive_int(config, key)
  c.require(config, "schedule.milestones", isinstance(s.milestones, (tuple, list))
            and _ints(s.milestones, 1, s.epochs - 1)
            and list(s.milestones) == sorted(set(s.milestones)),
            f"increasing epochs in [1, schedule.epochs - 1 = {s.epochs - 1}]")
  c.in_interval(config, "schedule.decay", 0.0, 1.0, closed="high")
  for key in ("schedule.fgr_start", "schedule.select_from"):
    c.require(config, key, _ints([c.get(config, key)], 0, s.epochs - 1),
              f"an epoch in [0, schedule.epochs - 1 = {s.epochs - 1}]")


def preflight(config) -> None:
  """The paper preset's local files exist (one-line ConfigError otherwise)."""
  import os  # pylint: disable=import-outside-toplevel
  if config.data.dataset != "cifar10":
    return
  for key in ("data.cifar_root", "data.cifar_c_root"):
    path = config_lib.get(config, key)
    if not path or not os.path.isdir(path):
      config_lib.fail(key, path, "a local folder (CIFAR-10 python batches / CIFAR-10-C "
                      ".npy files)")
  for name in config.shift.corruptions:
    if not os.path.isfile(os.path.join(config.data.cifar_c_root, f"{name}.npy")):
      config_lib.fail("shift.corruptions", name, f"a corruption with {name}.npy in "
                      f"data.cifar_c_root={config.data.cifar_c_root!r}")
