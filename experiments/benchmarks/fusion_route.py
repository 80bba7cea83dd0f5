"""Benchmark: FusionRoute's fused decoding against one expert alone and against running
the experts and the router in separate jitted calls.

  python -m experiments.benchmarks.fusion_route [--batch_sizes=1,8] [--tokens=128] [--repeats=5]
      [--tiny]

Models of the quick preset's sizes (E experts of the expert config, the router config),
random weights (decoding speed does not depend on the values). Each side decodes
`tokens` new tokens after a 32-token prompt at temperature 1:

  (a) one expert alone: `common.models.sampling.generate` (one jitted program);
  (b) fused: `methods.fusion_route.generate`, one jitted program in which every
      expert's and the router's KV cache advance together;
  (c) separate calls: per token, one jitted cached step per model (E + 1 calls) and a
      jitted combine-and-sample, driven from Python (what running the models as
      separate services or programs costs).

Each side compiles in an untimed call; the figure is the median of `repeats` timed runs
(ending in block_until_ready), reported as tokens/s and as ratios fused / alone and
fused / separate. ``--tiny`` decodes 4 tokens at batch 1 with the tiny preset's models,
its first 2 experts (``TINY_EXPERTS``), 1 repeat, in seconds (the suite's smoke test).
"""

from __future__ import annotations

import functools

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from common import config as config_lib
from common import timing
from common.models import sampling
from common.models import transformer
from experiments.benchmarks import machine_line
from experiments.configs import fusion_route as configs
from methods.fusion_route import combine
from methods.fusion_route import training
from methods.fusion_route import ensemble as ens_lib
from methods.fusion_route.router import Router, init_router

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["1", "8"], "Decoding batch sizes.")
flags.DEFINE_integer("tokens", 128, "New tokens per decode.")
flags.DEFINE_integer("repeats", 5, "Timed runs per side (>= 1); medians are reported.")
flags.DEFINE_string("preset", "quick", "The fusion_route config preset giving the sizes.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: the tiny preset with 2 experts, "
                  "batch 1, 4 tokens, 1 repeat.")

PEERS = ()  # the peers are our own single expert and separately jitted calls
# --tiny's experts: the fused program holds every expert, so each one more costs compile
# time; two still combine (and run separately) as four do.
TINY_EXPERTS = 2


def setup(config):
  expert = transformer.Transformer(training.transformer_config(config.expert, max_seq_len=512))
  experts = tuple(expert for _ in config.experts)
  router = Router(training.transformer_config(config.router, max_seq_len=512), len(experts))
  ens = ens_lib.make_ensemble(experts, router)
  keys = jax.random.split(jax.random.PRNGKey(0), len(experts) + 1)
  # One compiled init for the E identical experts (init_params compiles on every call).
  init = jax.jit(functools.partial(transformer.init_params, expert))
  params = {"experts": tuple(init(k) for k in keys[:-1]),
            "router": init_router(router, keys[-1])}
  return ens, params


@functools.partial(jax.jit, static_argnames=("model",))
def _expert_step(model, params, tokens, cache):
  logits, cache = model.apply({"params": params}, tokens, cache)
  return jax.nn.log_softmax(logits[:, -1]), cache


@functools.partial(jax.jit, static_argnames=("router",))
def _router_step(router, params, tokens, cache):
  scores, logits, cache = router.apply({"params": params}, tokens, cache)
  return scores[:, -1], logits[:, -1], cache


@jax.jit
def _combine_sample(lps, scores, z_r, key):
  logits, _ = combine.combine(jnp.stack(lps), scores, z_r)
  return jax.random.categorical(key, logits).astype(jnp.int32)


def separate_decode(ens, params, prompt, key, n: int):
  """(c): E + 1 jitted model steps and a jitted combine per token, from Python."""
  b, t0 = prompt.shape
  models = (*ens.experts, ens.router)
  caches = [transformer.init_cache(m.config, b, t0 + n) for m in models]
  tokens, out, keys = prompt, [], jax.random.split(key, n)
  for i in range(n):
    lps = []
    for j, (m, p) in enumerate(zip(ens.experts, params["experts"])):
      lp, caches[j] = _expert_step(m, p, tokens, caches[j])
      lps.append(lp)
    scores, z_r, caches[-1] = _router_step(ens.router, params["router"], tokens, caches[-1])
    token = _combine_sample(lps, scores, z_r, keys[i])
    out.append(token)
    tokens = token[:, None]
  return jnp.stack(out, 1)


def measure(ens, params, batch: int, n: int, repeats: int) -> dict[str, float]:
  prompt = jax.random.randint(jax.random.PRNGKey(1), (batch, 32), 0, 256)
  key = jax.random.PRNGKey(2)
  sides = {
      "alone": lambda: sampling.generate(ens.experts[0], params["experts"][0], prompt, key,
                                         max_new_tokens=n),
      "fused": lambda: ens_lib.generate(ens, params, prompt, key, max_new_tokens=n).tokens,
      "separate": lambda: separate_decode(ens, params, prompt, key, n),
  }
  return {name: batch * n / timing.median_seconds(fn, repeats) for name, fn in sides.items()}


def main(argv):
  config_lib.parse_flags_or_die(FLAGS, argv)
  print(machine_line(PEERS), flush=True)
  if FLAGS.tiny:
    preset, batch_sizes, tokens, repeats = "tiny", [1], 4, 1
  else:
    preset, tokens, repeats = FLAGS.preset, FLAGS.tokens, FLAGS.repeats
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
  config = configs.get_config(preset)
  if FLAGS.tiny:
    config.experts = config.experts[:TINY_EXPERTS]
  ens, params = setup(config)
  sizes = [sum(x.size for x in jax.tree.leaves(p)) for p in params["experts"]]
  print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind})")
  print(f"E = {len(sizes)} experts of {sizes[0]} parameters, router of "
        f"{sum(x.size for x in jax.tree.leaves(params['router']))}; {tokens} new "
        f"tokens after 32; medians of {repeats}")
  print("| batch | alone tok/s | fused tok/s | separate tok/s | fused / alone | "
        "fused / separate |")
  print("|---:|---:|---:|---:|---:|---:|")
  for b in batch_sizes:
    r = measure(ens, params, b, tokens, repeats)
    print(f"| {b} | {r['alone']:.0f} | {r['fused']:.0f} | {r['separate']:.0f} | "
          f"{r['fused'] / r['alone']:.2f} | {r['fused'] / r['separate']:.2f} |")


if __name__ == "__main__":
  app.run(main)
