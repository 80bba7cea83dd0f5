"""CGFM: condition-aware graph flow matching of vortex-shedding flows on an irregular mesh.

Launch:
  python -m experiments.main --config=experiments/configs/cgfm.py:quick --workdir=/tmp/cgfm
  python -m experiments.main --config=experiments/configs/cgfm.py:paper --workdir=/tmp/cgfm_paper

Data: a D2Q9 lattice-Boltzmann channel flow past a cylinder (``common.data.lbm``) at
every Reynolds number in ``train_reynolds`` and ``heldout_reynolds``; after
``spinup_steps``, ``windows`` short windows of ``window_length`` snapshots every
``record_every`` steps are kept per condition and sampled onto an irregular Delaunay
mesh of about ``num_points`` nodes (``common.data.fluid_meshes``). The held-out
Reynolds numbers are never trained on. ``data_path`` instead reads a user's
``.npz`` in the same format (then the two Reynolds lists select its conditions).

Models (all trained with the shared loop on the same data, steps and optimizer):
``cgfm`` (HieraGraphNet on the topology/geometry-aware hierarchy with
``coarsening_ratios``), one naive-coarsening hierarchy per entry of
``naive_coarsening``, and ``single_level`` (a MeshGraphNet-style network with as many
blocks as the hierarchical one runs). Each is trained ``num_seeds`` times (training
seeds ``seed``, ``seed + 1``, ...; the seed also draws the random coarsening), sampled
``eval_samples`` times per condition with ``ode_steps`` Euler steps and compared with
the simulated states; the report gives seed means and spreads.
"""

from common import config as config_lib
from methods.cgfm import coarsening

BASE = dict(
    method="cgfm",
    seed=0,
    num_seeds=2,
    x64=False,
    # simulation and mesh
    data_path="",
    nx=180,
    ny=44,
    diameter=10.0,
    train_reynolds=(60.0, 80.0, 100.0, 125.0, 150.0),
    heldout_reynolds=(70.0, 112.0, 138.0),
    spinup_steps=5000,
    windows=8,
    window_length=10,
    record_every=20,
    window_gap=100,
    num_points=400,
    mesh_seed=0,
    # hierarchy and model
    coarsening_ratios=(0.3, 0.3),
    naive_coarsening=("random", "voxel"),
    latent=32,
    blocks_per_level=1,
    mlp_layers=1,
    # training
    train_steps=1500,
    batch_size=8,
    learning_rate=1e-3,
    # evaluation
    eval_samples=128,
    ode_steps=16,
)

PRESETS = {
    # CPU, minutes: what `make reproduce` runs.
    "quick": {},
    # Paper-like scale, for accelerators: a finer lattice and mesh, more conditions,
    # a deeper hierarchy, a wider network and long training.
    "paper": dict(nx=704, ny=176, diameter=32.0, num_points=12000,
                  train_reynolds=(80.0, 90.0, 100.0, 115.0, 130.0, 145.0, 160.0, 180.0, 200.0),
                  heldout_reynolds=(85.0, 122.0, 170.0, 190.0), spinup_steps=60000,
                  windows=20, window_length=10, record_every=160, window_gap=1600,
                  coarsening_ratios=(0.25, 0.25, 0.25), latent=128, blocks_per_level=2,
                  mlp_layers=2, num_seeds=3, train_steps=100000, batch_size=32,
                  eval_samples=500, ode_steps=50),
    # Seconds: what the claim test runs.
    "tiny": dict(nx=80, ny=24, diameter=6.0, train_reynolds=(70.0, 100.0),
                 heldout_reynolds=(85.0,), spinup_steps=2000, windows=3, window_length=4,
                 record_every=10, window_gap=60, num_points=150,
                 naive_coarsening=("random",), num_seeds=1, train_steps=300, eval_samples=32,
                 ode_steps=8),
}


def get_config(preset: str | None = None):
  return config_lib.build("cgfm", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  c = config_lib
  for key in ("num_seeds", "nx", "ny", "spinup_steps", "windows", "record_every", "latent",
              "blocks_per_level", "mlp_layers", "train_steps", "batch_size", "ode_steps"):
    c.positive_int(config, key)
  c.positive_int(config, "window_length", minimum=1)
  c.positive_int(config, "window_gap", minimum=0)
  c.positive_int(config, "num_points", minimum=20)
  c.positive_int(config, "eval_samples", minimum=8)
  for key in ("diameter", "learning_rate"):
    c.positive(config, key)
  positive_number = lambda v: isinstance(v, (int, float)) and v > 0
  c.sequence_of(config, "train_reynolds", positive_number, "Reynolds numbers > 0")
  c.sequence_of(config, "heldout_reynolds", positive_number, "Reynolds numbers > 0")
  if len(config.train_reynolds) < 2:
    raise config_lib.ConfigError(
        f"config.train_reynolds={tuple(config.train_reynolds)!r}: need at least 2 training "
        "conditions to interpolate between")
  overlap = set(config.train_reynolds) & set(config.heldout_reynolds)
  if overlap:
    raise config_lib.ConfigError(
        f"config.heldout_reynolds shares {sorted(overlap)} with config.train_reynolds; held-out "
        "conditions must never be trained on")
  c.sequence_of(config, "coarsening_ratios", lambda v: isinstance(v, float) and 0 < v < 1,
                "ratios in (0, 1)")
  c.subset_of(config, "naive_coarsening", [m for m in coarsening.METHODS if m != "aware"])
