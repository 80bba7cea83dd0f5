"""RaBitQ attention: packing, the bit-plane product, the estimator's unbiasedness and
bound (statistical), top-p selection and its baselines, the synthetic caches, the
analysis helpers (masks, recall curves, recorded queries, teacher-forced decoding), and
sparse decoding inside the Transformer.

Test time is XLA compilation, so: inputs are numpy draws (no per-shape compiles of
`jax.random`); each test runs its JAX code as one jitted function (compiled at the
suite's -O0, tests/conftest.py), and checks
the results in numpy; the two statistical estimator tests share one `estimator_trials`
call per head width; the small model's weights are numpy draws, and one prefill
serves both decoding paths (jnp and Pallas).
"""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import transformer
from methods import rabitq_attention as ra
from methods.rabitq_attention import baselines




def _normal(seed, shape):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _planes(q_u):
  """Bit planes of 4-bit integers q_u (..., D), packed: (..., 4, D/32)."""
  return jnp.stack([ra.pack_bits(((q_u >> j) & 1).astype(bool)) for j in range(4)], -2)


def test_pack_unpack_round_trip_and_bit_order():
  bits = np.random.default_rng(0).random((3, 5, 96)) < 0.5
  one = np.zeros((64,), bool)
  one[33] = True
  packed = jax.jit(lambda b, o: (ra.pack_bits(b), ra.unpack_bits(ra.pack_bits(b)), ra.pack_bits(o)))
  words, back, one_words = packed(bits, one)
  assert words.shape == (3, 5, 3) and words.dtype == jnp.uint32
  np.testing.assert_array_equal(back, bits)
  np.testing.assert_array_equal(one_words, np.array([0, 2], np.uint32))
  with pytest.raises(ValueError, match="multiple of 32"):
    ra.pack_bits(np.zeros((40,), bool))


def test_bit_plane_inner_product_equals_integer_dot():
  rng = np.random.default_rng(1)
  bits = rng.random((7, 50, 128)) < 0.5
  q_u = rng.integers(0, 16, (7, 128), dtype=np.int32)

  @jax.jit
  def products(bits, q_u, q):
    got = ra.binary_int4_dot(ra.pack_bits(bits), _planes(q_u))
    code = ra.quantize_query(q, randomized=False)
    return (got, ra.integer_dot(bits, q_u), code,
            ra.binary_query_product(ra.pack_bits(bits), code))

  got, want, code, product = products(bits, q_u, _normal(1, (7, 128)))
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(want, np.einsum("knd,kd->kn", bits.astype(np.int64), q_u))
  # The float identity of eq. 20: <x_bar, q_bar> from integers equals the float product.
  x_bar = (2.0 * bits - 1.0) / math.sqrt(128)
  q_bar = np.asarray(code.delta)[:, None] * np.asarray(code.q_u) + np.asarray(code.v_l)[:, None]
  np.testing.assert_allclose(product, np.einsum("knd,kd->kn", x_bar, q_bar),
                             rtol=1e-4, atol=1e-4)


def test_rotation_is_orthogonal_and_key_codes_are_consistent():
  d = 64
  k = _normal(3, (10, d)) + 3.0

  @jax.jit
  def codes_of(key, k):
    p = ra.random_rotation(key, d)
    codes = ra.quantize_keys(k, p, jnp.mean(k, axis=0), jnp.ones((d,)))
    return p, codes, ra.unpack_bits(codes.words, d)

  p, codes, bits = jax.tree.map(np.asarray, codes_of(jax.random.PRNGKey(2), k))
  np.testing.assert_allclose(p.T @ p, np.eye(d), atol=1e-5)
  c = k.mean(axis=0)
  np.testing.assert_allclose(codes.norm, np.linalg.norm(k - c, axis=-1), rtol=1e-5)
  o = (k - c) / codes.norm[:, None]
  x_bar = (2.0 * bits - 1.0) / math.sqrt(d)
  np.testing.assert_allclose(codes.ip_correction, np.sum((x_bar @ p.T) * o, -1), rtol=1e-4)
  np.testing.assert_allclose(codes.center_term, np.sum(k - c, -1), rtol=1e-4, atol=1e-4)
  assert np.all((codes.ip_correction > 0.5) & (codes.ip_correction <= 1.0))


def test_narrow_heads_are_zero_padded_to_32_bits():
  """A 16-wide head is coded as its zero-padding to 32: same codes, same estimates."""
  k, q = _normal(6, (9, 16)), _normal(7, (16,))

  @jax.jit
  def narrow_and_wide(key, k, q):
    p = ra.random_rotation(key, 32)
    pad = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 16)])
    narrow = ra.quantize_keys(k, p, jnp.mean(k, 0))
    wide = ra.quantize_keys(pad(k), p, pad(jnp.mean(k, 0)))
    return narrow, wide, ra.estimate_unit_float(narrow, pad(q) @ p)

  narrow, wide, est = narrow_and_wide(jax.random.PRNGKey(8), k, q)
  np.testing.assert_array_equal(narrow.words, wide.words)
  np.testing.assert_allclose(narrow.norm, wide.norm, rtol=1e-6)
  with pytest.raises(ValueError, match="rotation must be"):
    ra.quantize_keys(k, np.eye(16, dtype=np.float32))      # a 16-wide rotation
  assert est.shape == (9,) and np.all(np.isfinite(est))
  assert ra.key_bytes_per_token(16) == 4 + 12


def _pairs(n, d, cos, seed):
  """n unit pairs (o, q) in dimension d with <o, q> = cos (numpy, float32)."""
  rng = np.random.default_rng(seed)
  o = rng.standard_normal((n, d))
  o /= np.linalg.norm(o, axis=-1, keepdims=True)
  e = rng.standard_normal((n, d))
  e -= np.sum(e * o, -1, keepdims=True) * o
  e /= np.linalg.norm(e, axis=-1, keepdims=True)
  return o.astype(np.float32), (cos * o + math.sqrt(1.0 - cos * cos) * e).astype(np.float32)


def test_query_at_cosine_gives_unit_queries_at_the_cosine():
  rng = np.random.default_rng(9)
  o = rng.standard_normal((50, 64)).astype(np.float32)
  o /= np.linalg.norm(o, axis=-1, keepdims=True)
  cos = rng.uniform(-0.9, 0.9, (50, 1)).astype(np.float32)
  q = np.asarray(jax.jit(ra.query_at_cosine)(o, _normal(10, (50, 64)), cos))
  np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(np.sum(o * q, -1), cos[:, 0], atol=1e-5)


# Per head width d: the unbiasedness pair's <o, q> and the rotations x roundings drawn.
_ESTIMATOR = {32: (0.6, 1500), 64: (-0.3, 600)}
_BOUND_PAIRS, _BOUND_COS = 24, 0.2


@pytest.fixture(scope="module")
def estimator_draws():
  """Per d, one `estimator_trials` call (one compile): pair 0 is the unbiasedness
  test's, pairs 1..24 (<o, q> = 0.2) the bound test's; every pair is quantised alone
  under each rotation, so the two tests' draws do not interact."""
  out = {}
  for d, (cos, draws) in _ESTIMATOR.items():
    o0, q0 = _pairs(1, d, cos, d)
    o1, q1 = _pairs(_BOUND_PAIRS, d, _BOUND_COS, d + 1)
    trials = jax.jit(functools.partial(ra.estimator_trials, num_rotations=draws))(
        np.concatenate([o0, o1]), np.concatenate([q0, q1]), jax.random.PRNGKey(d))
    out[d] = jax.tree.map(np.asarray, trials)
  return out


def test_estimator_is_unbiased_under_randomized_rounding(estimator_draws):
  """For one pair, the mean over many rotations x roundings is within 4 standard
  errors of <o, q>."""
  for d, (cos, draws) in _ESTIMATOR.items():
    err = estimator_draws[d].randomized[:, 0] - cos
    assert err.size == draws
    se = err.std(ddof=1) / math.sqrt(err.size)
    assert abs(err.mean()) < 4 * se, (d, err.mean(), se)
    assert se < 0.01             # the test has power: a bias of 0.04 would be caught


def test_error_bound_holds_at_the_stated_rate_and_shrinks_with_d(estimator_draws):
  """|error| <= bound(eps0 = 1.9) for at least P(|N(0,1)| <= 1.9) = 0.943 of the draws
  (less 3 binomial standard errors; 24 pairs x the rotations, nearly independent), and
  the RMS error falls like 1/sqrt(d): sqrt(63 / 31) = 1.43 from d = 32 to 64."""
  rate = ra.bound_rate()
  assert abs(rate - 0.9426) < 1e-3
  rms = {}
  for d, trials in estimator_draws.items():
    flt, bound = trials.float[:, 1:], trials.bound[:, 1:]
    stats = ra.error_stats(flt, np.full((_BOUND_PAIRS,), _BOUND_COS, np.float32), bound)
    n = flt.size
    assert stats["inside_bound"] >= rate - 3 * math.sqrt(rate * (1 - rate) / n), (d, stats)
    rms[d] = stats["rmse"]
  ratio = rms[32] / rms[64]
  assert 1.25 < ratio < 1.65, ratio


def test_error_stats_against_hand_computed_values():
  est = np.array([[1.1, 2.0], [0.9, 2.2], [1.0, 2.4]])
  stats = ra.error_stats(est, np.array([1.0, 2.0]), np.full((3, 2), 0.15))
  np.testing.assert_allclose(stats["rmse"], math.sqrt((0.01 + 0.01 + 0.04 + 0.16) / 6),
                             rtol=1e-5)
  assert stats["inside_bound"] == pytest.approx(4 / 6)
  np.testing.assert_allclose(stats["mean_abs_bias"], 0.1, rtol=1e-4)   # biases 0 and 0.2
  # The t-statistic of pair 2: mean 0.2, sd 0.2, se 0.2/sqrt(3); pair 1's is 0.
  np.testing.assert_allclose(stats["bias_t_rms"], math.sqrt(3 / 2), rtol=1e-4)


def test_top_p_selection_reaches_mass_p_on_its_scores():
  logits = 3.0 * _normal(4, (6, 200))
  valid = np.arange(200) < 180
  forced = np.arange(200) < 3
  p_values = (0.3, 0.8, 0.95)

  @jax.jit
  def select(logits):
    sels = [ra.top_p_select(logits, valid, p, 200, forced) for p in p_values]
    flat = ra.top_p_select(0.1 * logits, valid, 0.9, 200).count
    peaked = ra.top_p_select(3.0 * logits, valid, 0.9, 200).count
    return sels, flat, peaked, jnp.sum(ra.top_k_mask(logits, valid, 10), -1)

  sels, flat, peaked, top_k = jax.tree.map(np.asarray, select(logits))
  z = np.where(valid, logits, -np.inf).astype(np.float64)
  probs = np.exp(z - z.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  for p, sel in zip(p_values, sels):
    mask = np.zeros((6, 200), bool)
    np.put_along_axis(mask, sel.indices, sel.keep, -1)
    mass = np.sum(np.where(mask, probs, 0.0), -1)
    assert np.all(mass >= p - 1e-6) and np.all(mask[:, :3]) and not mask[:, 180:].any()
    np.testing.assert_allclose(mass, sel.mass, rtol=1e-5)
    # Smallest such set: dropping the least likely non-forced kept token falls below p.
    free = np.where(mask & ~forced[None], probs, np.inf)
    assert np.all(mass - free.min(-1) < p)
  # The budget adapts: flat logits need many more tokens than peaked ones; top-k is fixed.
  assert np.all(flat > 4 * peaked)
  assert np.all(top_k == 10)


def test_baselines_select_what_they_promise():
  q, k, v = _normal(5, (3, 32)), _normal(6, (3, 64, 32)), _normal(7, (3, 64, 32))
  valid = np.ones((64,), bool)
  partial = np.arange(64) < 50
  forced = np.broadcast_to(np.arange(64) >= 45, (3, 64))
  counts = (1, 2, 4)

  @jax.jit
  def run(q, k, v):
    bounds = baselines.quest_bounds(q, k, partial, 16)
    return dict(
        full=baselines.full_attention(q, k, v, valid),
        masked=baselines.masked_attention(q, k, v, jnp.ones((3, 64), bool)),
        top_k=baselines.oracle_top_k(q, k, valid, 5),
        top_p_mass=ra.attention_mass(baselines.exact_logits(q, k), valid,
                                     baselines.oracle_top_p(q, k, valid, 0.9)),
        bounds=baselines.quest_bounds(q, k, valid, 16),
        quest=baselines.quest(q, k, valid, 2, 16),
        partial_bounds=bounds,
        masks=[baselines.quest_mask(bounds, partial, n, 16, forced) for n in counts],
        quests=[baselines.quest(q, k, partial, n, 16, forced) for n in counts])

  out = jax.tree.map(np.asarray, run(q, k, v))
  np.testing.assert_allclose(out["masked"], out["full"], rtol=1e-6)
  assert np.all(np.sum(out["top_k"], -1) == 5)
  assert np.all(out["top_p_mass"] >= 0.9 - 1e-6)
  # Quest's bound really bounds every token's score in its chunk.
  scores = np.einsum("bd,bsd->bs", q, k).reshape(3, 4, 16)
  assert np.all(scores.max(-1) <= out["bounds"] + 1e-4)
  assert np.all(np.sum(out["quest"], -1) == 32)
  # quest_mask on precomputed bounds is quest; with forced tokens and a partial cache.
  for n, mask, quest in zip(counts, out["masks"], out["quests"]):
    np.testing.assert_array_equal(mask, quest)
    chunks = np.argsort(-out["partial_bounds"], axis=-1)[:, :n]
    want = np.zeros((3, 64), bool)
    for row in range(3):
      for c in chunks[row]:
        want[row, 16 * c:16 * (c + 1)] = True
    np.testing.assert_array_equal(mask, (want | forced) & partial)


@pytest.fixture(scope="module")
def small_lm():
  """A random 2-layer GQA model. Its weights are drawn as `transformer.init_params`
  draws them (normal(0.02) matrices and embeddings, unit norm scales), in numpy, so
  that no initialisation is compiled."""
  cfg = transformer.llama_config(vocab_size=64, d_model=128, num_layers=2, num_heads=4,
                                 num_kv_heads=2, d_ff=64, max_seq_len=128)
  model = transformer.Transformer(cfg)
  shapes = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0),
                                        jnp.zeros((1, 1), jnp.int32)))
  rng = np.random.default_rng(0)

  def draw(path, leaf):
    if path[-1].key == "scale":
      return jnp.ones(leaf.shape, leaf.dtype)
    return jnp.asarray(0.02 * rng.standard_normal(leaf.shape), leaf.dtype)

  return model, jax.tree_util.tree_map_with_path(draw, shapes["params"])


def _rabitq_model(model, rcfg):
  return transformer.Transformer(model.config, attention_fn=ra.make_attention_fn(rcfg))


def _init_cache(rcfg, model, batch, length, seed):
  return jax.jit(lambda key: ra.init_cache(rcfg, model.config, batch, length, key))(
      jax.random.PRNGKey(seed))


def test_chunked_quantisation_and_kernels_inside_the_model(small_lm):
  """Decoding with the Pallas kernels (interpret) matches the jnp path; the quantised
  region grows by `interval` once the tail exceeds recent_window + interval; the codes
  match a direct quantisation of the cached keys; budgets respect max_budget. Prefill
  (exact attention + quantisation) runs no kernel, so both paths decode from one
  prefilled cache."""
  model, params = small_lm
  tokens = np.random.default_rng(4).integers(0, 64, (1, 40), dtype=np.int32)
  rcfgs = [ra.RaBitQConfig(num_sink=2, recent_window=4, interval=4, max_budget=16,
                           top_p=0.5, use_kernels=use_kernels, interpret=True)
           for use_kernels in (False, True)]
  apply = lambda rcfg: jax.jit(lambda p, t, c: _rabitq_model(model, rcfg).apply({"params": p}, t, c))
  logits, prefilled = apply(rcfgs[0])(params, tokens[:, :16],          # prefill (T = 16)
                                      _init_cache(rcfgs[0], model, 1, 64, 5))
  assert int(prefilled.state[0].qlen) == 12 == int(prefilled.state[1].qlen)  # 16 - window
  outs, states = [], []
  for rcfg in rcfgs:
    step, cache, got = apply(rcfg), prefilled, [logits[:, -1]]
    for i in range(16, 30):
      out, cache = step(params, tokens[:, i:i + 1], cache)
      got.append(out[:, -1])
      tail = int(cache.length) - int(cache.state[0].qlen)
      assert tail <= rcfg.recent_window + rcfg.interval
      assert np.all(np.asarray(cache.state[0].last_count) <= rcfg.max_budget)
    outs.append(np.concatenate(got))
    states.append(cache)
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4)
  st = states[0].state[1]
  assert int(st.qlen) == 24                          # 12 + 3 chunks of 4
  k = states[0].k[1]                                 # (B, S, KV, D)
  direct = jax.jit(ra.quantize_keys)(jnp.swapaxes(k, 1, 2), st.rotation, st.key_center,
                                  st.query_center)
  np.testing.assert_array_equal(st.words[:, :, 2:24], direct.words[:, :, 2:24])
  np.testing.assert_allclose(st.norm[:, :, 2:24], direct.norm[:, :, 2:24], rtol=1e-5)


def test_config_errors_name_the_value():
  with pytest.raises(ValueError, match="max_budget=10"):
    ra.RaBitQConfig(num_sink=4, recent_window=8, interval=4, max_budget=10)
  with pytest.raises(ValueError, match="top_p"):
    ra.RaBitQConfig(top_p=0.0)


def test_synthetic_cache_has_key_mean_outliers_and_peaked_and_flat_queries():
  @jax.jit
  def cache_and_counts(key):
    q, k, v = ra.synthetic_cache(key, 1024, 128, 4, 2)
    top = ra.top_p_mask(baselines.exact_logits(q, k), jnp.ones((1024,), bool), 0.9)
    return q, k, v, jnp.sum(top, -1)

  q, k, v, counts = jax.tree.map(np.asarray, cache_and_counts(jax.random.PRNGKey(11)))
  assert q.shape == (4, 128) and k.shape == v.shape == (1024, 128)
  mean, std = k.mean(0), k.std(0)
  np.testing.assert_allclose(np.abs(mean[:2]), 12.0, atol=0.5)    # outlier channels
  np.testing.assert_allclose(std[:2], 3.0, rtol=0.15)
  np.testing.assert_allclose(std[2:], 1.0, rtol=0.15)
  # Peaked queries reach 90% of the attention mass with far fewer tokens than flat ones.
  assert counts[:2].max() * 10 < counts[2:].min(), counts


def test_decode_masks_against_brute_force():
  positions = np.array([0, 5, 9])
  valid, forced = jax.jit(ra.decode_masks, static_argnums=(1, 2, 3))(positions, 10, 2, 3)
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
  uniform, two = jax.jit(lambda: (
      ra.attention_entropy(jnp.zeros(8), jnp.arange(8) < 4),
      ra.attention_entropy(jnp.array([0.0, -1e4, 0.0]), jnp.ones(3, bool))))()
  np.testing.assert_allclose(uniform, math.log(4), rtol=1e-6)
  assert float(two) == pytest.approx(math.log(2))


def test_selection_metrics_of_the_full_and_an_empty_selection():
  q, k, v = _normal(12, (2, 32)), _normal(13, (40, 32)), _normal(14, (40, 32))
  valid = np.ones((2, 40), bool)

  @jax.jit
  def metrics(q, k, v):
    logits = baselines.exact_logits(q, k)
    full = baselines.masked_attention(q[:, None], k[None], v[None], valid[:, None])[:, 0]
    top = ra.top_k_mask(logits, valid, 5)
    return (ra.selection_metrics(q, k, v, logits, valid, full, valid),
            ra.selection_metrics(q, k, v, logits, valid, full, top),
            ra.attention_mass(logits, valid, top))

  (tokens, recall, err), (_, recall5, err5), mass5 = metrics(q, k, v)
  np.testing.assert_array_equal(tokens, [40, 40])
  np.testing.assert_allclose(recall, 1.0, rtol=1e-6)
  np.testing.assert_allclose(err, 0.0, atol=1e-6)
  np.testing.assert_allclose(recall5, mass5, rtol=1e-6)
  assert np.all(np.asarray(err5) > 0)


def test_record_queries_in_chunks_matches_one_prefill(small_lm):
  model, params = small_lm
  tokens = np.random.default_rng(13).integers(0, 64, (1, 32), dtype=np.int32)
  chunked = ra.record_queries(model, params, tokens, chunk=8)
  whole = jax.jit(lambda t: ra.record_queries(model, params, t, chunk=32))(tokens)   # one call
  _, cache = jax.jit(lambda t, c: model.apply({"params": params}, t, c))(
      tokens, transformer.init_cache(model.config, 1, 32))
  for layer, ((qc, kc, vc), (qw, kw, vw)) in enumerate(zip(chunked, whole)):
    assert qc.shape == (1, 32, 4, model.config.dim_per_head)
    assert np.all(np.any(np.asarray(qc) != 0, axis=-1))            # every position recorded
    np.testing.assert_allclose(qc, qw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kc, cache.k[layer], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vw, cache.v[layer], rtol=1e-5, atol=1e-5)


def test_teacher_forced_decode_equals_the_forward_pass(small_lm):
  """Through a plain cache and through a RaBitQ cache that keeps every token."""
  model, params = small_lm
  tokens = np.random.default_rng(14).integers(0, 64, (2, 24), dtype=np.int32)
  want = jax.jit(lambda t: model.apply({"params": params}, t))(tokens[:, :-1])[:, 7:]
  decode = lambda m, cache: jax.jit(
      lambda c: ra.teacher_forced_decode(m, params, tokens, 8, c))(cache)
  got, count = decode(model, transformer.init_cache(model.config, 2, 24))
  assert got.shape == want.shape and float(count) == 0.0
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  rcfg = ra.RaBitQConfig(num_sink=1, recent_window=2, interval=2, max_budget=24, top_p=1.0)
  got, count = decode(_rabitq_model(model, rcfg), _init_cache(rcfg, model, 2, 24, 15))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(count, np.mean(np.arange(8, 23) + 1))  # every earlier token


def test_bad_hyperparameters_are_errors_not_silent_results():
  """Issue 17: values that used to give a silently degenerate result or a deep error."""
  logits, valid = jnp.log(jnp.array([0.5, 0.3, 0.2])), jnp.ones(3, bool)
  for p in (0.0, float("nan")):  # used to keep only the top token
    with pytest.raises(ValueError, match="p=(0.0|nan)"):
      ra.top_p_select(logits, valid, p, 3)
  o, e = jnp.array([1.0, 0.0]), jnp.array([0.3, 2.0])
  with pytest.raises(ValueError, match="cos=.*1.5"):  # used to give NaN queries
    ra.query_at_cosine(o, e, jnp.array([1.5]))
  with pytest.raises(ValueError, match="bits=0"):
    ra.quantize_query(jnp.ones((2, 32)), bits=0, randomized=False)
  with pytest.raises(ValueError, match="RaBitQConfig.max_budget=64.5"):
    ra.RaBitQConfig(max_budget=64.5)
  plain = transformer.init_cache(transformer.llama_config(vocab_size=8, d_model=32,
                                                          num_heads=2), 1, 8)
  with pytest.raises(ValueError, match="cache.state is None"):
    ra.with_top_p(plain, 0.9)
  with pytest.raises(ValueError, match="num_rotations=0"):
    ra.estimator_trials(jnp.ones((2, 32)), jnp.ones((2, 32)), jax.random.PRNGKey(0), 0)
  with pytest.raises(ValueError, match="outliers=40"):
    ra.synthetic_cache(jax.random.PRNGKey(0), 256, 32, 2, 40)
  # Under jit a traced p is not checked (nothing added to the program).
  sel = jax.jit(ra.top_p_select, static_argnums=3)(logits, valid, 0.7, 3)
  assert int(sel.count) == 2
