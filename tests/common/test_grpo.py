"""GRPO's pure functions (`common.rl.grpo`) against plain numpy references written here.

The references loop over groups, rows and tokens in float64, the way EasyR1's
`compute_grpo_outcome_advantage`, `compute_policy_loss`, `compute_kl("low_var_kl")`
and `agg_loss` read, so the vectorised jnp code is checked branch by branch.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from common import rl
from common import sharding
from common import train as train_lib
from common.models import logprobs
from common.models import transformer as tfm
from common.rl import grpo

MODES = grpo.LOSS_AGG_MODES


# ----------------------------------------------------------------------------- references
def advantages_ref(rewards, group_size, eps=1e-6):
  r = np.asarray(rewards, np.float64).reshape(-1, group_size)
  out = np.zeros_like(r)
  for g, row in enumerate(r):
    if np.all(row == row[0]):
      continue                                         # no signal in a constant group
    out[g] = (row - row.mean()) / (row.std(ddof=1) + eps)
  return out.reshape(np.shape(rewards))


def kl_ref(logp, ref):
  d = np.asarray(ref, np.float64) - np.asarray(logp, np.float64)
  return np.exp(d) - d - 1.0


def token_loss_ref(lp, old, a, low, high, dual):
  """One token of the clipped objective, written with if/else branches."""
  ratio = np.exp(lp - old)
  clipped = min(max(ratio, 1.0 - low), 1.0 + high)
  loss = max(-a * ratio, -a * clipped)
  if a < 0:
    loss = min(loss, -a * dual)
  return loss


def aggregate_ref(x, mask, mode):
  rows = [(x[i][mask[i] > 0]) for i in range(x.shape[0])]
  if mode == "token-mean":
    n = sum(len(r) for r in rows)
    return sum(r.sum() for r in rows) / max(n, 1)
  if mode == "seq-mean-token-mean":
    return np.mean([r.sum() / max(len(r), 1) for r in rows])
  return np.mean([r.sum() for r in rows])


def grpo_ref(logp, old, ref, adv, mask, cfg):
  b, t = logp.shape
  per_token = np.array([[token_loss_ref(logp[i, j], old[i, j], adv[i], cfg.clip_low,
                                        cfg.clip_high, cfg.dual_clip) for j in range(t)]
                        for i in range(b)])
  pg = aggregate_ref(per_token, mask, cfg.loss_agg)
  kl = aggregate_ref(kl_ref(logp, ref), mask, cfg.loss_agg)
  return pg + cfg.kl_coef * kl, pg, kl


def random_case(seed, b=6, t=7):
  """Log-probs with ratios well past both clips and the dual clip, advantages of both
  signs, ragged masks (one row fully masked)."""
  rs = np.random.RandomState(seed)
  logp = np.log(rs.uniform(0.05, 1.0, (b, t)))
  old = logp + rs.normal(0, 0.8, (b, t))
  ref = logp + rs.normal(0, 0.5, (b, t))
  adv = rs.normal(0, 1.5, b)
  adv[0], adv[1] = abs(adv[0]) + 0.1, -abs(adv[1]) - 0.1
  lengths = rs.randint(1, t + 1, b)
  lengths[:2], lengths[-1] = t, 0
  old[0, 0] = logp[0, 0] - np.log(2.0)                 # A > 0, ratio 2: the high clip
  old[1, 0] = logp[1, 0] - np.log(5.0)                 # A < 0, ratio 5: the dual clip
  old[1, 1] = logp[1, 1] + np.log(2.0)                 # A < 0, ratio 1/2: the low clip
  mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float64)
  return [x.astype(np.float32) for x in (logp, old, ref, adv, mask)]


# ----------------------------------------------------------------------------- advantages
@pytest.mark.parametrize("seed", range(4))
def test_group_advantages_match_numpy(seed):
  rs = np.random.RandomState(seed)
  g = [2, 3, 5, 8][seed]
  rewards = rs.normal(size=4 * g).astype(np.float32)
  rewards[:g] = 0.1                                    # one constant group
  adv = grpo.group_advantages(rewards, g)
  np.testing.assert_allclose(adv, advantages_ref(rewards, g), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(grpo.group_advantages(rewards.reshape(4, g), g),
                             advantages_ref(rewards, g).reshape(4, g), rtol=1e-5, atol=1e-6)
  # Each non-constant group: zero mean, unit unbiased std (up to eps).
  by_group = np.asarray(adv).reshape(4, g)[1:]
  np.testing.assert_allclose(by_group.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(by_group.std(-1, ddof=1), 1.0, rtol=1e-4)


def test_zero_std_groups_give_zero_advantages():
  # 0.1 * 3 does not divide back to 0.1 exactly in float32: r - mean is a rounding
  # residue, which an unguarded (r - mean) / (std + eps) would blow up.
  rewards = jnp.array([0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.7, 0.7, 0.7])
  adv = grpo.group_advantages(rewards, 3)
  assert np.all(np.asarray(adv) == 0.0)
  binary = jnp.array([1.0, 0.0, 0.0, 0.0])
  np.testing.assert_allclose(grpo.group_advantages(binary, 4), [1.5, -0.5, -0.5, -0.5],
                             rtol=1e-5)
  grad = jax.grad(lambda r: jnp.sum(grpo.group_advantages(r, 3) ** 2))(rewards)
  assert np.all(np.isfinite(grad))


# ----------------------------------------------------------------------------- k3 KL
kl_jit = jax.jit(grpo.kl_k3)
LOGP = hnp.arrays(np.float32, (32,), elements=st.floats(-60.0, 0.0, width=32))


@settings(max_examples=60, deadline=None)
@given(LOGP, LOGP, st.floats(0.0, 2.0 ** -10, width=32))
def test_kl_k3_is_nonnegative(logp, ref, scale):
  assert np.all(np.asarray(kl_jit(logp, ref)) >= 0.0)
  near = (logp + scale * np.sign(ref - logp)).astype(np.float32)   # tiny differences too
  assert np.all(np.asarray(kl_jit(logp, near)) >= 0.0)


def test_kl_k3_zero_at_identity_and_matches_numpy():
  rs = np.random.RandomState(0)
  x = np.log(rs.uniform(1e-6, 1.0, 1000)).astype(np.float32)
  assert np.all(np.asarray(grpo.kl_k3(x, x)) == 0.0)
  np.testing.assert_array_equal(jax.grad(lambda a: jnp.sum(grpo.kl_k3(a, x)))(x), 0.0)
  y = (x + rs.normal(0, 0.5, x.shape)).astype(np.float32)
  np.testing.assert_allclose(grpo.kl_k3(x, y), kl_ref(x, y), rtol=1e-4, atol=1e-6)
  # EasyR1's clamp: the estimate stops at 10 (and passes no gradient there).
  assert float(grpo.kl_k3(jnp.float32(0.0), jnp.float32(5.0))) == 10.0


# ----------------------------------------------------------------------------- aggregation
@pytest.mark.parametrize("mode", MODES)
def test_aggregate_matches_numpy(mode):
  rs = np.random.RandomState(1)
  x = rs.normal(size=(5, 9)).astype(np.float32)
  mask = (rs.uniform(size=(5, 9)) < 0.6).astype(np.float32)
  mask[2] = 0.0
  np.testing.assert_allclose(grpo.aggregate(x, mask, mode), aggregate_ref(x, mask, mode),
                             rtol=1e-5)
  np.testing.assert_allclose(grpo.aggregate(x, mask > 0, mode), aggregate_ref(x, mask, mode),
                             rtol=1e-5)


# ----------------------------------------------------------------------------- the loss
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(3))
def test_grpo_loss_matches_numpy(seed, mode):
  logp, old, ref, adv, mask = random_case(seed)
  cfg = grpo.GRPOConfig(loss_agg=mode, kl_coef=0.05)
  loss, metrics = grpo.grpo_loss(logp, old, ref, adv, mask, cfg)
  want, pg, kl = grpo_ref(logp, old, ref, adv, mask, cfg)
  np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(metrics["pg_loss"], pg, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(metrics["kl"], kl, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_policy_loss_branches_and_metrics(seed):
  logp, old, _, adv, mask = random_case(seed)
  low, high, dual = 0.2, 0.28, 3.0
  per_token, m = grpo.policy_loss(logp, old, adv, mask, low, high, dual)
  b, t = logp.shape
  want = np.array([[token_loss_ref(logp[i, j], old[i, j], adv[i], low, high, dual)
                    for j in range(t)] for i in range(b)])
  np.testing.assert_allclose(per_token, want, rtol=1e-5, atol=1e-6)
  # Branch indicators from the ratio, token by token.
  ratio = np.exp(logp.astype(np.float64) - old)
  a = np.broadcast_to(adv[:, None], ratio.shape)
  high_clip = (a > 0) & (ratio > 1 + high)
  low_clip = (a < 0) & (ratio < 1 - low)
  dual_clip = (a < 0) & (ratio > dual)
  n = mask.sum()
  np.testing.assert_allclose(m["clip_frac_high"], (high_clip * mask).sum() / n, atol=1e-6)
  np.testing.assert_allclose(m["clip_frac_low"], (low_clip * mask).sum() / n, atol=1e-6)
  np.testing.assert_allclose(m["clip_frac"], ((high_clip | low_clip) * mask).sum() / n,
                             atol=1e-6)
  np.testing.assert_allclose(m["dual_clip_frac"], (dual_clip * mask).sum() / n, atol=1e-6)
  np.testing.assert_allclose(m["ratio_mean"], (ratio * mask).sum() / n, rtol=1e-5)
  np.testing.assert_allclose(m["approx_kl"], ((old - logp) * mask).sum() / n, rtol=1e-4,
                             atol=1e-6)
  # The cases exercise every branch (unmasked), so the comparison above is not vacuous.
  assert high_clip.any() and low_clip.any() and dual_clip.any()
  assert (~(high_clip | low_clip | dual_clip)).any()


def test_per_token_advantages_equal_broadcast_ones():
  logp, old, ref, adv, mask = random_case(7)
  full = np.broadcast_to(adv[:, None], logp.shape)
  a, _ = grpo.grpo_loss(logp, old, ref, adv, mask)
  b, _ = grpo.grpo_loss(logp, old, ref, full, mask)
  np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_gradient_matches_closed_form_and_is_finite(mode):
  """d L / d log pi: -A rho on unclipped tokens, 0 on clipped ones, plus the k3 term
  beta (1 - exp(log pi_ref - log pi)), times each mode's token weight."""
  logp, old, ref, adv, mask = random_case(3)
  cfg = grpo.GRPOConfig(loss_agg=mode, kl_coef=0.1)
  grad = jax.grad(lambda lp: grpo.grpo_loss(lp, old, ref, adv, mask, cfg)[0])(logp)
  ratio = np.exp(logp.astype(np.float64) - old)
  a = np.broadcast_to(adv[:, None], ratio.shape)
  active = ~(((a > 0) & (ratio > 1 + cfg.clip_high)) | ((a < 0) & (ratio < 1 - cfg.clip_low))
             | ((a < 0) & (ratio > cfg.dual_clip)))
  d = -a * ratio * active + cfg.kl_coef * (1.0 - np.exp(ref.astype(np.float64) - logp))
  if mode == "token-mean":
    w = mask / mask.sum()
  elif mode == "seq-mean-token-mean":
    w = mask / np.maximum(mask.sum(-1, keepdims=True), 1) / mask.shape[0]
  else:
    w = mask / mask.shape[0]
  np.testing.assert_allclose(grad, d * w, rtol=1e-4, atol=1e-6)
  # Extreme log-ratios (past the +-20 clamps) still give finite values and gradients.
  wild = logp + np.linspace(-40, 40, logp.size, dtype=np.float32).reshape(logp.shape)
  loss, g = jax.value_and_grad(lambda lp: grpo.grpo_loss(lp, old, wild, adv, mask, cfg)[0])(
      wild - 35.0)
  assert np.isfinite(loss) and np.all(np.isfinite(g))


def test_on_policy_loss_is_minus_mean_advantage():
  lp = jnp.log(jnp.full((4, 5), 0.3))
  adv = jnp.array([1.0, -2.0, 0.5, 0.0])
  for mode in MODES:
    loss, m = grpo.grpo_loss(lp, lp, lp, adv, jnp.ones((4, 5)), grpo.GRPOConfig(loss_agg=mode))
    scale = 5.0 if mode == "seq-mean-token-sum" else 1.0
    np.testing.assert_allclose(loss, -scale * float(jnp.mean(adv)), rtol=1e-6, atol=1e-7)
    assert float(m["kl"]) == 0.0 and float(m["clip_frac"]) == 0.0
  loss, m = grpo.grpo_loss(lp, lp, None, adv, jnp.ones((4, 5)), grpo.GRPOConfig(kl_coef=0.0))
  assert float(m["kl"]) == 0.0


def test_grpo_loss_traces_once_under_jit_and_vmaps():
  cfg = grpo.GRPOConfig()

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(logp, old, ref, adv, mask):
    return grpo.grpo_loss(logp, old, ref, adv, mask, cfg)

  for seed in range(3):
    loss, metrics = step(*random_case(seed))
    want, _, _ = grpo_ref(*random_case(seed), cfg)
    np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-6)
    assert all(jnp.shape(v) == () for v in metrics.values())
  # vmap over independent batches gives each batch's loss.
  cases = [random_case(s) for s in range(2)]
  stacked = [np.stack(x) for x in zip(*cases)]
  losses = jax.vmap(lambda *a: grpo.grpo_loss(*a, cfg)[0])(*stacked)
  np.testing.assert_allclose(losses, [grpo_ref(*c, cfg)[0] for c in cases], rtol=1e-4, atol=1e-6)
  adv = jax.jit(grpo.group_advantages, static_argnums=1)(jnp.arange(8.0), 4)
  np.testing.assert_allclose(adv, advantages_ref(np.arange(8.0), 4), rtol=1e-5)


# ----------------------------------------------------------------------------- update glue
V, T = 17, 8


@pytest.fixture(scope="module")
def tiny_lm():
  model = tfm.Transformer(tfm.llama_config(vocab_size=V, d_model=16, num_layers=1, num_heads=2,
                                           d_ff=32, max_seq_len=16))
  params = tfm.init_params(model, jax.random.PRNGKey(0))
  return model, params


@functools.partial(jax.jit, static_argnums=2)
def full_logprobs(params, tokens, model):
  """log pi of every next token from one forward pass over the whole sequence."""
  return logprobs.next_token_logprobs(model.apply({"params": params}, tokens), tokens)


def make_batch(model, params, seed):
  rs = np.random.RandomState(seed)
  tokens = rs.randint(0, V, (4, T)).astype(np.int32)
  full = full_logprobs(params, tokens, model)
  mask = np.zeros((4, T - 1), np.float32)
  mask[:, 2:] = 1.0                                    # response after a 3-token prompt
  mask[1, 5:] = 0.0                                    # a shorter response
  return {"tokens": tokens, "mask": mask,
          "old_logp": np.asarray(full) + rs.normal(0, 0.3, full.shape).astype(np.float32),
          "ref_logp": np.asarray(full) + rs.normal(0, 0.3, full.shape).astype(np.float32),
          "advantages": np.asarray(grpo.group_advantages(rs.normal(size=4), 2))}, full


def test_make_loss_fn_equals_grpo_loss_on_forward_logprobs(tiny_lm):
  model, params = tiny_lm
  cfg = grpo.GRPOConfig(group_size=2, loss_agg="seq-mean-token-mean")
  loss_fn = rl.make_loss_fn(lambda p, t: model.apply({"params": p}, t), cfg)
  step = jax.jit(jax.value_and_grad(chex.assert_max_traces(loss_fn, n=1), has_aux=True))
  for seed in range(2):
    batch, full = make_batch(model, params, seed)
    (loss, metrics), grads = step(params, batch, jax.random.PRNGKey(0))
    want, _, _ = grpo_ref(np.asarray(full), batch["old_logp"], batch["ref_logp"],
                          batch["advantages"], batch["mask"], cfg)
    np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-6)
    assert np.isfinite(metrics["entropy"]) and 0 < metrics["entropy"] <= np.log(V) + 1e-5
    leaves = jax.tree.leaves(grads)
    assert all(np.all(np.isfinite(g)) for g in leaves)
    assert any(np.any(g != 0) for g in leaves)


def test_make_loss_fn_runs_in_the_common_train_step(tiny_lm):
  model, params = tiny_lm
  loss_fn = rl.make_loss_fn(lambda p, t: model.apply({"params": p}, t),
                            grpo.GRPOConfig(group_size=2))
  mesh = sharding.make_mesh()
  optimizer = optax.sgd(1e-2)
  state = train_lib.init_train_state(jax.random.PRNGKey(0), init_fn=lambda k: params,
                                     optimizer=optimizer, mesh=mesh)
  batch, _ = make_batch(model, params, 0)
  state, metrics, finite = train_lib.train_step(state, sharding.shard_batch(batch, mesh),
                                                jax.random.PRNGKey(1), loss_fn=loss_fn,
                                                optimizer=optimizer, mesh=mesh)
  assert bool(finite) and int(state.step) == 1
  for name in ("loss", "grad_norm", "pg_loss", "kl", "clip_frac", "dual_clip_frac", "entropy"):
    assert np.isfinite(metrics[name]), name


def test_make_loss_fn_passes_left_pad_and_temperature():
  """A bigram "model" (logits = W[token]): ragged batches hand left_pad to apply_fn, and
  the log-probs are taken at the sampling temperature."""
  rs = np.random.RandomState(5)
  w = rs.normal(size=(V, V)).astype(np.float32)
  seen = {}

  def apply_fn(params, tokens, **kwargs):
    seen.update(kwargs)
    return params[tokens]

  tokens = rs.randint(0, V, (4, T)).astype(np.int32)
  lengths = np.array([T, T - 2, T - 1, T - 3])
  left_pad = (T - lengths).astype(np.int32)
  mask = (np.arange(T - 1)[None] >= np.maximum(left_pad, 2)[:, None]).astype(np.float32)
  z = w[tokens[:, :-1]] / 2.0
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  logp = np.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
  batch = {"tokens": tokens, "mask": mask, "left_pad": left_pad,
           "old_logp": logp + rs.normal(0, 0.3, logp.shape).astype(np.float32),
           "ref_logp": logp + rs.normal(0, 0.3, logp.shape).astype(np.float32),
           "advantages": rs.normal(size=4).astype(np.float32)}
  cfg = grpo.GRPOConfig(loss_agg="seq-mean-token-sum")
  loss, _ = grpo.make_loss_fn(apply_fn, cfg, temperature=2.0)(w, batch, None)
  np.testing.assert_array_equal(seen["left_pad"], left_pad)
  want, _, _ = grpo_ref(logp, batch["old_logp"], batch["ref_logp"], batch["advantages"], mask, cfg)
  np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-6)
  # NaN in masked-out slots (e.g. padding) does not leak into the aggregate.
  nan_pad = np.where(mask > 0, logp, np.nan).astype(np.float32)
  for mode in MODES:
    assert np.isfinite(grpo.aggregate(nan_pad, mask, mode))


# ----------------------------------------------------------------------------- bad input
def one_line_error(exc_type, match, fn):
  with pytest.raises(exc_type, match=match) as info:
    fn()
  assert "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("kwargs,match", [
    (dict(group_size=1), "group_size must be an int >= 2"),
    (dict(group_size=2.0), "group_size must be an int >= 2"),
    (dict(clip_low=0.0), r"clip_low must be in \(0, 1\)"),
    (dict(clip_low=-0.1), r"clip_low must be in \(0, 1\)"),
    (dict(clip_high=1.0), r"clip_high must be in \(0, 1\)"),
    (dict(clip_high="x"), r"clip_high must be a number in \(0, 1\)"),
    (dict(dual_clip=1.0), "dual_clip must be finite and > 1"),
    (dict(kl_coef=-0.1), "kl_coef must be finite and >= 0"),
    (dict(loss_agg="mean"), "loss_agg must be one of"),
])
def test_bad_config_gives_one_line_errors(kwargs, match):
  one_line_error(ValueError, match, lambda: grpo.GRPOConfig(**kwargs))


def test_bad_arguments_give_one_line_errors(tiny_lm):
  logp, old, ref, adv, mask = random_case(0)
  one_line_error(ValueError, "group_size must be an int >= 2",
                 lambda: grpo.group_advantages(np.zeros(4), 1))
  one_line_error(ValueError, "not a multiple of group_size",
                 lambda: grpo.group_advantages(np.zeros(5), 2))
  one_line_error(ValueError, r"expected \(B, group_size=3\)",
                 lambda: grpo.group_advantages(np.zeros((2, 4)), 3))
  one_line_error(ValueError, "mode must be one of",
                 lambda: grpo.aggregate(logp, mask, "sum"))
  one_line_error(ValueError, "mask has shape",
                 lambda: grpo.aggregate(logp, mask[:, :-1], "token-mean"))
  one_line_error(ValueError, r"clip_high must be in \(0, 1\)",
                 lambda: grpo.policy_loss(logp, old, adv, mask, clip_high=1.5))
  one_line_error(ValueError, "advantages has shape",
                 lambda: grpo.policy_loss(logp, old, adv[:-1], mask))
  one_line_error(ValueError, "logp and ref_logp must have the same shape",
                 lambda: grpo.kl_k3(logp, ref[:, :-1]))
  one_line_error(ValueError, "ref_logp is None",
                 lambda: grpo.grpo_loss(logp, old, None, adv, mask))
  one_line_error(TypeError, "config must be a GRPOConfig",
                 lambda: grpo.grpo_loss(logp, old, ref, adv, mask, {"kl_coef": 0.0}))
  model, params = tiny_lm
  loss_fn = grpo.make_loss_fn(lambda p, t: model.apply({"params": p}, t))
  batch, _ = make_batch(model, params, 0)
  one_line_error(ValueError, r"batch is missing keys \['ref_logp'\]",
                 lambda: loss_fn(params, {k: v for k, v in batch.items() if k != "ref_logp"},
                                 None))
  one_line_error(ValueError, r"batch\['left_pad'\] has shape",
                 lambda: loss_fn(params, {**batch, "left_pad": np.zeros(3, np.int32)}, None))
  one_line_error(ValueError, "temperature must be finite and > 0",
                 lambda: grpo.make_loss_fn(lambda p, t: t, temperature=0.0))
  one_line_error(ValueError, r"batch\['old_logp'\] has shape",
                 lambda: loss_fn(params, {**batch, "old_logp": batch["old_logp"][:, 1:]}, None))
