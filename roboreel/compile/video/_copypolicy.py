"""Stream copy or re-encode, per clip: a source span is copied only when the reader can use it as it is.

A reader decodes a clip with torchcodec (CPU, or NVDEC on the GPU path) at random positions, so a copy needs a
codec the compiled format promises (HEVC, H.264; AV1 sources are
re-encoded), the pixel format roboreel's RGB path carries (``yuv420p``; 10/12-bit and
4:2:2/4:4:4 sources are re-encoded to 8-bit 4:2:0, which is what torchcodec hands a trainer anyway), and keyframes
close enough that a random frame costs few extra decodes (``CompileSettings.remux_max_gop``, 32: LeRobot writes
g=2, phones and recorders 30-250; a 240-frame-GOP H.264 copy was measured reading 1.8-2x slower through
``roboreel.loader`` than its re-encode, docs/format.md), in closed GOPs (x265's default open GOP puts frames
shown before a keyframe after it: a seek there cannot decode them). Depth clips follow their own rule (_depth.py).

Every refusal is a sentence that lands in the clip's json (``why``), so ``roboreel compile`` can say per clip what
it did and why.
"""

from __future__ import annotations

from fractions import Fraction

import av

from roboreel.compile.settings import CompileSettings

REMUX_CODECS = ("hevc", "h264")
REMUX_PIX_FMTS = ("yuv420p",)


def span_gop(packets: list[av.Packet]) -> int:
    """The longest keyframe interval (frames) of a span's packets, in presentation order; the span length when
    only its first frame is a keyframe."""
    order = sorted(packets, key=lambda p: p.pts if p.pts is not None else -1)
    keys = [i for i, p in enumerate(order) if p.is_keyframe] + [len(order)]
    return max((b - a for a, b in zip(keys, keys[1:], strict=False)), default=len(order))


def codec_refusal(codec: str, pix_fmt: str | None, settings: CompileSettings) -> str | None:
    """Why a source stream of ``codec`` / ``pix_fmt`` cannot be stream-copied for an RGB camera (None: it can,
    GOP permitting)."""
    if settings.reencode:
        return "re-encode asked (--reencode)"
    if settings.resize is not None:
        return "resize asked"
    if codec not in REMUX_CODECS:
        return f"source codec {codec} is not one every reader decodes ({', '.join(REMUX_CODECS)})"
    if pix_fmt not in REMUX_PIX_FMTS:
        if pix_fmt and pix_fmt.startswith("yuvj"):  # FFmpeg's name for a full-range decode
            return f"source pixel format {pix_fmt} is full range (re-encoded as yuv420p, its range tagged)"
        return f"source pixel format {pix_fmt} is not 8-bit 4:2:0"
    return None


def leading_frame(packets: list[av.Packet]) -> int | None:
    """The decode position of the first frame decoded after a keyframe but shown before it (an open GOP: x265's
    default, HEVC's CRA with leading pictures), or None when every GOP is closed. A reader seeking to such a
    keyframe cannot decode the frames before it, so random access lands on other frames."""
    key = None
    for i, p in enumerate(packets):  # decode order
        if p.pts is None:
            continue
        if p.is_keyframe:
            key = p.pts
        elif key is not None and p.pts < key:
            return i
    return None


GRID_EPS_S = 1e-6  # "on the grid": what float arithmetic on exact time bases leaves


def grid_refusal(packets: list[av.Packet], time_base: Fraction, fps: int) -> str | None:
    """Why a span's pts, counted from its first frame, are not k/fps (None: they are). A copy keeps the source's
    pts; frames off the grid within LeRobot's tolerance (source/_decode.py refuses the rest) would sit up to twice that
    far from the clip's first frame, where a reader checking k/fps refuses them: re-encoding writes k/fps."""
    pts = sorted(p.pts for p in packets if p.pts is not None)
    for k, p in enumerate(pts):
        off = float((p - pts[0]) * time_base) - k / fps
        if abs(off) > GRID_EPS_S:
            return f"source frame {k} is {off * 1e3:+.3f} ms off the fps grid"
    return None


def gop_refusal(packets: list[av.Packet], settings: CompileSettings) -> str | None:
    """Why a closed span cannot be copied for its keyframe spacing or open GOPs (None: it can)."""
    gop = span_gop(packets)
    if gop > settings.remux_max_gop:
        return f"source GOP of {gop} frames > remux_max_gop {settings.remux_max_gop}"
    if (i := leading_frame(packets)) is not None:
        return f"source GOPs are open (packet {i} decodes after a keyframe it is shown before): no random access"
    return None
