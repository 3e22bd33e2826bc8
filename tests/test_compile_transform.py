"""``--resize`` per camera and ``--fps`` at compile time, on real AV1 sources from the synth generator.

Sample j of the compiled dataset must be the reference reader's sample at the kept source frame (frames 0, k, 2k,
... of each episode), tabular values exactly (index / frame_index / timestamp renumbered on the new grid), camera
frames identified by their pixel code (the top camera is resized by exactly 2x, so its code blocks survive) and
within 35 dB PSNR of torch's antialiased bilinear resize of the reference frame, which is what
``torchvision.transforms.v2.functional.resize(antialias=True)`` runs on uint8 tensors (benchmarks/resize_filter_psnr.py
--check-torchvision asserts the two equal in the LeRobot venv; this venv has no torchvision).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import make_source
from support.datasets import codes
from support.settings import FAST

from roboreel.bench.reference import ReferenceDataset
from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.source import check_transform
from roboreel.compile.video import DEPTH_FILTER, resize_frame
from roboreel.doctor.dataset import check_dataset
from roboreel.doctor.env import CudaInfo
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.reader import CompiledDataset
from roboreel.validate import validate
from roboreel.validate.summary import format_summary, summarize

TOP, WRIST = "observation.images.top", "observation.images.wrist"
STEP = 2  # 20 fps -> 10 fps
SETTINGS = FAST.replace(resize=(128, 128), resize_cameras=((WRIST, 96, 160),), fps=10)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("transform")
    src = make_source(root / "src", episodes=4, min_length=13, max_length=22, height=256, width=256,
                      video_files_size_in_mb=0.2)
    out = root / "out"
    compile_dataset(str(src), str(out), settings=SETTINGS, workers=2)
    return src, out


def _resized(frame_chw_uint8: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """torchvision's ``resize(antialias=True)`` of a uint8 CHW frame (torch's antialiased bilinear kernel)."""
    return torch.nn.functional.interpolate(frame_chw_uint8[None], size=(h, w), mode="bilinear", antialias=True)[0]


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def _kept(src: Path) -> list[tuple[int, int, int]]:
    """(source global index, episode, new frame_index) of every kept frame, in order."""
    return [(e.from_index + j * STEP, e.index, j) for e in LeRobotSource(str(src)).episodes
            for j in range(math.ceil(e.length / STEP))]


def test_samples_are_kept_source_frames_resized(pair):
    src, out = pair
    kept = _kept(src)
    got = list(CompiledDataset(str(out), shuffle=False, return_uint8=True))
    ref = ReferenceDataset(str(src), return_uint8=True)
    want = ref.__getitems__([i for i, _, _ in kept])
    assert len(got) == len(kept)
    worst = math.inf
    for new_index, (g, w, (src_index, ep, j)) in enumerate(zip(got, want, kept, strict=True)):
        assert int(g["index"]) == new_index and int(g["frame_index"]) == j and int(g["episode_index"]) == ep
        assert g["timestamp"].dtype == torch.float32 and float(g["timestamp"]) == np.float32(j / 10)
        assert float(g["timestamp"]) == float(w["timestamp"])  # synth timestamps are frame_index / fps
        for key in ("observation.state", "action", "task_index", "task"):
            assert (g[key] == w[key]) if isinstance(g[key], str) else torch.equal(g[key], w[key]), key
        assert g[TOP].shape == (3, 128, 128) and g[WRIST].shape == (3, 96, 160)
        assert codes(g[TOP]) == [(src_index, ep, 0)]
        for cam, (h, w_) in ((TOP, (128, 128)), (WRIST, (96, 160))):
            worst = min(worst, _psnr(g[cam], _resized(w[cam], h, w_)))
    assert worst >= 35.0, worst


def test_wrist_frames_are_the_kept_frames_not_their_neighbours(pair):
    """The non-uniformly resized camera carries no readable code: its frame is the kept one by PSNR."""
    src, out = pair
    kept = _kept(src)
    got = list(CompiledDataset(str(out), shuffle=False, return_uint8=True))
    ref = ReferenceDataset(str(src), return_uint8=True)
    src_len = {e.index: (e.from_index, e.to_index) for e in LeRobotSource(str(src)).episodes}
    for g, (i, ep, _) in list(zip(got, kept, strict=True))[::3]:
        lo, hi = src_len[ep]
        around = [k for k in (i - 1, i, i + 1) if lo <= k < hi]
        scores = {k: _psnr(g[WRIST], _resized(ref[k][WRIST], 96, 160)) for k in around}
        assert max(scores, key=scores.get) == i, scores


def test_meta_episodes_and_stats_on_the_new_grid(pair):
    src, out = pair
    source = LeRobotSource(str(src))
    info = json.loads((out / "meta/info.json").read_text())
    lengths = [math.ceil(e.length / STEP) for e in source.episodes]
    assert info["fps"] == 10 and info["total_frames"] == sum(lengths)
    assert info["features"][TOP]["shape"][:2] == [128, 128] and info["features"][WRIST]["shape"][:2] == [96, 160]
    assert info["features"][TOP]["info"]["video.fps"] == 10
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    starts = np.concatenate([[0], np.cumsum(lengths)])
    assert [e["length"] for e in eps] == lengths
    assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in eps] == list(zip(starts[:-1], starts[1:],
                                                                                       strict=True))
    assert [e[f"videos/{TOP}/to_timestamp"] for e in eps] == [n / 10 for n in lengths]
    # tabular stats from the kept rows, against plain numpy on the source rows at the kept frames
    kept_rows = [source.episode_rows(e).to_pydict() for e in source.episodes]
    state = np.concatenate([np.asarray(r["observation.state"], np.float32)[::STEP] for r in kept_rows])
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats["observation.state"]["min"] == state.min(0).tolist()
    assert stats["observation.state"]["max"] == state.max(0).tolist()
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(0, dtype=np.float64), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["std"], state.std(0, dtype=np.float64), rtol=1e-5)
    assert stats["index"]["max"] == [sum(lengths) - 1] and stats["frame_index"]["max"] == [max(lengths) - 1]
    for e, n in zip(eps, lengths, strict=True):  # per-episode stats recomputed too
        assert e["stats/observation.state/count"] == [n]
        assert e["stats/index/min"] == [float(e["dataset_from_index"])]
    # camera stats: per channel in [0, 1], shaped (3, 1, 1), from the frames written (decoded mean within 1%)
    frames = torch.stack([s[TOP] for s in CompiledDataset(str(out), shuffle=False, return_uint8=True)])
    mean = (frames.double() / 255).mean(dim=(0, 2, 3)).tolist()
    assert np.asarray(stats[TOP]["mean"]).shape == (3, 1, 1)
    np.testing.assert_allclose(np.asarray(stats[TOP]["mean"]).ravel(), mean, atol=0.01)


def test_delta_timestamps_on_the_new_grid(pair):
    src, out = pair
    kept = _kept(src)
    dt = {"action": [-0.1, 0.0, 0.1], TOP: [-0.1, 0.0]}
    got = list(CompiledDataset(str(out), shuffle=False, return_uint8=True, delta_timestamps=dt))
    ref = ReferenceDataset(str(src), return_uint8=True)
    ep_range = {e.index: (e.from_index, e.to_index) for e in LeRobotSource(str(src)).episodes}
    for g, (i, ep, _) in zip(got, kept, strict=True):
        lo, hi = ep_range[ep]
        window = [i - STEP, i, i + STEP]
        pads = [not lo <= k < hi for k in window]
        clamped = [min(max(k, lo), hi - 1 - (hi - 1 - lo) % STEP) for k in window]  # the last kept frame
        assert g["action_is_pad"].tolist() == pads
        assert torch.equal(g["action"], torch.stack([ref[k]["action"] for k in clamped]))
        assert [c for c, *_ in codes(g[TOP])] == clamped[:2]


def test_meta_reader_validate_and_manifest_record_the_transform(pair):
    _, out = pair
    ds = CompiledDataset(str(out), shuffle=False)
    assert ds.meta.fps == 10 and tuple(ds.meta.features[TOP]["shape"][:2]) == (128, 128)
    assert tuple(ds.meta.features[WRIST]["shape"][:2]) == (96, 160)
    report = validate(str(out))
    assert report.verdict == "clean" and not report.findings, report.findings
    t = json.loads((out / "roboreel.json").read_text())["settings"]["transform"]
    assert t["source_fps"] == 20 and t["fps"] == 10 and t["frame_step"] == 2
    assert t["cameras"][WRIST] == {"source": [256, 256], "size": [96, 160], "filter": "bilinear"}
    line = (f"20 -> 10 fps (frames 0, 2, 4, ... of each episode); {TOP} 256x256 -> 128x128 (bilinear); "
            f"{WRIST} 256x256 -> 96x160 (bilinear)")
    assert f"  transform  {line}\n" in format_summary(summarize(str(out)))  # roboreel inspect
    doctor = check_dataset(str(out), cuda=CudaInfo(available=False, reason="test"), gpu_device=None,
                           gpu_requested=False)
    assert doctor.transform == line and doctor.cameras[0].cpu.ok


def test_rerun_with_other_settings_is_refused(pair, tmp_path):
    src, out = pair
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    with pytest.raises(FileExistsError, match="setting fps: 10 vs 5"):
        compile_dataset(str(src), str(copy), settings=SETTINGS.replace(fps=5), workers=1)
    with pytest.raises(FileExistsError, match="setting resize_cameras"):
        compile_dataset(str(src), str(copy), settings=SETTINGS.replace(resize_cameras=()), workers=1)


def test_parts_and_worker_counts_give_identical_bytes(pair, tmp_path):
    src, out = pair
    parts = tmp_path / "parts"
    for k in (1, 0):
        compile_dataset(str(src), str(parts), settings=SETTINGS, workers=1, part=(k, 2))
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(parts) for p in parts.rglob("*") if p.is_file())
    for rel in files:
        assert (out / rel).read_bytes() == (parts / rel).read_bytes(), rel


def test_resume_remakes_a_lost_shard_identically(pair, tmp_path):
    """A shard whose sidecar is gone is compiled again by a rerun (resume) into the very same bytes."""
    src, out = pair
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    (copy / ".roboreel-parts/shard-000001.json").unlink()
    (copy / "shards/shard-000001.tar").unlink()
    (copy / "roboreel.json").unlink()
    report = compile_dataset(str(src), str(copy), settings=SETTINGS, workers=1)
    assert (report.shards_compiled, report.shards_skipped) == (1, 1)
    kept = sum(math.ceil(e.length / STEP) for e in LeRobotSource(str(src)).episodes)
    assert (report.frames_out, report.fps_out) == (kept, 10) and f"({kept} kept at 10 fps)" in report.summary()
    for p in sorted(out.rglob("*")):
        if p.is_file():
            assert (copy / p.relative_to(out)).read_bytes() == p.read_bytes(), p


def test_bad_options_are_refused_before_writing(pair, tmp_path):
    src, _ = pair
    with pytest.raises(ValueError, match=r"--fps 3 does not divide the source's 20 fps.*1, 2, 4, 5, 10, 20"):
        compile_dataset(str(src), str(tmp_path / "a"), settings=SETTINGS.replace(fps=3), workers=1)
    with pytest.raises(ValueError, match=r"cameras \['observation.images.side'\]"):
        compile_dataset(str(src), str(tmp_path / "b"),
                        settings=SETTINGS.replace(resize_cameras=(("observation.images.side", 64, 64),)), workers=1)
    with pytest.raises(ValueError, match="positive even"):
        SETTINGS.replace(resize_cameras=((TOP, 63, 64),))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    features = {**LeRobotSource(str(src)).info.features, "observation.images.grip": {"dtype": "image"}}
    with pytest.raises(ValueError, match=r"image features \['observation.images.grip'\] stored in the data"):
        check_transform(features, 20, SETTINGS)
    check_transform(features, 20, CompileSettings())  # no transform: parquet images are carried as they are


@pytest.mark.parametrize("asked", [{"fps": 20}, {"resize": (64, 64)},
                                   {"resize_cameras": (("observation.images.top", 64, 64),)},
                                   {"fps": 20, "resize": (64, 64)}], ids=["fps", "resize", "camera", "both"])
def test_a_transform_to_what_the_source_is_is_the_plain_compile(tmp_path, asked):
    """``--fps`` equal to the source's (k = 1), or ``--resize`` to the size every camera has, asks for nothing:
    every byte, stats and settings included, is the compile without it. Either used to count as a transform, so
    the camera stats were recomputed from the decoded (lossy) frames and replaced the recorder's, and
    roboreel.json / the record kept the option, refusing a later run that left it out."""
    src = make_source(tmp_path / "src", episodes=2, min_length=5, max_length=7)
    assert json.loads((src / "meta/info.json").read_text())["fps"] == 20
    plain, same = tmp_path / "plain", tmp_path / "same"
    compile_dataset(str(src), str(plain), settings=FAST, workers=1)
    compile_dataset(str(src), str(same), settings=FAST.replace(**asked), workers=1)
    files = sorted(p.relative_to(plain) for p in plain.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(same) for p in same.rglob("*") if p.is_file())
    for rel in files:
        assert (plain / rel).read_bytes() == (same / rel).read_bytes(), rel
    assert (same / "meta/stats.json").read_bytes() == (src / "meta/stats.json").read_bytes()


@pytest.mark.parametrize("fps", [None, 10], ids=["resize", "resize+fps"])
def test_resize_keeps_the_sources_tabular_stats(tmp_path, fps):
    """``lerobot-edit-dataset recompute_stats --relative_action`` rewrites stats.json's ``action`` entry (and only
    stats.json) with stats no recorder computes. ``--resize`` alone keeps every row, so stats.json and the
    per-episode stats of every tabular feature stay the source's, and only the cameras' are recomputed; they
    used to be recomputed from the rows too, so a compile at the training resolution silently swapped a
    policy's relative-action normalization for the absolute one. ``--fps`` keeps other rows: recomputed."""
    src = make_source(tmp_path / "src", episodes=2, min_length=6, max_length=8, height=64, width=64)
    stats = json.loads((src / "meta/stats.json").read_text())
    custom = {k: [x - 100.0 if isinstance(x, float) else x for x in v] for k, v in stats["action"].items()}
    (src / "meta/stats.json").write_text(json.dumps({**stats, "action": custom}, indent=4))
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), workers=1,
                    settings=FAST.replace(resize=(32, 32), fps=fps))
    got = json.loads((out / "meta/stats.json").read_text())
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    source_eps = pq.read_table(src / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert got[TOP] != stats[TOP]  # the cameras' stats are those of the resized frames
    assert np.asarray(got[TOP]["mean"]).shape == (3, 1, 1)
    if fps is None:
        assert got["action"] == custom and got["observation.state"] == stats["observation.state"]
        assert [e["stats/action/mean"] for e in episodes] == [e["stats/action/mean"] for e in source_eps]
    else:
        assert got["action"]["count"] == [sum(e["length"] for e in episodes)] and got["action"] != custom


def test_depth_frames_resize_nearest_never_averaged():
    """A depth map's pixels are kept values of the source, never a mean of neighbours (nearest neighbour)."""
    rng = np.random.default_rng(0)
    planes = rng.integers(0, 256, size=(96 * 3 // 2, 128), dtype=np.uint8)
    frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
    small = resize_frame(frame, 48, 64, DEPTH_FILTER).to_ndarray()
    luma, out = planes[:96], small[:48]
    assert np.array_equal(out, luma[::2, ::2]) or np.array_equal(out, luma[1::2, 1::2]), "not point-sampled"
    assert not np.array_equal(resize_frame(frame, 48, 64).to_ndarray()[:48], out)  # the default filter averages


def test_an_unchanged_hevc_camera_is_still_copied_and_gets_stats(tmp_path):
    """Resizing one camera of an HEVC source: the other camera's clips stay exact stream copies, and the stats
    (recomputed for every feature of a transforming compile) include it, from its source frames."""
    src = make_source(tmp_path / "src", episodes=2, min_length=12, max_length=14, codec="libx265")
    out = tmp_path / "out"
    settings = FAST.replace(resize_cameras=((TOP, 32, 48),))
    report = compile_dataset(str(src), str(out), settings=settings, workers=1)
    assert (report.clips_encoded, report.clips_remuxed) == (2, 2)
    source = LeRobotSource(str(src))
    ref = ReferenceDataset(str(src), return_uint8=True)
    got = list(CompiledDataset(str(out), shuffle=False, return_uint8=True))
    for i, g in enumerate(got):
        assert torch.equal(g[WRIST], ref[i][WRIST])  # the copy: pixel-identical to the source decode
        assert g[TOP].shape == (3, 32, 48)
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats[WRIST]["count"] == [sum(min(e.length, 100) for e in source.episodes)]
    frames = torch.stack([g[WRIST] for g in got]).double() / 255
    np.testing.assert_allclose(np.asarray(stats[WRIST]["mean"]).ravel(), frames.mean(dim=(0, 2, 3)), atol=1e-3)
    report = validate(str(out))
    assert report.verdict == "clean" and not report.findings, report.findings


def test_a_depth_camera_resizes_nearest_and_keeps_its_units(tmp_path):
    """A camera flagged ``is_depth_map`` is resized with nearest neighbour (recorded as such) and its stats are
    not divided by 255 (LeRobot keeps depth stats in stored units)."""
    src = make_source(tmp_path / "src", episodes=2, min_length=12, max_length=14)
    info = json.loads((src / "meta/info.json").read_text())
    info["features"][WRIST]["info"]["is_depth_map"] = True
    (src / "meta/info.json").write_text(json.dumps(info, indent=4))
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=FAST.replace(resize=(32, 32)), workers=1)
    t = json.loads((out / "roboreel.json").read_text())["settings"]["transform"]["cameras"]
    assert t[WRIST]["filter"] == "nearest" and t[TOP]["filter"] == "bilinear"
    stats = json.loads((out / "meta/stats.json").read_text())
    assert max(np.asarray(stats[WRIST]["max"]).ravel()) > 1.0 >= max(np.asarray(stats[TOP]["max"]).ravel())


def test_the_cli_options_make_the_same_compile(pair, tmp_path, capsys):
    """``roboreel compile --resize HxW --resize KEY=HxW --fps N`` is SETTINGS: the very same bytes."""
    from roboreel.cli import main

    src, out = pair
    cli = tmp_path / "cli"
    base = ["compile", str(src), str(cli), "--preset", "ultrafast", "--episodes-per-shard", "2", "--workers", "1",
            "--no-progress"]
    assert main([*base, "--resize", "128x128", "--resize", f"{WRIST}=96x160", "--fps", "10"]) == 0
    for p in sorted(out.rglob("*")):
        if p.is_file():
            assert (cli / p.relative_to(out)).read_bytes() == p.read_bytes(), p
    assert main([*base[:2], str(tmp_path / "x"), *base[3:], "--fps", "3"]) == 2
    assert "--fps 3 does not divide the source's 20 fps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--resize", "128x"])
    assert "--resize must be HxW or CAMERA=HxW" in capsys.readouterr().err
