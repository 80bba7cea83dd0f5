"""LILO: language-in-the-loop preferential Bayesian optimisation.

A simulated decision maker (`dm.py`) gives free-form feedback about evaluated outcomes;
a translator, a `common.llm.TextModel` (`translator.py`, prompts in `prompts.py`; the
offline stand-ins in `simulated.py`), turns it into pairwise preferences; a pairwise GP
with a probit likelihood and a Laplace approximation (`gp.py`) is the proxy utility;
EUBO picks the pairs to label and qLogNEI the next points (`acquisition.py`);
`loop.py` runs LILO and its baselines on the public code's problems (`problems.py`).
"""
