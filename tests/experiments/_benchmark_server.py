"""The fork server of tests/experiments/test_benchmarks_smoke.py: it runs benchmarks as
`python -m experiments.benchmarks.<name>` does, each in a process forked from this one
after it has imported the libraries most of them load (started in the repository root):

  python tests/experiments/_benchmark_server.py '["numpy", "jax", ...]'

One JSON request per stdin line, {"module", "args", "stdout", "stderr"}: the server
forks; the child runs the module as __main__ with `runpy` (as `python -m` does), its
output in the two files, and exits as `python -m` would (an uncaught exception: its
traceback and status 1; `sys.exit(x)`: x). The server answers each request with two
JSON lines, {"pid": ...} when the child starts and {"status": ...} when it ends (its
exit code, -N for signal N). Forking after these imports is safe: they start no thread
(jax creates its CPU backend, and that one's threads, on first use, in the child).
"""

import gc
import importlib
import importlib.util
import json
import os
import runpy
import sys


def preload(names: list[str]) -> None:
  """Imports each module whose top-level package is installed."""
  for name in names:
    if importlib.util.find_spec(name.split(".")[0]) is not None:
      importlib.import_module(name)


def run_child(request: dict) -> None:
  """The forked child. Never returns: it ends by raising (the module's SystemExit or
  exception, or SystemExit(0)), so that the interpreter exits as `python -m` would:
  atexit handlers, threads joined, the traceback of an uncaught exception."""
  write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
  for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], write),
                          (2, request["stderr"], write)):
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
  sys.argv = [request["module"], *request["args"]]  # runpy sets argv[0] to the file
  runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
  sys.exit(0)


def main() -> None:
  sys.path[0] = os.getcwd()  # as under `python -m`: the repository, not this folder
  preload(json.loads(sys.argv[1]))
  gc.freeze()  # the children's collections then leave the preloaded objects' pages shared
  for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
      run_child(request)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
  main()
