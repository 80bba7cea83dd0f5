"""DivIn: diversity-quality trade-off of guided flow sampling on 2-D mixtures and 8x8 digits.

Launch:
  python -m experiments.main --config=experiments/configs/divin.py:quick \
      --workdir=/tmp/divin
  python -m experiments.main --config=experiments/configs/divin.py:paper \
      --workdir=/tmp/divin_paper

Toy case: ``num_classes`` classes, each a mixture of ``len(mode_weights)`` isotropic
Gaussian modes with the (unequal) weights ``mode_weights``, interleaved on a ring of
radius ``ring_radius``. A class-conditional flow (linear path, CFG dropout
``p_uncond``) is trained with the shared loop and sampled with Euler steps for every
guidance weight in ``ws`` and every method strength: DivIn inverse temperatures
``divin_taus``, CADS noise scales ``cads_noise_scales``, particle-guidance strengths
``pg_alphas``; DivIn+CADS pairs ``divin_taus[i]`` with ``cads_noise_scales[i]``.
Image case (``image_case``): the same on scikit-learn's bundled digits with
``common.models.cnn.ConditionalCNN``.
"""

from common import config as config_lib
from methods.divin import langevin

BASE = dict(
    method="divin",
    seed=0,
    x64=False,
    # toy data
    num_classes=3,
    mode_weights=(0.6, 0.25, 0.1, 0.05),
    ring_radius=5.0,
    mode_std=0.3,
    # toy model and training
    hidden=(128, 128, 128),
    train_steps=3000,
    batch_size=256,
    learning_rate=2e-3,
    p_uncond=0.2,
    # sampling and methods
    sample_steps=32,
    samples_per_class=400,
    ws=(1.0, 3.0, 7.0),
    divin_taus=(0.05, 0.2),
    divin_eta=0.05,
    divin_steps=30,
    divin_scheme="ou",
    rollout_steps=8,
    cads_noise_scales=(0.25, 0.5),
    cads_t1=0.2,
    cads_t2=0.6,
    pg_alphas=(5.0, 20.0),
    # metrics
    vendi_lengthscale=1.0,
    mode_radius=3.0,
    precision_tolerance=0.02,
    # image case
    image_case=False,
    image_train_steps=1500,
    image_batch_size=64,
    image_learning_rate=2e-3,
    image_channels=32,
    image_blocks=2,
    image_sample_steps=16,
    image_samples_per_class=32,
    image_ws=(1.0, 3.0, 7.0),
    image_divin_tau=0.05,
    image_rollout_steps=2,
    image_divin_steps=10,
    image_cads_noise_scale=0.5,
    image_pg_alpha=10.0,
    image_vendi_lengthscale=2.0,
    image_nn_k=5,
)

PRESETS = {
    # CPU, about 3 minutes: what `make reproduce` runs.
    "quick": {},
    # Paper-like scale, for accelerators: longer training, more samples, finer sweeps.
    "paper": dict(image_case=True, train_steps=20000, samples_per_class=2000, sample_steps=100,
                  divin_taus=(0.02, 0.05, 0.1, 0.2, 0.5),
                  cads_noise_scales=(0.1, 0.25, 0.5, 0.75, 1.0),
                  pg_alphas=(2.0, 5.0, 10.0, 20.0, 40.0), divin_steps=100,
                  image_train_steps=20000, image_channels=64, image_samples_per_class=200,
                  image_sample_steps=50, image_batch_size=128, image_blocks=3,
                  image_divin_steps=30, image_rollout_steps=4),
    # Seconds: what the claim test runs (no image case).
    "tiny": dict(train_steps=1000, samples_per_class=200, hidden=(64, 64, 64),
                 ws=(1.0, 7.0), divin_taus=(0.2,), cads_noise_scales=(0.5,),
                 pg_alphas=(20.0,), sample_steps=24, divin_steps=20, image_case=False),
}


def get_config(preset: str | None = None):
  return config_lib.build("divin", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.positive_int(config, "num_classes", minimum=2)
  c.sequence_of(config, "mode_weights", lambda v: isinstance(v, (int, float)) and v > 0,
                "numbers > 0")
  for key in ("ring_radius", "mode_std", "learning_rate", "divin_eta", "vendi_lengthscale",
              "mode_radius", "image_learning_rate", "image_vendi_lengthscale"):
    c.positive(config, key)
  c.sequence_of(config, "hidden", lambda v: isinstance(v, int) and v >= 1, "integers >= 1")
  for key in ("train_steps", "batch_size", "sample_steps", "divin_steps", "rollout_steps",
              "image_train_steps", "image_batch_size", "image_channels", "image_blocks",
              "image_sample_steps", "image_rollout_steps", "image_divin_steps", "image_nn_k"):
    c.positive_int(config, key)
  c.positive_int(config, "samples_per_class", minimum=8)
  c.positive_int(config, "image_samples_per_class", minimum=8)
  c.in_range(config, "p_uncond", 0.0, 1.0)
  c.in_range(config, "divin_eta", 0.0, 1.0)
  c.in_range(config, "precision_tolerance", 0.0, 1.0)
  c.in_range(config, "cads_t1", -1e-9, 1.0)
  c.in_range(config, "cads_t2", config.cads_t1, 1.0 + 1e-9)
  nonneg = lambda v: isinstance(v, (int, float)) and v >= 0
  for key in ("ws", "image_ws"):
    c.sequence_of(config, key, nonneg, "numbers >= 0")
  for key in ("divin_taus", "cads_noise_scales", "pg_alphas"):
    c.sequence_of(config, key, lambda v: isinstance(v, (int, float)) and v > 0, "numbers > 0")
  if len(config.divin_taus) != len(config.cads_noise_scales):
    raise config_lib.ConfigError(
        f"config.divin_taus and config.cads_noise_scales must have equal lengths (paired "
        f"for DivIn+CADS), got {len(config.divin_taus)} and {len(config.cads_noise_scales)}")
  for key in ("image_divin_tau", "image_cads_noise_scale", "image_pg_alpha"):
    c.positive(config, key)
  c.one_of(config, "divin_scheme", langevin.SCHEMES)
