"""AdaThink-Med: uncertainty-shaped length rewards in two-stage GRPO, against length baselines.

Launch:
  python -m experiments.main --config=experiments/configs/adathink.py:quick \
      --workdir=results/adathink
  python -m experiments.main --config=experiments/configs/adathink.py:full \
      --workdir=/tmp/adathink_full
  python -m experiments.main --config=experiments/configs/adathink.py:tiny \
      --workdir=/tmp/adathink_tiny
  python -m experiments.main --config=experiments/configs/adathink.py:paper \
      --workdir=/tmp/adathink_paper --config.paper.medqa_path=/data/medqa/test.jsonl \
      --config.paper.hf_checkpoint=/models/Qwen2.5-0.5B

The base model is the shared byte-level LM (`config.lm`, `common.lm`), restored or
trained in `lm_workdir` (empty: the `lm` experiment's run beside the workdir). It is
fine-tuned with SFT on full reasoning chains of the generated diagnosis task
(`config.data`, `config.sft`), then trained with GRPO (`config.grpo`, through the
common loop with `config.grpo.train`): stage 1 is vanilla GRPO for `stage1_steps`;
every variant in `variants` then continues from the stage-1 parameters for
`stage2_steps` with its own reward (`config.rewards.<variant>`: the registered reward
name, its loss aggregation mode, its hyperparameters). Each policy is evaluated by
greedy decoding on the held-out cases.

The `paper` preset points at the paper's setting: a MedQA-style JSONL file
(`paper.medqa_path`) and a Hugging Face Qwen/Llama checkpoint (`paper.hf_checkpoint`),
read from local paths by `methods.adathink.load_medqa_jsonl` and
`common.models.hf.load_hf_checkpoint` (the quick and tiny presets leave both empty and
use the generated task and the shared LM: the quick LM at quick, the full LM at full).
"""

from common import config as config_lib
from common import lm as lm_lib
from common import train as train_lib
from common.rl import grpo as grpo_lib
from methods.adathink import reward as reward_lib


def _variant(reward: str, loss_agg: str = "token-mean", **hparams):
  return dict(reward=reward, loss_agg=loss_agg, **hparams)


ADATHINK_HPARAMS = dict(alpha=0.5, top_frac=0.2, quantile=0.7, theta_momentum=0.9,
                        len_momentum=0.9, format_weight=0.5, length_weight=0.5, ngram=40,
                        repetition=0.05, fixed_theta=-1.0)

BASE = dict(
    method="adathink",
    lm=lm_lib.get_config("full"),
    lm_workdir="",
    # The generated diagnosis task (methods/adathink/data.py).
    data=dict(seed=0, num_findings=8, num_conditions=16, num_modifiers=3, num_diagnoses=8,
              max_k=6, cases_per_k=128, holdout=0.25),
    # SFT warm-up on full chains (AdamW, warmup + cosine, as common.lm). A fraction
    # `answer_only_fraction` of rows has an empty think block instead: the issue's
    # warm-up is all full chains (0.0), but a 0.9M-parameter byte model trained so
    # never samples an empty think block (p ~ 4e-6 per rollout, and its token entropy
    # collapses to ~1e-4 nats), so GRPO could never find one; see docs/adathink.md.
    sft=dict(learning_rate=2e-3, warmup_steps=50, weight_decay=0.01, grad_clip=1.0,
             answer_only_fraction=0.25,
             train=train_lib.default_train_config(num_steps=600, batch_size=32,
                                                  checkpoint_every=200, log_every=100,
                                                  progress_bar=False)),
    # GRPO (common/rl): G rollouts of `prompts_per_step` prompts per update.
    grpo=dict(group_size=8, prompts_per_step=8, max_new_tokens=112, temperature=1.0,
              top_p=0.99, clip_low=0.2, clip_high=0.28, dual_clip=3.0, kl_coef=1e-2,
              learning_rate=2e-4, grad_clip=1.0,
              train=train_lib.default_train_config(batch_size=64, checkpoint_every=50,
                                                   log_every=10, progress_bar=False)),
    # Stage 1 is short: longer vanilla GRPO collapses the tiny model's entropy (all
    # groups correct, 1e-3 nats per token after 50 steps) and stage 2 has nothing to explore.
    stage1_steps=15,
    stage2_steps=60,
    # Stage-2 rows. "vanilla" continues stage 1 for as many steps (the reference row).
    variants=("vanilla", "adathink", "adathink_fixed_theta", "adathink_seq_mean",
              "uniform_length", "uniform_length_strong", "lcpo", "shorter_better"),
    rewards=dict(
        vanilla=_variant("vanilla", accuracy_weight=0.9, format_weight=0.1),
        adathink=_variant("adathink", **ADATHINK_HPARAMS),
        adathink_fixed_theta=_variant("adathink", **{**ADATHINK_HPARAMS, "fixed_theta": 0.5}),
        adathink_seq_mean=_variant("adathink", "seq-mean-token-mean", **ADATHINK_HPARAMS),
        uniform_length=_variant("uniform_length", format_weight=0.5, length_weight=0.5),
        uniform_length_strong=_variant("uniform_length", format_weight=0.5, length_weight=1.5),
        lcpo=_variant("lcpo", format_weight=0.5, length_weight=0.5, target_length=48),
        shorter_better=_variant("shorter_better", format_weight=0.5, length_weight=0.5),
    ),
    # Evaluation: greedy decoding of the held-out cases.
    eval_batch_size=64,
    # Which depths are "easy" and "hard" in the claims.
    easy_max_k=1,
    hard_min_k=4,
    # Claim bars.
    min_token_reduction=1.5,
    max_accuracy_drop=0.02,
    min_empty_think_gap=0.5,
    # The paper-scale data and model (read from local paths; "" = not used).
    paper=dict(medqa_path="", hf_checkpoint=""),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]), after
    # the LM exists. The quick LM; SFT 300 steps of 600; GRPO 4 prompts x 8 per step (of
    # 8 x 8), stage 2 30 steps of 60 for the four rows the claims read.
    "quick": {"lm": lm_lib.PRESETS["quick"], "sft.train.num_steps": 300,
              "grpo": dict(prompts_per_step=4, train=dict(batch_size=32)),
              "stage2_steps": 30,
              "variants": ("vanilla", "adathink", "uniform_length", "uniform_length_strong")},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. BASE (the full LM, SFT and GRPO) with the stage-2
    # variants the claims read; with all eight (the ablations and LCPO too) it took 32
    # minutes pinned to one loaded core, over the cap. The ablations are in `paper`.
    "full": {"variants": ("vanilla", "adathink", "uniform_length", "uniform_length_strong")},
    # Accelerators: the larger shared LM, more cases, longer stages; point paper.* at
    # local MedQA JSONL and an HF checkpoint to run the paper's setting.
    "paper": {"lm": lm_lib.PRESETS["paper"], "data.cases_per_k": 1024,
              "sft.train": dict(num_steps=6000, batch_size=128),
              "grpo": dict(prompts_per_step=32, max_new_tokens=256,
                           train=dict(batch_size=256)),
              "stage1_steps": 1000, "stage2_steps": 1000},
    # Seconds: what the claim test runs (the 25k-parameter tiny LM, short chains).
    "tiny": {"lm": lm_lib.PRESETS["tiny"],
             "data": dict(num_conditions=8, max_k=2, cases_per_k=16),
             "sft": dict(warmup_steps=10, learning_rate=1e-2,
                         train=dict(num_steps=150, batch_size=16, checkpoint_every=0)),
             "grpo": dict(group_size=4, prompts_per_step=2, max_new_tokens=40,
                          learning_rate=1e-3, train=dict(batch_size=8, checkpoint_every=0)),
             "stage1_steps": 3, "stage2_steps": 3,
             "variants": ("vanilla", "adathink", "uniform_length"),
             "easy_max_k": 0, "hard_min_k": 2, "eval_batch_size": 32},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 5.1, "full": 24.3}


def get_config(preset: str | None = None):
  return config_lib.build("adathink", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  lm_lib.validate(config, "lm.")
  c.require(config, "lm_workdir", isinstance(config.lm_workdir, str),
            "a directory, or '' for the default")
  for key in ("data.num_findings", "data.max_k", "data.cases_per_k", "sft.warmup_steps",
              "grpo.prompts_per_step", "grpo.max_new_tokens", "stage1_steps",
              "stage2_steps", "eval_batch_size"):
    c.positive_int(config, key, minimum=0 if key == "sft.warmup_steps" else 1)
  for key in ("data.num_conditions", "data.num_modifiers", "data.num_diagnoses",
              "grpo.group_size"):
    c.positive_int(config, key, minimum=2)
  c.in_interval(config, "data.holdout", 0.0, 1.0)
  c.in_interval(config, "sft.answer_only_fraction", 0.0, 1.0, closed="both")
  for key in ("sft.learning_rate", "sft.grad_clip", "grpo.learning_rate", "grpo.grad_clip",
              "grpo.temperature", "min_token_reduction", "min_empty_think_gap"):
    c.positive(config, key)
  c.in_interval(config, "grpo.top_p", 0.0, 1.0, closed="high")
  for key in ("grpo.clip_low", "grpo.clip_high"):
    c.in_interval(config, key, 0.0, 1.0)
  c.require(config, "grpo.dual_clip", config.grpo.dual_clip > 1.0, "a number > 1")
  c.in_range(config, "grpo.kl_coef", 0.0, 10.0)
  c.in_range(config, "max_accuracy_drop", 0.0, 1.0)
  c.check_train(config, "sft.train")
  c.check_train(config, "grpo.train")
  c.require(config, "sft.warmup_steps", config.sft.warmup_steps < config.sft.train.num_steps,
            f"a number below sft.train.num_steps={config.sft.train.num_steps}")
  rows = config.grpo.prompts_per_step * config.grpo.group_size
  c.require(config, "grpo.train.batch_size", config.grpo.train.batch_size == rows,
            f"grpo.prompts_per_step x grpo.group_size = {rows}")
  c.subset_of(config, "variants", tuple(config.rewards))
  c.require(config, "variants", "vanilla" in config.variants and "adathink" in config.variants,
            "variants including 'vanilla' (the reference) and 'adathink'")
  for name in config.rewards:
    c.one_of(config, f"rewards.{name}.reward", tuple(reward_lib.REWARDS))
    c.one_of(config, f"rewards.{name}.loss_agg", grpo_lib.LOSS_AGG_MODES)
  c.require(config, "hard_min_k", config.easy_max_k < config.hard_min_k <= config.data.max_k,
            f"a depth above easy_max_k={config.easy_max_k} and at most data.max_k")
  for key in ("paper.medqa_path", "paper.hf_checkpoint"):
    c.require(config, key, isinstance(config.get(key.split(".")[0])[key.split(".")[1]], str),
              "a local path, or '' for the generated task and the shared LM")
