"""Process set-up shared by the entrypoints: the compilation cache and quiet logs.

`experiments.main`, `experiments.reproduce` and the benchmarks call `setup()` first
thing in `main`:

- JAX's persistent compilation cache: a program compiled once (and taking at least
  `--compilation_cache_min_seconds` to compile) is loaded from disk by later runs,
  which makes a rerun of a preset, or a resumed run, skip most compilation. The
  directory is `--compilation_cache` (default: `$JAX_COMPILATION_CACHE_DIR`, else the
  user's cache directory, `$XDG_CACHE_HOME/icml26/jax` or `~/.cache/icml26/jax`);
  `--compilation_cache=` (empty) turns it off.
- Quiet logs: library loggers (orbax, absl, jax) print WARNING and above unless
  absl's own `--verbosity` (or `-v`) is given, e.g. `--verbosity=0` brings back
  every INFO line. The entrypoints' one-line progress is printed, not logged.
"""

from __future__ import annotations

import logging as std_logging
import os

from absl import flags
from absl import logging
import jax

from common import config as config_lib

flags.DEFINE_string(
    "compilation_cache", None,
    "Directory of JAX's persistent compilation cache (default: $JAX_COMPILATION_CACHE_DIR,"
    " else $XDG_CACHE_HOME/icml26/jax or ~/.cache/icml26/jax); empty turns it off.")
flags.DEFINE_float("compilation_cache_min_seconds", 0.5,
                   "Only programs that took at least this long to compile are cached.")
FLAGS = flags.FLAGS

# Loggers of libraries that log through Python's logging rather than absl's.
LIBRARY_LOGGERS = ("jax", "orbax", "absl", "etils", "tensorboardX", "httpx", "uvicorn")


def default_cache_dir() -> str:
  """The compilation cache directory used when `--compilation_cache` is not given."""
  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return os.environ["JAX_COMPILATION_CACHE_DIR"]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "icml26", "jax")


def enable_compilation_cache(path: str, min_compile_seconds: float = 0.5) -> str | None:
  """Points JAX's persistent compilation cache at `path` ("" turns it off).

  Args:
    path: the cache directory (created if needed), or "" for no cache.
    min_compile_seconds: programs that compile faster than this are not written.

  Returns:
    The directory in use, or None if the cache is off.

  Raises:
    ValueError: if `min_compile_seconds` is negative or `path` is not a usable directory.
  """
  if not min_compile_seconds >= 0:
    raise ValueError(f"min_compile_seconds must be >= 0, got {min_compile_seconds!r}")
  if not path:
    jax.config.update("jax_compilation_cache_dir", None)
    return None
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise ValueError(f"--compilation_cache {path!r} is not a usable directory: {e}") from e
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
  return path


def quiet_library_logs() -> None:
  """Sets absl's verbosity and the libraries' loggers to WARNING."""
  logging.set_verbosity(logging.WARNING)
  for name in LIBRARY_LOGGERS:
    std_logging.getLogger(name).setLevel(std_logging.WARNING)


def configure(cache_dir: str | None, min_compile_seconds: float = 0.5,
              quiet: bool = True) -> str | None:
  """Sets up the process: the compilation cache and, with `quiet`, quiet library logs.

  Args:
    cache_dir: the cache directory; None means `default_cache_dir()`, "" no cache.
    min_compile_seconds: see `enable_compilation_cache`.
    quiet: whether to set the library loggers to WARNING (`quiet_library_logs`).

  Returns:
    The compilation cache directory, or None if it is off.

  Raises:
    ValueError: as `enable_compilation_cache`.
  """
  if quiet:
    quiet_library_logs()
  return enable_compilation_cache(default_cache_dir() if cache_dir is None else cache_dir,
                                  min_compile_seconds)


def setup() -> str | None:
  """`configure` from the flags: quiet logs unless absl's --verbosity (-v) is given.

  Returns:
    The compilation cache directory, or None if it is off.

  Raises:
    SystemExit: (status 2, one line) if the cache directory is not usable.
  """
  try:
    return configure(FLAGS.compilation_cache, FLAGS.compilation_cache_min_seconds,
                     quiet=not FLAGS["verbosity"].present)
  except ValueError as e:
    config_lib.die(e)
