"""Benchmark: fusion throughput of the 1D-token model against the 2D pathway alone, and
of the 1D tokenizer's encode + decode.

  python -m experiments.benchmarks.token_fusion [--size=256] [--batch=4] [--repeats=5]
      [--tiny]

The peer is our own 2D pathway: the overhead ratio is what the token path costs on top
of the backbone a user would otherwise run alone (the paper reports 124 ms against
CDDFuse's 47 ms per image on a GPU). One jitted call per side fuses a batch of
``--batch`` random size x size pairs; figures are medians of ``--repeats`` timed calls
after a compiling one. The models are the quick preset's widths with the tokenizer's
patch scaled to the image (16 at 256: 256 patches, 32 tokens), untrained (throughput
does not depend on the weights). Correctness check: with no token edited the full
model returns the 2D pathway's image. ``--tiny`` runs 48 x 48 pairs through a tokenizer
of depth 1, 1 repeat, in seconds (the suite's smoke test).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
from absl import app
from absl import flags

from common import config as config_lib
from common import timing
from experiments.benchmarks import machine_line
from methods.token_fusion import fusion
from methods.token_fusion import model as model_lib
from methods.token_fusion import ste
from methods.token_fusion import tokenizer as tok

FLAGS = flags.FLAGS
flags.DEFINE_integer("size", 256, "Image side (pixels).")
flags.DEFINE_integer("batch", 4, "Pairs per call.")
flags.DEFINE_integer("repeats", 5, "Timed calls per side (medians reported).")
flags.DEFINE_integer("budget", 2, "Edited token positions.")
flags.DEFINE_bool("tiny", False, "48 x 48 pairs, tokenizer depth 1, 1 repeat: a "
                  "seconds-long smoke run.")

PEERS = ()  # the peer is our own 2D pathway alone


def build(size: int, depth: int = 2):
  """(spec, frozen, ste_params) at the quick preset's widths (a tokenizer of `depth`
  blocks), initialised in one jitted call (flax's eager init would compile each op of a
  forward pass on its own)."""
  patch = 16 if size % 16 == 0 and size >= 128 else 8
  spec = model_lib.FusionSpec(
      tok.TokenizerConfig(image_size=size, patch_size=patch, num_tokens=32, bits=10,
                          width=128, depth=depth, heads=4),
      fusion.BackboneConfig(16, 2), sigma=size / 16)

  @jax.jit
  def init(keys):
    frozen = model_lib.Frozen(tok.init(keys[0], spec.tokenizer),
                              fusion.init(keys[1], spec.backbone, size))
    params = ste.init(keys[2], spec.editor, 32, spec.tokenizer.bits)
    params["delta"] = jax.random.normal(keys[2], params["delta"].shape)
    return frozen, params

  frozen, params = init(jax.random.split(jax.random.key(0), 3))
  return spec, frozen, params


def measure(size: int, batch: int, repeats: int, budget: int, depth: int = 2) -> dict:
  spec, frozen, params = build(size, depth)
  a, b = jax.random.uniform(jax.random.key(1), (2, batch, size, size))
  mask = ste.fixed_mask("probe", 32, budget, tuple(range(budget)))
  none = ste.fixed_mask("none", 32, 0)
  two_d = jax.jit(lambda x, y: fusion.apply(frozen.backbone, x, y, spec.backbone))
  full = jax.jit(lambda x, y, m: model_lib.fuse(frozen, params, x, y, m, spec))
  codec = jax.jit(lambda x: tok.reconstruct(frozen.tokenizer, x, spec.tokenizer))
  error = float(jnp.max(jnp.abs(full(a, b, none) - two_d(a, b))))
  if error > 1e-5:
    raise AssertionError(f"with no edit the full model differs from the 2D pathway by {error}")
  seconds = {"2D pathway": timing.median_seconds(lambda: two_d(a, b), repeats),
             "full model (STE)": timing.median_seconds(lambda: full(a, b, mask), repeats),
             "tokenizer encode + decode": timing.median_seconds(lambda: codec(a), repeats)}
  return {"seconds": seconds, "error": error, "spec": spec}


def main(argv):
  config_lib.parse_flags_or_die(FLAGS, argv)
  print(machine_line(PEERS), flush=True)
  size, repeats, depth = (48, 1, 1) if FLAGS.tiny else (FLAGS.size, FLAGS.repeats, 2)
  if size % 8:
    config_lib.die(f"--size={size} must be a multiple of 8 (the tokenizer's patch)")
  out = measure(size, FLAGS.batch, repeats, FLAGS.budget, depth)
  print(f"backend {jax.default_backend()}; "
        f"{size}x{size}, batch {FLAGS.batch}, {repeats} repeats, budget {FLAGS.budget}; "
        f"tokenizer patch {out['spec'].tokenizer.patch_size}, width 128, depth {depth}")
  print("| path | images/s | ms per image | time / 2D pathway |")
  print("|---|---:|---:|---:|")
  base = out["seconds"]["2D pathway"]
  for name, s in out["seconds"].items():
    print(f"| {name} | {FLAGS.batch / s:,.1f} | {1000 * s / FLAGS.batch:.2f} | "
          f"{s / base:.2f}x |")
  print(f"\nCheck: no edit = the 2D pathway to {out['error']:.1e}.")
  return 0


if __name__ == "__main__":
  sys.exit(app.run(main))
