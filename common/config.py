"""Config helpers: presets and validation with one-line errors.

Each ``experiments/configs/<name>.py`` defines ``get_config(preset)`` (built from a
dict of preset overrides with ``build``) and ``validate(config)`` (built from the
checks below). Errors are ``ConfigError`` with a message naming the key, the
value and what is allowed; the entrypoints print it as one line.
"""

from __future__ import annotations

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
  """Returns the locked ConfigDict ``base`` updated with ``presets[preset]``."""
  preset = preset or "quick"
  if preset not in presets:
    raise ConfigError(
        f"unknown preset {preset!r} for {name}; allowed: {', '.join(sorted(presets))}")
  config = ml_collections.ConfigDict(dict(base))
  unknown = set(presets[preset]) - set(base)
  if unknown:
    raise ConfigError(f"preset {preset!r} of {name} sets unknown keys {sorted(unknown)}")
  config.update(dict(presets[preset]))
  config.preset = preset
  config.lock()
  return config


def _fail(key: str, value: Any, expected: str) -> None:
  raise ConfigError(f"config.{key}={value!r} is invalid: expected {expected}")


def positive(config, key: str) -> None:
  value = config[key]
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
    _fail(key, value, "a number > 0")


def positive_int(config, key: str, minimum: int = 1) -> None:
  value = config[key]
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    _fail(key, value, f"an integer >= {minimum}")


def in_range(config, key: str, low: float, high: float) -> None:
  value = config[key]
  if not isinstance(value, (int, float)) or not low < value < high:
    _fail(key, value, f"a number in ({low}, {high})")


def one_of(config, key: str, allowed: Iterable[str]) -> None:
  allowed = tuple(allowed)
  if config[key] not in allowed:
    _fail(key, config[key], f"one of {', '.join(map(str, allowed))}")


def sequence_of(config, key: str, check: Callable[[Any], bool], expected: str) -> None:
  value = config[key]
  if isinstance(value, str) or not hasattr(value, "__len__") or len(value) == 0 or not all(
      check(v) for v in value):
    _fail(key, value, f"a non-empty sequence of {expected}")


def subset_of(config, key: str, allowed: Iterable[str]) -> None:
  allowed = tuple(allowed)
  sequence_of(config, key, lambda v: v in allowed, f"values from {', '.join(allowed)}")
