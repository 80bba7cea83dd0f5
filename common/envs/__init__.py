"""JAX continuous-control environments (`ControlEnv`) and their registry.

    env = make("push")          # planar block pushing (common/envs/push.py)
    env = make("reach")         # reach with obstacles (common/envs/reach.py)

"pusht" is the name of the gym-pusht adapter (`common.envs.pusht`), which wraps a real
environment library and is not a `ControlEnv`; import it from its module. Rollouts
(expert demonstrations, closed-loop chunked evaluation) live in `common.envs.rollout`.
"""

import inspect

from common.envs import push, reach
from common.envs.base import ControlEnv

_BUILDERS = {"push": push.make, "reach": reach.make}
NAMES = tuple(_BUILDERS)
RESERVED = ("pusht",)


def make(name: str, **kwargs) -> ControlEnv:
  """The registered environment ``name``, built with ``kwargs``.

  Args:
    name: one of `NAMES` ("push", "reach").
    **kwargs: the builder's options (``max_steps``, ``expert_noise``).

  Returns:
    A `ControlEnv` (the same object for the same arguments).

  Example:
    >>> env = make("push", expert_noise=0.1)
  """
  if name in RESERVED:
    raise ValueError(f"env {name!r} is the gym-pusht adapter, not a ControlEnv: import "
                     f"common.envs.pusht; make() knows {', '.join(NAMES)}")
  if name not in _BUILDERS:
    raise ValueError(f"unknown env {name!r}; expected one of {', '.join(NAMES)}")
  options = tuple(inspect.signature(_BUILDERS[name]).parameters)
  unknown = sorted(set(kwargs) - set(options))
  if unknown:
    raise ValueError(f"env {name!r}: unknown option(s) {', '.join(unknown)}; expected "
                     f"some of {', '.join(options)}")
  return _BUILDERS[name](**kwargs)


__all__ = ["ControlEnv", "NAMES", "make", "push", "reach"]
