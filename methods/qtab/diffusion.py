"""TabDDPM: Gaussian diffusion on the numeric columns, multinomial on the categoricals.

The TabDDPM baseline (Kotelnikov et al. 2023, "TabDDPM: Modelling Tabular Data with
Diffusion Models") as pure functions. Steps are numbered t = 0..T-1 (step t is the
paper's t + 1), alpha_t = 1 - beta_t and abar_t = prod_{s <= t} alpha_s, with beta
the linear schedule of Ho et al. (rescaled to T steps) or the cosine schedule of
Nichol & Dhariwal (capped at 0.999).

Numeric columns x (quantile-normalised, ~N(0, 1)), DDPM with epsilon prediction
(Ho et al. 2020):

  q(x_t | x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I),
  L_num = E_{t, eps} ||eps - eps_theta(x_t, t)||^2 / d_num,
  x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) eps_theta) / sqrt(alpha_t) + sqrt(beta_t) z

(the posterior mean at x_0 predicted from eps_theta; variance beta_t as in TabDDPM,
no noise at t = 0).

Each categorical column with K classes, multinomial diffusion (Hoogeboom et al.
2021) with the x_0 parametrisation:

  q(x_t | x_{t-1}) = Cat((1 - beta_t) x_{t-1} + beta_t / K),
  q(x_t | x_0) = Cat(abar_t x_0 + (1 - abar_t) / K),
  q(x_{t-1} | x_t, x_0) ∝ [alpha_t x_t + (1 - alpha_t) / K]
                          ⊙ [abar_{t-1} x_0 + (1 - abar_{t-1}) / K],

(abar_{-1} = 1), and p_theta(x_{t-1} | x_t) is the same posterior with x_0 replaced
by the network's probabilities softmax(l_theta(x_t, t)). The loss is TabDDPM's
``vb_stochastic`` term per row, importance-weighted by 1 / p(t) = T for uniform t
and averaged over the columns,

  L_cat = T * mean_j [ KL(q(x_{t-1}|x_t,x_0) || p_theta(x_{t-1}|x_t))  (t > 0),
                       -log p_theta(x_0 | x_t)     (t = 0, the paper's t = 1) ],

(the prior KL at T is parameter-free and left out), and L = L_num + L_cat.

One MLP denoiser sees [x_num_t, one-hot x_cat_t] and the step and outputs
[eps (d_num), logits (sum_j K_j)]: TabDDPM's ``MLPDiffusion``, a projection of the
input plus a sinusoidal time embedding, then ``common.models.MLP`` with ReLU.
Categorical quantities are kept padded to (..., d_cat, K_max) with the padding at
log-probability `_NEG`. Nothing in ``methods/flow_matching`` fits here: its paths
are continuous-time interpolants and bridges, not a discrete beta schedule, and it
has no discrete-state process.

Example:
    >>> config = DiffusionConfig(num_timesteps=100, hidden=128, depth=2)
    >>> result = common.train.train(
    ...     init_fn=lambda k: init(k, config, x_num.shape[1], (3, 5)),
    ...     loss_fn=make_loss_fn(config, x_num.shape[1], (3, 5)),
    ...     batch_fn=make_batch_fn(x_num, x_cat, 256), optimizer=optimizer(config, 2000),
    ...     config=default_train_config(num_steps=2000, batch_size=256), workdir="/tmp/ddpm")
    >>> params = result.state.params
    >>> x_num_s, x_cat_s = sample(params, jax.random.PRNGKey(0), 1000, config,
    ...                           x_num.shape[1], (3, 5))

References:
  Kotelnikov, Baranchuk, Rubachev, Babenko (2023), TabDDPM, ICML.
  Ho, Jain, Abbeel (2020), Denoising Diffusion Probabilistic Models, NeurIPS.
  Hoogeboom, Nielsen, Jaini, Forre, Welling (2021), Argmax Flows and Multinomial
  Diffusion, NeurIPS.
  Nichol, Dhariwal (2021), Improved Denoising Diffusion Probabilistic Models, ICML.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.models import MLP

SCHEDULES = ("cosine", "linear")
_NEG = -1e9  # Log-probability of the padding classes (finite, so no NaN gradients).


class DiffusionConfig(NamedTuple):
  """TabDDPM's hyperparameters (hashable: a static argument of the jitted functions).

  Attributes:
    num_timesteps: T, the number of diffusion steps (TabDDPM: 100 to 1000).
    hidden: width of the denoiser's hidden layers.
    depth: number of hidden layers.
    schedule: "cosine" or "linear", the beta schedule.
    dim_t: width of the time embedding and of the input projection.
    learning_rate: AdamW's initial rate, decayed linearly to 0 (TabDDPM: ~2e-3).
    weight_decay: AdamW's decoupled weight decay.
  """
  num_timesteps: int = 200
  hidden: int = 256
  depth: int = 3
  schedule: str = "cosine"
  dim_t: int = 128
  learning_rate: float = 2e-3
  weight_decay: float = 1e-4


class Schedule(NamedTuple):
  """Per-step constants, each (T,) float32.

  Attributes:
    betas: beta_t.
    log_alphas, log_1m_alphas: log alpha_t, log(1 - alpha_t).
    log_abar, log_1m_abar: log abar_t, log(1 - abar_t).
    log_abar_prev, log_1m_abar_prev: the same at t - 1 (abar_{-1} = 1, where
      log(1 - abar_{-1}) is `_NEG`).
  """
  betas: jax.Array
  log_alphas: jax.Array
  log_1m_alphas: jax.Array
  log_abar: jax.Array
  log_1m_abar: jax.Array
  log_abar_prev: jax.Array
  log_1m_abar_prev: jax.Array


def beta_schedule(num_timesteps: int, kind: str = "cosine") -> np.ndarray:
  """The betas, float64 (T,).

    linear: beta_t = (1000 / T) * linspace(1e-4, 0.02, T), T > 20    (Ho et al. 2020)
    cosine: beta_t = min(1 - f(t + 1) / f(t), 0.999),
            f(s) = cos((s / T + 0.008) / 1.008 * pi / 2)^2              (Nichol & Dhariwal 2021)

  Args:
    num_timesteps: T >= 1.
    kind: one of `SCHEDULES`.

  Returns:
    (T,) float64 betas in (0, 1).
  """
  if isinstance(num_timesteps, bool) or int(num_timesteps) != num_timesteps or num_timesteps < 1:
    raise ValueError(f"num_timesteps must be an int >= 1, got {num_timesteps!r}")
  if kind == "linear":
    if num_timesteps <= 20:
      raise ValueError(f"the linear schedule needs num_timesteps > 20 (its last beta is "
                       f"20 / T), got {num_timesteps}")
    scale = 1000.0 / num_timesteps
    return np.linspace(scale * 1e-4, scale * 0.02, num_timesteps, dtype=np.float64)
  if kind == "cosine":
    f = lambda s: math.cos((s / num_timesteps + 0.008) / 1.008 * math.pi / 2) ** 2
    return np.array([min(1.0 - f(t + 1) / f(t), 0.999) for t in range(num_timesteps)])
  raise ValueError(f"schedule must be one of {SCHEDULES}, got {kind!r}")


def make_schedule(num_timesteps: int, kind: str = "cosine") -> Schedule:
  """abar_t = prod_{s <= t} (1 - beta_s) and the logs the two processes use.

  Computed in float64 with NumPy (at trace time under jit), stored as float32.

  Args:
    num_timesteps: T >= 1.
    kind: one of `SCHEDULES`.

  Returns:
    The `Schedule`.
  """
  betas = beta_schedule(num_timesteps, kind)
  log_alphas = np.log1p(-betas)
  log_abar = np.cumsum(log_alphas)
  log_1m_abar = np.log(-np.expm1(log_abar))
  log_abar_prev = np.concatenate([[0.0], log_abar[:-1]])
  log_1m_abar_prev = np.concatenate([[_NEG], log_1m_abar[:-1]])
  arrays = (betas, log_alphas, np.log(betas), log_abar, log_1m_abar, log_abar_prev,
            log_1m_abar_prev)
  return Schedule(*(jnp.asarray(a, jnp.float32) for a in arrays))


# ------------------------------------------------------------------ Gaussian part

def gaussian_q_sample(schedule: Schedule, x0: jax.Array, t: jax.Array,
                      noise: jax.Array) -> jax.Array:
  """x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps, a draw of q(x_t | x_0).

  Args:
    schedule: the `Schedule`.
    x0: (B, d) clean numeric columns.
    t: (B,) int steps in [0, T).
    noise: (B, d) eps ~ N(0, I).

  Returns:
    (B, d) x_t.
  """
  mean_scale = jnp.exp(0.5 * schedule.log_abar[t])[:, None]
  std = jnp.exp(0.5 * schedule.log_1m_abar[t])[:, None]
  return mean_scale * x0 + std * noise


def gaussian_p_sample(schedule: Schedule, x_t: jax.Array, t: jax.Array, eps: jax.Array,
                      noise: jax.Array) -> jax.Array:
  """x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) eps) / sqrt(alpha_t) + [t > 0] sqrt(beta_t) z.

  The mean is the Gaussian posterior mean of q(x_{t-1} | x_t, x_0) at
  x_0 = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t) (Ho et al. 2020, eq. 11).

  Args:
    schedule: the `Schedule`.
    x_t: (B, d) current state.
    t: (B,) int steps.
    eps: (B, d) predicted noise.
    noise: (B, d) z ~ N(0, I).

  Returns:
    (B, d) x_{t-1}.
  """
  beta = schedule.betas[t][:, None]
  mean = (x_t - beta * jnp.exp(-0.5 * schedule.log_1m_abar[t])[:, None] * eps) * \
      jnp.exp(-0.5 * schedule.log_alphas[t])[:, None]
  return mean + jnp.where((t > 0)[:, None], jnp.sqrt(beta), 0.0) * noise


# --------------------------------------------------------------- multinomial part

class _Layout(NamedTuple):
  """Static layout of the categorical columns: padded (d_cat, K_max) vs flat (sum K)."""
  mask: np.ndarray        # (d_cat, K_max) bool, k < K_j.
  log_k: np.ndarray       # (d_cat, 1) log K_j.
  gather: np.ndarray      # (d_cat, K_max) flat index of (j, k) (0 where padded).
  flat: np.ndarray        # (sum K,) padded index j * K_max + k of each flat entry.


def _layout(cardinalities: Sequence[int]) -> _Layout:
  ks = np.asarray(cardinalities, np.int64).reshape(-1)
  k_max = int(ks.max()) if ks.size else 1
  mask = np.arange(k_max)[None, :] < ks[:, None]
  offsets = np.concatenate([[0], np.cumsum(ks)[:-1]]).astype(np.int64)
  gather = np.where(mask, offsets[:, None] + np.arange(k_max)[None, :], 0)
  flat = np.flatnonzero(mask.reshape(-1))
  return _Layout(mask, np.log(np.maximum(ks, 1)).astype(np.float32)[:, None], gather, flat)


def log_onehot(x: jax.Array, cardinalities: Sequence[int]) -> jax.Array:
  """log x_0 as a padded one-hot: 0 at the class, `_NEG` elsewhere.

  Args:
    x: (B, d_cat) int class indices, x[:, j] in [0, K_j).
    cardinalities: (K_1, ..., K_d_cat).

  Returns:
    (B, d_cat, K_max) float32.
  """
  lay = _layout(cardinalities)
  onehot = jax.nn.one_hot(x, lay.mask.shape[1], dtype=jnp.float32)
  return jnp.where(onehot > 0, 0.0, _NEG)


def _masked(log_p: jax.Array, lay: _Layout) -> jax.Array:
  return jnp.where(lay.mask, log_p, _NEG)


def _mix(log_p: jax.Array, log_keep: jax.Array, log_spread: jax.Array,
         lay: _Layout) -> jax.Array:
  """log(keep * p + spread / K), per row, over the valid classes."""
  out = jnp.logaddexp(log_keep[:, None, None] + log_p,
                      log_spread[:, None, None] - lay.log_k[None])
  return _masked(out, lay)


def multinomial_q_log_probs(schedule: Schedule, log_x0: jax.Array, t: jax.Array,
                            cardinalities: Sequence[int]) -> jax.Array:
  """log q(x_t | x_0) = log(abar_t x_0 + (1 - abar_t) / K), per column.

  Args:
    schedule: the `Schedule`.
    log_x0: (B, d_cat, K_max) log-probabilities of x_0 (a one-hot or a prediction).
    t: (B,) int steps.
    cardinalities: (K_1, ..., K_d_cat).

  Returns:
    (B, d_cat, K_max) log-probabilities (padding at `_NEG`).
  """
  return _mix(log_x0, schedule.log_abar[t], schedule.log_1m_abar[t], _layout(cardinalities))


def multinomial_posterior(schedule: Schedule, log_x0: jax.Array, x_t: jax.Array,
                          t: jax.Array, cardinalities: Sequence[int]) -> jax.Array:
  """The posterior of one categorical step, in log space, per column:

    log q(x_{t-1} | x_t, x_0) = log[alpha_t x_t + (1 - alpha_t) / K]
                                + log[abar_{t-1} x_0 + (1 - abar_{t-1}) / K] - log Z.

  The first factor is q(x_t | x_{t-1}) as a function of x_{t-1} (symmetric in
  the two), the second q(x_{t-1} | x_0); at t = 0 the second is x_0 itself. With
  x_0 the network's probabilities this is p_theta(x_{t-1} | x_t) (Hoogeboom et
  al. 2021, eq. 12).

  Args:
    schedule: the `Schedule`.
    log_x0: (B, d_cat, K_max) log-probabilities of x_0.
    x_t: (B, d_cat) int current classes.
    t: (B,) int steps.
    cardinalities: (K_1, ..., K_d_cat).

  Returns:
    (B, d_cat, K_max) normalised log-probabilities of x_{t-1} (padding at `_NEG`).
  """
  lay = _layout(cardinalities)
  log_prev = _mix(log_x0, schedule.log_abar_prev[t], schedule.log_1m_abar_prev[t], lay)
  log_step = _mix(log_onehot(x_t, cardinalities), schedule.log_alphas[t],
                  schedule.log_1m_alphas[t], lay)
  unnormed = _masked(log_prev + log_step, lay)
  return _masked(unnormed - jax.nn.logsumexp(unnormed, axis=-1, keepdims=True), lay)


# ------------------------------------------------------------------- the denoiser

def timestep_embedding(t: jax.Array, dim: int, max_period: float = 10000.0) -> jax.Array:
  """[cos(t w_i), sin(t w_i)], w_i = max_period^{-i / (dim/2)}, i < dim/2 (Vaswani et al.).

  Args:
    t: (B,) steps.
    dim: embedding width (even).
    max_period: the longest period.

  Returns:
    (B, dim) float32.
  """
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
  args = jnp.asarray(t, jnp.float32)[:, None] * freqs[None]
  return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


class Denoiser(nn.Module):
  """TabDDPM's MLPDiffusion: MLP(W_in x + MLP_t(emb(t))) -> [eps (d_num), logits (sum K)].

  Attributes:
    hidden: hidden width.
    depth: number of hidden layers.
    out: output width d_num + sum_j K_j.
    dim_t: width of the time embedding and the input projection.
  """
  hidden: int
  depth: int
  out: int
  dim_t: int = 128

  @nn.compact
  def __call__(self, x: jax.Array, t: jax.Array) -> jax.Array:
    emb = nn.Dense(self.dim_t, name="time_in")(timestep_embedding(t, self.dim_t))
    emb = nn.Dense(self.dim_t, name="time_out")(nn.silu(emb))
    h = nn.Dense(self.dim_t, name="proj")(x) + emb
    return MLP((self.hidden,) * self.depth + (self.out,), activation=nn.relu, name="mlp")(h)


def _check_cardinalities(cardinalities: Sequence[int]) -> tuple[int, ...]:
  ks = tuple(cardinalities)
  if any(isinstance(k, bool) or int(k) != k or k < 1 for k in ks):
    raise ValueError(f"cardinalities must be ints >= 1, got {cardinalities!r}")
  return tuple(int(k) for k in ks)


def _model(config: DiffusionConfig, d_num: int, cardinalities: Sequence[int]) -> Denoiser:
  if config.schedule not in SCHEDULES:
    raise ValueError(f"config.schedule must be one of {SCHEDULES}, got {config.schedule!r}")
  out = int(d_num) + sum(_check_cardinalities(cardinalities))
  if d_num < 0 or out < 1:
    raise ValueError(f"need d_num >= 0 and at least one column, got d_num={d_num}, "
                     f"cardinalities={tuple(cardinalities)}")
  return Denoiser(config.hidden, config.depth, out, config.dim_t)


def init(key: jax.Array, config: DiffusionConfig, d_num: int,
         cardinalities: Sequence[int]) -> Any:
  """The denoiser's parameters for d_num numeric and len(cardinalities) categorical columns.

  Args:
    key: a PRNG key.
    config: the `DiffusionConfig`.
    d_num: number of numeric columns (>= 0).
    cardinalities: (K_1, ..., K_d_cat), each >= 1.

  Returns:
    The flax parameter pytree.
  """
  return _init(key, config, int(d_num), _check_cardinalities(cardinalities))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _init(key: jax.Array, config: DiffusionConfig, d_num: int,
          cardinalities: tuple[int, ...]) -> Any:
  model = _model(config, d_num, cardinalities)
  x = jnp.zeros((1, d_num + sum(cardinalities)), jnp.float32)
  return model.init(key, x, jnp.zeros((1,), jnp.int32))


def _denoise(params: Any, config: DiffusionConfig, x_num: jax.Array, x_cat: jax.Array,
             t: jax.Array, cardinalities: Sequence[int]) -> tuple[jax.Array, jax.Array]:
  """(eps_theta (B, d_num), log softmax of the x_0 logits (B, d_cat, K_max))."""
  d_num, lay = x_num.shape[1], _layout(cardinalities)
  onehot = jax.nn.one_hot(x_cat, lay.mask.shape[1], dtype=jnp.float32)
  inputs = jnp.concatenate(
      [x_num.astype(jnp.float32), onehot.reshape(x_cat.shape[0], -1)[:, lay.flat]], axis=1)
  out = _model(config, d_num, cardinalities).apply(params, inputs, t)
  logits = _masked(out[:, d_num:][:, lay.gather], lay)
  return out[:, :d_num], _masked(jax.nn.log_softmax(logits, axis=-1), lay)


# ------------------------------------------------------------------------ the loss

def _multinomial_terms(schedule: Schedule, log_x0_hat: jax.Array, x0: jax.Array,
                       x_t: jax.Array, t: jax.Array,
                       cardinalities: Sequence[int]) -> jax.Array:
  """Per row and column (B, d_cat): KL(q(x_{t-1}|x_t,x_0) || p_theta(x_{t-1}|x_t)) if t > 0,
  else the decoder NLL -log p_theta(x_0 | x_t)."""
  lay = _layout(cardinalities)
  log_true = multinomial_posterior(schedule, log_onehot(x0, cardinalities), x_t, t,
                                   cardinalities)
  log_model = multinomial_posterior(schedule, log_x0_hat, x_t, t, cardinalities)
  kl = jnp.sum(jnp.where(lay.mask, jnp.exp(log_true) * (log_true - log_model), 0.0), -1)
  nll = -jnp.take_along_axis(log_model, x0[..., None], axis=-1)[..., 0]
  return jnp.where((t == 0)[:, None], nll, kl)


def loss_terms(params: Any, batch: tuple[jax.Array, jax.Array], key: jax.Array,
               config: DiffusionConfig,
               cardinalities: Sequence[int]) -> tuple[jax.Array, jax.Array]:
  """(L_num, L_cat) of a batch, each a scalar (0 when the part has no columns).

    t ~ U{0..T-1},  x_t ~ q(x_t | x_0) for both parts,
    L_num = mean ||eps - eps_theta||^2 / d_num,
    L_cat = T * mean_rows mean_j [KL of the posteriors (t > 0) | NLL (t = 0)].

  Args:
    params: the denoiser's parameters.
    batch: (x_num (B, d_num) float, x_cat (B, d_cat) int in [0, K_j)).
    key: a PRNG key.
    config: the `DiffusionConfig`.
    cardinalities: (K_1, ..., K_d_cat).

  Returns:
    (L_num, L_cat), float32 scalars.
  """
  x_num, x_cat = jnp.asarray(batch[0], jnp.float32), jnp.asarray(batch[1], jnp.int32)
  schedule = make_schedule(config.num_timesteps, config.schedule)
  key_t, key_num, key_cat = jax.random.split(key, 3)
  t = jax.random.randint(key_t, (x_num.shape[0],), 0, config.num_timesteps)
  noise = jax.random.normal(key_num, x_num.shape, jnp.float32)
  x_num_t = gaussian_q_sample(schedule, x_num, t, noise)
  x_cat_t = x_cat
  if x_cat.shape[1]:
    log_q = multinomial_q_log_probs(schedule, log_onehot(x_cat, cardinalities), t,
                                    cardinalities)
    x_cat_t = jax.random.categorical(key_cat, log_q, axis=-1).astype(jnp.int32)
  eps_hat, log_x0_hat = _denoise(params, config, x_num_t, x_cat_t, t, cardinalities)
  loss_num = jnp.mean((eps_hat - noise) ** 2) if x_num.shape[1] else jnp.zeros(())
  loss_cat = jnp.zeros(())
  if x_cat.shape[1]:
    terms = _multinomial_terms(schedule, log_x0_hat, x_cat, x_cat_t, t, cardinalities)
    loss_cat = config.num_timesteps * jnp.mean(terms)  # 1 / p(t) = T, mean over columns.
  return loss_num, loss_cat


def loss(params: Any, batch: tuple[jax.Array, jax.Array], key: jax.Array,
         config: DiffusionConfig, cardinalities: Sequence[int]) -> jax.Array:
  """TabDDPM's training loss L = L_num + L_cat (see `loss_terms`), a scalar.

  Example:
    >>> value = loss(params, (x_num, x_cat), jax.random.PRNGKey(0), config, (3, 5))
  """
  loss_num, loss_cat = loss_terms(params, batch, key, config, cardinalities)
  return loss_num + loss_cat


def make_loss_fn(config: DiffusionConfig, d_num: int,
                 cardinalities: Sequence[int]) -> Callable[..., tuple[jax.Array, dict]]:
  """`loss_fn(params, (x_num, x_cat), key) -> (L, {"loss_num", "loss_cat"})` for `common.train`.

  Args:
    config: the `DiffusionConfig`.
    d_num: number of numeric columns (checked against the batch).
    cardinalities: (K_1, ..., K_d_cat).

  Returns:
    The loss function.
  """
  cardinalities = _check_cardinalities(cardinalities)
  _model(config, d_num, cardinalities)  # Validates the config and the sizes now.

  def loss_fn(params, batch, key):
    if batch[0].shape[1] != d_num or batch[1].shape[1] != len(cardinalities):
      raise ValueError(f"batch has {batch[0].shape[1]} numeric and {batch[1].shape[1]} "
                       f"categorical columns, expected {d_num} and {len(cardinalities)}")
    loss_num, loss_cat = loss_terms(params, batch, key, config, cardinalities)
    return loss_num + loss_cat, {"loss_num": loss_num, "loss_cat": loss_cat}
  return loss_fn


# ---------------------------------------------------------------------- sampling

def sample(params: Any, key: jax.Array, n: int, config: DiffusionConfig, d_num: int,
           cardinalities: Sequence[int]) -> tuple[jax.Array, jax.Array]:
  """Ancestral sampling x_T -> x_0 in one `lax.scan` over t = T-1, ..., 0.

    x_num,T ~ N(0, I),  x_cat,T ~ Uniform{0..K_j - 1},
    x_num,t-1 by `gaussian_p_sample`,  x_cat,t-1 ~ p_theta(x_{t-1} | x_t)
    (`multinomial_posterior` at the predicted x_0).

  Args:
    params: the denoiser's parameters.
    key: a PRNG key.
    n: number of rows (static under jit).
    config: the `DiffusionConfig` (static).
    d_num: number of numeric columns (static).
    cardinalities: (K_1, ..., K_d_cat) (static).

  Returns:
    (x_num (n, d_num) float32, x_cat (n, d_cat) int32).

  Example:
    >>> x_num, x_cat = sample(params, jax.random.PRNGKey(0), 1000, config, 2, (3, 5))
  """
  if isinstance(n, bool) or int(n) != n or n < 1:
    raise ValueError(f"n must be an int >= 1, got {n!r}")
  return _sample(params, key, int(n), config, int(d_num), _check_cardinalities(cardinalities))


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _sample(params: Any, key: jax.Array, n: int, config: DiffusionConfig, d_num: int,
            cardinalities: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
  """`sample`'s jitted body (sizes, config and cardinalities static)."""
  lay, schedule = _layout(cardinalities), make_schedule(config.num_timesteps, config.schedule)
  key_num, key_cat, key_loop = jax.random.split(key, 3)
  x_num = jax.random.normal(key_num, (n, d_num), jnp.float32)
  uniform = jnp.broadcast_to(_masked(jnp.zeros(lay.mask.shape), lay), (n, *lay.mask.shape))
  x_cat = jax.random.categorical(key_cat, uniform, axis=-1).astype(jnp.int32)

  def step(carry, t_scalar):
    x_num, x_cat = carry
    t = jnp.full((n,), t_scalar, jnp.int32)
    key_n, key_c = jax.random.split(jax.random.fold_in(key_loop, t_scalar))
    eps_hat, log_x0_hat = _denoise(params, config, x_num, x_cat, t, cardinalities)
    x_num = gaussian_p_sample(schedule, x_num, t, eps_hat,
                              jax.random.normal(key_n, x_num.shape, jnp.float32))
    if cardinalities:
      log_p = multinomial_posterior(schedule, log_x0_hat, x_cat, t, cardinalities)
      x_cat = jax.random.categorical(key_c, log_p, axis=-1).astype(jnp.int32)
    return (x_num, x_cat), None

  (x_num, x_cat), _ = jax.lax.scan(step, (x_num, x_cat),
                                   jnp.arange(config.num_timesteps - 1, -1, -1))
  return x_num, x_cat


# ---------------------------------------------------------------------- training

def optimizer(config: DiffusionConfig, num_steps: int) -> optax.GradientTransformation:
  """TabDDPM's optimizer: AdamW with the rate decayed linearly to 0 over the run."""
  schedule = optax.linear_schedule(config.learning_rate, 0.0, int(num_steps))
  return optax.adamw(schedule, weight_decay=config.weight_decay)


def make_batch_fn(x_num: np.ndarray, x_cat: np.ndarray,
                  batch_size: int) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
  """`batch_fn(seed, step) -> (x_num[idx], x_cat[idx])`, rows drawn uniformly with
  replacement from the NumPy generator seeded by (seed, step) (exact resume)."""
  def batch_fn(seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.random.default_rng([seed, step]).integers(0, len(x_num), batch_size)
    return x_num[idx], x_cat[idx]
  return batch_fn


def _check_data(x_num: Any, x_cat: Any,
                cardinalities: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  x_num = np.asarray(x_num, np.float32)
  x_cat = np.asarray(x_cat)
  if x_num.ndim != 2 or x_cat.ndim != 2 or len(x_num) != len(x_cat) or len(x_num) < 1:
    raise ValueError(f"x_num and x_cat must be (n, d) arrays with the same n >= 1, got "
                     f"{x_num.shape} and {x_cat.shape}")
  if x_cat.shape[1] != len(cardinalities):
    raise ValueError(f"x_cat has {x_cat.shape[1]} columns but cardinalities "
                     f"{cardinalities} name {len(cardinalities)}")
  if not np.all(np.isfinite(x_num)):
    raise ValueError("x_num has NaN or infinite values")
  if x_cat.size and (not np.issubdtype(x_cat.dtype, np.integer) or x_cat.min() < 0 or
                     np.any(x_cat.max(axis=0) >= np.asarray(cardinalities))):
    raise ValueError(f"x_cat must hold ints in [0, K_j), K = {cardinalities}")
  return x_num, x_cat.astype(np.int32)
