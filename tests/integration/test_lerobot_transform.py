"""A ``--resize`` / ``--fps`` compile held against the real LeRobot 0.6.1: a synthetic source (both at once, stats
and policy), then a source LeRobot's own recorder wrote in its default AV1 (each apart, through ``roboreel compile``).

- Sample j equals ``LeRobotDataset(source)`` at the kept source frame: tabular values exactly (index, frame_index,
  timestamp renumbered), camera frames within 35 dB of torchvision's ``resize(antialias=True)`` of LeRobot's frame.
- The recomputed stats are LeRobot's own ``compute_stats`` functions applied to what was kept: tabular stats
  exactly (per episode and aggregated), camera stats within 0.01 (roboreel computes them from the encoder's input,
  LeRobot's functions here from the decoded compiled frames: the difference is x265's loss).
- A policy is built for the new shapes and fps from ``CompiledDataset.meta`` with no change to its config.
- LeRobot-written, ``--resize HxW``: every sample is LeRobot's with its frames through torchvision's
  ``Resize([H, W], BILINEAR, antialias=True)`` (what docs/format.md says the filter matches): tabular values
  exactly, frames within the 35 dB docs/format.md holds test compiles to.
- LeRobot-written, ``--fps`` half the source's: sample j of an episode is LeRobot's at source frame 2j, windows on
  the new grid included: tabular values exactly (index, frame_index renumbered), frames within the compile's floor
  (40 dB) of LeRobot's decode.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("lerobot.datasets.compute_stats", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

import torch  # noqa: E402
import torchvision.transforms.v2.functional as tvf  # noqa: E402
from lerobot.datasets import LeRobotDataset  # noqa: E402
from lerobot.datasets.compute_stats import (  # noqa: E402
    aggregate_stats,
    auto_downsample_height_width,
    compute_episode_stats,
    get_feature_stats,
    sample_indices,
)
from lerobot.datasets.factory import resolve_delta_timestamps  # noqa: E402
from lerobot.policies.act.configuration_act import ACTConfig  # noqa: E402
from lerobot.utils.feature_utils import dataset_to_policy_features  # noqa: E402
from support.datasets import assert_same_sample  # noqa: E402
from support.settings import FAST
from torchvision.transforms.v2 import InterpolationMode, Resize  # noqa: E402

from roboreel.cli import main as roboreel_main  # noqa: E402
from roboreel.compile import CompileSettings, compile_dataset  # noqa: E402
from roboreel.compile.video import psnr  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402
from roboreel.synth import SynthConfig, synthesize  # noqa: E402
from roboreel.synth.content import render_frame  # noqa: E402

CAM = "observation.images.top"
STEP = 2
# Camera stats: roboreel's from the frames it encodes (the source decode resized by swscale in yuv420p), LeRobot's
# functions here on LeRobot's decode resized by torchvision: the same frames up to the filter (~45 dB apart).
DIFFS: dict[str, float] = {}
# Measured: mean/std within 0.001, quantiles within 0.004, min/max (single extreme pixels) within 15/255.
CAM_ATOL = {"mean": 0.002, "std": 0.002, "q10": 0.01, "q50": 0.01, "q90": 0.01, "q01": 0.01, "q99": 0.01,
            "min": 16 / 255, "max": 16 / 255}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("transform")
    src, out = root / "src", root / "out"
    synthesize(src, SynthConfig(episodes=3, min_length=11, max_length=16, fps=20, height=256, width=256,
                                cameras=(CAM,), video_files_size_in_mb=0.2))
    settings = FAST.replace(resize=(128, 128), fps=10)
    compile_dataset(str(src), str(out), settings=settings, workers=1)
    return src, out


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def test_samples_are_lerobots_at_the_kept_frames_resized(pair):
    src, out = pair
    lr = LeRobotDataset("local/synth", root=src, return_uint8=True)
    got = list(CompiledDataset(str(out), shuffle=False, return_uint8=True))
    kept = [(e, j) for e in range(lr.meta.total_episodes)
            for j in range(math.ceil(lr.meta.episodes[e]["length"] / STEP))]
    assert len(got) == len(kept)
    worst = math.inf
    for n, (g, (e, j)) in enumerate(zip(got, kept, strict=True)):
        w = lr[lr.meta.episodes[e]["dataset_from_index"] + j * STEP]
        assert int(g["index"]) == n and int(g["frame_index"]) == j and int(g["episode_index"]) == e
        assert float(g["timestamp"]) == float(w["timestamp"]) == np.float32(j / 10)
        for key in ("observation.state", "action", "task_index"):
            assert torch.equal(g[key], w[key]), key
        assert g["task"] == w["task"]
        worst = min(worst, _psnr(g[CAM], tvf.resize(w[CAM], [128, 128], antialias=True)))
    assert worst >= 35.0, worst


def test_stats_are_lerobots_compute_stats_of_what_was_kept(pair):
    src, out = pair
    lr = LeRobotDataset("local/synth", root=src)
    features = {k: v for k, v in lr.meta.features.items() if v["dtype"] not in ("video", "image")}
    table = lr.hf_dataset.with_format(None)
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    lr_uint8 = LeRobotDataset("local/synth", root=src, return_uint8=True)
    want_eps = []
    for e, meta in enumerate(eps):
        start = lr.meta.episodes[e]["dataset_from_index"]
        rows = table[start:start + lr.meta.episodes[e]["length"]:STEP]
        data = {k: np.asarray(rows[k], dtype=v["dtype"])  # the recorder's buffer: each feature's own dtype
                for k, v in features.items() if v["dtype"] not in ("string", "language")}
        n = len(rows["index"])
        j = np.arange(n)  # renumbered on the new grid, as the compile writes them; timestamps as the recorder
        data |= {"index": meta["dataset_from_index"] + j, "frame_index": j, "timestamp": j / 10}  # computes them
        want = compute_episode_stats(data, {k: features[k] for k in data})
        frames = [lr_uint8[start + i * STEP][CAM] for i in sample_indices(n)]  # LeRobot's decode, kept frames
        imgs = np.stack([auto_downsample_height_width(tvf.resize(f, [128, 128], antialias=True).numpy())
                         for f in frames])
        cam = get_feature_stats(imgs, axis=(0, 2, 3), keepdims=True)
        want[CAM] = {k: v if k == "count" else np.squeeze(v / 255.0, axis=0) for k, v in cam.items()}
        want_eps.append(want)
        for key, st in want.items():
            for name, value in st.items():
                mine = np.asarray(meta[f"stats/{key}/{name}"])
                if key == CAM and name != "count":
                    DIFFS[name] = max(DIFFS.get(name, 0.0), float(np.abs(mine - value).max()))
                    np.testing.assert_allclose(mine, value, atol=CAM_ATOL[name], err_msg=f"{e} {key} {name}")
                else:
                    assert mine.shape == value.shape and np.array_equal(mine, value), (e, key, name)
    print("camera stats, largest |roboreel - LeRobot| per stat:", {k: round(v, 4) for k, v in DIFFS.items()})
    agg = want_eps[0]  # as LeRobot's recorder aggregates: episode by episode (dataset_metadata.save_episode)
    for ep_stats in want_eps[1:]:
        agg = aggregate_stats([agg, ep_stats])
    stats = json.loads((out / "meta/stats.json").read_text())
    for key, st in agg.items():
        for name, value in st.items():
            mine = np.asarray(stats[key][name])
            if key == CAM and name != "count":
                np.testing.assert_allclose(mine, value, atol=CAM_ATOL[name], err_msg=name)
            else:
                np.testing.assert_array_equal(mine, value, err_msg=f"{key} {name}")


def test_a_policy_is_built_for_the_new_shapes_and_fps(pair):
    _, out = pair
    meta = CompiledDataset(str(out)).meta
    feats = dataset_to_policy_features(meta.features)
    assert meta.fps == 10 and tuple(feats[CAM].shape) == (3, 128, 128)
    cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, chunk_size=4, n_action_steps=4)
    cfg.input_features = {k: f for k, f in feats.items() if k != "action"}
    cfg.output_features = {"action": feats["action"]}
    assert resolve_delta_timestamps(cfg, meta)["action"] == [i / 10 for i in range(4)]


def test_lerobot_train_trains_on_the_new_shapes_and_grid(pair, tmp_path):
    """``roboreel lerobot-train`` on the compile, with the usual ACT config: LeRobot's loop gets 128x128 frames
    and actions chunked on the 10 fps grid (the batches CompiledDataset gives with delta_timestamps at 10 fps)."""
    import itertools

    from lerobot_support import ACT_CHUNK, TINY_ACT, run_train
    from support.datasets import batch_indices

    _, out = pair
    batch, seed = 4, 7
    run = run_train([*TINY_ACT, f"--dataset.root={out}", "--dataset.repo_id=local/synth", f"--batch_size={batch}",
                     "--num_workers=0", "--steps=2", "--log_freq=1", f"--seed={seed}",
                     f"--output_dir={tmp_path / 'train'}", "--wandb.enable=false"], tmp_path / "probe")
    assert run.returncode == 0, run.log[-3000:]
    assert "step:2 " in run.log and "End of training" in run.log
    spec = run.batches()[0]["spec"]
    assert spec[CAM] == [[batch, 3, 128, 128], "torch.uint8"]
    assert spec["action"] == [[batch, ACT_CHUNK, 6], "torch.float32"]
    ds = CompiledDataset(str(out), delta_timestamps={"action": [i / 10 for i in range(ACT_CHUNK)]},
                         return_uint8=True, seed=seed, batch_size=batch)
    ds.set_epoch(0)
    want = [batch_indices(b) for b in itertools.islice(torch.utils.data.DataLoader(ds, batch_size=batch), 2)]
    assert [b["index"] for b in run.batches()] == want


# A source LeRobot records itself: 20 fps, one 64x96 camera in LeRobot's default encoder (libsvtav1, CRF 30).
RECORDED, REC_FPS, REC_HW, REC_LENGTHS = "local/recorded", 20, (64, 96), [9, 13, 10]
# docs/format.md ("Resize and frame rate"): every frame of a test compile >= 35 dB against torchvision's
# resize(antialias=True). Measured here (32x48 / 48x72): the worst frame 36.9 / 37.3 dB; the best frame against
# the same resize without antialias 29.7 / 33.2 dB (asserted under the floor), against bicubic 34.0 / 36.3 dB,
# against the next frame's reference 17 dB. The margin is small: at 40x56 (factors 1.6 / 1.71) the worst frame of
# this textured picture is 34.6 dB, as 4:2:0 alone costs it more there (torch's own resize, converted to 4:2:0
# before any x265 loss, scores 35.5 dB; benchmarks/resize_filter_psnr.py).
RESIZE_FLOOR = 35.0


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("transform-recorded") / "src"
    h, w = REC_HW
    features = {CAM: {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]},
                "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
                "action": {"dtype": "float32", "shape": (2,), "names": None}}
    ds = LeRobotDataset.create(RECORDED, fps=REC_FPS, root=root, features=features, use_videos=True)
    index = 0
    for e, n in enumerate(REC_LENGTHS):
        for k in range(n):
            ds.add_frame({CAM: render_frame(index, e, 0, k, h, w), "task": f"task {e % 2}",
                          "observation.state": np.array([e, k, index / 7], np.float32),
                          "action": np.array([k, -index], np.float32)})
            index += 1
        ds.save_episode()
    ds.finalize()
    assert LeRobotDataset(RECORDED, root=root).meta.features[CAM]["info"]["video.codec"] == "av1"
    return root


def _roboreel_compile(src: Path, out: Path, *options: str) -> dict:
    """``roboreel compile SRC OUT OPTIONS`` (fastest preset, two episodes a shard); OUT's meta/info.json."""
    argv = ["compile", str(src), str(out), "--preset", "ultrafast", "--episodes-per-shard", "2", "--workers", "1",
            "--no-progress", *options]
    assert roboreel_main(argv) == 0
    return json.loads((out / "meta/info.json").read_text())


@pytest.mark.parametrize("size", [(32, 48), (48, 72)], ids=["half", "three-quarters"])
def test_resize_of_a_lerobot_recording_is_lerobots_frames_through_torchvision_resize(recorded, tmp_path, size):
    h, w = size
    info = _roboreel_compile(recorded, tmp_path / "rr", "--resize", f"{h}x{w}")
    assert info["fps"] == REC_FPS and info["features"][CAM]["shape"] == [h, w, 3]
    resize = Resize([h, w], interpolation=InterpolationMode.BILINEAR, antialias=True)
    plain = Resize([h, w], interpolation=InterpolationMode.BILINEAR, antialias=False)
    windows = {"action": [-0.05, 0.0, 0.05], CAM: [-0.1, 0.0]}
    theirs = LeRobotDataset(RECORDED, root=recorded, return_uint8=True, delta_timestamps=windows)
    got = list(CompiledDataset(str(tmp_path / "rr"), shuffle=False, return_uint8=True, delta_timestamps=windows))
    assert len(got) == len(theirs) == sum(REC_LENGTHS)
    unsmoothed = 0.0
    for i, g in enumerate(got):
        w_ = theirs[i]
        # what LeRobotDataset(image_transforms=resize) returns: the transform applied to each camera entry
        assert_same_sample(g, {**w_, CAM: resize(w_[CAM])}, [CAM], min_psnr=RESIZE_FLOOR)
        unsmoothed = max(unsmoothed, *(psnr(a.numpy(), b.numpy()) for a, b in zip(g[CAM], plain(w_[CAM]),
                                                                                  strict=True)))
    # the floor tells the documented filter apart: no frame comes within it of the resize without antialias
    assert unsmoothed < RESIZE_FLOOR, unsmoothed
    # every row is kept as it is: the tabular stats stay the source's (docs/format.md)
    mine, source = (json.loads((root / "meta/stats.json").read_text()) for root in (tmp_path / "rr", recorded))
    assert {k: v for k, v in mine.items() if k != CAM} == {k: v for k, v in source.items() if k != CAM}


def test_fps_of_a_lerobot_recording_is_lerobots_samples_at_the_kept_timestamps(recorded, tmp_path):
    fps, step = REC_FPS // 2, 2
    info = _roboreel_compile(recorded, tmp_path / "rr", "--fps", str(fps))
    assert info["fps"] == fps and info["features"][CAM]["info"]["video.fps"] == fps
    assert info["features"][CAM]["shape"] == [*REC_HW, 3]
    windows = {"action": [-0.1, 0.0, 0.1], CAM: [-0.1, 0.0]}  # on the 10 fps grid: source frames -2, 0, +2
    theirs = LeRobotDataset(RECORDED, root=recorded, return_uint8=True, delta_timestamps=windows)
    got = list(CompiledDataset(str(tmp_path / "rr"), shuffle=False, return_uint8=True, delta_timestamps=windows))
    kept = [(e, j) for e, n in enumerate(REC_LENGTHS) for j in range(math.ceil(n / step))]
    assert len(got) == len(kept) == info["total_frames"]
    edged = 0
    for n, (g, (e, j)) in enumerate(zip(got, kept, strict=True)):
        start, length = theirs.meta.episodes[e]["dataset_from_index"], REC_LENGTHS[e]
        w_ = theirs[start + j * step]
        assert int(w_["episode_index"]) == e and int(w_["frame_index"]) == j * step
        # renumbered on the new grid; the timestamp j / 10 is the source row's own value
        want = {**w_, "index": w_["index"].new_tensor(n), "frame_index": w_["frame_index"].new_tensor(j),
                "action": w_["action"].clone()}
        # a padded slot past the end holds the episode's edge value (docs/reader.md): the last kept frame's,
        # LeRobot's last frame only where the source length is odd (an even one's last frame is not kept)
        edge = theirs[start + (math.ceil(length / step) - 1) * step]["action"][1]
        want["action"][2:][want["action_is_pad"][2:]] = edge
        edged += not torch.equal(want["action"], w_["action"])
        assert_same_sample(g, want, [CAM], min_psnr=CompileSettings().min_psnr)
    assert edged == 1  # the 10-frame episode's last kept frame (8): LeRobot's own window pads with frame 9
