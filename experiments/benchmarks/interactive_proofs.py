"""Benchmark: exact F_p arithmetic and the sum-check prover, ours (jitted JAX on int64
words) against `galois` (NumPy-backed finite fields, benchmark-only) and a plain
Python-integer reference.

  python -m experiments.benchmarks.interactive_proofs [--log2_sizes=16,18,20,22] \
      [--sumcheck_vars=10,12,14,16] [--repeats=5] [--tiny]

p = 2^31 - 1 throughout.
  MAC: sum_i a_i b_i mod p over n = 2^k elements. Ours: `PrimeField.dot` (each product
      reduced, then one sum), jitted. galois: `np.add.reduce(a * b)` on two `GF(p)`
      arrays (its default "jit-calculate" ufuncs): 20-25x faster than `np.dot` on
      them, which we measured first, so the peer gets the faster form.
  MLE: the multilinear extension of a 2^k table at a random point (k folds,
      O(2^k)). Ours: `polynomials.mle_eval`, jitted. galois: the same folds on `GF(p)`
      arrays (galois has no MLE routine; its field arithmetic is what is timed).
  sum-check prover: the honest prover for g = f1~ f2~ f3~ (three tables of 2^n entries,
      degree 3), all n rounds on fixed challenges. Ours: `sumcheck.run` with a
      `TableProver`, jitted. Reference: the same algorithm on Python ints (lists), the
      textbook implementation. The messages are checked equal.
Figures: medians of `--repeats` timed runs after an untimed warm-up (ours compiled
first), and the ratios peer / ours (> 1: ours is faster). ``--tiny`` runs n = 2^10 and
a 6-variable sum-check, 1 repeat, in seconds (the suite's smoke test); the equality
checks run as at full size.
"""

from __future__ import annotations

from absl import app
from absl import flags
import jax
import numpy as np

from common import timing
from experiments.benchmarks import machine_line
from methods.interactive_proofs import polynomials as poly
from methods.interactive_proofs import sumcheck
from methods.interactive_proofs.field import PrimeField

FLAGS = flags.FLAGS
flags.DEFINE_list("log2_sizes", ["16", "18", "20", "22"], "log2 of the MAC / MLE sizes.")
flags.DEFINE_list("sumcheck_vars", ["10", "12", "14", "16"], "Sum-check variables n.")
flags.DEFINE_integer("repeats", 5, "Timed runs per side (medians reported).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: n = 2^10, 6 sum-check variables, "
                  "1 repeat.")

PEERS = ("galois",)

P = 2**31 - 1


def bench_mac_and_mle(GF, F: PrimeField, k: int, repeats: int) -> dict:
  rng = np.random.default_rng(k)
  a, b = rng.integers(0, P, 2**k), rng.integers(0, P, 2**k)
  point = rng.integers(0, P, k)
  ja, jb, jp = F.element(a), F.element(b), F.element(point)
  ga, gb, gp = GF(a), GF(b), GF(point)
  dot = jax.jit(F.dot)
  mle = jax.jit(lambda t, r: poly.mle_eval(F, t, r))

  def galois_mle():
    t = ga
    for r in gp:
      half = t.size // 2
      t = t[:half] + r * (t[half:] - t[:half])
    return t[0]

  galois_mac = lambda: np.add.reduce(ga * gb)
  assert int(dot(ja, jb)) == int(galois_mac()) == int(np.dot(ga, gb)), "MAC disagrees"
  assert int(mle(ja, jp)) == int(galois_mle()), "MLE disagrees"
  out = {"k": k,
         "mac_ours_s": timing.median_seconds(lambda: dot(ja, jb), repeats),
         "mac_galois_s": timing.median_seconds(galois_mac, repeats),
         "mle_ours_s": timing.median_seconds(lambda: mle(ja, jp), repeats),
         "mle_galois_s": timing.median_seconds(galois_mle, repeats)}
  out["mac_ratio"] = out["mac_galois_s"] / out["mac_ours_s"]
  out["mle_ratio"] = out["mle_galois_s"] / out["mle_ours_s"]
  return out


def python_prover(tables: list[list[int]], challenges: list[int], degree: int) -> list:
  """The textbook sum-check prover for prod_j f_j~ on Python integers."""
  messages = []
  for r in challenges:
    half = len(tables[0]) // 2
    values = []
    for t in range(degree + 1):
      total = 0
      for i in range(half):
        prod = 1
        for f in tables:
          prod = prod * (f[i] + t * (f[half + i] - f[i])) % P
        total += prod
      values.append(total % P)
    messages.append(values)
    tables = [[(f[i] + r * (f[half + i] - f[i])) % P for i in range(half)] for f in tables]
  return messages


def bench_sumcheck(F: PrimeField, n: int, repeats: int) -> dict:
  rng = np.random.default_rng(100 + n)
  tables = rng.integers(0, P, (3, 2**n))
  challenges = rng.integers(0, P, n)
  statement = sumcheck.ProductSum(F.element(tables)[None], F.element([1]))
  prove = jax.jit(lambda st, ch: sumcheck.run(sumcheck.TableProver.create(F, st, 3), ch).messages)
  ours = np.asarray(prove(statement, F.element(challenges)))
  py_tables, py_ch = [[int(v) for v in f] for f in tables], [int(v) for v in challenges]
  assert (ours == np.asarray(python_prover(py_tables, py_ch, 3))).all(), "messages disagree"
  out = {"n": n,
         "ours_s": timing.median_seconds(lambda: prove(statement, F.element(challenges)),
                                         repeats),
         "python_s": timing.median_seconds(lambda: python_prover(py_tables, py_ch, 3),
                                           max(1, repeats // 2))}
  out["ratio"] = out["python_s"] / out["ours_s"]
  return out


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  import galois  # pylint: disable=import-outside-toplevel

  jax.config.update("jax_enable_x64", True)
  F, GF = PrimeField(P), galois.GF(P)
  if FLAGS.tiny:
    log2_sizes, sumcheck_vars, repeats = [10], [6], 1
  else:
    log2_sizes, repeats = [int(k) for k in FLAGS.log2_sizes], FLAGS.repeats
    sumcheck_vars = [int(n) for n in FLAGS.sumcheck_vars]
  print(f"numpy {np.__version__}; p = 2^31 - 1")
  print("| n | MAC ours (ms) | MAC galois (ms) | galois / ours | MLE ours (ms) | "
        "MLE galois (ms) | galois / ours |")
  print("|---|---|---|---|---|---|---|")
  for k in log2_sizes:
    r = bench_mac_and_mle(GF, F, k, repeats)
    print(f"| 2^{k} | {1e3 * r['mac_ours_s']:.3f} | {1e3 * r['mac_galois_s']:.3f} | "
          f"{r['mac_ratio']:.1f}x | {1e3 * r['mle_ours_s']:.3f} | "
          f"{1e3 * r['mle_galois_s']:.3f} | {r['mle_ratio']:.1f}x |")
  print("\n| sum-check n (degree 3) | ours (ms) | Python ints (ms) | Python / ours |")
  print("|---|---|---|---|")
  for n in sumcheck_vars:
    r = bench_sumcheck(F, n, repeats)
    print(f"| {n} | {1e3 * r['ours_s']:.3f} | {1e3 * r['python_s']:.1f} | {r['ratio']:.0f}x |")


if __name__ == "__main__":
  app.run(main)
