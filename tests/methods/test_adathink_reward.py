"""Unit tests of methods/adathink/reward.py against hand-computed cases and a transcription
of the public code (shaohao011/AdaThinkMed, verl/workers/reward/length_reward_func.py)."""

from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods.adathink import reward as rw


# --------------------------------------------------------------- the public code, in numpy


def _public_repetition(tokens, gen_len, penalty, ngram_size, only_start):
  """compute_repetition_penalty, verbatim but on Python ints."""
  gen = list(tokens[:gen_len])
  repeated, ngrams = [], set()
  for start_idx, ng in enumerate(zip(*[gen[i:] for i in range(ngram_size)])):
    if ng in ngrams:
      repeated.append(start_idx)
    ngrams.add(ng)
  vec = [0] * gen_len
  curr_end_idx = -1
  for start_idx in repeated:
    if not only_start or start_idx > curr_end_idx:
      for i in range(start_idx, min(start_idx + ngram_size, gen_len)):
        vec[i] = penalty
    curr_end_idx = start_idx + ngram_size
  return 0.0 if gen_len == 0 else sum(vec) / gen_len


def _public_reward(entropies, lengths, tokens, acc, fmt, index, meta, alpha=0.5, topk=0.2,
                   thr=0.7, n=40):
  """entropy_length_reward_question_level on numpy arrays (same control flow)."""
  raw = []
  for i in range(len(acc)):
    cur = entropies[i][:lengths[i]]
    k = max(1, int(len(cur) * topk))
    raw.append(np.sort(cur)[::-1][:k].mean())
  log_e = np.log1p(np.array(raw, np.float32))
  norm = np.clip((log_e - log_e.min()) / (log_e.max() - log_e.min() + 1e-8), 0, 1)
  stats = defaultdict(lambda: [0, 0.0])
  for i in range(len(acc)):
    y = 1.0 if acc[i] > 0 else 0.0
    stats[index[i]][0] += 1
    stats[index[i]][1] += y * (1.0 - norm[i]) * alpha + (1 - alpha) * y
  diff = {g: 1.0 - s / c for g, (c, s) in stats.items()}
  cur_theta = np.quantile(list(diff.values()), thr)
  meta["theta"] = cur_theta if "theta" not in meta else 0.9 * meta["theta"] + 0.1 * cur_theta
  bins = meta.setdefault("bins", [0.0, 0.0])
  sums, counts, out = [0.0, 0.0], [0, 0], []
  for i in range(len(acc)):
    d, length, c = diff[index[i]], int(lengths[i]), 1 - norm[i]
    b = 0 if d < meta["theta"] else 1
    sums[b] += length
    counts[b] += 1
    l_exp = (bins[b] if bins[b] > 0 else length) + 1e-6
    s = 0.0
    if acc[i] > 0 and b == 0:
      s = max(0, 1 - length / l_exp * (0.5 + 0.5 * c))
    elif acc[i] == 0 and b == 1:
      s = min(1, length / l_exp * (0.5 + 0.5 * c) - 1)
    rep = _public_repetition(list(tokens[i]), length, -0.05, n, True)
    out.append(acc[i] + 0.5 * fmt[i] + 0.5 * (s + rep))
  for j in range(2):
    if counts[j]:
      avg = sums[j] / counts[j]
      bins[j] = avg if bins[j] == 0.0 else 0.9 * bins[j] + 0.1 * avg
  return np.array(out), meta


# --------------------------------------------------------------- pieces, by hand


def test_uncertainty_top_fraction_by_hand():
  ent = jnp.array([[5.0, 1.0, 3.0, 2.0, 4.0, 9.0], [0.5, 0.1, 0.0, 0.0, 0.0, 0.0],
                   [1.0] * 6])
  mask = jnp.array([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0], [0] * 6])
  # row 0: L=5, k=floor(2)=2 of {5,1,3,2,4} (9 is masked) -> (5+4)/2; row 1: k=max(1,0)=1.
  np.testing.assert_allclose(rw.uncertainty(ent, mask, 0.4), [4.5, 0.5, 0.0])
  np.testing.assert_allclose(rw.uncertainty(ent, mask, 1.0), [3.0, 0.3, 0.0], rtol=1e-6)


def test_normalize_log_minmax_by_hand():
  u = jnp.array([0.0, 1.0, 3.0])
  logs = np.log1p([0.0, 1.0, 3.0])
  want = (logs - logs[0]) / (logs[2] - logs[0] + 1e-8)
  np.testing.assert_allclose(rw.normalize_log_minmax(u), want, rtol=1e-6)
  np.testing.assert_allclose(rw.normalize_log_minmax(jnp.array([2.0, 2.0])), [0.0, 0.0])


def test_difficulty_by_hand():
  correct = jnp.array([1, 1, 0, 1, 0, 0])
  e = jnp.array([0.0, 1.0, 0.3, 0.5, 0.0, 0.0])
  # q0: 1 - (0.5*1 + 0.5 + 0.5*0 + 0.5 + 0) / 3 = 1 - 1.5/3 = 0.5
  # q1: 1 - (0.5*0.5 + 0.5) / 3 = 0.75; alpha=0: plain error rate
  np.testing.assert_allclose(rw.difficulty(correct, e, 3), [0.5, 0.75], rtol=1e-6)
  np.testing.assert_allclose(rw.difficulty(correct, e, 3, alpha=0.0), [1 / 3, 2 / 3],
                             rtol=1e-6)


def test_theta_ema_and_fixed_theta():
  d = jnp.array([0.0, 0.5, 1.0, 0.2, 0.9])
  q = np.quantile(np.array(d), 0.7)
  s1 = rw.update_theta(rw.init_state(), d)
  np.testing.assert_allclose(s1.theta, q, rtol=1e-6)                 # first batch: q itself
  s2 = rw.update_theta(s1, jnp.array([0.0, 0.0]))
  np.testing.assert_allclose(s2.theta, 0.9 * q, rtol=1e-6)           # then the EMA
  s3 = rw.update_theta(s2, d, fixed_theta=0.3)
  np.testing.assert_allclose(s3.theta, 0.3)
  assert np.asarray(s3.l_exp).tolist() == [0.0, 0.0]


def test_length_ema_by_hand():
  s = rw.update_lengths(rw.init_state(), jnp.array([0, 0, 1]), jnp.array([4, 6, 10]))
  np.testing.assert_allclose(s.l_exp, [5.0, 10.0])                   # unset bins: the mean
  s = rw.update_lengths(s, jnp.array([1, 1]), jnp.array([20, 30]))
  np.testing.assert_allclose(s.l_exp, [5.0, 0.9 * 10 + 0.1 * 25])    # empty bin kept


def test_expected_length_uses_own_length_while_unset():
  state = rw.init_state()._replace(l_exp=jnp.array([0.0, 8.0]))
  np.testing.assert_allclose(rw.expected_length(state, jnp.array([0, 1]), jnp.array([3, 3])),
                             [3 + 1e-6, 8 + 1e-6], rtol=1e-7)


@pytest.mark.parametrize("correct,easy,length,l_exp,conf,want", [
    (1, True, 5, 10.0, 1.0, 1 - 0.5),               # correct+easy: 1 - (5/10)*1
    (1, True, 6, 10.0, 0.0, 1 - 0.6 * 0.5),         # c = 0 halves the penalty
    (1, True, 30, 10.0, 1.0, 0.0),                   # correct+easy, long: clipped at 0
    (0, False, 30, 10.0, 1.0, 1.0),                  # wrong+hard, long: clipped at 1
    (0, False, 15, 10.0, 1.0, 0.5),                  # wrong+hard: 15/10 - 1
    (0, False, 4, 10.0, 0.0, 4 / 10 * 0.5 - 1),      # wrong+hard, short: negative, unclipped
    (1, False, 5, 10.0, 1.0, 0.0),                   # correct+hard: 0
    (0, True, 5, 10.0, 1.0, 0.0),                    # wrong+easy: 0
])
def test_length_score_every_branch(correct, easy, length, l_exp, conf, want):
  got = rw.length_score(jnp.array([correct]), jnp.array([easy]), jnp.array([length]),
                        jnp.array([l_exp]), jnp.array([conf]))
  np.testing.assert_allclose(got, [want], rtol=1e-6, atol=1e-7)


def test_repetition_penalty_by_hand():
  mask = jnp.ones((3, 8))
  tokens = jnp.array([[1, 2, 3, 4, 5, 6, 7, 8],          # no repeat
                      [1, 2, 3, 1, 2, 3, 9, 9],          # trigram repeated at 3: tokens 3..5
                      [7, 7, 7, 7, 7, 7, 7, 7]])         # run: starts 1..5; only_start marks 1..3
  got = rw.repetition_penalty(tokens, mask, n=3, per_token=0.05)
  np.testing.assert_allclose(got, [0.0, -0.05 * 3 / 8, -0.05 * 3 / 8], rtol=1e-6)
  every = rw.repetition_penalty(tokens, mask, n=3, per_token=0.05, only_start=False)
  np.testing.assert_allclose(every, [0.0, -0.05 * 3 / 8, -0.05 * 7 / 8], rtol=1e-6)
  short = rw.repetition_penalty(tokens, jnp.array([[1] * 8, [1] * 5 + [0] * 3, [0] * 8]), n=3)
  np.testing.assert_allclose(short, [0.0, 0.0, 0.0])    # the repeat ends past L=5; L=0 -> 0


def test_repetition_penalty_matches_public_code():
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 2, size=(24, 20))
  lengths = rng.integers(0, 21, size=24)
  mask = (np.arange(20)[None] < lengths[:, None]).astype(np.int32)
  for only_start in (True, False):
    got = rw.repetition_penalty(jnp.array(tokens), jnp.array(mask), n=3, per_token=0.05,
                                only_start=only_start)
    want = [_public_repetition(list(t), int(l), -0.05, 3, only_start)
            for t, l in zip(tokens, lengths)]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_reward_on_last_token():
  out = rw.reward_on_last_token(jnp.array([1.0, 2.0, 3.0]),
                                jnp.array([[1, 1, 0], [1, 1, 1], [0, 0, 0]]))
  np.testing.assert_allclose(out, [[0, 1, 0], [0, 0, 2], [0, 0, 0]])


# --------------------------------------------------------------- the whole reward


def _batch(rng, b=12, t=16, vocab=3):
  lengths = rng.integers(1, t + 1, size=b)
  mask = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)
  return rw.RewardInputs(correct=rng.integers(0, 2, size=b), format_ok=rng.integers(0, 2, size=b),
                         mask=mask, entropies=rng.gamma(1.0, 1.0, size=(b, t)),
                         tokens=rng.integers(0, vocab, size=(b, t)))


def test_adathink_matches_public_code_over_three_batches():
  rng = np.random.default_rng(1)
  fn = jax.jit(lambda inputs, state: rw.adathink_reward(inputs, state, group_size=4, ngram=3))
  state, meta = rw.init_state(), {}
  for _ in range(3):
    inputs = _batch(rng)
    got, state, info = fn(inputs, state)
    lengths = inputs.mask.sum(1)
    want, meta = _public_reward(inputs.entropies, lengths, inputs.tokens, inputs.correct,
                                inputs.format_ok, np.arange(12) // 4, meta, n=3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state.theta, meta["theta"], rtol=1e-5)
    np.testing.assert_allclose(state.l_exp, meta["bins"], rtol=1e-5)


def test_baselines_by_hand():
  # two questions x 2 rollouts; budget T = 10
  mask = np.zeros((4, 10), np.int32)
  for i, length in enumerate([2, 6, 4, 8]):
    mask[i, :length] = 1
  inputs = rw.RewardInputs(correct=np.array([1, 1, 0, 0]), format_ok=np.array([1, 0, 1, 1]),
                           mask=mask)
  y, f, length = np.array([1, 1, 0, 0.]), np.array([1, 0, 1, 1.]), np.array([2, 6, 4, 8.])
  r, _, _ = rw.get_reward("vanilla")(inputs, None, group_size=2)
  np.testing.assert_allclose(r, 0.9 * y + 0.1 * f, rtol=1e-6)
  r, _, _ = rw.get_reward("uniform_length")(inputs, None, group_size=2)
  np.testing.assert_allclose(r, y + 0.5 * f - 0.5 * length / 10, rtol=1e-6)
  r, _, _ = rw.get_reward("lcpo")(inputs, None, group_size=2, target_length=5)
  np.testing.assert_allclose(r, y + 0.5 * f - 0.5 * np.abs(length - 5) / 10, rtol=1e-6)
  r, _, _ = rw.get_reward("shorter_better")(inputs, None, group_size=2)
  sol = np.array([2, 2, 6, 6.])          # shortest correct; no correct -> mean of (4, 8)
  np.testing.assert_allclose(r, y + 0.5 * f - 0.5 * np.abs(length - sol) / 10, rtol=1e-6)


def test_bad_input_one_line_errors():
  rng = np.random.default_rng(2)
  inputs = _batch(rng, b=6)
  with pytest.raises(ValueError, match="unknown reward 'nope'"):
    rw.get_reward("nope")
  with pytest.raises(ValueError, match="group_size must be an int >= 2"):
    rw.adathink_reward(inputs, rw.init_state(), group_size=1)
  with pytest.raises(ValueError, match="not a multiple of group_size=4"):
    rw.vanilla_reward(inputs, group_size=4)
  with pytest.raises(ValueError, match="top_frac"):
    rw.uncertainty(inputs.entropies, inputs.mask, top_frac=0.0)
  with pytest.raises(ValueError, match="alpha"):
    rw.difficulty(inputs.correct, np.zeros(6), 2, alpha=1.5)
  with pytest.raises(ValueError, match="entropies has a non-finite value"):
    rw.uncertainty(np.full((2, 3), np.nan), np.ones((2, 3)))
  with pytest.raises(ValueError, match="entropies and mask"):
    rw.uncertainty(np.ones((2, 3)), np.ones((2, 4)))
  with pytest.raises(ValueError, match="needs inputs.entropies"):
    rw.adathink_reward(inputs._replace(entropies=None), rw.init_state(), group_size=2)
  with pytest.raises(ValueError, match="n must be an int >= 1"):
    rw.repetition_penalty(inputs.tokens, inputs.mask, n=0)
