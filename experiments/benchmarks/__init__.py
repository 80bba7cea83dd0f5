"""Side-by-side benchmarks against peers (see docs/benchmarks.md)."""

import os
import platform


def cpu_model() -> str:
  """The CPU's model name (from /proc/cpuinfo where there is one) and core count."""
  cpu = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    cpu = names[0] if names else cpu
  return f"{cpu} ({os.cpu_count()} cores)"
