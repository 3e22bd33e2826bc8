"""Source mp4s LeRobot reads differently from the plain case: compile carries them exactly or refuses, and
validate reports what compile would refuse.

Frames off the fps grid: LeRobot reads frame k only within tolerance_s (1e-4 s) of from_timestamp + k/fps.

Further off, LeRobotDataset refuses the sample, so compile refuses the episode (naming file, episode and frame)
and validate reports it as an error, instead of a clip that snaps the frame onto the grid (a sample LeRobot
cannot give) or a stream copy the reader refuses mid-epoch. Within the tolerance the frame is LeRobot's frame k;
a copy would keep its pts, so the clip is re-encoded at k/fps.

A display rotation (torchcodec returns the frames rotated) and a second video stream (which one LeRobot reads is
its FFmpeg's choice) are refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from support.datasets import codes
from support.settings import FAST

from roboreel.bench.reference import ReferenceDataset
from roboreel.compile import compile_dataset
from roboreel.formats.errors import SourceError
from roboreel.reader import CompiledDataset
from roboreel.synth import SynthConfig, synthesize
from roboreel.validate import validate

CAM = "observation.images.top"
FPS = 10


def _source(root: Path, codec: str) -> Path:
    """Two episodes of 10 frames in one mp4 (frames 0-9 episode 0, 10-19 episode 1)."""
    synthesize(root, SynthConfig(episodes=2, min_length=10, max_length=10, fps=FPS, cameras=(CAM,), height=64,
                                 width=96, tasks=1, codec=codec, crf=18, video_files_size_in_mb=100))
    return root


def _shift_frame(root: Path, frame: int, by_s: float) -> Path:
    """Rewrite the camera's mp4 container (same packets) with file frame ``frame`` shown ``by_s`` late."""
    (mp4,) = sorted((root / "videos").rglob("*.mp4"))
    tmp = mp4.with_name("shifted.mp4")
    with av.open(str(mp4)) as src, av.open(str(tmp), "w", format="mp4") as dst:
        s = src.streams.video[0]
        out = dst.add_stream_from_template(s, opaque=True)
        target, shift = round(frame / FPS / s.time_base), round(by_s / s.time_base)
        assert shift != 0
        for p in src.demux(s):
            if p.size == 0:
                continue
            if p.pts == target:
                p.pts += shift
            p.stream = out
            dst.mux(p)
    tmp.replace(mp4)
    return mp4.relative_to(root)


@pytest.mark.parametrize("codec", ["libx264", "libsvtav1"])  # a stream copy candidate, and a re-encode
def test_a_frame_beyond_lerobots_tolerance_fails_compile_and_validate(tmp_path, codec):
    src = _source(tmp_path / "src", codec)
    rel = _shift_frame(src, 15, 3e-4)  # episode 1, frame 5
    out = tmp_path / "out"
    with pytest.raises(SourceError, match=r"episode frame 5 is at 1\.500\d+s, \+0\.\d{3} ms from its timestamp "
                                          r"1\.500000s .* tolerance_s=0\.0001s") as err:
        compile_dataset(str(src), str(out), settings=FAST, workers=1)
    assert (err.value.file, err.value.episode) == (str(rel), 1)
    assert not out.exists() or list(out.iterdir()) == []  # a failed first compile leaves nothing
    report = validate(str(src))
    errors = [f for f in report.findings if f.severity == "error"]
    assert [(f.code, f.episode) for f in errors] == [("video-timestamp", 1)], errors
    assert "1 of the episode's 10 frames" in errors[0].message and "frame 5" in errors[0].message


def test_jitter_within_the_tolerance_is_reencoded_on_the_grid_and_read_as_lerobot_reads_it(tmp_path):
    src = _source(tmp_path / "src", "libx264")  # g=2 H.264: both episodes would be stream-copied
    _shift_frame(src, 5, 5e-5)  # episode 0, frame 5: LeRobot still reads it as frame 5
    out = tmp_path / "out"
    report = compile_dataset(str(src), str(out), settings=FAST, workers=1)
    docs = {int(ep): clips[CAM] for side in sorted(out.glob(".roboreel-parts/shard-*.json"))
            for ep, clips in json.loads(side.read_text())["clips"].items()}
    assert (docs[0]["mode"], docs[1]["mode"]) == ("encode", "remux"), docs
    assert "source frame 5 is +0.0" in docs[0]["why"] and "ms off the fps grid" in docs[0]["why"], docs[0]
    assert (report.clips_encoded, report.clips_remuxed) == (1, 1)
    ref = ReferenceDataset(str(src), return_uint8=True)  # the source decoded as LeRobot does
    got = list(CompiledDataset(str(out), shuffle=False, return_uint8=True))
    assert len(got) == len(ref) == 20
    for i, s in enumerate(got):
        want = ref[i][CAM]
        assert codes(s[CAM]) == codes(want), i
        mse = torch.mean((s[CAM].float() - want.float()) ** 2).item()
        assert mse == 0 or 10 * math.log10(255**2 / mse) >= 40.0, (i, mse)
    # a camera partly copied, partly re-encoded ("h264,hevc") is healthy: no finding at all
    assert validate(str(out)).findings == []


def _rewrite(root: Path, codec: str, *, rotate: int = 0, extra_stream: bool = False) -> Path:
    """Rewrite the camera's mp4 (same packets) with a display rotation, or with a second video stream first."""
    (mp4,) = sorted((root / "videos").rglob("*.mp4"))
    tmp = mp4.with_name("rewritten.mp4")
    with av.open(str(mp4)) as src, av.open(str(tmp), "w", format="mp4") as dst:
        s = src.streams.video[0]
        if extra_stream:  # another picture, written as stream 0
            other = dst.add_stream("libx264", rate=FPS)
            other.width, other.height, other.pix_fmt = 32, 32, "yuv420p"
        out = dst.add_stream_from_template(s, opaque=True)
        if rotate:
            out.set_display_rotation(rotate)
        for p in src.demux(s):
            if p.size:
                p.stream = out
                dst.mux(p)
        if extra_stream:
            for frame in (av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24"),) * 20:
                for p in other.encode(frame):
                    dst.mux(p)
            for p in other.encode():
                dst.mux(p)
    tmp.replace(mp4)
    return mp4.relative_to(root)


@pytest.mark.parametrize("codec", ["libx264", "libsvtav1"])
@pytest.mark.parametrize("odd,match,code", [
    ({"rotate": 90}, "display rotation of (90|-90) degrees", "video-rotation"),
    ({"extra_stream": True}, "mp4 holds 2 video streams", "video-streams"),
])
def test_a_rotated_or_two_stream_mp4_fails_compile_and_validate(tmp_path, codec, odd, match, code):
    src = _source(tmp_path / "src", codec)
    rel = _rewrite(src, codec, **odd)
    with pytest.raises(SourceError, match=match) as err:
        compile_dataset(str(src), str(tmp_path / "out"), settings=FAST, workers=1)
    assert err.value.file == str(rel)
    report = validate(str(src))
    assert [f.code for f in report.findings if f.severity == "error"] == [code], report.findings


def test_an_odd_sized_camera_that_cannot_be_copied_fails_naming_it(tmp_path):
    """info.json says H.264 (so compile's up-front size check lets a copy through), but the 4:4:4 frames must be
    re-encoded, and 63x95 has no 4:2:0 form: a clear error, not x265's."""
    root = tmp_path / "src"
    synthesize(root, SynthConfig(episodes=1, min_length=6, max_length=6, fps=FPS, cameras=(CAM,), height=63,
                                 width=95, tasks=1, codec="libx264", crf=18, pix_fmt="yuv444p"))
    with pytest.raises(SourceError, match=r"the camera is 95x63: odd sides, .*source pixel format yuv444p .*"
                                          r"pass --resize HxW") as err:
        compile_dataset(str(root), str(tmp_path / "out"), settings=FAST, workers=1)
    assert err.value.episode == 0 and err.value.file.endswith(".mp4")
