"""The registry of experiments and the writer of ``REPORT.md``.

Every method's experiment module registers itself with ``@register(...)``; the
reproduce entrypoint runs whatever is registered and hands the results to
``write_report``, so adding a method adds its rows without touching this file.

An experiment is ``run(config, workdir) -> Result``: the claims it checks (each a
row of the report: method | paper's claim | paper's figure | our figure |
reproduced), the named figures it measured, and the plots it wrote.

``register`` is also the one runner: the function it returns validates the config,
creates the workdir, enables float64 when ``config.x64`` is set, times the run, logs
the figures and saves ``workdir/result.json`` atomically, so an experiment's body
only builds data, calls methods, trains, evaluates and returns its claims. The
entrypoints, the tests and a notebook all call that same function::

    @report.register("demo", title="...", validate=config_module.validate)
    def run(config, workdir):
      err = measure(config)
      return report.Result(claims=report.claims_table([
          report.Claim("error below 0.1", "qualitative", f"{err:.3f}", err, "<", 0.1),
      ]), figures={"err": err})

Claims are data: each ``Claim`` row holds the claim text, the paper's figure, our
figure as shown, and the comparison (measured, operator, threshold) that decides
"reproduced", so the thresholds of an experiment are reviewable in one table.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import operator
import os
import time
from typing import Any, Callable, Mapping, Sequence

from absl import logging
import jax
import numpy as np

from common import trials


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
  """One row of the report."""
  claim: str          # the paper's claim, in one sentence
  paper_figure: str   # what the paper reports for it (a number, or the qualitative statement)
  our_figure: str     # what we measured, formatted
  reproduced: bool


_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
              "==": operator.eq}


def passes(measured: Any, op: str, threshold: Any) -> bool:
  """Whether ``measured op threshold`` holds for every value of ``measured``.

  Args:
    measured: a number or bool, or a sequence / mapping of them (every one must pass).
    op: "<", "<=", ">", ">=", "==", or "in" (``threshold`` is a closed interval
      ``(low, high)``).
    threshold: a number (a bool for "=="), or ``(low, high)`` for "in".

  Returns:
    True if every value passes; a NaN, an empty collection or a missing value fails.
  """
  if op not in _OPERATORS and op != "in":
    raise ValueError(f"unknown comparison {op!r}; expected one of "
                     f"{', '.join([*_OPERATORS, 'in'])}")
  if op == "in" and (isinstance(threshold, (str, bytes)) or not hasattr(threshold, "__len__")
                     or len(threshold) != 2):
    raise ValueError(f"threshold for op 'in' must be a (low, high) pair, got {threshold!r}")
  if isinstance(measured, Mapping):
    values = list(measured.values())
  elif isinstance(measured, (list, tuple)):
    values = list(measured)
  elif hasattr(measured, "__array__") and getattr(measured, "ndim", 0) > 0:
    values = [v.item() for v in np.ravel(np.asarray(measured))]  # Every element.
  else:
    values = [measured]
  if not values:
    return False
  for value in values:
    if value is None or (not isinstance(value, bool) and not math.isfinite(float(value))):
      return False
    if op == "in":
      low, high = threshold
      if not low <= value <= high:
        return False
    elif not _OPERATORS[op](value, threshold):
      return False
  return True


@dataclasses.dataclass(frozen=True)
class Claim:
  """One report row as data: reproduced iff ``measured op threshold`` (and ``also``).

  Attributes:
    claim: the paper's claim, in one sentence (with our threshold in it).
    paper_figure: what the paper reports for it.
    our_figure: what we measured, formatted for the report.
    measured: the deciding value(s): a number, bool, or a sequence / mapping
      of them, all of which must pass.
    op: "<", "<=", ">", ">=", "==" or "in" (see ``passes``).
    threshold: the bar, fixed in the config before running.
    also: further ``(measured, op, threshold)`` conditions that must hold too.
  """
  claim: str
  paper_figure: str
  our_figure: str
  measured: Any
  op: str
  threshold: Any
  also: Sequence[tuple[Any, str, Any]] = ()

  def check(self) -> ClaimCheck:
    ok = passes(self.measured, self.op, self.threshold) and all(
        passes(*condition) for condition in self.also)
    return ClaimCheck(claim=self.claim, paper_figure=self.paper_figure,
                      our_figure=self.our_figure, reproduced=bool(ok))


def claims_table(rows: Sequence[Claim]) -> list[ClaimCheck]:
  """The report rows of an experiment's claim table."""
  return [row.check() for row in rows]


@dataclasses.dataclass(frozen=True)
class Result:
  """What an experiment returns (the runner fills in `seconds`, `preset`, `fingerprint`)."""
  claims: Sequence[ClaimCheck]
  figures: Mapping[str, float]
  plots: Sequence[str] = ()      # file names relative to the experiment's workdir
  seconds: float = float("nan")
  notes: Sequence[str] = ()      # markdown blocks shown under the plots (e.g. a learned library)
  preset: str = ""               # the config's preset ("" when it has none)
  fingerprint: str = ""          # trials.config_fingerprint of the whole config
  resumed: bool = False          # run state was in the workdir: `seconds` is this part only

  def to_json(self) -> dict:
    return {
        "claims": [dataclasses.asdict(c) for c in self.claims],
        "figures": {k: _json_number(v) for k, v in self.figures.items()},
        "plots": list(self.plots),
        "seconds": _json_number(self.seconds),
        "notes": list(self.notes),
        "preset": self.preset,
        "fingerprint": self.fingerprint,
        "resumed": self.resumed,
    }

  @classmethod
  def from_json(cls, data: Mapping[str, Any]) -> "Result":
    return cls(claims=[ClaimCheck(**c) for c in data["claims"]],
               figures={k: (float("nan") if v is None else v)
                        for k, v in data["figures"].items()},
               plots=list(data.get("plots", ())),
               seconds=float("nan") if data.get("seconds") is None else data["seconds"],
               notes=tuple(data.get("notes", ())), preset=data.get("preset", ""),
               fingerprint=data.get("fingerprint", ""),
               resumed=bool(data.get("resumed", False)))


@dataclasses.dataclass(frozen=True)
class Experiment:
  name: str                   # also the config file stem: experiments/configs/<name>.py
  title: str                  # the paper / method, as shown in the report
  run: Callable[..., Result]  # run(config, workdir) -> Result, through the runner


_REGISTRY: dict[str, Experiment] = {}


def register(name: str, *, title: str,
             validate: Callable[[Any], None] | None = None) -> Callable:
  """Decorator over an experiment's body ``(config, workdir) -> Result``.

  Returns the runner around it: ``run(config, workdir)`` validates ``config``
  with ``validate`` (a ``ConfigError`` before any work), creates ``workdir`` (a
  one-line ``ValueError`` before any work if it is a file or not writable),
  runs the body under ``jax.enable_x64(config.x64)`` (when the config has
  ``x64``), records the wall time in ``Result.seconds``, logs the figures and
  saves ``workdir/result.json`` atomically. The runner is what the registry
  holds and what the entrypoints, tests and notebooks call.
  """
  def wrap(body: Callable[..., Result]) -> Callable[..., Result]:
    @functools.wraps(body)
    def run(config, workdir: str) -> Result:
      return run_experiment(name, body, config, workdir, validate)

    existing = _REGISTRY.get(name)
    if existing is not None and existing.run.__qualname__ != run.__qualname__:
      raise ValueError(f"experiment {name!r} is registered twice")
    _REGISTRY[name] = Experiment(name=name, title=title, run=run)
    return run
  return wrap


def run_experiment(name: str, body: Callable[..., Result], config, workdir: str,
                   validate: Callable[[Any], None] | None = None) -> Result:
  """The runner: validate, makedirs, x64, timer, log, atomic ``result.json``.

  Raises:
    ConfigError: from ``validate``, before any work.
    ValueError: one line, before any work, if ``workdir`` is a file or cannot be
      created or written.
  """
  if validate is not None:
    validate(config)
  workdir = trials.ensure_directory(workdir, "workdir")
  # Run state (stages, trial logs, checkpoints, a trained LM) lives in subfolders; a
  # finished run's result.json and plots alone do not shorten a rerun.
  resumed = any(entry.is_dir() for entry in os.scandir(workdir))
  start = time.time()
  x64 = bool(_get(config, "x64", False))
  with jax.enable_x64(x64):
    result = body(config, workdir)
  if not isinstance(result, Result):
    raise TypeError(f"experiment {name!r} returned {type(result).__name__}, not Result")
  result = dataclasses.replace(result, seconds=time.time() - start,
                               preset=str(_get(config, "preset", "")),
                               fingerprint=trials.config_fingerprint(config),
                               resumed=resumed)
  logging.info("%s figures: %s", name, dict(result.figures))
  save_result(result, workdir)
  return result


def _get(config, key: str, default: Any) -> Any:
  return config.get(key, default) if hasattr(config, "get") else default


def registered() -> dict[str, Experiment]:
  """All registered experiments by name (import the experiment modules first)."""
  return dict(sorted(_REGISTRY.items()))


def get(name: str) -> Experiment:
  try:
    return _REGISTRY[name]
  except KeyError:
    raise ValueError(
        f"unknown experiment {name!r}; registered: {sorted(_REGISTRY)}") from None


def _json_number(v: float):
  v = float(v)
  return None if math.isnan(v) or math.isinf(v) else v


def atomic_write_text(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` through a temporary file and a rename, so a
  crash mid-write never leaves a truncated file in place of a good one."""
  trials.atomic_write_bytes(path, text.encode())


def save_result(result: Result, workdir: str) -> str:
  path = os.path.join(workdir, "result.json")
  atomic_write_text(path, json.dumps(result.to_json(), indent=2) + "\n")
  return path


def load_result(workdir: str) -> Result | None:
  path = os.path.join(workdir, "result.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return Result.from_json(json.load(f))


NOT_RECORDED = "config not recorded"
STALE = "stale: its config changed since"


def config_status(result: Result, config) -> str:
  """"" when ``result`` came from ``config`` (its recorded `trials.config_fingerprint`
  equals today's), else why not: `NOT_RECORDED` (a result older than fingerprints) or
  `STALE`."""
  if not result.fingerprint:
    return NOT_RECORDED
  return "" if result.fingerprint == trials.config_fingerprint(config) else STALE


def _cell(text: str) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def claims_count(result: Result) -> tuple[int, int]:
  """(claims reproduced, claims checked) of a result."""
  return sum(c.reproduced for c in result.claims), len(result.claims)


# The presets a report shows, the headline last: full is the largest fair test of each
# claim (the README's verdicts), quick what `make reproduce` runs.
REPORT_PRESETS = ("quick", "full")

Run = tuple[Result, str]  # status "" or a note such as "stale: this run failed"


def run_dir(root: str, preset: str, name: str) -> str:
  """Where `reproduce` runs ``name`` at ``preset``: ``root/name`` for quick (what
  `make reproduce` fills), ``root/<preset>/name`` for any other preset."""
  return os.path.join(root, name) if preset == "quick" else os.path.join(root, preset, name)


def _headline(runs: Mapping[str, Run]) -> str:
  """The preset whose verdicts lead: the last of REPORT_PRESETS that ran, else any."""
  ran = [p for p in REPORT_PRESETS if p in runs]
  return ran[-1] if ran else next(iter(runs))


def _count_cell(runs: Mapping[str, Run], preset: str) -> str:
  if preset not in runs:
    return "not run yet"
  result, status = runs[preset]
  done, checked = claims_count(result)
  return f"{done}/{checked}" + (f" *{status}*" if status else "")


def _minutes(result: Result) -> str:
  if math.isnan(result.seconds):
    return ""
  return f"{result.seconds / 60:.1f}" + (" (resumed)" if result.resumed else "")


def summary_rows(entries: Mapping[str, tuple[Experiment, Mapping[str, Run]]],
                 presets: Sequence[str] = REPORT_PRESETS) -> list[str]:
  """The one-screen summary: a markdown row per experiment with the claims reproduced
  out of checked and the minutes of each preset, linked to its section and the
  headline preset's plots."""
  lines = ["| method | " + " | ".join(presets) + " | minutes (" + " / ".join(presets)
           + ") | plots |", "|---|" + "---|" * len(presets) + "---|---|"]
  for name, (exp, runs) in entries.items():
    headline = _headline(runs)
    folder = os.path.relpath(run_dir(".", headline, name))
    plots = ", ".join(f"[{os.path.splitext(p)[0]}]({folder}/{p})"
                      for p in runs[headline][0].plots)
    minutes = " / ".join(_minutes(runs[p][0]) if p in runs else "-" for p in presets)
    counts = " | ".join(_count_cell(runs, p) for p in presets)
    lines.append(f"| {_cell(f'[{exp.title}](#{name}) (`{name}`)')} | {counts} | {minutes} "
                 f"| {plots} |")
  return lines


def _claim_rows(runs: Mapping[str, Run], headline: str) -> list[str]:
  """The headline preset's claims; a row whose verdict differs at another preset
  shows that preset's verdict and figure too."""
  others = {p: {c.claim: c for c in r.claims} for p, (r, _) in runs.items() if p != headline}
  lines = ["| paper's claim | paper's figure | our figure | reproduced |", "|---|---|---|---|"]
  for c in runs[headline][0].claims:
    verdict = "yes" if c.reproduced else "no"
    for preset, claims in others.items():
      other = claims.get(c.claim)
      if other is not None and other.reproduced != c.reproduced:
        verdict += (f" (at {preset}: {'yes' if other.reproduced else 'no'}, "
                    f"{other.our_figure})")
    lines.append(f"| {_cell(c.claim)} | {_cell(c.paper_figure)} | {_cell(c.our_figure)} | "
                 f"{_cell(verdict)} |")
  return lines


def _section(name: str, exp: Experiment, runs: Mapping[str, Run]) -> list[str]:
  """One experiment's section: the count and time of each preset, the headline
  preset's claims with its plots, notes and figures under them."""
  headline = _headline(runs)
  lines = ["", f'<a id="{name}"></a>', "", f"## {exp.title} (`{name}`)", ""]
  for preset, (result, status) in runs.items():
    done, checked = claims_count(result)
    line = f"At `{preset}`: {done} of {checked} claims reproduced"
    if not math.isnan(result.seconds):
      line += f"; run time {result.seconds:.0f} s" + (" (resumed)" if result.resumed else "")
    lines.append(line + (f" (*{status}*)" if status else "") + ".")
  lines += ["", f"Claims at `{headline}`:", "", *_claim_rows(runs, headline), ""]
  result = runs[headline][0]
  folder = os.path.relpath(run_dir(".", headline, name))
  for plot in result.plots:
    lines.append(f"![{name}]({folder}/{plot})")
  for note in result.notes:
    lines += ["", note]
  lines += ["", "| figure | value |", "|---|---|"]
  for k, v in result.figures.items():
    lines.append(f"| {_cell(k)} | {v:.4g} |")
  return lines


def render_report(entries: Mapping[str, tuple[Experiment, Mapping[str, Run]]]) -> str:
  """Markdown for REPORT.md. ``entries``: name -> (experiment, {preset: (result,
  status)}), presets in REPORT_PRESETS order.

  The report opens with a one-screen summary (per experiment, claims reproduced out
  of checked and minutes at each preset, linked to its section and plots); each
  section then holds the headline preset's claims (full where it ran), with the
  other preset's verdict beside any row where it differs, and the plots under them.
  """
  presets = [p for p in REPORT_PRESETS if any(p in runs for _, runs in entries.values())]
  presets += sorted({p for _, runs in entries.values() for p in runs} - set(presets))
  lines = ["# Reproduction report", "",
           f"Written {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by "
           "`python -m experiments.reproduce`. Each section leads with `full` where it "
           "has run (the largest fair test of each claim within 30 minutes on 2 cores), "
           "else `quick` (what `make reproduce` runs).", ""]
  for preset in presets:
    results = [runs[preset][0] for _, runs in entries.values() if preset in runs]
    done = sum(claims_count(r)[0] for r in results)
    checked = sum(claims_count(r)[1] for r in results)
    minutes = sum(r.seconds for r in results if not math.isnan(r.seconds)) / 60
    lines.append(f"- `{preset}`: {done} of {checked} claims reproduced across "
                 f"{len(results)} experiments ({minutes:.0f} minutes of runs).")
  lines += ["", *summary_rows(entries, presets)]
  for name, (exp, runs) in entries.items():
    lines += _section(name, exp, runs)
  return "\n".join(lines) + "\n"


def write_report(entries: Mapping[str, tuple[Experiment, Mapping[str, Run]]],
                 path: str) -> str:
  """Writes REPORT.md atomically and returns its text."""
  text = render_report(entries)
  atomic_write_text(path, text)
  return text
