"""Tests of methods/adathink/training.py (SFT rows, GRPO prompts and rewards, evaluation) and
of the AdaThink reward's state carried through the common loop (kill and resume)."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common import lm as lm_lib
from common import train as train_lib
from common.data.tokenizers import ByteTokenizer
from common.rl import grpo as grpo_lib
from common.rl import rollout as rollout_lib
from common.rl.rollout import Rollout
from methods.adathink import data
from methods.adathink import reward as reward_lib
from methods.adathink import training

TASK = data.make_task(0, cases_per_k=8, max_k=3)


def test_sft_rows_hold_prompt_then_masked_full_chain_and_eos():
  width = training.sft_width(TASK.kb, TASK.train)
  batch = training.sft_batch(TASK, 3, 5, 12, width)
  again = training.sft_batch(TASK, 3, 5, 12, width)
  np.testing.assert_array_equal(batch["tokens"], again["tokens"])   # pure in (seed, step)
  assert batch["tokens"].shape == (12, width) and batch["mask"].shape == (12, width - 1)
  prompts = {c.prompt: c for c in TASK.train}
  for row, mask in zip(batch["tokens"], batch["mask"]):
    text = bytes(row[row > 0].astype(np.uint8).tolist()).decode()
    prompt = text[:text.index("\n") + 1]
    case = prompts[prompt]
    targets = bytes(row[1:][mask > 0].astype(np.uint8).tolist()).decode()
    assert targets == data.sft_target(TASK.kb, case) + "\n"    # response and eos only


def test_prompt_fn_is_pure_depth_balanced_and_left_padded():
  width = training.prompt_width(TASK.train)
  prompt_fn = training.make_prompt_fn(TASK.train, 64, width)
  tokens, lengths, cases = prompt_fn(1, 2)
  np.testing.assert_array_equal(tokens, prompt_fn(1, 2)[0])
  assert tokens.shape == (64, width)
  for row, n, case in zip(np.asarray(tokens), np.asarray(lengths), cases):
    assert (row[:width - n] == 0).all()
    assert bytes(row[width - n:].astype(np.uint8).tolist()).decode() == case.prompt
  counts = np.bincount([c.k for c in cases], minlength=4)
  assert counts.min() >= 8                      # every depth drawn (uniform k, 64 draws)


def _fake_rollout(responses, group_size, n=48):
  """A Rollout whose completions are `responses` (eos-terminated), with made-up entropies."""
  rows = len(responses)
  ids = [list(r.encode()) + [training.BYTES.eos_id] for r in responses]
  comp = np.zeros((rows, n), np.int32)
  cmask = np.zeros((rows, n), bool)
  for b, seq in enumerate(ids):
    comp[b, :len(seq)], cmask[b, :len(seq)] = seq, True
  prompt = np.full((rows, 4), 65, np.int32)
  tokens = np.concatenate([prompt, comp], 1)
  ent = np.where(cmask, np.linspace(0.1, 1.0, rows)[:, None], 0.0).astype(np.float32)
  aligned = lambda a: np.concatenate([np.zeros((rows, 3), a.dtype), a], 1)
  zeros = jnp.zeros((rows, tokens.shape[1] - 1))
  return Rollout(tokens=jnp.asarray(tokens), left_pad=jnp.zeros(rows, jnp.int32),
                 prompt_lengths=jnp.full(rows, 4), lengths=jnp.asarray(cmask.sum(1)),
                 completion_mask=jnp.asarray(cmask), mask=jnp.asarray(aligned(cmask), float),
                 old_logp=zeros, sampler_logp=zeros, entropies=jnp.asarray(aligned(ent)))


def test_reward_inputs_score_decoded_responses_per_group():
  a, b = TASK.test[0], TASK.test[-1]
  right_a, wrong_b = data.answer_only(a), "<think>x</think>"
  responses = [right_a, "junk", wrong_b, data.sft_target(TASK.kb, b)]
  r = _fake_rollout(responses, 2)
  inputs = training.reward_inputs(r, [a, b], group_size=2)
  np.testing.assert_array_equal(inputs.correct, [1, 0, 0, 1])
  np.testing.assert_array_equal(inputs.format_ok, [1, 0, 0, 1])
  np.testing.assert_array_equal(np.asarray(inputs.mask).sum(1),
                                [len(x) + 1 for x in responses])   # eos counted
  assert training.decode_response(r.completions()[1]) == "junk"
  reward_fn = training.make_reward_fn("adathink", 2)
  rewards, state = reward_fn(r, [a, b], reward_lib.init_state())
  assert rewards.shape == (4,) and bool(state.theta_set)
  want, _, _ = reward_lib.adathink_reward(inputs, reward_lib.init_state(), group_size=2)
  np.testing.assert_allclose(rewards, want)


def test_summary_counts_empty_think_per_depth():
  ev = training.Evaluation(k=np.array([0, 0, 2]), correct=np.array([True, False, True]),
                           formatted=np.array([True, True, True]), tokens=np.array([10, 20, 30]),
                           think_chars=np.array([0, 5, 9]), responses=["", "", ""])
  s = training.summarize(ev)
  assert s["by_k"][0] == {"accuracy": 0.5, "tokens": 15.0, "empty_think": 0.5,
                          "formatted": 1.0, "count": 2}
  assert s["all"]["empty_think"] == pytest.approx(1 / 3)


# --------------------------------------------------------------- GRPO with the reward state


@pytest.fixture(scope="module")
def grpo_setup(tiny_lm):
  config = lm_lib.get_config("tiny")
  model = tiny_lm.model
  width = training.prompt_width(TASK.train)
  gconf = grpo_lib.GRPOConfig(group_size=4)
  batch_fn = rollout_lib.make_grpo_batch_fn(
      model, tiny_lm.params, training.make_prompt_fn(TASK.train, 2, width),
      training.make_reward_fn("adathink", 4), gconf, max_new_tokens=24,
      eos_id=training.BYTES.eos_id, stateful_reward=True)
  loss_fn = grpo_lib.make_loss_fn(lambda p, t, **kw: model.apply({"params": p}, t, **kw), gconf)
  del config
  return tiny_lm.params, batch_fn, loss_fn


OPTIMIZER = optax.adam(1e-3)


def _grpo(setup, workdir, num_steps=4, batches=None):
  params, batch_fn, loss_fn = setup
  config = train_lib.default_train_config(num_steps=num_steps, batch_size=8,
                                          checkpoint_every=2, log_every=1, progress_bar=False)
  return train_lib.train(init_fn=lambda key: params, loss_fn=loss_fn,
                         batch_fn=batches or batch_fn, optimizer=OPTIMIZER, config=config,
                         workdir=workdir, on_policy=True, carry=reward_lib.init_state())


def test_reward_state_is_carried_and_resumes_bitwise(grpo_setup, tmp_path):
  whole = _grpo(grpo_setup, tmp_path / "whole")
  assert bool(whole.state.carry.theta_set)
  assert "reward" in whole.history[0]
  _, batch_fn, _ = grpo_setup

  def killed(seed, step, params, state):
    if step == 3:
      raise KeyboardInterrupt
    return batch_fn(seed, step, params, state)

  with pytest.raises(KeyboardInterrupt):
    _grpo(grpo_setup, tmp_path / "killed", batches=killed)
  resumed = _grpo(grpo_setup, tmp_path / "killed")
  chex.assert_trees_all_equal(resumed.state, whole.state)


def test_stateful_batch_fn_arity_is_checked(grpo_setup):
  params, batch_fn, _ = grpo_setup
  with pytest.raises(TypeError, match="batch_fn takes 4 arguments with stateful_reward=True"):
    batch_fn(0, 0, params)


# --------------------------------------------------------------- the paper-scale path


def _write_medqa(tmp_path):
  """A MedQA-style JSONL file (the HF checkpoint comes from the `tiny_hf_dir` fixture)."""
  questions = [{"question": f"Case {i}: which?", "options": {"A": "x", "B": "y"},
                "answer_idx": "AB"[i % 2]} for i in range(12)]
  path = tmp_path / "medqa.jsonl"
  path.write_text("\n".join(json.dumps(q) for q in questions) + "\n")
  return str(path)


def test_paper_path_runs_on_a_local_hf_checkpoint_and_medqa_jsonl(tiny_hf_dir, tmp_path):
  from experiments import adathink as experiment
  from experiments.configs import adathink as configs
  folder, medqa = tiny_hf_dir, _write_medqa(tmp_path)
  config = configs.get_config("tiny")
  config.paper.hf_checkpoint, config.paper.medqa_path = folder, medqa
  config.variants = ("vanilla", "adathink")
  config.stage1_steps = config.stage2_steps = 1
  config.data.holdout = 0.5
  setup = experiment.make_setup(config, str(tmp_path / "run"))
  assert setup.kb is None and setup.codec.eos_id == 10
  assert {q.answer_text for q in setup.train_cases + setup.test_cases} == {"A", "B"}
  result = experiment.run(config, str(tmp_path / "run"))
  assert {c.claim for c in result.claims}
  assert np.isfinite(result.figures["adathink_tokens"])
