"""Benchmark: the cost of FGR's training step (two gradients + the head projection)
against plain dual-focal (DFL) training, in our code and in a PyTorch rebuild of the
paper code's step pattern.

  python -m experiments.benchmarks.fgr [--batch=64] [--steps=200] [--repeats=5] [--tiny]

All sides train the quick preset's `SmallCNN` (two 3x3 convs of 16 and 32 channels,
each followed by 2x2 max-pooling, a 64-unit layer, the 10-way head) on 8x8 digits batches with SGD (momentum 0.9, weight
decay 5e-4) after clipping at global norm 2, as the paper's code does for every method.

  ours DFL: one forward, one gradient of L_main (a jitted `lax.scan` over `--steps`
      steps, `methods.fgr.training.make_step`);
  ours FGR: one forward, the gradients of L_main and of SoftBinnedECE on the clean rows
      (two VJPs of one forward), the projection on the head, the same optimizer;
  torch DFL / FGR: the paper code's pattern (`train_utils.apply_fgr_update`): forward,
      `autograd.grad` of both losses, flatten the head's two gradients, project on
      conflict, `clip_grad_norm_`, `SGD.step`, one Python iteration per step.

Figures: steps per second (median of `--repeats` timed runs of `--steps` steps after a
warm-up run; ours compiled first, untimed) and the overhead ratios FGR / DFL on each
side (the issue's target: <= 1.6x), and each side's FGR speed relative to torch's.
Ours runs both as the experiment's epoch (a `lax.scan` over steps) and as one jitted
call per step: on CPU XLA runs the scanned body several times slower (as for PPO).
``--tiny`` runs batch 8, 3 steps, 1 repeat, in seconds (the suite's smoke test).
"""

from __future__ import annotations

import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from common import config as config_lib
from common.data import digits
from common.models.classifier import SmallCNN
from experiments.benchmarks import machine_line
from methods.fgr import training

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch", 64, "Batch size (the quick preset's).")
flags.DEFINE_integer("steps", 200, "Training steps per timed run.")
flags.DEFINE_integer("repeats", 5, "Timed runs per side (medians reported).")
flags.DEFINE_bool("tiny", False, "A seconds-long run: batch 8, 3 steps, 1 repeat.")

PEERS = ("torch",)

LR, MOMENTUM, WD, CLIP = 0.05, 0.9, 5e-4, 2.0


def _batches(num: int, batch: int, seed: int = 0):
  data = digits.load_digits()
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, len(data.labels), size=(num, batch))
  images = data.images[idx][..., None].astype(np.float32)
  clean = (rng.random((num, batch)) > 0.05).astype(np.float32)   # rho = 5% views
  return images, data.labels[idx].astype(np.int32), clean


def ours(method: str, images, labels, clean, scan: bool = True) -> float:
  """Steps per second of our jitted step: one `lax.scan` over the batches (the
  experiment's epoch), or one jitted call per step from Python (scan=False)."""
  spec = training.SPECS[method]
  model = SmallCNN(10)
  tx = training.make_optimizer(spec, learning_rate=LR, momentum=MOMENTUM,
                               weight_decay=WD, clip_norm=CLIP)
  loss_fn = training.make_loss_fn(model.apply, spec, 10)
  step = training.make_step(loss_fn, tx, spec)
  state = training.init_state(jax.random.PRNGKey(0),
                              lambda k: model.init(k, jnp.zeros((1, 8, 8, 1))), tx)

  @jax.jit
  def run(state, images, labels, clean):
    def body(s, xs):
      i, x, y, c = xs
      return step(s, (x, y, c), jax.random.PRNGKey(i), 1.0)
    return jax.lax.scan(body, state, (jnp.arange(len(images)), images, labels, clean))

  args = tuple(jnp.asarray(a) for a in (images, labels, clean))
  if not scan:
    one = jax.jit(step)
    keys = [jax.random.PRNGKey(i) for i in range(len(images))]
    batches = [tuple(a[i] for a in args) for i in range(len(images))]
    jax.block_until_ready(one(state, batches[0], keys[0], 1.0))       # compile
    start = time.perf_counter()
    for batch, key in zip(batches, keys):
      state, _ = one(state, batch, key, 1.0)
    jax.block_until_ready(state)
    return len(images) / (time.perf_counter() - start)
  jax.block_until_ready(run(state, *args))                           # compile
  start = time.perf_counter()
  jax.block_until_ready(run(state, *args))
  return len(images) / (time.perf_counter() - start)


def _torch_model_and_losses():
  """The same CNN in torch, the dual focal loss (gamma 5) and SoftBinnedECE, written
  as in the paper's code."""
  import torch

  class Net(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
      self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
      self.dense = torch.nn.Linear(32 * 2 * 2, 64)
      self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
      x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
      x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
      return self.fc(torch.relu(self.dense(x.flatten(1))))

  def dfl(logits, y, gamma=5.0):
    p = logits.softmax(-1)
    p_y = p.gather(1, y[:, None])[:, 0]
    other = p.scatter(1, y[:, None], -1.0).max(-1).values.clamp(min=0)
    return (-(1 - p_y + other) ** gamma * torch.log(p_y.clamp(min=1e-12))).mean()

  centres = torch.linspace(0, 1, 15)

  def soft_ece(logits, y):
    p = logits.softmax(-1)
    conf, pred = p.max(-1)
    acc = (pred == y).float()
    w = torch.softmax(-(centres[None] - conf[:, None]) ** 2 / 0.1, dim=1)
    mass = w.sum(0) + 1e-8
    gap = (w * acc[:, None]).sum(0) / mass - (w * conf[:, None]).sum(0) / mass
    return torch.sqrt((mass / len(y) * gap ** 2).sum())

  return Net, dfl, soft_ece


def torch_steps(method: str, images, labels, clean) -> float:
  """Steps per second of the paper code's step pattern in PyTorch (same CNN)."""
  import torch
  torch.manual_seed(0)
  model, dfl, soft_ece = _torch_model_and_losses()
  net = model()
  opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
  head = list(net.fc.parameters())
  xs = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 1, 4, 2, 3)))
  ys, cs = torch.from_numpy(labels).long(), torch.from_numpy(clean).bool()

  def step(x, y, c):
    opt.zero_grad()
    logits = net(x)
    main = dfl(logits, y)
    if method == "dfl":
      main.backward()
    else:
      cal = soft_ece(logits[c], y[c])
      g_m = torch.autograd.grad(main, list(net.parameters()), retain_graph=True)
      g_c = torch.autograd.grad(cal, head)
      for p, g in zip(net.parameters(), g_m):
        p.grad = g
      gm = torch.cat([p.grad.flatten() for p in head])
      gc = torch.cat([g.flatten() for g in g_c])
      dot = gm @ gc
      if dot < 0 and gc.norm() > 0:
        gm = gm - dot / (gc @ gc + 1e-12) * gc
        offset = 0
        for p in head:
          p.grad = gm[offset:offset + p.numel()].view_as(p)
          offset += p.numel()
    torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
    opt.step()

  for i in range(min(10, len(xs))):                                  # warm-up
    step(xs[i], ys[i], cs[i])
  start = time.perf_counter()
  for i in range(len(xs)):
    step(xs[i], ys[i], cs[i])
  return len(xs) / (time.perf_counter() - start)


def main(argv):
  config_lib.parse_flags_or_die(FLAGS, argv)
  print(machine_line(PEERS), flush=True)
  import torch
  batch, steps, repeats = (8, 3, 1) if FLAGS.tiny else (FLAGS.batch, FLAGS.steps, FLAGS.repeats)
  print(f"torch threads {torch.get_num_threads()}; "
        f"SmallCNN on 8x8 digits, batch {batch}, {steps} steps per run")
  data = _batches(steps, batch)
  sides = {"ours, lax.scan epoch": ours,
           "ours, one jitted call per step": lambda *a: ours(*a, scan=False),
           "torch (paper code's pattern)": torch_steps}
  rates = {}
  for side, fn in sides.items():
    for method in ("dfl", "fgr"):
      rates[side, method] = statistics.median(fn(method, *data)
                                              for _ in range(repeats))
  torch_side = "torch (paper code's pattern)"
  print("| side | DFL steps/s | FGR steps/s | FGR time / DFL time | FGR speed vs torch |")
  print("|---|---|---|---|---|")
  for side in sides:
    d, f = rates[side, "dfl"], rates[side, "fgr"]
    print(f"| {side} | {d:.0f} | {f:.0f} | {d / f:.2f}x | "
          f"{f / rates[torch_side, 'fgr']:.2f}x |")


if __name__ == "__main__":
  app.run(main)
