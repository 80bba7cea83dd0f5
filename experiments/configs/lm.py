"""A small byte-level LM trained on the standard library's English + code corpus.

Launch:
  python -m experiments.main --config=experiments/configs/lm.py:quick --workdir=/tmp/lm
  python -m experiments.main --config=experiments/configs/lm.py:quick --workdir=/tmp/lm_neox \
      --config.family=neox

`family` picks Llama/Qwen style ("llama", with `qk_norm` for Qwen3) or GPT-NeoX/Pythia
style ("neox"). The trained model (orbax checkpoint under workdir/checkpoints, plus a
Hugging Face export under workdir/hf) is what other experiments reuse.
"""

from common import config as config_lib
from common.models import transformer

BASE = dict(
    method="lm",
    seed=0,
    # Model.
    family="llama",
    d_model=128,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    d_ff=384,
    seq_len=128,
    qk_norm=False,
    dtype="float32",
    # Optimisation (AdamW, linear warmup then cosine decay, global-norm clipping).
    num_steps=700,
    batch_size=32,
    learning_rate=3e-3,
    warmup_steps=50,
    weight_decay=0.01,
    grad_clip=1.0,
    checkpoint_every=200,
    log_every=25,
    # Evaluation and samples.
    validation_fraction=0.1,
    eval_batch_size=32,
    max_eval_windows=512,
    bpb_margin=0.75,
    sample_prompts=("def ", "The "),
    sample_tokens=80,
    temperature=0.8,
    top_p=0.95,
)

PRESETS = {
    # CPU, a couple of minutes: what `make reproduce` runs (about 0.9M parameters).
    "quick": {},
    # Accelerators: a ~25M-parameter model with longer context, trained much longer.
    "paper": dict(d_model=512, num_layers=8, num_heads=8, num_kv_heads=4, d_ff=1536,
                  seq_len=512, num_steps=20000, batch_size=128, learning_rate=1e-3,
                  warmup_steps=500, checkpoint_every=1000, log_every=100,
                  max_eval_windows=4096, dtype="bfloat16"),
    # Seconds: what the claim test runs (25k parameters; the bar is loosened to 0.9).
    "tiny": dict(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64, seq_len=32,
                 num_steps=300, batch_size=16, learning_rate=1e-2, warmup_steps=10,
                 checkpoint_every=0, log_every=50, max_eval_windows=64, eval_batch_size=32,
                 sample_tokens=8, bpb_margin=0.9),
}


def get_config(preset: str | None = None):
  return config_lib.build("lm", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.one_of(config, "family", transformer.FAMILIES)
  for key in ("d_model", "num_layers", "num_heads", "num_kv_heads", "d_ff", "num_steps",
              "batch_size", "eval_batch_size", "max_eval_windows", "sample_tokens",
              "log_every"):
    c.positive_int(config, key)
  c.positive_int(config, "seq_len", minimum=2)
  c.positive_int(config, "warmup_steps", minimum=0)
  c.positive_int(config, "checkpoint_every", minimum=0)
  if config.warmup_steps >= config.num_steps:
    raise config_lib.ConfigError(f"config.warmup_steps={config.warmup_steps!r} must be below "
                                 f"config.num_steps={config.num_steps!r}")
  if config.num_heads % config.num_kv_heads:
    raise config_lib.ConfigError(f"config.num_kv_heads={config.num_kv_heads!r} must divide "
                                 f"config.num_heads={config.num_heads!r}")
  if config.d_model % config.num_heads:
    raise config_lib.ConfigError(f"config.d_model={config.d_model!r} must be divisible by "
                                 f"config.num_heads={config.num_heads!r}")
  c.one_of(config, "dtype", ("float32", "bfloat16"))
  c.positive(config, "learning_rate")
  _closed_open(config, "weight_decay", 0.0, 1.0)
  c.positive(config, "grad_clip")
  c.in_range(config, "validation_fraction", 0.0, 1.0)
  c.in_range(config, "bpb_margin", 0.0, 1.0)
  c.sequence_of(config, "sample_prompts", lambda v: isinstance(v, str) and v != "",
                "non-empty strings")
  _closed_open(config, "temperature", 0.0, 10.0)
  if not isinstance(config.top_p, (int, float)) or not 0.0 < config.top_p <= 1.0:
    raise config_lib.ConfigError(f"config.top_p={config.top_p!r} is invalid: expected a "
                                 "number in (0, 1]")


def _closed_open(config, key: str, low: float, high: float) -> None:
  value = config[key]
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < high:
    raise config_lib.ConfigError(f"config.{key}={value!r} is invalid: expected a number in "
                                 f"[{low}, {high})")
