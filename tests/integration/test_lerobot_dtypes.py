"""Every numeric dtype and shape LeRobot 0.6.1's writer takes, written by LeRobot itself (a video camera beside
them, data files rolled over), compiled and read back equal to ``LeRobotDataset`` over whole epochs, windows and
batches included.

LeRobot stores a float64 vector as float64 and a [2, 3] feature as HF ``Array2D`` (nested lists), but its samples
are ``torch.tensor`` of the Python values: float32, int64 or bool, in the feature's shape (reader/plan/_rows.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import default_collate

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.configs.video import RGBEncoderConfig  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from support.datasets import assert_same_sample  # noqa: E402
from support.settings import FAST

import roboreel  # noqa: E402
from roboreel.compile import compile_dataset  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402
from roboreel.synth.content import render_frame  # noqa: E402
from roboreel.validate import validate  # noqa: E402

REPO = "local/dtypes"
CAM = "observation.images.top"
LENGTHS = (6, 5, 7, 4)
FEATURES = {
    CAM: {"dtype": "video", "shape": (48, 64, 3), "names": ["height", "width", "channels"]},
    "observation.state": {"dtype": "float64", "shape": (3,), "names": None},
    "action": {"dtype": "float32", "shape": (2, 3), "names": None},
    "obs.cube": {"dtype": "float64", "shape": (2, 2, 2), "names": None},
    "obs.grid": {"dtype": "int32", "shape": (3, 2), "names": None},
    "obs.i64": {"dtype": "int64", "shape": (2,), "names": None},
    "obs.i32": {"dtype": "int32", "shape": (4,), "names": None},
    "obs.i16": {"dtype": "int16", "shape": (2,), "names": None},
    "obs.u8": {"dtype": "uint8", "shape": (3,), "names": None},
    "obs.f16": {"dtype": "float16", "shape": (2,), "names": None},
    "obs.bool": {"dtype": "bool", "shape": (2,), "names": None},
    "obs.f64_1": {"dtype": "float64", "shape": (1,), "names": None},
    "obs.i32_1": {"dtype": "int32", "shape": (1,), "names": None},
    "obs.b1": {"dtype": "bool", "shape": (1,), "names": None},
}
WINDOWS = {"action": [-0.1, 0.0, 0.1, 0.2], "observation.state": [-0.2, 0.0], "obs.cube": [0.0, 0.1],
           "obs.grid": [-0.1, 0.0], "obs.u8": [0.0, 0.3], "obs.f64_1": [-0.1, 0.0], CAM: [-0.1, 0.0]}


def _frame(i: int) -> dict[str, np.ndarray]:
    """Frame ``i``'s values: each changes with i, and the float64 ones need rounding to float32."""
    return {"observation.state": np.array([i / 3, 1e-300 * (i + 1), 1 + 2**-40 * i], np.float64),
            "action": (np.arange(6, dtype=np.float32).reshape(2, 3) + np.float32(i / 7)),
            "obs.cube": np.arange(8, dtype=np.float64).reshape(2, 2, 2) * (i + 1) / 9,
            "obs.grid": np.arange(6, dtype=np.int32).reshape(3, 2) - i,
            "obs.i64": np.array([2**53 + i, -(2**62) + i], np.int64),
            "obs.i32": np.array([i, -i, 2**31 - 1, -(2**31)], np.int32),
            "obs.i16": np.array([i, -30000], np.int16), "obs.u8": np.array([i, 255, 128], np.uint8),
            "obs.f16": np.array([i / 3, 65504], np.float16), "obs.bool": np.array([i % 2 == 0, i % 3 == 0]),
            "obs.f64_1": np.array([i / 11], np.float64), "obs.i32_1": np.array([-i], np.int32),
            "obs.b1": np.array([i % 2 == 1])}


def _record(root: Path, repo: str, fps: int, step: int = 1) -> None:
    """LeRobot records the dataset at ``fps``, keeping frames 0, step, 2 * step, ... of each episode."""
    ds = LeRobotDataset.create(repo, fps=fps, root=root, features=FEATURES, use_videos=True,
                               data_files_size_in_mb=0.002,
                               rgb_encoder=RGBEncoderConfig(vcodec="h264", g=2, crf=18))  # keeps the pixel codes
    index = 0
    for ep, n in enumerate(LENGTHS):
        for k in range(n):
            if k % step == 0:
                ds.add_frame({CAM: render_frame(index, ep, 0, k, 48, 64), **_frame(index), "task": f"task {ep % 2}"})
            index += 1
        ds.save_episode()
    ds.finalize()


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lerobot-dtypes")
    src, out = root / "src", root / "compiled"
    _record(src, REPO, fps=10)
    settings = dataclasses.replace(FAST, episodes_per_shard=2)
    compile_dataset(str(src), str(out), settings=settings, workers=1)
    return src, out


def test_source_layout_and_validate(pair):
    src, out = pair
    assert len(list((src / "data").rglob("*.parquet"))) > 1  # LeRobot rolled the data files over
    assert validate(str(src)).findings == [] and validate(str(out), deep=True).findings == []


@pytest.mark.parametrize("deltas", [None, WINDOWS], ids=["plain", "windows"])
def test_every_sample_equals_lerobots(pair, deltas):
    src, out = pair
    theirs = LeRobotDataset(REPO, root=src, delta_timestamps=deltas)
    mine = CompiledDataset(str(out), shuffle=False, delta_timestamps=deltas)
    got = list(mine)
    assert len(got) == len(theirs) == sum(LENGTHS)
    for i, sample in enumerate(got):
        want = theirs[i]
        assert want["action"].shape[-2:] == (2, 3) and want["observation.state"].dtype == torch.float32
        assert want["obs.u8"].dtype == torch.int64 and want["obs.f64_1"].shape == (() if deltas is None else (2,))
        assert_same_sample(sample, want, [CAM])
    for i in reversed(range(len(theirs))):  # map-style, backwards: every episode read again, decoders seek back
        assert_same_sample(mine[i], theirs[i], [CAM])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_equal_lerobot_collated(pair, num_workers):
    """DataLoader(CompiledDataset) and roboreel.loader, with windows, against LeRobot's samples collated by
    torch's default_collate (lerobot-train's collate without language columns), over a whole epoch."""
    src, out = pair
    theirs = LeRobotDataset(REPO, root=src, delta_timestamps=WINDOWS)
    ds = CompiledDataset(str(out), seed=3, delta_timestamps=WINDOWS, return_uint8=True)
    for loader in (torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers),
                   roboreel.loader(ds, batch_size=4, num_workers=num_workers)):
        seen = []
        for batch in loader:
            idx = batch["index"].tolist()
            want = default_collate([theirs[i] for i in idx])
            assert list(batch) == list(want)
            for key, w in want.items():
                g = batch[key]
                if key == CAM:  # uint8 asked: LeRobot's float32 frames, code by code
                    assert g.dtype == torch.uint8 and g.shape == w.shape
                    for b in range(len(idx)):
                        assert_same_sample({CAM: g[b] / 255.0}, {CAM: w[b]}, [CAM])
                elif isinstance(w, torch.Tensor):
                    assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w), (key, idx)
                else:
                    assert g == w, (key, idx)
            seen += idx
        assert sorted(seen) == list(range(len(theirs)))


def test_fps_compile_stats_are_what_lerobot_records_at_that_fps(pair, tmp_path):
    """``--fps 5`` of the 10 fps dataset against LeRobot recording the frames it keeps at 5 fps: the tabular stats
    (meta/stats.json and each episode's), every dtype and shape, equal exactly. Camera stats are left out: LeRobot
    computes them from the frames it is given, roboreel from the source's decoded frames."""
    src, _ = pair
    out, ref = tmp_path / "out5", tmp_path / "ref5"
    compile_dataset(str(src), str(out), settings=FAST.replace(fps=5), workers=1)
    _record(ref, "local/dtypes5", fps=5, step=2)
    tabular = [k for k, f in json.loads((ref / "meta/info.json").read_text())["features"].items()
               if f["dtype"] not in ("video", "string")]
    assert {"timestamp", "action", "obs.cube", "obs.u8"} <= set(tabular)
    mine, want = (json.loads((d / "meta/stats.json").read_text()) for d in (out, ref))
    for key in tabular:
        assert mine[key] == want[key], key
    mine_eps, want_eps = (pq.read_table(sorted((d / "meta/episodes").rglob("*.parquet"))[0]).to_pylist()
                          for d in (out, ref))
    assert len(mine_eps) == len(want_eps) == len(LENGTHS)
    for got, exp in zip(mine_eps, want_eps, strict=True):
        names = [c for c in exp if c.startswith("stats/") and c.split("/")[1] in tabular]
        assert names and {n: got[n] for n in names} == {n: exp[n] for n in names}, got["episode_index"]
