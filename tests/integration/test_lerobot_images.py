"""A dataset LeRobot 0.6.1 writes itself with ``use_videos=False`` (images in parquet, raw depth images in mm and
in m, a string feature, data files rolled over) and then annotates with language columns the way ``lerobot-annotate``'s writer does: compiled by
roboreel, validated clean, and read back equal to ``LeRobotDataset`` over whole epochs: ``CompiledDataset``,
``DataLoader`` with lerobot-train's ``lerobot_collate_fn`` and ``roboreel.loader``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from support.settings import FAST

pytest.importorskip("lerobot.datasets.language", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.annotations.steerable_pipeline.executor import Executor  # noqa: E402
from lerobot.annotations.steerable_pipeline.writer import LanguageColumnsWriter  # noqa: E402
from lerobot.datasets.io_utils import write_table_one_row_group_per_episode  # noqa: E402
from lerobot.datasets.language import LANGUAGE_COLUMNS  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from lerobot.utils.collate import lerobot_collate_fn  # noqa: E402
from lerobot_support import TINY_ACT, run_train  # noqa: E402

import roboreel  # noqa: E402
import roboreel.formats.manifest  # noqa: E402
from roboreel.compile import compile_dataset  # noqa: E402
from roboreel.reader import CompiledDataset  # noqa: E402
from roboreel.synth import SynthConfig, synthesize  # noqa: E402
from roboreel.synth.content import render_frame  # noqa: E402
from roboreel.validate import validate  # noqa: E402

REPO = "local/images"
CAM = "observation.images.top"
DEPTH_MM, DEPTH_M = "observation.depth_mm", "observation.depth_m"
LENGTHS = (12, 9, 15, 10, 11)


def _annotate(root: Path) -> None:
    """language_persistent / language_events added with lerobot-annotate's own writer and info.json update."""
    writer = LanguageColumnsWriter()
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        eps, ts = table.column("episode_index").to_pylist(), table.column("timestamp").to_pylist()
        persistent = [[{"role": "assistant", "content": f"plan {e}", "style": "plan", "timestamp": 0.0,
                        "camera": None, "tool_calls": None}] for e in eps]
        events = [[] if round(t * 10) % 4 else
                  [{"role": "assistant", "content": None, "style": None, "camera": None,
                    "tool_calls": [{"type": "function", "function": {"name": "say",
                                                                    "arguments": {"text": f"{e}@{t:.1f}"}}}]}]
                  for e, t in zip(eps, ts, strict=True)]
        write_table_one_row_group_per_episode(writer._materialize_table(table, persistent, events, drop_old=True),
                                              path)
    Executor._ensure_annotation_metadata_in_info(root)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lerobot-images")
    src, out = root / "src", root / "compiled"
    features = {CAM: {"dtype": "image", "shape": (48, 64, 3), "names": ["height", "width", "channels"]},
                "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
                "action": {"dtype": "float32", "shape": (3,), "names": None},
                "note": {"dtype": "string", "shape": (1,), "names": None},
                # raw depth maps as images (LeRobot writes TIFF: uint16 mode I;16, float32 mode F), in mm and in m
                DEPTH_MM: {"dtype": "image", "shape": (24, 32, 1), "names": ["height", "width", "channels"],
                           "info": {"is_depth_map": True, "depth_unit": "mm"}},
                DEPTH_M: {"dtype": "image", "shape": (24, 32, 1), "names": ["height", "width", "channels"],
                          "info": {"is_depth_map": True, "depth_unit": "m"}}}
    ds = LeRobotDataset.create(REPO, fps=10, root=src, features=features, use_videos=False,
                               data_files_size_in_mb=0.005)
    ramp = (400 + 37 * np.arange(32, dtype=np.uint16))[None, :, None].repeat(24, axis=0)  # mm, shifted per frame
    index = 0
    for ep, n in enumerate(LENGTHS):
        for k in range(n):
            ds.add_frame({CAM: render_frame(index, ep, 0, k, 48, 64),
                          "observation.state": np.full(3, index, np.float32) / 7,
                          "action": np.arange(3, dtype=np.float32) + index, "note": f"frame {index}",
                          DEPTH_MM: ramp + np.uint16(index),
                          DEPTH_M: (ramp + np.uint16(index)).astype(np.float32) / np.float32(1000),
                          "task": f"task {ep % 2}"})
            index += 1
        ds.save_episode()
    ds.finalize()
    _annotate(src)
    settings = dataclasses.replace(FAST, episodes_per_shard=2, images="keep")
    compile_dataset(str(src), str(out), settings=settings, workers=1)
    return src, out


def _assert_equal(got, want, where) -> None:
    assert list(got) == list(want), (where, list(got), list(want))
    for key, w in want.items():
        g = got[key]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w), (where, key)
        else:
            assert g == w, (where, key, g, w)


def test_source_layout_and_validate(pair):
    src, out = pair
    assert len(list((src / "data").rglob("*.parquet"))) > 1  # LeRobot rolled the data files over
    info = json.loads((src / "meta/info.json").read_text())
    assert info["features"]["language_events"]["dtype"] == "language" and info["video_path"] is None
    assert validate(str(src)).findings == [] and validate(str(out), deep=True).findings == []


def test_every_sample_equals_lerobots(pair):
    src, out = pair
    theirs = LeRobotDataset(REPO, root=src)
    mine = CompiledDataset(str(out), shuffle=False)
    assert (mine.meta.image_keys, mine.meta.camera_keys, mine.meta.has_language_columns) == \
        (theirs.meta.image_keys, theirs.meta.camera_keys, True)
    for name, value in theirs.meta.stats[CAM].items():  # image stats as LeRobot loads them ([3, 1, 1] each)
        assert np.array_equal(mine.meta.stats[CAM][name], value), name
    assert list(mine.meta.features) == list(theirs.meta.features)
    got = list(mine)
    assert len(got) == len(theirs) == sum(LENGTHS)
    for i, sample in enumerate(got):
        _assert_equal(sample, theirs[i], i)
        _assert_equal(mine[i], theirs[i], i)  # map-style, as LeRobotDataset is indexed
    assert any(s["language_events"] for s in got) and any(not s["language_events"] for s in got)
    assert got[5][DEPTH_MM].shape == (1, 24, 32) and got[5][DEPTH_MM][0, 0, 1].item() == 400 + 37 + 5  # mm as stored
    assert torch.allclose(got[5][DEPTH_M], got[5][DEPTH_MM])  # metres read back in mm, like LeRobot


def test_windows_and_transforms_equal_lerobots(pair):
    src, out = pair
    deltas = {CAM: [-0.2, -0.1, 0.0], "action": [0.0, 0.1]}
    theirs = LeRobotDataset(REPO, root=src, delta_timestamps=deltas, image_transforms=lambda x: 1.0 - x)
    for sample in CompiledDataset(str(out), delta_timestamps=deltas, image_transforms=lambda x: 1.0 - x, seed=2):
        _assert_equal(sample, theirs[int(sample["index"])], int(sample["index"]))


def _keeping_language(samples: list[dict]) -> dict:
    """lerobot_collate_fn, with the language columns kept as per-sample lists in their place (what its docstring
    promises; 0.6.1's code leaves them out): roboreel.loader's batches."""
    collated = lerobot_collate_fn(samples)
    return {k: [s[k] for s in samples] if k in LANGUAGE_COLUMNS else collated[k] for k in samples[0]}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_equal_lerobot_collate(pair, num_workers):
    """lerobot-train's collate (lerobot_collate_fn, chosen when meta.has_language_columns; `roboreel lerobot-train`
    then keeps the DataLoader, integrations/lerobot/loading.py) over CompiledDataset equals LeRobot's samples
    collated the same way; roboreel.loader's own batches too, with the language columns kept as lists."""
    src, out = pair
    theirs = LeRobotDataset(REPO, root=src)
    ds = CompiledDataset(str(out), seed=4)
    _check_batches(ds, theirs, num_workers, _assert_equal)


def _check_batches(ds, theirs, num_workers: int, check) -> None:
    """Every batch of DataLoader(ds) with lerobot_collate_fn and of roboreel.loader(ds) against LeRobot's samples
    collated alike (``check(got, want, where)``), over a whole epoch."""
    for dl, collate in ((torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers,
                                                     collate_fn=lerobot_collate_fn), lerobot_collate_fn),
                        (roboreel.loader(ds, batch_size=4, num_workers=num_workers), _keeping_language)):
        seen = []
        for batch in dl:
            idx = batch["index"].tolist()
            check(batch, collate([theirs[i] for i in idx]), idx)
            seen += idx
        assert sorted(seen) == list(range(len(theirs)))


@pytest.mark.parametrize("images", ["keep", "clips"])
def test_lerobot_train_runs_on_images_and_language(tmp_path, images):
    """`roboreel lerobot-train` (ACT) on a compiled dataset with RGB image features (kept, or compiled as clips)
    and language columns: LeRobot picks lerobot_collate_fn (meta.has_language_columns), the adapter keeps its
    DataLoader, training runs, and its batches hold the images as float32 [B, 3, H, W] (lerobot-train asks for
    return_uint8, which LeRobot does not apply to image features) and no language columns (lerobot_collate_fn
    leaves them out)."""
    src, out = tmp_path / "src", tmp_path / "compiled"
    synthesize(src, SynthConfig(episodes=4, min_length=10, max_length=14, fps=10, height=48, width=64,
                                cameras=(CAM,), use_videos=False, language=True))
    compile_dataset(str(src), str(out), settings=dataclasses.replace(FAST, images=images),
                    workers=1)
    run = run_train([*TINY_ACT, f"--dataset.root={out}", "--dataset.repo_id=local/synth-images", "--batch_size=4",
                     "--num_workers=2", "--steps=2", "--log_freq=1", "--seed=1", f"--output_dir={tmp_path / 'out'}",
                     "--wandb.enable=false"], tmp_path / "probe")
    assert run.returncode == 0, run.log[-3000:]
    batches = run.batches()
    assert len(batches) == 2 and {b["loader"] for b in batches} == {"DataLoaderShard"}
    assert batches[0]["spec"][CAM] == [[4, 3, 48, 64], "torch.float32"]
    assert not set(batches[0]["digest"]) & set(LANGUAGE_COLUMNS)


# -- image features compiled as clips (compile --images clips) ----------------------------------------------------
FLOOR = 40.0


@pytest.fixture(scope="module")
def clips(pair, tmp_path_factory) -> Path:
    """The same LeRobot-written source compiled with --images clips: the RGB image feature becomes clips, the
    depth images (which no RGB clip carries) stay encoded."""
    src, _ = pair
    out = tmp_path_factory.mktemp("lerobot-image-clips") / "compiled"
    settings = dataclasses.replace(FAST, episodes_per_shard=2)  # clips: the default
    report = compile_dataset(str(src), str(out), settings=settings, workers=1)
    assert list(report.images_kept) == [DEPTH_MM, DEPTH_M] and "image feature" in report.summary()
    return out


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    x, y = (a * 255).round().double(), (b * 255).round().double()
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def _assert_within_floor(got, want, where) -> None:
    """LeRobot's keys in its order; the RGB image feature float32, every frame >= the floor; the rest exact."""
    assert list(got) == list(want), (where, list(got), list(want))
    for key, w in want.items():
        g = got[key]
        if key == CAM:
            assert g.dtype == w.dtype == torch.float32 and g.shape == w.shape, (where, key)
            pairs = zip(g.reshape(-1, *g.shape[-3:]), w.reshape(-1, *w.shape[-3:]), strict=True)
            assert all(_psnr(a, b) >= FLOOR for a, b in pairs), (where, key)
        elif isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w), (where, key)
        else:
            assert g == w, (where, key, g, w)


def test_clips_validate_and_every_sample_within_the_floor(pair, clips):
    src, _ = pair
    assert validate(str(clips), deep=True).findings == []
    m = roboreel.formats.manifest.load_manifest(str(clips))
    assert [c.key for c in m.cameras] == [CAM]  # the depth images stay encoded images
    theirs = LeRobotDataset(REPO, root=src)
    mine = CompiledDataset(str(clips), shuffle=False)
    assert (mine.meta.image_keys, mine.meta.camera_keys, list(mine.meta.features)) == \
        (theirs.meta.image_keys, theirs.meta.camera_keys, list(theirs.meta.features))
    got = list(mine)
    assert len(got) == len(theirs)
    for i, sample in enumerate(got):
        _assert_within_floor(sample, theirs[i], i)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_clips_batches_with_windows_and_return_uint8(pair, clips, num_workers):
    """lerobot-train's reading (return_uint8=True, lerobot_collate_fn) with a window on the image feature, on
    the DataLoader and on roboreel.loader, against LeRobot's own samples collated alike."""
    src, _ = pair
    deltas = {CAM: [-0.2, -0.1, 0.0], "action": [0.0, 0.1]}
    theirs = LeRobotDataset(REPO, root=src, delta_timestamps=deltas, return_uint8=True)
    ds = CompiledDataset(str(clips), seed=4, delta_timestamps=deltas, return_uint8=True)
    _check_batches(ds, theirs, num_workers, _assert_within_floor)
