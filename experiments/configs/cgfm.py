"""CGFM: condition-aware graph flow matching of vortex-shedding flows on an irregular mesh.

Launch:
  python -m experiments.main --config=experiments/configs/cgfm.py:quick --workdir=/tmp/cgfm
  python -m experiments.main --config=experiments/configs/cgfm.py:full --workdir=/tmp/cgfm_full
  python -m experiments.main --config=experiments/configs/cgfm.py:paper --workdir=/tmp/cgfm_paper
  python -m experiments.main --config=experiments/configs/cgfm.py:tiny --workdir=/tmp/cgfm_tiny \
      --config.train.num_steps=100 --config.model.naive_coarsening="('random','voxel')"
  python -m experiments.main --config=experiments/configs/cgfm.py:quick --workdir=/tmp/cgfm_own \
      --config.data.path=/path/to/flows.npz

Data (``config.data``): a D2Q9 lattice-Boltzmann channel flow past a cylinder
(``common.data.lbm``) at every Reynolds number in ``train_reynolds`` and
``heldout_reynolds``; after ``spinup_steps``, ``windows`` short windows of
``window_length`` snapshots every ``record_every`` steps are kept per condition and
sampled onto an irregular Delaunay mesh of about ``num_points`` nodes (seed
``mesh_seed``; ``common.data.fluid_meshes``). The held-out Reynolds numbers are never
trained on. ``path`` instead reads a user's ``.npz`` in the same format (then the two
Reynolds lists select its conditions).

Models (``config.model``; all trained with the shared loop, ``config.train``, on the
same data, steps and optimizer: Adam with ``learning_rate``, warmup and cosine decay):
``cgfm`` (HieraGraphNet on the topology/geometry-aware hierarchy with
``coarsening_ratios``), one naive-coarsening hierarchy per entry of
``naive_coarsening``, and ``single_level`` (a MeshGraphNet-style network with as many
blocks as the hierarchical one runs). Each is trained ``num_seeds`` times (training
seeds ``train.seed``, ``train.seed + 1``, ...; the seed also draws the random
coarsening), sampled ``eval.num_samples`` times per condition with ``eval.ode_steps``
Euler steps and compared with the simulated states; the report gives seed means and
spreads.
"""

import importlib.metadata

from common import config as config_lib
from common import train as train_lib
from methods.cgfm import coarsening


def _jaxlib_version() -> tuple[int, ...]:
  return tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])


# XLA:CPU's YNNPACK fusions (on by default in jaxlib 0.10) materialise the broadcasts of
# the LayerNorm statistics over the edges as (E, latent) arrays; off, the training step
# was 1.3-1.5x faster on CPU at 400 to 20,000 nodes (docs/benchmarks.md). Other
# backends ignore the option; jaxlib before 0.10 may not know it, so it is left unset there.
CPU_OPTIONS = "xla_cpu_experimental_ynn_fusion_type=" if _jaxlib_version() >= (0, 10) else ""


BASE = dict(
    method="cgfm",
    num_seeds=2,
    x64=False,
    # Simulation (or the user's .npz at `path`) and mesh.
    data=dict(path="", nx=180, ny=44, diameter=10.0,
              train_reynolds=(60.0, 80.0, 100.0, 125.0, 150.0),
              heldout_reynolds=(70.0, 112.0, 138.0),
              spinup_steps=5000, windows=8, window_length=10, record_every=20, window_gap=100,
              num_points=400, mesh_seed=0),
    # Hierarchy and network.
    model=dict(coarsening_ratios=(0.3, 0.3), naive_coarsening=("random", "voxel"),
               latent=32, blocks_per_level=1, mlp_layers=1),
    learning_rate=1e-3,
    train=train_lib.default_train_config(num_steps=1500, batch_size=8, checkpoint_every=375,
                                         log_every=150, progress_bar=False, seed=0,
                                         compiler_options=CPU_OPTIONS),
    # Evaluation: samples per condition and Euler steps of the sampler.
    eval=dict(num_samples=128, ode_steps=16),
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    # 1 training seed of 2, 600 steps of 1500, 64 samples per condition of 128.
    "quick": {"num_seeds": 1, "train": dict(num_steps=600, checkpoint_every=300, log_every=100),
              "eval.num_samples": 64},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts.
    "full": {},
    # Paper-like scale, for accelerators: a finer lattice and mesh, more conditions,
    # a deeper hierarchy, a wider network and long training.
    "paper": {
        "num_seeds": 3,
        "data": dict(nx=704, ny=176, diameter=32.0, num_points=12000,
                     train_reynolds=(80.0, 90.0, 100.0, 115.0, 130.0, 145.0, 160.0, 180.0,
                                     200.0),
                     heldout_reynolds=(85.0, 122.0, 170.0, 190.0), spinup_steps=60000,
                     windows=20, window_length=10, record_every=160, window_gap=1600),
        "model": dict(coarsening_ratios=(0.25, 0.25, 0.25), latent=128, blocks_per_level=2,
                      mlp_layers=2),
        "train": dict(num_steps=100000, batch_size=32, checkpoint_every=25000,
                      log_every=10000),
        "eval": dict(num_samples=500, ode_steps=50),
    },
    # Seconds: what the claim test runs. Its CPU time is mostly compilation (an init,
    # a train step and a sampler per model), so: one coarse level (150 -> 45 nodes; the
    # single-level network then has 3 blocks), a batch of 4 and one checkpoint, at the end.
    # The train step is compiled at XLA level 1, where it runs faster: at the test
    # suite's level 0 (tests/conftest.py) training took 80 of the run's 99 CPU-seconds,
    # and 48 of 66 at level 1 (the same figures to 1e-5).
    "tiny": {
        "num_seeds": 1,
        "data": dict(nx=80, ny=24, diameter=6.0, train_reynolds=(70.0, 100.0),
                     heldout_reynolds=(85.0,), spinup_steps=2000, windows=3, window_length=4,
                     record_every=10, window_gap=60, num_points=150),
        "model": dict(coarsening_ratios=(0.3,), naive_coarsening=("random",)),
        "train": dict(num_steps=300, batch_size=4, checkpoint_every=0, log_every=30,
                      compiler_options=",".join(
                          filter(None, (CPU_OPTIONS, "xla_backend_optimization_level=1")))),
        "eval": dict(num_samples=32, ode_steps=8),
    },
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 4.4, "full": None}


def get_config(preset: str | None = None):
  return config_lib.build("cgfm", BASE, PRESETS, preset)


def _validate_data(config) -> None:
  c = config_lib
  for key in ("nx", "ny", "spinup_steps", "windows", "window_length", "record_every"):
    c.positive_int(config, f"data.{key}")
  c.positive_int(config, "data.window_gap", minimum=0)
  c.positive_int(config, "data.num_points", minimum=20)
  c.positive(config, "data.diameter")
  positive_number = lambda v: isinstance(v, (int, float)) and v > 0
  c.sequence_of(config, "data.train_reynolds", positive_number, "Reynolds numbers > 0")
  c.sequence_of(config, "data.heldout_reynolds", positive_number, "Reynolds numbers > 0")
  c.require(config, "data.train_reynolds", len(config.data.train_reynolds) >= 2,
            "at least 2 training conditions to interpolate between")
  overlap = set(config.data.train_reynolds) & set(config.data.heldout_reynolds)
  c.require(config, "data.heldout_reynolds", not overlap,
            f"no Reynolds number of config.data.train_reynolds (shares {sorted(overlap)}): "
            "held-out conditions must never be trained on")


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  _validate_data(config)
  for key in ("num_seeds", "model.latent", "model.blocks_per_level", "model.mlp_layers",
              "eval.ode_steps"):
    c.positive_int(config, key)
  c.positive_int(config, "eval.num_samples", minimum=8)
  c.positive(config, "learning_rate")
  c.check_train(config, "train")
  c.sequence_of(config, "model.coarsening_ratios",
                lambda v: isinstance(v, float) and 0 < v < 1, "ratios in (0, 1)")
  c.subset_of(config, "model.naive_coarsening",
              [m for m in coarsening.METHODS if m != "aware"])
