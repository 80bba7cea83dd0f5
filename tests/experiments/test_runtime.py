"""The entrypoints' process set-up: JAX's persistent compilation cache and quiet logs."""

import logging as std_logging
import os
import subprocess
import sys

from absl import logging
import pytest

from experiments import runtime

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_COMPILE_TWICE = """
import sys, time, jax, jax.numpy as jnp
from experiments import runtime
print(runtime.enable_compilation_cache(sys.argv[1], min_compile_seconds=0.0))
f = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x).T + 3.0)
f(jnp.ones((64, 64))).block_until_ready()
"""


def test_a_second_process_loads_the_compiled_program_from_the_cache(tmp_path):
  cache = tmp_path / "cache"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("TESTS_JAX_COMPILATION_CACHE", None)
  written = []
  for _ in range(2):
    proc = subprocess.run([sys.executable, "-c", _COMPILE_TWICE, str(cache)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(cache)
    written.append({n: os.path.getmtime(cache / n) for n in os.listdir(cache)
                    if n.endswith("-cache")})
  assert any(n.startswith("jit__lambda") for n in written[0]), written[0]
  assert written[1] == written[0]  # The second process read the entries, wrote none.


def test_bad_cache_arguments_raise_one_line(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  with pytest.raises(ValueError, match="is not a usable directory"):
    runtime.enable_compilation_cache(str(a_file / "sub"))
  with pytest.raises(ValueError, match="min_compile_seconds must be >= 0, got -1"):
    runtime.enable_compilation_cache(str(tmp_path), min_compile_seconds=-1)


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
  assert runtime.default_cache_dir() == str(tmp_path / "jax")
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert runtime.default_cache_dir() == str(tmp_path / "xdg" / "icml26" / "jax")


def test_quiet_library_logs_sets_absl_and_library_loggers_to_warning():
  saved = logging.get_verbosity(), {n: std_logging.getLogger(n).level
                                    for n in runtime.LIBRARY_LOGGERS}
  try:
    logging.set_verbosity(logging.INFO)
    runtime.quiet_library_logs()
    assert logging.get_verbosity() == logging.WARNING
    assert std_logging.getLogger("orbax").level == std_logging.WARNING
  finally:
    logging.set_verbosity(saved[0])
    for name, level in saved[1].items():
      std_logging.getLogger(name).setLevel(level)


def test_main_rejects_an_unusable_cache_directory_with_one_line(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.main",
       "--config=experiments/configs/kernel_ridge.py:tiny", f"--workdir={tmp_path / 'w'}",
       f"--compilation_cache={a_file}"], cwd=REPO, capture_output=True, text=True,
      timeout=300)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert "is not a usable directory" in lines[0]
