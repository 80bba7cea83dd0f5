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



# --- This machine's limits, for roofline fractions -----------------------------------
#
# A memory-bound hot path (cached decoding reads every weight and the KV cache once per
# step) cannot beat bytes_moved / bandwidth; a compute-bound one (prefill, Gram
# matrices) cannot beat flops / peak. Benchmarks measure both limits in the same run
# as the path they time and print the fraction reached.


def proc_status_bytes(field: str) -> int:
  """A ``kB`` field of /proc/self/status (VmRSS, VmHWM) in bytes (Linux only).

  Raises:
    OSError: without /proc; ValueError: when the field is missing.
  """
  with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise ValueError(f"/proc/self/status has no {field}")


def stream_bandwidth(num_bytes: int = 1 << 28, repeats: int = 5) -> dict[str, float]:
  """This machine's memory bandwidth in bytes/s, measured like STREAM's copy and scale.

  Two kernels over float32 arrays of ``num_bytes`` (far larger than the last-level
  cache): numpy's ``copyto`` (one thread: STREAM copy, b = a) and a jitted XLA
  ``a * 3`` (XLA's multi-threaded CPU loop: STREAM scale). Each moves 2 * num_bytes
  (one read, one write; the write-allocate read is not counted, as in STREAM).

  Returns:
    ``{"copy_numpy": ..., "scale_xla": ..., "best": max of the two}`` in bytes/s.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from common.timing import median_seconds  # pylint: disable=g-import-not-at-top
  n = num_bytes // 4
  a = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
  b = np.empty_like(a)
  copy_s = median_seconds(lambda: np.copyto(b, a), repeats)
  scale = jax.jit(lambda x: x * 3.0)
  x = jax.device_put(a)
  scale_s = median_seconds(lambda: scale(x), repeats)
  out = {"copy_numpy": 2 * num_bytes / copy_s, "scale_xla": 2 * num_bytes / scale_s}
  out["best"] = max(out.values())
  return out


def peak_matmul_flops(size: int = 2048, dtype: str = "float32",
                      repeats: int = 5) -> dict[str, float]:
  """This machine's measured peak matmul rate in FLOP/s: a square ``size`` GEMM.

  Measured with XLA (``jnp.dot`` under jit) and with numpy's BLAS; a (size, size) @
  (size, size) product is 2 * size^3 FLOPs.

  Returns:
    ``{"xla": ..., "numpy_blas": ..., "best": max of the two}`` in FLOP/s.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from common.timing import median_seconds  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  a = rng.standard_normal((size, size)).astype(dtype)
  b = rng.standard_normal((size, size)).astype(dtype)
  flops = 2.0 * size ** 3
  dot = jax.jit(jnp.dot)
  xa, xb = jax.device_put(a), jax.device_put(b)
  xla_s = median_seconds(lambda: dot(xa, xb), repeats)
  blas_s = median_seconds(lambda: np.dot(a, b), repeats)
  out = {"xla": flops / xla_s, "numpy_blas": flops / blas_s}
  out["best"] = max(out.values())
  return out


def roofline_line(name: str, *, seconds: float, bytes_moved: float | None = None,
                  flops: float | None = None, bandwidth: float | None = None,
                  peak_flops: float | None = None) -> str:
  """One printed line: the rate a timed path reached and its fraction of this machine's.

  Args:
    name: what was timed (e.g. ``"ours decode step"``).
    seconds: its measured time.
    bytes_moved: bytes it must read or write at least once (memory-bound paths).
    flops: floating-point operations it performs (compute-bound paths).
    bandwidth: ``stream_bandwidth()["best"]``, bytes/s.
    peak_flops: ``peak_matmul_flops()["best"]``, FLOP/s.

  Returns:
    e.g. ``# roofline ours decode step: 14.2 GB/s = 61% of measured bandwidth 23.1 GB/s``.
  """
  if seconds <= 0:
    raise ValueError(f"seconds must be positive, got {seconds}")
  parts = []
  for amount, limit, scale, unit, digits, what in (
      (bytes_moved, bandwidth, 1e9, "GB/s", 2, "measured bandwidth"),
      (flops, peak_flops, 1e9, "GFLOP/s", 1, "measured peak")):
    if amount is None:
      continue
    rate = amount / seconds
    part = f"{rate / scale:.{digits}f} {unit}"
    if limit:
      part += f" = {100 * rate / limit:.0f}% of {what} {limit / scale:.1f} {unit}"
    parts.append(part)
  if not parts:
    raise ValueError("roofline_line needs bytes_moved or flops")
  return f"# roofline {name}: " + "; ".join(parts)
