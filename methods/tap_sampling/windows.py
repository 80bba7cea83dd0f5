"""Training examples cut from demonstrations: action chunks and progress windows.

Demonstrations follow ``common.envs.rollout.Demos``: ``obs`` (E, T+1, o), ``actions``
(E, T, a), ``lengths`` (E,) (the steps an episode took; frames 0..L_e are real).
Chunks are normalised by the action bound s, x = a / s, so every model works on
values in [-1, 1].

* **Policy / VAE chunks** (``chunk_dataset``): for every real step t of every episode,
  the observation o_t and the chunk (a_t, ..., a_{t+H-1}), padded past the episode's
  end with zero actions (holding still once the task is done).

* **Progress windows** (``progress_windows``), the verifier's data (TapSampling's
  success-percent dataset): the label of frame t in an episode of L + 1 frames is its
  progress p_t = t / L. A window starts at a real frame t, has a random length
  l ~ U{l_min, ..., l_max} (3..12 in the public code) and a direction d = +-1: forward
  windows replay the recorded actions a_t, ..., a_{t+l-1}; backward windows replay the
  recent past in reverse, -a_{t-1}, ..., -a_{t-l}, which undoes it (regress). The
  commanded path P_k = sum_{j<k} u_j (k = 0..l) is resampled by linear interpolation to
  H + 1 points and differenced, giving an H-step chunk; its labels are
  linspace(p_t, p_{t+dl}, H), increasing for forward windows and decreasing for
  backward ones. The observation is o_t.

Every batch is a pure function of (seed, step) (``numpy.random.default_rng([seed,
step])``), as ``common.train.train`` requires of ``batch_fn``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class ChunkData(NamedTuple):
  """Observation / normalised chunk pairs: obs (n, o), chunks (n, H, a)."""
  obs: np.ndarray
  chunks: np.ndarray


def _check_demos(demos: Any) -> None:
  obs, actions, lengths = (np.shape(demos.obs), np.shape(demos.actions),
                           np.shape(demos.lengths))
  if len(obs) != 3 or len(actions) != 3 or obs[0] != actions[0] or obs[1] != actions[1] + 1:
    raise ValueError(f"demos must have obs (E, T+1, o) and actions (E, T, a), got obs {obs} "
                     f"and actions {actions}")
  if lengths != (obs[0],):
    raise ValueError(f"demos.lengths must have shape ({obs[0]},), got {lengths}")


def chunk_dataset(demos: Any, horizon: int, scale: Any) -> ChunkData:
  """Every real step's (o_t, a_{t:t+H} / s), zero-padded past the episode's end.

  Args:
    demos: a ``Demos`` (obs (E, T+1, o), actions (E, T, a), lengths (E,)).
    horizon: H, the chunk length.
    scale: s, the action bound (scalar or (a,)).

  Returns:
    ``ChunkData`` with obs (n, o) and chunks (n, H, a), n = sum_e L_e.

  Example:
    >>> data = chunk_dataset(demos, horizon=10, scale=0.05)
  """
  _check_demos(demos)
  obs, actions = np.asarray(demos.obs, np.float32), np.asarray(demos.actions, np.float32)
  lengths = np.asarray(demos.lengths, int)
  e, t_max, a = actions.shape
  padded = np.zeros((e, t_max + horizon, a), np.float32)
  for i, length in enumerate(lengths):
    padded[i, :length] = actions[i, :length]
  rows, cols = np.nonzero(np.arange(t_max)[None, :] < lengths[:, None])
  index = cols[:, None] + np.arange(horizon)[None, :]
  chunks = padded[rows[:, None], index] / np.asarray(scale, np.float32)
  return ChunkData(obs[rows, cols], chunks.astype(np.float32))


def resample_path(steps: np.ndarray, horizon: int) -> np.ndarray:
  """Resamples a sequence of l displacements to H by interpolating the path they trace.

  P_k = sum_{j<k} u_j for k = 0..l; Q_i = P(i l / H) by linear interpolation
  (i = 0..H); the result is Q_{i+1} - Q_i. It keeps the start and the end point.

  Args:
    steps: (l, a) displacements.
    horizon: H.

  Returns:
    (H, a) displacements with the same total.
  """
  l = steps.shape[0]
  path = np.concatenate([np.zeros((1, steps.shape[1])), np.cumsum(steps, axis=0)])
  grid = np.linspace(0.0, l, horizon + 1)
  points = np.stack([np.interp(grid, np.arange(l + 1), path[:, j])
                     for j in range(steps.shape[1])], axis=1)
  return np.diff(points, axis=0)


def window_labels(start: int, end: int, length: int, horizon: int) -> np.ndarray:
  """linspace(p_start, p_end, H) with p_t = t / L: the window's per-step progress labels."""
  return np.linspace(start / length, end / length, horizon)


def _episodes_by_length(rng, lengths: np.ndarray, num: int) -> np.ndarray:
  """``num`` episode indices drawn with probability L_e / sum L: every frame equally likely."""
  return rng.choice(len(lengths), size=num, p=lengths / lengths.sum())


def _one_window(rng, actions_e, length, horizon, min_len, max_len):
  l = int(rng.integers(min_len, max_len + 1))
  t = int(rng.integers(0, length + 1))
  can_forward, can_backward = t + l <= length, t - l >= 0
  forward = can_forward and (not can_backward or rng.random() < 0.5)
  if forward:
    steps, end = actions_e[t:t + l], t + l
  else:
    t = max(t, l) if not can_backward else t
    steps, end = -actions_e[t - l:t][::-1], t - l
  return t, resample_path(steps, horizon), window_labels(t, end, length, horizon)


def progress_windows(demos: Any, seed: int, step: int, *, batch_size: int, horizon: int,
                     scale: Any, min_len: int = 3, max_len: int = 12) -> dict:
  """A batch of forward and backward progress windows (see the module docstring).

  Episodes are drawn in proportion to their length, so every frame is equally likely.

  Args:
    demos: a ``Demos``; every episode needs L_e >= max_len.
    seed, step: the batch is a pure function of them.
    batch_size: B.
    horizon: H.
    scale: the action bound s.
    min_len, max_len: the window lengths' range (inclusive).

  Returns:
    ``{"obs": (B, o), "chunks": (B, H, a) normalised, "labels": (B, H),
    "forward": (B,) bool}``.

  Example:
    >>> batch = progress_windows(demos, 0, 7, batch_size=256, horizon=10, scale=0.05)
  """
  _check_demos(demos)
  if not 1 <= min_len <= max_len:
    raise ValueError(f"window lengths need 1 <= min_len <= max_len, got {min_len}, {max_len}")
  lengths = np.asarray(demos.lengths, int)
  if lengths.min() < max_len:
    raise ValueError(f"episode {int(np.argmin(lengths))} has {lengths.min()} steps; progress "
                     f"windows need every episode to have >= max_len = {max_len}")
  rng = np.random.default_rng([seed, step])
  episodes = _episodes_by_length(rng, lengths, batch_size)
  obs, chunks, labels, forward = [], [], [], []
  for e in episodes:
    t, chunk, label = _one_window(rng, np.asarray(demos.actions[e]), lengths[e], horizon,
                                  min_len, max_len)
    obs.append(demos.obs[e, t])
    chunks.append(chunk)
    labels.append(label)
    forward.append(label[-1] >= label[0])
  return {"obs": np.asarray(obs, np.float32),
          "chunks": (np.asarray(chunks) / np.asarray(scale)).astype(np.float32),
          "labels": np.asarray(labels, np.float32), "forward": np.asarray(forward)}


def reverse_chunks(chunks: np.ndarray) -> np.ndarray:
  """The motion that undoes each chunk: -x[::-1] over the time axis, (n, H, a) -> (n, H, a).

  From the same observation, a chunk and its reversal make opposite progress; the
  verifier's AUC for telling them apart is claim 4's second half.
  """
  return -np.asarray(chunks)[:, ::-1]


def sample_frames(demos: Any, seed: int, num: int) -> tuple[np.ndarray, np.ndarray]:
  """``num`` (episode, t) pairs drawn uniformly from the real frames t < L_e, with
  replacement: the states at which coverage is measured."""
  _check_demos(demos)
  lengths = np.asarray(demos.lengths, int)
  rng = np.random.default_rng(seed)
  episodes = _episodes_by_length(rng, lengths, num)
  return episodes, (rng.random(num) * lengths[episodes]).astype(int)
