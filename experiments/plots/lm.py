"""Plot of the `lm` experiment: the training curve against the final validation figure."""

from __future__ import annotations

from typing import Sequence

from common import plotting


def training_curve(steps: Sequence[int], train_bpb: Sequence[float], val_bpb: float,
                   unigram: float, path: str) -> str:
  """Minibatch bits per byte by step, with the final validation bpb and the unigram bar.

  Args:
    steps, train_bpb: the logged training steps and their minibatch bits per byte.
    val_bpb: the final validation bits per byte (a dashed line).
    unigram: the unigram cross-entropy baseline in bits (a dotted line).
    path: the PNG to write.

  Returns:
    ``path``.
  """
  fig, ax = plotting.subplots(figsize=(5.5, 3.6))
  ax.plot(list(steps), list(train_bpb), label="train (minibatch)")
  ax.axhline(val_bpb, color="C1", ls="--", label=f"validation, final ({val_bpb:.2f})")
  ax.axhline(unigram, color="gray", ls=":", label=f"unigram baseline ({unigram:.2f})")
  ax.set_xlabel("step")
  ax.set_ylabel("bits per byte")
  ax.set_title("Byte-level LM on the stdlib corpus")
  ax.legend()
  return plotting.save_figure(fig, path)
