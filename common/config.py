"""Config helpers: presets and validation with one-line errors.

Each ``experiments/configs/<name>.py`` defines ``get_config(preset)`` (built from a
dict of preset overrides with ``build``) and ``validate(config)`` (built from the
checks below). Errors are ``ConfigError`` with a message naming the key, the
value and what is allowed; the entrypoints print it as one line.

Configs nest, big_vision style: a sub-config groups the keys of one part of an
experiment (``config.train`` from ``default_train_config()``, ``config.data``,
``config.estimator``, ...). Presets override nested keys with nested dicts or
dotted keys, and every check takes a dotted key::

    BASE = dict(method="demo", seed=0, train=train_lib.default_train_config(),
                estimator=dict(dims=(32, 64), pairs=48))
    PRESETS = {"quick": {}, "tiny": {"train.num_steps": 10, "estimator": dict(pairs=8)}}
    config_lib.positive_int(config, "estimator.pairs")
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable, Iterable, Mapping, NoReturn

import ml_collections


class ConfigError(ValueError):
  """A bad preset, key or value; the message is one line."""


def die(message: Any) -> NoReturn:
  """Prints ``error: <message>`` on one line to stderr and exits with status 2.

  What the entrypoints do with bad input, instead of a traceback.
  """
  sys.stderr.write(f"error: {' '.join(str(message).split())}\n")
  sys.exit(2)


def parse_flags_or_die(flag_values, argv: list[str]) -> list[str]:
  """Parses absl flags; a bad flag or a stray positional argument dies with one line.

  Returns the remaining argv (the program name). Entrypoints pass their own
  `flags_parser` to `app.run` that calls this, then checks flag values with `die`.
  """
  from absl import flags  # Lazy: configs do not need absl.

  try:
    rest = flag_values(argv)
  except flags.Error as e:
    die(e)
  if len(rest) > 1:
    die(f"unexpected positional arguments: {' '.join(rest[1:])}")
  return rest


def build(name: str, base: Mapping[str, Any], presets: Mapping[str, Mapping[str, Any]],
          preset: str | None) -> ml_collections.ConfigDict:
  """Returns the locked ConfigDict ``base`` updated with ``presets[preset]``.

  Nested dicts in ``base`` become sub-configs. A preset sets keys by name, by
  dotted path (``"train.num_steps": 10``) or with a nested dict that updates the
  sub-config key by key; a key that ``base`` does not have is a ``ConfigError``.
  """
  preset = preset or "quick"
  if preset not in presets:
    raise ConfigError(
        f"unknown preset {preset!r} for {name}; allowed: {', '.join(sorted(presets))}")
  config = ml_collections.ConfigDict(copy.deepcopy(dict(base)))
  _apply(config, presets[preset], prefix="", where=f"preset {preset!r} of {name}")
  config.preset = preset
  config.lock()
  return config


def _apply(config: ml_collections.ConfigDict, overrides: Mapping[str, Any], prefix: str,
           where: str) -> None:
  """Sets ``overrides`` (flat, dotted or nested) into ``config``; unknown keys fail."""
  for key, value in overrides.items():
    head, _, rest = key.partition(".")
    if head not in config:
      raise ConfigError(f"{where} sets unknown key {prefix + key!r}")
    if rest:
      _apply(config[head], {rest: value}, f"{prefix}{head}.", where)
    elif isinstance(config[head], ml_collections.ConfigDict) and isinstance(value, Mapping):
      _apply(config[head], value, f"{prefix}{head}.", where)
    else:
      setattr(config, head, value)


def get(config: Any, key: str) -> Any:
  """``config[key]`` for a dotted ``key`` ("train.num_steps")."""
  for part in key.split("."):
    config = config[part]
  return config


def check_train(config: Any, key: str = "train") -> None:
  """Validates the sub-config ``key`` made from ``common.train.default_train_config()``."""
  from common import train as train_lib  # Lazy: configs load without jax.

  try:
    train_lib.validate_train_config(get(config, key))
  except ValueError as e:
    raise ConfigError(str(e).replace("config.", f"config.{key}.", 1)) from None


def fail(key: str, value: Any, expected: str) -> NoReturn:
  """Raises the one-line ``ConfigError`` for ``config.<key>=<value>``."""
  raise ConfigError(f"config.{key}={value!r} is invalid: expected {expected}")


_fail = fail


def require(config, key: str, ok: bool, expected: str) -> None:
  """Fails with ``expected`` unless ``ok`` (a cross-key condition on ``key``)."""
  if not ok:
    fail(key, get(config, key), expected)


def positive(config, key: str) -> None:
  value = get(config, key)
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
    _fail(key, value, "a number > 0")


def positive_int(config, key: str, minimum: int = 1) -> None:
  value = get(config, key)
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    _fail(key, value, f"an integer >= {minimum}")


def in_range(config, key: str, low: float, high: float) -> None:
  value = get(config, key)
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
    _fail(key, value, f"a number in ({low}, {high})")


def in_interval(config, key: str, low: float, high: float, *, closed: str = "") -> None:
  """A number in the interval from ``low`` to ``high``; ``closed`` is "", "low", "high"
  or "both" (which ends belong to it)."""
  value = get(config, key)
  low_ok = closed in ("low", "both")
  high_ok = closed in ("high", "both")
  inside = (isinstance(value, (int, float)) and not isinstance(value, bool) and
            (low <= value if low_ok else low < value) and
            (value <= high if high_ok else value < high))
  if not inside:
    fail(key, value, f"a number in {'[' if low_ok else '('}{low}, {high}{']' if high_ok else ')'}")


def _allowed(allowed: Iterable[str]) -> tuple:
  if isinstance(allowed, (str, bytes)):  # "abc" would allow "a", "b" and "c".
    raise TypeError(f"allowed must be a sequence of values, got the string {allowed!r}")
  return tuple(allowed)


def one_of(config, key: str, allowed: Iterable[str]) -> None:
  allowed = _allowed(allowed)
  value = get(config, key)
  if value not in allowed:
    _fail(key, value, f"one of {', '.join(map(str, allowed))}")


def sequence_of(config, key: str, check: Callable[[Any], bool], expected: str) -> None:
  value = get(config, key)
  if isinstance(value, str) or not hasattr(value, "__len__") or len(value) == 0 or not all(
      check(v) for v in value):
    _fail(key, value, f"a non-empty sequence of {expected}")


def subset_of(config, key: str, allowed: Iterable[str]) -> None:
  allowed = _allowed(allowed)
  sequence_of(config, key, lambda v: v in allowed, f"values from {', '.join(allowed)}")
