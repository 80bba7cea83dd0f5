"""On-policy GRPO through the common loop: rollouts (common/rl/rollout.py) and
`train(..., on_policy=True)`.

The task is trivial on purpose: a tiny random-init Transformer over V = 16 tokens
continues ragged random prompts by up to N = 8 tokens (end token 1), and the reward is
the fraction of the N slots holding the target token 7 (chance: about 1/16). Every run
here is the same 10-step GRPO run (G = 4 completions of B = 4 prompts, adam 1e-2), so
runs compare bit for bit.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common.models import logprobs as lm_logprobs
from common.models import sampling
from common.models import transformer as tfm
from common.rl import grpo
from common.rl import rollout as ro
from common.train import default_train_config, train

V, T0, N, B, G = 16, 5, 8, 4, 4
EOS, TARGET = 1, 7
NUM_STEPS = 10
MODEL = tfm.Transformer(tfm.llama_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4,
                                         num_kv_heads=2, d_ff=48, max_seq_len=32))
CONFIG = grpo.GRPOConfig(group_size=G, kl_coef=1e-2)
OPTIMIZER = optax.adam(1e-2)  # One object: runs reuse the compiled step.


def apply_fn(params, tokens, **kwargs):
  return MODEL.apply({"params": params}, tokens, **kwargs)


def init_fn(key):
  return tfm.init_params(MODEL, key)


REF_PARAMS = init_fn(jax.random.PRNGKey(123))  # A fixed reference (not the policy's init).


def prompt_fn(seed, step):
  """B ragged prompts of 1..T0 random non-end tokens, a pure function of (seed, step)."""
  rng = np.random.default_rng([seed, step])
  lengths = rng.integers(1, T0 + 1, size=B)
  tokens, lengths = sampling.pad_prompts([rng.integers(2, V, size=n).tolist()
                                          for n in lengths], width=T0)
  return tokens, lengths, None


def reward_fn(rollout, cases):
  del cases
  return np.array([np.sum(c == TARGET) / N for c in rollout.completions()])


BATCH_FN = ro.make_grpo_batch_fn(MODEL, REF_PARAMS, prompt_fn, reward_fn, CONFIG,
                                 max_new_tokens=N, eos_id=EOS)
_GRPO_LOSS = grpo.make_loss_fn(apply_fn, CONFIG)


def loss_fn(params, batch, key):
  loss, metrics = _GRPO_LOSS(params, batch, key)
  return loss, {**metrics, "reward": jnp.mean(batch["rewards"])}


def run(workdir, batches=BATCH_FN, **overrides):
  config = default_train_config(num_steps=NUM_STEPS, batch_size=B * G, checkpoint_every=4,
                                keep_checkpoints=2, log_every=1, progress_bar=False)
  config.update(overrides)
  return train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batches, optimizer=OPTIMIZER,
               config=config, workdir=workdir, on_policy=True)


def assert_same_state(got, want):
  """Same step, and bitwise-equal params and optimizer state."""
  assert int(got.step) == int(want.step)
  chex.assert_trees_all_equal((got.params, got.opt_state), (want.params, want.opt_state))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The uninterrupted 10-step run, with every step's metrics."""
  return run(tmp_path_factory.mktemp("reference"))


def test_killed_and_resumed_run_equals_uninterrupted_bitwise(reference, tmp_path):
  calls = []

  def killed_batches(seed, step, params):
    calls.append(step)
    if step == 7:
      raise KeyboardInterrupt  # After update 6, while sampling batch 7 from its params.
    return BATCH_FN(seed, step, params)

  with pytest.raises(KeyboardInterrupt):
    run(tmp_path, batches=killed_batches)
  assert calls == list(range(8))
  resumed = run(tmp_path)  # Restores step 7 (saved on exit) and samples from its params.
  assert [h["step"] for h in resumed.history] == list(range(7, NUM_STEPS))
  assert_same_state(resumed.state, reference.state)
  for got, want in zip(resumed.history, reference.history[7:]):
    assert got == want


def test_grpo_raises_the_mean_reward(reference):
  # Over seeds 0..5 of this run the last 3 steps' mean reward beat the first 3 steps'
  # by 0.25..0.33 (from about 0.06, chance, to 0.30..0.41); the test asks for 0.15.
  rewards = [h["reward"] for h in reference.history]
  assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.15, rewards


def test_first_update_is_on_policy(reference):
  first = reference.history[0]
  assert first["clip_frac"] == 0.0 and first["dual_clip_frac"] == 0.0
  assert abs(first["ratio_mean"] - 1.0) < 1e-6 and abs(first["approx_kl"]) < 1e-6
  # Token by token: the loss's log-probs at the sampling params are old_logp.
  params = init_fn(jax.random.split(jax.random.PRNGKey(0))[0])  # train's init key, seed 0
  batch = BATCH_FN(0, 0, params)
  logits = jax.jit(apply_fn)(params, batch["tokens"][:, :-1], left_pad=batch["left_pad"])
  logp = lm_logprobs.token_logprobs(logits, batch["tokens"][:, 1:])
  mask = np.asarray(batch["mask"]) > 0
  np.testing.assert_allclose(np.asarray(logp)[mask], np.asarray(batch["old_logp"])[mask],
                             atol=1e-5)
  _, metrics = grpo.policy_loss(logp, batch["old_logp"], batch["advantages"], batch["mask"])
  assert float(metrics["clip_frac"]) == 0.0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_log_probs_equal_an_unpadded_forward_pass(temperature):
  params = jax.tree.map(lambda p: p * 10 if p.ndim == 2 else p, init_fn(jax.random.PRNGKey(5)))
  prompts, lengths, _ = prompt_fn(3, 0)
  r = ro.rollout(MODEL, params, prompts, lengths, jax.random.PRNGKey(1), group_size=G,
                 max_new_tokens=N, temperature=temperature, eos_id=EOS)
  tokens, left_pad, plen, n = map(np.asarray, (r.tokens, r.left_pad, r.prompt_lengths,
                                                r.lengths))
  assert tokens.shape == (B * G, T0 + N) and r.mask.shape == (B * G, T0 + N - 1)
  np.testing.assert_array_equal(plen, np.repeat(lengths, G))  # Groups are contiguous.
  np.testing.assert_array_equal(tokens[:, :T0], np.repeat(prompts, G, axis=0))
  assert 0 < n.min() and n.min() < N  # Ragged completions: some rows ended at eos.
  # Reference: each row unpadded (shifted to start at slot 0, pad after it), no left_pad.
  shifted = np.stack([np.roll(row, -p) for row, p in zip(tokens, left_pad)])
  logits = jax.jit(apply_fn)(params, jnp.asarray(shifted)) / temperature
  want_all = np.asarray(lm_logprobs.next_token_logprobs(logits, jnp.asarray(shifted)))
  mask, old, sampler = map(np.asarray, (r.mask, r.old_logp, r.sampler_logp))
  for b in range(B * G):
    start = T0 - 1  # mask entry t scores tokens[t + 1]: the completion starts at t = T0 - 1.
    want_mask = np.zeros(T0 + N - 1)
    want_mask[start:start + n[b]] = 1
    np.testing.assert_array_equal(mask[b], want_mask)
    assert tokens[b, T0 + n[b] - 1] == EOS or n[b] == N
    np.testing.assert_array_equal(tokens[b, T0 + n[b]:], 0)  # pad_id after the end
    want = want_all[b, start - left_pad[b]:start - left_pad[b] + n[b]]
    np.testing.assert_allclose(old[b, start:start + n[b]], want, atol=2e-5)
    assert np.all(old[b][want_mask == 0] == 0)
    if temperature == 1.0:  # The sampler's cached log-probs agree (they are temperature 1).
      np.testing.assert_allclose(sampler[b, start:start + n[b]], want, atol=2e-5)
  ref = ro.reference_logprobs(MODEL, params, r, temperature)
  # Same forward pass in two programs (reference_logprobs' jit vs rollout's rescoring): equal
  # up to float32 summation order, amplified by the x10 weights (2e-6 apart across ISAs).
  np.testing.assert_allclose(np.asarray(ref), old, rtol=0, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(ref)[mask == 0], 0.0)


def test_rollout_without_rescoring_uses_the_samplers_numbers():
  params = init_fn(jax.random.PRNGKey(5))
  prompts, lengths, _ = prompt_fn(3, 0)
  kw = dict(group_size=G, max_new_tokens=N, eos_id=EOS)
  full = ro.rollout(MODEL, params, prompts, lengths, jax.random.PRNGKey(1), **kw)
  fast = ro.rollout(MODEL, params, prompts, lengths, jax.random.PRNGKey(1), rescore=False, **kw)
  np.testing.assert_array_equal(fast.tokens, full.tokens)
  np.testing.assert_array_equal(fast.old_logp, fast.sampler_logp * fast.mask)
  np.testing.assert_allclose(fast.old_logp, full.old_logp, atol=2e-5)
  np.testing.assert_allclose(fast.entropies, full.entropies, atol=2e-5)
  with pytest.raises(ValueError, match="rescore=False needs temperature 1"):
    ro.rollout(MODEL, params, prompts, lengths, jax.random.PRNGKey(1), rescore=False,
               temperature=0.7, **kw)


def test_bad_input_is_one_line_and_early():
  with pytest.raises(ValueError, match="ref_params is None but config.kl_coef"):
    ro.make_grpo_batch_fn(MODEL, None, prompt_fn, reward_fn, CONFIG, max_new_tokens=N,
                          eos_id=EOS)
  bad_rewards = ro.make_grpo_batch_fn(MODEL, REF_PARAMS, prompt_fn, lambda r, c: np.zeros(3),
                                      CONFIG, max_new_tokens=N, eos_id=EOS)
  with pytest.raises(ValueError, match=r"reward_fn returned shape \(3,\); expected \(16,\)"):
    bad_rewards(0, 0, REF_PARAMS)
  prompts, lengths, _ = prompt_fn(0, 0)
  with pytest.raises(ValueError, match="prompt_lengths"):
    ro.rollout(MODEL, REF_PARAMS, prompts, lengths[:2], jax.random.PRNGKey(0), group_size=G,
               max_new_tokens=N, eos_id=EOS)
  with pytest.raises(ValueError, match="prompts"):
    ro.rollout(MODEL, REF_PARAMS, prompts + V, lengths, jax.random.PRNGKey(0), group_size=G,
               max_new_tokens=N, eos_id=EOS)
  with pytest.raises(ValueError, match="temperature"):
    ro.rollout(MODEL, REF_PARAMS, prompts, lengths, jax.random.PRNGKey(0), group_size=G,
               max_new_tokens=N, temperature=0.0, eos_id=EOS)
