"""Per clip, stream copy or re-encode: a source is copied only with a GOP short enough for
random access, every clip says why it was re-encoded, and re-encoded RGB keeps every checked frame at or above
the PSNR floor (40 dB by default), re-encoding at a lower CRF or failing otherwise. Frames are identified by
pixel code after compile, so no policy ever shifts or drops a frame.
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
from roboreel.compile import CompileSettings, compile_dataset
from roboreel.compile.out.paths import CLIPS_DIR
from roboreel.compile.video import EncodeTarget, check_clip_timing, encode_clip, leading_frame
from roboreel.formats.errors import CompiledFormatError, RoboreelError
from roboreel.reader import CompiledDataset
from roboreel.synth import SynthConfig, synthesize
from roboreel.synth.content import render_frame
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
    copied = compile_dataset(str(src), str(tmp_path / "copy"), settings=FAST, workers=1)
    assert (copied.clips_remuxed, copied.clips_encoded) == (3, 0)
    settings = FAST.replace(remux_max_gop=4)
    long = compile_dataset(str(src), str(tmp_path / "long"), settings=settings, workers=1)
    assert (long.clips_remuxed, long.clips_encoded) == (0, 3)
    whys = [d["why"] for d in _clip_docs(tmp_path / "long")]
    assert all("source GOP of 8 frames > remux_max_gop 4" in w for w in whys), whys
    assert "source GOP of 8 frames > remux_max_gop 4" in " ".join(long.reencode_reasons)  # numbers kept
    _frames_are_their_own(tmp_path / "copy")
    _frames_are_their_own(tmp_path / "long")


def test_10bit_hevc_source_is_reencoded_to_8bit(tmp_path):
    """A 10-bit HEVC source (short GOP) validates clean, is re-encoded (not 8-bit 4:2:0) and its clips are 8-bit."""
    src = _source(tmp_path / "src", codec="libx265", pix_fmt="yuv420p10le", crf=18)
    assert validate(str(src)).count("error") == 0
    report = compile_dataset(str(src), str(tmp_path / "out"), settings=FAST, workers=1)
    assert (report.clips_remuxed, report.clips_encoded) == (0, 3)
    assert all("yuv420p10le is not 8-bit 4:2:0" in d["why"] for d in _clip_docs(tmp_path / "out"))
    assert validate(str(tmp_path / "out")).count("error") == 0
    _frames_are_their_own(tmp_path / "out")


def _rgb_psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def test_small_camera_keeps_every_frame_above_the_floor(tmp_path):
    """120x160 at the default CRF and floor: every frame of every clip is checked (psnr_checked == length) and
    none is under 40 dB, in RGB, as a sample holds it: every frame the reader returns, against the reference
    reader's decode of the source (OpenCV, independent of compile's PyAV), over a whole epoch. (Measured over the
    yuv planes, the floor passed clips whose RGB frames read 36.9 dB here.)"""
    src = _source(tmp_path / "src", height=120, width=160)
    report = compile_dataset(str(src), str(tmp_path / "out"), settings=CompileSettings(episodes_per_shard=2),
                             workers=1)
    docs = _clip_docs(tmp_path / "out")
    assert all(d["psnr_checked"] == d["frames"] and d["psnr_min"] >= 40.0 for d in docs), docs
    assert report.psnr_min >= 40.0
    ref = ReferenceDataset(str(src), return_uint8=True)
    got = list(CompiledDataset(str(tmp_path / "out"), shuffle=False, return_uint8=True))
    assert len(got) == len(ref)
    worst = min(_rgb_psnr(s[CAM], ref[i][CAM]) for i, s in enumerate(got))
    assert 40.0 <= worst < math.inf, worst


def test_floor_lowers_the_crf_then_goes_lossless(tmp_path):
    """CRF 32 is under 40 dB on this footage: compile re-encodes at a lower CRF and says so; a floor no CRF
    reaches (99 dB) gets x265 lossless clips, every frame equal to its input, reported as such."""
    src = _source(tmp_path / "src", height=120, width=160)
    raw = compile_dataset(str(src), str(tmp_path / "raw"), workers=1,
                          settings=CompileSettings(crf=32, min_psnr=0.0, episodes_per_shard=2, psnr_frames=24))
    assert raw.psnr_min < 40.0  # the premise: this CRF alone is under the floor somewhere
    report = compile_dataset(str(src), str(tmp_path / "out"), workers=1,
                             settings=CompileSettings(crf=32, episodes_per_shard=2))
    docs = _clip_docs(tmp_path / "out")
    assert all(d["psnr_min"] >= 40.0 and d["crf"] is not None for d in docs), docs
    assert any(d["crf"] < 32 for d in docs), docs
    assert report.psnr_min >= 40.0
    _frames_are_their_own(tmp_path / "out")
    strict = compile_dataset(str(src), str(tmp_path / "strict"), workers=1,
                             settings=CompileSettings(preset="ultrafast", min_psnr=99.0, episodes_per_shard=2))
    docs = _clip_docs(tmp_path / "strict")
    assert all(d["crf"] is None and d["psnr_min"] is None for d in docs), docs  # None: identical (inf)
    assert all("x265 lossless" in d["why"] for d in docs) and "x265 lossless" in strict.summary()
    ds = CompiledDataset(str(tmp_path / "strict"), shuffle=False, return_uint8=True)
    ref = ReferenceDataset(str(src), return_uint8=True)  # an 8-bit 4:2:0 source: lossless is its pixels
    assert all(torch.equal(s[CAM], ref[i][CAM]) for i, s in enumerate(ds))


@pytest.mark.parametrize("codec,pix_fmt", [("libsvtav1", "yuv420p"), ("libx264", "yuv444p")])
def test_floor_measures_what_the_reader_returns(tmp_path, codec, pix_fmt):
    """The floor's lowest frame per clip (checked as x265 emits it, every frame) is the lowest frame the reader
    returns for that episode, measured independently: CompiledDataset against the reference reader's decode of
    the source, in RGB. Also for a 4:4:4 source, whose chroma lost in 4:2:0 counts too."""
    src = _source(tmp_path / "src", height=120, width=160, episodes=4, codec=codec, pix_fmt=pix_fmt,
                  **({} if codec == "libsvtav1" else {"crf": 16}))
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=CompileSettings(episodes_per_shard=2, crf=28), workers=1)
    floor = {}
    for side in sorted(out.glob(".roboreel-parts/shard-*.json")):
        for ep, clips in json.loads(side.read_text())["clips"].items():
            doc = clips[CAM]
            assert doc["psnr_checked"] == doc["frames"], doc
            floor[int(ep)] = doc["psnr_min"]
    ref = ReferenceDataset(str(src), return_uint8=True)
    measured: dict[int, float] = {}
    for i, s in enumerate(CompiledDataset(str(out), shuffle=False, return_uint8=True)):
        ep = int(s["episode_index"])
        measured[ep] = min(measured.get(ep, math.inf), _rgb_psnr(s[CAM], ref[i][CAM]))
    assert sorted(floor) == sorted(measured) == [0, 1, 2, 3]
    assert all(abs(floor[e] - measured[e]) < 0.01 and floor[e] >= 40.0 for e in floor), (floor, measured)


def test_clip_timing_is_proven_from_the_container():
    """Clips decoded where they were made (in flight, or by torchcodec for image clips) get their frame count and
    pts k/fps proven by demuxing alone: a wrong length, a wrong rate and bytes that are no mp4 are each refused,
    naming the clip and episode."""
    frames = (av.VideoFrame.from_ndarray(np.full((64, 64, 3), 20 * k, np.uint8), format="rgb24") for k in range(6))
    clip = encode_clip(frames, EncodeTarget(FAST, "c.mp4", 2), length=6, fps=10)
    check_clip_timing(clip.data, length=6, fps=10, where="c.mp4", episode=2)
    with pytest.raises(CompiledFormatError, match="holds 6 frames, the episode 7") as err:
        check_clip_timing(clip.data, length=7, fps=10, where="c.mp4", episode=2)
    assert (err.value.file, err.value.episode) == ("c.mp4", 2)
    with pytest.raises(CompiledFormatError, match=r"clip frame 1 has pts 0\.100000s, not 1/20s"):
        check_clip_timing(clip.data, length=6, fps=20, where="c.mp4", episode=2)
    with pytest.raises(CompiledFormatError, match="does not demux"):
        check_clip_timing(b"not an mp4", length=6, fps=10, where="c.mp4", episode=2)


def test_reencode_reasons_count_each_reason_once_with_its_numbers():
    """A clip re-encoded for its codec and then at a lower CRF for the floor counts under both reasons; a reason is
    never listed twice, and a number varying inside a kind shows as its range."""
    from roboreel.compile.report import group_reasons

    codec = "source codec av1 is not one every reader decodes (hevc, h264)"
    floor = "CRF {} (not 24) to keep every checked frame >= 40 dB"
    whys = [codec] * 4 + [f"{codec}; {floor.format(22)}"] * 3 + [f"{codec}; {floor.format(20)}"]
    assert group_reasons(whys) == {codec: 8, floor.format("20-22"): 4}


def test_a_444_source_whose_colour_a_420_clip_cannot_hold_fails_loudly(tmp_path, monkeypatch):
    """One-pixel red / blue columns in a yuv444p source: no 8-bit 4:2:0 clip holds them (x265 lossless included),
    so compile stops naming the pixel format, the file and the episode, and writes no output."""
    import roboreel.synth.generate as generate

    def striped(*args):
        frame = render_frame(*args)
        frame[frame.shape[0] // 2:, 0::2] = (255, 0, 0)
        frame[frame.shape[0] // 2:, 1::2] = (0, 0, 255)
        return frame

    monkeypatch.setattr(generate, "render_frame", striped)
    src = _source(tmp_path / "src", episodes=1, min_length=4, max_length=4, codec="libx264", pix_fmt="yuv444p",
                  crf=0)
    with pytest.raises(RoboreelError, match=r"source pixel format yuv444p does not fit an 8-bit 4:2:0 HEVC clip"
                                            r".*episode 0\); --min-psnr \d+ accepts that loss"):
        compile_dataset(str(src), str(tmp_path / "out"), settings=FAST, workers=1)
    assert not (tmp_path / "out" / "roboreel.json").exists()


def test_open_gop_hevc_is_reencoded_and_reads_at_random_positions(tmp_path):
    """x265's default open GOPs (LeRobot's vcodec="hevc") put frames shown before a keyframe after it in decode
    order; a copy of them read at random positions returned other frames. They are re-encoded, saying why, and
    every windowed sample of a shuffled epoch holds its own frames."""
    src = _source(tmp_path / "src", codec="libx265", g=12, crf=18, open_gop=True, min_length=20, max_length=30)
    with av.open(str(next((src / "videos").rglob("*.mp4")))) as c:
        packets = [p for p in c.demux(c.streams.video[0]) if p.size]
    assert leading_frame(packets) is not None  # the source really has open GOPs
    out = tmp_path / "out"
    report = compile_dataset(str(src), str(out), settings=FAST, workers=1)
    assert (report.clips_remuxed, report.clips_encoded) == (0, 3)
    whys = [d["why"] for d in _clip_docs(out)]  # later episodes' spans also hold the previous one's leading frames
    assert any("source GOPs are open" in w for w in whys), whys
    assert all("GOPs are open" in w or "not a closed run of packets" in w for w in whys), whys
    ds = CompiledDataset(str(out), shuffle=True, seed=1, delta_timestamps={CAM: [-0.2, -0.1, 0.0]})
    n = 0
    for s in ds:
        got = [c[0] for c in codes(s[CAM])]
        i, start = int(s["index"]), int(s["index"]) - int(s["frame_index"])
        assert got == [max(start, i - 2), max(start, i - 1), i], (i, got)
        n += 1
    assert n == ds.num_frames
