"""The experience-library experiment's figure: test accuracy and memory size vs step."""

from __future__ import annotations

import os

from common import plotting

_STYLE = {"zero_shot": ":", "tsgd": "-", "tsgd_no_verify": "--", "tsgd_no_edit_delete": "-.",
          "append_only": "-", "retrieval": "-"}


def curves(workdir: str, eval_steps: dict, accuracy: dict, sizes: dict, capacity: int) -> str:
  """`curves.png`: test accuracy (left) and library / memory size (right, log scale) for
  every method against TSGD steps; zero-shot is a flat line at its step-0 accuracy.

  Args:
    workdir: where the file goes.
    eval_steps, accuracy: {method: steps, accuracies at those steps}.
    sizes: {method: size after each step, from step 0}.
    capacity: K, drawn on the size panel.
  """
  fig, (left, right) = plotting.subplots(1, 2, figsize=(11, 4))
  last = max(max(s) for s in eval_steps.values())
  for i, method in enumerate(accuracy):
    steps, acc = list(eval_steps[method]), list(accuracy[method])
    if len(steps) == 1:
      steps, acc = [0, last], acc * 2
    style = dict(color=f"C{i}", ls=_STYLE.get(method, "-"), label=method)
    left.plot(steps, acc, marker="o", ms=3, **style)
    size = list(sizes[method]) if len(sizes[method]) > 1 else list(sizes[method]) * (last + 1)
    right.plot(range(len(size)), [max(v, 0.8) for v in size], **style)
  right.axhline(capacity, color="gray", lw=0.8)
  right.text(0, capacity * 1.08, f"K = {capacity}", fontsize=8, color="gray")
  right.set_yscale("log")
  left.set(xlabel="step", ylabel="test accuracy", ylim=(0, 1))
  right.set(xlabel="step", ylabel="rules in memory")
  left.legend(fontsize=7)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "curves.png")))
