"""``roboreel bench compile``: roboreel and the ffmpeg CLI transcode the same frames, alternated, with PSNR."""

from __future__ import annotations

import json
import shutil

import pytest

from roboreel.bench.compile_bench import CompileBenchConfig, compile_benchmark
from roboreel.cli import main
from roboreel.compile import CompileSettings
from roboreel.formats.lerobot_v3 import LeRobotSource

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI")


def test_same_frames_alternated_with_psnr_per_clip(small_source):
    src = LeRobotSource(str(small_source))
    clips = len(src.episodes) * len(src.camera_keys)
    frames = sum(e.length for e in src.episodes) * len(src.camera_keys)
    # the same transcode on both sides: roboreel's PSNR floor (a lower CRF where a frame needs it) off
    result = compile_benchmark(str(small_source), settings=CompileSettings(preset="ultrafast", min_psnr=0.0),
                               config=CompileBenchConfig(workers=(1, 2), repeats=1))
    runs = result["runs"]
    assert [(r["tool"], r["workers"]) for r in runs] == [("roboreel", 1), ("ffmpeg", 1), ("roboreel", 2),
                                                         ("ffmpeg", 2)]
    assert {r["frames"] for r in runs} == {frames}  # counted in the outputs: both wrote every frame
    assert [r["workers"] for r in result["ratios"]] == [1, 2] and result["ratios"][0]["speedup_vs_1"] == 1.0
    for tool in ("roboreel", "ffmpeg"):
        p = result["psnr"][tool]
        assert (p["clips"], p["frames"]) == (clips, frames)
        # ultrafast at 64x64 on pixel-code frames: well above noise, and the same encoder settings on both sides
        assert 30 < p["min_frame_db"] <= p["min_clip_mean_db"] <= p["mean_db"] < 100
    assert abs(result["psnr"]["roboreel"]["mean_db"] - result["psnr"]["ffmpeg"]["mean_db"]) < 1.5


def test_cli_synthesises_its_dataset_and_ffmpeg_per_file(tmp_path):
    out = tmp_path / "cb"
    args = ["bench", "compile", "--episodes", "3", "--cameras", "2", "--height", "64", "--width", "96",
            "--min-length", "10", "--max-length", "14", "--workers", "1", "--repeats", "1",
            "--unit", "file", "--out", str(out)]
    assert main(args) == 0
    data = json.loads((out / "compile.json").read_text())
    src = LeRobotSource(data["source"])
    assert (len(src.episodes), len(src.camera_keys)) == (3, 2) and src.info.features[src.camera_keys[0]][
        "shape"][:2] == [64, 96]
    assert len({r["frames"] for r in data["runs"]}) == 1  # whole files hold exactly the episodes' frames
    assert data["unit"] == "file" and set(data["psnr"]) == {"roboreel"}
    assert data["psnr"]["roboreel"]["mean_db"] > 30
