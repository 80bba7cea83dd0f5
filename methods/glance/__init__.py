"""GLANCE: curiosity from the gap between an agent's linguistic prediction of its next
view and the view's embedding under an EMA target encoder, on xminigrid with PPO.

Modules: `envs` (xminigrid environments as `common.rl.ppo.Env`), `networks` (the grid
encoder and actor-critic), `language` (the six-token description of a view),
`curiosity` (GLANCE, its ablations, BYOL-Explore, RND and ICM as PPO curiosity hooks).
Work in progress (issue 21): the experiment, its report rows and the benchmark follow.
"""

from methods.glance import curiosity, envs, language, networks
from methods.glance.curiosity import METHODS, CuriosityConfig, make_curiosity
from methods.glance.envs import environment_names, make_env

__all__ = ["METHODS", "CuriosityConfig", "curiosity", "environment_names", "envs",
           "language", "make_curiosity", "make_env", "networks"]
