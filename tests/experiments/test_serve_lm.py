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
])
def test_serve_lm_rejects_bad_flags_with_one_line(flag_args, message):
  proc = subprocess.run([sys.executable, "-m", "experiments.serve_lm", *flag_args],
                        capture_output=True, text=True, timeout=120, cwd=REPO)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
