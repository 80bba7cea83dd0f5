"""The report writer, the claims table, the runner, and the reproduce loop that keeps
good results when a run fails."""

import json
import os

import jax.numpy as jnp
import ml_collections
import pytest

from common import report
from common import trials
from experiments import registry
from experiments import reproduce


def _result(value):
  return report.Result(
      claims=[report.ClaimCheck("x beats y", "2x", f"{value:.1f}x", value > 1)],
      figures={"ratio": value}, plots=["p.png"], seconds=1.0)


def test_render_report_opens_with_a_linked_summary_and_has_one_row_per_claim():
  exp = report.Experiment("demo", "Demo method", run=lambda c, w: None)
  other = report.Experiment("other", "Other method", run=lambda c, w: None)
  text = report.render_report({"demo": (exp, {"quick": (_result(3.0), "")}),
                               "other": (other, {"quick": (_result(0.5),
                                                           "stale: this run failed")})})
  summary = text.split("\n## ")[0]
  assert "- `quick`: 1 of 2 claims reproduced across 2 experiments" in summary
  assert "| method | quick | minutes (quick) | plots |" in summary
  assert "| [Demo method](#demo) (`demo`) | 1/1 | 0.0 | [p](demo/p.png) |" in summary
  assert "| [Other method](#other) (`other`) | 0/1 *stale: this run failed* | 0.0 |" in summary
  demo = text.split('<a id="demo"></a>')[1].split('<a id="other"></a>')[0]
  assert "| paper's claim | paper's figure | our figure | reproduced |" in demo
  assert "| x beats y | 2x | 3.0x | yes |" in demo
  assert demo.index("| x beats y |") < demo.index("![demo](demo/p.png)")  # plots under rows
  assert "| x beats y | 2x | 0.5x | no |" in text.split('<a id="other"></a>')[1]


def test_report_leads_with_full_and_shows_quick_where_the_verdict_differs():
  exp = report.Experiment("demo", "Demo method", run=lambda c, w: None)
  same = report.Experiment("same", "Same method", run=lambda c, w: None)
  text = report.render_report({
      "demo": (exp, {"quick": (_result(0.5), ""), "full": (_result(3.0), "")}),
      "same": (same, {"quick": (_result(2.0), "")})})
  summary = text.split("\n## ")[0]
  assert "- `full`: 1 of 1 claims reproduced across 1 experiments" in summary
  assert "| method | quick | full | minutes (quick / full) | plots |" in summary
  assert "| [Demo method](#demo) (`demo`) | 0/1 | 1/1 | 0.0 / 0.0 | [p](full/demo/p.png) |" \
      in summary
  assert "| [Same method](#same) (`same`) | 1/1 | not run yet | 0.0 / - | [p](same/p.png) |" \
      in summary
  demo = text.split('<a id="demo"></a>')[1].split('<a id="same"></a>')[0]
  assert "At `quick`: 0 of 1 claims reproduced" in demo and "Claims at `full`:" in demo
  assert "| x beats y | 2x | 3.0x | yes (at quick: no, 0.5x) |" in demo
  assert "![demo](full/demo/p.png)" in demo
  assert "| x beats y | 2x | 2.0x | yes |" in text.split('<a id="same"></a>')[1]


def test_run_dir_keeps_quick_at_the_top_and_other_presets_in_their_folder():
  assert report.run_dir("results", "quick", "kr") == os.path.join("results", "kr")
  assert report.run_dir("results", "full", "kr") == os.path.join("results", "full", "kr")


def test_notes_are_shown_under_the_plots_and_survive_json(tmp_path):
  import dataclasses  # pylint: disable=import-outside-toplevel
  exp = report.Experiment("demo", "Demo method", run=lambda c, w: None)
  result = dataclasses.replace(_result(3.0), notes=("Final library:\n\n1. `a rule`",))
  text = report.render_report({"demo": (exp, {"quick": (result, "")})})
  assert "![demo](demo/p.png)\n\nFinal library:\n\n1. `a rule`\n" in text
  report.save_result(result, str(tmp_path))
  assert report.load_result(str(tmp_path)) == result
  old = json.loads((tmp_path / "result.json").read_text())
  del old["notes"]                           # result.json files written before notes existed
  assert report.Result.from_json(old).notes == ()


def test_result_json_round_trip(tmp_path):
  report.save_result(_result(2.0), str(tmp_path))
  assert report.load_result(str(tmp_path)) == _result(2.0)
  assert json.loads((tmp_path / "result.json").read_text())["figures"] == {"ratio": 2.0}


def test_failed_run_keeps_last_good_result(tmp_path, monkeypatch, capsys):
  calls = {"fail": False}

  monkeypatch.setattr(report, "_REGISTRY", {})

  @report.register("demo", title="Demo")
  def run(config, workdir):
    if calls["fail"]:
      raise RuntimeError("boom")
    return _result(4.0)

  class FakeConfigModule:
    PRESETS = {"quick": {}}

    @staticmethod
    def get_config(preset):
      return {"preset": preset}

    @staticmethod
    def validate(config):
      pass

  monkeypatch.setattr(registry, "load_all", lambda: None)
  monkeypatch.setattr(registry, "config_module", lambda name: FakeConfigModule)
  text, failed = reproduce.reproduce(None, "quick", str(tmp_path))
  assert failed == [] and "| 4.0x | yes |" in text
  assert "[reproduce] demo: 0.0 min, 1/1 claims reproduced\n" in capsys.readouterr().out
  calls["fail"] = True
  text, failed = reproduce.reproduce(None, "quick", str(tmp_path))
  assert failed == ["demo"]
  assert "[reproduce] demo: failed after 0.0 min: RuntimeError: boom" in capsys.readouterr().err
  assert "stale: this run failed" in text and "| 4.0x | yes |" in text
  assert report.load_result(str(tmp_path / "demo")).claims == _result(4.0).claims


def test_reproduce_runs_lm_first_keeps_presets_apart_and_marks_changed_configs(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(report, "_REGISTRY", {})
  sizes = {"n": 1}
  for name in ("alpha", "lm"):
    report.register(name, title=name)(lambda config, workdir: _result(float(config["n"])))

  class FakeConfigModule:
    PRESETS = {"quick": {}, "full": {}}

    @staticmethod
    def get_config(preset):
      return {"preset": preset, "n": sizes["n"] + (preset == "full")}

    @staticmethod
    def validate(config):
      pass

  monkeypatch.setattr(registry, "load_all", lambda: None)
  monkeypatch.setattr(registry, "experiment_modules", lambda: ["alpha", "lm"])
  monkeypatch.setattr(registry, "config_module", lambda name: FakeConfigModule)
  reproduce.reproduce(None, "quick", str(tmp_path))
  out = capsys.readouterr().out
  assert out.index("[reproduce] lm (quick)") < out.index("[reproduce] alpha (quick)")
  text, _ = reproduce.reproduce(["alpha"], "full", str(tmp_path))
  quick, full = (report.load_result(str(tmp_path / "alpha")),
                 report.load_result(str(tmp_path / "full" / "alpha")))
  assert (quick.preset, full.preset) == ("quick", "full") and quick.fingerprint != full.fingerprint
  assert "| [alpha](#alpha) (`alpha`) | 0/1 | 1/1 |" in text
  assert "| [lm](#lm) (`lm`) | 0/1 | not run yet |" in text
  sizes["n"] = 5  # Today's configs differ from the ones the results on disk came from.
  capsys.readouterr()
  text, _ = reproduce.reproduce(["alpha"], "full", str(tmp_path), run=False)
  assert "| [alpha](#alpha) (`alpha`) | 0/1 *stale: its config changed since* | " \
      "1/1 *stale: its config changed since* |" in text
  assert "[reproduce] alpha" not in capsys.readouterr().out


def test_register_twice_with_a_different_function_raises(monkeypatch):
  monkeypatch.setattr(report, "_REGISTRY", {})
  report.register("a", title="A")(lambda c, w: None)
  with pytest.raises(ValueError, match="registered twice"):
    def other(c, w):
      return None
    report.register("a", title="A")(other)


@pytest.mark.parametrize("measured, op, threshold, expected", [
    (0.4, "<", 0.5, True), (0.5, "<", 0.5, False), (0.5, "<=", 0.5, True),
    (2.0, ">=", 2.0, True), (float("nan"), "<", 1.0, False), (None, ">", 0.0, False),
    ({"a": 3.0, "b": 2.5}, ">=", 2.0, True), ({"a": 3.0, "b": 1.5}, ">=", 2.0, False),
    ([-0.5, -0.45], "in", (-0.6, -0.4), True), ([-0.5, -0.3], "in", (-0.6, -0.4), False),
    ([], ">", 0.0, False), (True, "==", True, True), (False, "==", True, False),
])
def test_passes_compares_every_value(measured, op, threshold, expected):
  assert report.passes(measured, op, threshold) is expected


def test_claims_table_renders_rows_and_checks_every_condition():
  rows = report.claims_table([
      report.Claim("bias is small", "unbiased", "t = 0.9", 0.9, "<=", 1.5),
      report.Claim("fast and accurate", "qualitative", "2.0x, err 0.3", 2.0, ">=", 1.5,
                   also=[(0.3, "<", 0.2)]),
  ])
  assert rows[0] == report.ClaimCheck("bias is small", "unbiased", "t = 0.9", True)
  assert rows[1].reproduced is False and rows[1].our_figure == "2.0x, err 0.3"
  with pytest.raises(ValueError, match="unknown comparison"):
    report.passes(1.0, "=>", 0.0)


def test_runner_validates_creates_workdir_enables_x64_and_saves(tmp_path, monkeypatch):
  monkeypatch.setattr(report, "_REGISTRY", {})
  seen = {}

  def validate(config):
    if config["n"] < 0:
      raise ValueError("config.n=-1 is invalid")

  @report.register("demo64", title="Demo", validate=validate)
  def run(config, workdir):
    seen["dtype"] = jnp.zeros(()).dtype
    seen["exists"] = os.path.isdir(workdir)
    return _result(2.0)

  workdir = tmp_path / "new" / "dir"
  result = run(ml_collections.ConfigDict({"n": 1, "x64": True}), str(workdir))
  assert seen == {"dtype": jnp.float64, "exists": True} and not result.resumed
  assert not run(ml_collections.ConfigDict({"n": 1, "x64": True}), str(workdir)).resumed
  (workdir / "stages").mkdir()  # Run state: this run's seconds are not a whole run's.
  assert run(ml_collections.ConfigDict({"n": 1, "x64": True}), str(workdir)).resumed
  assert result.seconds >= 0 and result.seconds != 1.0  # the runner's clock, not the body's
  assert report.load_result(str(workdir)).claims == result.claims
  assert report.get("demo64").run is run
  with pytest.raises(ValueError, match="config.n=-1"):
    run(ml_collections.ConfigDict({"n": -1, "x64": False}), str(tmp_path / "bad"))
  assert not os.path.exists(tmp_path / "bad")
  assert jnp.zeros(()).dtype == jnp.float32


def test_runner_rejects_a_bad_workdir_before_any_work(tmp_path, monkeypatch):
  monkeypatch.setattr(report, "_REGISTRY", {})
  calls = []

  @report.register("demo_workdir", title="Demo")
  def run(config, workdir):
    calls.append(workdir)
    return _result(2.0)

  (tmp_path / "a_file").write_text("x")
  for workdir, match in [(tmp_path / "a_file", r"workdir '.*a_file' is a file"),
                         ("/proc/x", r"workdir '/proc/x' is not a writable directory")]:
    with pytest.raises(ValueError, match=match) as info:
      run(ml_collections.ConfigDict({"n": 1}), workdir)
    assert "\n" not in str(info.value)
  assert calls == []


def test_config_status_compares_the_recorded_fingerprint_with_todays_config():
  config = ml_collections.ConfigDict({"seed": 0, "steps": 3})
  result = report.Result(claims=[], figures={}, fingerprint=trials.config_fingerprint(config))
  assert report.config_status(result, config) == ""
  assert report.config_status(result, ml_collections.ConfigDict({"seed": 0, "steps": 4})) \
      == report.STALE
  assert report.config_status(report.Result(claims=[], figures={}), config) \
      == report.NOT_RECORDED
