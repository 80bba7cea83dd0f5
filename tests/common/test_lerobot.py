"""The LeRobot v2.x reader/writer: round trips, the v3.0 layout, one-line errors."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.data import lerobot


def _demos(lengths=(4, 7, 5), steps=8, obs_dim=5, action_dim=2, seed=0):
  """A Demos-layout dict with ragged episodes, padded as collect_demos pads."""
  rng = np.random.default_rng(seed)
  e = len(lengths)
  obs = rng.normal(size=(e, steps + 1, obs_dim)).astype(np.float32)
  actions = rng.normal(size=(e, steps, action_dim)).astype(np.float32)
  progress = rng.uniform(size=(e, steps + 1)).astype(np.float32)
  for i, n in enumerate(lengths):
    obs[i, n + 1:] = obs[i, n]
    actions[i, n:] = actions[i, n - 1]
    progress[i, n + 1:] = progress[i, n]
  return dict(obs=obs, actions=actions, progress=progress,
              success=np.array([True, False, True][:e]),
              lengths=np.array(lengths, np.int32))


@pytest.fixture
def dataset(tmp_path):
  demos = _demos()
  path = lerobot.write_lerobot(tmp_path / "ds", lerobot.demos_to_episodes(demos), fps=10,
                               task="push the T")
  return demos, path


def test_layout_is_lerobot_v2(dataset):
  demos, path = dataset
  info = json.load(open(os.path.join(path, "meta", "info.json")))
  assert info["codebase_version"] == "v2.1" and info["fps"] == 10
  assert info["total_episodes"] == 3 and info["total_frames"] == int(demos["lengths"].sum()) + 3
  assert info["features"]["observation.state"]["shape"] == [5]
  assert info["features"]["action"] == {"dtype": "float32", "shape": [2], "names": None}
  first = os.path.join(path, "data", "chunk-000", "episode_000000.parquet")
  table = pq.read_table(first)
  assert set(lerobot.BOOKKEEPING) <= set(table.column_names)
  np.testing.assert_allclose(table.column("timestamp").to_numpy(), np.arange(5) / 10)
  assert table.column("index").to_pylist() == list(range(5))
  episodes = [json.loads(l) for l in open(os.path.join(path, "meta", "episodes.jsonl"))]
  assert [(e["episode_index"], e["length"]) for e in episodes] == [(0, 5), (1, 8), (2, 6)]
  assert os.path.isfile(os.path.join(path, "meta", "episodes_stats.jsonl"))


def test_round_trip_write_load_equals(dataset):
  demos, path = dataset
  eps = lerobot.load_lerobot(path)
  assert eps.fps == 10 and eps.episode_index.tolist() == [0, 1, 2]
  back = lerobot.to_demos(eps, max_steps=demos["actions"].shape[1])
  for key in ("obs", "actions", "success", "lengths"):
    np.testing.assert_array_equal(back[key], demos[key], err_msg=key)
  # progress[0] precedes the first action: LeRobot stores no reward for it.
  np.testing.assert_array_equal(back["progress"][:, 1:], demos["progress"][:, 1:])
  assert back["obs"].dtype == np.float32 and back["lengths"].dtype == np.int32


def test_selected_episodes_in_order(dataset):
  demos, path = dataset
  eps = lerobot.load_lerobot(path, episodes=[2, 0])
  assert eps.episode_index.tolist() == [2, 0]
  np.testing.assert_array_equal(eps.observations[0], demos["obs"][2, :6])
  np.testing.assert_array_equal(eps.actions[1][:4], demos["actions"][0, :4])


def test_reads_v3_layout(dataset, tmp_path):
  demos, path = dataset
  v3 = tmp_path / "v3"
  os.makedirs(v3 / "meta")
  os.makedirs(v3 / "data" / "chunk-000")
  tables = [pq.read_table(os.path.join(path, "data", "chunk-000", f"episode_{e:06d}.parquet"))
            for e in range(3)]
  # Frames shuffled within the file: the reader sorts them on frame_index.
  merged = pa.concat_tables(tables)
  merged = merged.take(np.random.default_rng(0).permutation(merged.num_rows))
  pq.write_table(merged, v3 / "data" / "chunk-000" / "file-000.parquet")
  info = json.load(open(os.path.join(path, "meta", "info.json")))
  info.update(codebase_version="v3.0",
              data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet")
  json.dump(info, open(v3 / "meta" / "info.json", "w"))
  back = lerobot.to_demos(lerobot.load_lerobot(v3), max_steps=8)
  for key in ("obs", "actions", "lengths"):
    np.testing.assert_array_equal(back[key], demos[key], err_msg=key)


def _one_line_error(match, fn, *args, **kwargs):
  with pytest.raises(ValueError, match=match) as err:
    fn(*args, **kwargs)
  assert "\n" not in str(err.value)
  return str(err.value)


def test_missing_path_and_info(tmp_path):
  missing = str(tmp_path / "nowhere")
  msg = _one_line_error("does not exist", lerobot.load_lerobot, missing)
  assert missing in msg
  os.makedirs(tmp_path / "empty")
  msg = _one_line_error("info.json not found", lerobot.load_lerobot, tmp_path / "empty")
  assert str(tmp_path / "empty") in msg


def test_missing_column_names_column_and_file(dataset):
  _, path = dataset
  msg = _one_line_error("column 'observation.images' not found", lerobot.load_lerobot,
                        path, observation_key="observation.images")
  assert "episode_000000.parquet" in msg


def test_mismatched_action_dimension_names_the_episode(dataset):
  _, path = dataset
  file = os.path.join(path, "data", "chunk-000", "episode_000002.parquet")
  table = pq.read_table(file)
  wide = pa.FixedSizeListArray.from_arrays(
      pa.array(np.zeros(table.num_rows * 7, np.float32)), 7)
  pq.write_table(table.set_column(table.column_names.index("action"), "action", wide), file)
  msg = _one_line_error("episode 2 has action dimension 7", lerobot.load_lerobot, path)
  assert msg.endswith("expected 2 (from episode 0)")


def test_unknown_episode_and_overwrite_guard(dataset):
  demos, path = dataset
  _one_line_error("episode 9 is not in the dataset", lerobot.load_lerobot, path,
                  episodes=[0, 9])
  eps = lerobot.demos_to_episodes(demos)
  _one_line_error("already exists", lerobot.write_lerobot, path, eps)
  lerobot.write_lerobot(path, eps[:1], overwrite=True)
  assert lerobot.load_lerobot(path).episode_index.tolist() == [0]
