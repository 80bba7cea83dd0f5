"""Certified removal from one model trained once: the direct, single-task API.

A model trained once on data D (n examples, weights w) minimises

    L(theta; D) = (1 / W) sum_i w_i l(theta; x_i, y_i) + (lam / 2) ||theta - theta_0||^2
                  + (mu / 2) ||theta||^2,

the stage objective (1) with one task and anchor theta_0 (lam = 0: the plain
ridge-regularised risk, for which theta_0 is only the Newton start). A request removes
the examples F of D; the target is retraining, theta' = argmin L(theta; D \\ F). The
stored state is the trained theta* and, for Hessian-based kinds, the curvature C of the
data term at theta* (in `ravel_pytree(params)` order, kept inside `Model`).

`remove` applies one stage update of its kind from theta* on L(.; D \\ F), with the
stored C first corrected for the removed examples, C' = (W C - W_F C_F) / (W - W_F):

    Hessian kinds   theta <- theta - (C' + m I)^{-1} grad L(theta; D \\ F)   (s steps)
    "gradient"      theta <- theta - grad L(theta; D \\ F) / M              (K steps)

then certifies it with the residual gradient norm r = ||grad L(theta_hat; D \\ F)||,

    ||theta_hat - theta'|| <= B = r / m   (m = lam + mu; for "gradient" also the a priori
                                           (1 - m / M)^K ||g_0|| / m, the smaller wins),
    sigma = B sqrt(2 ln(1.25 / delta)) / epsilon,   theta~ = theta_hat + sigma xi,

so theta~ is (epsilon, delta)-indistinguishable from theta' + sigma xi when the data
term is convex. This is exactly the continual method (`unlearn.unlearn`) on a sequence
of one task, `CLState(anchors=(theta_0, theta*), curvature=(C,))`, which the tests
check; the functions here hide that phrasing and the parameter order.

Example (multinomial logistic regression with ridge 0.1):
    >>> net = MLP((10,))
    >>> obj = Objective(net.apply, "softmax_ce", lam=0.0, mu=0.1)
    >>> data = make_task(x, y)
    >>> init = net.init(jax.random.PRNGKey(0), x[:1])
    >>> model = fit_model(obj, init, data, kind="full")        # Newton, stores H
    >>> out = remove(jax.random.PRNGKey(1), obj, model, data, mask, epsilon=0.5,
    ...              delta=1e-5, config=UnlearnConfig(newton_steps=3))
    >>> out.certificate.sigma, out.released                     # the noise, theta~

Reference: Guo et al., "Certified data removal from machine learning models", ICML
2020 (one model); the ICML 2026 CL-unlearning paper (abstract 5) for the sequence.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax

from methods.unlearning import certificate
from methods.unlearning import continual
from methods.unlearning import hybrid
from methods.unlearning.objective import CLState, Objective, Task, forget, only
from methods.unlearning.unlearn import build_state, unlearn, UnlearnConfig


class Model(NamedTuple):
  """A model trained once and what removal keeps.

  Attributes:
    params: theta*, the trained parameters (the deployed model).
    init: theta_0, the anchor of the objective (and the Newton start).
    kind: the removal update (`hybrid.KINDS`: "full", "ggn", "diag", "diag_ggn",
      "cg", "cg_ggn", "lissa" or "gradient").
    curvature: what `kind` stores: (C + (lam + mu) I)^{-1} (d, d) for "full" / "ggn",
      the (d,) majorizer |C| 1 for the diagonals, None otherwise.
  """
  params: Any
  init: Any
  kind: str
  curvature: Any

  def state(self) -> CLState:
    """The model as the one-task continual state (theta_0, theta*) with its curvature."""
    return CLState(anchors=(self.init, self.params), curvature=(self.curvature,))


class Removal(NamedTuple):
  """The outcome of a removal request.

  Attributes:
    params: theta_hat, the corrected parameters before noise.
    released: theta~ = theta_hat + sigma xi, what may be published.
    certificate: `certificate.Certificate` (epsilon, delta, bound B, sigma, convex).
    residual: r = ||grad L(theta_hat; D \\ F)||.
  """
  params: Any
  released: Any
  certificate: certificate.Certificate
  residual: float


def prepare_model(obj: Objective, init, params, data: Task, kind: str = "full") -> Model:
  """The `Model` of parameters trained elsewhere: stores the curvature `kind` needs.

      C = grad^2 D(theta*) (full), the GGN (ggn), |C| 1 (diag / diag_ggn), or nothing.

  Args:
    obj: the objective the model minimised.
    init: theta_0, its anchor.
    params: theta*, the trained parameters (ideally the minimiser: the certificate
      bounds the distance to the exact retrained minimiser).
    data: the training data.
    kind: the removal update (`hybrid.KINDS`).

  Returns:
    `Model(params, init, kind, curvature)`.

  Example:
    >>> model = prepare_model(obj, init, my_trained_params, data, kind="cg")
  """
  plan = hybrid.uniform_plan(kind, 1)
  state = build_state(obj, (init, params), [data], plan)
  return Model(params=params, init=init, kind=kind, curvature=state.curvature[0])


def fit_model(obj: Objective, init, data: Task, kind: str = "full", *,
              fit_stage: Callable[[Any, Task], Any] | None = None, tol: float = 1e-9,
              max_iters: int = 50, gauss_newton: bool = False) -> Model:
  """theta* = argmin L(theta; D), then the `Model` that removal needs.

  Args:
    obj: the objective (lam = 0 for plain ridge with strength mu).
    init: theta_0 (anchor and start).
    data: D.
    kind: the removal update (`hybrid.KINDS`).
    fit_stage: (anchor, data) -> params, the solver; default damped Newton
      (`continual.fit_stage_newton` with `tol`, `max_iters`, `gauss_newton`), for
      convex models; `loop.loop_stage_fitter(...)` trains on the shared loop.
    tol, max_iters, gauss_newton: the Newton solver's settings.

  Returns:
    `Model(params, init, kind, curvature)`.

  Example:
    >>> model = fit_model(obj, init, make_task(x, y), kind="full", gauss_newton=True)
  """
  if fit_stage is None:
    fit_stage = functools.partial(continual.fit_stage_newton, obj, tol=tol,
                                  max_iters=max_iters, gauss_newton=gauss_newton)
  params = continual.train_sequence(fit_stage, init, [data])[-1]
  return prepare_model(obj, init, params, data, kind)


def remove(key: jax.Array, obj: Objective, model: Model, data: Task, mask, *,
           epsilon: float, delta: float, config: UnlearnConfig = UnlearnConfig(),
           convex: bool = True) -> Removal:
  """Removes the examples of `data` where `mask` is True, certifies and releases.

      theta_hat = stage update of `model.kind` on L(.; D \\ F) from theta*,
      B = min(r / m, GD prior), sigma = B sqrt(2 ln(1.25/delta)) / epsilon,
      theta~ = theta_hat + sigma xi.

  Removing every example returns theta_0 with B = 0 (nothing is left to learn from),
  as the continual method skips an emptied task.

  Args:
    key: PRNG key; split into (noise key, power-iteration key): the release noise
      uses the first, `config.smoothness == "power"` the second.
    obj: the objective the model minimised.
    model: from `fit_model` or `prepare_model`.
    data: the training data D, in the row order the model was fitted on.
    mask: (n,) bools, True for the examples to remove.
    epsilon, delta: the guarantee (epsilon < 1 for the classic Gaussian mechanism).
    config: the update's settings (`UnlearnConfig`: newton_steps, grad_steps,
      cg_iters, lissa_depth, smoothness).
    convex: whether the data term is convex, i.e. B is a proof (False: a heuristic,
      e.g. for an MLP).

  Returns:
    `Removal(params, released, certificate, residual)`.

  Example:
    >>> out = remove(jax.random.PRNGKey(1), obj, model, data, np.arange(n) < 10,
    ...              epsilon=0.5, delta=1e-5)
  """
  noise_key, power_key = jax.random.split(key)
  out = unlearn(obj, model.state(), [forget(data, mask)], 0, (model.kind,),
                removed=only(data, mask), config=config, key=power_key)
  cert = certificate.certify(out.bound, epsilon, delta, convex=convex)
  return Removal(params=out.params, released=certificate.release(noise_key, out.params, cert.sigma),
                 certificate=cert, residual=out.residuals[0])
