"""LeRobot-format robot datasets from a local folder (read and write), as numpy arrays.

Nothing downloads: ``load_lerobot`` reads a dataset folder the user gives (for example
a ``huggingface-cli download lerobot/pusht --repo-type dataset --local-dir DIR`` done
beforehand), and ``write_lerobot`` writes one, e.g. to export our own demonstrations.

Layout of LeRobot's v2.x format (codebase_version "v2.0" / "v2.1"), which
``write_lerobot`` writes and ``load_lerobot`` reads:

    meta/info.json             fps, chunks_size, total_episodes, total_frames, the
                               data_path template
                               "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
                               (episode_chunk = episode_index // chunks_size), and
                               features: {name: {"dtype", "shape", "names"}}
    meta/episodes.jsonl        one line per episode: {"episode_index", "tasks", "length"}
    meta/tasks.jsonl           one line per task: {"task_index", "task"}
    meta/episodes_stats.jsonl  (v2.1) per-episode min/max/mean/std/count of each feature
    data/chunk-000/episode_000000.parquet
                               one row per frame: the features (a vector feature is a
                               list column, e.g. observation.state, action; a scalar one
                               a plain column, e.g. next.reward, next.success) and the
                               bookkeeping columns episode_index, frame_index, timestamp
                               (frame_index / fps), index (global frame index), task_index.

The loader also reads the v3.0 layout (data/chunk-XXX/file-XXX.parquet files holding
many episodes each, data_path "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
by grouping rows on their episode_index column. Videos and images are not read.

A frame t holds the observation o_t and the action a_t taken from it; the dataset
does not store the observation after an episode's last action. ``to_demos`` therefore
pairs an episode of L frames into L - 1 transitions (o_0..o_{L-1}, a_0..a_{L-2}; the
last action is dropped), padded into the ``Demos`` layout of ``common/envs``: obs
(E, T+1, obs_dim), actions (E, T, action_dim), progress (E, T+1), success (E,),
lengths (E,).

Example:
    >>> eps = load_lerobot("/data/pusht")                       # doctest: +SKIP
    >>> demos = to_demos(eps)            # dict: obs, actions, progress, success, lengths
    >>> write_lerobot("/tmp/ours", demos_to_episodes(demos), fps=10)
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

CODEBASE_VERSION = "v2.1"
V2_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
DEFAULT_CHUNKS_SIZE = 1000
# Columns every LeRobot frame has; write_lerobot fills them in itself.
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
LAYOUT = ("meta/info.json, meta/episodes.jsonl and "
          "data/chunk-000/episode_000000.parquet (LeRobot v2.x)")


class LeRobotEpisodes(NamedTuple):
  """Per-episode arrays of a LeRobot dataset (frames sorted by frame_index).

  Attributes:
    observations: E arrays (L_e, obs_dim) float32, the observation key's column.
    actions: E arrays (L_e, action_dim) float32, the action key's column.
    rewards: E arrays (L_e,) float32 of the reward column (``next.reward``: the reward
      after the frame's action), or None when the dataset has no such column.
    successes: E arrays (L_e,) bool of ``next.success``, or None when absent.
    episode_index: (E,) int64, the episodes' indices in the dataset.
    fps: frames per second (meta/info.json).
    info: the parsed meta/info.json.
  """
  observations: list
  actions: list
  rewards: list | None
  successes: list | None
  episode_index: np.ndarray
  fps: float
  info: dict


# ----------------------------------------------------------------------------- reading

def _read_json(path: str):
  with open(path) as f:
    return json.load(f)


def _read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _column(table, key: str, file: str) -> np.ndarray:
  """A parquet column as (rows, d): list columns give d = list length, scalars d = 1."""
  import pyarrow as pa
  import pyarrow.compute as pc

  col = table.column(key).combine_chunks()
  n = len(col)
  if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or \
      pa.types.is_fixed_size_list(col.type):
    if not pa.types.is_fixed_size_list(col.type) and n:
      sizes = np.unique(pc.list_value_length(col).to_numpy(zero_copy_only=False))
      if len(sizes) != 1:
        raise ValueError(f"column {key!r} in {file} has rows of lengths "
                         f"{sizes.tolist()}; expected one length per column")
    values = col.flatten()
    if pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type):
      raise ValueError(f"column {key!r} in {file} holds nested lists; expected a vector "
                       "or scalar per frame")
    return values.to_numpy(zero_copy_only=False).reshape(n, -1)
  return col.to_numpy(zero_copy_only=False).reshape(n, 1)


def _read_file(file: str, keys: Sequence[str], optional: Sequence[str]) -> dict:
  """Columns ``keys`` (required) and ``optional`` (when present) of one parquet file."""
  import pyarrow.parquet as pq

  if not os.path.isfile(file):
    raise ValueError(f"data file {file} is missing; expected by meta/info.json's data_path")
  names = pq.read_schema(file).names
  for key in keys:
    if key not in names:
      raise ValueError(f"column {key!r} not found in {file}; it has columns {names}")
  present = [k for k in optional if k in names]
  table = pq.read_table(file, columns=list(dict.fromkeys([*keys, *present])))
  return {k: _column(table, k, file) for k in [*keys, *present]}


def _episode_list(path: str, info: dict) -> list[int]:
  episodes_file = os.path.join(path, "meta", "episodes.jsonl")
  if os.path.isfile(episodes_file):
    return sorted(int(e["episode_index"]) for e in _read_jsonl(episodes_file))
  return list(range(int(info.get("total_episodes", 0))))


def load_lerobot(path: str | os.PathLike, observation_key: str = "observation.state",
                 action_key: str = "action", episodes: Sequence[int] | None = None,
                 reward_key: str = "next.reward",
                 success_key: str = "next.success") -> LeRobotEpisodes:
  """Reads a LeRobot v2.x (or v3.0) dataset from a local folder.

  Args:
    path: the dataset's root folder (the one holding meta/ and data/).
    observation_key: the observation column (a vector per frame).
    action_key: the action column (a vector per frame).
    episodes: episode indices to read (default: all), in the order given.
    reward_key, success_key: optional per-frame reward / success columns, read when
      the files have them.

  Returns:
    ``LeRobotEpisodes``.

  Raises:
    ValueError (one line): the path or meta/info.json is missing; a requested episode
    is not in the dataset; a data file lacks a column (named, with the file); the
    episodes disagree on the observation or action dimension (the episode is named).

  Example:
    >>> eps = load_lerobot("/data/pusht", episodes=[0, 1])      # doctest: +SKIP
    >>> eps.observations[0].shape, eps.actions[0].shape         # (L_0, 2), (L_0, 2)
  """
  path = os.fspath(path)
  if not os.path.isdir(path):
    raise ValueError(f"LeRobot dataset path {path} does not exist; expected a folder "
                     f"with {LAYOUT}")
  info_file = os.path.join(path, "meta", "info.json")
  if not os.path.isfile(info_file):
    raise ValueError(f"{info_file} not found; expected a LeRobot dataset folder with "
                     f"{LAYOUT}")
  info = _read_json(info_file)
  fps = float(info.get("fps", 0.0))
  template = info.get("data_path", V2_DATA_PATH)
  keys = (observation_key, action_key, "episode_index", "frame_index")
  optional = (reward_key, success_key)

  if "{episode_index" in template:                    # v2.x: one file per episode
    available = _episode_list(path, info)
    wanted = available if episodes is None else [int(e) for e in episodes]
    _check_wanted(wanted, available, path)
    chunks = int(info.get("chunks_size", DEFAULT_CHUNKS_SIZE))
    per_episode = []
    for e in wanted:
      file = os.path.join(path, template.format(episode_chunk=e // chunks,
                                                episode_index=e))
      per_episode.append(_read_file(file, keys, optional))
  else:                                               # v3.0: many episodes per file
    files = sorted(glob.glob(os.path.join(path, "data", "*", "*.parquet")))
    if not files:
      raise ValueError(f"{path} has no data/*/*.parquet files; expected {LAYOUT}")
    parts = [_read_file(f, keys, optional) for f in files]
    columns = {k: np.concatenate([p[k] for p in parts])
               for k in parts[0] if all(k in p for p in parts)}
    ep = columns["episode_index"][:, 0]
    available = sorted(np.unique(ep).tolist())
    wanted = available if episodes is None else [int(e) for e in episodes]
    _check_wanted(wanted, available, path)
    per_episode = [{k: v[ep == e] for k, v in columns.items()} for e in wanted]

  observations, actions, rewards, successes = [], [], [], []
  for e, cols in zip(wanted, per_episode):
    order = np.argsort(cols["frame_index"][:, 0], kind="stable")
    observations.append(cols[observation_key][order].astype(np.float32))
    actions.append(cols[action_key][order].astype(np.float32))
    rewards.append(cols[reward_key][order, 0].astype(np.float32)
                   if reward_key in cols else None)
    successes.append(cols[success_key][order, 0].astype(bool)
                     if success_key in cols else None)
  _check_dims(wanted, observations, "observation")
  _check_dims(wanted, actions, "action")
  return LeRobotEpisodes(
      observations=observations, actions=actions,
      rewards=rewards if all(r is not None for r in rewards) else None,
      successes=successes if all(s is not None for s in successes) else None,
      episode_index=np.array(wanted, np.int64), fps=fps, info=info)


def _check_wanted(wanted, available, path):
  have = set(available)
  for e in wanted:
    if e not in have:
      span = f"{min(have)}..{max(have)}" if have else "none"
      raise ValueError(f"episode {e} is not in the dataset at {path} (it has "
                       f"{len(have)} episodes, indices {span})")


def _check_dims(wanted, arrays, what):
  for e, a in zip(wanted, arrays):
    if a.shape[1] != arrays[0].shape[1]:
      raise ValueError(f"episode {e} has {what} dimension {a.shape[1]}, expected "
                       f"{arrays[0].shape[1]} (from episode {wanted[0]})")


# ----------------------------------------------------------------------------- Demos layout

def to_demos(episodes: LeRobotEpisodes, max_steps: int | None = None) -> dict:
  """Pads loaded episodes into the ``Demos`` layout (numpy).

  An episode of L frames gives lengths = L - 1 transitions: obs o_0..o_{L-1}, actions
  a_0..a_{L-2} (the last frame's action has no recorded outcome and is dropped),
  progress[t + 1] = reward of frame t (``next.reward``) and progress[0] = 0 (the
  dataset records no reward before the first action), success = any ``next.success``
  of the episode. Without reward / success columns, progress is 0 and success False.
  Past an episode's end the last observation, action and progress are repeated.

  Args:
    episodes: ``LeRobotEpisodes`` from ``load_lerobot``.
    max_steps: T (default: the longest episode's length); must be >= every length.

  Returns:
    dict with obs (E, T+1, obs_dim) float32, actions (E, T, action_dim) float32,
    progress (E, T+1) float32, success (E,) bool, lengths (E,) int32.

  Example:
    >>> d = to_demos(load_lerobot("/data/pusht"))               # doctest: +SKIP
    >>> d["obs"].shape, d["lengths"].max()
  """
  index = episodes.episode_index
  for e, o in zip(index, episodes.observations):
    if len(o) < 2:
      raise ValueError(f"episode {e} has {len(o)} frame(s); expected at least 2 (an "
                       "observation after an action)")
  lengths = np.array([len(o) - 1 for o in episodes.observations], np.int32)
  steps = int(lengths.max()) if max_steps is None else int(max_steps)
  if steps < lengths.max():
    e = index[int(np.argmax(lengths))]
    raise ValueError(f"max_steps={max_steps} is shorter than episode {e} "
                     f"({lengths.max()} transitions); expected max_steps >= every length")
  obs, actions, progress, success = [], [], [], []
  for i, (o, a) in enumerate(zip(episodes.observations, episodes.actions)):
    n = lengths[i]
    r = (episodes.rewards[i][:n] if episodes.rewards is not None
         else np.zeros(n, np.float32))
    obs.append(_pad_rows(o, steps + 1))
    actions.append(_pad_rows(a[:n], steps))
    progress.append(_pad_rows(np.concatenate([[0.0], r]).astype(np.float32), steps + 1))
    success.append(bool(np.any(episodes.successes[i]))
                   if episodes.successes is not None else False)
  return dict(obs=np.stack(obs), actions=np.stack(actions), progress=np.stack(progress),
              success=np.array(success, bool), lengths=lengths)


def _pad_rows(x: np.ndarray, length: int) -> np.ndarray:
  return np.concatenate([x, np.repeat(x[-1:], length - len(x), axis=0)])


def _field(demos, name):
  return demos[name] if isinstance(demos, Mapping) else getattr(demos, name)


def demos_to_episodes(demos, observation_key: str = "observation.state",
                      action_key: str = "action") -> list[dict]:
  """The inverse of ``to_demos``: per-episode frame dicts for ``write_lerobot``.

  An episode of n transitions becomes n + 1 frames: o_0..o_n with actions
  a_0..a_{n-1} and, on the last frame, a_{n-1} again (LeRobot frames pair every
  observation with an action; for absolute-position actions such as Push-T's this is
  "hold the last target"). ``next.reward`` of frame t is progress[t + 1] (the last
  frame repeats progress[n]); ``next.success`` is the episode's success on its last
  two frames, ``next.done`` is set on the last frame.

  Args:
    demos: a ``Demos``-layout NamedTuple or dict with obs, actions, progress, success,
      lengths (numpy or jax arrays).
    observation_key, action_key: the column names to write.

  Returns:
    A list of E dicts {column name: (n + 1, ...) array}.
  """
  obs, actions = np.asarray(_field(demos, "obs")), np.asarray(_field(demos, "actions"))
  progress = np.asarray(_field(demos, "progress"))
  success = np.asarray(_field(demos, "success"))
  lengths = np.asarray(_field(demos, "lengths"))
  out = []
  for e, n in enumerate(lengths.tolist()):
    if n < 1:
      raise ValueError(f"episode {e} has length {n}; expected at least one transition")
    done = np.zeros(n + 1, bool)
    done[-1] = True
    out.append({
        observation_key: obs[e, :n + 1].astype(np.float32),
        action_key: np.concatenate([actions[e, :n], actions[e, n - 1:n]]).astype(np.float32),
        "next.reward": np.concatenate([progress[e, 1:n + 1], progress[e, n:n + 1]]
                                      ).astype(np.float32),
        "next.success": np.arange(n + 1) >= n - 1 if bool(success[e]) else
                        np.zeros(n + 1, bool),
        "next.done": done,
    })
  return out


# ----------------------------------------------------------------------------- writing

def _dtype_name(a: np.ndarray) -> str:
  if a.dtype == bool:
    return "bool"
  if np.issubdtype(a.dtype, np.integer):
    return "int64"
  if np.issubdtype(a.dtype, np.floating):
    return "float32"
  raise ValueError(f"dtype {a.dtype} is not supported; expected bool, integer or float")


def _stats(a: np.ndarray) -> dict:
  """LeRobot's per-episode feature statistics (min/max/mean/std over frames, count)."""
  x = a.astype(np.float64).reshape(len(a), -1)
  return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(),
          "std": x.std(0).tolist(), "count": [len(a)]}


def write_lerobot(path: str | os.PathLike, episodes: Sequence[Mapping[str, Any]],
                  fps: float = 10, task: str = "", robot_type: str | None = None,
                  chunks_size: int = DEFAULT_CHUNKS_SIZE, overwrite: bool = False) -> str:
  """Writes episodes as a LeRobot v2.1 dataset (no videos) under ``path``.

  Args:
    episodes: E mappings {feature name: (L_e,) or (L_e, d) array}, the same names in
      every episode (e.g. "observation.state", "action", "next.reward"); the
      bookkeeping columns (timestamp, frame_index, episode_index, index, task_index)
      are written here and must not be given.
    fps: frames per second (timestamp = frame_index / fps).
    task: the task description, stored in meta/tasks.jsonl (one task).
    robot_type: stored in meta/info.json.
    chunks_size: episodes per data/chunk-XXX folder.
    overwrite: replace an existing LeRobot dataset at ``path``.

  Returns:
    The dataset's root path.

  Example:
    >>> eps = [{"observation.state": np.zeros((5, 2)), "action": np.ones((5, 2))}]
    >>> write_lerobot("/tmp/ds", eps, fps=10)                    # doctest: +SKIP
  """
  import pyarrow as pa
  import pyarrow.parquet as pq

  path = os.fspath(path)
  if not episodes:
    raise ValueError("episodes is empty; expected at least one episode")
  if os.path.isdir(path) and os.listdir(path):
    if not overwrite:
      raise ValueError(f"{path} already exists and is not empty; pass overwrite=True "
                       "to replace a LeRobot dataset there")
    if not os.path.isfile(os.path.join(path, "meta", "info.json")):
      raise ValueError(f"{path} is not empty and holds no meta/info.json; refusing to "
                       "overwrite something that is not a LeRobot dataset")
    for sub in ("meta", "data"):
      shutil.rmtree(os.path.join(path, sub), ignore_errors=True)
  names = list(episodes[0])
  features = {}
  for e, episode in enumerate(episodes):
    if list(episode) != names:
      raise ValueError(f"episode {e} has features {list(episode)}, expected {names} "
                       "(from episode 0)")
    lengths = {k: len(v) for k, v in episode.items()}
    if len(set(lengths.values())) != 1:
      raise ValueError(f"episode {e} has features of different lengths {lengths}; "
                       "expected one row per frame in every feature")
    for k, v in episode.items():
      if k in BOOKKEEPING:
        raise ValueError(f"feature {k!r} is a bookkeeping column that write_lerobot "
                         f"fills in; expected only data features (not {BOOKKEEPING})")
      v = np.asarray(v)
      if v.ndim not in (1, 2):
        raise ValueError(f"feature {k!r} of episode {e} has shape {v.shape}; expected "
                         "(frames,) or (frames, d)")
      spec = {"dtype": _dtype_name(v), "shape": [1] if v.ndim == 1 else [v.shape[1]],
              "names": None}
      if features.setdefault(k, spec) != spec:
        raise ValueError(f"episode {e} has feature {k!r} with dtype {spec['dtype']} "
                         f"and shape {spec['shape']}, expected {features[k]['dtype']} "
                         f"and {features[k]['shape']} (from episode 0)")
  features.update({
      "timestamp": {"dtype": "float32", "shape": [1], "names": None},
      "frame_index": {"dtype": "int64", "shape": [1], "names": None},
      "episode_index": {"dtype": "int64", "shape": [1], "names": None},
      "index": {"dtype": "int64", "shape": [1], "names": None},
      "task_index": {"dtype": "int64", "shape": [1], "names": None},
  })

  os.makedirs(os.path.join(path, "meta"), exist_ok=True)
  total, meta_episodes, meta_stats = 0, [], []
  for e, episode in enumerate(episodes):
    n = len(next(iter(episode.values())))
    frame = np.arange(n, dtype=np.int64)
    columns = {}
    for k, v in episode.items():
      v = np.asarray(v).astype({"bool": bool, "int64": np.int64,
                                "float32": np.float32}[features[k]["dtype"]])
      columns[k] = (pa.array(v) if v.ndim == 1 else
                    pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1]))
    bookkeeping = {"timestamp": (frame / fps).astype(np.float32), "frame_index": frame,
                   "episode_index": np.full(n, e, np.int64),
                   "index": total + frame, "task_index": np.zeros(n, np.int64)}
    columns.update({k: pa.array(v) for k, v in bookkeeping.items()})
    file = os.path.join(path, V2_DATA_PATH.format(episode_chunk=e // chunks_size,
                                                  episode_index=e))
    os.makedirs(os.path.dirname(file), exist_ok=True)
    pq.write_table(pa.table(columns), file)
    meta_episodes.append({"episode_index": e, "tasks": [task], "length": n})
    stats = {k: _stats(np.asarray(v)) for k, v in {**episode, **bookkeeping}.items()}
    meta_stats.append({"episode_index": e, "stats": stats})
    total += n

  info = {
      "codebase_version": CODEBASE_VERSION, "robot_type": robot_type,
      "total_episodes": len(episodes), "total_frames": total, "total_tasks": 1,
      "total_videos": 0, "total_chunks": (len(episodes) - 1) // chunks_size + 1,
      "chunks_size": chunks_size, "fps": fps,
      "splits": {"train": f"0:{len(episodes)}"}, "data_path": V2_DATA_PATH,
      "video_path": None, "features": features,
  }
  with open(os.path.join(path, "meta", "info.json"), "w") as f:
    json.dump(info, f, indent=4)
  for name, rows in (("episodes.jsonl", meta_episodes),
                     ("tasks.jsonl", [{"task_index": 0, "task": task}]),
                     ("episodes_stats.jsonl", meta_stats)):
    with open(os.path.join(path, "meta", name), "w") as f:
      f.writelines(json.dumps(row) + "\n" for row in rows)
  return path
