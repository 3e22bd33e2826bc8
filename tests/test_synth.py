"""The synthetic generator writes a genuine LeRobot v3 layout whose frames and rows identify themselves."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from torchcodec.decoders import VideoDecoder

from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.synth import FrameCode, read
from roboreel.synth.content import action_row, render_frame, state_row


def test_codes_round_trip_raw():
    for h, w in [(64, 64), (96, 128), (224, 224)]:
        f = render_frame(123456, 77, 2, 5, h, w)
        assert read(f) == FrameCode(123456, 77, 2)
        assert read(np.moveaxis(f, -1, 0).astype(np.float32) / 255) == FrameCode(123456, 77, 2)


def test_code_check_rejects_uncoded_frame():
    with pytest.raises(ValueError, match="check failed"):
        read(np.full((64, 64, 3), 200, np.uint8))


def test_layout_and_rollover(small_source):
    src = LeRobotSource(str(small_source))
    info = json.loads((small_source / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 8
    assert info["total_frames"] == sum(e.length for e in src.episodes)
    assert src.tasks == {0: "pick up the red cube", 1: "place the cube in the bowl", 2: "open the drawer"}
    # mp4s are shared by several episodes and roll over, later files start in later chunk dirs
    paths = {e.videos["observation.images.top"].path for e in src.episodes}
    assert len(paths) >= 3 and any("chunk-001" in p for p in paths)
    assert any(e.videos["observation.images.top"].from_timestamp > 0 for e in src.episodes)
    # one row group per episode in the data files
    for rel in {e.data_path for e in src.episodes}:
        md = pq.ParquetFile(small_source / rel).metadata
        for g in range(md.num_row_groups):
            eps = pq.ParquetFile(small_source / rel).read_row_group(g, columns=["episode_index"]).column(0)
            assert len(set(eps.to_pylist())) == 1


def test_every_source_frame_and_row_identifies_itself(small_source):
    src = LeRobotSource(str(small_source))
    for e in src.episodes:
        rows = src.episode_rows(e)
        idx = rows.column("index").to_pylist()
        assert idx == list(range(e.from_index, e.to_index))
        state = np.stack(rows.column("observation.state").to_numpy(zero_copy_only=False))
        action = np.stack(rows.column("action").to_numpy(zero_copy_only=False))
        assert (state == np.stack([state_row(i, 6) for i in idx])).all()
        assert (action == np.stack([action_row(i, 6) for i in idx])).all()
        for cam_id, cam in enumerate(src.camera_keys):
            span = e.videos[cam]
            dec = VideoDecoder(str(small_source / span.path))
            first = round(span.from_timestamp * src.fps)  # LeRobot maps timestamps to indices by rounding
            frames = dec.get_frames_at(list(range(first, first + e.length)))
            assert [read(f) for f in frames.data] == [FrameCode(i, e.index, cam_id) for i in idx]


def test_codes_survive_av1_at_benchmark_size(source_factory):
    """224x224 (the benchmark's size): every decoded AV1 frame, key or inter, still reads as itself."""
    root = source_factory("s224", episodes=2, height=224, width=224, min_length=24, max_length=30,
                          cameras=("observation.images.top", "observation.images.side"))
    src = LeRobotSource(str(root))
    for e in src.episodes:
        for cam_id, cam in enumerate(src.camera_keys):
            span = e.videos[cam]
            first = round(span.from_timestamp * src.fps)
            frames = VideoDecoder(str(root / span.path)).get_frames_at(list(range(first, first + e.length)))
            assert [read(f).index for f in frames.data] == list(range(e.from_index, e.to_index))
            assert {read(f).camera for f in frames.data} == {cam_id}


def test_file_layout_is_deterministic(source_factory):
    """Rollover must not depend on how many packets the multi-threaded AV1 encoder has returned so far."""
    tables = []
    for name in ("a", "b"):
        root = source_factory(name)
        rel = "meta/episodes/chunk-000/file-000.parquet"
        cols = [c for c in pq.read_schema(root / rel).names if not c.startswith("stats/")]
        tables.append(pq.read_table(root / rel, columns=cols))
    assert tables[0].equals(tables[1])
    assert len(set(tables[0].column("videos/observation.images.top/file_index").to_pylist())) >= 2


def test_public_surface_holds_what_users_use():
    """The test/benchmark helpers live in bench/, camera_names in synth, the version in its own module."""
    from pathlib import Path

    import roboreel
    import roboreel.reader
    from roboreel._version import __version__
    from roboreel.synth import camera_names

    assert roboreel.__version__ == __version__
    assert not hasattr(roboreel.reader, "ReferenceDataset")
    assert not (Path(roboreel.__file__).parent / "testing").exists()
    assert camera_names(4) == ("observation.images.top", "observation.images.wrist", "observation.images.side",
                               "observation.images.cam3")
