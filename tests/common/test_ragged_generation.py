"""Ragged (left-padded) batched generation: per-row positions and key-padding masks in the
prefill and the cached decode, end tokens, sampled-token log-probs, and bad input."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import logprobs
from common.models import sampling
from common.models import transformer as tfm

V = 23
T0, N = 6, 7
LENGTHS = np.array([6, 2, 4])  # left padding 0, 4, 2
CONFIGS = {
    # GQA + QK-norm: full rotary.
    "llama": tfm.llama_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4,
                              num_kv_heads=2, d_ff=48, qk_norm=True, max_seq_len=32),
    # Partial rotary, parallel residual, biases, tied embeddings.
    "neox": tfm.neox_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_ff=48,
                            max_seq_len=32, tie_embeddings=True),
}


@functools.cache
def _build(family):
  model = tfm.Transformer(CONFIGS[family])
  params = tfm.init_params(model, jax.random.PRNGKey(0))
  # Larger weights than the 0.02 init so that attention patterns are far from uniform.
  params = jax.tree.map(lambda p: p * 10 if p.ndim == 2 else p, params)
  return model, params


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def lm(request):
  """Both families (full and partial rotary): for the tests of positions and masks."""
  return _build(request.param)


@pytest.fixture(scope="module")
def llama():
  """One family: for the tests of the loop's bookkeeping (end tokens, traces, errors)."""
  return _build("llama")


@pytest.fixture(scope="module")
def apply(lm):
  """The jitted forward pass (one compile per shape instead of op-by-op dispatch)."""
  model, params = lm
  return jax.jit(lambda tokens, left_pad=None: model.apply({"params": params}, tokens,
                                                           left_pad=left_pad))


@jax.jit
def _row_stats(logits, row):
  """One row's next-token log-probs and entropies, compiled once per row length (for both
  families) instead of dispatched op by op."""
  return logprobs.next_token_logprobs(logits, row)[0], logprobs.token_entropy(logits[0, :-1])


def _prompt(seed=1):
  """(3, T0) prompts whose padding slots hold junk ids (they must be ignored)."""
  return jax.random.randint(jax.random.PRNGKey(seed), (3, T0), 0, V)


def _greedy(model, params, prompt, lengths=LENGTHS, **kwargs):
  return sampling.generate(model, params, prompt, jax.random.PRNGKey(0), max_new_tokens=N,
                           temperature=0.0, prompt_lengths=None if lengths is None
                           else jnp.asarray(lengths), return_info=True, **kwargs)


def test_cached_ragged_decoding_equals_full_recomputation_per_row(lm, apply):
  model, params = lm
  prompt = _prompt()
  g = _greedy(model, params, prompt, return_logits=True)
  assert g.tokens.shape == (3, T0 + N) and g.logits.shape == (3, N, V)
  np.testing.assert_array_equal(g.lengths, [N] * 3)
  np.testing.assert_array_equal(g.prompt_lengths, LENGTHS)
  for b, length in enumerate(LENGTHS):
    pad = T0 - length
    np.testing.assert_array_equal(g.tokens[b, :pad], 0)  # padding slots hold pad_id
    np.testing.assert_array_equal(g.tokens[b, pad:T0], prompt[b, pad:])
    row = g.tokens[b:b + 1, pad:]  # the unpadded prompt and its continuation
    full = apply(row)[0, length - 1:-1]  # logits of each step
    np.testing.assert_allclose(g.logits[b], full, atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(jnp.argmax(full, -1), g.tokens[b, T0:])


def test_a_padded_row_continues_exactly_as_it_does_alone(lm):
  model, params = lm
  prompt = _prompt()
  g = _greedy(model, params, prompt, return_logits=True)
  b, length = 1, LENGTHS[1]  # the row with the most padding (4 slots)
  alone = sampling.generate(model, params, prompt[b:b + 1, T0 - length:],
                            jax.random.PRNGKey(0), max_new_tokens=N, temperature=0.0,
                            return_info=True, return_logits=True)
  np.testing.assert_array_equal(g.tokens[b, T0:], alone.tokens[0, length:])
  np.testing.assert_allclose(g.logits[b], alone.logits[0], atol=1e-5, rtol=1e-5)
  # All rows full length: the ragged path gives what the equal-length path gives.
  ragged = _greedy(model, params, prompt, [T0] * 3, return_logits=True)
  plain = _greedy(model, params, prompt, None, return_logits=True)
  np.testing.assert_array_equal(ragged.tokens, plain.tokens)
  np.testing.assert_allclose(ragged.logits, plain.logits, atol=1e-5, rtol=1e-5)


def test_full_forward_with_left_pad_ignores_padding(apply):
  prompt = _prompt()
  left_pad = jnp.asarray(T0 - LENGTHS)
  junk = apply(prompt, left_pad)
  zeroed = jnp.where(jnp.arange(T0)[None] < left_pad[:, None], 0, prompt)
  clean = apply(zeroed, left_pad)
  assert np.isfinite(np.asarray(junk)).all()
  for b, pad in enumerate(np.asarray(left_pad)):
    alone = apply(prompt[b:b + 1, pad:])[0]
    np.testing.assert_allclose(junk[b, pad:], alone, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(clean[b, pad:], alone, atol=1e-5, rtol=1e-5)


def test_rows_stop_at_the_end_token(llama):
  model, params = llama
  prompt = _prompt()
  free = _greedy(model, params, prompt, return_logits=True).tokens[:, T0:]
  # An end token row 0 emits but row 2 never does (deterministic for these seeds).
  candidates = [int(t) for t in free[0, 1:] if int(t) not in np.asarray(free[2])]
  assert candidates, "test setup: no token separates rows 0 and 2"
  eos, pad_id = candidates[0], V - 1
  g = _greedy(model, params, prompt, eos_id=eos, pad_id=pad_id)
  for b in range(3):
    hits = np.flatnonzero(np.asarray(free[b]) == eos)
    want = int(hits[0]) + 1 if hits.size else N
    assert int(g.lengths[b]) == want
    np.testing.assert_array_equal(g.tokens[b, T0:T0 + want], free[b, :want])
    np.testing.assert_array_equal(g.tokens[b, T0 + want:], pad_id)
    np.testing.assert_array_equal(g.completion_mask[b], np.arange(N) < want)
    np.testing.assert_array_equal(g.logprobs[b, want:], 0.0)
  assert int(g.lengths[0]) < N and int(g.lengths[2]) == N
  assert int(g.tokens[0, T0 + int(g.lengths[0]) - 1]) == eos
  # Every row stops at once: the loop ends early and the rest is padding.
  first = int(free[0, 0])
  g = sampling.generate(model, params, prompt[:1], jax.random.PRNGKey(0), max_new_tokens=N,
                        temperature=0.0, eos_id=first, pad_id=pad_id, return_info=True)
  assert int(g.lengths[0]) == 1
  np.testing.assert_array_equal(g.tokens[0, T0 + 1:], pad_id)


def test_sampled_logprobs_equal_a_full_forward_pass(lm, apply):
  model, params = lm
  prompt = _prompt(seed=2)
  g = sampling.generate(model, params, prompt, jax.random.PRNGKey(5), max_new_tokens=N,
                        temperature=0.8, top_p=0.9, prompt_lengths=jnp.asarray(LENGTHS),
                        eos_id=3, return_info=True)
  stats = jax.jit(logprobs.sequence_token_stats, static_argnums=0)(model, params, g.tokens,
                                                                  g.left_pad)
  mask = np.asarray(g.completion_mask)
  np.testing.assert_allclose(np.where(mask, stats.logprobs[:, T0 - 1:], 0.0), g.logprobs,
                             atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(np.where(mask, stats.entropies[:, T0 - 1:], 0.0), g.entropies,
                             atol=1e-4, rtol=1e-4)
  assert (np.asarray(g.logprobs)[mask] < 0).all()
  # The ragged full pass is each row's unpadded pass; padding predictions are masked.
  np.testing.assert_array_equal(stats.mask, np.arange(T0 + N - 1)[None] >= g.left_pad[:, None])
  for b, pad in enumerate(np.asarray(g.left_pad)):
    row = g.tokens[b:b + 1, pad:]
    row_logprobs, row_entropies = _row_stats(apply(row), row)
    np.testing.assert_allclose(stats.logprobs[b, pad:], row_logprobs, atol=1e-5)
    np.testing.assert_allclose(stats.entropies[b, pad:], row_entropies, atol=1e-5)
    np.testing.assert_array_equal(stats.logprobs[b, :pad], 0.0)


def test_generate_traces_once_for_the_same_shapes(llama):
  model, params = llama
  traces = []

  def counting_attention(q, k, v, **kwargs):
    traces.append(kwargs["layer"])
    return tfm.dot_product_attention(q, k, v, **kwargs)

  counting = tfm.Transformer(model.config, attention_fn=counting_attention)
  for seed, lengths in ((0, [6, 2, 4]), (1, [1, 5, 6]), (2, [3, 3, 3])):
    sampling.generate(counting, params, _prompt(seed), jax.random.PRNGKey(seed),
                      max_new_tokens=N, prompt_lengths=jnp.asarray(lengths), eos_id=3,
                      return_info=True)
    if seed == 0:
      first = len(traces)
  assert first > 0 and len(traces) == first


def test_bad_ragged_input_is_a_one_line_error(llama):
  model, params = llama
  prompt, key = _prompt(), jax.random.PRNGKey(0)
  gen = lambda **kw: sampling.generate(model, params, prompt, key, **{"max_new_tokens": 2,
                                                                      **kw})
  cases = [
      (dict(cache=tfm.init_cache(model.config, 3, T0)), r"cache holds 6 positions.*0 \+ 6 \+ 2"),
      (dict(prompt_lengths=jnp.array([6, 0, 4])), r"prompt_lengths\[1\] = 0.*\[1, 6\]"),
      (dict(prompt_lengths=jnp.array([6, 7, 4])), r"prompt_lengths\[1\] = 7.*\[1, 6\]"),
      (dict(prompt_lengths=jnp.array([6, 2])), r"prompt_lengths must be \(3,\).*\(2,\)"),
      (dict(prompt_lengths=jnp.array([6.0, 2.0, 4.0])), r"prompt_lengths.*float32"),
      (dict(eos_id=V), rf"eos_id={V}.*\[0, {V}\)"),
      (dict(eos_id=-1), r"eos_id=-1"),
      (dict(pad_id=V), rf"pad_id={V}"),
      (dict(return_logits=True), r"return_logits=True needs return_info=True"),
  ]
  for kwargs, message in cases:
    with pytest.raises(ValueError, match=message) as info:
      gen(**kwargs)
    assert "\n" not in str(info.value)
  filled = tfm.init_cache(model.config, 3, 16)._replace(length=jnp.int32(2))
  with pytest.raises(ValueError, match="prompt_lengths needs an empty cache.*2 filled"):
    sampling.generate(model, params, prompt[:, :3], key, max_new_tokens=2, cache=filled,
                      prompt_lengths=jnp.array([3, 1, 2]))
  with pytest.raises(ValueError, match=r"left_pad\[2\] = 6.*\[0, 6\)"):
    model.apply({"params": params}, prompt, left_pad=jnp.array([0, 1, 6]))
  with pytest.raises(ValueError, match=r"left_pad must be \(3,\)"):
    model.apply({"params": params}, prompt, left_pad=jnp.array([0, 1]))
  with pytest.raises(ValueError, match=r"tokens must be \(batch, time\) with time >= 2"):
    logprobs.sequence_token_stats(model, params, prompt[:, :1])
  with pytest.raises(ValueError, match="width=1 is shorter"):
    sampling.pad_prompts([[1, 2], [3]], width=1)
  tokens, lengths = sampling.pad_prompts([[5, 6], [1, 2, 3]], pad_id=9)
  np.testing.assert_array_equal(tokens, [[9, 5, 6], [1, 2, 3]])
  np.testing.assert_array_equal(lengths, [2, 3])
