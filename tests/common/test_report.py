"""The report writer and the reproduce loop keep good results when a run fails."""

import json

import pytest

from common import report
from experiments import registry
from experiments import reproduce


def _result(value):
  return report.Result(
      claims=[report.ClaimCheck("x beats y", "2x", f"{value:.1f}x", value > 1)],
      figures={"ratio": value}, plots=["p.png"], seconds=1.0)


def test_render_report_has_one_row_per_claim():
  exp = report.Experiment("demo", "Demo method", run=lambda c, w: None)
  text = report.render_report({"demo": (exp, _result(3.0), "")}, "quick")
  assert "| method | paper's claim | paper's figure | our figure | reproduced |" in text
  assert "| Demo method (`demo`) | x beats y | 2x | 3.0x | yes |" in text
  assert "![demo](demo/p.png)" in text


def test_result_json_round_trip(tmp_path):
  report.save_result(_result(2.0), str(tmp_path))
  assert report.load_result(str(tmp_path)) == _result(2.0)
  assert json.loads((tmp_path / "result.json").read_text())["figures"] == {"ratio": 2.0}


def test_failed_run_keeps_last_good_result(tmp_path, monkeypatch):
  calls = {"fail": False}

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

  monkeypatch.setattr(report, "_REGISTRY",
                      {"demo": report.Experiment("demo", "Demo", run)})
  monkeypatch.setattr(registry, "load_all", lambda: None)
  monkeypatch.setattr(registry, "config_module", lambda name: FakeConfigModule)
  text, failed = reproduce.reproduce(None, "quick", str(tmp_path))
  assert failed == [] and "| 4.0x | yes |" in text
  calls["fail"] = True
  text, failed = reproduce.reproduce(None, "quick", str(tmp_path))
  assert failed == ["demo"]
  assert "stale: this run failed" in text and "| 4.0x | yes |" in text
  assert report.load_result(str(tmp_path / "demo")) == _result(4.0)


def test_register_twice_with_a_different_function_raises(monkeypatch):
  monkeypatch.setattr(report, "_REGISTRY", {})
  report.register("a", title="A")(lambda c, w: None)
  with pytest.raises(ValueError, match="registered twice"):
    def other(c, w):
      return None
    report.register("a", title="A")(other)
