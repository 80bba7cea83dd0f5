"""RaBitQ attention: packing, the bit-plane product, the estimator's unbiasedness and
bound (statistical), top-p selection and its baselines, the synthetic caches, the
analysis helpers (masks, recall curves, recorded queries, teacher-forced decoding), and
sparse decoding inside the Transformer."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import transformer
from methods import rabitq_attention as ra
from methods.rabitq_attention import baselines


def test_pack_unpack_round_trip_and_bit_order():
  bits = jax.random.bernoulli(jax.random.PRNGKey(0), 0.5, (3, 5, 96))
  words = ra.pack_bits(bits)
  assert words.shape == (3, 5, 3) and words.dtype == jnp.uint32
  np.testing.assert_array_equal(ra.unpack_bits(words), bits)
  one = jnp.zeros((64,), bool).at[33].set(True)
  np.testing.assert_array_equal(ra.pack_bits(one), np.array([0, 2], np.uint32))
  with pytest.raises(ValueError, match="multiple of 32"):
    ra.pack_bits(jnp.zeros((40,), bool))


def test_bit_plane_inner_product_equals_integer_dot():
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  bits = jax.random.bernoulli(keys[0], 0.5, (7, 50, 128))
  q_u = jax.random.randint(keys[1], (7, 128), 0, 16)
  planes = jnp.stack([ra.pack_bits(((q_u >> j) & 1).astype(bool)) for j in range(4)], -2)
  got = ra.binary_int4_dot(ra.pack_bits(bits), planes)
  np.testing.assert_array_equal(got, ra.integer_dot(bits, q_u))
  # The float identity of eq. 20: <x_bar, q_bar> from integers equals the float product.
  code = ra.quantize_query(jax.random.normal(keys[1], (7, 128)), randomized=False)
  x_bar = (2.0 * bits - 1.0) / math.sqrt(128)
  q_bar = code.delta[:, None] * code.q_u + code.v_l[:, None]
  want = jnp.einsum("knd,kd->kn", x_bar, q_bar)
  np.testing.assert_allclose(ra.binary_query_product(ra.pack_bits(bits), code), want,
                             rtol=1e-4, atol=1e-4)


def test_rotation_is_orthogonal_and_key_codes_are_consistent():
  d = 64
  p = ra.random_rotation(jax.random.PRNGKey(2), d)
  np.testing.assert_allclose(p.T @ p, np.eye(d), atol=1e-5)
  k = jax.random.normal(jax.random.PRNGKey(3), (10, d)) + 3.0
  c = jnp.mean(k, axis=0)
  codes = ra.quantize_keys(k, p, c, jnp.ones((d,)))
  np.testing.assert_allclose(codes.norm, jnp.linalg.norm(k - c, axis=-1), rtol=1e-5)
  o = (k - c) / codes.norm[:, None]
  x_bar = (2.0 * ra.unpack_bits(codes.words, d) - 1.0) / math.sqrt(d)
  np.testing.assert_allclose(codes.ip_correction, jnp.sum((x_bar @ p.T) * o, -1), rtol=1e-4)
  np.testing.assert_allclose(codes.center_term, jnp.sum(k - c, -1), rtol=1e-4, atol=1e-4)
  assert bool(jnp.all((codes.ip_correction > 0.5) & (codes.ip_correction <= 1.0)))


def test_narrow_heads_are_zero_padded_to_32_bits():
  """A 16-wide head is coded as its zero-padding to 32: same codes, same estimates."""
  k = jax.random.normal(jax.random.PRNGKey(6), (9, 16))
  q = jax.random.normal(jax.random.PRNGKey(7), (16,))
  p = ra.random_rotation(jax.random.PRNGKey(8), 32)
  narrow = ra.quantize_keys(k, p, jnp.mean(k, 0))
  wide = ra.quantize_keys(jnp.pad(k, ((0, 0), (0, 16))), p, jnp.pad(jnp.mean(k, 0), (0, 16)))
  np.testing.assert_array_equal(narrow.words, wide.words)
  np.testing.assert_allclose(narrow.norm, wide.norm, rtol=1e-6)
  with pytest.raises(ValueError, match="rotation must be"):
    ra.quantize_keys(k, ra.random_rotation(jax.random.PRNGKey(8), 16))
  est = ra.estimate_unit_float(narrow, jnp.pad(q, (0, 16)) @ p)
  assert est.shape == (9,) and bool(jnp.all(jnp.isfinite(est)))
  assert ra.key_bytes_per_token(16) == 4 + 12


def _pairs(n, d, cos, seed):
  """n unit pairs (o, q) in dimension d with <o, q> = cos."""
  ko, ke = jax.random.split(jax.random.PRNGKey(seed))
  o = jax.random.normal(ko, (n, d))
  o = o / jnp.linalg.norm(o, axis=-1, keepdims=True)
  return o, ra.query_at_cosine(o, jax.random.normal(ke, (n, d)), jnp.full((n, 1), cos))


def test_query_at_cosine_gives_unit_queries_at_the_cosine():
  keys = jax.random.split(jax.random.PRNGKey(9), 3)
  o = jax.random.normal(keys[0], (50, 64))
  o = o / jnp.linalg.norm(o, axis=-1, keepdims=True)
  cos = jax.random.uniform(keys[2], (50, 1), minval=-0.9, maxval=0.9)
  q = ra.query_at_cosine(o, jax.random.normal(keys[1], (50, 64)), cos)
  np.testing.assert_allclose(jnp.linalg.norm(q, axis=-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(jnp.sum(o * q, -1), cos[:, 0], atol=1e-5)


def test_estimator_is_unbiased_under_randomized_rounding():
  """For one pair, the mean over many rotations x roundings is within 4 standard
  errors of <o, q>."""
  for seed, (d, cos, draws) in enumerate([(32, 0.6, 1500), (64, -0.3, 600)]):
    o, q = _pairs(1, d, cos, seed)
    est = np.asarray(ra.estimator_trials(o, q, jax.random.PRNGKey(10 + seed), draws).randomized)
    err = est[:, 0] - cos
    se = err.std(ddof=1) / math.sqrt(err.size)
    assert abs(err.mean()) < 4 * se, (d, err.mean(), se)
    assert se < 0.01             # the test has power: a bias of 0.04 would be caught


def test_error_bound_holds_at_the_stated_rate_and_shrinks_with_d():
  """|error| <= bound(eps0 = 1.9) for at least P(|N(0,1)| <= 1.9) = 0.943 of the draws
  (less 3 binomial standard errors; 24 pairs x 40 rotations, nearly independent), and
  the RMS error falls like 1/sqrt(d): sqrt(63 / 31) = 1.43 from d = 32 to 64."""
  rate = ra.bound_rate()
  assert abs(rate - 0.9426) < 1e-3
  rms, n = {}, 24 * 40
  for d in (32, 64):
    o, q = _pairs(24, d, 0.2, d)
    trials = ra.estimator_trials(o, q, jax.random.PRNGKey(d), 40)
    stats = ra.error_stats(trials.float, jnp.full((24,), 0.2), trials.bound)
    assert stats["inside_bound"] >= rate - 3 * math.sqrt(rate * (1 - rate) / n), (d, stats)
    rms[d] = stats["rmse"]
  ratio = rms[32] / rms[64]
  assert 1.25 < ratio < 1.65, ratio


def test_error_stats_against_hand_computed_values():
  est = jnp.array([[1.1, 2.0], [0.9, 2.2], [1.0, 2.4]])
  stats = ra.error_stats(est, jnp.array([1.0, 2.0]), jnp.full((3, 2), 0.15))
  np.testing.assert_allclose(stats["rmse"], math.sqrt((0.01 + 0.01 + 0.04 + 0.16) / 6),
                             rtol=1e-5)
  assert stats["inside_bound"] == pytest.approx(4 / 6)
  np.testing.assert_allclose(stats["mean_abs_bias"], 0.1, rtol=1e-4)   # biases 0 and 0.2
  # The t-statistic of pair 2: mean 0.2, sd 0.2, se 0.2/sqrt(3); pair 1's is 0.
  np.testing.assert_allclose(stats["bias_t_rms"], math.sqrt(3 / 2), rtol=1e-4)


def test_top_p_selection_reaches_mass_p_on_its_scores():
  logits = 3.0 * jax.random.normal(jax.random.PRNGKey(4), (6, 200))
  valid = jnp.arange(200) < 180
  forced = jnp.arange(200) < 3
  probs = jax.nn.softmax(jnp.where(valid, logits, -jnp.inf), -1)
  for p in (0.3, 0.8, 0.95):
    sel = ra.top_p_select(logits, valid, p, 200, forced)
    mask = np.zeros((6, 200), bool)
    np.put_along_axis(mask, np.asarray(sel.indices), np.asarray(sel.keep), -1)
    mass = np.sum(np.where(mask, probs, 0.0), -1)
    assert np.all(mass >= p - 1e-6) and np.all(mask[:, :3]) and not mask[:, 180:].any()
    np.testing.assert_allclose(mass, sel.mass, rtol=1e-5)
    # Smallest such set: dropping the least likely non-forced kept token falls below p.
    free = np.where(mask & ~np.asarray(forced)[None], probs, np.inf)
    assert np.all(mass - free.min(-1) < p)
  # The budget adapts: flat logits need many more tokens than peaked ones; top-k is fixed.
  flat = ra.top_p_select(0.1 * logits, valid, 0.9, 200).count
  peaked = ra.top_p_select(3.0 * logits, valid, 0.9, 200).count
  assert np.all(np.asarray(flat) > 4 * np.asarray(peaked))
  assert np.all(np.sum(ra.top_k_mask(logits, valid, 10), -1) == 10)


def test_baselines_select_what_they_promise():
  keys = jax.random.split(jax.random.PRNGKey(5), 3)
  q = jax.random.normal(keys[0], (3, 32))
  k = jax.random.normal(keys[1], (3, 64, 32))
  v = jax.random.normal(keys[2], (3, 64, 32))
  valid = jnp.ones((64,), bool)
  full = baselines.full_attention(q, k, v, valid)
  np.testing.assert_allclose(baselines.masked_attention(q, k, v, jnp.ones((3, 64), bool)),
                             full, rtol=1e-6)
  assert np.all(np.sum(baselines.oracle_top_k(q, k, valid, 5), -1) == 5)
  top = baselines.oracle_top_p(q, k, valid, 0.9)
  assert np.all(ra.attention_mass(baselines.exact_logits(q, k), valid, top) >= 0.9 - 1e-6)
  # Quest's bound really bounds every token's score in its chunk.
  bounds = baselines.quest_bounds(q, k, valid, 16)
  scores = jnp.einsum("bd,bsd->bs", q, k).reshape(3, 4, 16)
  assert np.all(np.asarray(scores.max(-1)) <= np.asarray(bounds) + 1e-4)
  assert np.all(np.sum(baselines.quest(q, k, valid, 2, 16), -1) == 32)
  # quest_mask on precomputed bounds is quest; with forced tokens and a partial cache.
  valid = jnp.arange(64) < 50
  forced = jnp.broadcast_to(jnp.arange(64) >= 45, (3, 64))
  bounds = baselines.quest_bounds(q, k, valid, 16)
  for n in (1, 2, 4):
    mask = baselines.quest_mask(bounds, valid, n, 16, forced)
    np.testing.assert_array_equal(mask, baselines.quest(q, k, valid, n, 16, forced))
    chunks = np.argsort(-np.asarray(bounds), axis=-1)[:, :n]
    want = np.zeros((3, 64), bool)
    for row in range(3):
      for c in chunks[row]:
        want[row, 16 * c:16 * (c + 1)] = True
    want = (want | np.asarray(forced)) & np.asarray(valid)
    np.testing.assert_array_equal(mask, want)


@pytest.fixture(scope="module")
def small_lm():
  cfg = transformer.llama_config(vocab_size=64, d_model=128, num_layers=2, num_heads=4,
                                 num_kv_heads=2, d_ff=64, max_seq_len=128)
  model = transformer.Transformer(cfg)
  return model, transformer.init_params(model, jax.random.PRNGKey(0))


def test_chunked_quantisation_and_kernels_inside_the_model(small_lm):
  """Decoding with the Pallas kernels (interpret) matches the jnp path; the quantised
  region grows by `interval` once the tail exceeds recent_window + interval; the codes
  match a direct quantisation of the cached keys; budgets respect max_budget."""
  model, params = small_lm
  cfg = model.config
  tokens = jax.random.randint(jax.random.PRNGKey(4), (1, 40), 0, 64)
  outs, states = [], []
  for use_kernels in (False, True):
    rcfg = ra.RaBitQConfig(num_sink=2, recent_window=4, interval=4, max_budget=16,
                           top_p=0.5, use_kernels=use_kernels, interpret=True)
    sparse = transformer.Transformer(cfg, attention_fn=ra.make_attention_fn(rcfg))
    cache = ra.init_cache(rcfg, cfg, 1, 64, jax.random.PRNGKey(5))
    step = jax.jit(lambda p, t, c: sparse.apply({"params": p}, t, c))
    logits, cache = step(params, tokens[:, :16], cache)          # prefill (T = 16)
    assert int(cache.state[0].qlen) == 12            # 16 - recent_window
    got = [logits[:, -1]]
    for i in range(16, 30):
      logits, cache = step(params, tokens[:, i:i + 1], cache)
      got.append(logits[:, -1])
      tail = int(cache.length) - int(cache.state[0].qlen)
      assert tail <= rcfg.recent_window + rcfg.interval
      assert np.all(np.asarray(cache.state[0].last_count) <= rcfg.max_budget)
    outs.append(jnp.stack(got))
    states.append(cache)
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4)
  st = states[0].state[1]
  assert int(st.qlen) == 24                          # 12 + 3 chunks of 4
  k = states[0].k[1]                                 # (B, S, KV, D)
  direct = ra.quantize_keys(jnp.swapaxes(k, 1, 2), st.rotation, st.key_center,
                            st.query_center)
  np.testing.assert_array_equal(st.words[:, :, 2:24], direct.words[:, :, 2:24])
  np.testing.assert_allclose(st.norm[:, :, 2:24], direct.norm[:, :, 2:24], rtol=1e-5)


def test_config_errors_name_the_value():
  with pytest.raises(ValueError, match="max_budget=10"):
    ra.RaBitQConfig(num_sink=4, recent_window=8, interval=4, max_budget=10)
  with pytest.raises(ValueError, match="top_p"):
    ra.RaBitQConfig(top_p=0.0)


def test_synthetic_cache_has_key_mean_outliers_and_peaked_and_flat_queries():
  q, k, v = ra.synthetic_cache(jax.random.PRNGKey(11), 1024, 128, 4, 2)
  assert q.shape == (4, 128) and k.shape == v.shape == (1024, 128)
  mean, std = np.asarray(jnp.mean(k, 0)), np.std(np.asarray(k), 0)
  np.testing.assert_allclose(np.abs(mean[:2]), 12.0, atol=0.5)    # outlier channels
  np.testing.assert_allclose(std[:2], 3.0, rtol=0.15)
  np.testing.assert_allclose(std[2:], 1.0, rtol=0.15)
  # Peaked queries reach 90% of the attention mass with far fewer tokens than flat ones.
  logits = baselines.exact_logits(q, k)
  counts = np.asarray(np.sum(ra.top_p_mask(logits, jnp.ones((1024,), bool), 0.9), -1))
  assert counts[:2].max() * 10 < counts[2:].min(), counts


def test_decode_masks_against_brute_force():
  positions = np.array([0, 5, 9])
  valid, forced = ra.decode_masks(jnp.asarray(positions), 10, 2, 3)
  for row, t in enumerate(positions):
    for j in range(10):
      assert bool(valid[row, j]) == (j <= t)
      assert bool(forced[row, j]) == (j <= t and (j < 2 or t - 3 < j))


def test_tokens_at_recall_interpolates_in_log_tokens():
  assert ra.tokens_at_recall([10, 100], [0.5, 0.9], 0.7) == pytest.approx(math.sqrt(1000))
  assert ra.tokens_at_recall([100, 10], [0.9, 0.5], 0.9) == pytest.approx(100)   # unsorted
  assert ra.tokens_at_recall([10, 100], [0.95, 0.9], 0.9) == 10      # first point reaches it
  # Recall is made monotone: a dip at the larger budget does not hide the smaller one.
  assert ra.tokens_at_recall([10, 100, 1000], [0.5, 0.95, 0.9], 0.9) < 100
  assert math.isnan(ra.tokens_at_recall([10, 100], [0.5, 0.8], 0.9))


def test_attention_entropy_matches_closed_forms():
  valid = jnp.arange(8) < 4
  np.testing.assert_allclose(ra.attention_entropy(jnp.zeros(8), valid), math.log(4),
                             rtol=1e-6)
  assert float(ra.attention_entropy(jnp.array([0.0, -1e4, 0.0]), jnp.ones(3, bool))) == (
      pytest.approx(math.log(2)))


def test_selection_metrics_of_the_full_and_an_empty_selection():
  keys = jax.random.split(jax.random.PRNGKey(12), 3)
  q = jax.random.normal(keys[0], (2, 32))
  k, v = jax.random.normal(keys[1], (40, 32)), jax.random.normal(keys[2], (40, 32))
  valid = jnp.ones((2, 40), bool)
  logits = baselines.exact_logits(q, k)
  full = baselines.masked_attention(q[:, None], k[None], v[None], valid[:, None])[:, 0]
  metrics = jax.jit(ra.selection_metrics)
  tokens, recall, err = metrics(q, k, v, logits, valid, full, valid)
  np.testing.assert_array_equal(tokens, [40, 40])
  np.testing.assert_allclose(recall, 1.0, rtol=1e-6)
  np.testing.assert_allclose(err, 0.0, atol=1e-6)
  top = ra.top_k_mask(logits, valid, 5)
  _, recall5, err5 = metrics(q, k, v, logits, valid, full, top)
  np.testing.assert_allclose(recall5, ra.attention_mass(logits, valid, top), rtol=1e-6)
  assert np.all(np.asarray(err5) > 0)


def test_record_queries_in_chunks_matches_one_prefill(small_lm):
  model, params = small_lm
  tokens = jax.random.randint(jax.random.PRNGKey(13), (1, 32), 0, 64)
  chunked = ra.record_queries(model, params, tokens, chunk=8)
  whole = ra.record_queries(model, params, tokens, chunk=32)
  _, cache = jax.jit(lambda t, c: model.apply({"params": params}, t, c))(
      tokens, transformer.init_cache(model.config, 1, 32))
  for layer, ((qc, kc, vc), (qw, kw, vw)) in enumerate(zip(chunked, whole)):
    assert qc.shape == (1, 32, 4, model.config.dim_per_head)
    assert bool(jnp.all(jnp.any(qc != 0, axis=-1)))            # every position recorded
    np.testing.assert_allclose(qc, qw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kc, cache.k[layer], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vw, cache.v[layer], rtol=1e-5, atol=1e-5)


def test_teacher_forced_decode_equals_the_forward_pass(small_lm):
  """Through a plain cache and through a RaBitQ cache that keeps every token."""
  model, params = small_lm
  tokens = jax.random.randint(jax.random.PRNGKey(14), (2, 24), 0, 64)
  want = jax.jit(lambda t: model.apply({"params": params}, t))(tokens[:, :-1])[:, 7:]
  decode = lambda m, cache: jax.jit(lambda c: ra.teacher_forced_decode(m, params, tokens, 8,
                                                                        c))(cache)
  got, count = decode(model, transformer.init_cache(model.config, 2, 24))
  assert got.shape == want.shape and float(count) == 0.0
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  rcfg = ra.RaBitQConfig(num_sink=1, recent_window=2, interval=2, max_budget=24, top_p=1.0)
  sparse = transformer.Transformer(model.config, attention_fn=ra.make_attention_fn(rcfg))
  got, count = decode(sparse, ra.init_cache(rcfg, model.config, 2, 24, jax.random.PRNGKey(15)))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(count, np.mean(np.arange(8, 23) + 1))  # every earlier token
