"""The decoder-only transformer: both families, the KV cache, taps, swappable attention,
rotary embeddings, log-prob helpers and sampling."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import logprobs
from common.models import sampling
from common.models import transformer as tfm

V = 37
CONFIGS = {
    # GQA + Qwen3 QK-norm + llama3 rope scaling.
    "llama": tfm.llama_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4,
                              num_kv_heads=2, d_ff=48, qk_norm=True, max_seq_len=32,
                              rope_scaling=tfm.RopeScaling("llama3", 4.0, 1.0, 4.0, 8)),
    # Partial rotary, parallel residual, biases, tied embeddings.
    "neox": tfm.neox_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_ff=48,
                            max_seq_len=32, tie_embeddings=True),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def lm(request):
  model = tfm.Transformer(CONFIGS[request.param])
  params = tfm.init_params(model, jax.random.PRNGKey(0))
  # Larger weights than the 0.02 init so that attention patterns are far from uniform.
  params = jax.tree.map(lambda p: p * 10 if p.ndim == 2 else p, params)
  return model, params


@functools.cache
def _jit_apply(model):
  """`model.apply` compiled as one program per input shape (op-by-op dispatch compiles a
  program per operation and shape, which costs several times more for these tiny models).

  One jitted function per model for the whole file (modules hash and compare by their
  fields), so tests that call the same model on the same shapes share its programs
  instead of tracing and compiling them again."""
  return jax.jit(model.apply)


# dot_product_attention and apply_rope as one compiled program per input shape, not op
# by op.
_attention = jax.jit(tfm.dot_product_attention, static_argnames="layer")
_rope = jax.jit(tfm.apply_rope, static_argnames="config")


def _tokens(b=2, t=12, seed=1):
  return jax.random.randint(jax.random.PRNGKey(seed), (b, t), 0, V)


@pytest.mark.parametrize("chunks", [(12,), (5, 1, 1, 1, 1, 3), (1,) * 12])
def test_cached_decoding_equals_full_recomputation(lm, chunks):
  model, params = lm
  apply = _jit_apply(model)  # one compile per chunk size instead of op-by-op dispatch
  tokens = _tokens()
  full = apply({"params": params}, tokens)
  cache = tfm.init_cache(model.config, 2, 16)
  pieces, start = [], 0
  for size in chunks:
    logits, cache = apply({"params": params}, tokens[:, start:start + size], cache)
    pieces.append(logits)
    start += size
  assert int(cache.length) == 12
  np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-5, rtol=1e-5)


def test_causality(lm):
  model, params = lm
  tokens = _tokens()
  changed = tokens.at[:, 7].set((tokens[:, 7] + 1) % V)
  apply = _jit_apply(model)
  a = apply({"params": params}, tokens)
  b = apply({"params": params}, changed)
  np.testing.assert_array_equal(a[:, :7], b[:, :7])
  assert not np.allclose(a[:, 7:], b[:, 7:])


def test_rope_scores_depend_only_on_relative_position():
  config = CONFIGS["llama"]
  q = jax.random.normal(jax.random.PRNGKey(0), (1, 1, 1, config.dim_per_head))
  k = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 1, config.dim_per_head))
  score = lambda m, n: float(jnp.sum(_rope(q, jnp.array([m]), config)
                                     * _rope(k, jnp.array([n]), config)))
  assert score(3, 1) == pytest.approx(score(10, 8), rel=1e-4, abs=1e-5)
  assert score(0, 0) == pytest.approx(float(jnp.sum(q * k)), rel=1e-5)
  assert score(5, 0) != pytest.approx(score(0, 0), rel=1e-3)


def test_partial_rotary_leaves_the_rest_untouched():
  config = CONFIGS["neox"]
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 2, config.dim_per_head))
  y = _rope(x, jnp.arange(3), config)
  r = config.rotary_dim
  assert r == config.dim_per_head // 4
  np.testing.assert_array_equal(y[..., r:], x[..., r:])
  np.testing.assert_allclose(jnp.linalg.norm(y[..., :r], axis=-1),
                             jnp.linalg.norm(x[..., :r], axis=-1), rtol=1e-5)


def test_taps_mirror_linear_params(lm):
  model, params = lm
  tokens = _tokens()
  logits, state = model.apply({"params": params}, tokens, mutable=["taps"])
  taps = state["taps"]
  paths = tfm.linear_paths(params)
  assert len(paths) == model.config.num_layers * (7 if model.config.family == "llama" else 6) + (
      0 if model.config.tie_embeddings else 1)
  for path in paths:
    node_p, node_t = params, taps
    for key in path:
      node_p, node_t = node_p[key], node_t[key]
    x = node_t["input"]
    assert x.shape == (2, 12, node_p["kernel"].shape[0]), path
  # The last layer's residual output, normalised and projected, gives the logits.
  layer = f"layer_{model.config.num_layers - 1}"
  assert taps[layer]["residual"].shape == (2, 12, model.config.d_model)
  assert taps[layer]["attn"]["heads"].shape == (2, 12, model.config.num_heads,
                                                model.config.dim_per_head)
  # o_proj's input is the per-head attention output, flattened.
  np.testing.assert_array_equal(taps[layer]["attn"]["o_proj"]["input"],
                                taps[layer]["attn"]["heads"].reshape(2, 12, -1))
  # Without asking for taps nothing is stored and the logits are the same.
  np.testing.assert_array_equal(model.apply({"params": params}, tokens), logits)


def test_component_mask_selects_one_head():
  config = tfm.llama_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4,
                            num_kv_heads=2, d_ff=48)
  params = tfm.init_params(tfm.Transformer(config), jax.random.PRNGKey(0))
  mask = tfm.component_mask(params, config, layer=1, head=3)
  d = config.dim_per_head
  attn = mask["layer_1"]["attn"]
  np.testing.assert_array_equal(attn["q_proj"]["kernel"].sum(0), [0] * 3 * d + [32] * d)
  np.testing.assert_array_equal(attn["k_proj"]["kernel"].sum(0), [0] * d + [32] * d)
  np.testing.assert_array_equal(attn["o_proj"]["kernel"].sum(1), [0] * 3 * d + [32] * d)
  assert float(sum(x.sum() for x in jax.tree.leaves(mask["layer_0"]))) == 0
  assert float(mask["layer_1"]["mlp"]["up_proj"]["kernel"].sum()) == 0
  whole = tfm.component_mask(params, config, layer=0)
  assert float(sum(x.sum() for x in jax.tree.leaves(whole))) == sum(
      x.size for x in jax.tree.leaves(params["layer_0"]))
  with pytest.raises(ValueError, match="head=4"):
    tfm.component_mask(params, config, layer=0, head=4)


def test_attention_fn_is_replaceable(lm):
  model, params = lm

  def explicit_attention(q, k, v, *, q_positions, kv_length, layer):
    group = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    s = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    pos = jnp.arange(k.shape[1])
    ok = (pos[None] <= q_positions[:, None]) & (pos[None] < kv_length)
    p = jax.nn.softmax(jnp.where(ok, s, -jnp.inf), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", p, v)

  swapped = tfm.Transformer(model.config, attention_fn=explicit_attention)
  tokens = _tokens()
  apply, apply_swapped = _jit_apply(model), _jit_apply(swapped)
  full = apply({"params": params}, tokens)
  np.testing.assert_allclose(apply_swapped({"params": params}, tokens), full, atol=1e-5)
  cache = tfm.init_cache(model.config, 2, 16)
  _, cache = apply_swapped({"params": params}, tokens[:, :6], cache)
  logits, _ = apply_swapped({"params": params}, tokens[:, 6:7], cache)
  np.testing.assert_allclose(logits[:, 0], full[:, 6], atol=1e-5)


def test_attention_only_model_has_no_mlp_and_caches_exactly():
  config = tfm.neox_config(vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_ff=48,
                           use_mlp=False, max_seq_len=16)
  model = tfm.Transformer(config)
  params = tfm.init_params(model, jax.random.PRNGKey(0))
  assert set(params["layer_0"]) == {"attn", "attn_norm"}
  tokens = _tokens(1, 8)
  apply = _jit_apply(model)
  full = apply({"params": params}, tokens)
  cache = tfm.init_cache(config, 1, 8)
  first, cache = apply({"params": params}, tokens[:, :5], cache)
  rest, _ = apply({"params": params}, tokens[:, 5:], cache)
  np.testing.assert_allclose(np.concatenate([first, rest], 1), full, atol=1e-5)


def test_config_errors():
  with pytest.raises(ValueError, match="family='gpt2'"):
    tfm.TransformerConfig(family="gpt2")
  with pytest.raises(ValueError, match="num_kv_heads=3"):
    tfm.TransformerConfig(num_heads=4, num_kv_heads=3)
  with pytest.raises(ValueError, match="d_model=30"):
    tfm.TransformerConfig(d_model=30, num_heads=4)
  with pytest.raises(ValueError, match="tokens must be"):
    tfm.Transformer(CONFIGS["llama"]).init(jax.random.PRNGKey(0), jnp.zeros((3,), jnp.int32))


def test_logprob_helpers_against_numpy():
  logits = jax.random.normal(jax.random.PRNGKey(0), (2, 5, V)) * 3
  tokens = _tokens(2, 5)
  z = np.asarray(logits, np.float64)
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  want = np.take_along_axis(logp[:, :-1], np.asarray(tokens)[:, 1:, None], -1)[..., 0]
  mask = jnp.array([[1, 1, 0, 0], [0, 1, 1, 1]])

  @jax.jit  # the four helpers as one compiled program, not op by op
  def helpers(logits, tokens, mask):
    return (logprobs.next_token_logprobs(logits, tokens),
            logprobs.sequence_logprob(logits, tokens, mask),
            logprobs.next_token_loss(logits, tokens, mask), logprobs.token_entropy(logits))

  next_lp, seq_lp, loss, entropy = helpers(logits, tokens, mask)
  np.testing.assert_allclose(next_lp, want, rtol=1e-5)
  np.testing.assert_allclose(seq_lp, (want * np.asarray(mask)).sum(-1), rtol=1e-5)
  np.testing.assert_allclose(loss, -(want * np.asarray(mask)).sum() / 5, rtol=1e-5)
  np.testing.assert_allclose(entropy, -(np.exp(logp) * logp).sum(-1), rtol=1e-5)
  assert float(logprobs.token_entropy(jnp.zeros(V))) == pytest.approx(math.log(V), rel=1e-6)
  assert float(logprobs.nats_to_bits(math.log(8))) == pytest.approx(3.0)


def test_top_p_keeps_the_smallest_nucleus():
  logits = jnp.log(jnp.array([0.1, 0.5, 0.25, 0.15]))
  kept = lambda p: np.isfinite(np.asarray(sampling.top_p_logits(logits, p)))
  np.testing.assert_array_equal(kept(0.5), [False, True, False, False])
  np.testing.assert_array_equal(kept(0.6), [False, True, True, False])
  np.testing.assert_array_equal(kept(0.9), [False, True, True, True])
  np.testing.assert_array_equal(kept(1.0), [True] * 4)


def test_sampling_frequencies_follow_the_nucleus():
  logits = jnp.log(jnp.array([0.1, 0.5, 0.25, 0.15]))
  keys = jax.random.split(jax.random.PRNGKey(0), 20000)
  draws = jax.jit(jax.vmap(lambda k: sampling.sample_token(logits, k, 1.0, 0.8)))(keys)
  freq = np.bincount(np.asarray(draws), minlength=4) / len(draws)
  want = np.array([0.0, 0.5, 0.25, 0.15]) / 0.9
  np.testing.assert_allclose(freq, want, atol=0.015)  # ~4 standard errors


def test_greedy_generation_matches_full_recomputation(lm):
  model, params = lm
  prompt = _tokens(2, 4)
  # 4 + 8 = 12 tokens: the (2, 12) shape the other tests apply the model to, so the full
  # recomputation below and the greedy generate (shared with the test after) are compiled once.
  out = sampling.generate(model, params, prompt, jax.random.PRNGKey(0), max_new_tokens=8,
                          temperature=0.0)
  assert out.shape == (2, 12)
  np.testing.assert_array_equal(out[:, :4], prompt)
  full = _jit_apply(model)({"params": params}, out)
  np.testing.assert_array_equal(jnp.argmax(full[:, 3:-1], -1), out[:, 4:])
  sampled = sampling.generate(model, params, prompt, jax.random.PRNGKey(0), max_new_tokens=8,
                              temperature=1.0, top_p=0.9)
  assert sampled.shape == (2, 12) and int(sampled.max()) < V


def test_attention_state_is_threaded_through_the_cache(lm):
  """A stateful attention_fn gets its layer's entry of cache.state and returns the
  update; here it counts the tokens each layer has attended from."""
  model, params = lm

  def counting_attention(q, k, v, *, q_positions, kv_length, layer, state):
    out = tfm.dot_product_attention(q, k, v, q_positions=q_positions, kv_length=kv_length,
                                    layer=layer)
    return out, state + q.shape[1] * (layer + 1)

  counting = tfm.Transformer(model.config, attention_fn=counting_attention)
  cache = tfm.init_cache(model.config, 2, 16)
  cache = cache._replace(state=tuple(jnp.zeros((), jnp.int32)
                                     for _ in range(model.config.num_layers)))
  tokens = _tokens()
  # max_new_tokens=8, as in the greedy test above: the plain generate is the same program.
  out = sampling.generate(counting, params, tokens[:, :4], jax.random.PRNGKey(0),
                          max_new_tokens=8, temperature=0.0, cache=cache)
  plain = sampling.generate(model, params, tokens[:, :4], jax.random.PRNGKey(0),
                            max_new_tokens=8, temperature=0.0)
  np.testing.assert_array_equal(out, plain)
  apply = _jit_apply(counting)
  _, cache = apply({"params": params}, tokens[:, :5], cache)
  _, cache = apply({"params": params}, tokens[:, 5:6], cache)
  assert [int(s) for s in cache.state] == [6 * (i + 1) for i in range(model.config.num_layers)]


# Bad input (issue 17): checked at the Python boundary, on concrete arrays only.

def test_out_of_vocabulary_ids_are_an_error_not_nan_logits(lm):
  model, params = lm
  tokens = np.array(_tokens())
  tokens[1, 5] = V  # One past the vocabulary: jnp.take would give NaN embeddings.
  with pytest.raises(ValueError, match=r"tokens\[1, 5\] = 37.*\[0, 37\)"):
    model.apply({"params": params}, tokens)
  tokens[1, 5] = -1
  with pytest.raises(ValueError, match=r"tokens\[1, 5\] = -1"):
    model.apply({"params": params}, tokens)
  with pytest.raises(ValueError, match=r"prompt\[0, 0\] = 99"):
    sampling.generate(model, params, jnp.full((2, 3), 99, jnp.int32), jax.random.PRNGKey(0),
                      max_new_tokens=2)
  with pytest.raises(TypeError, match="tokens.*integer.*float32"):
    model.apply({"params": params}, jnp.zeros((2, 3)))
  # Under jit the ids are tracers: nothing is checked and nothing is added to the program.
  assert np.isfinite(np.asarray(_jit_apply(model)({"params": params}, _tokens()))).all()


def test_cache_overflow_and_bad_generate_arguments_are_errors(lm):
  model, params = lm
  cache = tfm.init_cache(model.config, 2, 8)
  # Filled by the compiled apply (its output length is concrete, as an eager call's is);
  # the calls that must raise stay eager, where the cache's length is checked.
  _, cache = _jit_apply(model)({"params": params}, _tokens(t=6), cache)
  # dynamic_update_slice would clamp the write and silently overwrite positions 2..5.
  with pytest.raises(ValueError, match=r"cache.*6 \+ 4 = 10.*8"):
    model.apply({"params": params}, _tokens(t=4), cache)
  with pytest.raises(ValueError, match="cache batch 2.*tokens batch 3"):
    model.apply({"params": params}, _tokens(b=3, t=1), tfm.init_cache(model.config, 2, 8))
  prompt = _tokens(t=3)
  key = jax.random.PRNGKey(0)
  with pytest.raises(ValueError, match="temperature=nan"):
    sampling.generate(model, params, prompt, key, max_new_tokens=2, temperature=float("nan"))
  with pytest.raises(ValueError, match="max_new_tokens=-1"):
    sampling.generate(model, params, prompt, key, max_new_tokens=-1)
  with pytest.raises(ValueError, match=r"prompt.*\(2, 0\)"):
    sampling.generate(model, params, prompt[:, :0], key, max_new_tokens=2)
  with pytest.raises(ValueError, match=r"cache.*6 filled.*3 \+ 2"):
    sampling.generate(model, params, prompt, key, max_new_tokens=2, cache=cache)


def test_logprob_helpers_reject_out_of_range_targets_and_bad_masks():
  logits = jnp.zeros((1, 4, 8))
  with pytest.raises(ValueError, match=r"tokens\[0, 2\] = 8.*\[0, 8\)"):
    logprobs.sequence_logprob(logits, jnp.array([[1, 2, 8, 3]]))
  with pytest.raises(ValueError, match=r"mask.*\(1, 4\).*\(1, 3\)"):
    logprobs.next_token_loss(logits, jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4)))
  with pytest.raises(ValueError, match="top_p=0"):
    sampling.top_p_logits(logits, 0.0)


@pytest.mark.parametrize("field, value", [("rope_theta", 0.0), ("norm_eps", -1e-5),
                                          ("num_kv_heads", 0), ("head_dim", 0)])
def test_config_rejects_values_that_give_nan_or_crash(field, value):
  with pytest.raises(ValueError, match=f"TransformerConfig.{field}={value}"):
    tfm.llama_config(vocab_size=V, d_model=32, num_heads=4, **{field: value})
  with pytest.raises(ValueError, match="RopeScaling.factor=0"):
    tfm.llama_config(rope_scaling=tfm.RopeScaling("linear", 0.0))


def test_logits_to_keep_gives_the_last_rows_of_the_full_logits(lm):
  """logits_to_keep=n computes the head on the last n positions only: the same logits,
  hidden states and cache as the full call, minus the first T - n rows."""
  model, params = lm
  tokens = _tokens()
  full, full_h = model.apply({"params": params}, tokens, return_hidden=True)
  for n in (1, 5, 12):
    logits, h = model.apply({"params": params}, tokens, return_hidden=True, logits_to_keep=n)
    assert logits.shape == (2, n, V) and h.shape == (2, n, model.config.d_model)
    np.testing.assert_allclose(logits, full[:, -n:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, full_h[:, -n:], rtol=1e-5, atol=1e-5)
  cache = tfm.init_cache(model.config, 2, 16)
  last, c1 = model.apply({"params": params}, tokens, cache, logits_to_keep=1)
  _, c2 = model.apply({"params": params}, tokens, cache)
  np.testing.assert_allclose(last[:, 0], full[:, -1], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(c1.k, c2.k)
  for bad in (0, 13, True, 2.0):
    with pytest.raises(ValueError, match="logits_to_keep"):
      model.apply({"params": params}, tokens, logits_to_keep=bad)


@pytest.mark.parametrize("ragged", [False, True])
def test_single_query_attention_equals_the_batched_path(ragged):
  """The one-query (decoding) branch of dot_product_attention, which reduces over the
  cache in its own layout, gives the batched-matmul branch's last row."""
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.standard_normal((3, 2, 8, 16)), jnp.float32)
  k, v = (jnp.asarray(rng.standard_normal((3, 20, 4, 16)), jnp.float32) for _ in range(2))
  kwargs = {"kv_start": jnp.array([0, 3, 5])} if ragged else {}
  both = _attention(q, k, v, q_positions=jnp.array([11, 12]), kv_length=13, layer=0,
                    **kwargs)
  one = _attention(q[:, 1:], k, v, q_positions=jnp.array([12]), kv_length=13, layer=0,
                   **kwargs)
  assert one.shape == (3, 1, 8, 16)
  np.testing.assert_allclose(one, both[:, 1:], rtol=1e-5, atol=1e-5)
