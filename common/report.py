"""The registry of experiments and the writer of ``REPORT.md``.

Every method's experiment module registers itself with ``@register(...)``; the
reproduce entrypoint runs whatever is registered and hands the results to
``write_report``, so adding a method adds its rows without touching this file.

An experiment is ``run(config, workdir) -> Result``: the claims it checks (each a
row of the report: method | paper's claim | paper's figure | our figure |
reproduced), the named figures it measured, and the plots it wrote.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from typing import Any, Callable, Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
  """One row of the report."""
  claim: str          # the paper's claim, in one sentence
  paper_figure: str   # what the paper reports for it (a number, or the qualitative statement)
  our_figure: str     # what we measured, formatted
  reproduced: bool


@dataclasses.dataclass(frozen=True)
class Result:
  """What an experiment returns."""
  claims: Sequence[ClaimCheck]
  figures: Mapping[str, float]
  plots: Sequence[str] = ()      # file names relative to the experiment's workdir
  seconds: float = float("nan")

  def to_json(self) -> dict:
    return {
        "claims": [dataclasses.asdict(c) for c in self.claims],
        "figures": {k: _json_number(v) for k, v in self.figures.items()},
        "plots": list(self.plots),
        "seconds": _json_number(self.seconds),
    }

  @classmethod
  def from_json(cls, data: Mapping[str, Any]) -> "Result":
    return cls(claims=[ClaimCheck(**c) for c in data["claims"]],
               figures={k: (float("nan") if v is None else v)
                        for k, v in data["figures"].items()},
               plots=list(data.get("plots", ())),
               seconds=float("nan") if data.get("seconds") is None else data["seconds"])


@dataclasses.dataclass(frozen=True)
class Experiment:
  name: str                   # also the config file stem: experiments/configs/<name>.py
  title: str                  # the paper / method, as shown in the report
  run: Callable[..., Result]  # run(config, workdir) -> Result


_REGISTRY: dict[str, Experiment] = {}


def register(name: str, *, title: str) -> Callable:
  """Decorator: ``@register("kernel_ridge", title="...")`` over ``run(config, workdir)``."""
  def wrap(run: Callable[..., Result]) -> Callable[..., Result]:
    existing = _REGISTRY.get(name)
    if existing is not None and existing.run.__qualname__ != run.__qualname__:
      raise ValueError(f"experiment {name!r} is registered twice")
    _REGISTRY[name] = Experiment(name=name, title=title, run=run)
    return run
  return wrap


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
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


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


def _cell(text: str) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def render_report(entries: Mapping[str, tuple[Experiment, Result, str]],
                  preset: str) -> str:
  """Markdown for REPORT.md. ``entries``: name -> (experiment, result, status),
  status "" for a fresh result or a note such as "stale: this run failed"."""
  lines = [
      "# Reproduction report",
      "",
      f"Preset `{preset}`, written {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}"
      " by `python -m experiments.reproduce`.",
      "",
      "| method | paper's claim | paper's figure | our figure | reproduced |",
      "|---|---|---|---|---|",
  ]
  for name, (exp, result, status) in entries.items():
    label = f"{exp.title} (`{name}`)" + (f" *{status}*" if status else "")
    for c in result.claims:
      lines.append(f"| {_cell(label)} | {_cell(c.claim)} | {_cell(c.paper_figure)} | "
                   f"{_cell(c.our_figure)} | {'yes' if c.reproduced else 'no'} |")
  for name, (exp, result, _) in entries.items():
    lines += ["", f"## {exp.title} (`{name}`)", ""]
    if not math.isnan(result.seconds):
      lines.append(f"Run time: {result.seconds:.0f} s.")
      lines.append("")
    for plot in result.plots:
      lines.append(f"![{name}]({name}/{plot})")
    lines.append("")
    lines.append("| figure | value |")
    lines.append("|---|---|")
    for k, v in result.figures.items():
      lines.append(f"| {_cell(k)} | {v:.4g} |")
  return "\n".join(lines) + "\n"


def write_report(entries: Mapping[str, tuple[Experiment, Result, str]], path: str,
                 preset: str) -> str:
  """Writes REPORT.md atomically and returns its text."""
  text = render_report(entries, preset)
  atomic_write_text(path, text)
  return text
