"""Image features compiled as HEVC clips (``compile --images clips``): every frame within the PSNR floor of the
image LeRobot decodes, on every read path, as float32 in LeRobot's key order; the ladder (4:2:0, 4:4:4, lossless)
chosen per clip by measurement; images an RGB clip cannot carry refused.

Ground truth: the reference reader over the source (Pillow on the source's PNGs, exact), the synthetic frames'
pixel codes, and an independent decode of the clips (PyAV, not the reader's torchcodec)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import shutil
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from support.datasets import batch_indices, codes, set_image_bytes, source
from support.settings import FAST
from support.shared import built_once

import roboreel
from roboreel.bench.reference import ReferenceDataset
from roboreel.cli import main as cli_main
from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.video import clip_keys, encode_image_clip, image_clip_keys, kept_images
from roboreel.formats.manifest import load_manifest
from roboreel.formats.merge import MixtureMismatch
from roboreel.reader import CompiledDataset
from roboreel.synth.content import render_frame
from roboreel.validate import validate
from roboreel.validate.summary import summarize

CAMS = ["observation.images.top", "observation.images.wrist"]
FLOOR = 40.0


def _settings(**kw) -> CompileSettings:
    return dataclasses.replace(FAST, images="clips", **kw)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    src = source(tmp_path_factory, use_videos=False, language=True)

    def build(folder: Path) -> Path:
        compile_dataset(str(src), str(folder / "compiled"), settings=_settings(), workers=2)
        return folder / "compiled"

    return src, built_once(tmp_path_factory, "image-clips", (str(src),), build)  # once for all xdist processes


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """The worst frame's PSNR of two float32 [..., 3, H, W] stacks in [0, 1], on the uint8 values they hold
    (one frame: its PSNR; inf where equal)."""
    x, y = (a * 255).round().double(), (b * 255).round().double()
    mse = float(((x - y) ** 2).flatten(-3).mean(-1).max())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def _assert_close_sample(got: dict, want: dict, where: object) -> None:
    """LeRobot's keys in LeRobot's order; image features float32 of the same shape, their pixel codes equal and
    every frame >= the floor; everything else exactly."""
    assert list(got) == list(want), (where, list(got), list(want))
    for key, w in want.items():
        g = got[key]
        if key in CAMS:
            assert g.dtype == torch.float32 and g.shape == w.shape, (where, key, g.dtype, g.shape)
            assert codes(g) == codes(w), (where, key)
            assert _psnr(g, w) >= FLOOR, (where, key)
        elif isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and torch.equal(g, w), (where, key)
        else:
            assert g == w, (where, key)


def test_compiled_layout_manifest_and_validate(pair):
    """The image features are clips (manifest cameras, no column in data/), still LeRobot's image features in
    meta; validate (deep) is clean; inspect says what they are."""
    src, out = pair
    m = load_manifest(str(out))
    assert [c.key for c in m.cameras] == CAMS
    assert all(set(c.pix_fmt.split(",")) <= {"yuv420p", "yuv444p", "gbrp"} for c in m.cameras)
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"] == json.loads((src / "meta/info.json").read_text())["features"]
    for f in sorted((out / "data").rglob("*.parquet")):
        assert not set(CAMS) & set(pq.read_schema(f).names), f
    assert validate(str(out), deep=True).findings == []
    s = summarize(str(out))
    assert s["images"] == [] and [c["key"] for c in s["cameras"] if c.get("image")] == CAMS
    ds = CompiledDataset(str(out))
    assert (ds.meta.image_keys, ds.meta.video_keys) == (CAMS, [])


def test_every_frame_of_a_whole_epoch_within_the_floor(pair):
    """CompiledDataset over a whole epoch against the reference (the source's PNGs, exactly as LeRobot decodes
    them): keys and order, values, and every image frame >= 40 dB with its pixel codes."""
    src, out = pair
    ref = ReferenceDataset(str(src))
    got = list(CompiledDataset(str(out), shuffle=False))
    assert len(got) == ref.num_frames
    for i, sample in enumerate(got):
        _assert_close_sample(sample, ref[i], i)


def test_clips_against_an_independent_decode(pair):
    """The clips themselves, decoded by PyAV (not the reader's decoder) and converted to RGB, hold every source
    image within the floor: the compile check is not measuring its own decoder's mistakes."""
    src, out = pair
    ref = ReferenceDataset(str(src))
    ds = CompiledDataset(str(out), shuffle=False)
    worst = math.inf
    for shard in sorted((out / "shards").glob("*.tar")):
        import tarfile

        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                if not member.name.endswith(".mp4"):
                    continue
                episode = int(member.name.split(".")[0])
                cam = member.name.split(".", 1)[1][: -len(".mp4")]
                start = sum(e.length for e in ds.manifest.episodes if e.index < episode)
                with av.open(io.BytesIO(tar.extractfile(member).read())) as c:
                    for k, frame in enumerate(c.decode(video=0)):
                        rgb = torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1).float() / 255
                        worst = min(worst, _psnr(rgb, ref[start + k][cam]))
    assert FLOOR <= worst < math.inf  # lossy here (4:4:4 at some CRF), and never under the floor


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loaders_windows_and_return_uint8(pair, num_workers):
    """DataLoader and roboreel.loader with a window on an image feature, image transforms and return_uint8
    (which LeRobot does not apply to image features): float32, LeRobot's keys and order, within the floor."""
    src, out = pair
    deltas = {CAMS[0]: [-0.1, -0.05, 0.0], "action": [0.0, 0.05]}
    ref = ReferenceDataset(str(src), delta_timestamps=deltas, image_transforms=lambda x: 1.0 - x)
    ds = CompiledDataset(str(out), delta_timestamps=deltas, image_transforms=lambda x: 1.0 - x, seed=2,
                         return_uint8=True)

    def collate(samples: list[dict]) -> dict:
        lang = {k: [s.pop(k) for s in samples] for k in ("language_persistent", "language_events")}
        return {**torch.utils.data.default_collate(samples), **lang}

    wants: dict[int, dict] = {}  # the reference's samples, read once for both loaders
    for dl in (torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers, collate_fn=collate),
               roboreel.loader(ds, batch_size=4, num_workers=num_workers)):
        seen = []
        for batch in dl:
            for j, i in enumerate(batch_indices(batch)):
                if i not in wants:
                    wants[i] = ref[ref.position(i)]
                want = wants[i]
                got = {k: batch[k][j] for k in want}
                for key in CAMS:
                    w = want[key]  # the reference applied the transform too
                    assert got[key].dtype == torch.float32 and got[key].shape == w.shape
                    assert _psnr(1.0 - got[key], 1.0 - w) >= FLOOR, (key, i)
                    assert codes(1.0 - got[key]) == codes(1.0 - w)
                assert torch.equal(got["action"], want["action"]) and torch.equal(got[f"{CAMS[0]}_is_pad"],
                                                                                   want[f"{CAMS[0]}_is_pad"])
            seen += batch_indices(batch)
        assert sorted(seen) == list(range(ref.num_frames))


def _frames(kind: str, n: int) -> list[np.ndarray]:
    if kind == "smooth":  # a soft gradient drifting: 4:2:0 at the default CRF holds it
        y, x = np.mgrid[0:96, 0:128].astype(np.float32)
        return [np.stack([(x + 2 * k) % 256, (y * 2 + k) % 256, (x + y) / 2 % 256], -1).astype(np.uint8)
                for k in range(n)]
    if kind == "sharp":  # the synthetic code blocks: hard colour edges that 4:2:0 cannot hold
        return [render_frame(k, 0, 1, k, 64, 64) for k in range(n)]
    return [np.random.default_rng(k).integers(0, 256, (32, 64, 3), dtype=np.uint8) for k in range(n)]  # noise


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


@pytest.mark.parametrize(("kind", "pix_fmt", "lossless"),
                         [("smooth", "yuv420p", False), ("sharp", "yuv444p", False), ("noise", "gbrp", True)])
def test_the_ladder_picks_by_measurement(kind, pix_fmt, lossless):
    """Each rung where the content needs it; whatever the rung, every frame (decoded here by PyAV) reaches the
    floor, and the lossless rung gives the source pixels back exactly."""
    frames = _frames(kind, 12)
    clip = encode_image_clip([_png(a) for a in frames], key="cam", fps=10, settings=_settings(), where="t.parquet",
                             episode=3)
    assert (clip.pix_fmt, clip.lossless, clip.psnr_checked) == (pix_fmt, lossless, 12)
    with av.open(io.BytesIO(clip.data)) as c:
        decoded = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(decoded) == 12
    for a, b in zip(frames, decoded, strict=True):
        if lossless:
            assert np.array_equal(a, b)
        else:
            mse = float(np.mean((a.astype(np.float64) - b) ** 2))
            assert 10 * math.log10(255**2 / mse) >= FLOOR
    assert clip.psnr_min >= FLOOR and (clip.crf is None) == lossless


def _recolour(path: Path, row: int, mode: str) -> None:
    """Replace one image of ``path`` by the same picture in Pillow ``mode``."""
    image = pq.read_table(path, columns=[CAMS[1]]).column(CAMS[1])[row]["bytes"].as_py()
    buf = io.BytesIO()
    Image.open(io.BytesIO(image)).convert(mode).save(buf, format="PNG")
    set_image_bytes(path, CAMS[1], row, buf.getvalue())


def test_images_an_rgb_clip_cannot_carry_are_refused(pair, tmp_path, capsys):
    """An RGBA image (its alpha would be lost) fails the default `--images clips` naming the file, episode and the way out,
    and leaves nothing; `--images keep` carries the same source exactly."""
    src, _ = pair
    broken = tmp_path / "src"
    shutil.copytree(src, broken)
    rel = "data/chunk-000/file-000.parquet"
    _recolour(broken / rel, 2, "RGBA")
    out = tmp_path / "out"
    rc = cli_main(["compile", str(broken), str(out), "--workers", "1", "--no-progress"])  # clips: the default
    err = capsys.readouterr().err
    assert rc == 2 and CAMS[1] in err and "'RGBA'" in err and "--images keep" in err, err
    assert rel in err and "episode 0" in err and not out.exists()
    assert cli_main(["compile", str(broken), str(out), "--images", "keep", "--workers", "1", "--no-progress"]) == 0
    assert load_manifest(str(out)).cameras == []


def test_a_mixture_must_store_image_features_alike(pair, tmp_path):
    src, out = pair
    kept = tmp_path / "kept"
    compile_dataset(str(src), str(kept), settings=FAST.replace(images="keep"), workers=1)
    with pytest.raises(MixtureMismatch, match="same --images"):
        CompiledDataset([str(out), str(kept)])


def test_default_is_clips_and_what_stays_encoded():
    """--images clips is the default; depth images, other channel counts and sizes x265 cannot encode stay the
    source's encoded images, each with its reason (the compile summary prints them); --images keep keeps all."""
    feats = {"rgb": {"dtype": "image", "shape": [48, 64, 3], "names": ["height", "width", "channels"]},
             "chw": {"dtype": "image", "shape": [3, 40, 40], "names": ["channels", "height", "width"]},
             "tiny": {"dtype": "image", "shape": [8, 8, 3], "names": ["height", "width", "channels"]},
             "gray": {"dtype": "image", "shape": [48, 64, 1], "names": ["height", "width", "channels"]},
             "depth": {"dtype": "image", "shape": [48, 64, 1], "names": ["height", "width", "channels"],
                       "info": {"is_depth_map": True, "depth_unit": "mm"}},
             "cam": {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"]},
             "state": {"dtype": "float32", "shape": [2], "names": None}}
    assert CompileSettings().images == "clips"
    assert image_clip_keys(feats, CompileSettings()) == ["rgb", "chw"]
    assert clip_keys(feats, CompileSettings()) == ["rgb", "chw", "cam"]
    kept = kept_images(feats, CompileSettings())
    assert list(kept) == ["tiny", "gray", "depth"] and "too small" in kept["tiny"] and "depth" in kept["depth"]
    keep = CompileSettings(images="keep")
    assert (image_clip_keys(feats, keep), kept_images(feats, keep), clip_keys(feats, keep)) == ([], {}, ["cam"])
    assert CompileSettings.from_dict({k: v for k, v in keep.to_dict().items() if k != "images"}).images == "keep"
