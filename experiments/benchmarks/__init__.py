"""Side-by-side benchmarks against peers (see docs/benchmarks.md).

Every benchmark module defines ``PEERS`` (the import names of the peer packages it
needs beyond the runtime dependencies, empty when its peer is numpy, scipy,
scikit-learn or our own code), a ``--tiny`` flag (sizes that run in seconds: the
suite's smoke test, tests/experiments/test_benchmarks_smoke.py), and prints
``machine_line(PEERS)`` first, so every figure carries the CPU, its vector extensions
and the versions it was measured with.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform

# The vector extensions that decide how fast XLA's and torch's CPU kernels run, as
# /proc/cpuinfo names them (x86 `flags`, Arm `Features`); the ones the CPU has are
# printed in this order.
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
              "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
              "amx_bf16", "amx_int8", "amx_fp16", "asimd", "asimdhp", "sve", "sve2", "bf16",
              "i8mm")


def _cpuinfo_field(name: str) -> list[str]:
  """The values of every ``name : value`` line of /proc/cpuinfo (none without it)."""
  if not os.path.exists("/proc/cpuinfo"):
    return []
  with open("/proc/cpuinfo") as f:
    return [line.split(":", 1)[1].strip() for line in f
            if line.split(":", 1)[0].strip() == name]


def cpu_model() -> str:
  """The CPU's model name (from /proc/cpuinfo where there is one) and core count."""
  names = _cpuinfo_field("model name")
  cpu = names[0] if names else (platform.processor() or platform.machine())
  return f"{cpu} ({os.cpu_count()} cores)"


def cpu_flags() -> tuple[str, ...]:
  """The entries of ``SIMD_FLAGS`` that the first CPU of /proc/cpuinfo reports.

  Returns:
    The present flags in ``SIMD_FLAGS`` order; empty where /proc/cpuinfo is absent
    (macOS, Windows) or lists none of them.
  """
  lines = _cpuinfo_field("flags") or _cpuinfo_field("Features")
  present = set(lines[0].split()) if lines else set()
  return tuple(f for f in SIMD_FLAGS if f in present)


def package_version(name: str) -> str:
  """The installed version of the package imported as ``name``, or "not installed".

  The import name is tried as a distribution name first, then mapped through
  ``importlib.metadata.packages_distributions`` (``sklearn`` -> scikit-learn,
  ``ot`` -> POT, ``tunix`` -> google-tunix). Nothing is imported.
  """
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    pass
  for dist in importlib.metadata.packages_distributions().get(name, ()):
    try:
      return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      continue
  return "not installed"


def machine_line(peers: tuple[str, ...] = ()) -> str:
  """One line recording where and with what a benchmark ran; benchmarks print it first.

  Args:
    peers: import names of the peer packages whose versions to record (a module's
      ``PEERS``).

  Returns:
    ``# machine: <model> (<n> cores); SIMD <flags>; load average <1 min>; python <v>,
    jax <v>, jaxlib <v>[; <peer> <v>, ...]``. Versions come from the installed
    packages' metadata, so the line costs no import.
  """
  flags = " ".join(cpu_flags()) or "none reported"
  versions = ", ".join(f"{p} {package_version(p)}" for p in ("jax", "jaxlib"))
  line = (f"# machine: {cpu_model()}; SIMD {flags}; load average {os.getloadavg()[0]:.2f}; "
          f"python {platform.python_version()}, {versions}")
  if peers:
    line += "; " + ", ".join(f"{p} {package_version(p)}" for p in peers)
  return line

