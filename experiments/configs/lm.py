"""The shared byte-level LM (`common.lm`) trained and evaluated as an experiment.

Launch:
  python -m experiments.main --config=experiments/configs/lm.py:quick --workdir=/tmp/lm
  python -m experiments.main --config=experiments/configs/lm.py:full --workdir=/tmp/lm_full
  python -m experiments.main --config=experiments/configs/lm.py:quick --workdir=/tmp/lm_neox \
      --config.lm.family=neox
  python -m experiments.main --config=experiments/configs/lm.py:tiny --workdir=/tmp/lm_tiny \
      --config.lm.train.num_steps=50 --config.sample_tokens=16

`config.lm` is the LM's own config (`common.lm.get_config`: model, optimiser, and
`lm.train` for the common loop; `lm.train.seed` also seeds the samples). `family` picks
Llama/Qwen style ("llama", with `qk_norm` for Qwen3) or GPT-NeoX/Pythia style ("neox").
The LM is trained (or restored) in `lm_workdir`, by default the workdir itself
(orbax checkpoints under workdir/checkpoints); other experiments reuse it from there.
The remaining keys only evaluate it: bits per byte, samples, the Hugging Face export
(workdir/hf).
"""

from common import config as config_lib
from common import lm as lm_lib

BASE = dict(
    method="lm",
    lm=lm_lib.get_config("quick"),
    lm_workdir="",  # Where the LM is trained or restored; "" = the workdir.
    # Evaluation and samples.
    eval_batch_size=32,
    max_eval_windows=512,
    bpb_margin=0.75,
    sample_prompts=("def ", "The "),
    sample_tokens=80,
    temperature=0.8,
    top_p=0.95,
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    # The quick LM (`common.lm`): 700 steps at batch 12 instead of 32.
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. The full LM: 700 steps x batch 32.
    "full": {"lm": lm_lib.PRESETS["full"]},
    # Accelerators: a ~25M-parameter model with longer context, trained much longer.
    "paper": {"lm": lm_lib.PRESETS["paper"], "max_eval_windows": 4096},
    # Seconds: what the claim test runs (25k parameters; the bar is loosened to 0.9).
    "tiny": {"lm": lm_lib.PRESETS["tiny"], "max_eval_windows": 64, "sample_tokens": 8,
             "bpb_margin": 0.9},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 2.3, "full": 9.2}


def get_config(preset: str | None = None):
  return config_lib.build("lm", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  lm_lib.validate(config, "lm.")
  c.require(config, "lm_workdir", isinstance(config.lm_workdir, str),
            "a directory, or '' for the workdir")
  for key in ("eval_batch_size", "max_eval_windows", "sample_tokens"):
    c.positive_int(config, key)
  c.in_range(config, "bpb_margin", 0.0, 1.0)
  c.sequence_of(config, "sample_prompts", lambda v: isinstance(v, str) and v != "",
                "non-empty strings")
  c.in_interval(config, "temperature", 0.0, 10.0, closed="low")
  c.in_interval(config, "top_p", 0.0, 1.0, closed="high")
