"""Brownian diffusion flow matching: discretisation error of Euler-Maruyama vs step and dimension.

Launch:
  python -m experiments.main --config=experiments/configs/dfm_convergence.py:quick \
      --workdir=/tmp/dfm_convergence
  python -m experiments.main --config=experiments/configs/dfm_convergence.py:paper \
      --workdir=/tmp/dfm_convergence_paper

Gaussian targets N(m, S) in dimension d: m = mean_scale * (1, ..., 1), S = Q diag(s) Q^T
with s log-spaced in [cov_min, cov_max] and Q a random rotation. The analytic DFM
drift is run by Euler-Maruyama with N steps (h = 1/N) from N(0, I); the chain's law
is exactly Gaussian, so KL and W2 to the target are exact. Mixture targets
(``mixture_dims``): W2 is bounded by a synchronous coupling with a reference chain
of ``mixture_ref_steps`` steps (at least 16 x the finest coarse chain, so its own
error does not flatten the fitted slope), on ``mixture_samples`` paths.
"""

from common import config as config_lib

BASE = dict(
    method="dfm_convergence",
    seed=0,
    x64=True,
    sigma=1.0,
    num_steps=(8, 16, 32, 64, 128, 256, 512),
    dims=(1, 2, 4, 8, 16, 32, 64),
    fixed_steps=64,
    mean_scale=1.0,
    cov_min=0.25,
    cov_max=4.0,
    # the bound's exponents we compare with (our reading of the paper's result:
    # KL = O(d h) at least linear in h; W2 inherits sqrt(d) through Talagrand's T2)
    bound_h_exponent=1.0,
    bound_d_exponent_kl=1.0,
    bound_d_exponent_w2=0.5,
    exponent_tolerance=0.1,
    # mixtures
    mixture_dims=(2, 8),
    mixture_components=4,
    mixture_radius=2.0,
    mixture_std=0.5,
    mixture_samples=500,
    mixture_ref_steps=2048,
    mixture_steps=(8, 16, 32, 64, 128),
    sinkhorn_samples=400,
    sinkhorn_eps=0.05,
    # sample-based check of the diffrax Euler-Maruyama sampler against the exact law
    check_samples=20000,
    check_dim=2,
    check_steps=8,
)

PRESETS = {
    # CPU, well under a minute.
    "quick": {},
    # Larger sweeps, for accelerators.
    "paper": dict(num_steps=(8, 16, 32, 64, 128, 256, 512, 1024, 2048),
                  dims=(1, 2, 4, 8, 16, 32, 64, 128, 256), mixture_dims=(2, 8, 32),
                  mixture_samples=20000, mixture_ref_steps=8192,
                  mixture_steps=(8, 16, 32, 64, 128, 256, 512),
                  sinkhorn_samples=2000, check_samples=200000),
    # Seconds: what the claim test runs.
    "tiny": dict(num_steps=(8, 32, 128), dims=(1, 4, 16), fixed_steps=32,
                 mixture_dims=(2,), mixture_samples=200, mixture_ref_steps=512,
                 mixture_steps=(8, 16, 32), sinkhorn_samples=100, check_samples=4000),
}


def get_config(preset: str | None = None):
  return config_lib.build("dfm_convergence", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.positive(config, "sigma")
  posint = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1
  for key in ("num_steps", "dims", "mixture_dims", "mixture_steps"):
    c.sequence_of(config, key, posint, "integers >= 1")
  for key in ("num_steps", "dims", "mixture_steps"):
    if len(config[key]) < 2:
      raise config_lib.ConfigError(f"config.{key}={config[key]!r} is invalid: expected "
                                   "at least two values (a slope is fitted)")
  for key in ("fixed_steps", "mixture_components", "check_dim", "check_steps"):
    c.positive_int(config, key)
  for key in ("mean_scale", "cov_min", "cov_max", "bound_h_exponent", "bound_d_exponent_kl",
              "bound_d_exponent_w2", "exponent_tolerance", "mixture_radius", "mixture_std",
              "sinkhorn_eps"):
    c.positive(config, key)
  if config.cov_min > config.cov_max:
    raise config_lib.ConfigError(f"config.cov_min={config.cov_min!r} is invalid: expected "
                                 f"<= cov_max={config.cov_max!r}")
  c.positive_int(config, "mixture_samples", minimum=16)
  c.positive_int(config, "sinkhorn_samples", minimum=16)
  c.positive_int(config, "check_samples", minimum=100)
  c.positive_int(config, "mixture_ref_steps", minimum=2)
  if config.mixture_ref_steps < 16 * max(config.mixture_steps):
    raise config_lib.ConfigError(
        f"config.mixture_ref_steps={config.mixture_ref_steps!r} is invalid: expected >= 16 x "
        f"max(mixture_steps)={16 * max(config.mixture_steps)} (the reference chain's own "
        "error must be negligible in the coupling bound)")
  bad = [n for n in config.mixture_steps if config.mixture_ref_steps % n]
  if bad:
    raise config_lib.ConfigError(f"config.mixture_steps={config.mixture_steps!r} is invalid: "
                                 f"each must divide mixture_ref_steps={config.mixture_ref_steps}")
