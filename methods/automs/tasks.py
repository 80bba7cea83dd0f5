"""The 17 cross-physics design tasks: constraint boxes on homogenised properties.

A task is a conjunction of constraints lo_j <= y_j <= hi_j on the properties in
`PROPERTIES` (either bound may be infinite). With s_j = max(|finite bound|, floor_j)
the scale of constraint j, its normalised violation is

    v_j(y) = max(lo_j - y_j, 0, y_j - hi_j) / s_j,

and a design succeeds when every v_j <= `tol` (2% by default). Each task's
`requirement` is the natural-language sentence the Parser agent reads; `parse_box`
inverts exactly the phrasing `describe` writes, which the offline parser relies on.

Fitness per constraint, as in the public SAES code: f_j = 1 / (1 + v_j) (1 = met).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Property(NamedTuple):
  """A homogenised property: its key, its words in a requirement, its scale floor."""
  key: str
  phrase: str
  floor: float


PROPERTIES: tuple[Property, ...] = (
    Property("E1", "Young's modulus along x", 0.01),
    Property("E2", "Young's modulus along y", 0.01),
    Property("G12", "shear modulus", 0.01),
    Property("nu12", "Poisson's ratio", 0.1),
    Property("k11", "thermal conductivity along x", 0.01),
    Property("k22", "thermal conductivity along y", 0.01),
    Property("alpha1", "thermal expansion along x", 0.1),
    Property("alpha2", "thermal expansion along y", 0.1),
    Property("vf", "volume fraction", 0.05),
    Property("E_ratio", "stiffness anisotropy E1/E2", 0.1),
    Property("k_ratio", "conductivity anisotropy k11/k22", 0.1),
)
PROPERTY_KEYS = tuple(p.key for p in PROPERTIES)
_BY_KEY = {p.key: p for p in PROPERTIES}


class Constraint(NamedTuple):
  key: str
  lo: float = -math.inf
  hi: float = math.inf


class Task(NamedTuple):
  """A design task: a name, its constraint box and the requirement sentence."""
  name: str
  constraints: tuple[Constraint, ...]
  requirement: str


def check_box(constraints: Sequence[Constraint], where: str = "task") -> None:
  """One-line ValueError for an unknown property, a NaN bound or an empty box."""
  if not constraints:
    raise ValueError(f"{where}: the constraint box is empty (no constraint); expected at "
                     f"least one of {PROPERTY_KEYS}")
  for c in constraints:
    if c.key not in _BY_KEY:
      raise ValueError(f"{where}: unknown property {c.key!r}; expected one of {PROPERTY_KEYS}")
    if math.isnan(c.lo) or math.isnan(c.hi) or not c.lo <= c.hi or c.lo == c.hi == math.inf:
      raise ValueError(f"{where}: the box for {c.key} is empty: [{c.lo}, {c.hi}]; expected "
                       f"lo <= hi")
    if math.isinf(c.lo) and math.isinf(c.hi):
      raise ValueError(f"{where}: {c.key} has no finite bound; expected lo or hi finite")


def _number(x: float) -> str:
  return f"{x:g}"


def describe(constraints: Sequence[Constraint]) -> str:
  """The requirement sentence for a box (the phrasing `parse_box` reads back)."""
  parts = []
  for c in constraints:
    phrase = _BY_KEY[c.key].phrase
    if math.isinf(c.hi):
      parts.append(f"{phrase} at least {_number(c.lo)}")
    elif math.isinf(c.lo):
      parts.append(f"{phrase} at most {_number(c.hi)}")
    else:
      parts.append(f"{phrase} between {_number(c.lo)} and {_number(c.hi)}")
  return "Design a periodic unit cell with " + "; ".join(parts) + "."


_NUM = r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)"


def parse_box(text: str) -> tuple[Constraint, ...]:
  """Reads a box back from `describe`'s phrasing (any order, any subset of properties).

  Raises:
    ValueError: (one line) when no constraint is recognised.
  """
  found = []
  for p in sorted(PROPERTIES, key=lambda p: -len(p.phrase)):
    pattern = re.escape(p.phrase) + r"\s+(at least|at most|between)\s+" + _NUM + \
        r"(?:\s+and\s+" + _NUM + ")?"
    for m in re.finditer(pattern, text, flags=re.IGNORECASE):
      kind, a, b = m.group(1).lower(), float(m.group(2)), m.group(3)
      if kind == "at least":
        found.append((m.start(), Constraint(p.key, lo=a)))
      elif kind == "at most":
        found.append((m.start(), Constraint(p.key, hi=a)))
      elif b is not None:
        found.append((m.start(), Constraint(p.key, lo=a, hi=float(b))))
  if not found:
    raise ValueError(f"no constraint recognised in {text[:80]!r}")
  return tuple(c for _, c in sorted(found))


def make_task(name: str, constraints: Sequence[Constraint]) -> Task:
  constraints = tuple(Constraint(c.key, float(c.lo), float(c.hi)) for c in constraints)
  check_box(constraints, where=f"task {name!r}")
  return Task(name, constraints, describe(constraints))


def _c(key, lo=-math.inf, hi=math.inf):
  return Constraint(key, lo, hi)


# Bounds were set from 4,000 uniform random designs over all six families (32 x 32 mesh,
# the quick material; docs/automs.md, "Tasks"): every task is met by a few of them
# (0.1-1% of random designs), so each is feasible and none is easy.
TASKS: tuple[Task, ...] = tuple(make_task(n, c) for n, c in (
    ("auxetic_stiff", (_c("nu12", hi=-0.12), _c("E1", lo=0.02))),
    ("auxetic_light", (_c("nu12", hi=-0.03), _c("vf", hi=0.25))),
    ("auxetic_isotropic", (_c("nu12", hi=0.0), _c("E_ratio", 0.7, 1.4))),
    ("stiff_light", (_c("E1", lo=0.15), _c("vf", hi=0.35))),
    ("shear_stiff", (_c("G12", lo=0.08), _c("vf", hi=0.5))),
    ("conductive_light", (_c("k11", lo=0.15), _c("k22", lo=0.15), _c("vf", hi=0.4))),
    ("heat_spreader_x", (_c("k_ratio", lo=3.0), _c("k11", lo=0.3))),
    ("anisotropic_stiffness", (_c("E_ratio", 4.5, 5.5), _c("vf", hi=0.3))),
    ("conductive_low_expansion", (_c("k11", lo=0.6), _c("alpha1", hi=1.04))),
    ("insulating_stiff", (_c("k11", hi=0.1), _c("E1", lo=0.09))),
    ("high_expansion_soft", (_c("alpha1", lo=3.5), _c("E1", hi=0.025))),
    ("balanced_multiphysics", (_c("E1", lo=0.35), _c("k11", lo=0.45), _c("nu12", 0.22, 0.28))),
    ("compliant_conductor", (_c("E1", hi=0.04), _c("k11", lo=0.15))),
    ("zero_poisson", (_c("nu12", -0.02, 0.02), _c("E1", lo=0.06))),
    ("expansion_mismatch", (_c("alpha1", hi=1.12), _c("alpha2", lo=1.5))),
    ("auxetic_conductive", (_c("nu12", hi=-0.08), _c("k11", lo=0.05))),
    ("isotropic_target", (_c("E1", 0.1, 0.14), _c("E_ratio", 0.9, 1.1), _c("nu12", 0.25, 0.35))),
))
TASK_NAMES = tuple(t.name for t in TASKS)


def get_task(name: str) -> Task:
  if name not in TASK_NAMES:
    raise ValueError(f"unknown task {name!r}; expected one of {TASK_NAMES}")
  return TASKS[TASK_NAMES.index(name)]


def bounds(constraints: Sequence[Constraint]):
  """(property columns, lo, hi, scales s_j) of a box, as arrays."""
  idx = np.array([PROPERTY_KEYS.index(c.key) for c in constraints])
  lo = np.array([c.lo for c in constraints])
  hi = np.array([c.hi for c in constraints])
  scale = np.array([max(max((abs(b) for b in (c.lo, c.hi) if math.isfinite(b)), default=0),
                        _BY_KEY[c.key].floor) for c in constraints])
  return idx, lo, hi, scale


def violations(constraints: Sequence[Constraint], y: np.ndarray) -> np.ndarray:
  """Normalised violations v_j, shape (..., m), for property rows y (..., len(PROPERTIES)).

  Non-finite properties count as infinitely violated.
  """
  idx, lo, hi, scale = bounds(constraints)
  v = np.asarray(y, np.float64)[..., idx]
  out = np.maximum(np.maximum(lo - v, v - hi), 0.0) / scale
  return np.where(np.isfinite(v), out, np.inf)


def success(constraints: Sequence[Constraint], y: np.ndarray, tol: float = 0.02
            ) -> np.ndarray:
  """True where every constraint holds within `tol` (normalised)."""
  return np.all(violations(constraints, y) <= tol, axis=-1)


def fitness(constraints: Sequence[Constraint], y: np.ndarray) -> np.ndarray:
  """Per-constraint fitness 1 / (1 + v_j), shape (..., m); 1 where met."""
  return 1.0 / (1.0 + violations(constraints, y))


def targets(constraints: Sequence[Constraint], y: np.ndarray) -> np.ndarray:
  """The nearest point of each constraint's interval: the value SAES steers towards."""
  idx, lo, hi, _ = bounds(constraints)
  return np.clip(np.asarray(y, np.float64)[..., idx], lo, hi)
