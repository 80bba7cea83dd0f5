"""Wall-clock timing of jax calls, as the benchmarks and the cost studies measure it."""

import statistics
import time
from typing import Callable

import jax


def median_seconds(fn: Callable[[], object], repeats: int, warmup: bool = True) -> float:
  """Median wall time of `fn()` over `repeats` calls, each waited on with
  `jax.block_until_ready` (jax dispatches asynchronously), after one untimed call that
  compiles (`warmup`)."""
  if warmup:
    jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)
