"""The fidelity floor by GOP: a frame under ``min_psnr`` re-encodes the clip from its GOP on at a lower CRF.

Why: the floor used to restart the whole clip at a lower CRF as soon as one frame fell under it (decoding the
source span again and encoding every frame again), so a single hard GOP near the end of an episode cost a second
encode of all of it. Compiled clips are closed GOPs of ``gop`` frames (``keyint = min-keyint``, no scenecut, no
open GOP), so with no B-frames packet k is frame k, and the packets of a GOP never reference another GOP. Here
a GOP's packets are held until every frame of it has been decoded back and checked (``InFlightCheck``), then
muxed; when a frame fails, the held packets are dropped, a new x265 starts at that GOP's first frame at the next
CRF (``next_crf``), and it is fed again from the encoder inputs kept since then: no seek, no second decode of
the source, and the GOPs before keep their bytes.

An mp4 holds one set of parameter sets (``hvcC``), so a restarted x265 must produce the clip's own VPS, SPS and
PPS byte for byte; x265's only difference between CRFs is its informational SEI (the options string), which
rides along in the extradata and does not change how a frame decodes. When the parameter sets differ (x265
lossless changes the PPS, for one), with B-frames, or with no CRF left to try, ``SegmentsUnavailable`` says so
and the caller re-encodes the whole clip as before (transcode.encode_with_floor). The output depends only on
the content and the settings: the same bytes from any worker and any ``--part``.
"""

from __future__ import annotations

import io
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

from roboreel.compile.settings import CompileSettings
from roboreel.compile.tables import downsample
from roboreel.compile.video._floorcheck import (
    ColourNotCarried,
    InFlightCheck,
    colour_mismatch,
    floor_reference,
    next_crf,
    x265_refusal,
)
from roboreel.compile.video._sws import ColourTags
from roboreel.compile.video._target import EncodeTarget
from roboreel.formats.errors import RoboreelError

_PARAMETER_SETS = (32, 33, 34)  # HEVC NAL unit types VPS, SPS, PPS


class SegmentsUnavailable(Exception):
    """The floor cannot go on GOP by GOP: ``crf`` is where the whole-clip re-encode should start (None: x265
    lossless); ``reason``, for the clip's ``why``, is empty where the whole-clip encode says it itself."""

    def __init__(self, crf: int | None, reason: str) -> None:
        super().__init__(reason)
        self.crf, self.reason = crf, reason


def parameter_sets(extradata: bytes | None) -> list[bytes]:
    """The VPS, SPS and PPS NAL units of an Annex B extradata (libx265's), in order; other NAL units left out."""
    if not extradata:
        return []
    units = [u.lstrip(b"\x00") for u in extradata.split(b"\x00\x00\x01")]
    return [u.rstrip(b"\x00") for u in units if u and ((u[0] >> 1) & 0x3F) in _PARAMETER_SETS]


class SegmentedEncode:
    """One clip encoded GOP by GOP under the floor (see the module doc). ``feed`` each encoder input in order,
    then ``finish``."""

    def __init__(self, *, settings: CompileSettings, fps: int, height: int, width: int,
                 mux_options: dict[str, str], tags: ColourTags) -> None:
        if settings.bframes or not settings.gop:
            raise SegmentsUnavailable(settings.crf, "")  # packets are not frames in order: whole clips
        self.settings, self.fps, self.tags = settings, fps, tags
        self.height, self.width, self.gop = height, width, settings.gop
        self.tb = Fraction(1, fps)
        self.params = settings.x265_params(height=height, width=width)
        self.buf = io.BytesIO()
        self.out = av.open(self.buf, "w", format="mp4", container_options=mux_options)
        self.stream = self.out.add_stream("libx265", rate=fps)
        self._configure(self.stream.codec_context, settings.crf)
        self.stream.codec_tag = "hvc1"
        self.stream.time_base = self.tb
        self.encoder = self.stream.codec_context
        self.check = InFlightCheck(self.encoder, tags)
        self.first_sets: list[bytes] | None = None
        self.crf = settings.crf
        self.segments: list[tuple[int, int]] = [(0, settings.crf)]  # (first frame, CRF) of each run of GOPs
        self.scores: dict[int, float] = {}
        self.failed: int | None = None  # the first frame under the floor not yet re-encoded
        self.window: deque[tuple[int, av.VideoFrame, np.ndarray]] = deque()  # inputs of GOPs not muxed yet
        self.held: list[av.Packet] = []  # packets of GOPs not muxed yet
        self.muxed = 0  # frames whose packets are muxed (a multiple of gop until the end)

    def _configure(self, ctx: av.CodecContext, crf: int) -> None:
        ctx.width, ctx.height, ctx.pix_fmt = self.width, self.height, "yuv420p"
        ctx.time_base = self.tb
        ctx.framerate = Fraction(self.fps)
        self.tags.set_on(ctx)  # the source's colour description, in every x265's VUI (the same parameter sets)
        ctx.options = {"preset": self.settings.preset, "x265-params": self.params, "crf": str(crf)}

    # -- feeding -----------------------------------------------------------------------------------------
    def feed(self, n: int, frame: av.VideoFrame, reference: np.ndarray) -> None:
        """Encode input frame ``n`` (yuv420p at the clip's size); ``reference``: its rgb24, what it must decode to."""
        self.window.append((n, frame, reference))
        self._encode(n, frame, reference)
        self._settle(end=False)

    def _encode(self, n: int, frame: av.VideoFrame, reference: np.ndarray) -> None:
        self.check.put(n, reference)
        frame.pts, frame.time_base = n, self.tb
        frame.pict_type = av.video.frame.PictureType.NONE  # a source keyframe must not force one here
        for packet in self.encoder.encode(frame):
            self._packet(packet)
        if self.first_sets is None and self.encoder is self.stream.codec_context:
            self.first_sets = parameter_sets(self.encoder.extradata)

    def _packet(self, packet: av.Packet) -> None:
        self.check.packet(packet)
        self.held.append(packet)

    def finish(self) -> tuple[bytes, dict[int, float], list[tuple[int, int]]]:
        """Flush; returns the clip's bytes, every frame's PSNR and the CRF segments [(first frame, CRF)]."""
        self._settle(end=True)
        self.out.close()
        return self.buf.getvalue(), self.scores, self.segments

    def close(self) -> None:
        """Give up (an error elsewhere): close the container without a result."""
        self.out.close()

    # -- checking, muxing, restarting ----------------------------------------------------------------------
    def _settle(self, *, end: bool) -> None:
        """Take the scores in; restart from a failed frame's GOP (as often as it takes); mux GOPs fully checked.
        At the end, flush the encoder and the check's decoder first (their last frames are checked too)."""
        while True:
            if end:
                for packet in self.encoder.encode(None):
                    self._packet(packet)
                self.check.packet(None)
            self._take_scores()
            if self.failed is None:
                self._mux_checked(end=end)
                return
            self._restart(self.failed)  # fed again up to the newest input; then checked again

    def _take_scores(self) -> None:
        floor = self.settings.min_psnr
        for n, score in self.check.scores.items():
            self.scores[n] = score
            if score < floor and (self.failed is None or n < self.failed):
                self.failed = n
        self.check.scores.clear()

    def _mux_checked(self, *, end: bool) -> None:
        """Mux the held packets of every GOP whose frames have all been checked (all of them at the end)."""
        upto = self.muxed
        while upto in self.scores:
            upto += 1
        if not end:
            upto -= upto % self.gop  # whole GOPs only: a later frame of a GOP may still fail
        if upto <= self.muxed:
            return
        ready = [p for p in self.held if p.pts < upto]
        self.held = [p for p in self.held if p.pts >= upto]
        for p in ready:
            p.stream = self.stream
            self.out.mux(p)
        while self.window and self.window[0][0] < upto:
            self.window.popleft()
        self.muxed = upto

    def _restart(self, failed: int) -> None:
        """Frame ``failed`` is under the floor: a new x265 at the next CRF from its GOP's first frame, fed again."""
        worst = self.scores[failed]
        crf = next_crf(self.settings, self.crf, worst)
        if crf is None:
            raise SegmentsUnavailable(None, "")  # the range is spent: x265 lossless, whole clip (its own why)
        start = failed - failed % self.gop
        encoder = av.CodecContext.create("libx265", "w")
        self._configure(encoder, crf)
        encoder.flags |= av.codec.context.Flags.global_header  # parameter sets out of band, as the mp4 stream's
        encoder.open()
        sets = parameter_sets(encoder.extradata)
        if not sets or sets != self.first_sets:
            raise SegmentsUnavailable(crf, f"whole clip from CRF {crf}: x265's parameter sets differ from CRF "
                                      f"{self.settings.crf}'s")
        self.encoder, self.crf = encoder, crf
        self.check = InFlightCheck(encoder, self.tags)
        self.held = [p for p in self.held if p.pts < start]  # earlier GOPs, checked, not muxed yet: kept
        for n in [n for n in self.scores if n >= start]:
            del self.scores[n]
        self.failed = None
        self.segments = [s for s in self.segments if s[0] < start] + [(start, crf)]
        for n, frame, reference in [w for w in self.window if w[0] >= start]:
            self._encode(n, frame, reference)


@dataclass
class Segmented:
    """A clip encoded GOP by GOP: its bytes, every frame's PSNR, the CRF segments [(first frame, CRF)], the stats
    frames (None unless asked for) and its size."""

    data: bytes
    scores: dict[int, float]
    segments: list[tuple[int, int]]
    stats_rgb: np.ndarray | None
    height: int
    width: int


def encode_segmented(
    frames: Iterator[av.VideoFrame], target: EncodeTarget, *, length: int, fps: int,
    progress: Callable[[int], None] | None, to_input: Callable[[av.VideoFrame, int, int, str], av.VideoFrame],
    mux_options: dict[str, str],
) -> Segmented:
    """Encode exactly ``length`` frames (the clip's, at ``fps``) to ``target`` under the floor GOP by GOP.
    ``to_input`` makes a source frame the encoder's input (_transcode.py's ``encoder_input``), ``mux_options``
    are the mp4 muxer's (_transcode.py's); raises SegmentsUnavailable where the caller must re-encode the whole
    clip."""
    settings, where, episode, size, method = target.settings, target.where, target.episode, target.size, target.method
    for_stats = set(target.stats_frames(length))
    rgb: list[np.ndarray] = []
    enc: SegmentedEncode | None = None
    n = 0
    try:
        for frame in frames:
            height, width = size or (frame.height, frame.width)
            source, frame = frame, to_input(frame, height, width, method)
            if enc is None:
                enc = SegmentedEncode(settings=settings, fps=fps, height=height, width=width,
                                      mux_options=mux_options, tags=ColourTags.of(frame))
            elif (mismatch := colour_mismatch(enc.tags, frame)) is not None:
                raise RoboreelError(f"{mismatch} ({where}, episode {episode}, frame {n})")
            reference = floor_reference(source, frame)
            if n in for_stats:
                rgb.append(downsample(reference.transpose(2, 0, 1)))
            enc.feed(n, frame, reference)
            n += 1
            if progress is not None:
                progress(1)
        if enc is None or n != length:
            raise RoboreelError(f"encoder got {n} frames for an episode of {length} ({where}, episode {episode})")
        data, scores, segments = enc.finish()
        height, width = enc.height, enc.width
        enc = None
    except av.error.FFmpegError as e:
        refused = x265_refusal(enc.tags if enc is not None else None)
        raise RoboreelError(f"{refused or f'HEVC encode failed: {e}'} ({where}, episode {episode})") from e
    except ColourNotCarried as e:
        raise RoboreelError(f"{e} ({where}, episode {episode})") from e
    finally:
        if enc is not None:
            enc.close()
    if len(scores) != length or min(scores.values(), default=math.inf) < settings.min_psnr:
        raise RoboreelError(f"the encoder's {length} frames checked as {len(scores)}, lowest "
                            f"{min(scores.values(), default=math.inf):.2f} dB ({where}, episode {episode})")
    return Segmented(data, scores, segments, np.stack(rgb) if rgb else None, height, width)
