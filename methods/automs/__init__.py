"""AutoMS: simulation-aware evolutionary search (SAES) for metamaterial unit cells,
orchestrated by text-model agents.

`cells.py` (six periodic SDF cell families -> density fields), `simulator.py` (designs
-> homogenised properties through `common.physics`), `tasks.py` (the 17 constraint-box
tasks, success and fitness), `evolution.py` (non-dominated sorting, crowding, SBX,
polynomial mutation, NSGA-II in JAX), `saes.py` (the local WLS gradient, directed
mutation, guided candidates, archive, restarts), `agents.py` (Manager, Parser, Generator
roles over any `common.llm.TextModel`; bounded retries), `simulated.py` (the offline
stand-in for those roles), `baselines.py` (random, NSGA-II, CMA-ES from evosax,
LLM-only, the jax.grad reference; the shared `Budget`), `search.py` (one method on one
task and seed). See docs/automs.md.
"""

from methods.automs import tasks
from methods.automs.agents import Roles
from methods.automs.agents import Usage
from methods.automs.baselines import Budget
from methods.automs.cells import FAMILY_NAMES
from methods.automs.saes import local_gradient
from methods.automs.saes import Objectives
from methods.automs.saes import SAESConfig
from methods.automs.search import METHODS
from methods.automs.search import SearchConfig
from methods.automs.simulated import OfflineAgents
from methods.automs.simulator import Simulator
from methods.automs.tasks import Constraint
from methods.automs.tasks import Task
from methods.automs.tasks import TASKS

__all__ = ["Budget", "Constraint", "FAMILY_NAMES", "METHODS", "Objectives", "OfflineAgents",
           "Roles", "SAESConfig", "SearchConfig", "Simulator", "TASKS", "Task", "Usage",
           "local_gradient"]
