"""Images in parquet (``dtype: "image"``, LeRobot's ``use_videos=False``), string and language columns: compiled
with ``--images keep``, the encoded images kept in the record rows, validated, and read back exactly on every read path.

Ground truth: the synthetic frames themselves (``render_frame``: pixel codes and every pixel value), the
reference reader over the source (its own decoder, OpenCV), and the language rows synth wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from support.datasets import assert_same_sample, batch_indices, codes, compiled_pair, set_image_bytes

import roboreel
from roboreel.bench.reference import ReferenceDataset
from roboreel.cli import main as cli_main
from roboreel.formats.manifest import load_manifest
from roboreel.reader import CompiledDataset
from roboreel.synth.content import render_frame
from roboreel.synth.tables import language_columns
from roboreel.validate import validate
from roboreel.validate.summary import summarize

CAMS = ["observation.images.top", "observation.images.wrist"]
FPS = 20  # conftest.SMALL


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    return compiled_pair(tmp_path_factory, use_videos=False, language=True, compile_options={"images": "keep"})


def _frame(index: int, episode: int, cam: int, k: int) -> torch.Tensor:
    """The synthetic frame as LeRobot returns an image feature: float32 [3, H, W], uint8 / 255."""
    return torch.from_numpy(render_frame(index, episode, cam, k, 64, 64)).permute(2, 0, 1).float() / 255.0


def _language(sample: dict, length: int) -> tuple[list, list]:
    """What synth wrote for this sample's row, as LeRobot reads it back (timestamp cast to float32)."""
    ep, k = int(sample["episode_index"]), int(sample["frame_index"])
    start = int(sample["index"]) - k
    cols = language_columns(ep, start, length, FPS)
    persistent = cols["language_persistent"].to_pylist()[k]
    for row in persistent:
        row["timestamp"] = float(np.float32(row["timestamp"]))
    return persistent, cols["language_events"].to_pylist()[k]


def test_source_is_lerobots_layout_and_validates_clean(pair):
    src, out = pair
    info = json.loads((src / "meta/info.json").read_text())
    assert [info["features"][c]["dtype"] for c in CAMS] == ["image", "image"] and info["video_path"] is None
    files = sorted((src / "data").rglob("*.parquet"))
    assert len(files) > 2 and len({f.parent for f in files}) > 1  # rolled over files and chunks
    schema = pq.read_schema(files[0])
    assert b"huggingface" in schema.metadata and str(schema.field(CAMS[0]).type) == "struct<bytes: binary, path: string>"
    assert validate(str(src)).findings == [] and validate(str(out), deep=True).findings == []
    m = load_manifest(str(out))
    assert m.cameras == [] and [m.features[c]["dtype"] for c in CAMS] == ["image", "image"]
    for path in (src, out):  # roboreel inspect lists them
        assert summarize(str(path))["images"] == [{"key": c, "shape": [64, 64, 3]} for c in CAMS]


def test_whole_epoch_equals_the_frames_and_the_reference(pair):
    src, out = pair
    ref = ReferenceDataset(str(src))
    got = list(CompiledDataset(str(out), shuffle=False))
    assert len(got) == len(ref) == ref.num_frames
    for i, sample in enumerate(got):
        want = ref[i]
        assert_same_sample(sample, want, cameras=[])  # image features compared exactly, not by code
        for c, cam in enumerate(CAMS):
            img = sample[cam]
            assert img.dtype == torch.float32 and img.shape == (3, 64, 64)
            ep, k = int(sample["episode_index"]), int(sample["frame_index"])
            assert codes(img) == [(int(sample["index"]), ep, c)]
            assert torch.equal(img, _frame(int(sample["index"]), ep, c, k))  # every pixel, exactly
        assert sample["annotation.note"] == f"note {int(sample['index'])}"
        length = ref.episodes[int(sample["episode_index"])].length
        assert (sample["language_persistent"], sample["language_events"]) == _language(sample, length)


def test_windows_transforms_and_shuffled_order(pair):
    src, out = pair
    deltas = {CAMS[0]: [-0.1, -0.05, 0.0], "action": [0.0, 0.05]}
    ref = ReferenceDataset(str(src), delta_timestamps=deltas, image_transforms=lambda x: 1.0 - x)
    ds = CompiledDataset(str(out), delta_timestamps=deltas, image_transforms=lambda x: 1.0 - x, seed=3)
    n = 0
    for sample in ds:
        want = ref[ref.position(int(sample["index"]))]
        assert_same_sample(sample, want, cameras=[])
        assert sample[CAMS[0]].shape == (3, 3, 64, 64) and sample[CAMS[1]].shape == (3, 64, 64)
        first = int(sample["index"]) - int(sample["frame_index"])
        q = [max(first, int(sample["index"]) + d) for d in (-2, -1, 0)]
        assert codes(1.0 - sample[CAMS[0]]) == [(i, int(sample["episode_index"]), 0) for i in q]
        n += 1
    assert n == ref.num_frames


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_and_roboreel_loader(pair, num_workers):
    """DataLoader(CompiledDataset) with a collate keeping language columns as lists (lerobot_collate_fn's rule) and
    roboreel.loader (its own collate does) give the reference's samples, batch by batch."""
    src, out = pair
    ref = ReferenceDataset(str(src))

    def collate(samples: list[dict]) -> dict:
        lang = {k: [s.pop(k) for s in samples] for k in ("language_persistent", "language_events")}
        return {**torch.utils.data.default_collate(samples), **lang}

    ds = CompiledDataset(str(out), seed=1, image_transforms=lambda x: x * 2)
    loaders = [torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers, collate_fn=collate),
               roboreel.loader(ds, batch_size=4, num_workers=num_workers)]
    for dl in loaders:
        seen = []
        for batch in dl:
            for j, i in enumerate(batch_indices(batch)):
                want = ref[ref.position(i)]
                for key, w in want.items():
                    g = batch[key][j]
                    if key in CAMS:
                        assert torch.equal(g, w * 2), (key, i)
                    elif isinstance(w, torch.Tensor):
                        assert g.dtype == w.dtype and torch.equal(g, w), (key, i)
                    else:
                        assert g == w, (key, i)
            seen += batch_indices(batch)
        assert sorted(seen) == list(range(ref.num_frames))


def test_return_uint8_does_not_apply_to_image_features(pair):
    """LeRobot's return_uint8 is for video frames: image features stay float32, on both read paths."""
    src, out = pair
    ref = ReferenceDataset(str(src))
    ds = CompiledDataset(str(out), return_uint8=True, shuffle=False)
    first = next(iter(ds))
    batch = next(iter(roboreel.loader(ds, batch_size=3)))
    for cam in CAMS:
        assert first[cam].dtype == torch.float32 and torch.equal(first[cam], ref[0][cam])
        assert batch[cam].dtype == torch.float32 and torch.equal(batch[cam][2], ref[2][cam])


def test_images_without_bytes_are_refused(pair, tmp_path, capsys):
    """A row referring to an image file instead of embedding it cannot be carried: compile fails naming the file
    and episode and leaves nothing; validate reports it."""
    src, _ = pair
    broken = tmp_path / "src"
    shutil.copytree(src, broken)
    rel = "data/chunk-000/file-000.parquet"
    set_image_bytes(broken / rel, CAMS[0], 3, None)
    out = tmp_path / "out"
    rc = cli_main(["compile", str(broken), str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "observation.images.top" in err and "no embedded image bytes" in err
    assert rel in err and "episode 0" in err and not out.exists()
    found = validate(str(broken)).findings
    assert [(f.code, f.file, f.episodes) for f in found] == [("image-feature-invalid", rel, (0,))]


def test_images_of_another_shape_fail_validate(pair, tmp_path):
    src, _ = pair
    broken = tmp_path / "src"
    shutil.copytree(src, broken)
    info = json.loads((broken / "meta/info.json").read_text())
    info["features"][CAMS[1]]["shape"] = [48, 64, 3]
    (broken / "meta/info.json").write_text(json.dumps(info))
    found = validate(str(broken)).findings
    assert found and {(f.code, "64x64 with 3 channels" in f.message) for f in found} == {("image-feature-invalid", True)}
