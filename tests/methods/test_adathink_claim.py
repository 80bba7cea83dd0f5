"""Tiny-scale claim tests for AdaThink-Med, on the session's 25k-parameter tiny LM.

Checked here: (1) the whole experiment (SFT -> stage-1 vanilla GRPO -> stage-2 variants
through the common loop -> greedy evaluation) runs at the tiny preset, writes its claims,
table and plots, and a rerun trains and evaluates nothing again; (2) on real rollouts of
the SFT model, the adaptive reward does what the paper's mechanism needs: among correct
answers to questions it calls easy, shorter ones earn more, and among wrong answers to
questions it calls hard, longer ones earn more, while the uniform penalty prefers shorter
answers everywhere. The token-reduction, accuracy, bimodality and hard-case claims are
NOT asserted: three GRPO steps of a 25k-parameter model say nothing about them; they are
measured at the quick preset (results/adathink/result.json, docs/adathink.md).
"""

import os

import numpy as np
import pytest

from common import train as train_lib
from experiments import adathink as ex
from experiments.configs import adathink as configs
from methods.adathink import reward as reward_lib
from methods.adathink import training


@pytest.fixture(scope="module")
def tiny(tiny_lm_dir, tmp_path_factory):
  config = configs.get_config("tiny")
  config.lm_workdir = tiny_lm_dir
  workdir = str(tmp_path_factory.mktemp("adathink"))
  result = ex.run(config, workdir)
  return config, workdir, result


def test_the_experiment_runs_end_to_end_and_reruns_nothing(tiny, monkeypatch):
  config, workdir, result = tiny
  assert len(result.claims) == 4
  for name in ("sft", "stage1", *config.variants):
    assert np.isfinite(result.figures[f"{name}_tokens"])
  for plot in result.plots:
    assert os.path.getsize(os.path.join(workdir, plot)) > 0
  table = open(os.path.join(workdir, "per_depth.md")).read()
  assert "| adathink | token-mean |" in table          # each row's loss aggregation
  calls = []
  monkeypatch.setattr(train_lib, "_train_steps", lambda *a, **k: calls.append(1))
  monkeypatch.setattr(training, "evaluate", lambda *a, **k: calls.append(1))
  again = ex.run(config, workdir)
  assert calls == [] and again.figures == result.figures


def test_the_adaptive_reward_shortens_easy_and_lengthens_hard_answers(tiny):
  """On two real rollout batches of the tiny SFT model (the first sets theta and L_exp;
  half of the groups are marked correct, as the tiny model rarely is), the
  length score falls with the confidence-weighted relative length x = L / L_exp
  (0.5 + 0.5 c) for correct answers to easy questions, rises with it for wrong answers
  to hard ones, and is 0 otherwise; the uniform penalty falls with L for everyone."""
  from common.rl import rollout as rollout_lib
  config, workdir, _ = tiny
  setup = ex.make_setup(config, workdir)
  params = ex.sft(setup, config, workdir)
  prompt_fn = training.make_prompt_fn(setup.train_cases, 16, setup.prompt_width)
  state = reward_lib.init_state()
  for step in range(2):
    prompts, lengths, cases = prompt_fn(7, step)
    r = rollout_lib.rollout(setup.model, params, prompts, lengths,
                            rollout_lib.rollout_key(7, step), group_size=4,
                            max_new_tokens=config.grpo.max_new_tokens,
                            eos_id=setup.codec.eos_id)
    inputs = training.reward_inputs(r, cases, 4)
    # The tiny model is almost never right: mark the first half of the groups correct so
    # that both branches see real lengths and entropies.
    inputs = inputs._replace(correct=np.where(np.arange(64) < 32, 1.0, inputs.correct))
    l_exp = np.asarray(state.l_exp)
    _, state, info = reward_lib.adathink_reward(inputs, state, group_size=4)
  n = np.asarray(inputs.mask).sum(1)
  y, easy = np.asarray(inputs.correct) > 0, np.asarray(info["easy"])
  x = n / (l_exp[np.where(easy, 0, 1)] + 1e-6) * (0.5 + 0.5 * np.asarray(info["confidence"]))
  s = np.asarray(info["length_score"])
  for sel, sign in ((y & easy, -1), (~y & ~easy, 1)):
    order = np.argsort(x[sel])
    assert (sign * np.diff(s[sel][order]) >= -1e-6).all()
  assert (s[(y & ~easy) | (~y & easy)] == 0).all()
  assert (y & easy).any() and (~y & ~easy).any()     # both branches were exercised
  uniform, _, _ = reward_lib.uniform_length_reward(inputs, group_size=4)
  penalty = np.asarray(uniform) - y - 0.5 * np.asarray(inputs.format_ok)
  np.testing.assert_allclose(penalty, -0.5 * n / config.grpo.max_new_tokens, atol=1e-6)
