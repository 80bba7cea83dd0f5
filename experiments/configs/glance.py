"""GLANCE: curiosity from the gap between an agent's linguistic prediction and its view.

Launch:
  python -m experiments.main --config=experiments/configs/glance.py:quick --workdir=results/glance
  python -m experiments.main --config=experiments/configs/glance.py:full --workdir=/tmp/glance_full
  python -m experiments.main --config=experiments/configs/glance.py:tiny --workdir=/tmp/glance_tiny
  python -m experiments.main --config=experiments/configs/glance.py:paper --workdir=/tmp/glance_paper

Every method in `methods` trains the same PPO agent (`ppo`, `common/rl/ppo.py`) on each
xminigrid environment in `envs` for `num_updates` updates of num_envs x num_steps
environment steps, `seeds` seeds in parallel (vmapped), with its curiosity
(`methods/glance/curiosity.py`, settings in `curiosity`). Success rates per update come
from the finished episodes; heat maps of the intrinsic reward over the grid are taken
at update `heatmap_early` and at the end.
"""

from common import config as config_lib
from methods.glance import curiosity

BASE = dict(
    method="glance",
    envs=("MiniGrid-DoorKey-6x6", "MiniGrid-MemoryS8"),
    observation="symbolic",
    methods=curiosity.METHODS,
    seeds=5,
    ppo=dict(num_envs=16, num_steps=128, update_epochs=4, num_minibatches=4, gamma=0.99,
             gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
             learning_rate=2.5e-4, anneal_lr=True),
    num_updates=40,
    chunk=10,
    curiosity=dict(beta=0.01, tau=0.99, reinit_every=20, lang_weight=1.0, aux_weight=1.0,
                   norm_momentum=0.9),
    heatmap_early=5,
    heatmap_steps=128,
    success_window=10,   # updates over which the final success rate is measured
    seed=0,
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    # DoorKey-6x6 only, PPO + GLANCE + the two vision-only rivals of claim 2, 3 seeds,
    # 16 updates (re-init every 8, as 20 of 40): 5.4 minutes idle with a cold
    # compilation cache (with the update's loops unrolled, 20 updates took 8.1).
    "quick": {"envs": ("MiniGrid-DoorKey-6x6",),
              "methods": ("none", "glance", "glance_no_bottleneck", "byol"),
              "seeds": 3, "num_updates": 16, "curiosity.reinit_every": 8},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. All 7 methods on DoorKey-6x6, 5 seeds, 40 updates
    # (81,920 steps): estimated 20-30 minutes (BASE, both environments, is ~45).
    "full": {"envs": ("MiniGrid-DoorKey-6x6",)},
    # Accelerators: the paper-scale budget and the larger DoorKey.
    "paper": {"envs": ("MiniGrid-DoorKey-8x8", "MiniGrid-MemoryS16"), "seeds": 10,
              "num_updates": 1500, "chunk": 50, "ppo.num_envs": 256,
              "curiosity.reinit_every": 200, "heatmap_early": 100},
    # Seconds: what the claim test runs. PPO without curiosity and GLANCE only: each
    # method compiles its own update (most of the run; BYOL-Explore's was 28% of it), and
    # these two take every branch of the experiment but claim 2's vision-only rivals,
    # which tests/methods/test_glance.py fits to the environment view.
    "tiny": {"envs": ("MiniGrid-DoorKey-5x5",), "methods": ("none", "glance"),
             "seeds": 2, "num_updates": 4, "chunk": 2, "heatmap_early": 2,
             "heatmap_steps": 16, "success_window": 2,
             "ppo": dict(num_envs=4, num_steps=32, update_epochs=1, num_minibatches=1),
             "curiosity.reinit_every": 2},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
# quick: estimated from the idle 8.1-minute run at 20 updates (4 fewer updates x 3 seeds x
# 4 methods; compiling is unchanged), not yet measured at 16.
MINUTES = {"quick": 5.5, "full": None}


def get_config(preset: str | None = None):
  return config_lib.build("glance", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value."""
  from methods.glance import envs as envs_lib
  c = config_lib
  names = envs_lib.environment_names()
  c.sequence_of(config, "envs", lambda n: n in names,
                f"xminigrid environment names (valid: {', '.join(names)})")
  c.require(config, "observation", config.observation == "symbolic",
            f"'symbolic': {', '.join(config.envs)} give the agent no image observations "
            "(their RGB frames are a rendering), only the (tile, colour) grid view")
  c.subset_of(config, "methods", curiosity.METHODS)
  c.require(config, "methods", "glance" in config.methods, "methods including 'glance'")
  for key in ("seeds", "num_updates", "chunk", "heatmap_steps", "success_window",
              "ppo.num_envs", "ppo.num_steps", "ppo.update_epochs", "ppo.num_minibatches"):
    c.positive_int(config, key)
  c.positive_int(config, "seed", minimum=0)
  c.positive_int(config, "curiosity.reinit_every", minimum=0)
  p = config.ppo
  c.require(config, "ppo.num_minibatches", (p.num_envs * p.num_steps) % p.num_minibatches == 0,
            f"a divisor of ppo.num_envs x ppo.num_steps = {p.num_envs * p.num_steps} (the "
            "rollout must split into equal minibatches)")
  c.require(config, "heatmap_early", 1 <= config.heatmap_early < config.num_updates,
            f"an update in [1, num_updates={config.num_updates})")
  c.require(config, "success_window", config.success_window <= config.num_updates,
            f"at most num_updates={config.num_updates}")
  c.require(config, "curiosity.beta", config.curiosity.beta >= 0, "a number >= 0")
  c.in_interval(config, "curiosity.tau", 0.0, 1.0, closed="low")
  c.in_interval(config, "curiosity.norm_momentum", 0.0, 1.0, closed="low")
  for key in ("ppo.gamma", "ppo.gae_lambda"):
    c.in_interval(config, key, 0.0, 1.0, closed="both")
  for key in ("ppo.clip_eps", "ppo.max_grad_norm", "ppo.learning_rate"):
    c.positive(config, key)
  for key in ("ppo.ent_coef", "ppo.vf_coef", "curiosity.lang_weight", "curiosity.aux_weight"):
    c.in_interval(config, key, 0.0, 1e6, closed="low")
