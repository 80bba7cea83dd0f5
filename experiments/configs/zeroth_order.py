"""Zeroth-order fine-tuning (MeZO, LOZO, AGZO) of the shared byte-level LM.

Launch:
  python -m experiments.main --config=experiments/configs/zeroth_order.py:quick \
      --workdir=results/zeroth_order
  python -m experiments.main --config=experiments/configs/zeroth_order.py:paper \
      --workdir=/tmp/zeroth_order_paper

The LM comes from `experiments.lm.load_or_train` with the preset `lm_preset`, trained
(or restored) under workdir/lm. The downstream task: is a `window`-byte window of the
stdlib corpus English (a pydoc topic) or Python (module source)? The answer is read
from the LM's next-byte logits of the two `verbalisers` at the last position.
"""

from common import config as config_lib

ESTIMATORS = ("first_order", "mezo", "lozo", "agzo")

BASE = dict(
    method="zeroth_order",
    seed=0,
    lm_preset="quick",
    # Task.
    window=32,
    verbalisers=("E", "C"),
    batch_size=16,
    eval_size=512,
    # Estimators.
    estimators=ESTIMATORS,
    eps=1e-3,
    agzo_ranks=(1, 4, 16),
    power_iters=2,
    agzo_two_sided=False,
    lozo_rank=2,
    lozo_interval=50,
    # Fine-tuning at equal forward passes: ZO-SGD (constant rate), first order with Adam.
    forward_budget=600,
    first_order_pass_cost=3,
    num_evals=6,
    # Which parameters are tuned (by every method alike): "linear" = the linear layers'
    # kernels (embeddings and norms frozen), "all" = every parameter.
    trainable="linear",
    lr_first_order=1e-3,
    # ZO-SGD rate lr = zo_lr_scale / k, k the dimension of the method's perturbation
    # space (the 1/(L k) step of Gaussian-smoothing ZO theory): D for MeZO and LOZO,
    # sum of r * d_out over linear kernels (+ other tuned sizes) for AGZO.
    zo_lr_scale=50.0,
    # Gradient alignment (on the pretrained LM, one task batch) and its control.
    alignment_draws=32,
    control_d_in=64,
    control_d_out=16,
    control_tokens=1024,
    control_rank=4,
    control_draws=256,
    # Claim bars.
    memory_tolerance=0.10,
    first_order_memory_factor=1.5,
)

PRESETS = {
    # CPU, minutes (after the LM exists): what `make reproduce` runs.
    "quick": {},
    # Accelerators: the paper-scale LM, longer fine-tuning, more draws.
    "paper": dict(lm_preset="paper", window=128, batch_size=32, eval_size=2048,
                  forward_budget=20000, num_evals=20, alignment_draws=256),
    # Seconds: what the claim test runs (the 25k-parameter tiny LM).
    "tiny": dict(lm_preset="tiny", window=16, batch_size=8, eval_size=64, agzo_ranks=(1, 4),
                 forward_budget=40, num_evals=2, alignment_draws=32, control_d_in=32,
                 control_d_out=8, control_tokens=512, control_draws=96),
}


def get_config(preset: str | None = None):
  return config_lib.build("zeroth_order", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.one_of(config, "lm_preset", ("quick", "paper", "tiny"))
  c.positive_int(config, "window", minimum=2)
  c.sequence_of(config, "verbalisers", lambda v: isinstance(v, str) and len(v) == 1,
                "single-character strings")
  if len(config.verbalisers) != 2 or len(set(config.verbalisers)) != 2:
    raise config_lib.ConfigError(f"config.verbalisers={config.verbalisers!r} is invalid: "
                                 "expected two distinct characters (English, code)")
  for key in ("batch_size", "eval_size", "power_iters", "lozo_rank", "lozo_interval",
              "forward_budget", "first_order_pass_cost", "num_evals", "alignment_draws",
              "control_d_in", "control_d_out", "control_tokens", "control_rank",
              "control_draws"):
    c.positive_int(config, key)
  c.subset_of(config, "estimators", ESTIMATORS)
  c.sequence_of(config, "agzo_ranks", lambda v: isinstance(v, int) and v >= 1,
                "integers >= 1")
  c.one_of(config, "trainable", ("linear", "all"))
  if not isinstance(config.agzo_two_sided, bool):
    raise config_lib.ConfigError(f"config.agzo_two_sided={config.agzo_two_sided!r} is "
                                 "invalid: expected True or False")
  for key in ("eps", "lr_first_order", "zo_lr_scale", "first_order_memory_factor"):
    c.positive(config, key)
  c.in_range(config, "memory_tolerance", 0.0, 10.0)
  if config.control_rank >= config.control_d_in:
    raise config_lib.ConfigError(f"config.control_rank={config.control_rank!r} is invalid: "
                                 f"expected < control_d_in={config.control_d_in}")
  if config.forward_budget < 2 * config.num_evals:
    raise config_lib.ConfigError(f"config.forward_budget={config.forward_budget!r} is "
                                 f"invalid: expected >= 2 * num_evals={2 * config.num_evals}")
