"""Colour-tagged sources: a camera mp4 in full range (yuvj420p, or yuv420p tagged ``color_range=pc``) or tagged
BT.709 is read by LeRobot (torchcodec) with its tags. A re-encoded clip carries them (range, matrix, primaries,
transfer in the HEVC VUI, the sample values unconverted), so the reader's torchcodec decode of the clip gives
the RGB torchcodec gives of the source, within the lossy floor, resized or not; the floor measures both sides with
their tags (no "lossless encode reads back at 26 dB"); a tag the clip cannot hold stops the compile, named."""

from __future__ import annotations

import glob
import io
import tarfile
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from conftest import make_source
from support.settings import FAST
from torchcodec.decoders import VideoDecoder

from roboreel.compile import compile_dataset
from roboreel.compile.video import (
    EncodeTarget,
    InFlightCheck,
    encode_clip,
    encode_segmented,
    encoder_input,
    psnr,
)
from roboreel.formats.errors import RoboreelError
from roboreel.reader import CompiledDataset

CAM = "observation.images.top"
H, W = 64, 96
PC, TV, BT709, UNSPEC = 2, 1, 1, 2  # AVColorRange JPEG / MPEG; AVColorSpace etc. BT709 / unspecified

# kind -> (codec, pix_fmt, range, matrix, primaries, transfer) of the tagged source
KINDS = {
    "yuvj420p": ("libx264", "yuvj420p", PC, UNSPEC, UNSPEC, UNSPEC),
    "yuv420p-pc": ("libx265", "yuv420p", PC, UNSPEC, UNSPEC, UNSPEC),  # the HEVC decoder: yuv420p, range pc
    "bt709-tv": ("libx264", "yuv420p", TV, BT709, BT709, BT709),
    "bt709-pc": ("libx264", "yuvj420p", PC, BT709, BT709, BT709),
}


def _retag(mp4: Path, kind: str) -> None:
    """Re-encode ``mp4`` (near losslessly, same timestamps) as a source tagged ``kind``: its RGB converted with the
    tags' range and matrix, the encoder told them (they land in the bitstream's VUI)."""
    codec, pix_fmt, rng, matrix, primaries, trc = KINDS[kind]
    with av.open(str(mp4)) as c:
        s = c.streams.video[0]
        tb, rate = s.time_base, s.average_rate
        frames = [(f.pts, f.to_ndarray(format="rgb24")) for f in c.decode(s)]
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        st = out.add_stream(codec, rate=rate)
        st.width, st.height, st.pix_fmt, st.time_base = W, H, pix_fmt, tb
        ctx = st.codec_context
        ctx.color_range, ctx.colorspace, ctx.color_primaries, ctx.color_trc = rng, matrix, primaries, trc
        st.options = {"crf": "8", "g": "2", "bf": "0"} if codec == "libx264" else \
            {"crf": "8", "x265-params": "keyint=2:min-keyint=2:bframes=0:open-gop=0:log-level=error"}
        for pts, rgb in frames:
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
                format=pix_fmt, dst_colorspace=1 if matrix == BT709 else None, dst_color_range=rng)
            f.pts, f.time_base = pts, tb
            for p in st.encode(f):
                out.mux(p)
        for p in st.encode(None):
            out.mux(p)
    mp4.write_bytes(buf.getvalue())


def _source(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    src = make_source(tmp_path / f"src-{kind}", episodes=2, min_length=8, max_length=8, fps=10, cameras=(CAM,),
                      height=H, width=W, codec="libx264", crf=18, video_files_size_in_mb=100,
                      data_files_size_in_mb=100)
    (mp4,) = [Path(p) for p in glob.glob(str(src / "videos" / CAM / "*" / "*.mp4"))]
    _retag(mp4, kind)
    return src, mp4


def _tags_of(mp4: bytes | str) -> tuple[int, int, int, int]:
    """(range, matrix, primaries, transfer) of a file's first decoded frame (yuvj420p: full range)."""
    with av.open(io.BytesIO(mp4) if isinstance(mp4, bytes) else mp4) as c:
        f = next(c.decode(video=0))
    return (PC if f.format.name == "yuvj420p" else f.color_range, f.colorspace, f.color_primaries, f.color_trc)


def _clips(out: Path) -> list[bytes]:
    clips = []
    for shard in sorted(out.rglob("*.tar")):
        with tarfile.open(shard) as t:
            clips += [t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(f".{CAM}.mp4")]
    assert clips
    return clips


def _compiled(out: Path) -> list[np.ndarray]:
    """Every sample's camera frame (HWC uint8) in dataset order, as roboreel's reader returns it."""
    got = {int(s["index"]): s[CAM].permute(1, 2, 0).numpy()
           for s in CompiledDataset(str(out), shuffle=False, return_uint8=True)}
    return [got[i] for i in sorted(got)]


def _resized(rgb: np.ndarray, h: int, w: int) -> np.ndarray:
    """torchvision's ``resize(antialias=True)`` of a uint8 frame: torch's antialiased bilinear interpolate."""
    x = torch.from_numpy(rgb).permute(2, 0, 1)[None]
    y = torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear", antialias=True)
    return y[0].permute(1, 2, 0).numpy()


def _lerobot(mp4: Path) -> list[np.ndarray]:
    """torchcodec's decode of the source file (what LeRobotDataset returns): one file, the episodes in order."""
    dec = VideoDecoder(str(mp4))
    return [dec[i].permute(1, 2, 0).numpy() for i in range(len(dec))]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_reencoded_clip_carries_the_source_colour(tmp_path, kind):
    src, mp4 = _source(tmp_path, kind)
    codec, pix_fmt, rng, matrix, primaries, trc = KINDS[kind]
    assert _tags_of(str(mp4)) == (rng, matrix, primaries, trc)
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=FAST.replace(reencode=True), workers=1)
    for clip in _clips(out):
        with av.open(io.BytesIO(clip)) as c:
            cc = c.streams.video[0].codec_context
            assert cc.name == "hevc" and cc.pix_fmt in ("yuv420p", "yuvj420p")  # (the probe says yuvj for full)
            assert (cc.color_range, cc.colorspace, cc.color_primaries, cc.color_trc) == (rng, matrix, primaries, trc)
        assert _tags_of(clip) == (rng, matrix, primaries, trc)  # what a decoder's frames say
    ref, got = _lerobot(mp4), _compiled(out)
    assert len(ref) == len(got) == 16
    scores = [psnr(r, g) for r, g in zip(ref, got, strict=True)]
    assert min(scores) >= 40.0, scores


def test_resized_clip_keeps_the_source_colour(tmp_path):
    """--resize (swscale on the YUV planes) keeps a BT.709 full-range camera's range and matrix and says so: the
    clip's frames within 35 dB of torch's antialiased resize of torchcodec's source frames (the standard of
    tests/test_compile_transform.py; the colour shift this guards against reads ~26 dB)."""
    src, mp4 = _source(tmp_path, "bt709-pc")
    out = tmp_path / "out"
    compile_dataset(str(src), str(out), settings=FAST.replace(resize=(32, 48)), workers=1)
    for clip in _clips(out):
        assert _tags_of(clip) == (PC, BT709, BT709, BT709)
    got = _compiled(out)
    ref = [_resized(r, 32, 48) for r in _lerobot(mp4)]
    assert len(ref) == len(got) == 16
    scores = [psnr(r, g) for r, g in zip(ref, got, strict=True)]
    assert min(scores) >= 35.0, scores


def test_stream_copy_keeps_the_source_colour(tmp_path):
    """A BT.709 H.264 yuv420p source is stream-copied (its bitstream's VUI travels with it): samples equal
    torchcodec's decode of the source, bit for bit. (Full-range H.264/HEVC decodes as yuvj420p here, so it is
    re-encoded, with its tags: the test above.)"""
    src, mp4 = _source(tmp_path, "bt709-tv")
    out = tmp_path / "out"
    report = compile_dataset(str(src), str(out), settings=FAST, workers=1)
    assert report.clips_remuxed == 2 and report.clips_encoded == 0
    for clip in _clips(out):
        assert _tags_of(clip) == (TV, BT709, BT709, BT709)
    for r, g in zip(_lerobot(mp4), _compiled(out), strict=True):
        np.testing.assert_array_equal(r, g)


def _frames(tags: list[tuple[int, int]]) -> list[av.VideoFrame]:
    """yuv420p frames with (range, matrix) tags, one each."""
    out = []
    for k, (rng, matrix) in enumerate(tags):
        f = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 40 + 10 * k, np.uint8), format="rgb24").reformat(
            format="yuv420p")
        f.color_range, f.colorspace = rng, matrix
        out.append(f)
    return out


def test_tags_changing_within_an_episode_stop_the_encode():
    frames = _frames([(TV, BT709)] * 3 + [(PC, BT709)] * 3)
    with pytest.raises(RoboreelError, match=r"colour tags change within the episode \(color_range tv \(limited\) "
                       r"became pc \(full\)\).*c\.mp4, episode 4, frame 3"):
        encode_clip(iter(frames), EncodeTarget(FAST, "c.mp4", 4), length=6, fps=10)


@pytest.mark.parametrize("floor", [40.0, 0.0])  # GOP by GOP (segments.py) and whole clips
def test_a_tag_x265_cannot_write_stops_the_encode(floor):
    """EBU 3213 primaries (22): x265 refuses to open with them; the compile stops naming the tag, file and
    episode, not with FFmpeg's bare "Invalid data"."""
    frames = _frames([(TV, BT709)] * 4)
    for f in frames:
        f.color_primaries = 22
    settings = FAST.replace(min_psnr=floor)
    with pytest.raises(RoboreelError, match=r"cannot carry the source's colour tags: x265 refuses color_primaries "
                       r"ebu3213 \(c\.mp4, episode 1\)"):
        if floor:
            encode_segmented(iter(frames), EncodeTarget(settings, "c.mp4", 1, method="bilinear"), length=4, fps=10,
                             progress=None, to_input=encoder_input, mux_options={})
        else:
            encode_clip(iter(frames), EncodeTarget(settings, "c.mp4", 1), length=4, fps=10)


def test_a_tag_lost_in_the_bitstream_is_caught_in_flight():
    """Were a tag lost between x265's input and its bitstream (an encoder that drops it), the in-flight decode
    of every packet sees the difference: the clip is refused, not muxed with other colours."""
    from roboreel.compile.video import ColourNotCarried, ColourTags

    enc = av.CodecContext.create("libx265", "w")
    enc.width, enc.height, enc.pix_fmt, enc.time_base = 64, 64, "yuv420p", Fraction(1, 10)
    enc.options = {"x265-params": "log-level=error"}
    enc.flags |= av.codec.context.Flags.global_header
    check = InFlightCheck(enc, ColourTags(PC, BT709, BT709, BT709))  # what the source said; the encoder not told
    (frame,) = _frames([(0, UNSPEC)])
    frame.pts = 0
    check.put(0, None)
    with pytest.raises(ColourNotCarried, match=r"color_range pc \(full\) became tv \(limited\)"):
        for packet in [*enc.encode(frame), *enc.encode(None), None]:
            check.packet(packet)


def test_untagged_clip_has_no_colour_description():
    """An untagged source's clip is what an encoder never told about colour writes: no colour description."""
    frames = _frames([(0, UNSPEC)] * 4)
    clip = encode_clip(iter(frames), EncodeTarget(FAST, "c.mp4", 0), length=4, fps=10)
    with av.open(io.BytesIO(clip.data)) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.colorspace, cc.color_primaries, cc.color_trc) == (UNSPEC, UNSPEC, UNSPEC)
