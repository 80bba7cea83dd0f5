"""Benchmark: our OpenAI-compatible server vs the local backend called directly.

  python -m experiments.benchmarks.experience_library [--lm_workdir=DIR] [--requests=48]
      [--repeats=5] [--max_tokens=64] [--batch_size=8] [--batch_wait_ms=2] [--tiny]

The experience-library method (TSGD) calls its solver and reflector through the
`TextModel` interface; at paper scale that is an HTTP server. This measures what the
HTTP path costs against calling the same checkpoint in-process.

Model: the shared LM of `common.lm` (preset `--lm_preset`, default `quick`: byte-level
Llama, d_model 128, 4 layers, about 0.9M parameters), restored from `--lm_workdir` if
given (trained there first if missing), else freshly initialised (speed does not
depend on the weights, only on how many tokens a completion runs before the end token,
which is printed). It is exported with `save_hf_checkpoint` + `save_byte_tokenizer`
(end token: the newline), and both sides open that folder with
`LocalTextModel.from_checkpoint(batch_size=--batch_size)`.

Work: `--requests` prompts, windows of 24-31 bytes of the stdlib corpus's validation
split (no newline), each one request of one prompt, greedy, `--max_tokens` at most. Every
side returns the same texts (checked).

Sides, for concurrency c:
- direct, c = 1: `LocalTextModel.complete([prompt])`, one call after another.
- direct, c = 8, threads: 8 threads in this process, each calling `complete([prompt])`
  on its share (8 independent in-process callers, no batching between them).
- direct, c = 8, batched: `complete(8 prompts)` per call (the backend's best with 8
  prompts at once; what the server's batcher aims at).
- server, c = 1 and 8: that many client threads calling `HTTPTextModel.complete([prompt])`
  (the completions endpoint) against `python -m experiments.serve_lm` in a subprocess on
  127.0.0.1 (its dynamic batcher merges concurrent requests, `--batch_wait_ms`).

Timed: one untimed warm-up run per side (compilation on both sides), then `--repeats`
rounds that interleave the sides; per run, requests/s and completion tokens/s (tokens
by the checkpoint's tokenizer) over the wall time of all requests, and the p50/p90/p99
of per-request latency; medians over rounds. The HTTP overhead ratio is direct
requests/s / server requests/s at the same concurrency (c = 8: against the batched
direct call); > 1 means the server is slower. ``--tiny`` runs the LM's tiny preset,
4 requests of <= 4 tokens, batch size and concurrency 2, 1 round, in seconds (the
suite's smoke test).
"""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
import jax
import numpy as np

from common import config as config_lib
from common import lm as lm_lib
from common import llm
from common.llm import server as llm_server
from common.data import text
from common.data import tokenizers
from common.models import hf
from common.models import transformer
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_string("lm_workdir", "", "Workdir of a trained LM checkpoint (empty: random init).")
flags.DEFINE_enum("lm_preset", "quick", ["quick", "tiny", "paper"], "LM config preset.")
flags.DEFINE_integer("requests", 48, "Requests per run (one prompt each).")
flags.DEFINE_integer("repeats", 5, "Timed rounds (medians reported).")
flags.DEFINE_integer("max_tokens", 64, "Completion tokens at most.")
flags.DEFINE_integer("batch_size", 8, "Batch size of the local backend, on both sides.")
flags.DEFINE_integer("concurrency", 8, "Client threads of the concurrent runs.")
flags.DEFINE_float("batch_wait_ms", 2.0, "The server's --batch_wait_ms.")
flags.DEFINE_integer("seed", 0, "Weights and prompt seed.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: the tiny LM, 4 requests of <= 4 tokens, "
                  "batch size and concurrency 2, 1 round.")

PEERS = ()  # the peer is our own backend called in-process; the server's stack is below
SERVER_PACKAGES = ("flax", "fastapi", "starlette", "uvicorn", "pydantic", "httpx")

END_ID = 10  # the newline ends a completion (save_byte_tokenizer's default)


def _checkpoint(folder: str, preset: str) -> tuple[str, int]:
  """The LM exported as an HF folder with its tokenizer.json: (folder, parameters)."""
  lm_config = lm_lib.get_config(preset)
  if FLAGS.lm_workdir:
    trained = lm_lib.load_or_train(lm_config, FLAGS.lm_workdir)
    model, params = trained.model, trained.params
  else:
    model = transformer.Transformer(lm_lib.model_config(lm_config))
    params = transformer.init_params(model, jax.random.PRNGKey(FLAGS.seed))
  hf.save_hf_checkpoint(folder, params, model.config)
  tokenizers.save_byte_tokenizer(folder, end_id=END_ID)
  return folder, transformer.num_params(params)


def _prompts(n: int, seed: int) -> list[str]:
  """`n` windows of 24-31 bytes of printable validation text, without newlines."""
  data = bytes(text.stdlib_corpus().validation.astype(np.uint8).tolist()).decode(
      "ascii", errors="replace")
  rng, prompts = np.random.default_rng(seed), []
  while len(prompts) < n:
    start, length = int(rng.integers(0, len(data) - 64)), int(rng.integers(24, 32))
    window = data[start:start + length]
    if window.isprintable() and window.isascii() and window.strip():
      prompts.append(window)
  return prompts


def _closed_loop(call, prompts: list[str], concurrency: int):
  """`concurrency` threads, each sending its share one request after another:
  (wall seconds, per-request latencies, texts)."""
  texts, latencies = [None] * len(prompts), [0.0] * len(prompts)

  def worker(indices):
    for i in indices:
      start = time.perf_counter()
      texts[i] = call([prompts[i]])[0]
      latencies[i] = time.perf_counter() - start

  shares = [range(k, len(prompts), concurrency) for k in range(concurrency)]
  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
    list(pool.map(worker, shares))
  return time.perf_counter() - start, latencies, texts


def _batched(call, prompts: list[str], group: int):
  """One call per `group` prompts; each request's latency is its call's duration."""
  texts, latencies = [], []
  start = time.perf_counter()
  for k in range(0, len(prompts), group):
    t = time.perf_counter()
    texts += call(prompts[k:k + group])
    latencies += [time.perf_counter() - t] * len(prompts[k:k + group])
  return time.perf_counter() - start, latencies, texts


def _sides(direct, client, max_tokens: int, c: int) -> dict:
  """name -> run(prompts) for every side."""
  def complete(model):
    return lambda ps: model.complete(ps, max_tokens=max_tokens, temperature=0.0)

  return {
      "direct, c=1": lambda ps: _closed_loop(complete(direct), ps, 1),
      "server, c=1": lambda ps: _closed_loop(complete(client), ps, 1),
      f"direct, c={c}, threads": lambda ps: _closed_loop(complete(direct), ps, c),
      f"direct, c={c}, batched": lambda ps: _batched(complete(direct), ps, c),
      f"server, c={c}": lambda ps: _closed_loop(complete(client), ps, c),
  }


def _measure(sides: dict, prompts: list[str], tokenizer, repeats: int) -> tuple[dict, list]:
  """Per side, the per-round figures (after one warm-up run each); the texts of one run."""
  texts = {name: run(prompts)[2] for name, run in sides.items()}     # warm-up
  tokens = sum(len(tokenizer.encode(t)) for t in next(iter(texts.values())))
  rounds = {name: [] for name in sides}
  for _ in range(repeats):
    for name, run in sides.items():
      wall, latencies, out = run(prompts)
      texts[name] = out
      ms = np.percentile(np.asarray(latencies) * 1e3, [50, 90, 99])
      rounds[name].append({"rps": len(prompts) / wall, "tps": tokens / wall,
                           "p50": ms[0], "p90": ms[1], "p99": ms[2]})
  return rounds, texts


def _print_table(rounds: dict, c: int) -> None:
  med = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
         for name, runs in rounds.items()}
  print()
  print("| side | requests/s | tokens/s | p50 ms | p90 ms | p99 ms |")
  print("|---|---:|---:|---:|---:|---:|")
  for name, m in med.items():
    print(f"| {name} | {m['rps']:,.1f} | {m['tps']:,.0f} | {m['p50']:.1f} | {m['p90']:.1f} | "
          f"{m['p99']:.1f} |")
  print()
  print("| concurrency | direct requests/s | server requests/s | HTTP overhead (direct / server) |")
  print("|---|---:|---:|---:|")
  for label, direct in (("1", "direct, c=1"), (f"{c} (vs batched)", f"direct, c={c}, batched"),
                        (f"{c} (vs threads)", f"direct, c={c}, threads")):
    server = "server, c=1" if label == "1" else f"server, c={c}"
    print(f"| {label} | {med[direct]['rps']:,.1f} | {med[server]['rps']:,.1f} | "
          f"{med[direct]['rps'] / med[server]['rps']:.2f} |")
  print()
  print("requests/s per round: " + "; ".join(
      f"{name} " + ", ".join(f"{r['rps']:.1f}" for r in runs) for name, runs in rounds.items()))


def _versions() -> str:
  return ", ".join(f"{p} {importlib.metadata.version(p)}" for p in SERVER_PACKAGES)


def parse_flags(argv):
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  for name, minimum in (("requests", 1), ("repeats", 1), ("max_tokens", 1), ("batch_size", 1),
                        ("concurrency", 2)):
    if getattr(FLAGS, name) < minimum:
      config_lib.die(f"--{name} must be >= {minimum}, got {getattr(FLAGS, name)}")
  if not 0 <= FLAGS.batch_wait_ms <= 1000:
    config_lib.die(f"--batch_wait_ms must be in [0, 1000], got {FLAGS.batch_wait_ms}")
  return rest


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  if FLAGS.tiny:
    preset, requests, max_tokens, batch_size, concurrency, repeats = "tiny", 4, 4, 2, 2, 1
  else:
    preset, requests, max_tokens = FLAGS.lm_preset, FLAGS.requests, FLAGS.max_tokens
    batch_size, concurrency, repeats = FLAGS.batch_size, FLAGS.concurrency, FLAGS.repeats
  folder, size = _checkpoint(tempfile.mkdtemp(prefix="bench_serve_lm_"), preset)
  direct = llm.LocalTextModel.from_checkpoint(folder, batch_size=batch_size)
  prompts = _prompts(requests, FLAGS.seed)
  print("# Text-model server benchmark: serve_lm over HTTP vs LocalTextModel in-process")
  print(_versions())
  weights = f"trained in {FLAGS.lm_workdir}" if FLAGS.lm_workdir else "random init"
  print(f"model: {size / 1e6:.2f}M params ({weights}, preset {preset}); "
        f"{len(prompts)} requests of one prompt, <= {max_tokens} tokens, greedy; "
        f"batch size {batch_size}")
  with llm_server.serving(folder, batch_size=batch_size, model_name="bench",
                          batch_wait_ms=FLAGS.batch_wait_ms) as url:
    client = llm.HTTPTextModel(url, timeout=300.0, max_retries=0,
                               max_concurrency=concurrency)
    sides = _sides(direct, client, max_tokens, concurrency)
    rounds, texts = _measure(sides, prompts, direct.tokenizer, repeats)
  reference = texts["direct, c=1"]
  same = all(t == reference for t in texts.values())
  lengths = [len(direct.tokenizer.encode(t)) for t in reference]
  print(f"completion tokens per request: mean {np.mean(lengths):.1f}, min {min(lengths)}, max "
        f"{max(lengths)}; the same texts on every side: {'yes' if same else 'NO'}")
  _print_table(rounds, concurrency)
  sys.stdout.flush()


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
