"""The TapSampling experiment's figures: success against candidate count, every method
at the default count, and rollouts of single-shot and TapSampling on the push task."""

from __future__ import annotations

import os

import numpy as np

from common import plotting

_SWEPT = ("tap", "best_of_k", "gaussian")


def _curve(rows, env, policy, method):
  ks = sorted({r["total"] for r in rows if r["kind"] == "eval" and r["env"] == env
               and r["policy"] == policy and r["method"] == method})
  mean, se = [], []
  for k in ks:
    got = [r["success"] for r in rows if r["kind"] == "eval" and r["env"] == env and
           r["policy"] == policy and r["method"] == method and r["total"] == k]
    mean.append(100 * np.mean(got))
    se.append(100 * np.std(got) / np.sqrt(len(got)))
  return np.asarray(ks), np.asarray(mean), np.asarray(se)


def success_vs_candidates(workdir: str, rows: list[dict], config) -> str:
  """`success_vs_k.png`: success (mean +- s.e. over seeds) against K on the first env,
  one panel per base policy; single-shot and the oracle as references."""
  env = config.envs[0]
  fig, axes = plotting.subplots(1, len(config.policies), figsize=(5.5 * len(config.policies), 4),
                                squeeze=False)
  for ax, policy in zip(axes[0], config.policies):
    for i, method in enumerate(m for m in _SWEPT if m in config.methods):
      ks, mean, se = _curve(rows, env, policy, method)
      ax.errorbar(ks, mean, yerr=se, marker="o", capsize=3, label=method, color=f"C{i}")
    for method, style in (("single", "k--"), ("oracle", "k:")):
      _, mean, _ = _curve(rows, env, policy, method)
      if len(mean):
        ax.axhline(mean[0], linestyle=style[1:], color="k", label=method)
    ax.set(xlabel="candidates K", ylabel="success (%)", title=f"{env}, {policy} policy")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "success_vs_k.png")))


def methods_bar(workdir: str, rows: list[dict], config) -> str:
  """`methods.png`: every method's success at the default K, per (env, policy)."""
  cells = [(e, p) for e in config.envs for p in config.policies]
  k = config.sampling.total
  fig, ax = plotting.subplots(1, 1, figsize=(2.2 * len(cells) + 4, 4))
  width = 0.8 / len(config.methods)
  for i, method in enumerate(config.methods):
    kk = 1 if method == "single" else k
    stats = [[r["success"] for r in rows if r["kind"] == "eval" and r["env"] == e and
              r["policy"] == p and r["method"] == method and r["total"] == kk]
             for e, p in cells]
    mean = [100 * np.mean(s) if s else np.nan for s in stats]
    se = [100 * np.std(s) / np.sqrt(len(s)) if s else 0 for s in stats]
    ax.bar(np.arange(len(cells)) + i * width, mean, width, yerr=se, capsize=2, label=method)
  ax.set_xticks(np.arange(len(cells)) + 0.4 - width / 2, [f"{e}\n{p}" for e, p in cells])
  ax.set(ylabel="success (%)", title=f"success at K = {k} (single-shot: one chunk)")
  ax.legend(fontsize=8, ncol=2)
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "methods.png")))


def rollouts(workdir: str, env_name: str, shown: dict) -> str:
  """`rollouts.png`: pusher (or agent) and block paths of a few episodes per method, with
  the goal, up to success (filled end marker) or the time limit (open marker)."""
  from common.envs import push  # pylint: disable=import-outside-toplevel
  fig, axes = plotting.subplots(1, len(shown), figsize=(5 * len(shown), 5), squeeze=False)
  for ax, (method, out) in zip(axes[0], shown.items()):
    obs, lengths = np.asarray(out.obs), np.asarray(out.lengths)
    for e in range(obs.shape[0]):
      path = obs[e, :lengths[e] + 1]
      color = f"C{e}"
      ax.plot(path[:, 0], path[:, 1], color=color, alpha=0.4, lw=1)
      if env_name == "push":
        ax.plot(path[:, 2], path[:, 3], color=color, lw=2)
        ax.add_patch(_circle(path[0, 6:8], push.GOAL_TOLERANCE, color))
        end = path[-1, 2:4]
      else:
        end = path[-1, :2]
      ax.plot(*end, marker="s", color=color,
              fillstyle="full" if bool(np.asarray(out.success)[e]) else "none", ms=9)
    ax.set(xlim=(-1, 1), ylim=(-1, 1), aspect="equal",
           title=f"{env_name}: {method} ({int(np.sum(out.success))}/{obs.shape[0]} succeed)")
  return os.path.basename(plotting.save_figure(fig, os.path.join(workdir, "rollouts.png")))


def _circle(centre, radius, color):
  import matplotlib.patches  # pylint: disable=import-outside-toplevel
  return matplotlib.patches.Circle(centre, radius, fill=False, ls="--", color=color)
