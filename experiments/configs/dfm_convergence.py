"""Brownian diffusion flow matching: discretisation error of Euler-Maruyama vs step and dimension.

Launch:
  python -m experiments.main --config=experiments/configs/dfm_convergence.py:quick \
      --workdir=/tmp/dfm_convergence
  python -m experiments.main --config=experiments/configs/dfm_convergence.py:paper \
      --workdir=/tmp/dfm_convergence_paper
  python -m experiments.main --config=experiments/configs/dfm_convergence.py:tiny \
      --workdir=/tmp/dfm_tiny --config.mixture.dims="(2,8)" --config.check.samples=1000

Keys (``sigma`` and ``seed`` at the top, then one sub-config per study):
* ``gaussian``: targets N(m, S) in dimension d for d in ``dims``: m = mean_scale (1, ...,
  1), S = Q diag(s) Q^T with s log-spaced in [cov_min, cov_max] and Q a random rotation.
  The analytic DFM drift is run by Euler-Maruyama with N in ``num_steps`` (h = 1/N)
  from N(0, I); the chain's law is exactly Gaussian, so KL and W2 to the target are
  exact. The d-exponents are fitted at N = ``fixed_steps``.
* ``bound``: the exponents we compare with (our reading of the paper: KL = O(d h), at
  least linear in h; W2 inherits sqrt(d) through Talagrand's T2) and the tolerance.
* ``mixture``: targets with ``components`` unequal modes (std ``std``) at distance
  ``radius`` in d in ``dims``. W2 is bounded by a synchronous coupling with a reference
  chain of ``ref_steps`` steps (at least 16 x the finest coarse chain, so its own error
  does not flatten the fitted slope), on ``samples`` paths; plus a debiased Sinkhorn
  estimate (``sinkhorn_samples``, ``sinkhorn_eps``) against exact draws.
* ``check``: the diffrax Euler-Maruyama sampler (``samples`` paths, d = ``dim``, N =
  ``steps``) against the exact law.
"""

from common import config as config_lib

BASE = dict(
    method="dfm_convergence",
    seed=0,
    x64=True,
    sigma=1.0,
    gaussian=dict(num_steps=(8, 16, 32, 64, 128, 256, 512), dims=(1, 2, 4, 8, 16, 32, 64),
                  fixed_steps=64, mean_scale=1.0, cov_min=0.25, cov_max=4.0),
    bound=dict(h_exponent=1.0, d_exponent_kl=1.0, d_exponent_w2=0.5, tolerance=0.1),
    mixture=dict(dims=(2, 8), components=4, radius=2.0, std=0.5, samples=500,
                 ref_steps=2048, steps=(8, 16, 32, 64, 128), sinkhorn_samples=400,
                 sinkhorn_eps=0.05),
    check=dict(samples=20000, dim=2, steps=8),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. Finer h and wider d (N up to 1024, d up to 128), the
    # mixture in d = 32 too with 1000 coupled paths, a 4096-step reference and N up to
    # 256, 100k sampler paths: 1.5 minutes measured, pinned to one of the two cores.
    "full": {
        "gaussian": dict(num_steps=(8, 16, 32, 64, 128, 256, 512, 1024),
                         dims=(1, 2, 4, 8, 16, 32, 64, 128)),
        "mixture": dict(dims=(2, 8, 32), samples=1000, ref_steps=4096,
                        steps=(8, 16, 32, 64, 128, 256), sinkhorn_samples=800),
        "check.samples": 100000,
    },
    # Larger sweeps, for accelerators.
    "paper": {
        "gaussian": dict(num_steps=(8, 16, 32, 64, 128, 256, 512, 1024, 2048),
                         dims=(1, 2, 4, 8, 16, 32, 64, 128, 256)),
        "mixture": dict(dims=(2, 8, 32), samples=20000, ref_steps=8192,
                        steps=(8, 16, 32, 64, 128, 256, 512), sinkhorn_samples=2000),
        "check.samples": 200000,
    },
    # Seconds: what the claim test runs.
    "tiny": {
        "gaussian": dict(num_steps=(8, 32, 128), dims=(1, 4, 16), fixed_steps=32),
        "mixture": dict(dims=(2,), samples=200, ref_steps=512, steps=(8, 16, 32),
                        sinkhorn_samples=100),
        "check.samples": 4000,
    },
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 0.6, "full": 1.6}


def get_config(preset: str | None = None):
  return config_lib.build("dfm_convergence", BASE, PRESETS, preset)


def _posint(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.positive(config, "sigma")
  for key in ("gaussian.num_steps", "gaussian.dims", "mixture.dims", "mixture.steps"):
    c.sequence_of(config, key, _posint, "integers >= 1")
  for key in ("gaussian.num_steps", "gaussian.dims", "mixture.steps"):
    c.require(config, key, len(c.get(config, key)) >= 2,
              "at least two values (a slope is fitted)")
  for key in ("gaussian.fixed_steps", "mixture.components", "check.dim", "check.steps"):
    c.positive_int(config, key)
  for key in ("gaussian.mean_scale", "gaussian.cov_min", "gaussian.cov_max",
              "bound.h_exponent", "bound.d_exponent_kl", "bound.d_exponent_w2",
              "bound.tolerance", "mixture.radius", "mixture.std", "mixture.sinkhorn_eps"):
    c.positive(config, key)
  c.require(config, "gaussian.cov_min", config.gaussian.cov_min <= config.gaussian.cov_max,
            f"<= gaussian.cov_max={config.gaussian.cov_max!r}")
  c.positive_int(config, "mixture.samples", minimum=16)
  c.positive_int(config, "mixture.sinkhorn_samples", minimum=16)
  c.positive_int(config, "check.samples", minimum=100)
  c.positive_int(config, "mixture.ref_steps", minimum=2)
  mix = config.mixture
  c.require(config, "mixture.ref_steps", mix.ref_steps >= 16 * max(mix.steps),
            f">= 16 x max(mixture.steps)={16 * max(mix.steps)} (the reference chain's own "
            "error must be negligible in the coupling bound)")
  c.require(config, "mixture.steps", all(mix.ref_steps % n == 0 for n in mix.steps),
            f"each must divide mixture.ref_steps={mix.ref_steps}")
