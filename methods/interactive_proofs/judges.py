"""Oracles that are models: the library's trained LM as a judge of text windows.

`lm_judge` returns the oracle of the robust-computation application: item i is a
window of bytes, and the judgment is 1 when the LM's mean log-likelihood per predicted
byte exceeds a threshold, y_i = [ (1/T) sum_t log p(x_{t+1} | x_{<=t}) > tau ]. The
oracle is the model itself, called through a function on a batch of item indices, so
a verifier that spot-checks k items runs the LM on k windows instead of N.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from common.models import logprobs


def mean_loglik(model, params, tokens):
  """(B, T+1) tokens -> (B,) mean log-likelihood per predicted token, in nats."""
  logits = model.apply({"params": params}, tokens)
  return logprobs.sequence_logprob(logits, tokens) / (tokens.shape[1] - 1)


def lm_scorer(model, params, windows: np.ndarray, chunk: int = 256) -> Callable:
  """scores(indices) -> (k,) mean log-likelihoods of windows[indices], run in chunks of
  `chunk` windows (one compiled program per chunk size)."""
  windows = jnp.asarray(windows, jnp.int32)
  score = jax.jit(lambda tokens: mean_loglik(model, params, tokens))

  def scores(indices):
    indices = np.asarray(indices)
    parts = [np.asarray(score(windows[indices[s:s + chunk]]))
             for s in range(0, len(indices), chunk)]
    return np.concatenate(parts) if parts else np.zeros((0,), np.float32)

  return scores


def threshold_judge(scores: Callable, threshold: float) -> Callable:
  """The oracle y(indices) = [scores(indices) > threshold] as int32."""
  return lambda indices: (scores(indices) > threshold).astype(np.int32)


def lm_judge(model, params, windows: np.ndarray, threshold: float,
             chunk: int = 256) -> Callable:
  """The oracle y(indices) -> (k,) int32 judgments of windows[indices]."""
  return threshold_judge(lm_scorer(model, params, windows, chunk), threshold)
