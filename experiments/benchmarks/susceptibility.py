"""Benchmark: our SGLD LLC estimate vs the `devinterp` library (PyTorch) on the same LM.

  python -m experiments.benchmarks.susceptibility [--workdir=/tmp/susceptibility_bench]
      [--chains=4] [--draws=200] [--batch=16] [--seq_len=32] [--repeats=2] [--tiny]

(needs the ``bench`` extra: torch, transformers, datasets and devinterp).

The model is the shared byte-level LM at its ``tiny`` preset (`common.lm`,
Llama-style, 25k parameters), restored from ``workdir/lm`` or trained there first
(~30 s). Its weights are exported with ``common.models.hf.save_hf_checkpoint`` and
opened by ``transformers.LlamaForCausalLM``, so both sides run the same architecture
and weights in float32 on the CPU (the largest logit gap is printed).

Data: ``pool`` windows of seq_len + 1 bytes of the training split
(``common.data.text.window_batch``). Both sides run localized SGLD with the same
hyperparameters (step size eps, n_beta, localization gamma, no weight decay, chains,
draws, no burn-in, one step per draw, minibatch of ``batch`` windows drawn from the
pool; every chain draws its own minibatches, so the spread over chains carries the
minibatch noise) and estimate lambda_hat = n_beta (mean_t L_batch(w_t) - L(w0))
averaged over chains, with L(w0) the mean loss over the whole pool on both sides
(devinterp: ``num_init_loss_batches`` = one epoch of its loader). A noisy L(w0) would
shift every chain of one side by the same amount, which no per-chain standard error
shows: with n_beta = 82, 0.05 nats of error in L(w0) is 4 units of lambda.

- ours: ``methods.susceptibility.run_chains`` (chains vmapped in one jit-compiled scan)
  + ``estimate_llc``; timed once including compilation and ``repeats`` times after it;
- devinterp: ``devinterp.slt.llc.llc(model, dataset, {}, lr=eps, n_beta=n_beta,
  localization=gamma, match_sampling_input_ids_across_chains=False, ...)``, which runs the chains one after another and writes its
  draws to a zarr store in a temporary folder; timed ``repeats`` times.

The two minibatch streams and noise streams differ, so the estimates agree only in
distribution: the check is |ours - devinterp| <= 2 sqrt(se_ours^2 + se_devinterp^2),
with each standard error the std over chains / sqrt(chains). It prints one markdown
table: estimate ± standard error and median wall time per side, and the wall-time
ratio devinterp / ours (> 1: ours is faster).

``--tiny`` sets the sizes of ``TINY`` (2 chains of 10 draws, batch 4 x 8, a pool of 16,
1 repeat) and trains the LM for only 30 steps, in a fresh temporary folder instead of
``workdir`` (a cached LM of another config would be refused), in seconds (the suite's
smoke test); its estimates carry no meaning beyond that the code runs.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import warnings

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from common import config as config_lib
from common import lm as lm_lib
from common.data import text
from common.models import hf
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "/tmp/susceptibility_bench", "where the tiny LM is cached")
flags.DEFINE_integer("chains", 4, "SGLD chains")
flags.DEFINE_integer("draws", 200, "SGLD steps per chain (one draw per step)")
flags.DEFINE_integer("batch", 16, "windows per minibatch")
flags.DEFINE_integer("seq_len", 32, "predictions per window")
flags.DEFINE_integer("pool", 512, "windows in the sampling pool")
flags.DEFINE_float("step_size", 1e-4, "SGLD step size eps")
flags.DEFINE_float("localization", 100.0, "localization gamma")
flags.DEFINE_float("n_beta", 0.0, "inverse temperature (0: m / ln m, m = batch * seq_len)")
flags.DEFINE_integer("repeats", 2, "timed runs per side (median reported)")
flags.DEFINE_integer("seed", 0, "data and noise seed")
flags.DEFINE_bool("tiny", False, "a seconds-long run: the sizes of TINY (they override the "
                  "flags above) and an LM trained for 30 steps")

PEERS = ("torch", "transformers", "datasets", "devinterp")
# --tiny's flag values: every code path at sizes that run in seconds.
TINY = dict(chains=2, draws=10, batch=4, seq_len=8, pool=16, repeats=1)
TINY_LM_STEPS = 30


def ours(model, params, pool: np.ndarray, n_beta: float):
  """(estimate, stderr, per-chain, seconds incl. compile, median seconds after)."""
  import methods.susceptibility as sus  # pylint: disable=import-outside-toplevel
  pool = jnp.asarray(pool)
  data_key = jax.random.PRNGKey(FLAGS.seed + 1)

  def batch_fn(step):
    rows = jax.random.randint(jax.random.fold_in(data_key, step), (FLAGS.batch,), 0,
                              pool.shape[0])
    return pool[rows]

  def loss_fn(p, tokens):
    return jnp.mean(sus.token_losses(model, p, tokens))

  def pool_batch(step):  # the whole pool, batch by batch, for L(w0)
    return jax.lax.dynamic_slice_in_dim(pool, step * FLAGS.batch, FLAGS.batch)

  # The same functions on every call, so every repeat reuses the compiled programs.
  def once(seed):
    loss0 = sus.init_loss(loss_fn, params, pool_batch, pool.shape[0] // FLAGS.batch)
    trace = sus.run_chains(loss_fn, params, batch_fn, jax.random.PRNGKey(seed),
                           step_size=FLAGS.step_size, n_beta=n_beta,
                           localization=FLAGS.localization, num_chains=FLAGS.chains,
                           num_burnin=0, num_draws=FLAGS.draws, independent_batches=True)
    est = sus.estimate_llc(trace.loss, loss0, n_beta)
    return jax.block_until_ready(est)

  start = time.perf_counter()
  est = once(FLAGS.seed)
  first = time.perf_counter() - start
  times = []
  for r in range(FLAGS.repeats):
    start = time.perf_counter()
    once(FLAGS.seed + 100 + r)
    times.append(time.perf_counter() - start)
  return float(est.mean), float(est.stderr), np.asarray(est.per_chain), first, \
      statistics.median(times)


def theirs(hf_path: str, pool: np.ndarray, n_beta: float):
  """(estimate, stderr, per-chain, median seconds) from devinterp."""
  import datasets  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from devinterp.slt import llc as dllc  # pylint: disable=import-outside-toplevel
  torch.manual_seed(FLAGS.seed)
  model = transformers.LlamaForCausalLM.from_pretrained(hf_path, torch_dtype=torch.float32)
  dataset = datasets.Dataset.from_dict({"input_ids": pool.tolist()}).with_format("torch")
  times, result = [], None
  for r in range(FLAGS.repeats):
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
      warnings.simplefilter("ignore")
      start = time.perf_counter()
      out = dllc.llc(model, dataset, {}, lr=FLAGS.step_size, n_beta=n_beta,
                     localization=FLAGS.localization, num_chains=FLAGS.chains,
                     num_draws=FLAGS.draws, num_burnin_steps=0, batch_size=FLAGS.batch,
                     num_init_loss_batches=pool.shape[0] // FLAGS.batch,
                     match_sampling_input_ids_across_chains=False,
                     init_seed=FLAGS.seed + 7 * r,
                     device="cpu", output_path=os.path.join(tmp, "samples.zarr"))
      per_chain = np.asarray(out["llc_per_chain"].values, np.float64)
      times.append(time.perf_counter() - start)
      if result is None:
        result = per_chain
  se = result.std(ddof=1) / np.sqrt(len(result))
  return float(result.mean()), float(se), result, statistics.median(times)


def logit_gap(model, params, hf_path: str, tokens: np.ndarray) -> float:
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  ref = transformers.LlamaForCausalLM.from_pretrained(hf_path, torch_dtype=torch.float32)
  with torch.no_grad():
    theirs_ = ref(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
  ours_ = np.asarray(model.apply({"params": params}, jnp.asarray(tokens)))
  return float(np.max(np.abs(ours_ - theirs_)))


def _lm_config():
  """The shared LM's tiny preset; under --tiny trained for TINY_LM_STEPS steps only."""
  config = lm_lib.get_config("tiny")
  if FLAGS.tiny:
    config.train.num_steps = TINY_LM_STEPS
    config.warmup_steps = min(config.warmup_steps, TINY_LM_STEPS // 2)
  return config


def main(argv):
  if len(argv) > 1:
    config_lib.die(f"unexpected positional arguments: {' '.join(argv[1:])}")
  print(machine_line(PEERS), flush=True)
  if FLAGS.tiny:
    for name, value in TINY.items():
      setattr(FLAGS, name, value)
  for name in ("chains", "draws", "batch", "seq_len", "pool", "repeats"):
    if getattr(FLAGS, name) < (2 if name == "chains" else 1):
      config_lib.die(f"--{name} must be >= {2 if name == 'chains' else 1}, "
                     f"got {getattr(FLAGS, name)}")
  if FLAGS.pool % FLAGS.batch:
    config_lib.die(f"--pool={FLAGS.pool} must be a multiple of --batch={FLAGS.batch}")
  if FLAGS.step_size <= 0 or FLAGS.localization < 0 or FLAGS.n_beta < 0:
    config_lib.die("--step_size must be > 0 and --localization, --n_beta >= 0")
  import torch  # pylint: disable=import-outside-toplevel
  import methods.susceptibility as sus  # pylint: disable=import-outside-toplevel
  workdir = tempfile.mkdtemp(prefix="bench_susceptibility_") if FLAGS.tiny else FLAGS.workdir
  trained = lm_lib.load_or_train(_lm_config(), os.path.join(workdir, "lm"))
  model, params = trained.model, jax.device_get(trained.params)
  hf_path = os.path.join(workdir, "hf")
  hf.save_hf_checkpoint(hf_path, params, model.config)
  pool = text.window_batch(trained.corpus.train, FLAGS.seed, 0, FLAGS.pool,
                           FLAGS.seq_len)["tokens"]
  m = FLAGS.batch * FLAGS.seq_len
  n_beta = FLAGS.n_beta or sus.default_n_beta(m)
  gap = logit_gap(model, params, hf_path, pool[:4])
  o_mean, o_se, o_chain, o_first, o_time = ours(model, params, pool, n_beta)
  t_mean, t_se, t_chain, t_time = theirs(hf_path, pool, n_beta)
  z = abs(o_mean - t_mean) / np.hypot(o_se, t_se)
  print(f"torch threads {torch.get_num_threads()}")
  print(f"model: tiny byte-level LM, {sum(x.size for x in jax.tree.leaves(params))} params; "
        f"max |logit gap| ours vs transformers = {gap:.2e}")
  print(f"SGLD: eps={FLAGS.step_size:g}, gamma={FLAGS.localization:g}, n_beta={n_beta:.2f} "
        f"(m={m}), chains={FLAGS.chains}, draws={FLAGS.draws}, batch={FLAGS.batch}x"
        f"{FLAGS.seq_len}")
  print("")
  print("| side | LLC ± s.e. | per chain | median wall s | first call s (incl. compile) |")
  print("|---|---:|---|---:|---:|")
  print(f"| ours (JAX) | {o_mean:.2f} ± {o_se:.2f} | "
        f"{', '.join(f'{v:.1f}' for v in o_chain)} | {o_time:.2f} | {o_first:.2f} |")
  print(f"| devinterp (PyTorch) | {t_mean:.2f} ± {t_se:.2f} | "
        f"{', '.join(f'{v:.1f}' for v in t_chain)} | {t_time:.2f} | - |")
  print("")
  print(f"|difference| / combined s.e. = {z:.2f} (agree within 2 s.e.: "
        f"{'yes' if z <= 2 else 'no'}); wall-time ratio devinterp / ours = "
        f"{t_time / o_time:.2f} (incl. our compile: {t_time / o_first:.2f})")


if __name__ == "__main__":
  app.run(main)
