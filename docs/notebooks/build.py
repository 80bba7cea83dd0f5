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

import argparse
import os
import sys

import nbformat

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

# Prepended to each notebook's first code cell after the install: plots inline, and a
# fixed CPU default that a user can delete to run on an accelerator.
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
  print(f"{name:>9}: integrated squared error {float(kr.integrated_squared_error(curve, truth)):.3f}")
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
For large tables pass `solver="nystrom"` (with `key=` and `num_landmarks=`) or
`solver="cg"` to both `fit_two_stage` and the selection's `max_n` subsample. The
paper-scale experiment is `python -m experiments.main
--config=experiments/configs/kernel_ridge.py:paper --workdir=/tmp/kr_paper`
(`--config.estimator.solver=nystrom` for n = 10⁵ and more).
"""),
])


NOTEBOOKS = {
    "kernel_ridge.ipynb": KERNEL_RIDGE,
}


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true",
                      help="exit 1 if a notebook on disk differs from its cells")
  args = parser.parse_args(argv)
  stale = []
  for name, nb in NOTEBOOKS.items():
    path = os.path.join(HERE, name)
    text = nbformat.writes(nb) + "\n"
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if old == text:
      continue
    stale.append(name)
    if not args.check:
      with open(path, "w", encoding="utf-8") as f:
        f.write(text)
  if args.check and stale:
    print(f"notebooks differ from docs/notebooks/build.py: {', '.join(stale)}; "
          "run python docs/notebooks/build.py", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
