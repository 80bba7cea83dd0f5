"""Routing baselines computed from the same router and experts.

Sequence-level routing picks one expert per document (here, per evaluation window)
from the router's scores at its first positions and scores every token with it:

    e_doc = argmax_e (1 / k) sum_{t < k} softmax(w_t)_e,   log p(y_t) = l_{e_doc}[y_t]

(k = 1 is the first-token rule; a window's first tokens carry little context, so the
experiment averages over a short prefix). Expert-alone and oracle rows read the
experts' own per-token log-probs.
"""

from __future__ import annotations

import numpy as np


def sequence_routing(expert_logp: np.ndarray, scores: np.ndarray, prefix: int = 1
                     ) -> tuple[np.ndarray, np.ndarray]:
  """(log-probs (W, T), chosen expert (W,)) of sequence-level routing.

  Args:
    expert_logp: (E, W, T) each expert's log-prob of each scored token.
    scores: (W, T, E) the router's routing scores.
    prefix: k >= 1, the positions whose routing weights are averaged.
  """
  if prefix < 1 or prefix > scores.shape[1]:
    raise ValueError(f"prefix={prefix}; expected 1 <= prefix <= {scores.shape[1]} "
                     "(the window length)")
  s = scores[:, :prefix] - scores[:, :prefix].max(-1, keepdims=True)
  pi = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
  choice = np.argmax(pi.mean(axis=1), axis=-1)
  return expert_logp[choice, np.arange(len(choice))], choice


def best_expert_per_token(expert_logp: np.ndarray) -> np.ndarray:
  """The oracle of token-level routing: max_e l_e[y_t] (W, T) (a bound, not a method)."""
  return expert_logp.max(axis=0)
