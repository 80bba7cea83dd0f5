"""Experience-library optimisation with textual stochastic gradient descent (TSGD).

The library of natural-language rules under a capacity K is the learnable parameter
(`library.py`); a TSGD step turns a minibatch's failures into Add / Edit / Delete /
Replace operations through a reflector and keeps those that pass dual verification
(`tsgd.py`). The roles are `common.llm.TextModel`s (`roles.py`, prompts in
`prompts.py`); `simulated.py` holds the explicit CPU-scale solver and rule inducer;
`problems.py` the generated hidden-rule task and the MATH-style JSONL loader;
`baselines.py` zero-shot, append-only memory and static retrieval.
"""

from methods.experience_library.baselines import (ZERO_SHOT, append_only_step, retrieval_step,
                                                  retrieve)
from methods.experience_library.library import (KINDS, Library, Operation, apply, check_rule,
                                                new_library, parse_operations, render)
from methods.experience_library.problems import (Family, Problem, extract_answer, is_correct,
                                                 load_problems_jsonl, make_families,
                                                 sample_problems)
from methods.experience_library.roles import Roles, accuracy, check_roles, reflect, solve
from methods.experience_library.simulated import SimulatedReflector, SimulatedSolver
from methods.experience_library.tsgd import StepRecord, TSGDConfig, step

__all__ = ["KINDS", "Family", "Library", "Operation", "Problem", "Roles", "SimulatedReflector",
           "SimulatedSolver", "StepRecord", "TSGDConfig", "ZERO_SHOT", "accuracy",
           "append_only_step", "apply", "check_roles", "check_rule", "extract_answer",
           "is_correct", "load_problems_jsonl", "make_families", "new_library",
           "parse_operations", "reflect", "render", "retrieval_step", "retrieve",
           "sample_problems", "solve", "step"]
