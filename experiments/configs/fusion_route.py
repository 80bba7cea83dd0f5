"""FusionRoute: a router that picks one frozen expert per token and adds its own logits.

Launch:
  python -m experiments.main --config=experiments/configs/fusion_route.py:quick \
      --workdir=results/fusion_route
  python -m experiments.main --config=experiments/configs/fusion_route.py:full \
      --workdir=/tmp/fusion_route_full
  python -m experiments.main --config=experiments/configs/fusion_route.py:tiny \
      --workdir=/tmp/fusion_route_tiny
  python -m experiments.main --config=experiments/configs/fusion_route.py:paper \
      --workdir=/tmp/fusion_route_paper \
      --config.paper.expert_checkpoints='("/models/qwen-math", "/models/qwen-coder")' \
      --config.paper.router_checkpoint=/models/Qwen2.5-0.5B \
      --config.paper.base_checkpoint=/models/Qwen2.5-1.5B

Quick, full and tiny presets train everything here on byte tokens: a base LM of the expert
size on the union of the four domains (`methods/fusion_route/data.py`: stdlib prose,
code, docstrings, generated arithmetic, plus mixed documents of them), one expert per
domain fine-tuned from it (`experts`, `expert_train`), the direct fine-tuning baseline
(the base fine-tuned on the union for as many steps as all experts together), a small
router LM pretrained on the union (`router`, `router_pretrain`), then the routers of
stage 1 (FusionRoute, the no-complementary-logit ablation, Co-LLM's latent routing),
stage 2 (CDPO on FusionRoute's router, `stage2`), and the coverage case: FusionRoute
and its ablation trained again with ROT13 prose in the mixture, a token class no
expert saw (`coverage`).

The `paper` preset reads the experts, the router LM and optionally their common base
from local Hugging Face folders (one family, one tokenizer: `load_hf_checkpoint`);
data are then tokenized with the experts' tokenizer, experts are not trained, weight
merging runs when the experts share an architecture, and task arithmetic and direct
fine-tuning need `paper.base_checkpoint`.
"""

from common import config as config_lib
from common import train as train_lib
from common.models import transformer
from methods.fusion_route import data


def _loop(num_steps, batch_size=32, **kw):
  return train_lib.default_train_config(num_steps=num_steps, batch_size=batch_size,
                                        checkpoint_every=kw.pop("checkpoint_every", 200),
                                        log_every=kw.pop("log_every", 50), progress_bar=False,
                                        **kw)


def _optim(learning_rate, warmup_steps, num_steps, batch_size=32, **loop):
  return dict(learning_rate=learning_rate, warmup_steps=warmup_steps, weight_decay=0.01,
              grad_clip=1.0, train=_loop(num_steps, batch_size, **loop))


BASE = dict(
    method="fusion_route",
    data=dict(seed=0, validation_fraction=0.1, arithmetic_docs=400,
              mixed_train_segments=2000, mixed_validation_segments=400, segment_bytes=160,
              mixed_weight=1.0),
    # One expert per domain, all of this architecture (fine-tuned from a shared base).
    experts=data.DOMAINS,
    expert=dict(family="llama", d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                d_ff=192),
    # The router LM: smaller than every expert.
    router=dict(family="llama", d_model=48, num_layers=3, num_heads=4, num_kv_heads=2,
                d_ff=144),
    seq_len=128,
    base_train=_optim(3e-3, 30, 300),
    expert_train=_optim(2e-3, 20, 300),
    router_pretrain=_optim(3e-3, 30, 300),
    # Stage 1: L = (1 - hard_weight) NLL(soft) + hard_weight NLL(hard) + route_weight CE
    # on informative tokens (the best expert's gold log-prob beats the runner-up's by
    # more than `margin` nats).
    stage1=dict(margin=0.693, route_weight=1.0, hard_weight=0.5,
                **_optim(2e-3, 20, 400)),
    # Stage 2 (CDPO): DPO of the combined policy on (gold, sampled) continuations of
    # training windows, the stage-1 policy as the reference; only the router moves.
    stage2=dict(beta=0.1, label_smoothing=0.0, sft_weight=0.0, num_pairs=512,
                prompt_len=64, completion_len=32, temperature=1.0,
                **_optim(1e-4, 10, 100, batch_size=16)),
    # The coverage case: the mixture plus ROT13 prose at this weight, stage 1 again.
    coverage=dict(rot13_weight=1.0, steps=300),
    task_arithmetic_scales=(0.25, 0.5, 0.75, 1.0),
    # Sequence-level routing averages the routing weights of a window's first tokens.
    seq_route_prefix=16,
    eval=dict(batch_size=32, max_windows=64),
    # Claim bars.
    max_domain_gap=0.05,
    min_coverage_gain=0.05,
    min_routing_agreement=0.5,
    # The paper-scale models, read from local Hugging Face folders ("" / () = not used).
    paper=dict(expert_checkpoints=(), router_checkpoint="", base_checkpoint=""),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    # A third of full's training steps (base, experts, router LM and coverage 100 of 300,
    # stage 1 150 of 400), CDPO on 256 pairs for 50 steps.
    "quick": {"base_train.train.num_steps": 100, "expert_train.train.num_steps": 100,
              "router_pretrain.train.num_steps": 100, "stage1.train.num_steps": 150,
              "coverage.steps": 100, "stage2.num_pairs": 256,
              "stage2.train.num_steps": 50},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts.
    "full": {},
    # Accelerators, or point paper.* at local HF checkpoints for the paper's setting.
    "paper": {"expert": dict(d_model=512, num_layers=8, num_heads=8, num_kv_heads=4,
                             d_ff=1536),
              "router": dict(d_model=256, num_layers=4, num_heads=4, num_kv_heads=2,
                             d_ff=768),
              "seq_len": 512, "data.mixed_train_segments": 20000,
              "base_train": dict(learning_rate=1e-3, warmup_steps=500,
                                 train=dict(num_steps=10000, batch_size=128)),
              "expert_train": dict(learning_rate=5e-4, warmup_steps=200,
                                   train=dict(num_steps=5000, batch_size=128)),
              "router_pretrain": dict(learning_rate=1e-3, train=dict(num_steps=5000,
                                                                     batch_size=128)),
              "stage1": dict(learning_rate=5e-4, train=dict(num_steps=5000, batch_size=128)),
              "stage2": dict(num_pairs=8192, prompt_len=256, completion_len=128,
                             learning_rate=5e-6, train=dict(num_steps=1000, batch_size=64)),
              "coverage.steps": 5000, "eval.max_windows": 512},
    # Seconds: what the claim test runs. Its CPU time is mostly compiling a train step
    # per run, so runs that can share one do: the base trains as many steps as an expert,
    # and the coverage case as many as stage 1 (their steps then compile to the same
    # program, which the test suite's compilation cache loads instead of compiling).
    "tiny": {"data": dict(arithmetic_docs=40, mixed_train_segments=200,
                          mixed_validation_segments=60),
             "expert": dict(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64),
             "router": dict(d_model=16, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=32),
             "seq_len": 32,
             "base_train": dict(learning_rate=1e-2, warmup_steps=5,
                                train=dict(num_steps=20, batch_size=16, checkpoint_every=0)),
             "expert_train": dict(learning_rate=1e-2, warmup_steps=5,
                                  train=dict(num_steps=20, batch_size=16, checkpoint_every=0)),
             "router_pretrain": dict(learning_rate=1e-2, warmup_steps=5,
                                     train=dict(num_steps=20, batch_size=16,
                                                checkpoint_every=0)),
             "stage1": dict(learning_rate=1e-2, warmup_steps=5,
                            train=dict(num_steps=30, batch_size=16, checkpoint_every=0)),
             "stage2": dict(num_pairs=32, prompt_len=16, completion_len=8, warmup_steps=2,
                            train=dict(num_steps=5, batch_size=8, checkpoint_every=0)),
             "coverage.steps": 30, "seq_route_prefix": 4,
             "eval": dict(batch_size=16, max_windows=16)},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 6.1, "full": 26.4}


def get_config(preset: str | None = None):
  return config_lib.build("fusion_route", BASE, PRESETS, preset)


def _validate_model(config, key: str) -> None:
  c, m = config_lib, config[key]
  c.one_of(config, f"{key}.family", transformer.FAMILIES)
  for k in ("d_model", "num_layers", "num_heads", "num_kv_heads", "d_ff"):
    c.positive_int(config, f"{key}.{k}")
  c.require(config, f"{key}.num_kv_heads", m.num_heads % m.num_kv_heads == 0,
            f"a divisor of {key}.num_heads={m.num_heads}")
  c.require(config, f"{key}.num_heads", m.d_model % m.num_heads == 0,
            f"a divisor of {key}.d_model={m.d_model}")


def _validate_optim(config, key: str) -> None:
  c = config_lib
  c.positive(config, f"{key}.learning_rate")
  c.positive_int(config, f"{key}.warmup_steps", minimum=0)
  c.in_interval(config, f"{key}.weight_decay", 0.0, 1.0, closed="low")
  c.positive(config, f"{key}.grad_clip")
  c.check_train(config, f"{key}.train")
  c.require(config, f"{key}.warmup_steps",
            config[key].warmup_steps < config[key].train.num_steps,
            f"a number below {key}.train.num_steps={config[key].train.num_steps}")


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  for key in ("data.arithmetic_docs", "data.mixed_train_segments",
              "data.mixed_validation_segments", "data.segment_bytes", "stage2.num_pairs",
              "stage2.prompt_len", "stage2.completion_len", "coverage.steps",
              "seq_route_prefix", "eval.batch_size", "eval.max_windows"):
    c.positive_int(config, key)
  c.positive_int(config, "seq_len", minimum=2)
  c.in_interval(config, "data.validation_fraction", 0.0, 1.0)
  for key in ("data.mixed_weight", "coverage.rot13_weight", "stage1.margin",
              "stage1.route_weight", "stage2.sft_weight"):
    c.in_interval(config, key, 0.0, 1e6, closed="low")
  c.in_interval(config, "stage1.hard_weight", 0.0, 1.0, closed="both")
  c.positive(config, "stage2.beta")
  c.in_interval(config, "stage2.label_smoothing", 0.0, 0.5, closed="low")
  c.positive(config, "stage2.temperature")
  for key in ("expert", "router"):
    _validate_model(config, key)
  for key in ("base_train", "expert_train", "router_pretrain", "stage1", "stage2"):
    _validate_optim(config, key)
  c.subset_of(config, "experts", data.DOMAINS)
  c.require(config, "experts", len(config.experts) >= 2 or len(config.paper.expert_checkpoints)
            >= 2, "at least 2 domains (E >= 2 experts)")
  c.require(config, "seq_route_prefix", config.seq_route_prefix <= config.seq_len,
            f"at most seq_len={config.seq_len}")
  c.require(config, "stage2.prompt_len",
            config.stage2.prompt_len + config.stage2.completion_len <= 4096,
            "prompt_len + completion_len <= 4096")
  c.sequence_of(config, "task_arithmetic_scales", lambda v: 0 < v <= 2, "scales in (0, 2]")
  c.in_range(config, "max_domain_gap", 0.0, 10.0)
  c.in_range(config, "min_coverage_gain", 0.0, 1.0)
  c.in_range(config, "min_routing_agreement", 0.0, 1.0)
  folders = config.paper.expert_checkpoints
  c.require(config, "paper.expert_checkpoints",
            isinstance(folders, (tuple, list)) and len(folders) != 1
            and all(isinstance(v, str) and v for v in folders),
            "() for experts trained here, or E >= 2 local HF folders")
  for key in ("paper.router_checkpoint", "paper.base_checkpoint"):
    c.require(config, key, isinstance(c.get(config, key), str), "a local path, or ''")
  c.require(config, "paper.router_checkpoint",
            bool(config.paper.router_checkpoint) == bool(config.paper.expert_checkpoints),
            "set together with paper.expert_checkpoints (both or neither)")


def preflight(config) -> None:
  """Checks that the paper checkpoints exist before any work (one-line errors)."""
  import os
  for key in ("paper.router_checkpoint", "paper.base_checkpoint"):
    path = config_lib.get(config, key)
    if path and not os.path.isfile(os.path.join(path, "config.json")):
      config_lib.fail(key, path, "a local HF folder holding config.json")
  for i, path in enumerate(config.paper.expert_checkpoints):
    if not os.path.isfile(os.path.join(path, "config.json")):
      config_lib.fail(f"paper.expert_checkpoints[{i}]", path,
                      "a local HF folder holding config.json")
