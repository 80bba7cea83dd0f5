"""Offline stand-ins for LILO's two LLM roles, as `common.llm.TextModel`s.

Both read the same prompts an LLM gets (`prompts.py`), use only what is written there
(never the true utility), and reply in the same JSON formats, so the loop runs unchanged
against them or against a real text model. Report rows made with them say "simulated
translator".

**The statement parser** (`read_statements`). It knows the DM's language (the sentence
kinds and vocabulary of `dm.py`) but none of the DM's parameters. Outcomes are recognised
by the names, other names and symbols listed in the prompt; arms by "arm/design/candidate
N" (and "arms 2, 3 and 4"); numbers with "%" are divided by 100. Per sentence:
  * no arm, >= 2 outcomes and an importance word -> the importance order, most important
    first ("least to most" reverses it); the weight of each next outcome is the previous
    one times 1.0 ("equally", "tied"), 0.75 ("closely", "nearly as"), 0.3 ("far behind",
    "much less", "distant") or 0.55 (anything else);
  * no arm, outcomes and numbers -> thresholds: in each clause (split at , ; :) with
    one outcome and a number, that number is the outcome's threshold;
  * no arm, no outcome, about targets -> the weight of gains above a target: "barely"
    0.1, "much less" 0.3, "somewhat" 0.5;
  * two arms -> a pairwise statement (the winner is the first arm named, the second after
    "worse", the last after "between"; "indifferent"/"equally" say nothing);
  * three or more arms, one named twice, "best"/"favourite"/"top pick" -> that arm beats
    every other arm named;
  * one arm and an outcome -> a shortfall (its last number is that outcome's threshold,
    used only when no goal statement gives one);
  * one arm otherwise -> a verdict level (poor 0 < mediocre 1 < good 2 < excellent 3).

**The preference model.** With outcome ranges [lo_i, hi_i] from the prompt, u_i =
(y_i - lo_i) / (hi_i - lo_i), tau_i the same for the threshold, w_i the importance
weights (all 1 without an importance statement) and c the above-target weight (0.3 if
unstated),

    s(y) = sum_i w_i [min(u_i, tau_i) + c max(u_i - tau_i, 0)]

(an outcome without a threshold counts linearly, w_i u_i).

**The translator** labels the pair (option_0 = arm a, option_1 = arm b) by the first of:
the net count of explicit pairwise statements about a and b; the best-of statements that
name both; different verdict levels; the higher score s (a seeded coin on an exact
tie). Then it flips the label with probability `error_rate` (the stated mistranslation
rate). Its draws come from a hash of (seed, prompt) at temperature 0, plus a call counter
at temperature > 0.

**The proposer** (the LLM-only baseline's stand-in) ranks the evaluated points by s,
then proposes point j as the clip to [0, 1]^d of parent_{j mod m} + `sigma` * N(0, I),
with parents the m = min(`parents`, N) best points (sigma = 0.1, m = 3 by default);
with no evaluated point, uniform points.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from common import llm
from methods.lilo import dm as dm_lib
from methods.lilo import prompts

IMPORTANCE_FACTORS = {"tie": 1.0, "close": 0.75, "moderate": 0.55, "far": 0.3}
DEFAULT_ABOVE = 0.3
_IMPORTANCE_WORDS = ("important", "matters most", "priorit", "care about most")
_BEST_WORDS = ("best", "favourite", "favorite", "top pick")
_NUM = r"(?<![\w.#])\d+(?:\.\d+)?%?"
_ARM = r"\b(?:{w})\s+#?\d+\b"
_ARMS = r"\b(?:{w})s\s+#?\d+(?:(?:\s*,\s*and\s+|\s*,\s*|\s+and\s+)#?\d+)*"


class Statements(NamedTuple):
  """What the DM's messages say, as the parser reads them (module docstring)."""
  thresholds: dict[int, float]
  weights: np.ndarray          # (k,) importance weights, most important = 1
  above: float                 # weight of gains above a target
  pairwise: list[tuple[int, int]]            # (winner, loser)
  best_of: list[tuple[int, frozenset]]       # (winner, everyone named)
  verdicts: dict[int, int]                   # arm -> level 0..3 (latest)


class _Token(NamedTuple):
  kind: str      # "arm", "out" or "num"
  value: float
  start: int
  end: int


@functools.lru_cache(maxsize=64)
def _pattern(outcomes: tuple[prompts.Outcome, ...]) -> tuple[re.Pattern, dict[str, int]]:
  names: dict[str, int] = {}
  for i, o in enumerate(outcomes):
    for n in (o.symbol, o.name, *o.aliases):
      names[n.lower()] = i
  alternation = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
  words = "|".join(dm_lib.ARM_WORDS)
  pattern = re.compile(
      f"(?P<arms>{_ARMS.format(w=words)})|(?P<arm>{_ARM.format(w=words)})"
      f"|(?P<out>(?<![\\w-])(?:{alternation})(?![\\w-]))|(?P<num>{_NUM})", re.IGNORECASE)
  return pattern, names


def _tokens(sentence: str, outcomes: tuple[prompts.Outcome, ...]) -> list[_Token]:
  pattern, names = _pattern(outcomes)
  out: list[_Token] = []
  for m in pattern.finditer(sentence):
    if m.group("arms"):
      for d in re.findall(r"\d+", m.group("arms")):
        out.append(_Token("arm", int(d), m.start(), m.end()))
    elif m.group("arm"):
      out.append(_Token("arm", int(re.search(r"\d+", m.group("arm")).group()), m.start(),
                        m.end()))
    elif m.group("out"):
      i = names[m.group("out").lower()]
      prev = out[-1] if out else None
      if (prev is not None and prev.kind == "out" and prev.value == i
          and re.fullmatch(r"\s*\(\s*", sentence[prev.end:m.start()])):
        continue   # "mass reduction (y_1)" names one outcome
      out.append(_Token("out", i, m.start(), m.end()))
    else:
      text = m.group("num")
      v = float(text.rstrip("%"))
      out.append(_Token("num", v / 100.0 if text.endswith("%") else v, m.start(), m.end()))
  return out


def _sentences(message: str) -> list[str]:
  return [s for s in re.split(r"(?<=[.!?])\s+", message.strip()) if s]


def _importance(sentence: str, toks: list[_Token], k: int) -> np.ndarray | None:
  outs = [t for t in toks if t.kind == "out"]
  order = list(dict.fromkeys(int(t.value) for t in outs))
  if len(order) < 2:
    return None
  low = sentence.lower()
  if "least to most" in low:
    order, factors = order[::-1], [IMPORTANCE_FACTORS["moderate"]] * (len(order) - 1)
  else:
    factors = []
    for a, b in zip(outs[:-1], outs[1:]):
      gap = low[a.end:b.start]
      if "equally" in gap or "tied" in gap:
        factors.append(IMPORTANCE_FACTORS["tie"])
      elif "closely" in gap or "nearly as" in gap:
        factors.append(IMPORTANCE_FACTORS["close"])
      elif "far behind" in gap or "much less" in gap or "distant" in gap:
        factors.append(IMPORTANCE_FACTORS["far"])
      else:
        factors.append(IMPORTANCE_FACTORS["moderate"])
  weights = np.full(k, np.nan)
  w = 1.0
  for j, i in enumerate(order):
    if j:
      w *= factors[j - 1]
    weights[i] = w
  weights[np.isnan(weights)] = np.nanmean(weights)
  return weights


def _goal_thresholds(sentence: str, outcomes) -> dict[int, float]:
  found = {}
  for clause in re.split(r"[,;:]", sentence):
    toks = _tokens(clause, outcomes)
    outs = {int(t.value) for t in toks if t.kind == "out"}
    nums = [t.value for t in toks if t.kind == "num"]
    if len(outs) == 1 and nums:
      found[outs.pop()] = float(nums[0])
  return found


def _level(sentence: str) -> int | None:
  low = sentence.lower()
  words = sorted(((w, lvl) for lvl, ws in enumerate(dm_lib.LEVEL_WORDS) for w in ws),
                 key=lambda p: -len(p[0]))
  for w, lvl in words:
    if re.search(rf"\b{re.escape(w)}\b", low):
      return lvl
  return None


def _pair_winner(sentence: str, arms: list[int]) -> tuple[int, int] | None:
  low = sentence.lower()
  distinct = list(dict.fromkeys(arms))
  if "indifferent" in low or "equally" in low:
    return None
  if "between" in low:
    w = arms[-1]
  elif "worse" in low:
    w = distinct[1]
  else:
    w = distinct[0]
  return w, distinct[1] if w == distinct[0] else distinct[0]


@functools.lru_cache(maxsize=256)
def _read_cached(feedback: tuple[str, ...], outcomes: tuple[prompts.Outcome, ...]) -> Statements:
  k = len(outcomes)
  goals: dict[int, float] = {}
  shortfalls: dict[int, float] = {}
  weights, above = None, None
  pairwise, best_of, verdicts = [], [], {}
  for message in feedback:
    for s in _sentences(message):
      toks = _tokens(s, outcomes)
      arms = [int(t.value) for t in toks if t.kind == "arm"]
      outs = [t for t in toks if t.kind == "out"]
      low = s.lower()
      distinct = set(arms)
      if len(distinct) >= 3 and len(arms) > len(distinct) and any(w in low for w in _BEST_WORDS):
        winner = max(distinct, key=arms.count)
        best_of.append((winner, frozenset(distinct)))
      elif len(distinct) == 2 and not outs:
        pair = _pair_winner(s, arms)
        if pair is not None:
          pairwise.append(pair)
      elif len(distinct) == 1:
        nums = [t.value for t in toks if t.kind == "num"]
        if outs and nums:
          shortfalls[int(outs[0].value)] = float(nums[-1])
        elif not outs and not any(w in low for w in ("target", "threshold")):
          lvl = _level(s)
          if lvl is not None:
            verdicts[arms[0]] = lvl
      elif not distinct:
        if len({t.value for t in outs}) >= 2 and any(w in low for w in _IMPORTANCE_WORDS):
          weights = _importance(s, toks, k)
        elif outs:
          goals.update(_goal_thresholds(s, outcomes))
        elif "target" in low or "threshold" in low:
          for word, value in (("barely", 0.1), ("much less", 0.3), ("somewhat", 0.5)):
            if word in low:
              above = value
              break
  thresholds = {**shortfalls, **goals}
  return Statements(thresholds, np.ones(k) if weights is None else weights,
                    DEFAULT_ABOVE if above is None else above, pairwise, best_of, verdicts)


def read_statements(feedback: Sequence[str], outcomes: Sequence[prompts.Outcome]) -> Statements:
  """The DM's statements in `feedback`, as the offline roles read them (module docstring).

  Args:
    feedback: the DM's messages (goal statements included).
    outcomes: the outcomes as a prompt lists them (`prompts.outcomes_of`).

  Returns:
    A `Statements`.

  Example:
    >>> outs = prompts.outcomes_of("vehicle_safety")
    >>> read_statements(["I prefer arm 2 to arm 5."], outs).pairwise
    [(2, 5)]
  """
  return _read_cached(tuple(feedback), tuple(outcomes))


def score(Y, statements: Statements, outcomes: Sequence[prompts.Outcome]) -> np.ndarray:
  """The preference model's score s(y) of outcomes Y (n, k) (module docstring).

  Example:
    >>> outs = prompts.outcomes_of("vehicle_safety")
    >>> st = read_statements(["I want y_1 to be at least 0.5."], outs)
    >>> score(np.array([[0.6, 0, 0], [0.4, 0, 0]]), st, outs).round(2).tolist()
    [0.53, 0.4]
  """
  Y = np.atleast_2d(np.asarray(Y, float))
  lo = np.array([o.lower for o in outcomes])
  hi = np.array([o.upper for o in outcomes])
  span = np.where(hi > lo, hi - lo, 1.0)
  u = (Y - lo) / span
  tau = np.array([statements.thresholds.get(i, np.inf) for i in range(len(outcomes))])
  tau = (tau - lo) / span
  below = np.minimum(u, tau)
  gain = np.where(np.isfinite(tau), np.maximum(u - tau, 0.0), 0.0)
  return np.sum(statements.weights * (below + statements.above * gain), axis=1)


def label_pair(request: prompts.TranslatorRequest, statements: Statements,
               rng: np.random.Generator) -> tuple[int, str]:
  """(answer, reasoning) for a translator request, before any mistranslation."""
  (a, ya), (b, yb) = request.pair
  lo, hi = (a, b) if a < b else (b, a)
  net = sum(1 if w == a else -1 for w, l in statements.pairwise if {w, l} == {a, b})
  if net:
    w, l = (a, b) if net > 0 else (b, a)
    return (0 if w == a else 1), f"The DM said it prefers arm {w} to arm {l}."
  net = sum((1 if w == a else -1) for w, group in statements.best_of
            if w in (a, b) and lo in group and hi in group)
  if net:
    w = a if net > 0 else b
    return (0 if w == a else 1), f"The DM named arm {w} the best of a group with both."
  la, lb = statements.verdicts.get(a), statements.verdicts.get(b)
  if la is not None and lb is not None and la != lb:
    w = a if la > lb else b
    return (0 if w == a else 1), f"The DM rated arm {w} higher."
  sa, sb = score(np.stack([ya, yb]), statements, request.outcomes)
  answer = int(rng.integers(2)) if sa == sb else int(sb > sa)
  return answer, (f"From the DM's targets and priorities, option_0 scores {sa:.3f} and "
                  f"option_1 {sb:.3f}.")


class _Offline:
  """Request checks and the (seed, prompt[, call]) draws the offline roles share."""

  def __init__(self, seed: int):
    self.seed = int(seed)
    self._calls = 0

  def complete(self, prompts_: Sequence[str], *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] = ()) -> list[str]:
    """One reply per prompt (the `TextModel` protocol; a token is one character)."""
    prompts_ = llm.check_request(prompts_, max_tokens, temperature, stop)
    call = "0" if temperature == 0 else str(self._calls)
    self._calls += 1
    return [llm.apply_stop(self._reply(p, dm_lib.rng_for(self.seed, call, p))[:max_tokens],
                           stop) for p in prompts_]

  def _reply(self, prompt: str, rng: np.random.Generator) -> str:
    raise NotImplementedError


class OfflineTranslator(_Offline):
  """The offline translator (module docstring): a parser for the DM's phrasing, an
  explicit preference model, and a stated mistranslation rate.

  Args:
    error_rate: the probability in [0, 1] of flipping a label.
    seed: the seed of its draws.

  Example:
    >>> text = prompts.translator_prompt("vehicle_safety", ["I prefer arm 1 to arm 0."],
    ...                                  {0: [0.9] * 3, 1: [0.1] * 3}, (0, 1))
    >>> prompts.parse_translator_reply(OfflineTranslator().complete([text], max_tokens=400)[0])
    1
  """

  def __init__(self, error_rate: float = 0.0, seed: int = 0):
    if not 0.0 <= float(error_rate) <= 1.0:
      raise ValueError(f"error_rate must be in [0, 1], got {error_rate!r}")
    super().__init__(seed)
    self.error_rate = float(error_rate)

  def _reply(self, prompt: str, rng: np.random.Generator) -> str:
    try:
      request = prompts.read_translator_prompt(prompt)
    except ValueError:
      return "I cannot read this request."
    statements = read_statements(request.feedback, request.outcomes)
    answer, reasoning = label_pair(request, statements, rng)
    if rng.random() < self.error_rate:
      answer = 1 - answer
    body = json.dumps({"reasoning": reasoning, "answer": answer})
    return f"```json\n{body}\n```"


class OfflineProposer(_Offline):
  """The LLM-only optimiser's offline stand-in (module docstring).

  Args:
    seed: the seed of its draws.
    sigma: the standard deviation of the Gaussian perturbation in [0, 1]^d.
    parents: how many of the best evaluated points are perturbed.

  Example:
    >>> text = prompts.optimizer_prompt("vehicle_safety", [], np.full((2, 5), 0.5),
    ...                                 np.array([[0.1] * 3, [0.9] * 3]), 3)
    >>> prompts.parse_optimizer_reply(OfflineProposer().complete([text], max_tokens=999)[0],
    ...                               3, 5).shape
    (3, 5)
  """

  def __init__(self, seed: int = 0, *, sigma: float = 0.1, parents: int = 3):
    if not sigma > 0 or parents < 1:
      raise ValueError(f"sigma must be > 0 and parents >= 1, got {sigma!r}, {parents!r}")
    super().__init__(seed)
    self.sigma, self.parents = float(sigma), int(parents)

  def _reply(self, prompt: str, rng: np.random.Generator) -> str:
    try:
      request = prompts.read_optimizer_prompt(prompt)
    except ValueError:
      return "I cannot read this request."
    d = request.X.shape[1]
    if len(request.X):
      statements = read_statements(request.feedback, request.outcomes)
      ranked = np.argsort(-score(request.Y, statements, request.outcomes), kind="stable")
      parents = request.X[ranked[:min(self.parents, len(ranked))]]
      X = np.stack([parents[j % len(parents)] for j in range(request.n)])
      X = np.clip(X + self.sigma * rng.standard_normal(X.shape), 0.0, 1.0)
    else:
      X = rng.random((request.n, d))
    body = json.dumps({str(j): [round(float(v), 4) for v in x] for j, x in enumerate(X)})
    return f"```json\n{body}\n```"
