"""Depth maps: a depth camera written as LeRobot 0.6.1 writes one (lossless HEVC gray12le, log-quantised
12-bit codes; roboreel.synth) compiles without loss and reads back as LeRobot's float32 [1, H, W] millimetres on
``CompiledDataset``, ``DataLoader`` and ``roboreel.loader``; a depth clip stored lossy is a validate error and
the reader refuses it. (tests/integration/test_lerobot_depth.py holds the same against LeRobotDataset itself.)

Expected values are computed independently of the reader: the synthetic depth (``render_depth``) quantised with
LeRobot's formula, the source mp4 decoded with PyAV to prove it holds those codes, and the code table checked
against a float64 evaluation of LeRobot's dequantisation.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from support.datasets import codes
from support.settings import FAST
from torch.utils.data import DataLoader

import roboreel
from roboreel.compile import compile_dataset
from roboreel.formats.depth import DepthQuant
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.reader import CompiledDataset
from roboreel.reader.decode._depth import code_table
from roboreel.synth import SynthConfig, synthesize
from roboreel.synth.depth import quantize, render_depth
from roboreel.validate import validate

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
RGB, DEPTH = "observation.images.top", "observation.images.depth"
H, W = 48, 64


def _source(root: Path, unit: str = "mm", **kw) -> Path:
    cfg = SynthConfig(episodes=4, min_length=8, max_length=14, fps=10, cameras=(RGB,), depth_cameras=(DEPTH,),
                      height=H, width=W, tasks=2, depth_unit=unit, **kw)
    synthesize(root, cfg, overwrite=True)
    return root


def _compile(src: Path, out: Path, **kw) -> roboreel.compile.CompileReport:
    return compile_dataset(str(src), str(out), settings=FAST.replace(**kw), workers=1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("depth")
    src = _source(root / "src")
    _compile(src, root / "out")
    return src, root / "out"


def expected(index: int, unit: str = "mm") -> torch.Tensor:
    """LeRobot's depth for global frame ``index``: [1, H, W] float32 millimetres."""
    q = torch.from_numpy(quantize(render_depth(index, H, W, unit)).astype(np.int64))
    return code_table(DepthQuant())[q].unsqueeze(0)


def test_code_table_is_lerobots_dequantisation():
    """Every code's mm value as LeRobot's formula gives it in float64, rounded (float32 arithmetic may differ by
    an ulp before rounding, never by a millimetre)."""
    q = DepthQuant()
    log_min, log_max = math.log(q.depth_min + q.shift), math.log(q.depth_max + q.shift)
    codes_ = np.arange(4096, dtype=np.float64)
    metres = np.clip(np.exp(codes_ * (log_max - log_min) / 4095 + log_min) - q.shift, q.depth_min, q.depth_max)
    assert np.abs(code_table(q).numpy() - np.rint(metres * 1000)).max() <= 1
    assert code_table(q).dtype == torch.float32 and float(code_table(q)[0]) == 10.0 and float(code_table(q)[-1]) == 10000.0


def test_synthetic_depth_is_written_as_lerobot_writes_it(pair):
    src, _ = pair
    info = json.loads((src / "meta/info.json").read_text())["features"][DEPTH]
    assert info["shape"] == [H, W, 1] and info["info"]["is_depth_map"] and info["info"]["depth_unit"] == "mm"
    mp4 = next((src / "videos" / DEPTH).rglob("*.mp4"))
    with av.open(str(mp4)) as c:
        s = c.streams.video[0]
        assert (s.codec_context.codec.canonical_name, s.codec_context.pix_fmt) == ("hevc", "gray12le")
        first = next(c.decode(s)).to_ndarray(format="gray12le")
    assert np.array_equal(first, quantize(render_depth(0, H, W)))  # lossless: the codes the writer was given


def test_depth_compiles_lossless_and_reads_lerobots_values(pair):
    _, out = pair
    ds = CompiledDataset(str(out), shuffle=False)
    assert ds.meta.depth_keys == [DEPTH]
    spec = {c.key: c for c in ds.manifest.cameras}[DEPTH]
    assert (spec.codec, spec.pix_fmt) == ("hevc", "gray12le")
    assert ds.meta.features[DEPTH]["info"]["video.pix_fmt"] == "gray12le"
    assert tuple(ds.meta.features[DEPTH]["shape"]) == (H, W, 1)
    n = 0
    for s in ds:
        d = s[DEPTH]
        assert d.dtype == torch.float32 and d.shape == (1, H, W)
        assert torch.equal(d, expected(int(s["index"]))), int(s["index"])
        assert codes(s[RGB])[0][0] == int(s["index"])  # the RGB camera still reads its own frame
        n += 1
    assert n == ds.num_frames


def test_depth_windows_dataloader_and_loader_agree(pair):
    """DataLoader(CompiledDataset) and roboreel.loader give the same batches, depth float32 even with
    return_uint8 (which applies to RGB only, as in LeRobot), windows on the depth camera included."""
    _, out = pair
    delta = {DEPTH: [-0.1, 0.0], RGB: [0.0]}

    def make():
        ds = CompiledDataset(str(out), seed=3, delta_timestamps=delta, return_uint8=True, episode_pool_size=2)
        ds.set_epoch(1)
        return ds

    a = list(DataLoader(make(), batch_size=4))
    b = list(roboreel.loader(make(), batch_size=4, decode_threads=2))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert list(x) == list(y)
        assert x[RGB].dtype == torch.uint8 and x[DEPTH].dtype == y[DEPTH].dtype == torch.float32
        assert x[DEPTH].shape == (len(x["index"]), 2, 1, H, W)
        for key in x:
            if isinstance(x[key], torch.Tensor):
                assert torch.equal(x[key], y[key]), key
        for i, idx in enumerate(x["index"].tolist()):
            pad = x[f"{DEPTH}_is_pad"][i].tolist()
            want_prev = expected(idx if pad[0] else idx - 1)
            assert torch.equal(x[DEPTH][i, 0], want_prev) and torch.equal(x[DEPTH][i, 1], expected(idx))


def test_depth_reencoded_losslessly_and_metres_rescaled(tmp_path):
    """A depth source recorded in metres, compiled with --reencode: the clip is re-encoded (x265 lossless), the
    values are still LeRobot's millimetres, and the stats are rescaled to mm as LeRobotDataset does."""
    src = _source(tmp_path / "src", unit="m")
    report = _compile(src, tmp_path / "out", reencode=True)
    assert report.clips_lossless == report.episodes  # the depth clips (RGB re-encodes are lossy)
    ds = CompiledDataset(str(tmp_path / "out"), shuffle=False)
    raw = json.loads((src / "meta/stats.json").read_text())[DEPTH]
    assert np.array_equal(ds.meta.stats[DEPTH]["min"], np.array(raw["min"]) * 1000.0)
    assert ds.meta.stats[DEPTH]["count"].tolist() == raw["count"]
    for s in ds:
        assert torch.equal(s[DEPTH], expected(int(s["index"]), "m")), int(s["index"])
    assert validate(str(tmp_path / "out")).count("error") == 0


def _rewrite_manifest(out: Path, edit) -> None:
    path = out / "roboreel.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _codes_of(report) -> set[str]:
    return {f.code for f in report.findings if f.severity == "error"}


def test_validate_clean_on_depth_source_and_compiled(pair):
    src, out = pair
    for path in (src, out):
        r = validate(str(path))
        assert r.count("error") == 0 and r.count("warning") == 0, [f.to_dict() for f in r.findings]


def test_lossy_depth_is_a_validate_error_and_the_reader_refuses_it(tmp_path, monkeypatch):
    """A depth camera compiled through the RGB path (what older roboreel versions did): validate reports
    depth-lossy and the channel/bit-depth mismatch; CompiledDataset refuses to read it."""
    from roboreel.compile.jobs import _clips as clips

    src = _source(tmp_path / "src")
    monkeypatch.setattr(clips, "is_depth", lambda feature: False)  # the old compile: depth through 8-bit RGB
    _compile(src, tmp_path / "out")
    monkeypatch.undo()
    r = validate(str(tmp_path / "out"))
    assert {"depth-lossy", "clip-channels", "clip-bit-depth"} <= _codes_of(r)
    with pytest.raises(CompiledFormatError, match="depth camera 'observation.images.depth'.*recompile"):
        CompiledDataset(str(tmp_path / "out"))


def test_clip_shape_and_channels_against_the_feature(tmp_path, pair):
    """A compiled feature whose shape or channels disagree with its clips is an error."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(pair[1], out)

    def edit(doc):
        doc["features"][RGB]["shape"] = [H // 2, W // 2, 1]

    _rewrite_manifest(out, edit)
    assert {"clip-shape", "clip-channels"} <= _codes_of(validate(str(out), fast=True))


def test_depth_record_says_lossless(pair):
    _, out = pair
    tar = next((out / "shards").rglob("*.tar"))
    with tarfile.open(tar) as tf:
        meta = next(json.load(io.BytesIO(tf.extractfile(m).read())) for m in tf if m.name.endswith(".json"))
    assert meta["cameras"][DEPTH]["pix_fmt"] == "gray12le" and meta["cameras"][DEPTH]["lossless"] is True
    assert meta["cameras"][RGB]["pix_fmt"] == "yuv420p" and meta["cameras"][RGB]["lossless"] is False


def test_depth_with_workers_and_transforms(pair):
    """DataLoader workers decode depth like the main process; image_transforms touch RGB only (LeRobot skips
    depth maps); the loader agrees."""
    _, out = pair

    def make():
        ds = CompiledDataset(str(out), seed=5, image_transforms=lambda x: x * 0.5, episode_pool_size=2)
        ds.set_epoch(2)
        return ds

    a = list(DataLoader(make(), batch_size=4, num_workers=2))
    b = list(roboreel.loader(make(), mix_workers=False, batch_size=4, num_workers=2, decode_threads=2))
    assert sum(len(x["index"]) for x in a) == make().num_frames
    for x, y in zip(a, b, strict=True):
        for i, idx in enumerate(x["index"].tolist()):
            assert torch.equal(x[DEPTH][i], expected(idx)) and torch.equal(y[DEPTH][i], expected(idx))
        assert float(x[RGB].max()) <= 0.5 and torch.equal(x[RGB], y[RGB])


def test_depth_resized_and_resampled_stays_lossless(tmp_path):
    """``--resize`` and ``--fps`` on a depth camera: every kept frame's depths are the source's, picked by nearest
    neighbour (a 2x downscale takes one pixel of each 2x2 block, never a mean), at the kept source frame; the
    clip is a lossless encode, its stats come from the kept frames in the recorded unit, and validate is clean."""
    src = _source(tmp_path / "src")
    out = tmp_path / "out"
    _compile(src, out, resize=(H // 2, W // 2), fps=5)  # source 10 fps: frames 0, 2, 4, ... kept
    ds = CompiledDataset(str(out), shuffle=False)
    spec = {c.key: c for c in ds.manifest.cameras}[DEPTH]
    assert (spec.height, spec.width, spec.pix_fmt) == (H // 2, W // 2, "gray12le")
    source = LeRobotSource(str(src))
    starts = np.cumsum([0] + [e.length for e in source.episodes])
    picks = set()
    n = 0
    for s in ds:
        full = expected(int(starts[int(s["episode_index"])] + 2 * int(s["frame_index"])))
        got = s[DEPTH]
        assert got.shape == (1, H // 2, W // 2)
        match = [k for k, (r, c) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1)))
                 if torch.equal(got, full[:, r::2, c::2])]
        assert match, f"frame {int(s['index'])}: not a nearest-neighbour pick of its kept source frame"
        picks.update(match)
        n += 1
    assert n == sum((e.length + 1) // 2 for e in source.episodes) and len(picks) == 1
    rec = _clip_docs(out, DEPTH)
    assert rec and all(d["info"]["lossless"] and d["info"]["mode"] == "encode" for d in rec)
    stats = json.loads((out / "meta/stats.json").read_text())[DEPTH]
    kept = torch.stack([s[DEPTH] for s in CompiledDataset(str(out), shuffle=False)])
    assert stats["min"][0][0][0] <= float(kept.min()) and stats["max"][0][0][0] >= float(kept.max())
    assert stats["max"][0][0][0] > 1.0  # millimetres, not divided by 255
    assert validate(str(out)).verdict == "clean"


def _clip_docs(out: Path, camera: str) -> list[dict]:
    """The clip records compile kept for ``camera`` (``.roboreel-parts`` sidecars)."""
    docs = []
    for side in sorted((out / ".roboreel-parts").glob("shard-*.json")):
        for clips in json.loads(side.read_text())["clips"].values():
            if camera in clips:
                docs.append({"info": clips[camera]})
    return docs
