"""Datasets made by LeRobot 0.6.1's own editing tools (``lerobot.datasets.dataset_tools``, what ``lerobot-edit-dataset``
runs) and by its streaming encoder: each compiled by roboreel, validated clean, and read back equal to
``LeRobotDataset`` over a whole epoch, camera and action windows included.

Each tool leaves a layout of its own: ``merge_datasets`` concatenates the members' mp4s and parquet files (a file
then holds episodes of both, at offsets the member never had) or copies them file by file; ``split_dataset``
re-encodes the files whose episodes land in different splits and renumbers episodes, rows and tasks;
``add_features`` / ``remove_feature`` rewrite every data file (one row group for several episodes) and drop a
camera's videos; ``modify_tasks`` rewrites tasks.parquet and every row's ``task_index`` in place;
``streaming_encoding`` encodes each camera while the episode is recorded. The members are H.264 (frames read back
by their pixel codes), except those merged in LeRobot's default AV1, which roboreel re-encodes: their frames are held
to the compile's PSNR floor against LeRobot's own decode of the merged AV1.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot.datasets.dataset_tools", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.configs.video import RGBEncoderConfig  # noqa: E402
from lerobot.datasets import LeRobotDataset  # noqa: E402
from lerobot.datasets import dataset_tools as tools  # noqa: E402
from support.datasets import assert_same_sample  # noqa: E402
from support.settings import FAST

from roboreel.compile import compile_dataset  # noqa: E402
from roboreel.compile.video import psnr  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402
from roboreel.synth.content import render_frame  # noqa: E402
from roboreel.validate import validate  # noqa: E402

TOP, WRIST = "observation.images.top", "observation.images.wrist"
CAMS = {TOP: (48, 64), WRIST: (64, 80)}
FEATURES = {**{c: {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
               for c, (h, w) in CAMS.items()},
            "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
            "action": {"dtype": "float32", "shape": (2,), "names": None}}
WINDOWS = {"action": [-0.1, 0.0, 0.1], TOP: [-0.2, 0.0], WRIST: [0.0, 0.1]}
SETTINGS = dataclasses.replace(FAST, episodes_per_shard=2)
H264 = RGBEncoderConfig(vcodec="h264", g=2, crf=18)


def _record(root: Path, repo: str, lengths: list[int], first_episode: int, *,
            rgb_encoder: RGBEncoderConfig | None = H264, **create: object) -> LeRobotDataset:
    """Episodes of ``lengths`` frames, each frame's pictures coded with (index, episode, camera); data files and
    the wrist camera's video files rolled over every episode or two. ``rgb_encoder`` None: LeRobot's default
    encoder (libsvtav1, AV1 at CRF 30)."""
    ds = LeRobotDataset.create(repo, fps=10, root=root, features=FEATURES, use_videos=True,
                               data_files_size_in_mb=0.002, video_files_size_in_mb=0.008,
                               rgb_encoder=rgb_encoder, **create)
    index = 0
    for e, n in enumerate(lengths, start=first_episode):
        for k in range(n):
            pictures = {c: render_frame(index, e, j, k, h, w) for j, (c, (h, w)) in enumerate(CAMS.items())}
            ds.add_frame({**pictures, "observation.state": np.array([e, k, index / 7], np.float32),
                          "action": np.array([k, -index], np.float32), "task": f"task {e % 3}"})
            index += 1
        ds.save_episode()
    ds.finalize()
    return LeRobotDataset(repo, root=root)


def _assert_compiles_to_lerobots_samples(root: Path, repo: str, out: Path, windows: dict[str, list[float]], *,
                                         min_psnr: float | None = None) -> int:
    """Compile ``root``; validate both; every sample of one epoch (file order) equals LeRobot's (with
    ``min_psnr``: uint8 frames, each at least that many dB from LeRobot's decode, instead of equal pixel codes)."""
    # LeRobot's editing tools write a data file as one row group of several episodes: a warning, nothing else
    assert {f.code for f in validate(str(root)).findings} <= {"rowgroup-multi-episode"}
    compile_dataset(str(root), str(out), settings=SETTINGS, workers=1)
    assert validate(str(out), deep=True).findings == []
    uint8 = min_psnr is not None
    theirs = LeRobotDataset(repo, root=root, delta_timestamps=windows, return_uint8=uint8)
    got = list(CompiledDataset(str(out), shuffle=False, delta_timestamps=windows, return_uint8=uint8))
    assert len(got) == len(theirs) == theirs.meta.total_frames
    for i, sample in enumerate(got):
        assert_same_sample(sample, theirs[i], theirs.meta.camera_keys, min_psnr=min_psnr)
    return len(got)


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> tuple[Path, LeRobotDataset, LeRobotDataset]:
    root = tmp_path_factory.mktemp("lerobot-edits")
    return root, _record(root / "a", "local/a", [6, 9, 4, 7], 0), _record(root / "b", "local/b", [5, 8, 3], 10)


@pytest.fixture(scope="module")
def merged(members) -> tuple[Path, str]:
    root, a, b = members
    tools.merge_datasets([a, b], "local/merged", output_dir=root / "merged")
    return root / "merged", "local/merged"


def test_merged_into_concatenated_files(merged, tmp_path):
    root, repo = merged
    episodes = LeRobotDataset(repo, root=root).meta.episodes
    first_of_b, key = episodes[4], f"videos/{TOP}"
    assert first_of_b[f"{key}/file_index"] == episodes[0][f"{key}/file_index"]  # b's clips appended to a's file
    assert first_of_b[f"{key}/from_timestamp"] > 0
    assert _assert_compiles_to_lerobots_samples(root, repo, tmp_path / "rr", WINDOWS) == 42


def test_merged_file_by_file(members, tmp_path):
    _, a, b = members
    tools.merge_datasets([a, b], "local/m", output_dir=tmp_path / "src", concatenate_videos=False,
                         concatenate_data=False)
    assert _assert_compiles_to_lerobots_samples(tmp_path / "src", "local/m", tmp_path / "rr", WINDOWS) == 42


def test_split(merged, tmp_path):
    root, repo = merged
    splits = tools.split_dataset(LeRobotDataset(repo, root=root), {"train": [0, 2, 4, 5], "val": [1, 3, 6]},
                                 output_dir=tmp_path / "split")
    sizes = {name: _assert_compiles_to_lerobots_samples(Path(ds.root), ds.repo_id, tmp_path / f"{name}-rr", WINDOWS)
             for name, ds in splits.items()}
    assert sizes == {"train": 6 + 4 + 5 + 8, "val": 9 + 7 + 3}


def test_features_added_and_removed(merged, tmp_path):
    root, repo = merged
    n = LeRobotDataset(repo, root=root).meta.total_frames
    added = {"next.reward": (np.arange(n, dtype=np.float32).reshape(n, 1) / 3,
                             {"dtype": "float32", "shape": (1,), "names": None}),
             "next.done": (np.arange(n).reshape(n, 1) % 5 == 0, {"dtype": "bool", "shape": (1,), "names": None})}
    tools.add_features(LeRobotDataset(repo, root=root), added, output_dir=tmp_path / "added", repo_id="local/added")
    _assert_compiles_to_lerobots_samples(tmp_path / "added", "local/added", tmp_path / "added-rr",
                                         {**WINDOWS, "next.reward": [0.0, 0.1]})
    tools.remove_feature(LeRobotDataset(repo, root=root), [WRIST, "observation.state"], output_dir=tmp_path / "removed",
                         repo_id="local/removed")
    _assert_compiles_to_lerobots_samples(tmp_path / "removed", "local/removed", tmp_path / "removed-rr",
                                         {"action": WINDOWS["action"], TOP: WINDOWS[TOP]})
    assert WRIST not in (tmp_path / "removed-rr/meta/stats.json").read_text()


def test_tasks_modified_in_place(merged, tmp_path):
    root, repo = merged
    edited = tmp_path / "tasks"
    shutil.copytree(root, edited)
    tools.modify_tasks(LeRobotDataset(repo, root=edited), episode_tasks={0: "a task no episode had", 3: "task 1"})
    _assert_compiles_to_lerobots_samples(edited, repo, tmp_path / "tasks-rr", WINDOWS)
    assert CompiledDataset(str(tmp_path / "tasks-rr"), shuffle=False)[0]["task"] == "a task no episode had"


def test_streaming_encoding(tmp_path):
    _record(tmp_path / "src", "local/streamed", [6, 9, 4, 7], 0, streaming_encoding=True)
    assert _assert_compiles_to_lerobots_samples(tmp_path / "src", "local/streamed", tmp_path / "rr", WINDOWS) == 26


def test_merged_av1_against_lerobots_decode(tmp_path):
    """Two members in LeRobot's default AV1, merged by ``merge_datasets`` into concatenated files: roboreel
    re-encodes every clip to HEVC, and each sample of an epoch (camera and action windows included) equals
    LeRobot's on the merged source, tabular values exactly, every frame >= the compile's floor (40 dB) in RGB
    against LeRobot's own decode of the AV1 (torchcodec; the compile measures against PyAV's). The floor can
    fail: neighbouring frames of these pictures are under 20 dB apart, so a clip shifted by one frame, or an
    episode cut at a wrong offset of a concatenated file, falls far below it."""
    a = _record(tmp_path / "a", "local/av1-a", [6, 9, 4], 0, rgb_encoder=None)
    b = _record(tmp_path / "b", "local/av1-b", [5, 8], 10, rgb_encoder=None)
    tools.merge_datasets([a, b], "local/av1-merged", output_dir=tmp_path / "merged")
    src = LeRobotDataset("local/av1-merged", root=tmp_path / "merged", return_uint8=True)
    episodes = src.meta.episodes
    assert all(src.meta.features[cam]["info"]["video.codec"] == "av1" for cam in CAMS)
    key = f"videos/{TOP}"  # b's first clip appended to the file that holds a's clips
    assert episodes[3][f"{key}/file_index"] == episodes[2][f"{key}/file_index"]
    assert episodes[3][f"{key}/from_timestamp"] > 0
    seam = episodes[3]["dataset_from_index"]
    for cam in CAMS:
        assert psnr(src[seam - 1][cam].numpy(), src[seam][cam].numpy()) < SETTINGS.min_psnr / 2
    n = _assert_compiles_to_lerobots_samples(tmp_path / "merged", "local/av1-merged", tmp_path / "rr", WINDOWS,
                                             min_psnr=SETTINGS.min_psnr)
    assert n == 6 + 9 + 4 + 5 + 8
