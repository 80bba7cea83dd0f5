"""GLANCE: curiosity from the gap between an agent's linguistic prediction of its next
view and the view's embedding under an EMA target encoder, on xminigrid with PPO.

Modules: `envs` (xminigrid environments as `common.rl.ppo.Env`), `networks` (the grid
encoder and actor-critic), `language` (the six-token description of a view),
`curiosity` (GLANCE, its ablations, BYOL-Explore, RND and ICM as PPO curiosity hooks).
The experiment is `experiments/glance.py`, its benchmark `experiments/benchmarks/glance.py`
(docs/glance.md).
"""

from methods.glance import curiosity, envs, language, networks
from methods.glance.curiosity import (METHODS, CuriosityConfig, init_curiosity,
                                      make_curiosity, make_hooks)
from methods.glance.envs import environment_names, make_env

__all__ = ["METHODS", "CuriosityConfig", "curiosity", "environment_names", "envs",
           "init_curiosity", "language", "make_curiosity", "make_env", "make_hooks",
           "networks"]
