"""Q-Tab: codebook tabular generation (ICML 2026).

Residual lookup-free quantisation with residual corruption tokenizes a row's numeric
columns (`tokenizer`), each categorical column is one token, and a BERT-style masked
transformer over the token sequence is trained by masked language modelling and
sampled MaskGIT-style (`generator`); `model` joins them (rows <-> tokens, generation,
imputation). `metrics` evaluates with sdmetrics plus MLE, alpha-precision /
beta-recall and imputation; `copula` (the SDV Gaussian copula on `copulas`) and
`diffusion` (TabDDPM-style) are the baselines. See docs/qtab.md.
"""

from methods.qtab import copula
from methods.qtab import diffusion
from methods.qtab import generator
from methods.qtab import metrics
from methods.qtab import model
from methods.qtab import tokenizer
from methods.qtab import training
from methods.qtab.generator import GeneratorConfig
from methods.qtab.model import QTabParams, QTabSpec, generate, impute, make_spec
from methods.qtab.tokenizer import TokenizerConfig
