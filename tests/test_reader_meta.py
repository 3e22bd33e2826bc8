"""``CompiledDataset.meta`` (reader/meta.py): LeRobot-shaped metadata read from the compiled meta/ folder, and
``num_frames`` / ``num_episodes``. The same values against LeRobot itself: tests/integration/test_lerobot_meta.py."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from support.httpserver import Faults, FaultyServer

from roboreel.formats.errors import SourceError
from roboreel.formats.manifest import load_manifest
from roboreel.formats.transient import Retry
from roboreel.reader import CompiledDataset, DatasetMeta
from roboreel.reader.meta import EpisodeTable

STAT_NAMES = {"min", "max", "mean", "std", "count"}


def test_compiled_stats_are_the_source_stats_exactly(small_source, small_compiled):
    src = (small_source / "meta/stats.json").read_bytes()
    assert (small_compiled / "meta/stats.json").read_bytes() == src
    raw = json.loads(src)
    stats = CompiledDataset(str(small_compiled)).meta.stats
    assert list(stats) == list(raw)
    for key, per in raw.items():
        assert set(per) >= STAT_NAMES, key
        for name, value in per.items():
            got = stats[key][name]
            assert isinstance(got, np.ndarray)
            want = np.atleast_1d(np.array(value))
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), (key, name)
    assert stats["action"]["count"].dtype == np.int64 and stats["action"]["mean"].dtype == np.float64


def test_meta_fields_follow_info_json(small_compiled):
    ds = CompiledDataset(str(small_compiled))
    meta, info = ds.meta, json.loads((small_compiled / "meta/info.json").read_text())
    assert meta.fps == info["fps"] == ds.fps
    assert meta.robot_type == info["robot_type"]
    assert list(meta.features) == list(info["features"])
    for key, feature in info["features"].items():
        assert meta.features[key] == {**feature, "shape": tuple(feature["shape"])}
    cams = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    assert meta.camera_keys == meta.video_keys == cams == ds.camera_keys
    assert meta.image_keys == [] and meta.depth_keys == [] and meta.has_language_columns is False
    assert (meta.total_episodes, meta.total_frames) == (info["total_episodes"], info["total_frames"])
    assert meta.root == small_compiled and meta.repo_id == small_compiled.name
    assert meta.shapes["action"] == tuple(info["features"]["action"]["shape"])


def test_tasks_and_episodes_are_lerobots_tables(small_compiled):
    pd = pytest.importorskip("pandas")
    meta = CompiledDataset(str(small_compiled)).meta
    want_tasks = pd.read_parquet(small_compiled / "meta/tasks.parquet")
    want_tasks.index.name = "task"  # what LeRobot's load_tasks does
    pd.testing.assert_frame_equal(meta.tasks, want_tasks)
    assert meta.task_names == list(want_tasks.sort_values("task_index").index)
    assert meta.get_task_index(meta.task_names[1]) == 1 and meta.get_task_index("no such task") is None

    table = pq.read_table(small_compiled / "meta/episodes/chunk-000/file-000.parquet")
    eps = meta.episodes
    assert isinstance(eps, EpisodeTable) and len(eps) == meta.total_episodes == table.num_rows
    assert eps.column_names == [c for c in table.column_names if not c.startswith("stats/")]
    assert eps["dataset_from_index"] == table.column("dataset_from_index").to_pylist()
    assert eps["episode_index"] == sorted(eps["episode_index"])
    row = eps[3]
    assert row["episode_index"] == 3 and row["tasks"] == table.column("tasks")[3].as_py()
    assert row["dataset_to_index"] - row["dataset_from_index"] == row["length"]
    assert eps[-1]["episode_index"] == meta.total_episodes - 1
    with pytest.raises(KeyError, match="no column 'nope'"):
        eps["nope"]
    with pytest.raises(IndexError):
        eps[len(eps)]


def test_num_frames_counts_the_selection_and_len_the_rank(small_compiled):
    lengths = load_manifest(str(small_compiled)).lengths
    whole = CompiledDataset(str(small_compiled))
    assert (whole.num_frames, whole.num_episodes) == (sum(lengths.values()), len(lengths))
    assert whole.num_frames == whole.meta.total_frames and len(whole) == whole.num_frames
    some = CompiledDataset(str(small_compiled), episodes=[1, 4, 6])
    assert (some.num_frames, some.num_episodes) == (lengths[1] + lengths[4] + lengths[6], 3)
    ranks = [CompiledDataset(str(small_compiled), rank=r, world_size=2) for r in (0, 1)]
    assert [r.num_frames for r in ranks] == [whole.num_frames] * 2  # the whole dataset on every rank
    assert len(ranks[0]) == len(ranks[1]) == whole.num_frames // 2  # each rank's share


def test_meta_is_read_on_first_use_only(small_compiled, tmp_path):
    root = tmp_path / "c"
    shutil.copytree(small_compiled, root)
    shutil.rmtree(root / "meta")
    ds = CompiledDataset(str(root))  # constructing reads no meta/
    assert len(ds) > 0
    with pytest.raises(SourceError, match="info.json"):
        _ = ds.meta.fps


def test_pickling_keeps_edited_stats_and_drops_the_episode_table(small_compiled):
    ds = CompiledDataset(str(small_compiled))
    meta = ds.meta
    assert len(meta.episodes) > 0 and len(meta.task_names) > 0
    meta.stats["action"]["mean"] = np.zeros(3)  # as lerobot-train does for ImageNet stats
    state = pickle.dumps(ds)
    assert b"dataset_from_index" not in state  # the episode table is not shipped to workers
    back = pickle.loads(state)
    assert back.meta is not meta
    assert np.array_equal(back.meta.stats["action"]["mean"], np.zeros(3))
    assert back.meta.episodes["length"] == meta.episodes["length"]  # read again on use


def test_meta_over_http_equals_local(small_compiled):
    local = DatasetMeta(str(small_compiled))
    with FaultyServer(small_compiled) as server:
        remote = CompiledDataset(server.url).meta
        assert remote.features == local.features and remote.fps == local.fps
        assert remote.episodes["length"] == local.episodes["length"]  # no listing over HTTP: files probed
        assert remote.task_names == local.task_names
        for key, per in local.stats.items():
            for name, value in per.items():
                assert np.array_equal(remote.stats[key][name], value)
        assert remote.root == server.url


def test_meta_reads_retry_transient_faults(small_compiled):
    local = DatasetMeta(str(small_compiled))
    faults = Faults(unavailable=1.0, path_prefix="/meta/", max_faults=3)
    with FaultyServer(small_compiled, faults=faults) as server:
        meta = DatasetMeta(server.url, retry=Retry(backoff_s=0.01))
        assert meta.features == local.features and meta.episodes["length"] == local.episodes["length"]
        assert sum(server.faults_injected().values()) == 3


def test_a_dataset_without_stats_has_none(small_compiled, tmp_path):
    root = tmp_path / "c"
    shutil.copytree(small_compiled, root)
    (root / "meta/stats.json").unlink()  # as a compile of a source without stats writes it: none recorded either
    doc = json.loads((root / "roboreel.json").read_text())
    del doc["meta_files"]["meta/stats.json"]
    (root / "roboreel.json").write_text(json.dumps(doc))
    meta = CompiledDataset(str(root)).meta
    assert meta.stats is None and meta.fps == 20
