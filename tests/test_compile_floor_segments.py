"""The fidelity floor GOP by GOP (compile/video/_segments.py): a clip whose frames all hold the floor is the very clip a
plain encode makes; a hard GOP is re-encoded alone at a lower CRF while the GOPs before it keep their packets
byte for byte; every frame of the result, decoded independently (torchcodec, from the mp4), holds the floor;
where the GOP-by-GOP encode cannot go on, the whole clip is re-encoded as before, and compiles stay byte-identical
with 1 and 2 workers."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from fractions import Fraction

import av
import numpy as np
import pytest
import torch
from torchcodec.decoders import VideoDecoder

from roboreel.compile import CompileSettings
from roboreel.compile.video import (
    EncodeTarget,
    SegmentsUnavailable,
    encode_clip,
    encode_segmented,
    encoder_input,
    parameter_sets,
    psnr,
)
from roboreel.compile.video._transcode import _MUX_OPTIONS

GOP, H, W, FPS = 8, 64, 96, 10
HARD = 3  # the GOP whose frames are hard to code


def _rgb(n: int) -> np.ndarray:
    """Frame n: a smooth moving gradient; in GOP ``HARD``, fine random texture over it (costly to code)."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    base = 128 + 60 * np.sin((x + 3 * n) / 17.0)[..., None] * np.array([1.0, 0.6, 0.3]) + (y / H * 40)[..., None]
    if n // GOP == HARD:
        base = base + np.random.default_rng(n).normal(0, 24, (H, W, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _frames(length: int) -> Iterator[av.VideoFrame]:
    for n in range(length):
        yield av.VideoFrame.from_ndarray(_rgb(n), format="rgb24").reformat(format="yuv420p")


def _inputs(length: int) -> list[np.ndarray]:
    """The rgb24 of what x265 is given (the yuv420p frames converted back), the floor's reference."""
    return [f.to_ndarray(format="rgb24") for f in _frames(length)]


def _segmented(settings: CompileSettings, length: int):
    return encode_segmented(_frames(length), EncodeTarget(settings, "test.mp4", 0, method="area"), length=length,
                            fps=FPS, progress=None, to_input=encoder_input, mux_options=_MUX_OPTIONS)


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    with av.open(io.BytesIO(data)) as c:
        return sorted((int(p.pts), bytes(p)) for p in c.demux(c.streams.video[0]) if p.size)


def _scores(settings: CompileSettings, length: int) -> list[float]:
    """Every frame's PSNR for a plain encode at ``settings.crf`` (no floor)."""
    clip = encode_clip(_frames(length), EncodeTarget(settings.replace(min_psnr=0.0, psnr_frames=length), "t", 0),
                       length=length, fps=FPS)
    return clip.psnr


def test_a_clip_that_holds_the_floor_is_the_plain_encode():
    s = CompileSettings(gop=GOP, crf=20, min_psnr=30.0)
    got = _segmented(s, 5 * GOP)
    data, scores, segments = got.data, got.scores, got.segments
    assert (got.height, got.width) == (H, W)
    plain = encode_clip(_frames(5 * GOP), EncodeTarget(s, "t", 0), length=5 * GOP, fps=FPS)
    assert segments == [(0, 20)]
    assert data == plain.data
    assert len(scores) == 5 * GOP and min(scores.values()) == plain.psnr_min


def test_a_hard_gop_is_re_encoded_alone_and_every_frame_holds_the_floor():
    length = 5 * GOP
    base = CompileSettings(gop=GOP, crf=30)
    plain = _scores(base, length)
    hard = [plain[n] for n in range(HARD * GOP, (HARD + 1) * GOP)]
    easy = [p for n, p in enumerate(plain) if n // GOP != HARD]
    floor = min(hard) + 0.3  # the premise: only the hard GOP is under this floor at CRF 30
    assert min(easy) > floor + 1, (min(easy), min(hard))
    s = base.replace(min_psnr=floor)
    got = _segmented(s, length)
    data, scores, segments = got.data, got.scores, got.segments
    assert segments[0] == (0, 30) and segments[1][0] == HARD * GOP and len(segments) >= 2, segments
    assert all(crf < 30 for _, crf in segments[1:])
    # the GOPs before the hard one keep the plain encode's packets, byte for byte
    plain_data = encode_clip(_frames(length), EncodeTarget(base.replace(min_psnr=0.0), "t", 0), length=length,
                             fps=FPS).data
    before = [p for p in _packets(plain_data) if p[0] < HARD * GOP]
    assert [p for p in _packets(data) if p[0] < HARD * GOP] == before
    # every frame, decoded by torchcodec from the mp4, holds the floor; the in-flight scores are those frames'
    ref = _inputs(length)
    decoded = VideoDecoder(data).get_frames_in_range(0, length).data  # [N, C, H, W] uint8
    assert decoded.shape[0] == length
    got = [psnr(ref[n], decoded[n].permute(1, 2, 0).numpy()) for n in range(length)]
    assert min(got) >= floor, (min(got), floor)
    assert all(abs(got[n] - scores[n]) < 1e-6 or got[n] == scores[n] == math.inf for n in range(length))
    assert torch.equal(decoded[0], VideoDecoder(plain_data).get_frames_at([0]).data[0])


def test_where_no_crf_holds_the_whole_clip_is_left_to_the_caller():
    """Past the CRF range the GOP-by-GOP encode gives up (the caller goes lossless for the whole clip)."""
    with pytest.raises(SegmentsUnavailable) as e:
        _segmented(CompileSettings(gop=GOP, crf=30, min_psnr=99.0), 3 * GOP)
    assert e.value.crf is None
    with pytest.raises(SegmentsUnavailable):  # B-frames: packets are not frames in order
        _segmented(CompileSettings(gop=GOP, crf=30, bframes=2, min_psnr=30.0), 3 * GOP)


def test_parameter_sets_are_the_vps_sps_pps_of_the_extradata():
    ctx = av.CodecContext.create("libx265", "w")
    ctx.width, ctx.height, ctx.pix_fmt = W, H, "yuv420p"
    ctx.time_base, ctx.framerate = Fraction(1, FPS), Fraction(FPS)
    ctx.options = {"x265-params": CompileSettings().x265_params(height=H, width=W), "crf": "24"}
    ctx.flags |= av.codec.context.Flags.global_header
    ctx.open()
    sets = parameter_sets(ctx.extradata)
    assert [(u[0] >> 1) & 0x3F for u in sets] == [32, 33, 34]
    assert parameter_sets(b"") == []


def test_compiles_with_segments_are_byte_identical_with_1_and_2_workers(tmp_path):
    """CRF 32 is under the floor on parts of this footage: some clips are re-encoded from a GOP on (their json
    says where and at which CRF), and the shards are the same bytes whether 1 or 2 workers made them."""
    from roboreel.compile import compile_dataset
    from roboreel.synth import SynthConfig, synthesize

    src = tmp_path / "src"
    synthesize(src, SynthConfig(episodes=4, min_length=24, max_length=40, fps=10, cameras=("observation.images.top",),
                                height=120, width=160, tasks=1), overwrite=True)
    settings = CompileSettings(crf=32, episodes_per_shard=2)
    reports = [compile_dataset(str(src), str(tmp_path / f"out{w}"), settings=settings, workers=w) for w in (1, 2)]
    assert all(r.psnr_min >= 40.0 for r in reports)
    shards = [sorted((p.name, p.read_bytes()) for p in (tmp_path / f"out{w}").rglob("*.tar")) for w in (1, 2)]
    assert shards[0] and shards[0] == shards[1]
    import json

    docs = [c for side in sorted((tmp_path / "out1").glob(".roboreel-parts/shard-*.json"))
            for clips in json.loads(side.read_text())["clips"].values() for c in clips.values()]
    segmented = [d for d in docs if d.get("crf_segments")]
    assert segmented, [d["why"] for d in docs]
    for d in segmented:
        starts = [s for s, _ in d["crf_segments"]]
        assert starts[0] == 0 and all(s % settings.gop == 0 for s in starts) and starts == sorted(starts)
        assert d["crf"] == min(c for _, c in d["crf_segments"]) < 32
        lowered = next(s for s, c in d["crf_segments"] if c != 32)
        assert f"CRF {d['crf']} (not 32) from frame {lowered} to keep" in d["why"]
