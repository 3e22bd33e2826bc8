"""x265's rc-lookahead capped at the GOP (CompileSettings.x265_params): the same packets as the preset's own
lookahead, emitted sooner. Real footage from the synthetic generator (AV1 mp4s, decoded), encoded both ways."""

from __future__ import annotations

import glob
from fractions import Fraction

import av
import pytest
from conftest import make_source

from roboreel.compile.settings import X265_LOOKAHEAD, CompileSettings
from roboreel.compile.video import parameter_sets


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> list[av.VideoFrame]:
    root = make_source(tmp_path_factory.mktemp("lookahead") / "src", episodes=1, height=96, width=128,
                       min_length=60, max_length=60, video_files_size_in_mb=100.0)
    path = sorted(glob.glob(str(root / "videos" / "*" / "*" / "*.mp4")))[0]
    with av.open(path) as c:
        out = list(c.decode(video=0))
    assert len(out) == 60
    return out


def _encode(frames: list[av.VideoFrame], settings: CompileSettings, params: str) -> tuple[list[bytes], int]:
    """The parameter sets and every packet's bytes, and how many frames went in before the first packet."""
    ctx = av.CodecContext.create("libx265", "w")
    ctx.width, ctx.height, ctx.pix_fmt = frames[0].width, frames[0].height, "yuv420p"
    ctx.time_base, ctx.framerate = Fraction(1, 20), Fraction(20)
    ctx.options = {"preset": settings.preset, "x265-params": params, "crf": str(settings.crf)}
    ctx.flags |= av.codec.context.Flags.global_header  # as in an mp4: parameter sets (and x265's options SEI,
    ctx.open()                                         # which differs) out of band
    packets: list[bytes] = []
    first = None
    for n, frame in enumerate(frames):
        frame.pts, frame.time_base = n, Fraction(1, 20)
        frame.pict_type = av.video.frame.PictureType.NONE
        out = ctx.encode(frame)
        if out and first is None:
            first = n + 1
        packets += [bytes(p) for p in out]
    packets += [bytes(p) for p in ctx.encode(None)]
    assert first is not None and len(packets) == len(frames)
    return [*parameter_sets(ctx.extradata), *packets], first


@pytest.mark.parametrize("settings", [CompileSettings(), CompileSettings(gop=6, preset="fast", crf=30)],
                         ids=["default", "gop6-fast"])
def test_capped_lookahead_same_packets_sooner(frames, settings):
    capped = settings.x265_params(height=96, width=128)
    cap = min(settings.gop, X265_LOOKAHEAD[settings.preset])
    assert f":rc-lookahead={cap}:" in capped
    own = capped.replace(f":rc-lookahead={cap}", "")  # the preset's own lookahead
    want, first_own = _encode(frames, settings, own)
    got, first_capped = _encode(frames, settings, capped)
    assert got == want
    # ... on content where the lookahead matters: half the GOP changes the packets
    shorter, _ = _encode(frames, settings, capped.replace(f":rc-lookahead={cap}", f":rc-lookahead={cap // 2}"))
    assert shorter != want
    assert first_capped == first_own - (X265_LOOKAHEAD[settings.preset] - cap) > 0


def test_no_cap_with_bframes_or_tiny_frames():
    assert "rc-lookahead" not in CompileSettings(bframes=2).x265_params(height=96, width=128)
    assert CompileSettings().x265_params(height=48, width=64).count("rc-lookahead=") == 1  # x265_size_params' 0
