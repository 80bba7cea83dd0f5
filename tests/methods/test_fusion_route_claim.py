"""FusionRoute at tiny scale: the whole experiment end to end, and the paper path from
local Hugging Face folders.

The tiny run (experts of 25k parameters trained for 20 steps) is checked for what such
a run can show: the experiment writes its four claims, its plots and its routed sample;
a rerun trains nothing; token-level routing with the complementary logit beats the
average single expert on the mixed split; and the router sends most arithmetic tokens
to the arithmetic expert (the most distinct domain). The four paper claims themselves
(FusionRoute beats every baseline, is within 5% of each expert, the complementary logit
matters, the routing pattern) are measured at the quick preset: results/fusion_route/
and docs/fusion_route.md.
"""

import os

import jax
import numpy as np
import pytest

from common import train as train_lib
from common.data import tokenizers
from common.models import hf
from common.models import transformer
from experiments import fusion_route as ex
from experiments.configs import fusion_route as configs
from methods.fusion_route import data


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  config = configs.get_config("tiny")
  workdir = str(tmp_path_factory.mktemp("fusion_route"))
  return config, workdir, ex.run(config, workdir)


def test_the_experiment_runs_end_to_end_and_reruns_nothing(tiny, monkeypatch):
  config, workdir, result = tiny
  assert len(result.claims) == 4
  for plot in result.plots:
    assert os.path.getsize(os.path.join(workdir, plot)) > 0
  assert "routed_sample.png" in result.plots and "[arith]" in result.notes[0]
  for name, value in result.figures.items():
    assert np.isfinite(value), name
  calls = []
  monkeypatch.setattr(train_lib, "_train_steps", lambda *a, **k: calls.append(1))
  again = ex.run(config, workdir)
  assert calls == [] and again.figures == result.figures


def test_routing_helps_and_arithmetic_goes_to_its_expert(tiny):
  config, workdir, result = tiny
  f = result.figures
  experts = [f[f"expert_{d}_mixed"] for d in config.experts]
  assert f["fusion_route_mixed"] < np.mean(experts)
  stage = [os.path.join(workdir, "stages", n) for n in os.listdir(os.path.join(workdir,
                                                                                "stages"))]
  import json
  ev = json.load(open(next(p for p in stage if "evaluation" in p)))["value"]
  arith = data.DOMAINS.index("arith")
  assert ev["by_domain"][arith][list(config.experts).index("arith")] > 0.5


def test_the_paper_path_runs_from_hf_folders(tiny_hf_dir, tmp_path):
  """Experts and base from an HF folder (the session's trained tiny LM, twice), the
  router LM from a smaller HF folder; tokenized with their tokenizer.json."""
  router_dir = str(tmp_path / "router")
  cfg = transformer.llama_config(vocab_size=256, d_model=8, num_layers=1, num_heads=2,
                                 d_ff=16, max_seq_len=256)
  hf.save_hf_checkpoint(router_dir, transformer.init_params(transformer.Transformer(cfg),
                                                            jax.random.PRNGKey(0)), cfg)
  tokenizers.save_byte_tokenizer(router_dir)
  config = configs.get_config("tiny")
  config.paper.expert_checkpoints = (tiny_hf_dir, tiny_hf_dir)
  config.paper.router_checkpoint = router_dir
  config.paper.base_checkpoint = tiny_hf_dir
  for key in ("expert_train", "stage1", "stage2"):
    config[key].train.num_steps = 3
    config[key].warmup_steps = 1
  config.coverage.steps = 3  # stage 1's: its runs reuse their compiled steps
  configs.preflight(config)
  result = ex.run(config, str(tmp_path / "run"))
  assert len(result.claims) == 4
  for key in ("fusion_route_mixed", "direct_finetune_mixed", "task_arithmetic_mixed",
              "co_llm_mixed"):
    assert np.isfinite(result.figures[key]), key
