"""Pixel conversions through swscale contexts kept per thread and per use, on the calling thread only.

Why: ``frame.reformat(...)`` and ``frame.to_ndarray(format=...)`` build a new swscale context for every call,
and PyAV 18 converts on as many threads as there are CPUs unless told otherwise. Measured on PyAV 18.1,
2026-11-28, 2-core x86_64 host, no GPU, ALOHA 480x640 frames, the same bytes either way (tests/test_compile_sws.py):
480x640 -> 224x224 bilinear yuv420p 0.25 ms of CPU a frame through a reused context against 1.35 ms built anew
(``--resize`` compiles 12-20% faster); the floor check's yuv420p -> rgb24 0.31-0.36 ms of the converting thread
inside a compile against 1.4 ms through one context shared by the references and the decoded frames (rebuilt at
every switch) on swscale's threads, though most of that was waiting while other cores converted, so the compile's
CPU fell only 2-4%. One context serves one kind of conversion (``use``).

Colour: a frame's tags (range, matrix; ``ColourTags``) say how its YUV becomes RGB, as torchcodec (LeRobot's
decoder) reads them. ``to_rgb24`` converts with them; ``to_yuv420p`` (a resize, a pixel format change) keeps a
YUV frame's sample values' meaning: no range or matrix conversion, its tags carried on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

_local = threading.local()
_THREADS = True  # whether this PyAV's reformat takes ``threads`` (PyAV 18 does, 15 does not)


def reformat(frame: av.VideoFrame, use: str, **options: Any) -> av.VideoFrame:
    """``frame.reformat(**options)`` (the same pixels) through this thread's context for ``use``."""
    contexts: dict[str, VideoReformatter] | None = getattr(_local, "contexts", None)
    if contexts is None:
        contexts = _local.contexts = {}
    reformatter = contexts.get(use)
    if reformatter is None:
        reformatter = contexts[use] = VideoReformatter()
    global _THREADS
    if _THREADS:
        try:
            return reformatter.reformat(frame, threads=1, **options)
        except TypeError:  # an older PyAV (15 has no ``threads``) converts on the calling thread only
            _THREADS = False
    return reformatter.reformat(frame, **options)


def to_rgb24(frame: av.VideoFrame, use: str) -> np.ndarray:
    """``frame.to_ndarray(format="rgb24")`` through this thread's context for ``use``: converted with the frame's
    own range and matrix (PyAV 18 reads them off the frame; named here so that an older PyAV does too)."""
    return reformat(frame, use, format="rgb24", src_colorspace=frame.colorspace,
                    src_color_range=frame.color_range).to_ndarray()


def to_yuv420p(frame: av.VideoFrame, use: str, *, tags: ColourTags | None = None, **options: Any) -> av.VideoFrame:
    """``frame`` as yuv420p through this thread's context for ``use`` (``options``: size, interpolation), with no
    change of colour a reader would see. A YUV frame keeps its range and matrix, so its sample values keep their
    meaning (full range stays full range: yuvj420p keeps its bytes), and the result carries its tags. An RGB frame
    is converted with ``tags``' range and matrix and tagged with them; without ``tags``, BT.601 limited range,
    untagged: what an untagged clip means to every reader."""
    own = ColourTags.of(frame)
    if not frame.format.is_rgb:
        if tags is not None and tags.differ(own):
            raise ValueError(f"a YUV frame converts to yuv420p in its own colour, not another ({tags.differ(own)})")
        tags = own
        out = reformat(frame, use, format="yuv420p", src_colorspace=own.colorspace, dst_colorspace=own.colorspace,
                       src_color_range=own.color_range, dst_color_range=own.color_range, **options)
    else:
        tags = tags or ColourTags(0, 2, own.color_primaries, own.color_trc)
        matrix = _SWS_MATRIX.get(tags.colorspace)
        if matrix is None:
            raise ValueError(f"swscale has no RGB -> YUV matrix for colorspace {tag_name('colorspace', tags.colorspace)}")
        out = reformat(frame, use, format="yuv420p", dst_colorspace=matrix, dst_color_range=tags.color_range or 1,
                       **options)
    out.color_range, out.colorspace = tags.color_range, tags.colorspace
    if hasattr(out, "color_primaries"):  # PyAV >= 16 (a frame's primaries and transfer; older ones lack them)
        out.color_primaries, out.color_trc = tags.color_primaries, tags.color_trc
    return out


_UNSPECIFIED = 2  # AVCOL_PRI_UNSPECIFIED, AVCOL_TRC_UNSPECIFIED

# AVColorSpace -> swscale's SWS_CS_* matrix, for RGB -> YUV conversions (unspecified: BT.601, swscale's default)
_SWS_MATRIX = {1: 1, 2: 5, 4: 4, 5: 5, 6: 5, 7: 7, 9: 9, 10: 9}

# FFmpeg's names of the values (libavutil/pixdesc.c), for messages; others are shown as numbers
_TAG_NAMES = {
    "color_range": {0: "unspecified", 1: "tv (limited)", 2: "pc (full)"},
    "colorspace": {0: "gbr", 1: "bt709", 2: "unspecified", 4: "fcc", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m",
                   8: "ycgco", 9: "bt2020nc", 10: "bt2020c", 11: "smpte2085", 12: "chroma-derived-nc",
                   13: "chroma-derived-c", 14: "ictcp"},
    "color_primaries": {1: "bt709", 2: "unspecified", 4: "bt470m", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m",
                        8: "film", 9: "bt2020", 10: "smpte428", 11: "smpte431", 12: "smpte432", 22: "ebu3213"},
    "color_trc": {1: "bt709", 2: "unspecified", 4: "gamma22", 5: "gamma28", 6: "smpte170m", 7: "smpte240m",
                  8: "linear", 9: "log100", 10: "log316", 11: "iec61966-2-4", 12: "bt1361e", 13: "iec61966-2-1",
                  14: "bt2020-10", 15: "bt2020-12", 16: "smpte2084", 17: "smpte428", 18: "arib-std-b67"},
}


def tag_name(tag: str, value: int) -> str:
    """``tag``'s ``value`` as FFmpeg names it (``colorspace 1`` -> ``bt709``)."""
    return _TAG_NAMES[tag].get(value, str(value))


@dataclass(frozen=True)
class ColourTags:
    """A frame's colour description (FFmpeg's AVColorRange / AVColorSpace / AVColorPrimaries /
    AVColorTransferCharacteristic values): range and matrix decide its RGB, primaries and transfer ride along. An
    unspecified range matches a limited one (swscale and torchcodec read it so, and x265's VUI writes it so)."""

    color_range: int
    colorspace: int
    color_primaries: int
    color_trc: int

    @classmethod
    def of(cls, frame: av.VideoFrame) -> ColourTags:
        """The tags of a frame (a yuvj format is full range whatever its range says)."""
        rng = 2 if frame.format.name.startswith("yuvj") else int(frame.color_range)
        # PyAV < 16 reads no primaries or transfer off a frame: unspecified (they do not change its RGB)
        return cls(rng, int(frame.colorspace), int(getattr(frame, "color_primaries", _UNSPECIFIED)),
                   int(getattr(frame, "color_trc", _UNSPECIFIED)))

    def set_on(self, encoder: av.CodecContext) -> None:
        """Write the tags into an encoder's context before it opens (libx265 puts them in the SPS's VUI; an
        untagged frame's tags are the context's defaults, so its clip's bytes are those of an encoder never told)."""
        encoder.color_range = self.color_range
        encoder.colorspace = self.colorspace
        encoder.color_primaries = self.color_primaries
        encoder.color_trc = self.color_trc

    def differ(self, other: ColourTags) -> str | None:
        """The first tag ``other`` does not hold as this does, named with both values; None when all match."""
        for tag in _TAG_NAMES:
            want, got = getattr(self, tag), getattr(other, tag)
            if want != got and not (tag == "color_range" and {want, got} == {0, 1}):
                return f"{tag} {tag_name(tag, want)} became {tag_name(tag, got)}"
        return None
