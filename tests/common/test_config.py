"""Config presets: nested sub-configs, dotted overrides and one-line checks."""

import ml_collections
import pytest

from common import config as config_lib
from common import train as train_lib

BASE = dict(method="demo", seed=0, train=train_lib.default_train_config(),
            estimator=dict(dims=(32, 64), pairs=48, eps=1.9))
PRESETS = {
    "quick": {},
    "tiny": {"train.num_steps": 10, "estimator": dict(pairs=8)},
    "typo": {"estimator.pair": 3},
    "typo_nested": {"train": dict(num_step=3)},
}


def test_presets_update_nested_keys_and_leave_the_base_alone():
  tiny = config_lib.build("demo", BASE, PRESETS, "tiny")
  quick = config_lib.build("demo", BASE, PRESETS, "quick")
  assert (tiny.train.num_steps, tiny.estimator.pairs, tiny.estimator.dims) == (10, 8, (32, 64))
  assert (quick.train.num_steps, quick.estimator.pairs) == (1000, 48)
  assert isinstance(tiny.estimator, ml_collections.ConfigDict) and tiny.preset == "tiny"
  with pytest.raises(AttributeError):
    tiny.estimator.no_such_key = 1


@pytest.mark.parametrize("preset, message", [
    ("typo", "unknown key 'estimator.pair'"),
    ("typo_nested", "unknown key 'train.num_step'"),
    ("huge", "unknown preset 'huge' for demo; allowed: quick, tiny, typo, typo_nested"),
])
def test_bad_presets_fail_with_one_line(preset, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    config_lib.build("demo", BASE, PRESETS, preset)


def test_checks_take_dotted_keys_and_name_the_value():
  config = config_lib.build("demo", BASE, PRESETS, "quick")
  config_lib.positive_int(config, "estimator.pairs")
  config_lib.in_interval(config, "estimator.eps", 0.0, 1.9, closed="high")
  config_lib.check_train(config)
  with config.unlocked():
    config.estimator.pairs = 0
    config.train.batch_size = -1
  with pytest.raises(config_lib.ConfigError,
                     match=r"^config.estimator.pairs=0 is invalid: expected an integer >= 1$"):
    config_lib.positive_int(config, "estimator.pairs")
  with pytest.raises(config_lib.ConfigError, match=r"config.estimator.eps=1.9 is invalid: "
                     r"expected a number in \[0.0, 1.9\)"):
    config_lib.in_interval(config, "estimator.eps", 0.0, 1.9, closed="low")
  with pytest.raises(config_lib.ConfigError, match="config.train.batch_size must be"):
    config_lib.check_train(config)
  with pytest.raises(config_lib.ConfigError, match="expected below 64"):
    config_lib.require(config, "estimator.dims", False, "below 64")


def test_range_checks_reject_bools_and_string_allowed_lists():
  config = ml_collections.ConfigDict({"p": True, "kind": "a"})
  with pytest.raises(config_lib.ConfigError, match=r"config.p=True is invalid"):
    config_lib.in_range(config, "p", 0, 2)  # Before: True passed as 1.
  with pytest.raises(TypeError, match="allowed must be a sequence of values, got the string"):
    config_lib.one_of(config, "kind", "abc")  # Before: "a" passed.
