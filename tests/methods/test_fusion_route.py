"""FusionRoute's pieces against closed forms and brute force: fused decoding, logit
addition, routing labels, the Co-LLM loss, weight merging, sequence-level routing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.models import sampling
from common.models import transformer
from methods.fusion_route import baselines, combine, merging, training
from methods.fusion_route import ensemble as ens_lib
from methods.fusion_route.router import Router, init_router

V = 32


@pytest.fixture(scope="module")
def ensemble():
  """Two experts of different families and sizes, and a smaller router."""
  experts = (transformer.Transformer(transformer.llama_config(
      vocab_size=V, d_model=16, num_layers=1, num_heads=2, d_ff=32, max_seq_len=64)),
             transformer.Transformer(transformer.neox_config(
                 vocab_size=V, d_model=32, num_layers=2, num_heads=2, d_ff=48, max_seq_len=64)))
  router = Router(transformer.llama_config(vocab_size=V, d_model=8, num_layers=1, num_heads=2,
                                           d_ff=16, max_seq_len=64), 2)
  ens = ens_lib.make_ensemble(experts, router)
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  params = {"experts": tuple(transformer.init_params(m, k) for m, k in zip(experts, keys)),
            "router": init_router(router, keys[2])}
  # Break the routing head's zero init so that the choice varies along the sequence.
  params["router"]["route_head"]["kernel"] = jax.random.normal(keys[2], (8, 2)) * 3.0
  ens_lib.check_params(ens, params)
  return ens, params


def _pinned(params, i):
  """Router params that always pick expert i and add zero complementary logits."""
  r = jax.tree.map(lambda x: x, params["router"])
  r["route_head"] = {"kernel": jnp.zeros_like(r["route_head"]["kernel"]),
                     "bias": jnp.zeros(2).at[i].set(10.0)}
  r["lm"]["lm_head"]["kernel"] = jnp.zeros_like(r["lm"]["lm_head"]["kernel"])
  return {"experts": params["experts"], "router": r}


@pytest.mark.parametrize("i", [0, 1])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fused_decoding_pinned_to_expert_i_is_expert_i_decoding(ensemble, i, temperature):
  ens, params = ensemble
  pinned = _pinned(params, i)
  prompt = jax.random.randint(jax.random.PRNGKey(1), (3, 5), 0, V)
  key = jax.random.PRNGKey(7)
  fused = ens_lib.generate(ens, pinned, prompt, key, max_new_tokens=12,
                           temperature=temperature, return_logits=True)
  alone = sampling.generate(ens.experts[i], params["experts"][i], prompt, key,
                            max_new_tokens=12, temperature=temperature, return_info=True,
                            return_logits=True)
  np.testing.assert_array_equal(fused.tokens, alone.tokens)
  assert np.all(np.asarray(fused.choices) == i)
  np.testing.assert_allclose(jax.nn.log_softmax(fused.logits),
                             jax.nn.log_softmax(alone.logits), atol=1e-5)


@pytest.mark.parametrize("mode", combine.MODES)
@pytest.mark.parametrize("complementary", [True, False])
def test_cached_fused_decoding_equals_full_recomputation(ensemble, mode, complementary):
  ens, params = ensemble
  prompt = jax.random.randint(jax.random.PRNGKey(2), (2, 4), 0, V)
  g = ens_lib.generate(ens, params, prompt, jax.random.PRNGKey(3), max_new_tokens=10,
                       mode=mode, complementary=complementary, return_logits=True)
  logits, choice, _ = ens_lib.forward(ens, params, g.tokens, mode, complementary)
  np.testing.assert_allclose(logits[:, 3:-1], g.logits, atol=1e-4)
  np.testing.assert_array_equal(choice[:, 3:-1], g.choices)
  assert len(np.unique(np.asarray(g.choices))) == 2   # both experts were used


def test_logit_addition_against_numpy():
  rng = np.random.default_rng(0)
  e, b, t, v = 3, 2, 4, 5
  z = rng.normal(size=(e, b, t, v))
  lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  w, zr = rng.normal(size=(b, t, e)), rng.normal(size=(b, t, v))
  hard, choice = combine.combine(jnp.asarray(lp), jnp.asarray(w), jnp.asarray(zr), "hard")
  soft, _ = combine.combine(jnp.asarray(lp), jnp.asarray(w), jnp.asarray(zr), "soft")
  plain, _ = combine.combine(jnp.asarray(lp), jnp.asarray(w), None, "hard",
                             complementary=False)
  pi = np.exp(w) / np.exp(w).sum(-1, keepdims=True)
  for bi in range(b):
    for ti in range(t):
      k = int(np.argmax(w[bi, ti]))
      assert choice[bi, ti] == k
      np.testing.assert_allclose(hard[bi, ti], lp[k, bi, ti] + zr[bi, ti], rtol=1e-5)
      np.testing.assert_allclose(plain[bi, ti], lp[k, bi, ti], rtol=1e-5)
      mix = sum(pi[bi, ti, j] * lp[j, bi, ti] for j in range(e))
      np.testing.assert_allclose(soft[bi, ti], mix + zr[bi, ti], rtol=1e-5)
  # Raw logits and log-probs give the same hard distribution (softmax is shift-invariant).
  raw, _ = combine.combine(jnp.asarray(z), jnp.asarray(w), jnp.asarray(zr), "hard")
  np.testing.assert_allclose(jax.nn.log_softmax(raw), jax.nn.log_softmax(hard), atol=1e-5)


def test_routing_labels_on_a_constructed_case():
  """Expert 0 knows token 1, expert 1 knows token 2, both are equally unsure of token 3:
  the labels follow the gold token, and only tokens 1 and 2 are informative."""
  table = np.full((2, 4), np.log(0.05))
  table[0, 1], table[1, 2] = np.log(0.8), np.log(0.8)
  table[:, 3] = np.log(0.25)
  lp = np.broadcast_to(table[:, None, None, :], (2, 1, 6, 4))
  gold = np.array([[1, 2, 3, 2, 1, 3]])
  labels, informative = combine.routing_labels(
      combine.gold_logprobs(jnp.asarray(lp), jnp.asarray(gold)), margin=0.5)
  np.testing.assert_array_equal(informative[0], [1, 1, 0, 1, 1, 0])
  np.testing.assert_array_equal(labels[0][np.asarray(informative[0])], [0, 1, 1, 0])
  # The stage-1 routing term counts only the informative tokens.
  w = jnp.zeros((1, 6, 2))
  _, m = combine.stage1_loss(jnp.asarray(lp), w, jnp.zeros((1, 6, 4)), jnp.asarray(gold),
                             margin=0.5)
  assert float(m["informative"]) == pytest.approx(4 / 6)
  assert float(m["route_ce"]) == pytest.approx(np.log(2.0), rel=1e-6)
  # A third expert as good as expert 0 on token 1: no longer informative there.
  three = np.concatenate([table, table[:1]])[:, None, None, :]
  three = np.broadcast_to(three, (3, 1, 6, 4))
  _, informative = combine.routing_labels(
      combine.gold_logprobs(jnp.asarray(three), jnp.asarray(gold)), margin=0.5)
  np.testing.assert_array_equal(informative[0], [0, 1, 0, 1, 0, 0])


def test_latent_routing_loss_is_co_llms_objective_for_two_models():
  rng = np.random.default_rng(1)
  z = rng.normal(size=(3, 5))                                  # deferral logits
  lp = np.log(rng.dirichlet(np.ones(6), size=(2, 3, 5)))       # (E=2, B, T, V)
  y = rng.integers(0, 6, size=(3, 5))
  scores = np.stack([np.zeros_like(z), z], -1)                 # pi = (sigma(-z), sigma(z))
  loss, _ = combine.latent_routing_loss(jnp.asarray(lp), jnp.asarray(scores), jnp.asarray(y))
  pb = np.take_along_axis(lp[0], y[..., None], -1)[..., 0]
  pr = np.take_along_axis(lp[1], y[..., None], -1)[..., 0]
  ls = lambda x: -np.log1p(np.exp(-x))
  expected = -np.mean(np.logaddexp(ls(-z) + pb, ls(z) + pr))
  assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_weight_merging_closed_forms():
  base = {"w": jnp.array([1.0, 2.0])}
  a, b = {"w": jnp.array([3.0, 2.0])}, {"w": jnp.array([1.0, 6.0])}
  np.testing.assert_allclose(merging.average([a, b])["w"], [2.0, 4.0])
  np.testing.assert_allclose(merging.task_arithmetic(base, [a, b], 0.5)["w"], [2.0, 4.0])
  np.testing.assert_allclose(merging.task_arithmetic(base, [a, b], 1.0)["w"], [3.0, 6.0])
  with pytest.raises(ValueError, match="one architecture"):
    merging.average([a, {"w": jnp.zeros(3)}])


def test_sequence_routing_by_brute_force():
  rng = np.random.default_rng(2)
  lp, scores = rng.normal(size=(3, 4, 6)), rng.normal(size=(4, 6, 3))
  out, choice = baselines.sequence_routing(lp, scores, prefix=2)
  for w in range(4):
    pi = np.exp(scores[w, :2]) / np.exp(scores[w, :2]).sum(-1, keepdims=True)
    k = int(np.argmax(pi.mean(0)))
    assert choice[w] == k
    np.testing.assert_allclose(out[w], lp[k, w])


def test_mixture_batch_is_a_pure_function_of_seed_and_step():
  streams = [np.arange(100, dtype=np.int32), np.arange(1000, 1100, dtype=np.int32)]
  a = training.mixture_batch(streams, [1.0, 3.0], 0, 5, 64, 8)["tokens"]
  b = training.mixture_batch(streams, [1.0, 3.0], 0, 5, 64, 8)["tokens"]
  np.testing.assert_array_equal(a, b)
  assert a.shape == (64, 9) and np.all(np.diff(a, axis=1) == 1)   # contiguous windows
  assert 0.55 < np.mean(a[:, 0] >= 1000) < 0.95                  # about 3:1
  only = training.mixture_batch(streams, [0.0, 1.0], 0, 5, 16, 8)["tokens"]
  assert np.all(only >= 1000)


def test_frozen_experts_never_move(ensemble):
  import optax
  ens, params = ensemble
  opt = training.frozen_experts(optax.adam(1e-2))
  state = opt.init(params)
  loss_fn = training.stage1_loss_fn(ens, margin=0.1, route_weight=1.0, hard_weight=0.5)
  batch = {"tokens": jax.random.randint(jax.random.PRNGKey(4), (2, 9), 0, V)}
  grads = jax.jit(jax.grad(lambda p: loss_fn(p, batch, None)[0]))(params)
  updates, _ = opt.update(grads, state, params)
  new = optax.apply_updates(params, updates)
  for old, moved in zip(jax.tree.leaves(params["experts"]), jax.tree.leaves(new["experts"])):
    np.testing.assert_array_equal(old, moved)
  assert any(np.any(np.asarray(o) != np.asarray(n)) for o, n in
             zip(jax.tree.leaves(params["router"]), jax.tree.leaves(new["router"])))
