"""Benchmark: our pairwise GP (JAX) vs BoTorch's ``PairwiseGP`` on the same comparisons.

  python -m experiments.benchmarks.lilo [--comparisons=32,128,512] [--repeats=5]
      [--warmup=3] [--seed=0] [--max_points=128] [--eubo_points=50] [--nei_batches=128] [--q=4]
      [--mc_samples=256] [--tiny]

(needs the ``bench`` extra: ``pip install -e '.[test,bench]'``, which adds botorch,
gpytorch and torch; nothing at run time imports them).

Data, the same for both sides (float64): for m comparisons, n = min(m / 2, max_points)
points X uniform in [0, 1]^8 and m distinct random pairs of them. The utility is a fixed
smooth function of DTLZ2's outcomes: u(x) = sum_i f_i(x), the four DTLZ2 objectives
(M = 4, d = 8; maximised, as in LILO's public code), and each pair is labelled by
u + N(0, 0.1^2) noise drawn per pair and point (the label accuracy against the noiseless
utility is printed).

* ours: ``methods.lilo.gp.fit_pairwise_gp`` (Laplace MAP by damped Newton, optax L-BFGS
  on the Laplace evidence + BoTorch's priors, at most 100 iterations), jit-compiled; one
  untimed fit compiles first.
* BoTorch: ``PairwiseGP(X, C)`` with its defaults (ScaleKernel(RBF-ARD), Gamma(2.4, 2.7)
  lengthscale prior started at its mode, outputscale in [0.005, 200] started at 1 with
  SmoothedBoxPrior(0.01, 100), jitter 1e-6, probit likelihood with z clamped to [-3, 3])
  fitted by ``fit_gpytorch_mll(PairwiseLaplaceMarginalLogLikelihood(...))`` (scipy
  L-BFGS-B); the timed region is construction + fit.

Reported per m: Spearman rank correlation of the two posterior means on 1000 held-out
points (and of each with the true utility), the hyperparameters side by side with our
objective (Laplace log evidence + log priors) at each side's hyperparameters, and
medians of ``repeats`` wall times as ratios BoTorch / ours (> 1: ours faster) of
  - the fit;
  - analytic EUBO of all 1225 pairs of 50 held-out points, ranked (ours:
    ``pairwise_posterior`` at the 50 points + ``top_eubo_pairs``; BoTorch:
    ``AnalyticExpectedUtilityOfBestOption`` on the (1225, 2, 8) batch + ``topk``);
  - one qLogNEI evaluation batch: ``nei_batches`` random q-batches (q = 4) with 256
    samples and the n training points as baseline (ours: ``q_log_nei`` vmapped and
    jitted, compilation excluded; BoTorch: ``qLogNoisyExpectedImprovement`` with a
    ``SobolQMCNormalSampler(256)``); both sides first prune the baseline to the points
    that are the maximum in some of 2048 joint samples (ours ``prune_baseline``,
    BoTorch's default ``prune_baseline=True`` in the constructor), untimed; the kept
    counts and the Spearman correlation of the two sides' values are printed.
Both sides run in one process, one after the other, each after ``warmup`` untimed calls;
torch uses its default thread count. The last column is the share of the machine's CPU
that other processes used while that m ran (/proc/stat minus this process): rerun when
it is not near 0. ``--tiny`` sets the sizes of ``TINY`` (16 comparisons, 1 repeat, 6 EUBO
points, 4 qLogNEI batches of 16 samples), in seconds (the suite's smoke test).
"""

from __future__ import annotations

import itertools
import os
import platform
import sys
import time
import warnings

from absl import app
from absl import flags
import numpy as np

from common import config as config_lib
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_list("comparisons", ["32", "128", "512"], "Numbers of comparisons (>= 4).")
flags.DEFINE_integer("repeats", 5, "Timed runs per side and measurement (>= 1).")
flags.DEFINE_integer("warmup", 3, "Untimed runs first, per side and measurement (>= 1).")
flags.DEFINE_integer("seed", 0, "Seed of the points, pairs and label noise.")
flags.DEFINE_integer("max_points", 128, "Cap on the number of compared points n (>= 4).")
flags.DEFINE_integer("eubo_points", 50, "Points whose pairs EUBO ranks (>= 2).")
flags.DEFINE_integer("nei_batches", 128, "q-batches in one qLogNEI evaluation (>= 1).")
flags.DEFINE_integer("q", 4, "Batch size q of qLogNEI (>= 1).")
flags.DEFINE_integer("mc_samples", 256, "Posterior samples of qLogNEI (>= 1).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: the sizes of TINY, which override "
                  "the flags above.")

PEERS = ("torch", "botorch", "gpytorch")
# --tiny's flag values: every code path at sizes that run in seconds.
TINY = dict(comparisons=["16"], repeats=1, warmup=1, eubo_points=6, nei_batches=4,
            mc_samples=16)

DIM = 8
NUM_OUTCOMES = 4
LABEL_NOISE = 0.1
HELD_OUT = 1000


def dtlz2_utility(X: np.ndarray) -> np.ndarray:
  """u(x) = sum_i f_i(x) over DTLZ2's M = 4 objectives, g = sum_{j >= 3} (x_j - 1/2)^2."""
  g = np.sum((X[:, NUM_OUTCOMES - 1:] - 0.5) ** 2, axis=1)
  c, s = np.cos(np.pi * X / 2), np.sin(np.pi * X / 2)
  f = [np.prod(c[:, :NUM_OUTCOMES - 1], axis=1)]
  for i in range(2, NUM_OUTCOMES + 1):
    f.append(np.prod(c[:, :NUM_OUTCOMES - i], axis=1) * s[:, NUM_OUTCOMES - i])
  return (1.0 + g) * np.sum(f, axis=0)


def make_data(m: int, seed: int) -> dict:
  """Points, m noisy comparisons, held-out points, EUBO points and qLogNEI batches."""
  rng = np.random.default_rng([seed, m])
  n = min(m // 2, FLAGS.max_points)
  X = rng.random((n, DIM))
  pairs = np.asarray(list(itertools.combinations(range(n), 2)))
  pairs = pairs[rng.choice(len(pairs), size=m, replace=len(pairs) < m)]
  noisy = dtlz2_utility(X)[pairs] + LABEL_NOISE * rng.standard_normal(pairs.shape)
  C = np.where((noisy[:, 0] > noisy[:, 1])[:, None], pairs, pairs[:, ::-1])
  u = dtlz2_utility(X)
  return dict(X=X, C=C, n=n, accuracy=float(np.mean(u[C[:, 0]] > u[C[:, 1]])),
              test=rng.random((HELD_OUT, DIM)), eubo=rng.random((FLAGS.eubo_points, DIM)),
              raw=rng.random((FLAGS.nei_batches, FLAGS.q, DIM)))


def _timed(fn, repeats: int) -> tuple[list[float], object]:
  """(wall times of ``repeats`` calls, the last result) after ``--warmup`` untimed calls
  (ours: compilation; BoTorch: its first calls are several times slower too)."""
  for _ in range(FLAGS.warmup):
    out = fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - start)
  return times, out


def ours(data: dict, repeats: int) -> dict:
  """Fit, posterior mean, EUBO ranking and qLogNEI with methods.lilo (float64)."""
  import jax  # pylint: disable=import-outside-toplevel
  from methods.lilo import acquisition  # pylint: disable=import-outside-toplevel
  from methods.lilo import gp  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    X, C = jax.device_put(data["X"]), jax.device_put(data["C"])
    fit_times, model = _timed(
        lambda: jax.block_until_ready(gp.fit_pairwise_gp(X, C)), repeats)
    mean = np.asarray(gp.pairwise_posterior(model, data["test"])[0])
    Xe = jax.device_put(data["eubo"])
    k = len(Xe) * (len(Xe) - 1) // 2
    eubo_times, _ = _timed(lambda: jax.block_until_ready(
        acquisition.top_eubo_pairs(*gp.pairwise_posterior(model, Xe), k)), repeats)
    key = jax.random.PRNGKey(FLAGS.seed)
    post = lambda Z: gp.pairwise_posterior(model, Z)
    Xb = acquisition.prune_baseline(post, model.X, jax.random.fold_in(key, 1))
    nei = jax.jit(jax.vmap(lambda Xq: acquisition.q_log_nei(
        post, Xb, Xq, key, num_samples=FLAGS.mc_samples)))
    raw = jax.device_put(data["raw"])
    nei_times, values = _timed(lambda: jax.block_until_ready(nei(raw)), repeats)
    return dict(fit=fit_times, eubo=eubo_times, nei=nei_times, mean=mean,
                nei_values=np.asarray(values), baseline=len(Xb),
                lengthscales=np.asarray(model.lengthscales),
                outputscale=float(model.outputscale))


def _botorch_fit(X, C):
  from botorch.fit import fit_gpytorch_mll  # pylint: disable=import-outside-toplevel
  from botorch.models import PairwiseGP  # pylint: disable=import-outside-toplevel
  from botorch.models.pairwise_gp import (  # pylint: disable=import-outside-toplevel
      PairwiseLaplaceMarginalLogLikelihood)
  model = PairwiseGP(X, C)
  fit_gpytorch_mll(PairwiseLaplaceMarginalLogLikelihood(model.likelihood, model))
  return model


def botorch_side(data: dict, repeats: int) -> dict:
  """The same measurements with BoTorch's PairwiseGP and acquisition functions."""
  import torch  # pylint: disable=import-outside-toplevel
  from botorch.acquisition import logei  # pylint: disable=import-outside-toplevel
  from botorch.acquisition import preference  # pylint: disable=import-outside-toplevel
  from botorch.sampling import SobolQMCNormalSampler  # pylint: disable=import-outside-toplevel
  tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)
  X, C = tensor(data["X"]), torch.as_tensor(data["C"], dtype=torch.long)
  fit_times, model = _timed(lambda: _botorch_fit(X, C), repeats)
  with torch.no_grad():
    mean = model.posterior(tensor(data["test"])).mean.squeeze(-1).numpy()
    Xe = tensor(data["eubo"])
    i, j = np.triu_indices(len(Xe), k=1)
    pairs = torch.stack([Xe[i], Xe[j]], dim=1)                  # (k, 2, d)
    eubo = preference.AnalyticExpectedUtilityOfBestOption(pref_model=model)
    eubo_times, _ = _timed(lambda: torch.topk(eubo(pairs), len(i)), repeats)
    nei = logei.qLogNoisyExpectedImprovement(
        model=model, X_baseline=X,
        sampler=SobolQMCNormalSampler(torch.Size([FLAGS.mc_samples]), seed=FLAGS.seed))
    raw = tensor(data["raw"])
    nei_times, values = _timed(lambda: nei(raw), repeats)
  kernel = model.covar_module
  return dict(fit=fit_times, eubo=eubo_times, nei=nei_times, mean=mean,
              nei_values=values.numpy(), baseline=len(nei.X_baseline),
              lengthscales=kernel.base_kernel.lengthscale.detach().numpy().ravel(),
              outputscale=float(kernel.outputscale))


def our_objective(data: dict, lengthscales, outputscale) -> float:
  """Our fit's objective, Laplace log evidence + log priors, at given hyperparameters."""
  import jax  # pylint: disable=import-outside-toplevel
  from methods.lilo import gp  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    lml = gp.laplace_log_marginal(np.asarray(lengthscales, np.float64), float(outputscale),
                                  data["X"], data["C"])
    return float(lml + gp.log_prior(np.asarray(lengthscales, np.float64),
                                    float(outputscale)))


def _cpu_seconds() -> tuple[float, float] | None:
  """(non-idle CPU seconds of the machine, CPU seconds of this process), or None."""
  try:
    with open("/proc/stat") as f:
      fields = [int(v) for v in f.readline().split()[1:]]
  except (OSError, ValueError):
    return None
  busy = sum(fields[:8]) - fields[3] - fields[4] - fields[7]   # minus idle, iowait, steal
  t = os.times()
  return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system


class OtherLoad:
  """Share of the machine's CPU capacity used by other processes over an interval."""

  def __init__(self):
    self.wall, self.start = time.monotonic(), _cpu_seconds()

  def share(self) -> float | None:
    end = _cpu_seconds()
    if end is None or self.start is None:
      return None
    other = (end[0] - self.start[0]) - (end[1] - self.start[1])
    return max(other, 0.0) / ((time.monotonic() - self.wall) * (os.cpu_count() or 1))


def _median_ms(times: list[float]) -> str:
  return f"{1e3 * np.median(times):.1f}"


def measure(m: int, repeats: int) -> tuple[str, list[str]]:
  """One row of the timing/agreement table and the hyperparameter rows, at m."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  data = make_data(m, FLAGS.seed)
  load = OtherLoad()
  a = ours(data, repeats)
  b = botorch_side(data, repeats)
  share = load.share()
  truth = dtlz2_utility(data["test"])
  for key in ("fit", "eubo", "nei"):
    print(f"  m={m} {key} ms: ours {np.round(1e3 * np.asarray(a[key]), 1).tolist()}, "
          f"BoTorch {np.round(1e3 * np.asarray(b[key]), 1).tolist()}", file=sys.stderr)
  rho = lambda x, y: stats.spearmanr(x, y).statistic
  ratio = lambda key: np.median(b[key]) / np.median(a[key])
  row = (f"| {m} | {data['n']} | {data['accuracy']:.2f} | {rho(a['mean'], b['mean']):.3f} "
         f"| {rho(a['mean'], truth):.3f} / {rho(b['mean'], truth):.3f} "
         f"| {_median_ms(a['fit'])} / {_median_ms(b['fit'])} | {ratio('fit'):.2f} "
         f"| {_median_ms(a['eubo'])} / {_median_ms(b['eubo'])} | {ratio('eubo'):.2f} "
         f"| {_median_ms(a['nei'])} / {_median_ms(b['nei'])} | {ratio('nei'):.2f} "
         f"| {a['baseline']} / {b['baseline']} "
         f"| {rho(a['nei_values'], b['nei_values']):.3f} "
         f"| {'n/a' if share is None else f'{100 * share:.0f}%'} |")
  hyper = []
  for side, r in (("ours", a), ("BoTorch", b)):
    ls = ", ".join(f"{v:.2f}" for v in r["lengthscales"])
    hyper.append(f"| {m} | {side} | {ls} | {r['outputscale']:.3f} "
                 f"| {our_objective(data, r['lengthscales'], r['outputscale']):.3f} |")
  return row, hyper


TABLE_HEADER = (
    "| m | n | label acc | Spearman mean ours~BoTorch | Spearman with u: ours / BoTorch "
    "| fit ms ours / BoTorch | fit BoTorch/ours | EUBO ms ours / BoTorch "
    "| EUBO BoTorch/ours | qLogNEI ms ours / BoTorch | qLogNEI BoTorch/ours "
    "| baseline kept ours / BoTorch | Spearman qLogNEI ours~BoTorch | CPU of others |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
HYPER_HEADER = ("| m | side | lengthscales (8) | outputscale | our objective at these |\n"
                "|---:|---|---|---:|---:|")


def print_header() -> None:
  import jax  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  print(f"# pairwise GP benchmark: ours (JAX) vs BoTorch PairwiseGP, repeats={FLAGS.repeats}, "
        f"seed={FLAGS.seed}")
  print(f"{platform.machine()}, numpy {np.__version__}, jax backend {jax.default_backend()}, "
        f"torch {torch.get_num_threads()} threads")
  print(f"data: d={DIM}, u = sum of DTLZ2's {NUM_OUTCOMES} objectives, label noise "
        f"N(0, {LABEL_NOISE}^2), n = min(m/2, {FLAGS.max_points}); EUBO over "
        f"{FLAGS.eubo_points} points; qLogNEI {FLAGS.nei_batches} batches of q={FLAGS.q}, "
        f"{FLAGS.mc_samples} samples", flush=True)


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing whose errors (and bad values) are one-line messages."""
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  if FLAGS.tiny:
    for name, value in TINY.items():
      setattr(FLAGS, name, value)
  try:
    ms = [int(v) for v in FLAGS.comparisons]
  except ValueError:
    config_lib.die(f"--comparisons must be integers >= 4, got {','.join(FLAGS.comparisons)}")
  if not ms or min(ms) < 4:
    config_lib.die(f"--comparisons must be integers >= 4, got {','.join(FLAGS.comparisons)}")
  for name, low in (("repeats", 1), ("warmup", 1), ("max_points", 4), ("eubo_points", 2),
                    ("nei_batches", 1), ("q", 1), ("mc_samples", 1)):
    if getattr(FLAGS, name) < low:
      config_lib.die(f"--{name} must be >= {low}, got {getattr(FLAGS, name)}")
  return rest


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  warnings.simplefilter("ignore")       # BoTorch's input-scaling and fitting notices
  print_header()
  rows, hyper = [], []
  for m in (int(v) for v in FLAGS.comparisons):
    row, h = measure(m, FLAGS.repeats)
    print(row, flush=True)
    rows.append(row)
    hyper += h
  print("\n" + TABLE_HEADER + "\n" + "\n".join(rows))
  print("\n" + HYPER_HEADER + "\n" + "\n".join(hyper))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
