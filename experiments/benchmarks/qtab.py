"""Benchmark: Q-Tab (JAX) against CTGAN and TVAE (PyTorch, the SDV project's `ctgan` package).

  python -m experiments.benchmarks.qtab [--table=fair] [--max_rows=3000] [--epochs=300]
      [--repeats=3] [--num_samples=10000] [--torch_threads=0] [--tiny]

The three models train on the same training rows of one bundled table
(`tables.load_table(max_rows=)`, then `tables.split` with the experiment's test
fraction 0.25), for the same number of epochs, on the CPU, in one run. Figures are
medians over `--repeats` runs; each peer's is set beside Q-Tab's with the ratio
Q-Tab / peer:

1. Training throughput and median fit seconds. An epoch is one pass over the n
   training rows. CTGAN takes max(n // B, 1) steps of B rows (its own count), real rows
   through the discriminator, one discriminator step per generator step (its default):
   epochs x steps x B rows. TVAE's DataLoader (drop_last=False) takes ceil(n / B)
   steps, the last one partial: epochs x n rows. Q-Tab takes max(n // B, 1) steps of B
   rows per stage and trains in two stages, each counted: an epoch of Q-Tab is one
   tokenizer epoch plus one generator epoch, so its rows processed are epochs x
   (tokenizer steps x B_tok + generator steps x B_gen), about twice n per epoch.
   rows/s = rows processed / wall seconds of a whole training run: for Q-Tab the
   `TableEncoder` fit, the tokenizer's steps, tokenizing the rows and the generator's
   steps; for the peers `CTGAN.fit` / `TVAE.fit`, their shared mode-specific
   normalisation (`DataTransformer`: one Bayesian GMM per numeric column, timed apart
   too) included. Epochs/s is printed beside it.
   Q-Tab's steps are `common.train.train_step` (the loop's jitted, donating step, with
   the experiment's loss functions `tok_lib.make_loss_fn`, `gen_lib.make_loss_fn`
   and `training.optimizer`, batches from `training.rows_batch_fn`), called in a plain
   loop, so no checkpoint or metrics I/O is timed; one untimed run of one step per
   stage compiles first. Each peer gets one untimed 1-epoch fit first.
2. Sampling throughput: `--num_samples` rows from each trained model. Q-Tab: one
   jitted `model.generate` (MaskGIT, the experiment's sampling settings), timed alone
   and with `TableEncoder.decode` to a frame (`common.timing.median_seconds`, after a
   compiling call); CTGAN and TVAE: their `.sample(n)`, which returns a frame.
3. Quality, n rows sampled from each model, scored with `methods.qtab.metrics`: column
   shapes and pair trends (sdmetrics' QualityReport) against the training rows, and
   MLE on the held-out rows (HistGradientBoosting trained on the synthetic rows: ROC
   AUC, macro-F1 or R^2). Columns: CTGAN and TVAE after `--epochs`; Q-Tab at equal wall
   time, i.e. for as many epochs as fit in CTGAN's median training time (at the pace of
   its timed runs, at least 1 epoch), and likewise at TVAE's (one column when both give
   the same epochs); Q-Tab after the full `--epochs`; the real training rows' MLE.

Sizes. Q-Tab: the experiment's `quick` preset (tokenizer 8 bits x 4 levels, MLPs
2 x 256, fine corruption at 0.2; generator width 64, depth 2, 4 heads; batches 256 and
128; learning rate 1e-3; 8 MaskGIT steps, random order). CTGAN: the defaults of its
docstring, which its README uses (embedding 128, generator and discriminator
(256, 256), batch 500, pac 10, Adam 2e-4, one discriminator step, log-frequency
conditional sampling). TVAE: the defaults of its constructor (embedding 128, compress
and decompress (128, 128), l2scale 1e-5, batch 500, loss_factor 2, Adam 1e-3). Both
peers get `enable_gpu=False` (0.12 deprecates `cuda=False` for it), the schema's
categorical columns as `discrete_columns`, and `torch.set_num_threads` at the
machine's cores (`--torch_threads` overrides). The README documents no other CPU
setting. On a loaded machine torch's intra-op pool degrades badly (threads wait for
descheduled siblings): with another job on both cores of a 2-core machine, a 2-epoch
CTGAN fit on fair took 15 s at 2 threads and 0.5 s at 1, so run this on an idle machine,
or pass `--torch_threads=1` to give the peers their best case there. `--tiny` is a
seconds-long check: 300 rows, 1 epoch, 1 repeat, 1000 samples, small networks on all
sides, torch on 1 thread unless `--torch_threads` says otherwise (the smoke test runs
beside the rest of the suite, where 2 threads can stall for minutes).

torch and ctgan come from the `bench` extra and are imported inside functions, so this
module imports without them. The machine's load average is printed before and after:
all sides are multithreaded, and other processes skew them.
"""

from __future__ import annotations

import functools
import logging
import os
import statistics
import time
from typing import Callable, NamedTuple
import warnings

from absl import app
from absl import flags
import jax
import numpy as np
import optax
import pandas as pd

from common import config as config_lib
from common import sharding
from common import timing
from common import train as train_lib
from common.data import tables
from experiments.benchmarks import machine_line
from methods.qtab import generator as gen_lib
from methods.qtab import metrics
from methods.qtab import model as model_lib
from methods.qtab import tokenizer as tok_lib
from methods.qtab import training

FLAGS = flags.FLAGS
flags.DEFINE_enum("table", "fair", list(tables.TABLES), "The bundled table.")
flags.DEFINE_integer("max_rows", 3000, "Rows drawn from the table (0: all), before the split.")
flags.DEFINE_integer("epochs", 300, "Training epochs on all sides (CTGAN's and TVAE's "
                     "default: 300).")
flags.DEFINE_integer("repeats", 3, "Timed runs per model (medians reported).")
flags.DEFINE_integer("num_samples", 10_000, "Rows drawn in the sampling comparison.")
flags.DEFINE_integer("seed", 0, "Seed of the split, both models and the metrics.")
flags.DEFINE_integer("torch_threads", 0, "torch.set_num_threads (0: the machine's cores).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: 300 rows, 1 epoch, 1 repeat, small "
                  "networks.")

PEERS = ("torch", "ctgan")
TEST_FRACTION, MAX_CATEGORIES = 0.25, 64  # the experiment's


class QTabSizes(NamedTuple):
  tokenizer: tok_lib.TokenizerConfig
  generator: gen_lib.GeneratorConfig
  tok_batch: int
  gen_batch: int
  learning_rate: float
  sample_steps: int


QUICK = QTabSizes(tok_lib.TokenizerConfig(bits=8, levels=4, hidden=256, depth=2,
                                          corruption="fine", corruption_rate=0.2),
                  gen_lib.GeneratorConfig(width=64, depth=2, heads=4), 256, 128, 1e-3, 8)
TINY = QTabSizes(tok_lib.TokenizerConfig(bits=6, levels=3, hidden=64, depth=2,
                                         corruption="fine", corruption_rate=0.2),
                 gen_lib.GeneratorConfig(width=32, depth=1, heads=2), 128, 64, 1e-3, 4)
CTGAN_DEFAULT = dict(embedding_dim=128, generator_dim=(256, 256),
                     discriminator_dim=(256, 256), batch_size=500, pac=10)
CTGAN_TINY = dict(embedding_dim=32, generator_dim=(32, 32), discriminator_dim=(32, 32),
                  batch_size=100, pac=10)
TVAE_DEFAULT = dict(embedding_dim=128, compress_dims=(128, 128),
                    decompress_dims=(128, 128), l2scale=1e-5, batch_size=500, loss_factor=2)
TVAE_TINY = dict(embedding_dim=32, compress_dims=(32, 32), decompress_dims=(32, 32),
                 l2scale=1e-5, batch_size=100, loss_factor=2)


class Peer(NamedTuple):
  """A peer: a synthesizer class of the `ctgan` package and its constructor's sizes."""
  name: str  # the class: "CTGAN" or "TVAE"
  sizes: dict
  partial_batch: bool  # an epoch ends with a partial batch (TVAE), not max(n // B, 1) full


def peers(tiny: bool) -> tuple[Peer, ...]:
  return (Peer("CTGAN", CTGAN_TINY if tiny else CTGAN_DEFAULT, False),
          Peer("TVAE", TVAE_TINY if tiny else TVAE_DEFAULT, True))


class Stage(NamedTuple):
  """One of Q-Tab's two training stages, as `common.train.train_step` runs it."""
  name: str  # the batch's key: "x" (tokenizer) or "tokens" (generator)
  init_fn: Callable
  loss_fn: Callable
  optimizer: optax.GradientTransformation
  batch_size: int
  steps: int


def steps_per_epoch(n: int, batch_size: int) -> int:
  return max(n // batch_size, 1)


def qtab_spec(train: tables.Table, sizes: QTabSizes, seed: int) -> model_lib.QTabSpec:
  encoder = tables.TableEncoder.fit(train, MAX_CATEGORIES, seed=seed)
  return model_lib.make_spec(sizes.tokenizer, sizes.generator, len(train.schema.numeric),
                             encoder.cardinalities)


def qtab_stages(spec: model_lib.QTabSpec, sizes: QTabSizes, n: int,
                epochs: int) -> tuple[Stage, Stage]:
  """The tokenizer and generator stages for `epochs` epochs of n rows (each stage's
  optimizer decays over its own steps, as in the experiment)."""
  s_tok = epochs * steps_per_epoch(n, sizes.tok_batch) if spec.num_numeric else 0
  s_gen = epochs * steps_per_epoch(n, sizes.gen_batch)
  tc, gc = spec.tokenizer, spec.generator
  tok = Stage("x", functools.partial(tok_lib.init, config=tc, features=spec.num_numeric),
              tok_lib.make_loss_fn(tc), training.optimizer(sizes.learning_rate, max(s_tok, 1)),
              sizes.tok_batch, s_tok)
  gen = Stage("tokens", functools.partial(gen_lib.init, vocab_sizes=spec.vocab_sizes,
                                          config=gc),
              gen_lib.make_loss_fn(spec.vocab_sizes, gc),
              training.optimizer(sizes.learning_rate, s_gen), sizes.gen_batch, s_gen)
  return tok, gen


def run_stage(stage: Stage, array: np.ndarray, seed: int, mesh, steps: int | None = None):
  """The stage's parameters after `steps` (default: all) steps of the loop's jitted step."""
  batch_fn = training.rows_batch_fn(array, stage.batch_size, stage.name)
  init_key, step_key = jax.random.split(jax.random.PRNGKey(seed))
  state = train_lib.init_train_state(init_key, init_fn=stage.init_fn,
                                     optimizer=stage.optimizer, mesh=mesh)
  for s in range(stage.steps if steps is None else steps):
    batch = sharding.shard_batch(batch_fn(seed, s), mesh)
    state, _, _ = train_lib.train_step(state, batch, step_key, loss_fn=stage.loss_fn,
                                       optimizer=stage.optimizer, mesh=mesh)
  return jax.block_until_ready(state.params)


def fit_qtab(train: tables.Table, spec, stages, seed: int, mesh, steps: int | None = None):
  """(encoder, params): the whole training run from the frame (encoder, tokenizer stage,
  tokenization, generator stage); `steps` caps each stage (1: the compiling run)."""
  encoder = tables.TableEncoder.fit(train, MAX_CATEGORIES, seed=seed)
  enc = encoder.encode(train.frame)
  tok, gen = stages
  tok_params = run_stage(tok, enc.numeric, seed, mesh, steps) if spec.num_numeric else {}
  tokens = np.asarray(model_lib.row_tokens(spec, tok_params, enc.numeric, enc.categorical))
  gen_params = run_stage(gen, tokens, seed, mesh, steps)
  return encoder, model_lib.QTabParams(tok_params, gen_params)


def qtab_rows(stages) -> int:
  return sum(s.steps * s.batch_size for s in stages)


def time_qtab(train, spec, sizes, epochs: int, repeats: int, seed: int, mesh) -> dict:
  """Median seconds of `repeats` whole training runs (after a compiling run), and the
  last run's encoder and parameters."""
  stages = qtab_stages(spec, sizes, len(train.frame), epochs)
  fit_qtab(train, spec, stages, seed, mesh, steps=1)  # compiles
  start = time.perf_counter()
  fit_qtab(train, spec, stages, seed, mesh, steps=1)  # the per-run cost outside the epochs
  fixed = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    encoder, params = fit_qtab(train, spec, stages, seed, mesh)
    times.append(time.perf_counter() - start)
  start = time.perf_counter()
  tables.TableEncoder.fit(train, MAX_CATEGORIES, seed=seed).encode(train.frame)
  return {"seconds": statistics.median(times), "rows": qtab_rows(stages), "fixed": fixed,
          "prep": time.perf_counter() - start, "epochs": epochs, "encoder": encoder,
          "params": params}


def peer_model(peer: Peer, epochs: int, seed: int):
  import ctgan  # pylint: disable=import-outside-toplevel
  model = getattr(ctgan, peer.name)(epochs=epochs, enable_gpu=False, **peer.sizes)
  model.set_random_state(seed)
  return model


def fit_peer(model, train: tables.Table):
  with warnings.catch_warnings():  # sklearn's GMM convergence warnings, rdt's notices
    warnings.simplefilter("ignore")
    model.fit(train.frame, discrete_columns=list(train.schema.categorical))
  return model


def peer_prep_seconds(train: tables.Table) -> float:
  """The peers' preprocessing alone: their DataTransformer's fit and transform."""
  from ctgan import data_transformer  # pylint: disable=import-outside-toplevel
  start = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformer = data_transformer.DataTransformer()
    transformer.fit(train.frame, list(train.schema.categorical))
    transformer.transform(train.frame)
  return time.perf_counter() - start


def peer_rows(peer: Peer, n: int, epochs: int) -> int:
  """Rows processed: TVAE's DataLoader passes every row once an epoch; CTGAN takes
  max(n // B, 1) batches of B."""
  b = peer.sizes["batch_size"]
  return epochs * (n if peer.partial_batch else steps_per_epoch(n, b) * b)


def time_peer(train, peer: Peer, epochs: int, repeats: int, seed: int) -> dict:
  """Median seconds of `repeats` `.fit` runs of the peer (after an untimed 1-epoch fit)."""
  fit_peer(peer_model(peer, 1, seed), train)
  times = []
  for _ in range(repeats):
    model = peer_model(peer, epochs, seed)
    start = time.perf_counter()
    fit_peer(model, train)
    times.append(time.perf_counter() - start)
  return {"name": peer.name, "seconds": statistics.median(times), "epochs": epochs,
          "model": model, "rows": peer_rows(peer, len(train.frame), epochs)}


def decode(encoder: tables.TableEncoder, x_num, x_cat) -> pd.DataFrame:
  return encoder.decode(tables.Encoded(np.asarray(x_num, np.float32),
                                       np.asarray(x_cat, np.int32)))


@functools.lru_cache
def qtab_sampler(spec, sizes: QTabSizes, n: int):
  """A jitted (params, key) -> (x_num, x_cat) of n rows (one per spec, sizes and n)."""
  return jax.jit(lambda params, key: model_lib.generate(
      spec, params, key, n, steps=sizes.sample_steps, temperature=1.0, order="random")[:2])


def time_sampling(ours: dict, runs: list[dict], spec, sizes, n: int, repeats: int,
                  seed: int) -> dict:
  """Median seconds to draw n rows: Q-Tab as arrays and as a frame; each peer (a frame),
  under "peers" by name."""
  draw = qtab_sampler(spec, sizes, n)
  keys = iter(jax.random.split(jax.random.PRNGKey(seed + 1), 2 * repeats + 2))
  params, encoder = ours["params"], ours["encoder"]
  arrays = timing.median_seconds(lambda: draw(params, next(keys)), repeats)
  frame = timing.median_seconds(lambda: decode(encoder, *draw(params, next(keys))), repeats)
  peer_frames = {run["name"]: timing.median_seconds(functools.partial(run["model"].sample, n),
                                                    repeats) for run in runs}
  return {"ours_arrays": arrays, "ours_frame": frame, "peers": peer_frames}


def equal_time_epochs(ours: dict, budget: float) -> int:
  """The epochs of Q-Tab that fit in `budget` seconds, at its measured pace:
  k = E (budget - t_fixed) / (t_E - t_fixed), t_fixed a 1-step run's time (encoder fit,
  initialisation, tokenization); at least 1."""
  pace = max(ours["seconds"] - ours["fixed"], 1e-6) / ours["epochs"]
  return max(1, int((budget - ours["fixed"]) / pace))


def train_qtab(train, spec, sizes, epochs: int, seed: int, mesh) -> dict:
  """One timed Q-Tab training run of `epochs` epochs (after an untimed compiling run)."""
  stages = qtab_stages(spec, sizes, len(train.frame), epochs)
  fit_qtab(train, spec, stages, seed, mesh, steps=1)  # compiles (new schedules), untimed
  start = time.perf_counter()
  encoder, params = fit_qtab(train, spec, stages, seed, mesh)
  return {"seconds": time.perf_counter() - start, "epochs": epochs, "encoder": encoder,
          "params": params}


def equal_time_runs(train, spec, sizes, ours: dict, runs: list[dict], seed: int,
                    mesh) -> dict:
  """{label: run}: Q-Tab at each peer's median fit time, one run per distinct epoch
  count, labelled with the peers whose time gives it."""
  by_epochs = {}
  for run in runs:
    by_epochs.setdefault(equal_time_epochs(ours, run["seconds"]), []).append(run["name"])
  return {f"Q-Tab at {'/'.join(names)} time ({k} ep.)":
              train_qtab(train, spec, sizes, k, seed, mesh)
          for k, names in by_epochs.items()}


def score(train: tables.Table, test: tables.Table, frame: pd.DataFrame, seed: int) -> dict:
  """Column shapes and pair trends against the training rows; MLE on the held-out rows."""
  s = train.schema
  frame = frame[list(s.columns)].copy()
  for c in s.numeric:
    frame[c] = frame[c].astype(np.float64)
  for c in s.categorical:
    frame[c] = frame[c].astype(str).astype(object)
  out = metrics.fidelity(train.frame, frame, s, seed=seed)
  out["mle"] = metrics.mle(frame, test.frame, s, seed=seed)
  return out


def qtab_samples(run: dict, spec, sizes, n: int, seed: int) -> pd.DataFrame:
  x_num, x_cat = qtab_sampler(spec, sizes, n)(run["params"], jax.random.PRNGKey(seed))
  return decode(run["encoder"], x_num, x_cat)


def quality(train, test, spec, sizes, ours: dict, runs: list[dict], seed: int,
            mesh) -> dict:
  """{column: {metric: value}} for each peer, Q-Tab at each peer's wall time, Q-Tab
  after the full epochs, and the real training rows (MLE only)."""
  n = len(train.frame)
  samples = {}
  for run in runs:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      samples[f"{run['name']} ({run['epochs']} ep.)"] = (run, run["model"].sample(n))
  qtab_runs = equal_time_runs(train, spec, sizes, ours, runs, seed, mesh)
  qtab_runs[f"Q-Tab ({ours['epochs']} ep.)"] = ours
  for name, run in qtab_runs.items():
    samples[name] = (run, qtab_samples(run, spec, sizes, n, seed))
  out = {name: {"seconds": run["seconds"], **score(train, test, rows, seed)}
         for name, (run, rows) in samples.items()}
  out["real training rows"] = {"mle": metrics.mle(train.frame, test.frame, train.schema,
                                                  seed=seed)}
  return out


def mle_name(train: tables.Table) -> str:
  s = train.schema
  if s.task == "regression":
    return "R^2"
  return "ROC AUC" if train.frame[s.target].nunique() <= 2 else "macro-F1"


def speed_rows(ours: dict, runs: list[dict], sampled: dict, n_samples: int) -> list:
  """(label, Q-Tab's figure, [each peer's figure]) rows of the throughput table."""
  rate = lambda rows, seconds: rows / seconds
  return [("training rows/s (Q-Tab: both stages)", rate(ours["rows"], ours["seconds"]),
           [rate(r["rows"], r["seconds"]) for r in runs]),
          ("training epochs/s (Q-Tab epoch: tokenizer + generator)",
           rate(ours["epochs"], ours["seconds"]), [rate(r["epochs"], r["seconds"]) for r in runs]),
          ("median training run, s (lower: faster)", ours["seconds"],
           [r["seconds"] for r in runs]),
          (f"sampling rows/s ({n_samples} rows, to a frame)",
           rate(n_samples, sampled["ours_frame"]),
           [rate(n_samples, sampled["peers"][r["name"]]) for r in runs])]


def print_speed(ours: dict, runs: list[dict], sampled: dict, n_samples: int,
                prep: float) -> None:
  names = [r["name"] for r in runs]
  fmt = lambda x: f"{x:,.1f}" if x >= 10 else f"{x:.3g}"
  ratio = lambda r: f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"
  print("| throughput | Q-Tab (JAX) | " + " | ".join(f"{m} (PyTorch)" for m in names)
        + " | " + " | ".join(f"Q-Tab / {m}" for m in names) + " |")
  print("|---|" + "---:|" * (1 + 2 * len(names)))
  for label, a, bs in speed_rows(ours, runs, sampled, n_samples):
    print(f"| {label} | {fmt(a)} | " + " | ".join(fmt(b) for b in bs) + " | "
          + " | ".join(ratio(a / b) for b in bs) + " |")
  print(f"| sampling rows/s (arrays, before decoding) | "
        f"{fmt(n_samples / sampled['ours_arrays'])} |" + " n/a |" * len(names)
        + " |" * len(names))
  fits = "; ".join(f"{r['name']} {r['seconds']:.2f} s for {r['rows']:,} rows" for r in runs)
  draws = ", ".join(f"{m} {sampled['peers'][m]:.3f} s" for m in names)
  print(f"\nMedian training run: Q-Tab {ours['seconds']:.2f} s for {ours['rows']:,} rows "
        f"(its encoder fit + encode {ours['prep']:.3f} s of it); {fits} (their shared "
        f"DataTransformer fit + transform, timed apart, {prep:.2f} s of each). Median "
        f"sampling: Q-Tab {sampled['ours_frame']:.3f} s ({sampled['ours_arrays']:.3f} s "
        f"before decoding), {draws}.")


def print_quality(scores: dict, mle: str, n_train: int, n_test: int) -> None:
  names = list(scores)
  cell = lambda name, key, fmt: (format(scores[name][key], fmt) if key in scores[name]
                                 else "-")
  print(f"\n| quality ({n_train} synthetic rows each; MLE on {n_test} held-out rows) | "
        + " | ".join(names) + " |")
  print("|---|" + "---:|" * len(names))
  for label, key, fmt in (("training wall s", "seconds", ".2f"),
                          ("column shapes", "column_shapes", ".4f"),
                          ("pair trends", "pair_trends", ".4f"),
                          (f"MLE ({mle})", "mle", ".4f")):
    print(f"| {label} | " + " | ".join(cell(n, key, fmt) for n in names) + " |")


def describe(sizes: QTabSizes) -> str:
  t, g = sizes.tokenizer, sizes.generator
  return (f"Q-Tab: tokenizer {t.bits} bits x {t.levels} levels, MLPs {t.depth} x {t.hidden}, "
          f"{t.corruption} corruption at {t.corruption_rate}, batch {sizes.tok_batch}; "
          f"generator width {g.width}, depth {g.depth}, {g.heads} heads, batch "
          f"{sizes.gen_batch}; lr {sizes.learning_rate}; {sizes.sample_steps} MaskGIT steps")


def setup_torch(threads: int) -> str:
  """Sets torch's threads; the threads part of the header."""
  import ctgan  # pylint: disable=import-outside-toplevel,unused-import
  import torch  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(threads or os.cpu_count())
  logging.getLogger("rdt").setLevel(logging.WARNING)  # a notice per column per fit
  return f"torch {torch.get_num_threads()} threads, ctgan's CTGAN and TVAE"


def load(name: str, max_rows: int, seed: int) -> tuple[tables.Table, tables.Table]:
  table = tables.load_table(name, max_rows=max_rows or None, seed=seed)
  return tables.split(table, TEST_FRACTION, seed)


def parse_flags(argv: list[str]) -> list[str]:
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  for name in ("epochs", "repeats", "num_samples"):
    if getattr(FLAGS, name) < 1:
      config_lib.die(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
  if FLAGS.max_rows < 0 or FLAGS.torch_threads < 0:
    config_lib.die(f"--max_rows and --torch_threads must be >= 0, got {FLAGS.max_rows}, "
                   f"{FLAGS.torch_threads}")
  return rest


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  tiny = FLAGS.tiny
  sizes, others = TINY if tiny else QUICK, peers(tiny)
  epochs, repeats = (1, 1) if tiny else (FLAGS.epochs, FLAGS.repeats)
  n_samples, seed = 1000 if tiny else FLAGS.num_samples, FLAGS.seed
  try:
    versions = setup_torch(FLAGS.torch_threads or (1 if tiny else 0))
  except ImportError as e:
    config_lib.die(f"this benchmark needs torch and ctgan (for CTGAN and TVAE) ({e}): "
                   "pip install -e '.[bench]'")
  train, test = load(FLAGS.table, 300 if tiny else FLAGS.max_rows, seed)
  n = len(train.frame)
  if n < max(sizes.tok_batch, sizes.gen_batch):
    config_lib.die(f"table {FLAGS.table} has {n} training rows, fewer than Q-Tab's batch "
                   f"size {max(sizes.tok_batch, sizes.gen_batch)}: a larger table or --max_rows")
  print(f"# {versions}; float32; table {FLAGS.table}: {n} training + {len(test.frame)} "
        f"held-out rows, {epochs} epochs, {repeats} repeats{' (tiny)' if tiny else ''}")
  print(f"# {describe(sizes)}")
  for peer in others:
    print(f"# {peer.name}: {peer.sizes}, enable_gpu=False")
  print()
  mesh = sharding.make_mesh()
  spec = qtab_spec(train, sizes, seed)
  ours = time_qtab(train, spec, sizes, epochs, repeats, seed, mesh)
  runs = [time_peer(train, peer, epochs, repeats, seed) for peer in others]
  sampled = time_sampling(ours, runs, spec, sizes, n_samples, repeats, seed)
  print_speed(ours, runs, sampled, n_samples, peer_prep_seconds(train))
  scores = quality(train, test, spec, sizes, ours, runs, seed, mesh)
  print_quality(scores, mle_name(train), n, len(test.frame))
  print(f"\nload average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
