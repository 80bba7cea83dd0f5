"""GLANCE's curiosity and the baselines' intrinsic rewards, as `common.rl.ppo.Curiosity` hooks.

Parameters are {"policy": ActorCritic params, "curiosity": the model's params}; the
curiosity state `extra` holds the EMA target encoder, the intrinsic reward's running
normaliser and a key. With f = the policy's online encoder (`GridEncoder`), f_bar its
EMA target (f_bar <- tau f_bar + (1 - tau) f after every update), s, a, s' a transition:

GLANCE (`glance`):
    world model:  y_hat = Dec(f(s), a)        six description tokens of s', decoded in
                                               order (`language.SLOTS`)
    language:     L_lang = CE(y_hat, describe(s'))   (teacher-forced, summed over slots)
    grounding:    L = || g(p)/|g(p)| - sg(y/|y|) ||^2,   y = f_bar(s'),
                  p = the greedy decoding's per-slot probabilities
    curiosity:    r_int = beta * L / sigma,   sigma = running std of L (EMA)
    every K updates the projector g is re-initialised (against curiosity drain).
    `bottleneck=False` (ablation) predicts the target embedding from (f(s), a) directly.

BYOL-Explore (`byol`): the same normalised error as L (= 2 - 2 cos) of a vision-only
predictor P(f(s), a) against f_bar(s'); no re-initialisation.

RND: r_int = ||P(s') - T(s')||^2 with T a fixed random encoder.

ICM: phi an encoder trained by the inverse model (predict a from phi(s), phi(s'));
forward model F(phi(s), a); r_int = 0.5 ||F - sg(phi(s'))||^2.

Every r_int is divided by the running RMS of the raw intrinsic reward, multiplied by
beta, and set to 0 on transitions that end an episode (their s' is the next episode's
first view). For the same reason the losses of the models that predict s' from (s, a)
(GLANCE's language cross-entropy and grounding, BYOL-Explore's, ICM's) are means over
the transitions that do not end an episode; RND's, on single views, takes them all.

Example:
    >>> config = CuriosityConfig(beta=0.01)
    >>> cur, params, extra = make_curiosity("glance", spec, policy_params, key, config)
    >>> update = ppo.make_update(env, apply_fn, ppo_config, optimizer, cur)

Under `jit`, build the hooks outside (`make_hooks`) and the arrays inside
(`init_curiosity`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import checks
from common.rl.ppo import Curiosity
from methods.glance import language
from methods.glance.envs import EnvSpec
from methods.glance.networks import GridEncoder

METHODS = ("none", "glance", "glance_no_bottleneck", "glance_no_reinit", "byol", "rnd",
           "icm")


class CuriosityConfig(NamedTuple):
  beta: float = 0.1            # intrinsic reward scale (>= 0)
  tau: float = 0.99            # EMA of the target encoder
  reinit_every: int = 50       # K updates between projector re-initialisations (0: never)
  lang_weight: float = 1.0     # weight of the language cross-entropy
  aux_weight: float = 1.0      # weight of the curiosity model's losses in the PPO loss
  norm_momentum: float = 0.9   # EMA (per update) of the intrinsic reward's second moment


def _check_config(config: CuriosityConfig) -> None:
  """One-line ValueErrors for settings outside their ranges (CuriosityConfig)."""
  checks.scalar("beta", config.beta, strict=False)
  checks.positive_int("reinit_every", config.reinit_every, low=0)
  checks.scalar("lang_weight", config.lang_weight, strict=False)
  checks.scalar("aux_weight", config.aux_weight, strict=False)
  for name in ("tau", "norm_momentum"):
    value = getattr(config, name)
    if not 0.0 <= value < 1.0:   # False for nan too
      raise ValueError(f"{name} must be in [0, 1), got {value}")


def _mlp(x, features, name):
  return nn.Dense(features[-1], name=f"{name}_out")(
      nn.relu(nn.Dense(features[0], name=f"{name}_hidden")(x)))


class WorldModel(nn.Module):
  """The linguistic world model and the projector g (module docstring)."""
  num_actions: int
  embed: int = 128
  hidden: int = 128

  def setup(self):
    self.action = nn.Embed(self.num_actions, 32)
    self.start = nn.Dense(self.hidden)
    self.cell = nn.GRUCell(self.hidden)
    self.heads = [nn.Dense(n) for n in language.SLOT_SIZES]
    self.tokens = [nn.Embed(n, self.hidden) for n in language.SLOT_SIZES]
    self.projector = Projector(self.embed)

  def decode(self, h, action, targets=None):
    """Per-slot logits; slot k reads slot k-1's token (the target's when given,
    else the argmax)."""
    carry = jnp.tanh(self.start(jnp.concatenate([h, self.action(action)], -1)))
    x, out = jnp.zeros_like(carry), []
    for k in range(len(language.SLOT_SIZES)):
      carry, y = self.cell(carry, x)
      logits = self.heads[k](y)
      out.append(logits)
      token = targets[..., k] if targets is not None else jnp.argmax(logits, -1)
      x = self.tokens[k](token)
    return out

  def __call__(self, h, action, targets):
    teacher = self.decode(h, action, targets)
    greedy = self.decode(h, action)
    probs = jnp.concatenate([jax.nn.softmax(l) for l in greedy], -1)
    tokens = jnp.stack([jnp.argmax(l, -1) for l in greedy], -1)
    return teacher, self.projector(probs), tokens


class Projector(nn.Module):
  embed: int = 128

  @nn.compact
  def __call__(self, x):
    return _mlp(x, (128, self.embed), "g")


class VisionPredictor(nn.Module):
  """P(f(s), a) -> an embedding (BYOL-Explore, the no-bottleneck ablation, ICM's F)."""
  num_actions: int
  embed: int = 128

  @nn.compact
  def __call__(self, h, action):
    x = jnp.concatenate([h, nn.Embed(self.num_actions, 32)(action)], -1)
    return Projector(self.embed, name="projector")(x)


def normalised_error(pred, target):
  """|| p/|p| - sg(t/|t|) ||^2 = 2 - 2 cos(p, t), per row."""
  p = pred / (jnp.linalg.norm(pred, axis=-1, keepdims=True) + 1e-8)
  t = jax.lax.stop_gradient(target / (jnp.linalg.norm(target, axis=-1, keepdims=True) + 1e-8))
  return jnp.sum((p - t) ** 2, axis=-1)


def masked_mean(x, dones):
  """The mean of x (B,) over the rows whose transition does not end an episode (0 if
  every row does): sum_i x_i (1 - d_i) / max(sum_i (1 - d_i), 1)."""
  keep = 1.0 - dones.astype(x.dtype)
  return jnp.sum(x * keep) / jnp.maximum(jnp.sum(keep), 1.0)


def _encode(policy_params, obs):
  return GridEncoder().apply({"params": policy_params["encoder"]}, obs)


def _normalise(raw, dones, extra, config: CuriosityConfig):
  """beta * raw / running RMS, 0 where the transition ended an episode (those are
  also left out of the RMS: their s' is a fresh episode's first view)."""
  keep = 1.0 - dones.astype(raw.dtype)
  batch = jnp.sum(raw ** 2 * keep) / jnp.maximum(jnp.sum(keep), 1.0)
  m2 = config.norm_momentum * extra["m2"] + (1 - config.norm_momentum) * batch
  m2 = jnp.where(extra["m2"] == 0, batch, m2)
  r = config.beta * raw / (jnp.sqrt(m2) + 1e-8) * keep
  return r, {**extra, "m2": m2}


def make_curiosity(method: str, spec: EnvSpec, policy_params: Any, key: jax.Array,
                   config: CuriosityConfig = CuriosityConfig()
                   ) -> tuple[Curiosity | None, Any, Any]:
  """(hooks, params {"policy", "curiosity"}, extra) for `method` (one of METHODS) on
  the environment described by `spec` (its actions and observation shape):
  `make_hooks` and `init_curiosity` together.

  Raises:
    ValueError: an unknown method, beta, lang_weight or aux_weight < 0, reinit_every
      not an int >= 0, tau or norm_momentum outside [0, 1).
  """
  hooks, init = _build(method, spec, config)
  params, extra = init(policy_params, key)
  return hooks, params, extra


def make_hooks(method: str, spec: EnvSpec, config: CuriosityConfig = CuriosityConfig()
               ) -> Curiosity | None:
  """The hooks of `method` alone (None for "none"): functions of (method, spec,
  config) that close over no array, so they are built outside `jit` and the update
  built on them compiles once. Raises as `make_curiosity`."""
  return _build(method, spec, config)[0]


def init_curiosity(method: str, spec: EnvSpec, policy_params: Any, key: jax.Array,
                   config: CuriosityConfig = CuriosityConfig()) -> tuple[Any, Any]:
  """(params {"policy", "curiosity"}, extra) of `method`: the arrays alone, a pure
  function of (policy_params, key) that can run under `jit`. Raises as
  `make_curiosity`."""
  return _build(method, spec, config)[1](policy_params, key)


def _build(method: str, spec: EnvSpec, config: CuriosityConfig):
  """(hooks, init(policy_params, key) -> (params, extra)), after the checks."""
  if method not in METHODS:
    raise ValueError(f"unknown curiosity method {method!r}; expected one of {METHODS}")
  _check_config(config)
  if method == "none":
    return None, lambda policy_params, key: ({"policy": policy_params, "curiosity": {}}, {})
  builders = {"glance": _glance, "glance_no_reinit": _glance,
              "glance_no_bottleneck": _vision, "byol": _vision, "rnd": _rnd, "icm": _icm}
  return builders[method](method, spec, config)


def _target_extra(policy_params, key):
  return {"target": jax.tree.map(jnp.array, policy_params["encoder"]),
          "m2": jnp.zeros(()), "key": key}


def _after_update(config: CuriosityConfig, reinit: Any = None):
  """EMA target update, then (every K updates) re-initialisation of the projector."""
  def after(params, extra, update):
    extra = {**extra, "target": optax.incremental_update(  # tau target + (1 - tau) online
        params["policy"]["encoder"], extra["target"], step_size=1.0 - config.tau)}
    if reinit is None or not config.reinit_every:
      return params, extra
    key, sub = jax.random.split(extra["key"])
    fresh = reinit(sub)
    due = (update % config.reinit_every) == 0
    cur = dict(params["curiosity"])
    cur["projector"] = jax.tree.map(lambda new, old: jnp.where(due, new, old), fresh,
                                    cur["projector"])
    return {**params, "curiosity": cur}, {**extra, "key": key}
  return after


def _flat(traj):
  lead = traj["actions"].shape
  return {k: traj[k].reshape((-1,) + traj[k].shape[len(lead):])
          for k in ("obs", "actions", "next_obs", "dones")}, lead


def _with_projector(policy_params, model_params):
  """{"policy", "curiosity": {"model", "projector"}}: the projector apart, so that
  `_after_update` can replace it alone."""
  return {"policy": policy_params,
          "curiosity": {"model": {k: v for k, v in model_params.items() if k != "projector"},
                        "projector": model_params["projector"]}}


def _joined(params):
  return {**params["curiosity"]["model"], "projector": params["curiosity"]["projector"]}


def _glance(method, spec, config):
  model = WorldModel(spec.num_actions)
  # numpy: the hooks (`reinit`) close over no jax array
  dummy = (np.zeros((1, 128), np.float32), np.zeros((1,), np.int32),
           np.zeros((1, 6), np.int32))

  def init(policy_params, key):
    return (_with_projector(policy_params, model.init(key, *dummy)["params"]),
            _target_extra(policy_params, key))

  def errors(params, extra, batch):
    """Per transition: (grounding error L, language cross-entropy summed over the
    slots, wrong slots of the greedy description)."""
    h = _encode(params["policy"], batch["obs"])
    targets = language.describe(batch["next_obs"])
    teacher, g, tokens = model.apply({"params": _joined(params)}, h, batch["actions"],
                                     targets)
    ce = sum(-jnp.take_along_axis(jax.nn.log_softmax(l), targets[:, k:k + 1], -1)[:, 0]
             for k, l in enumerate(teacher))
    y = _encode({"encoder": extra["target"]}, batch["next_obs"])
    wrong = jnp.sum(tokens != targets, -1).astype(jnp.float32)
    return normalised_error(g, y), ce, wrong

  def aux_loss(params, extra, mb):
    err, ce, _ = errors(params, extra, mb)
    ground, ce = masked_mean(err, mb["dones"]), masked_mean(ce, mb["dones"])
    return config.aux_weight * (ground + config.lang_weight * ce), {
        "grounding_loss": ground, "language_ce": ce}

  def intrinsic(params, extra, traj):
    flat, lead = _flat(traj)
    err, _, wrong = errors(params, extra, flat)
    r, extra = _normalise(err.reshape(lead), traj["dones"], extra, config)
    # "wrong_slots" (T, N): slots of the greedy description of s' that are wrong
    # (make_update logs its mean; the analysis reads it per transition).
    return r, extra, {"intrinsic": jnp.mean(r), "raw_intrinsic": jnp.mean(err),
                      "wrong_slots": wrong.reshape(lead)}

  reinit = None if method == "glance_no_reinit" else (
      lambda k: model.init(k, *dummy)["params"]["projector"])
  return Curiosity(intrinsic, aux_loss, _after_update(config, reinit)), init


def _vision(method, spec, config):
  """BYOL-Explore, or GLANCE without the linguistic bottleneck (re-initialised)."""
  model = VisionPredictor(spec.num_actions)
  dummy = (np.zeros((1, 128), np.float32), np.zeros((1,), np.int32))

  def init(policy_params, key):
    return (_with_projector(policy_params, model.init(key, *dummy)["params"]),
            _target_extra(policy_params, key))

  def errors(params, extra, batch):
    h = _encode(params["policy"], batch["obs"])
    p = model.apply({"params": _joined(params)}, h, batch["actions"])
    return normalised_error(p, _encode({"encoder": extra["target"]}, batch["next_obs"]))

  def aux_loss(params, extra, mb):
    loss = masked_mean(errors(params, extra, mb), mb["dones"])
    return config.aux_weight * loss, {"prediction_loss": loss}

  def intrinsic(params, extra, traj):
    flat, lead = _flat(traj)
    err = errors(params, extra, flat)
    r, extra = _normalise(err.reshape(lead), traj["dones"], extra, config)
    return r, extra, {"intrinsic": jnp.mean(r), "raw_intrinsic": jnp.mean(err)}

  reinit = None if method == "byol" else (
      lambda k: model.init(k, *dummy)["params"]["projector"])
  return Curiosity(intrinsic, aux_loss, _after_update(config, reinit)), init


def _rnd(method, spec, config):
  del method
  enc = GridEncoder(64)
  dummy = np.zeros((1,) + tuple(spec.obs_shape), np.uint8)

  def init(policy_params, key):
    k1, k2 = jax.random.split(key)
    return ({"policy": policy_params,
             "curiosity": {"predictor": enc.init(k1, dummy)["params"]}},
            {"random_target": enc.init(k2, dummy)["params"], "m2": jnp.zeros(()),
             "key": key})

  def errors(params, extra, obs):
    p = enc.apply({"params": params["curiosity"]["predictor"]}, obs)
    t = jax.lax.stop_gradient(enc.apply({"params": extra["random_target"]}, obs))
    return jnp.sum((p - t) ** 2, -1)

  def aux_loss(params, extra, mb):
    loss = jnp.mean(errors(params, extra, mb["next_obs"]))
    return config.aux_weight * loss, {"rnd_loss": loss}

  def intrinsic(params, extra, traj):
    flat, lead = _flat(traj)
    err = errors(params, extra, flat["next_obs"])
    r, extra = _normalise(err.reshape(lead), traj["dones"], extra, config)
    return r, extra, {"intrinsic": jnp.mean(r), "raw_intrinsic": jnp.mean(err)}

  return Curiosity(intrinsic, aux_loss, lambda p, e, u: (p, e)), init


class _ICM(nn.Module):
  num_actions: int

  @nn.compact
  def __call__(self, obs, next_obs, action):
    enc = GridEncoder(64, name="phi")
    phi, phi_next = enc(obs), enc(next_obs)
    inverse = _mlp(jnp.concatenate([phi, phi_next], -1), (128, self.num_actions), "inverse")
    a = nn.Embed(self.num_actions, 32, name="action")(action)
    forward = _mlp(jnp.concatenate([jax.lax.stop_gradient(phi), a], -1), (128, 64), "forward")
    return inverse, forward, phi_next


def _icm(method, spec, config):
  del method
  model = _ICM(spec.num_actions)
  dummy = np.zeros((1,) + tuple(spec.obs_shape), np.uint8)

  def init(policy_params, key):
    curiosity = model.init(key, dummy, dummy, np.zeros((1,), np.int32))["params"]
    return {"policy": policy_params, "curiosity": curiosity}, {"m2": jnp.zeros(()),
                                                               "key": key}

  def parts(params, batch):
    inverse, forward, phi_next = model.apply({"params": params["curiosity"]}, batch["obs"],
                                             batch["next_obs"], batch["actions"])
    err = 0.5 * jnp.sum((forward - jax.lax.stop_gradient(phi_next)) ** 2, -1)
    ce = -jnp.take_along_axis(jax.nn.log_softmax(inverse), batch["actions"][:, None], -1)[:, 0]
    return err, ce

  def aux_loss(params, extra, mb):
    err, ce = parts(params, mb)
    inv, fwd = masked_mean(ce, mb["dones"]), masked_mean(err, mb["dones"])
    return config.aux_weight * (0.8 * inv + 0.2 * fwd), {"inverse_loss": inv,
                                                         "forward_loss": fwd}

  def intrinsic(params, extra, traj):
    flat, lead = _flat(traj)
    err, _ = parts(params, flat)
    r, extra = _normalise(err.reshape(lead), traj["dones"], extra, config)
    return r, extra, {"intrinsic": jnp.mean(r), "raw_intrinsic": jnp.mean(err)}

  return Curiosity(intrinsic, aux_loss, lambda p, e, u: (p, e)), init
