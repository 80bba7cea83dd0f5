"""DivIn: diversity-quality trade-off of guided flow sampling on 2-D mixtures and 8x8 digits.

Launch:
  python -m experiments.main --config=experiments/configs/divin.py:quick \
      --workdir=/tmp/divin
  python -m experiments.main --config=experiments/configs/divin.py:paper \
      --workdir=/tmp/divin_paper
  python -m experiments.main --config=experiments/configs/divin.py:tiny \
      --workdir=/tmp/divin_tiny --config.toy.train.num_steps=200 --config.toy.ws="(1.0,3.0)"

Keys:
* top level: ``seed`` (the sampling keys), ``p_uncond`` (CFG dropout in training),
  ``langevin`` (DivIn's step ``eta`` and ``scheme``), ``cads`` (the annealing window
  ``t1``, ``t2`` in flow time), shared by both cases.
* ``data``: the toy law. ``num_classes`` classes, each a mixture of
  ``len(mode_weights)`` isotropic Gaussian modes (std ``mode_std``) with the
  (unequal) weights ``mode_weights``, interleaved on a ring of radius ``ring_radius``.
* ``toy``: the 2-D case. A class-conditional ``ConditionalMLP`` (``hidden``; linear
  path, Adam with cosine decay from ``learning_rate``) trained by the shared loop
  with ``toy.train`` (``common.train.default_train_config()``: ``num_steps``,
  ``batch_size``, ``seed``, ...), then sampled with ``sample_steps`` Euler steps,
  ``samples_per_class`` per class, for every guidance weight in ``ws`` and every
  method strength: DivIn inverse temperatures ``divin_taus`` (``divin_steps`` Langevin
  updates, potential rollout of ``rollout_steps``), CADS noise scales
  ``cads_noise_scales``, particle-guidance strengths ``pg_alphas``; DivIn+CADS pairs
  ``divin_taus[i]`` with ``cads_noise_scales[i]``. Metrics: Vendi lengthscale
  ``vendi_lengthscale``, mode radius ``mode_radius`` (in std), and the precision
  tolerance of the equal-precision claim ``precision_tolerance``.
* ``image``: the same sweep on scikit-learn's bundled 8x8 digits with
  ``common.models.cnn.ConditionalCNN`` (``channels``, ``blocks``), when ``enabled``;
  quality is the k-NN density (``nn_k``) against the real images of the class.
"""

from common import config as config_lib
from common import train as train_lib
from methods.divin import langevin



BASE = dict(
    method="divin",
    seed=0,
    x64=False,
    p_uncond=0.2,
    langevin=dict(eta=0.05, scheme="ou"),
    cads=dict(t1=0.2, t2=0.6),
    data=dict(num_classes=3, mode_weights=(0.6, 0.25, 0.1, 0.05), ring_radius=5.0,
              mode_std=0.3),
    toy=dict(
        hidden=(128, 128, 128), learning_rate=2e-3,
        sample_steps=32, samples_per_class=400, ws=(1.0, 3.0, 7.0),
        divin_taus=(0.05, 0.2), divin_steps=30, rollout_steps=8,
        cads_noise_scales=(0.25, 0.5), pg_alphas=(5.0, 20.0),
        vendi_lengthscale=1.0, mode_radius=3.0, precision_tolerance=0.02,
        train=train_lib.default_train_config(
            num_steps=3000, batch_size=256, seed=0, checkpoint_every=1500, log_every=250,
            progress_bar=False, nan_guard=False)),
    image=dict(
        enabled=False, channels=32, blocks=2, learning_rate=2e-3,
        sample_steps=16, samples_per_class=32, ws=(1.0, 3.0, 7.0),
        divin_taus=(0.05,), divin_steps=10, rollout_steps=2,
        cads_noise_scales=(0.5,), pg_alphas=(10.0,),
        vendi_lengthscale=2.0, nn_k=5,
        train=train_lib.default_train_config(
            num_steps=1500, batch_size=64, seed=1, checkpoint_every=750, log_every=250,
            progress_bar=False, nan_guard=False)),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. Finer sweeps (4 strengths per method, not 2), 1000 samples
    # per class (not 400), twice the training (6000 steps): 5.7 minutes measured, pinned to
    # one of the two cores.
    "full": {
        "toy": dict(samples_per_class=1000, divin_taus=(0.02, 0.05, 0.1, 0.2),
                    cads_noise_scales=(0.1, 0.25, 0.5, 0.75),
                    pg_alphas=(2.0, 5.0, 10.0, 20.0)),
        "toy.train": dict(num_steps=6000, checkpoint_every=3000),
    },
    # Paper-like scale, for accelerators: longer training, more samples, finer sweeps.
    "paper": {
        "toy": dict(samples_per_class=2000, sample_steps=100,
                    divin_taus=(0.02, 0.05, 0.1, 0.2, 0.5),
                    cads_noise_scales=(0.1, 0.25, 0.5, 0.75, 1.0),
                    pg_alphas=(2.0, 5.0, 10.0, 20.0, 40.0), divin_steps=100),
        "toy.train": dict(num_steps=20000, checkpoint_every=10000),
        "image": dict(enabled=True, channels=64, samples_per_class=200, sample_steps=50,
                      blocks=3, divin_steps=30, rollout_steps=4),
        "image.train": dict(num_steps=20000, batch_size=128, checkpoint_every=10000),
    },
    # Seconds: what the claim test runs (no image case).
    "tiny": {
        "toy": dict(samples_per_class=200, hidden=(64, 64, 64), ws=(1.0, 7.0),
                    divin_taus=(0.2,), cads_noise_scales=(0.5,), pg_alphas=(20.0,),
                    sample_steps=24, divin_steps=20),
        "toy.train": dict(num_steps=1000, checkpoint_every=500),
    },
}

CASES = ("toy", "image")


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 0.7, "full": 5.7}


def get_config(preset: str | None = None):
  return config_lib.build("divin", BASE, PRESETS, preset)


def _positive_numbers(config, key: str) -> None:
  config_lib.sequence_of(config, key, lambda v: isinstance(v, (int, float)) and v > 0,
                         "numbers > 0")


def _validate_case(config, case: str) -> None:
  """The keys ``toy`` and ``image`` share: model, sweep, metrics and ``train``."""
  c = config_lib
  c.check_train(config, f"{case}.train")
  for key in ("learning_rate", "vendi_lengthscale"):
    c.positive(config, f"{case}.{key}")
  for key in ("sample_steps", "divin_steps", "rollout_steps"):
    c.positive_int(config, f"{case}.{key}")
  c.positive_int(config, f"{case}.samples_per_class", minimum=8)
  c.sequence_of(config, f"{case}.ws", lambda v: isinstance(v, (int, float)) and v >= 0,
                "numbers >= 0")
  for key in ("divin_taus", "cads_noise_scales", "pg_alphas"):
    _positive_numbers(config, f"{case}.{key}")
  sub = config[case]
  c.require(config, f"{case}.cads_noise_scales",
            len(sub.divin_taus) == len(sub.cads_noise_scales),
            f"as many values as {case}.divin_taus={tuple(sub.divin_taus)!r} (paired for "
            "DivIn+CADS)")


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.in_range(config, "p_uncond", 0.0, 1.0)
  c.in_range(config, "langevin.eta", 0.0, 1.0)
  c.one_of(config, "langevin.scheme", langevin.SCHEMES)
  c.in_interval(config, "cads.t1", 0.0, 1.0, closed="low")
  c.in_interval(config, "cads.t2", config.cads.t1, 1.0, closed="high")
  c.positive_int(config, "data.num_classes", minimum=2)
  _positive_numbers(config, "data.mode_weights")
  for key in ("data.ring_radius", "data.mode_std", "toy.mode_radius"):
    c.positive(config, key)
  c.sequence_of(config, "toy.hidden", lambda v: isinstance(v, int) and v >= 1, "integers >= 1")
  c.in_range(config, "toy.precision_tolerance", 0.0, 1.0)
  for key in ("image.channels", "image.blocks", "image.nn_k"):
    c.positive_int(config, key)
  for case in CASES:
    _validate_case(config, case)
