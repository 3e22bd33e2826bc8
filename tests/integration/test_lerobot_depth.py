"""Issue 27 against the real LeRobot 0.6.1: datasets written with LeRobot's own API (``LeRobotDataset.create`` /
``add_frame`` / ``save_episode``), compiled by roboreel, every sample compared with ``LeRobotDataset``'s.

- depth cameras recorded as uint16 millimetres and as float32 metres (LeRobot's default depth encoder: lossless
  HEVC gray12le, log-quantised): every depth map equal to LeRobot's exactly (float32 [1, H, W] mm), stats,
  ``depth_keys`` and the compiled dataset validating clean;
- RGB sources in H.264 with a short GOP (stream-copied: frames equal LeRobot's exactly), H.264 with a GOP longer
  than ``remux_max_gop`` and 10-bit HEVC (both re-encoded: each frame's pixel code equal and >= 40 dB against
  LeRobot's frame).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.configs.video import RGBEncoderConfig  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from support.datasets import codes  # noqa: E402
from support.settings import FAST

from roboreel.compile import compile_dataset  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402
from roboreel.synth.content import render_frame  # noqa: E402
from roboreel.validate import validate  # noqa: E402

H, W, FPS = 48, 64, 10
RGB, DEPTH = "observation.images.rgb", "observation.images.depth"


def _write(root: Path, *, depth_unit: str | None, episodes: int = 3, length: int = 12,
           rgb_encoder: RGBEncoderConfig | None = None) -> Path:
    """A dataset written by LeRobot's API: an RGB camera (pixel-coded frames), optionally a depth camera."""
    shutil.rmtree(root, ignore_errors=True)
    feats = {
        RGB: {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (2,), "names": ["a", "b"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["a", "b"]},
    }
    if depth_unit is not None:
        feats[DEPTH] = {"dtype": "video", "shape": (H, W, 1), "names": ["height", "width", "channels"],
                        "info": {"is_depth_map": True}}
    ds = LeRobotDataset.create("local/depth", fps=FPS, root=root, features=feats, use_videos=True,
                               rgb_encoder=rgb_encoder)
    index = 0
    yy, xx = np.mgrid[0:H, 0:W]
    for ep in range(episodes):
        for k in range(length):
            frame = {RGB: render_frame(index, ep, 0, k, H, W), "observation.state": np.array([index, k], np.float32),
                     "action": np.array([-index, k], np.float32), "task": f"task {ep % 2}"}
            if depth_unit is not None:
                mm = (300 + (index * 53 + yy * 5 + xx * 9) % 4000).astype(np.uint16)  # 0.3 m .. 4.3 m
                frame[DEPTH] = (mm if depth_unit == "mm" else mm.astype(np.float32) / 1000.0)[..., None]
            ds.add_frame(frame)
            index += 1
        ds.save_episode()
    ds.finalize()
    return root


def _compile(src: Path, out: Path, **kw):
    settings = FAST.replace(**kw)
    return compile_dataset(str(src), str(out), settings=settings, workers=1)


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) * 255).pow(2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def _compare(src: Path, out: Path, *, rgb_exact: bool) -> None:
    theirs = LeRobotDataset("local/depth", root=src)
    mine = CompiledDataset(str(out), shuffle=False)
    assert mine.num_frames == theirs.num_frames
    assert mine.meta.depth_keys == theirs.meta.depth_keys
    for key in theirs.meta.depth_keys:
        for stat, value in theirs.meta.stats[key].items():
            assert np.array_equal(np.asarray(mine.meta.stats[key][stat]), np.asarray(value)), (key, stat)
    n = 0
    for got in mine:
        want = theirs[int(got["index"])]
        for key in theirs.meta.depth_keys:
            assert got[key].dtype == want[key].dtype == torch.float32 and got[key].shape == want[key].shape
            assert torch.equal(got[key], want[key]), (key, int(got["index"]))
        assert codes(got[RGB]) == codes(want[RGB])
        if rgb_exact:
            assert torch.equal(got[RGB], want[RGB]), int(got["index"])
        else:
            assert _psnr(got[RGB], want[RGB]) >= 40.0, int(got["index"])
        for key in ("observation.state", "action", "index", "frame_index", "episode_index", "timestamp"):
            assert torch.equal(got[key], want[key]), key
        n += 1
    assert n == theirs.num_frames


@pytest.mark.parametrize("unit", ["mm", "m"])
def test_lerobot_depth_reads_back_exactly(tmp_path, unit):
    src = _write(tmp_path / "src", depth_unit=unit)
    report = _compile(src, tmp_path / "out")
    assert report.clips_lossless >= 3  # every depth clip proven code for code
    _compare(src, tmp_path / "out", rgb_exact=False)
    for path in (src, tmp_path / "out"):
        r = validate(str(path))
        assert r.count("error") == 0, [f.to_dict() for f in r.findings]


def test_lerobot_depth_windows(tmp_path):
    """A window on the depth camera ([T, 1, H, W], padded at episode edges) equals LeRobot's."""
    src = _write(tmp_path / "src", depth_unit="mm", episodes=2)
    _compile(src, tmp_path / "out")
    delta = {DEPTH: [-0.2, -0.1, 0.0], "action": [0.0, 0.1]}
    theirs = LeRobotDataset("local/depth", root=src, delta_timestamps=delta)
    mine = CompiledDataset(str(tmp_path / "out"), shuffle=False, delta_timestamps=delta)
    n = 0
    for got in mine:
        want = theirs[int(got["index"])]
        assert got[DEPTH].shape == want[DEPTH].shape == (3, 1, H, W)
        assert torch.equal(got[DEPTH], want[DEPTH]) and torch.equal(got[f"{DEPTH}_is_pad"], want[f"{DEPTH}_is_pad"])
        again = mine[int(got["index"])]  # map-style
        assert torch.equal(again[DEPTH], want[DEPTH]) and torch.equal(again[RGB], got[RGB])
        n += 1
    assert n == theirs.num_frames


def test_lerobot_depth_reencoded_losslessly(tmp_path):
    src = _write(tmp_path / "src", depth_unit="mm", episodes=2)
    _compile(src, tmp_path / "out", reencode=True)
    _compare(src, tmp_path / "out", rgb_exact=False)


def test_lerobot_h264_short_gop_is_copied_exactly(tmp_path):
    src = _write(tmp_path / "src", depth_unit=None, rgb_encoder=RGBEncoderConfig(vcodec="h264", g=2, crf=18))
    report = _compile(src, tmp_path / "out")
    assert (report.clips_remuxed, report.clips_encoded) == (3, 0)
    _compare(src, tmp_path / "out", rgb_exact=True)


@pytest.mark.parametrize("encoder", [RGBEncoderConfig(vcodec="h264", g=240, crf=18),
                                     RGBEncoderConfig(vcodec="hevc", pix_fmt="yuv420p10le", g=2, crf=18)],
                         ids=["h264-gop240", "hevc-10bit"])
def test_lerobot_long_gop_and_10bit_are_reencoded(tmp_path, encoder):
    src = _write(tmp_path / "src", depth_unit=None, episodes=2, length=40, rgb_encoder=encoder)
    report = _compile(src, tmp_path / "out")
    assert (report.clips_remuxed, report.clips_encoded) == (0, 2), report.reencode_reasons
    _compare(src, tmp_path / "out", rgb_exact=False)
    for path in (src, tmp_path / "out"):
        assert validate(str(path)).count("error") == 0
