"""Benchmark: our two-stage kernel ridge dose-response fit vs the same estimator in scikit-learn.

  python -m experiments.benchmarks.kernel_ridge [--ns=2000,8000] [--repeats=5] [--seed=0]
      [--noroofline] [--curve [--curve_ns=2000,...,1000000] [--curve_repeats=3]] [--tiny]

(needs the ``bench`` extra: ``pip install -e '.[test,bench]'``, which adds scikit-learn).

Both sides fit the same estimator, in float64, on the same sample of the ``overlap``
design (``common.data.causal.overlap_design`` with overlap 1.0) with fixed
hyperparameters (``HYPER`` below) and RBF kernels k(a, b) = exp(-||a - b||^2 / (2 l^2)),
i.e. scikit-learn's gamma = 1 / (2 l^2):

  1. stage 1: KRR of y on (t, x) with the product kernel k_T k_X,
     alpha = (K + n lam1 I)^{-1} y;
  2. pseudo-outcomes y~_i = sum_l alpha_l e_l k_T(t_i, t_l), e_l = mean_j k_X(x_j, x_l);
  3. stage 2: KRR of y~ on t with kernel k_T2 and ridge n lam2; theta_hat = its
     prediction on grid = linspace(-1, 1, 100).

Ours runs twice, as two sides: ``methods.kernel_ridge.fit_two_stage(...,
solver="cholesky")`` (exact: the correctness check against scikit-learn) and
``solver="nystrom"`` with m = ``krr.landmark_rule(n)`` = min(ceil(sqrt(n) log n), 1000)
landmarks in both stages (the library's default above ``krr.NYSTROM_MIN_N`` rows);
each is jit-compiled and followed by ``fit.effect(grid).block_until_ready()``;
compilation is excluded by one untimed warm-up call. Nystrom's timed run r draws its
landmarks with PRNGKey(r). The scikit-learn side is ``sklearn.metrics.pairwise.rbf_kernel``
for the Gram matrices, ``KernelRidge(kernel="precomputed")`` for stage 1, numpy for the
pseudo-outcomes and ``KernelRidge(kernel="rbf")`` for stage 2 plus ``predict``; its
timed region is that whole pipeline (it has nothing to compile; one untimed call at
n = 16 only loads its modules).

For each n it prints one markdown table row: median wall time of ``repeats`` runs for
each side (with min-max), the speed-ups sklearn/ours (> 1: ours is faster), the largest
|theta_cholesky - theta_sklearn| on the grid, the integrated squared error (ISE) of
scikit-learn's exact estimate and of each Nystrom run against the true effect
``causal.overlap_effect`` (the mean of the squared error over the grid, as
``methods.kernel_ridge.integrated_squared_error``), the median ratio ISE_Nystrom /
ISE_exact with "equal" when every landmark draw is within 5% of the exact ISE on the
same sample, and the extra peak resident memory of each side (peak RSS of its process
minus its RSS just before the first fit).

Then (unless ``--noroofline``) it measures this machine's float64 GEMM peak and memory
bandwidth (``peak_matmul_flops``, ``stream_bandwidth``) and prints the roofline
fraction reached by the stage-1 Gram matrix, its Cholesky factorisation, the two
triangular solves and the Nystrom normal equations at the largest n (``time_parts``,
``roofline_lines`` give the FLOP counts). With ``--curve``, ours (Nystrom) alone runs at
each of ``--curve_ns`` (up to n = 10^6) with up to ``--curve_repeats`` timed runs
(fewer once they exceed ``--curve_budget_s``), printing time, ISE, an untimed refit at
rank m // 2 (its ISE ratio shows whether m is on the plateau) and peak memory;
scikit-learn's column repeats its time where it ran and otherwise says how much memory
it would need (it is never started above ``SKLEARN_MAX_N``).

Each (side, n) runs in its own freshly spawned process, so memory peaks are per side and
per n and one side's allocations cannot slow the other. The BLAS thread pools seen by
each process are printed first (threadpoolctl), as are relevant environment variables;
the benchmark does not change them. Under the table, for each n, is the share of the
machine's CPU time that other processes used while it ran (Linux /proc/stat minus this
process and its workers): competing processes make multithreaded BLAS/LAPACK times
erratic (threads wait for descheduled siblings), so rerun when that share is not near 0.
Both sides' Cholesky factorisations run in scipy's bundled OpenBLAS (jaxlib's CPU LAPACK
kernels are scipy's). Memory: a few n x n float64 matrices per exact side (n = 8000: up
to ~3 GB); O((n + chunk) m) for Nystrom. ``--tiny`` runs n = 64, 1 repeat, in seconds
(the suite's smoke test), with rough small-size roofline limits, every side in this
process (no spawned workers: their imports would cost most of the run).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import platform
import resource
import sys
import time

from absl import app
from absl import flags
import numpy as np

from common import config as config_lib
from experiments.benchmarks import machine_line
from experiments.benchmarks import peak_matmul_flops
from experiments.benchmarks import proc_status_bytes
from experiments.benchmarks import roofline_line
from experiments.benchmarks import stream_bandwidth

FLAGS = flags.FLAGS
flags.DEFINE_list("ns", ["2000", "8000"], "Comma-separated sample sizes (each >= 16).")
flags.DEFINE_integer("repeats", 5, "Timed runs per side and n (>= 1); medians are reported.")
flags.DEFINE_integer("seed", 0, "PRNG seed of the simulated sample.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: n = 64, 1 repeat.")
flags.DEFINE_bool("curve", False, "Also time ours (Nystrom) at --curve_ns, up to n = 10^6.")
flags.DEFINE_list("curve_ns", ["2000", "8000", "32000", "128000", "500000", "1000000"],
                  "Sample sizes of the --curve (each >= 16).")
flags.DEFINE_integer("curve_repeats", 3, "Most timed runs per curve point (>= 1); a point "
                     "stops repeating once its timed runs exceed --curve_budget_s.")
flags.DEFINE_float("curve_budget_s", 60.0, "Seconds of timed runs after which a curve "
                   "point stops repeating.")
flags.DEFINE_bool("roofline", True, "Time the n x n Gram, its Cholesky, the triangular "
                  "solves and the Nystrom normal equations at the largest --ns and print "
                  "their fraction of this machine's measured peak (float64 GEMM).")

PEERS = ("sklearn",)  # a runtime dependency: listed for its version in the machine line

MIN_N = 16
GRID_POINTS = 100
OVERLAP = 1.0
HYPER = dict(lengthscale_t=1.0, lengthscale_x=0.5, lam1=1e-4, lengthscale_t2=1.0, lam2=1e-4)
SIDES = ("ours", "ours_nystrom", "sklearn")
ISE_TOLERANCE = 0.05  # "equal ISE": |ISE_nystrom / ISE_exact - 1| <= 5%
# scikit-learn's pipeline holds at least K_T, K_X and their product (three n x n float64
# matrices; 5.8 of them at its measured peak at n = 8000). Above this n it is not run:
# the 24 GiB machine is shared.
SKLEARN_MAX_N = 20000
SKLEARN_GRAMS = 3
ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "XLA_FLAGS", "NVPL_BLAS_DEBUG_CPU_TYPE")


def parse_ns(values: list[str]) -> list[int]:
  """The --ns list as ints; raises ValueError naming the first bad value."""
  if not values:
    raise ValueError(f"--ns needs at least one sample size >= {MIN_N}, got none")
  ns = []
  for v in values:
    try:
      n = int(v)
    except ValueError:
      raise ValueError(f"--ns values must be integers >= {MIN_N}, got {v!r}") from None
    if n < MIN_N:
      raise ValueError(f"--ns values must be integers >= {MIN_N}, got {n}")
    ns.append(n)
  return ns


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing whose errors (and bad values) are one-line messages."""
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  try:
    parse_ns(FLAGS.ns)
  except ValueError as e:
    config_lib.die(e)
  if FLAGS.repeats < 1:
    config_lib.die(f"--repeats must be >= 1, got {FLAGS.repeats}")
  try:
    parse_ns(FLAGS.curve_ns)
  except ValueError as e:
    config_lib.die(str(e).replace("--ns", "--curve_ns"))
  if FLAGS.curve_repeats < 1:
    config_lib.die(f"--curve_repeats must be >= 1, got {FLAGS.curve_repeats}")
  return rest


def gamma(lengthscale: float) -> float:
  """scikit-learn's RBF gamma for lengthscale l: exp(-gamma d^2) = exp(-d^2 / (2 l^2))."""
  return 1.0 / (2.0 * lengthscale ** 2)


def evaluation_grid() -> np.ndarray:
  return np.linspace(-1.0, 1.0, GRID_POINTS)


def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(t (n,), x (n, 1), y (n,)) in float64 from the overlap design."""
  import jax  # pylint: disable=import-outside-toplevel
  from common.data import causal  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    data = causal.overlap_design(jax.random.PRNGKey(seed), n, overlap=OVERLAP)
    return tuple(np.asarray(a, dtype=np.float64) for a in data)


def true_effect(grid: np.ndarray) -> np.ndarray:
  from common.data import causal  # pylint: disable=import-outside-toplevel
  return np.asarray(causal.overlap_effect(grid))


# ----------------------------------------------------------------------------- sides


def sklearn_two_stage(t: np.ndarray, x: np.ndarray, y: np.ndarray, grid: np.ndarray,
                      hyper: dict) -> np.ndarray:
  """The two-stage estimator with scikit-learn; returns theta_hat(grid)."""
  from sklearn.kernel_ridge import KernelRidge  # pylint: disable=import-outside-toplevel
  from sklearn.metrics.pairwise import rbf_kernel  # pylint: disable=import-outside-toplevel
  n = t.shape[0]
  t2 = t[:, None]
  k_t = rbf_kernel(t2, t2, gamma=gamma(hyper["lengthscale_t"]))
  k_x = rbf_kernel(x, x, gamma=gamma(hyper["lengthscale_x"]))
  stage1 = KernelRidge(alpha=n * hyper["lam1"], kernel="precomputed").fit(k_t * k_x, y)
  e = k_x.mean(axis=0)                                   # e_l = mean_j k_X(x_j, x_l)
  y_tilde = k_t @ (stage1.dual_coef_ * e)
  stage2 = KernelRidge(alpha=n * hyper["lam2"], kernel="rbf",
                       gamma=gamma(hyper["lengthscale_t2"])).fit(t2, y_tilde)
  return stage2.predict(grid[:, None])


def _rss_kib() -> int | None:
  """Current resident set size in KiB, or None without /proc."""
  try:
    return proc_status_bytes("VmRSS") // 1024
  except (OSError, ValueError):
    return None


def _threadpools() -> list[dict]:
  try:
    import threadpoolctl  # pylint: disable=import-outside-toplevel
  except ImportError:
    return []
  keep = ("user_api", "internal_api", "num_threads", "version", "architecture",
          "threading_layer", "filepath")
  return [{k: p.get(k) for k in keep} for p in threadpoolctl.threadpool_info()]


def _time_ours(t, x, y, grid, repeats: int, solver: str = "cholesky",
               budget_s: float | None = None, half_rank: bool = False
               ) -> tuple[list, list, int | None, dict]:
  """(times, thetas, RSS before the first fit, versions) of ``fit_two_stage`` + ``effect``.

  With ``solver="nystrom"`` (m = ``krr.landmark_rule(n)``) timed run r draws its
  landmarks with PRNGKey(r), so the thetas show the spread over landmark draws. With
  ``budget_s``, repeating stops once the timed runs have taken that long. With
  ``half_rank``, one more untimed fit at rank m // 2 (landmarks PRNGKey(0)) is
  appended to the thetas: if m is statistically sufficient, halving it changes little.
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from methods import kernel_ridge as kr  # pylint: disable=import-outside-toplevel
  times, thetas = [], []
  with jax.enable_x64(True):
    tj, xj, yj, gj = (jax.block_until_ready(jnp.asarray(a)) for a in (t, x, y, grid))
    hyper = kr.TwoStageHyper(**HYPER)

    def once(seed, num_landmarks=None):
      fit = kr.fit_two_stage(tj, xj, yj, hyper, solver=solver, num_landmarks=num_landmarks,
                             key=jax.random.PRNGKey(seed))
      return fit.effect(gj).block_until_ready()

    rss_before = _rss_kib()
    once(repeats)  # compiles; not timed
    for r in range(repeats):
      start = time.perf_counter()
      thetas.append(np.asarray(once(r)))
      times.append(time.perf_counter() - start)
      if budget_s is not None and sum(times) > budget_s:
        break
    if half_rank:
      thetas.append(np.asarray(once(0, max(1, kr.krr.landmark_rule(tj.shape[0]) // 2))))
    versions = {"jax": jax.__version__, "backend": jax.default_backend(),
                "devices": str(jax.devices())}
    return times, thetas, rss_before, versions


def _time_sklearn(t, x, y, grid, repeats: int) -> tuple[list, list, int | None, dict]:
  """(times, theta, RSS before the first fit, versions) of ``sklearn_two_stage``."""
  import sklearn  # pylint: disable=import-outside-toplevel
  times = []
  sklearn_two_stage(t[:MIN_N], x[:MIN_N], y[:MIN_N], grid, HYPER)  # imports only
  rss_before = _rss_kib()
  for _ in range(repeats):
    start = time.perf_counter()
    theta = sklearn_two_stage(t, x, y, grid, HYPER)
    times.append(time.perf_counter() - start)
  return times, [theta], rss_before, {"sklearn": sklearn.__version__}


def run_side(side: str, t: np.ndarray, x: np.ndarray, y: np.ndarray, grid: np.ndarray,
             repeats: int, budget_s: float | None = None) -> dict:
  """Times ``repeats`` fits of one side (in a fresh process); returns times, thetas
  (one per timed run; ``theta`` is the first), memory."""
  timers = {"ours": _time_ours, "sklearn": _time_sklearn,
            "ours_nystrom": lambda *a: _time_ours(*a, solver="nystrom", budget_s=budget_s),
            "ours_nystrom_curve": lambda *a: _time_ours(*a, solver="nystrom",
                                                        budget_s=budget_s, half_rank=True)}
  if side not in timers:
    raise ValueError(f"unknown side {side!r}; expected one of {SIDES}")
  times, thetas, rss_before, versions = timers[side](t, x, y, grid, repeats)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
  thetas = [np.asarray(a, dtype=np.float64) for a in thetas]
  return dict(times=times, theta=thetas[0], thetas=thetas,
              rss_before_kib=rss_before, peak_rss_kib=peak, versions=versions,
              threadpools=_threadpools())


def _busy_seconds() -> float | None:
  """Non-idle CPU seconds of the whole machine since boot (Linux /proc/stat), or None."""
  try:
    with open("/proc/stat") as f:
      fields = [int(v) for v in f.readline().split()[1:]]
  except (OSError, ValueError):
    return None
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
  steal_guest = sum(fields[7:])  # steal, guest, guest_nice: not work done here
  return (sum(fields) - idle - steal_guest) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
  """CPU seconds of this process and its reaped children (the spawned workers)."""
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system


class OtherLoad:
  """Share of the machine's CPU capacity used by other processes over an interval."""

  def __init__(self):
    self.wall, self.busy, self.own = time.monotonic(), _busy_seconds(), _own_seconds()

  def share(self) -> float | None:
    busy = _busy_seconds()
    if busy is None or self.busy is None:
      return None
    wall = time.monotonic() - self.wall
    other = (busy - self.busy) - (_own_seconds() - self.own)
    return max(other, 0.0) / (wall * (os.cpu_count() or 1))


def run_isolated(fn, *args):
  """``fn(*args)`` in a freshly spawned process (clean memory peak, no shared pools);
  under ``--tiny`` in this one (a spawned worker's imports would cost most of a smoke
  run, and its memory figures mean nothing)."""
  if FLAGS.tiny:
    return fn(*args)
  ctx = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
    return pool.submit(fn, *args).result()


# ----------------------------------------------------------------------------- report


def _fmt_s(times: list[float]) -> str:
  return f"{np.median(times):.3f} [{min(times):.3f}-{max(times):.3f}]"


def _fmt_mib(result: dict) -> str:
  if result["rss_before_kib"] is None:
    return "n/a"
  return f"{(result['peak_rss_kib'] - result['rss_before_kib']) / 1024:.0f}"


TABLE_HEADER = (
    "| n | m | ours cholesky: median s [min-max] | ours Nystrom: median s [min-max] "
    "| sklearn: median s [min-max] | speed-up sklearn/cholesky | speed-up sklearn/Nystrom "
    "| max abs theta diff cholesky vs sklearn | ISE sklearn (exact) "
    "| ISE Nystrom: median [min-max] over landmark draws | ISE Nystrom / exact "
    "| extra peak RSS MiB cholesky / Nystrom / sklearn |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def ise(theta: np.ndarray, truth: np.ndarray) -> float:
  """Integrated squared error: the mean of (theta - truth)^2 over the grid."""
  return float(np.mean((theta - truth) ** 2))


def equal_ise(nystrom: dict, exact: dict, truth: np.ndarray) -> tuple[float, bool]:
  """(median Nystrom ISE / exact ISE, whether every landmark draw is within
  ``ISE_TOLERANCE`` of the exact ISE on the same sample)."""
  exact_ise = ise(exact["theta"], truth)
  ratios = np.array([ise(th, truth) for th in nystrom["thetas"]]) / exact_ise
  return float(np.median(ratios)), bool(np.all(np.abs(ratios - 1.0) <= ISE_TOLERANCE))


def table_row(n: int, results: dict, truth: np.ndarray) -> str:
  ours, nys, ref = results["ours"], results["ours_nystrom"], results["sklearn"]
  speedup = np.median(ref["times"]) / np.median(ours["times"])
  speedup_nys = np.median(ref["times"]) / np.median(nys["times"])
  diff = np.max(np.abs(ours["theta"] - ref["theta"]))
  ises = [ise(th, truth) for th in nys["thetas"]]
  ratio, ok = equal_ise(nys, ref, truth)
  return (f"| {n} | {landmarks(n)} | {_fmt_s(ours['times'])} | {_fmt_s(nys['times'])} "
          f"| {_fmt_s(ref['times'])} | {speedup:.2f} | {speedup_nys:.2f} | {diff:.1e} "
          f"| {ise(ref['theta'], truth):.6f} | {np.median(ises):.6f} "
          f"[{min(ises):.6f}-{max(ises):.6f}] | {ratio:.3f} ({'equal' if ok else 'NOT equal'}) "
          f"| {_fmt_mib(ours)} / {_fmt_mib(nys)} / {_fmt_mib(ref)} |")


def landmarks(n: int) -> int:
  """The Nystrom rank the ours_nystrom side uses at n (``krr.landmark_rule``)."""
  from methods.kernel_ridge import krr  # pylint: disable=import-outside-toplevel
  return krr.landmark_rule(n)


def describe_threadpools(side: str, pools: list[dict]) -> list[str]:
  if not pools:
    return [f"  {side}: no BLAS/OpenMP pool found by threadpoolctl"]
  return [f"  {side}: {p['internal_api']} {p['version']} ({p['user_api']}, "
          f"{p['num_threads']} threads, {p['architecture']}, "
          f"{os.path.basename(p['filepath'] or '')})" for p in pools]


def print_header(repeats: int) -> None:
  print(machine_line(PEERS), flush=True)
  print(f"# two-stage KRR benchmark: ours (JAX) vs scikit-learn, repeats={repeats}, "
        f"seed={FLAGS.seed}", flush=True)
  print(f"{platform.machine()}, {len(os.sched_getaffinity(0))} usable CPUs, "
        f"numpy {np.__version__}")
  print("env: " + ", ".join(f"{v}={os.environ.get(v, '<unset>')}" for v in ENV_VARS))
  print(f"hyperparameters: {HYPER}; design: overlap={OVERLAP}; grid: "
        f"linspace(-1, 1, {GRID_POINTS})", flush=True)


def print_versions(results: dict) -> None:
  """The library versions and thread pools of each side's worker process."""
  print("versions: " + ", ".join(
      f"{k} {v}" for side in SIDES for k, v in results[side]["versions"].items()
      if k in ("jax", "sklearn", "backend")))
  print("thread pools (threadpoolctl, per process):")
  for side in SIDES:
    print("\n".join(describe_threadpools(side, results[side]["threadpools"])))
  print("  ours: XLA:CPU runs its own intra-op thread pool (not listed by threadpoolctl)")
  print(flush=True)


def measure(n: int, grid: np.ndarray, repeats: int) -> tuple[dict, str]:
  """Both sides at sample size n: ({side: run_side result}, other processes' CPU share)."""
  t, x, y = sample(n, FLAGS.seed)
  load = OtherLoad()
  results = {}
  for side in SIDES:
    print(f"running {side} at n={n} ...", file=sys.stderr, flush=True)
    results[side] = run_isolated(run_side, side, t, x, y, grid, repeats)
  share = load.share()
  print(f"  n={n}: ours {results['ours']['times']}, sklearn {results['sklearn']['times']}",
        file=sys.stderr, flush=True)
  return results, f"n={n}: " + ("n/a" if share is None else f"{100 * share:.0f}%")


# ----------------------------------------------------------------------------- roofline


def time_parts(n: int, seed: int, repeats: int) -> dict:
  """Median seconds of the hot parts of one stage-1 fit at n (in a fresh process):
  the (n, n) product Gram, its Cholesky factorisation, the two triangular solves, and
  Nystrom's normal equations K_mn K_nm, K_mn y at m = ``krr.landmark_rule(n)``."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from common.timing import median_seconds  # pylint: disable=import-outside-toplevel
  from methods.kernel_ridge import krr  # pylint: disable=import-outside-toplevel
  from methods.kernel_ridge import two_stage  # pylint: disable=import-outside-toplevel
  t, x, y = sample(n, seed)
  m = krr.landmark_rule(n)
  with jax.enable_x64(True):
    k = two_stage.product_kernel("rbf", "rbf", HYPER["lengthscale_t"], HYPER["lengthscale_x"])
    z, yj = (jnp.asarray(t), jnp.asarray(x)), jnp.asarray(y)
    gram_fn = jax.jit(lambda z: k(z, z) + n * HYPER["lam1"] * jnp.eye(n))
    chol_fn = jax.jit(lambda a: jax.scipy.linalg.cho_factor(a, lower=True)[0])
    solve_fn = jax.jit(lambda c, v: jax.scipy.linalg.cho_solve((c, True), v))
    normal_fn = jax.jit(lambda z, v, lm: krr.nystrom_normal_equations(k, z, v, lm, 2048))
    gram = gram_fn(z)
    factor = chol_fn(gram)
    lm = krr.take_rows(z, jax.random.choice(jax.random.PRNGKey(0), n, (m,), replace=False))
    return dict(n=n, m=m, gram=median_seconds(lambda: gram_fn(z), repeats),
                cholesky=median_seconds(lambda: chol_fn(gram), repeats),
                solves=median_seconds(lambda: solve_fn(factor, yj), repeats),
                normal=median_seconds(lambda: normal_fn(z, yj, lm), repeats))


def roofline_lines(parts: dict, peak: float, bandwidth: float) -> list[str]:
  """FLOP and byte counts of each part and its fraction of the machine's limits.

  Gram: squared distances ||a||^2 + ||b||^2 - 2 a.b cost 2d + 4 FLOPs per entry and
  factor (d = 1 for t and for x), the two factors' product 1 more (13 n^2 in all; the
  2 n^2 exp's are not counted as FLOPs); it writes 8 n^2 bytes at least. Cholesky:
  n^3 / 3. Triangular solves: 2 n^2 FLOPs, reading the 8 n^2-byte factor twice.
  Nystrom normal equations: 2 n m^2 + 2 n m FLOPs (K_mn K_nm and K_mn y).
  """
  n, m = parts["n"], parts["m"]
  counts = {"gram": dict(flops=13.0 * n * n, bytes_moved=8.0 * n * n),
            "cholesky": dict(flops=n ** 3 / 3.0),
            "solves": dict(flops=2.0 * n * n, bytes_moved=16.0 * n * n),
            "normal": dict(flops=2.0 * n * m * m + 2.0 * n * m)}
  names = {"gram": f"stage-1 Gram ({n} x {n}, float64)",
           "cholesky": f"Cholesky of the {n} x {n} Gram",
           "solves": "two triangular solves (cho_solve)",
           "normal": f"Nystrom normal equations (n={n}, m={m})"}
  return [f"{roofline_line(names[k], seconds=parts[k], peak_flops=peak, bandwidth=bandwidth, **c)}"
          f" [{parts[k]:.3f} s]" for k, c in counts.items()]


def print_roofline(n: int, repeats: int, tiny: bool = False) -> None:
  """Measures this machine's float64 GEMM peak and bandwidth, then prints the roofline
  fraction of each part of a fit at n (``tiny``: small, rough limit measurements)."""
  peak = peak_matmul_flops(size=256 if tiny else 2048, dtype="float64")
  bandwidth = stream_bandwidth(num_bytes=1 << 22 if tiny else 1 << 28)["best"]
  print(f"\n# measured peak float64 GEMM: XLA {peak['xla'] / 1e9:.1f}, numpy BLAS "
        f"{peak['numpy_blas'] / 1e9:.1f} GFLOP/s; bandwidth {bandwidth / 1e9:.1f} GB/s")
  # --tiny times in this process: a spawned worker's imports would cost most of its run.
  parts = time_parts(n, FLAGS.seed, repeats) if tiny else run_isolated(
      time_parts, n, FLAGS.seed, repeats)
  print("\n".join(roofline_lines(parts, peak["best"], bandwidth)), flush=True)


# ----------------------------------------------------------------------------- curve


CURVE_HEADER = (
    "| n | m | ours Nystrom: median s [min-max] (runs) | ISE ours "
    "| ISE at rank m // 2 / ISE at m (same sample and landmark key) "
    "| extra peak RSS MiB ours | sklearn (exact) |\n|---:|---:|---:|---:|---:|---:|---|")


def sklearn_cell(n: int, measured: dict) -> str:
  """sklearn's median time where it was measured at n, else why it was not run."""
  if n in measured:
    return f"{np.median(measured[n]['times']):.3f} s"
  need_gib = SKLEARN_GRAMS * 8.0 * n * n / 2 ** 30
  if n > SKLEARN_MAX_N:
    return f"out of memory: needs >= {need_gib:.0f} GiB ({SKLEARN_GRAMS} n x n float64)"
  return "not run (add n to --ns)"


def curve_row(n: int, grid: np.ndarray, truth: np.ndarray, sklearn_results: dict) -> str:
  """One curve row: ours (Nystrom, m = landmark_rule(n)) at n in a fresh process."""
  t, x, y = sample(n, FLAGS.seed)
  print(f"running ours_nystrom (curve) at n={n} ...", file=sys.stderr, flush=True)
  res = run_isolated(run_side, "ours_nystrom_curve", t, x, y, grid, FLAGS.curve_repeats,
                     FLAGS.curve_budget_s)
  ises = [ise(th, truth) for th in res["thetas"]]
  return (f"| {n} | {landmarks(n)} | {_fmt_s(res['times'])} ({len(res['times'])}) "
          f"| {np.median(ises[:-1]):.6f} | {ises[-1] / ises[0]:.3f} | {_fmt_mib(res)} "
          f"| {sklearn_cell(n, sklearn_results)} |")


def main(argv):
  del argv
  ns, repeats = ([64], 1) if FLAGS.tiny else (parse_ns(FLAGS.ns), FLAGS.repeats)
  grid = evaluation_grid()
  truth = true_effect(grid)
  print_header(repeats)
  rows, loads, sklearn_results = [], [], {}
  for i, n in enumerate(ns):
    results, load = measure(n, grid, repeats)
    if i == 0:
      print_versions(results)
    rows.append(table_row(n, results, truth))
    loads.append(load)
    sklearn_results[n] = results["sklearn"]
  print(TABLE_HEADER)
  print("\n".join(rows))
  print(f"\nCPU used by other processes while each n ran (share of {os.cpu_count()} CPUs): "
        + "; ".join(loads))
  if FLAGS.roofline:
    print_roofline(max(ns), repeats, FLAGS.tiny)
  if FLAGS.curve:
    load = OtherLoad()
    print("\n" + CURVE_HEADER, flush=True)
    for n in [MIN_N * 4] if FLAGS.tiny else parse_ns(FLAGS.curve_ns):
      print(curve_row(n, grid, truth, sklearn_results), flush=True)
    share = load.share()
    print(f"\nCPU used by other processes during the curve: "
          + ("n/a" if share is None else f"{100 * share:.0f}%"))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
