"""The simulated decision maker (DM): its language comes from its hidden true utility.

As in the paper, the DM is simulated. Its utility is the problem's piecewise-linear
U(y) (`problems.utility`); it never states the formula or the slopes, only (as the public
code's DM prompt asks) its thresholds t_i and the relative importance of the outcomes.

**The phrasing model.** Every text is a sequence of sentences, each one statement of a
kind below, written from one of several templates; the template, the synonyms ("prefer"
/ "favour", "much" / "far" / "a lot", an outcome's name, alias or symbol y_i, "arm" /
"design" / "candidate") and the number format (0.5, 0.50, 50% on a [0, 1] outcome,
"about 0.42", 0.418) are drawn from a generator seeded by a hash of (seed, purpose,
step), so a DM writes the same text for the same call, and another seed another text.

`goals()` (prior knowledge, given once):
  * one threshold statement per outcome ("I want mass reduction to be at least 0.5"), or
    one list ("My targets: ..."), in a random order of the outcomes;
  * one importance statement: the outcomes in decreasing beta1 order, with a connector
    between neighbours that follows the ratio r = beta1_i / beta1_j: r < 1.05 "and
    equally", r < 1.5 "closely followed by", r < 2.5 "then", otherwise "and, far
    behind,"; or an ascending list without gap words ("From least to most important");
  * one statement about gains above a target, from mean_i beta2_i / beta1_i: <= 0.15
    "barely matter", <= 0.4 "count much less", else "somewhat less".

`feedback(arms, shown, rng_step)` (free-form feedback about the shown arms): a number of
sentences drawn uniformly from `sentences` (default 2..4), each of one kind drawn with
probabilities `kinds` (default pairwise 0.45, best-of 0.15, verdict 0.2, threshold 0.2):
  * pairwise: two shown arms and the one with the higher utility; the strength word
    follows the gap dU: < 0.03 "slightly", < 0.15 plain or "clearly", else "much" / "far"
    / "by a wide margin"; exact ties: "I am indifferent between ...";
  * best-of: three or four shown arms and the best of them ("Of arm 3, arm 5 and arm 7, I
    like arm 7 best");
  * verdict: one arm and a level from its utility: < 0.3 poor, < 0.5 mediocre, < 0.7
    good, else excellent (three synonyms each);
  * threshold: one arm and the outcome whose shortfall costs the most,
    beta1_i (t_i - y_i), with its value and threshold; "hurts a lot" when that cost over
    `scale` is >= 0.5, else "a little"; an arm with no shortfall "meets all my targets".
Every statement is true of the noiseless utility.

The pairwise oracle (`compare`, for preferential BO) and the 1-10 rating (`rate`, for
scalar-feedback BO) read the same utility.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from methods.lilo import problems as problems_lib

# ----------------------------------------------------------------------------------------
# The DM's vocabulary (the offline translator's parser knows this language, but none of
# the DM's parameters).
ARM_WORDS = ("arm", "design", "candidate")
LEVEL_CUTS = (0.3, 0.5, 0.7)
LEVEL_WORDS = (("poor", "bad", "disappointing"), ("mediocre", "so-so", "not great"),
               ("good", "decent", "fine"), ("excellent", "great", "very good"))
GAP_CUTS = (0.03, 0.15)             # utility gaps: slight < 0.03 <= moderate < 0.15 <= strong
IMPORTANCE_CUTS = (1.05, 1.5, 2.5)  # beta1 ratios: tie, close, moderate, far
CONNECTORS = {"tie": (", and equally, ", ", tied with "),
              "close": (", closely followed by ", ", then, nearly as important, "),
              "moderate": (", then ", ", followed by "),
              "far": (", and, far behind, ", ", then, much less important, ")}
ABOVE_CUTS = (0.15, 0.4)            # mean beta2 / beta1: barely, much less, somewhat less
ABOVE_SENTENCES = (
    ("Once an outcome reaches its target, further gains barely matter to me.",
     "Past a target, extra improvement barely matters to me."),
    ("Beyond the targets, extra improvement is welcome but counts much less.",
     "Once a target is met, going further still helps, but much less."),
    ("Going past a target still helps, though somewhat less than reaching it.",
     "Beyond a target, improvements count somewhat less for me."))
FLAVOUR = ("The further an outcome falls below its target, the more it hurts.",
           "Falling short of a target is much worse for me than exceeding it is good.")

_GOAL = ("I want {o} to be at least {t}; below that it hurts a lot.",
         "My target for {o} is {t} or more.",
         "{o} should reach {t} at a minimum.",
         "I need {o} of {t} or better.",
         "Anything under {t} in {o} is a real problem for me.")
_IMPORTANCE = ("{0} matters most to me{rest}.",
               "My priorities, from most to least important: {0}{rest}.",
               "What I care about most is {0}{rest}.")
_PAIR = {  # {w}: winner, {l}: loser, {a}/{b}: both in random order; {adv}/{cmp}/{tail}
    "prefer": "I {adv}{prefer} {w} {to} {l}.",
    "better": "{w} is {cmp}better than {l}.",
    "worse": "{l} is {cmp}worse than {w}.",
    "between": "Between {a} and {b}, I would {adv}pick {w}.",
    "rather": "I would rather have {w} than {l}{tail}.",
    "take": "Given the choice, I would take {w} over {l}{tail}."}
_ADV = (("slightly ", "narrowly "), ("", "clearly "), ("strongly ", "definitely "))
_CMP = (("slightly ", "a little "), ("", "clearly "), ("much ", "far ", "a lot "))
_TAIL = ((", though it is close",), ("",), (", by a wide margin", ", no contest"))
_PREFER = (("prefer", "to"), ("favour", "over"), ("prefer", "over"))
_TIE = ("I am indifferent between {a} and {b}.", "{a} and {b} seem equally good to me.")
_BEST = ("Of {list}, I like {w} best.", "Among {list}, {w} is my favourite.",
         "{w} is the best of {list}.", "My top pick among {list} is {w}.")
_VERDICT = ("{a} looks {lvl} to me.", "I find {a} {lvl}.", "My verdict on {a}: {lvl}.",
            "{a} is {lvl} overall.")
_SHORT = ("For {a}, {o} is only {v}, below my target of {t}; that hurts {s}.",
          "{a} falls short on {o} ({v} against the {t} I need), which hurts {s}.",
          "The {o} of {a} ({v}) is under my threshold of {t}, and that costs me {s}.")
_HURT = (("a little", "somewhat"), ("a lot", "badly"))
_MET = ("{a} meets all of my targets.", "Every outcome of {a} clears my thresholds.")


def rng_for(seed: int, *parts) -> np.random.Generator:
  """A generator seeded by a hash of (seed, parts): the same call, the same draws."""
  digest = hashlib.sha256("\x00".join(map(str, (seed, *parts))).encode()).digest()
  return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _pick(rng: np.random.Generator, options: Sequence):
  return options[int(rng.integers(len(options)))]


def _cap(s: str) -> str:
  return s if s.startswith("y_") else s[:1].upper() + s[1:]


def level(u: float) -> int:
  """The verdict level 0..3 (poor, mediocre, good, excellent) of a utility."""
  return int(np.searchsorted(LEVEL_CUTS, u, side="right"))


def gap_strength(du: float) -> int:
  """0 slight, 1 moderate, 2 strong, for a utility gap |dU|."""
  return int(np.searchsorted(GAP_CUTS, abs(du), side="right"))


def importance_gap(ratio: float) -> str:
  """The connector category between two outcomes whose beta1 ratio is `ratio` >= 1."""
  return ("tie", "close", "moderate", "far")[int(np.searchsorted(IMPORTANCE_CUTS, ratio,
                                                                  side="right"))]


class SimulatedDM:
  """A decision maker whose language and answers come from its true utility.

  Args:
    problem: a `problems.Problem` or its name.
    seed: the phrasing seed (and the tie coin of `compare`).
    sentences: (min, max) sentences per feedback message.
    kinds: probabilities of the statement kinds (pairwise, best_of, verdict, threshold).

  Example:
    >>> dm = SimulatedDM("vehicle_safety", seed=0)
    >>> "0.8" in dm.goals() or "80%" in dm.goals()
    True
  """

  KINDS = ("pairwise", "best_of", "verdict", "threshold")

  def __init__(self, problem, seed: int = 0, *, sentences: tuple[int, int] = (2, 4),
               kinds: tuple[float, ...] = (0.45, 0.15, 0.2, 0.2)):
    self.problem = problems_lib.get_problem(problem)
    self.seed = int(seed)
    lo, hi = sentences
    if not 1 <= lo <= hi:
      raise ValueError(f"sentences must be (min, max) with 1 <= min <= max, got {sentences}")
    kinds = np.asarray(kinds, float)
    if kinds.shape != (4,) or np.any(kinds < 0) or not np.isclose(kinds.sum(), 1.0):
      raise ValueError(f"kinds must be 4 probabilities summing to 1, got {tuple(kinds)}")
    self.sentences, self.kinds = (lo, hi), kinds
    p = self.problem
    self._beta1, self._beta2, self._t = (np.asarray(v, float) for v in (p.beta1, p.beta2, p.t))
    self._unit = all(l == 0.0 and u == 1.0 for l, u in zip(p.y_lower, p.y_upper))

  # --- utility ------------------------------------------------------------------------
  def utility(self, Y) -> np.ndarray:
    """The true utility U of outcomes Y (n, k), in float64 (`problems.utility_np`)."""
    return problems_lib.utility_np(self.problem, Y)

  def compare(self, ya, yb) -> int:
    """The noiseless pairwise oracle: 0 if U(ya) > U(yb), 1 if U(ya) < U(yb), and a
    seeded coin (a hash of the seed and both vectors) on a tie."""
    ya, yb = np.asarray(ya, float).ravel(), np.asarray(yb, float).ravel()
    ua, ub = self.utility(np.stack([ya, yb]))
    if ua != ub:
      return 0 if ua > ub else 1
    return int(rng_for(self.seed, "tie", ya.tobytes().hex(), yb.tobytes().hex()).integers(2))

  def rate(self, y) -> int:
    """A 1-10 rating: round(1 + 9 U(y)), the scalar-feedback baseline's DM answer."""
    u = float(self.utility(np.asarray(y, float).reshape(1, -1))[0])
    return int(np.clip(np.rint(1.0 + 9.0 * u), 1, 10))

  # --- phrasing helpers ---------------------------------------------------------------
  def _outcome(self, i: int, rng) -> str:
    p = self.problem
    return _pick(rng, (p.outcome_names[i], p.outcome_names[i], *p.outcome_aliases[i],
                       f"y_{i + 1}", f"{p.outcome_names[i]} (y_{i + 1})"))

  def _number(self, v: float, rng, exact: bool) -> str:
    forms = [f"{v:g}", f"{v:.2f}"] if exact else [f"{v:.2f}", f"{v:.3f}", f"about {v:.2f}"]
    if self._unit:
      forms.append(f"{100 * v:.0f}%")
    return _pick(rng, forms)

  @staticmethod
  def _arm_style(rng):
    """How one message names arms: one word ("arm", "design", "candidate"), with or
    without "#"."""
    word, hash_ = _pick(rng, ARM_WORDS), rng.random() < 0.2
    return lambda i: f"{word} #{i}" if hash_ else f"{word} {i}"

  # --- goals --------------------------------------------------------------------------
  def goals(self) -> str:
    """The DM's goal statements: thresholds, importance order, gains above targets.

    Returns:
      A few sentences (deterministic for a seed; see the module docstring).

    Example:
      >>> SimulatedDM("dtlz2", seed=1).goals() == SimulatedDM("dtlz2", seed=1).goals()
      True
    """
    rng = rng_for(self.seed, "goals")
    k = self.problem.num_outcomes
    order = rng.permutation(k)
    if rng.random() < 0.3:
      parts = [f"{self._outcome(i, rng)} at least {self._number(self._t[i], rng, True)}"
               for i in order]
      out = ["My targets: " + ", ".join(parts[:-1]) + f", and {parts[-1]}."]
    else:
      out = [_cap(_pick(rng, _GOAL).format(o=self._outcome(i, rng),
                                           t=self._number(self._t[i], rng, True)))
             for i in order]
    out.append(self._importance(rng))
    ratio = float(np.mean(self._beta2 / self._beta1))
    out.append(_pick(rng, ABOVE_SENTENCES[int(np.searchsorted(ABOVE_CUTS, ratio))]))
    if rng.random() < 0.5:
      out.append(_pick(rng, FLAVOUR))
    return " ".join(out)

  def _importance(self, rng) -> str:
    desc = list(np.argsort(-self._beta1, kind="stable"))
    names = [self._outcome(i, rng) for i in desc]
    if rng.random() < 0.2:           # ascending, without gap words
      asc = names[::-1]
      return "From least to most important: " + ", ".join(asc[:-1]) + f" and {asc[-1]}."
    rest = "".join(
        _pick(rng, CONNECTORS[importance_gap(self._beta1[a] / self._beta1[b])]) + names[j + 1]
        for j, (a, b) in enumerate(zip(desc[:-1], desc[1:])))
    return _cap(_pick(rng, _IMPORTANCE).format(names[0], rest=rest))

  # --- feedback -----------------------------------------------------------------------
  def feedback(self, arms: Mapping[int, np.ndarray], shown: Sequence[int],
               rng_step: int = 0) -> str:
    """Free-form feedback about the `shown` arms, derived from the true utility.

    Args:
      arms: arm index -> outcomes y (k,), all finite.
      shown: the arm indices the DM comments on (all in `arms`).
      rng_step: a counter mixed into the phrasing seed (one message per value).

    Returns:
      2-4 sentences (by default) of the kinds in the module docstring.

    Example:
      >>> dm = SimulatedDM("vehicle_safety", seed=0)
      >>> arms = {0: np.array([0.6, 0.9, 0.9]), 1: np.array([0.2, 0.3, 0.4])}
      >>> isinstance(dm.feedback(arms, [0, 1]), str)
      True
    """
    shown = list(dict.fromkeys(int(a) for a in shown))
    if not shown:
      raise ValueError("shown must name at least one arm")
    missing = [a for a in shown if a not in arms]
    if missing:
      raise ValueError(f"shown arm {missing[0]} is not among the {len(arms)} arms given")
    Y = np.stack([np.asarray(arms[a], float).ravel() for a in shown])
    if Y.shape[1] != self.problem.num_outcomes:
      raise ValueError(f"arm outcomes must have {self.problem.num_outcomes} values, got "
                       f"{Y.shape[1]}")
    if not np.all(np.isfinite(Y)):
      raise ValueError(f"arm {shown[int(np.argwhere(~np.isfinite(Y))[0, 0])]} has a "
                       "non-finite outcome")
    u = dict(zip(shown, self.utility(Y)))
    y = dict(zip(shown, Y))
    rng = rng_for(self.seed, "feedback", rng_step)
    n = int(rng.integers(self.sentences[0], self.sentences[1] + 1))
    ref = self._arm_style(rng)
    out: list[str] = []
    for _ in range(4 * n):
      if len(out) == n:
        break
      kind = self.KINDS[int(rng.choice(4, p=self.kinds))]
      s = getattr(self, "_" + kind)(shown, u, y, rng, ref)
      if s is not None and s not in out:
        out.append(s)
    return " ".join(out)

  def _pairwise(self, shown, u, y, rng, ref) -> str | None:
    if len(shown) < 2:
      return None
    a, b = (shown[i] for i in rng.choice(len(shown), size=2, replace=False))
    ra, rb = ref(a), ref(b)
    if u[a] == u[b]:
      return _cap(_pick(rng, _TIE).format(a=ra, b=rb))
    (w, rw), (l, rl) = ((a, ra), (b, rb)) if u[a] > u[b] else ((b, rb), (a, ra))
    g = gap_strength(u[w] - u[l])
    prefer, to = _pick(rng, _PREFER)
    text = _PAIR[_pick(rng, sorted(_PAIR))].format(
        w=rw, l=rl, a=ra, b=rb, adv=_pick(rng, _ADV[g]), cmp=_pick(rng, _CMP[g]),
        tail=_pick(rng, _TAIL[g]), prefer=prefer, to=to)
    return _cap(text)

  def _best_of(self, shown, u, y, rng, ref) -> str | None:
    if len(shown) < 3:
      return None
    size = int(rng.integers(3, min(4, len(shown)) + 1))
    group = sorted(shown[i] for i in rng.choice(len(shown), size=size, replace=False))
    best = max(group, key=lambda a: u[a])
    if sum(u[a] == u[best] for a in group) > 1:
      return None
    if rng.random() < 0.5:
      word = ref(0).split(" ")[0] + "s"
      names = ", ".join(str(a) for a in group[:-1]) + f" and {group[-1]}"
      listed = f"{word} {names}"
    else:
      refs = [ref(a) for a in group]
      listed = ", ".join(refs[:-1]) + f" and {refs[-1]}"
    return _cap(_pick(rng, _BEST).format(list=listed, w=ref(best)))

  def _verdict(self, shown, u, y, rng, ref) -> str:
    a = shown[int(rng.integers(len(shown)))]
    words = LEVEL_WORDS[level(u[a])]
    return _cap(_pick(rng, _VERDICT).format(a=ref(a), lvl=_pick(rng, words)))

  def _threshold(self, shown, u, y, rng, ref) -> str:
    a = shown[int(rng.integers(len(shown)))]
    cost = self._beta1 * np.maximum(self._t - y[a], 0.0)
    r = ref(a)
    if not np.any(cost > 0):
      return _cap(_pick(rng, _MET).format(a=r))
    i = int(np.argmax(cost))
    strong = cost[i] / self.problem.scale >= 0.5
    return _cap(_pick(rng, _SHORT).format(
        a=r, o=self._outcome(i, rng), v=self._number(y[a][i], rng, False),
        t=self._number(self._t[i], rng, True), s=_pick(rng, _HURT[int(strong)])))
