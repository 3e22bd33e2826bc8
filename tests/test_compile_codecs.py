"""Per clip, stream copy or re-encode (issue 27, parts 3 and 4): a source is copied only with a GOP short enough for
random access, every clip says why it was re-encoded, and re-encoded RGB keeps every checked frame at or above
the PSNR floor (40 dB by default), re-encoding at a lower CRF or failing otherwise. Frames are identified by
pixel code after compile, so no policy ever shifts or drops a frame.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.datasets import codes

from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.clips import CLIPS_DIR
from roboreel.formats.errors import RoboreelError
from roboreel.reader import CompiledDataset
from roboreel.synth import SynthConfig, synthesize
from roboreel.validate import validate

CAM = "observation.images.top"


def _source(root: Path, **kw) -> Path:
    cfg = SynthConfig(**{"episodes": 3, "min_length": 16, "max_length": 24, "fps": 10, "cameras": (CAM,),
                         "height": 64, "width": 64, "tasks": 1, **kw})
    synthesize(root, cfg, overwrite=True)
    return root


def _clip_docs(out: Path) -> list[dict]:
    """The clip jsons compile kept (compile keeps them only until a shard is packed: read the sidecars)."""
    docs = []
    for side in sorted(out.glob(".roboreel-parts/shard-*.json")):
        for clips in json.loads(side.read_text())["clips"].values():
            docs.extend(clips.values())
    assert docs, f"no sidecars under {out} ({CLIPS_DIR})"
    return docs


def _frames_are_their_own(out: Path) -> None:
    ds = CompiledDataset(str(out), shuffle=False)
    for s in ds:
        assert codes(s[CAM])[0][0] == int(s["index"])


def test_long_gop_h264_is_reencoded_short_gop_copied(tmp_path):
    src = _source(tmp_path / "src", codec="libx264", g=8, crf=18)
    copied = compile_dataset(str(src), str(tmp_path / "copy"), settings=CompileSettings.for_tests(), workers=1)
    assert (copied.clips_remuxed, copied.clips_encoded) == (3, 0)
    settings = CompileSettings.for_tests().replace(remux_max_gop=4)
    long = compile_dataset(str(src), str(tmp_path / "long"), settings=settings, workers=1)
    assert (long.clips_remuxed, long.clips_encoded) == (0, 3)
    whys = [d["why"] for d in _clip_docs(tmp_path / "long")]
    assert all("source GOP of 8 frames > remux_max_gop 4" in w for w in whys), whys
    assert "source GOP of N frames > remux_max_gop N" in " ".join(long.reencode_reasons)
    _frames_are_their_own(tmp_path / "copy")
    _frames_are_their_own(tmp_path / "long")


def test_10bit_hevc_source_is_reencoded_to_8bit(tmp_path):
    """A 10-bit HEVC source (short GOP) validates clean, is re-encoded (not 8-bit 4:2:0) and its clips are 8-bit."""
    src = _source(tmp_path / "src", codec="libx265", pix_fmt="yuv420p10le", crf=18)
    assert validate(str(src)).count("error") == 0
    report = compile_dataset(str(src), str(tmp_path / "out"), settings=CompileSettings.for_tests(), workers=1)
    assert (report.clips_remuxed, report.clips_encoded) == (0, 3)
    assert all("yuv420p10le is not 8-bit 4:2:0" in d["why"] for d in _clip_docs(tmp_path / "out"))
    assert validate(str(tmp_path / "out")).count("error") == 0
    _frames_are_their_own(tmp_path / "out")


def test_small_camera_keeps_every_frame_above_the_floor(tmp_path):
    """120x160 at the default CRF and floor: every frame of every clip is checked (psnr_checked == length) and
    none is under 40 dB."""
    src = _source(tmp_path / "src", height=120, width=160)
    report = compile_dataset(str(src), str(tmp_path / "out"), settings=CompileSettings(episodes_per_shard=2),
                             workers=1)
    docs = _clip_docs(tmp_path / "out")
    assert all(d["psnr_checked"] == d["frames"] and d["psnr_min"] >= 40.0 for d in docs), docs
    assert report.psnr_min >= 40.0


def test_floor_lowers_the_crf_or_fails(tmp_path):
    """CRF 36 is under 40 dB on this footage: compile re-encodes at a lower CRF and says so; a floor no CRF
    reaches fails naming the file and episode."""
    src = _source(tmp_path / "src", height=120, width=160)
    raw = compile_dataset(str(src), str(tmp_path / "raw"), workers=1,
                          settings=CompileSettings(crf=36, min_psnr=0.0, episodes_per_shard=2, psnr_frames=24))
    assert raw.psnr_min < 40.0  # the premise: this CRF alone is under the floor somewhere
    report = compile_dataset(str(src), str(tmp_path / "out"), workers=1,
                             settings=CompileSettings(crf=36, episodes_per_shard=2))
    docs = _clip_docs(tmp_path / "out")
    assert all(d["psnr_min"] >= 40.0 for d in docs) and any(d["crf"] < 36 for d in docs), docs
    assert report.psnr_min >= 40.0
    _frames_are_their_own(tmp_path / "out")
    with pytest.raises(RoboreelError, match=r"under the floor of 99 dB .*episode \d"):
        compile_dataset(str(src), str(tmp_path / "fail"), workers=1,
                        settings=CompileSettings(preset="ultrafast", min_psnr=99.0, episodes_per_shard=2))


def test_floor_checks_every_frame_when_references_do_not_fit(tmp_path, monkeypatch):
    """A clip whose references exceed the in-encode budget is checked frame by frame in a streaming pass: every
    frame counted, and the same lowest PSNR as when every reference fits."""
    from roboreel.compile import transcode

    src = _source(tmp_path / "src", height=120, width=160)
    settings = CompileSettings(episodes_per_shard=2, crf=34)
    compile_dataset(str(src), str(tmp_path / "fits"), settings=settings, workers=1)
    monkeypatch.setattr(transcode, "_PSNR_REF_BYTES", 120 * 160 * 3 // 2 * 2)  # two frames' worth
    compile_dataset(str(src), str(tmp_path / "streamed"), settings=settings, workers=1)
    fits, streamed = _clip_docs(tmp_path / "fits"), _clip_docs(tmp_path / "streamed")
    assert all(d["psnr_checked"] == d["frames"] for d in fits + streamed), streamed
    key = lambda d: (d["frames"], d["crf"])  # noqa: E731
    assert sorted((key(d), round(d["psnr_min"], 4)) for d in fits) == \
        sorted((key(d), round(d["psnr_min"], 4)) for d in streamed)
