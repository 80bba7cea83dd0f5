"""Certified unlearning in continual learning: split digits, logistic regression and an MLP.

Launch:
  python -m experiments.main --config=experiments/configs/unlearning.py:quick \
      --workdir=results/unlearning
  python -m experiments.main --config=experiments/configs/unlearning.py:paper \
      --workdir=/tmp/unlearning_paper

Tasks are scikit-learn's bundled digits split into the pairs {0,1}, ..., {8,9}; each is
trained in turn on the stage objective (1) of methods/unlearning/continual.py with
anchor strength `lam` and ridge `mu`. `image_pool` > 1 average-pools the 8x8 images
(2: 4x4 = 16 pixels) for a smaller model (the tiny preset). Every task in `forget_tasks` (0-based) is
forgotten in turn, with every method in `methods`; the noise is calibrated for
(epsilon, delta) with the classic Gaussian mechanism (epsilon < 1).

Methods: "hessian" (stored full Hessian for logistic, Gauss-Newton for the MLP),
"hessian_diag" (stored diagonal majorizer), "hessian_cg" (Hessian-/GGN-vector products
with conjugate gradients), "hessian_lissa" (LiSSA, logistic only), "gradient"
(descent-to-delete, nothing stored but checkpoints), "hybrid" (full curvature for the
`hybrid_full_tasks` most recent tasks, `hybrid_rest` elsewhere).
"""

from common import config as config_lib

MODELS = ("logistic", "mlp")
METHODS = ("hessian", "hessian_diag", "hessian_cg", "hessian_lissa", "gradient", "hybrid")
HYBRID_REST = ("diag", "gradient")

BASE = dict(
    method="unlearning",
    seed=0,
    x64=True,
    models=MODELS,
    methods=METHODS,
    test_fraction=0.25,
    image_pool=1,
    forget_tasks=(0, 1, 2, 3, 4),
    lam=1.0,
    mu=0.1,
    epsilon=0.5,
    delta=1e-5,
    noise_draws=4,
    newton_steps=5,
    grad_steps=5,
    cg_iters=100,
    lissa_depth=200,
    hybrid_full_tasks=2,
    hybrid_rest="diag",
    newton_tol=1e-9,
    newton_max_iters=50,
    mlp_hidden=(32,),
    mlp_steps=400,
    mlp_lr=1e-2,
)

PRESETS = {
    # CPU, about 3 minutes: what `make reproduce` runs.
    "quick": {},
    # Paper scale, for accelerators: a wider MLP (d = 9738; its Gauss-Newton matrix is
    # 380 MB per task in float32) trained longer per stage, and longer CG solves. For
    # wider MLPs, keep only the matrix-free methods: --config.methods="('hessian_cg',
    # 'gradient')" (the benchmark runs d = 85k that way).
    "paper": dict(mlp_hidden=(128,), mlp_steps=3000, cg_iters=300, noise_draws=16),
    # Seconds: what the claim test runs.
    "tiny": dict(models=("logistic",), forget_tasks=(0, 3, 4), image_pool=2,
                 methods=("hessian", "hessian_cg", "gradient", "hybrid"), newton_steps=3,
                 grad_steps=3),
}


def get_config(preset: str | None = None):
  return config_lib.build("unlearning", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  c.subset_of(config, "models", MODELS)
  c.subset_of(config, "methods", METHODS)
  c.in_range(config, "test_fraction", 0.0, 1.0)
  c.one_of(config, "image_pool", (1, 2, 4))
  c.sequence_of(config, "forget_tasks", lambda v: isinstance(v, int) and 0 <= v < 5,
                "task indices in 0..4")
  c.positive(config, "lam")
  c.positive(config, "mu")
  c.in_range(config, "epsilon", 0.0, 1.0)
  c.in_range(config, "delta", 0.0, 1.0)
  c.positive_int(config, "noise_draws")
  c.positive_int(config, "newton_steps")
  c.positive_int(config, "grad_steps")
  c.positive_int(config, "cg_iters")
  c.positive_int(config, "lissa_depth")
  if (isinstance(config.hybrid_full_tasks, bool) or not isinstance(config.hybrid_full_tasks, int)
      or not 0 <= config.hybrid_full_tasks <= 5):
    raise c.ConfigError(f"config.hybrid_full_tasks={config.hybrid_full_tasks!r} is invalid: "
                        "expected an integer in 0..5")
  c.one_of(config, "hybrid_rest", HYBRID_REST)
  c.positive(config, "newton_tol")
  c.positive_int(config, "newton_max_iters")
  c.sequence_of(config, "mlp_hidden", lambda v: isinstance(v, int) and v > 0,
                "positive integers")
  c.positive_int(config, "mlp_steps")
  c.positive(config, "mlp_lr")
