"""DPO: the loss against a hand-computed case, its gradient signs, and one optimisation
step on a real LM through `make_loss_fn`."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from common.models import transformer
from common.rl import dpo


def test_dpo_loss_hand_computed():
  # h = beta [(c - c_ref) - (r - r_ref)] = 0.5 [(-1 + 1.5) - (-2 + 1.5)] = 0.5
  loss, m = dpo.dpo_loss(jnp.array([-1.0]), jnp.array([-2.0]), jnp.array([-1.5]),
                         jnp.array([-1.5]), dpo.DPOConfig(beta=0.5))
  assert float(loss) == pytest.approx(math.log1p(math.exp(-0.5)), rel=1e-6)
  assert float(m["reward_margin"]) == pytest.approx(0.5)
  assert float(m["reward_accuracy"]) == 1.0
  smooth, _ = dpo.dpo_loss(jnp.array([-1.0]), jnp.array([-2.0]), jnp.array([-1.5]),
                           jnp.array([-1.5]), dpo.DPOConfig(beta=0.5, label_smoothing=0.2))
  expected = 0.8 * math.log1p(math.exp(-0.5)) + 0.2 * math.log1p(math.exp(0.5))
  assert float(smooth) == pytest.approx(expected, rel=1e-6)
  at_ref, _ = dpo.dpo_loss(*(jnp.zeros(3),) * 4)
  assert float(at_ref) == pytest.approx(math.log(2.0))


def test_dpo_gradient_raises_chosen_and_lowers_rejected():
  def f(c, r):
    return dpo.dpo_loss(c, r, jnp.zeros(2), jnp.zeros(2))[0]
  gc, gr = jax.grad(f, argnums=(0, 1))(jnp.array([-1.0, -3.0]), jnp.array([-2.0, -0.5]))
  assert np.all(np.asarray(gc) < 0) and np.all(np.asarray(gr) > 0)


def test_one_dpo_step_on_an_lm_widens_the_margin():
  model = transformer.Transformer(transformer.llama_config(
      vocab_size=16, d_model=16, num_layers=1, num_heads=2, d_ff=32, max_seq_len=32))
  params = transformer.init_params(model, jax.random.PRNGKey(0))
  apply_fn = lambda p, t: model.apply({"params": p}, t)
  rng = np.random.default_rng(0)
  chosen = rng.integers(0, 16, size=(4, 10)).astype(np.int32)
  rejected = chosen.copy()
  rejected[:, 6:] = rng.integers(0, 16, size=(4, 4))
  mask = np.zeros((4, 9), np.float32)
  mask[:, 5:] = 1.0
  batch = dpo.reference_logprobs(apply_fn, params, {
      "chosen": chosen, "rejected": rejected, "chosen_mask": mask, "rejected_mask": mask})
  loss_fn = dpo.make_loss_fn(apply_fn, dpo.DPOConfig(beta=1.0, sft_weight=0.1))
  (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, None)
  assert float(m["dpo"]) == pytest.approx(math.log(2.0), rel=1e-5)    # policy == reference
  opt = optax.sgd(0.5)
  params2 = optax.apply_updates(params, opt.update(grads, opt.init(params))[0])
  _, m2 = loss_fn(params2, batch, None)
  assert float(m2["reward_margin"]) > 0 and float(m2["dpo"]) < math.log(2.0)


def test_bad_batches_and_configs_are_named():
  with pytest.raises(ValueError, match="missing keys"):
    dpo.check_batch({"chosen": np.zeros((2, 3), np.int32)})
  with pytest.raises(ValueError, match="DPOConfig.beta"):
    dpo.DPOConfig(beta=0.0)
  good = {"chosen": np.zeros((2, 3), np.int32), "rejected": np.zeros((2, 3), np.int32),
          "chosen_mask": np.ones((2, 2)), "rejected_mask": np.ones((2, 3)),
          "ref_chosen": np.zeros(2), "ref_rejected": np.zeros(2)}
  with pytest.raises(ValueError, match=r"batch\['rejected_mask'\] has shape \(2, 3\)"):
    dpo.check_batch(good)
