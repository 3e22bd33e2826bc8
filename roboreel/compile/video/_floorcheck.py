"""The fidelity floor's check: every frame x265 emits is decoded back as it is muxed and compared in RGB with
the frame that went in (transcode.encode_clip), so a clip whose frames fall under ``min_psnr`` is known while it
is being made, without a second decode of the finished clip."""

from __future__ import annotations

import math
from collections import deque
from fractions import Fraction

import av
import cv2
import numpy as np

from roboreel.compile.settings import CompileSettings
from roboreel.compile.video._sws import ColourTags, tag_name, to_rgb24
from roboreel.formats.errors import RoboreelError


def psnr(ref: np.ndarray, test: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays of one shape (inf when identical). OpenCV's exact sum of squared
    differences: 0.06 ms a 480x640 RGB frame where numpy's float32 arithmetic took 3.7 ms, more than the
    colour conversions and the decode the floor's check needs (every frame, every try)."""
    if ref.shape != test.shape:
        raise ValueError(f"PSNR of frames of different shapes {ref.shape} and {test.shape}")
    # One row of single-channel values: OpenCV reads a 3-D array's last axis as channels (at most 128 in
    # OpenCV 5), so a CHW frame as torchcodec decodes it would not wrap; the sum is the same for any layout.
    flat_ref, flat_test = (np.ascontiguousarray(a).reshape(1, -1) for a in (ref, test))
    mse = cv2.norm(flat_ref, flat_test, cv2.NORM_L2SQR) / ref.size
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


class BelowFloor(Exception):
    """An encode given up at its first frame under the floor (``encode_clip(give_up_below=...)``)."""

    def __init__(self, worst: float, frames: int) -> None:
        super().__init__(f"a frame at {worst:.2f} dB after {frames} frames")
        self.worst, self.frames = worst, frames


CRF_RANGE = 12  # the floor lowers the CRF at most this far below the settings' own before going lossless


def next_crf(settings: CompileSettings, crf: int, worst: float) -> int | None:
    """The CRF to try after ``crf`` left a frame at ``worst`` dB, under ``min_psnr``: lower by what the deficit
    needs (a CRF step is ~0.5 dB: twice the deficit in steps, plus one, at least two), never below
    ``settings.crf - CRF_RANGE``; None when that was already tried."""
    lowest = max(0, settings.crf - CRF_RANGE)
    if crf <= lowest:
        return None
    return max(lowest, crf - max(2, math.ceil(2 * (settings.min_psnr - worst)) + 1))


class ColourNotCarried(RoboreelError):
    """A clip's frames decode with other colour tags than its encoder's input holds (``InFlightCheck``): the
    encoder could not write one into the bitstream, so a reader would convert them to other RGB. The message names
    the tag; the caller adds the file and episode."""


def x265_refusal(tags: ColourTags | None) -> str | None:
    """Why x265 would not open with ``tags`` (it takes the H.273 values it knows, not e.g. EBU 3213 primaries or
    a reserved transfer), naming the tag; None when it takes each. Asked only after an encode failed to start: a
    throwaway encoder is opened with each tag the source sets."""
    if tags is None:
        return None
    for tag, unset in (("color_range", 0), ("colorspace", 2), ("color_primaries", 2), ("color_trc", 2)):
        if (value := getattr(tags, tag)) == unset:
            continue
        probe = av.CodecContext.create("libx265", "w")
        probe.width, probe.height, probe.pix_fmt, probe.time_base = 64, 64, "yuv420p", Fraction(1, 25)
        setattr(probe, tag, value)
        probe.options = {"x265-params": "log-level=none"}
        try:
            probe.open()
        except av.error.FFmpegError:
            return f"the HEVC clip cannot carry the source's colour tags: x265 refuses {tag} {tag_name(tag, value)}"
    return None


def colour_mismatch(tags: ColourTags, frame: av.VideoFrame) -> str | None:
    """Why a frame going into x265 cannot join a clip of ``tags`` (one clip, one colour description); None when
    it can."""
    if (differ := tags.differ(ColourTags.of(frame))) is None:
        return None
    return f"the source's colour tags change within the episode ({differ}), and a clip holds one set"


class InFlightCheck:
    """PSNR of frames in RGB, checked as the encoder emits them: each packet is decoded here before it is muxed
    (an HEVC decoder primed with the encoder's parameter sets), and each decoded frame is compared with the
    reference kept for it when it went in. References wait in a FIFO only while their frame is inside x265.

    ``tags``: the colour description the encoder was given (the source's: range, matrix, primaries, transfer);
    every decoded frame must carry it, else ``ColourNotCarried`` (a reader would see other colours)."""

    def __init__(self, encoder: av.CodecContext, tags: ColourTags | None = None) -> None:
        self.encoder = encoder
        self.tags = tags
        self.decoder: av.CodecContext | None = None
        self.pending: deque[tuple[int, np.ndarray | None]] = deque()
        self.scores: dict[int, float] = {}
        self.worst = math.inf  # the lowest score so far

    @staticmethod
    def rgb(frame: av.VideoFrame) -> np.ndarray:
        """A reference: ``frame.to_ndarray(format="rgb24")`` through a reused swscale context (_sws.py)."""
        return to_rgb24(frame, "floor-reference")

    def put(self, n: int, reference: np.ndarray | None) -> None:
        """Frame ``n`` goes into the encoder; ``reference`` (rgb24) is what it must come back as (None: not
        checked)."""
        self.pending.append((n, reference))

    def packet(self, packet: av.Packet | None) -> None:
        """An encoder packet (None: the end), decoded before it is muxed (muxing consumes its data)."""
        if self.decoder is None:
            self.decoder = av.CodecContext.create("hevc", "r")
            self.decoder.extradata = self.encoder.extradata  # mp4: parameter sets out of band
        for frame in self.decoder.decode(packet):
            if self.tags is not None and (differ := self.tags.differ(ColourTags.of(frame))) is not None:
                raise ColourNotCarried(f"the HEVC clip cannot carry the source's colour tags: {differ} in the "
                                       "encoded stream (its frames would decode to other RGB)")
            n, reference = self.pending.popleft()
            if reference is not None:
                self.scores[n] = score = psnr(reference, to_rgb24(frame, "floor-decoded"))
                self.worst = min(self.worst, score)


def floor_reference(source: av.VideoFrame, encoded: av.VideoFrame) -> np.ndarray:
    """The rgb24 a re-encoded frame must come back as: the source frame's own RGB when an 8-bit source only
    changes pixel format on the way into x265 (a 4:4:4 or 4:2:2 source's chroma lost in 4:2:0 counts against the
    floor, as it counts in what a reader sees), the encoder input's otherwise: a resize (``--resize``) is the loss
    asked for, and a deeper source's RGB depends on how it is dithered to 8 bits (PyAV's conversion of a 10-bit
    frame and torchcodec's differ by ~2 dB), so its documented 10 -> 8 bit conversion is the reference."""
    same = (source.height, source.width) == (encoded.height, encoded.width)
    return InFlightCheck.rgb(source if same and _eight_bit(source.format) else encoded)


def _eight_bit(fmt: av.VideoFormat) -> bool:
    """Whether every component of ``fmt`` has 8 bits: sources whose own RGB the floor measures against."""
    return all(c.bits == 8 for c in fmt.components)


def unheld_colour(source_format: av.VideoFormat | None, psnr_min: float, min_psnr: float) -> str | None:
    """Why x265 lossless still fell under the floor, when the reason is the source's 8-bit 4:4:4 / 4:2:2 colour,
    measured against its own RGB (``floor_reference``), that no 4:2:0 clip holds; None otherwise."""
    if source_format is None or source_format.name in ("yuv420p", "yuvj420p") or not _eight_bit(source_format):
        return None
    return (f"source pixel format {source_format.name} does not fit an 8-bit 4:2:0 HEVC clip: even x265 lossless "
            f"reads back at {psnr_min:.2f} dB PSNR against the source decode, under the {min_psnr:g} dB floor")
