"""One episode x camera -> one mp4 clip whose frame k is episode frame k, pts from 0.

Two paths:
- encode: decoded source frames go straight to libx265 (yuv420p, no RGB round trip; reformatted only to resize
  or convert pixel formats), closed GOPs of ``gop`` frames, ``hvc1`` tag, frame k gets pts k in 1/fps.
  The clip carries the source's colour tags (range, matrix, primaries, transfer: sws.ColourTags) in its VUI,
  its samples unconverted, so a reader's decode turns it into the RGB LeRobot's decode makes of the source.
- remux: an HEVC/H.264 yuv420p source span that starts on a keyframe, is closed in decode order and has no
  keyframe interval over ``remux_max_gop`` (_copypolicy.py) is stream-copied with timestamps rebased to 0, then
  proven pixel-identical to the source decode (else re-encoded).

A resized (``size``, compile/video/_resize.py) or resampled (``step``, compile/source/_resample.py) span is always encoded.

Every clip is decoded once after writing: it must hold exactly ``length`` frames at pts k/fps, in order.
PSNR is measured in RGB, what a sample holds: the clip's frame converted to rgb24 against the encoder's input
(the source decode, resized when resizing) converted alike, over the three channels, on every frame, in the
encode's own pass: the encoder's packets are decoded as they come out (``InFlightCheck``), so a reference is
held only while its frame is inside x265 (its lookahead), and nothing is decoded twice. (Measured over the
yuv420p planes instead, as ffmpeg's psnr filter reports "average", a 120x160 camera read 42.3 dB where its RGB
frames, against LeRobotDataset's, went down to 36.9 dB.) For an 8-bit 4:2:0 source the reference is exactly what
LeRobot returns; for 10/12-bit or 4:4:4 sources the conversion to 8-bit 4:2:0 stays outside the floor: FFmpeg
builds convert those differently (PyAV's and torchcodec's rgb24 of one 10-bit frame differ by 43.8 dB with no
codec at all). A frame under ``min_psnr`` (40 dB) re-encodes the clip from that frame's GOP on at a lower CRF
(_segments.py: the GOPs before keep their packets), down to CRF - 12, then the whole clip with x265 ``lossless=1``:
every frame equal to its input, so content no CRF holds costs bytes, not a failed compile (``encode_with_floor``).
Depth cameras never come here (_depth.py).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import islice
from typing import Literal

import av
import numpy as np

from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import SourceVideo, SpanPackets, kept_length, read_ahead
from roboreel.compile.tables import downsample
from roboreel.compile.video._clipproof import check_clip_timing, decode_clip, frame_digest
from roboreel.compile.video._copypolicy import codec_refusal, gop_refusal, grid_refusal
from roboreel.compile.video._floorcheck import (
    CRF_RANGE,
    BelowFloor,
    ColourNotCarried,
    InFlightCheck,
    colour_mismatch,
    floor_reference,
    next_crf,
    unheld_colour,
    x265_refusal,
)
from roboreel.compile.video._resize import resize_frame
from roboreel.compile.video._segments import SegmentsUnavailable, encode_segmented
from roboreel.compile.video._sws import ColourTags, to_yuv420p
from roboreel.compile.video._target import EncodeTarget
from roboreel.formats.errors import RoboreelError, SourceError

_MUX_OPTIONS = {"fflags": "+bitexact"}  # no muxer version string: same bytes from any FFmpeg build that encodes alike
_CODEC_TAGS = {"hevc": "hvc1", "h264": "avc1"}


@dataclass
class Clip:
    """A compiled clip and what the record json / manifest say about it."""

    data: bytes
    codec: str
    height: int
    width: int
    frames: int
    gop: int | None
    bframes: int | None
    mode: Literal["encode", "remux"]
    psnr: list[float] = field(default_factory=list)  # sampled frames; inf where identical
    pix_fmt: str = "yuv420p"
    lossless: bool = False  # every frame proven identical to the source decode (stream copy, lossless encode)
    why: str = ""  # why this mode: what made a stream copy impossible, or what a re-encode at a lower CRF fixed
    crf: int | None = None  # the CRF a re-encode used (the settings' own, or lower to reach the PSNR floor)
    psnr_min: float = math.inf  # lowest PSNR of every frame checked against the floor
    psnr_checked: int = 0  # how many frames that was
    stats_rgb: np.ndarray | None = None  # [N, 3, h, w] uint8: the stats frames (encode_clip), when asked for
    crf_segments: list[list[int]] | None = None  # [[first frame, CRF], ...] where the floor lowered it mid-clip

    def spec(self) -> dict:
        """The per-camera entry of the episode record json."""
        return {
            "codec": self.codec, "frames": self.frames, "height": self.height, "width": self.width,
            "gop": self.gop, "bframes": self.bframes, "pix_fmt": self.pix_fmt, "lossless": self.lossless,
        }


def sample_indices(length: int, n: int) -> list[int]:
    """``n`` evenly spaced frame indices in [0, length), first and last included."""
    if n <= 0 or length <= 0:
        return []
    if n == 1 or length == 1:
        return [0]
    return sorted({round(i * (length - 1) / (n - 1)) for i in range(n)})


def encoder_input(frame: av.VideoFrame, height: int, width: int, method: str) -> av.VideoFrame:
    """What x265 is given for a source frame: resized with ``method`` (_resize.py) or only converted to yuv420p,
    either way in the source's own range and matrix, tagged with them (yuvj420p: the same bytes, full range;
    sws.to_yuv420p)."""
    if (frame.height, frame.width) != (height, width):
        return resize_frame(frame, height, width, method)
    if frame.format.name != "yuv420p":  # a pixel format conversion only
        return to_yuv420p(frame, "encoder-input", interpolation="AREA")
    return frame


def encode_clip(
    frames: Iterator[av.VideoFrame], target: EncodeTarget, *, length: int, fps: int,
    progress: Callable[[int], None] | None = None, lossless: bool = False, give_up_below: float | None = None,
) -> Clip:
    """Encode exactly ``length`` frames (the clip's, at ``fps``) to an HEVC mp4 clip (see module doc);
    ``progress(1)`` after each frame. ``lossless``: x265 ``lossless=1`` instead of the target's CRF (the floor's
    last rung, ``encode_with_floor``).

    ``Clip.psnr`` holds the ``psnr_frames`` evenly spaced frames the compile report averages; ``Clip.psnr_min``
    the lowest PSNR of every frame checked (all of them while ``min_psnr`` is on; ``InFlightCheck``). The
    target's ``size`` / ``method``: resize (_resize.py); its stats frames' encoder input is kept as downsampled RGB
    for the camera's stats (tables/_stats.py), in ``Clip.stats_rgb``. ``give_up_below``: raise BelowFloor as
    soon as a checked frame comes back under it (the floor's try at this CRF has failed: encoding the rest of the
    episode would be wasted).

    Longer than most functions here (~85 lines): the stream is opened on the first frame (its size and colour tags
    come from it), and the frame loop, the flush and the error translation share that one open container."""
    settings, where, episode, size, method = target.settings, target.where, target.episode, target.size, target.method
    stats_frames = target.stats_frames(length)
    buf = io.BytesIO()
    tb = Fraction(1, fps)
    want = set(sample_indices(length, settings.psnr_frames))
    every = settings.min_psnr > 0
    check: InFlightCheck | None = None
    tags: ColourTags | None = None
    for_stats = set(stats_frames)
    rgb: list[np.ndarray] = []
    out = av.open(buf, "w", format="mp4", container_options=_MUX_OPTIONS)
    stream = None
    n = 0
    try:
        for frame in frames:
            if stream is None:
                height, width = size or (frame.height, frame.width)
                try:
                    params = settings.x265_params(height=height, width=width) + (":lossless=1" if lossless else "")
                except ValueError as e:
                    raise RoboreelError(f"{e} ({where}, episode {episode})") from e
            source, frame = frame, encoder_input(frame, height, width, method)
            if stream is None:
                stream = out.add_stream("libx265", rate=fps)
                stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
                stream.time_base = tb
                stream.codec_tag = "hvc1"
                tags = ColourTags.of(frame)  # the source's colour description, carried in the clip's VUI
                tags.set_on(stream.codec_context)
                stream.options = {"preset": settings.preset, "x265-params": params,
                                  **({} if lossless else {"crf": str(settings.crf)})}
                check = InFlightCheck(stream.codec_context, tags)
            elif (mismatch := colour_mismatch(tags, frame)) is not None:
                raise RoboreelError(f"{mismatch} ({where}, episode {episode}, frame {n})")
            reference = floor_reference(source, frame) if every or n in want or n in for_stats else None
            check.put(n, reference if every or n in want else None)
            if n in for_stats:
                rgb.append(downsample(reference.transpose(2, 0, 1)))
            frame.pts, frame.time_base = n, tb
            frame.pict_type = av.video.frame.PictureType.NONE  # a source keyframe must not force one here
            for packet in stream.encode(frame):
                check.packet(packet)
                out.mux(packet)
            n += 1
            if progress is not None:
                progress(1)
            if give_up_below is not None and check.worst < give_up_below:
                raise BelowFloor(check.worst, n)
        if stream is None or check is None or n != length:
            raise RoboreelError(f"encoder got {n} frames for an episode of {length} ({where}, episode {episode})")
        for packet in stream.encode(None):
            check.packet(packet)
            out.mux(packet)
        check.packet(None)
    except av.error.FFmpegError as e:
        raise RoboreelError(f"{x265_refusal(tags) or f'HEVC encode failed: {e}'} ({where}, episode {episode})") from e
    except ColourNotCarried as e:
        raise RoboreelError(f"{e} ({where}, episode {episode})") from e
    finally:
        out.close()
    data = buf.getvalue()
    check_clip_timing(data, length=length, fps=fps, where=where, episode=episode)  # decoded in flight already
    scores = check.scores
    if check.pending or len(scores) != (length if every else len(want)):
        raise RoboreelError(f"the encoder's {length} frames decoded back as {len(scores)} checked, "
                            f"{len(check.pending)} missing ({where}, episode {episode})")
    return Clip(
        data=data, codec="hevc", height=height, width=width, frames=length, gop=settings.gop,
        bframes=settings.bframes, mode="encode", psnr=[scores[k] for k in sorted(want)],
        crf=None if lossless else settings.crf,
        psnr_min=min(scores.values(), default=math.inf), psnr_checked=len(scores),
        stats_rgb=np.stack(rgb) if rgb else None,
    )


def remux_clip(video: SourceVideo, packets: SpanPackets) -> bytes:
    """Stream-copy a closed span's packets into an mp4 whose first frame has pts 0."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4", container_options=_MUX_OPTIONS) as out:
        stream = out.add_stream_from_template(video.stream, opaque=True)  # no encoder needed for a copy
        stream.codec_tag = _CODEC_TAGS[video.codec]
        first = packets.first_pts or 0
        for p in packets.packets:
            p.pts -= first
            if p.dts is not None:
                p.dts -= first
            p.stream = stream
            out.mux(p)
    return buf.getvalue()


def encode_with_floor(
    video: SourceVideo, target: EncodeTarget, *, from_s: float, length: int, why: str,
    progress: Callable[[int], None] | None = None,
) -> Clip:
    """Re-encode the span, at lower CRFs while a checked frame is under ``min_psnr``, then x265 lossless (frames
    equal to the encoder's input, so never under: content no CRF holds costs bytes, never a failed compile or a
    frame under the floor); raise only if that does not decode to its input.

    ``length`` source frames are decoded from ``from_s``; with the target's ``step`` k only frames 0, k, 2k, ...
    are kept and the clip runs at ``video.fps / k``.

    With the floor on, the clip is first encoded GOP by GOP (_segments.py): a frame under the floor re-encodes
    from its GOP on, at a lower CRF. Only where that cannot be done (B-frames, x265 writing other parameter sets,
    no CRF left) is the whole clip re-encoded, from the CRF the GOP-by-GOP encode reached."""
    settings, episode, size, step = target.settings, target.episode, target.size, target.step
    kept = kept_length(length, step)
    h, w = size or (video.stream.height, video.stream.width)
    if h % 2 or w % 2:  # compile's up-front check (plan.py) trusts info.json's codec: a copy fell back to this
        raise SourceError(f"the camera is {w}x{h}: odd sides, which an 8-bit 4:2:0 clip cannot hold, and the span "
                          f"cannot be stream-copied ({why}); pass --resize HxW", file=video.rel, episode=episode)
    crf: int | None = settings.crf
    ticked = 0
    if settings.min_psnr > 0:
        def tick(k: int) -> None:
            nonlocal ticked
            ticked += k
            if progress is not None:
                progress(k)

        try:
            return _encode_by_gop(video, target, from_s=from_s, length=length, why=why, progress=tick)
        except SegmentsUnavailable as e:
            crf = e.crf
            why = f"{why}; {e.reason}" if e.reason else why
            if ticked and progress is not None:
                progress(kept - ticked)  # the bar counts each frame of the clip once
    clip = None
    for attempt in range(CRF_RANGE + 2):  # at most every CRF of the range, then lossless
        # decode on a thread, ahead of x265; with a step, every source frame is decoded and every k-th kept
        frames = read_ahead(islice(video.frames(from_s, length, episode=episode), 0, None, step))
        try:
            # a try at a CRF stops at its first frame under the floor: only the try that holds runs to the end
            clip = encode_clip(frames, target if crf is None else target.at_crf(crf), length=kept,
                               fps=video.fps // step, progress=progress if attempt == 0 and not ticked else None,
                               lossless=crf is None,
                               give_up_below=settings.min_psnr if crf is not None and settings.min_psnr > 0
                               else None)
        except BelowFloor as low:
            if attempt == 0 and not ticked and progress is not None:
                progress(kept - low.frames)  # the bar counts each frame of the clip once
            crf = next_crf(settings, crf, low.worst)
            continue
        finally:
            frames.close()  # joins the decode thread before anyone touches `video` again
        if clip.psnr_min >= settings.min_psnr:
            clip.why = _why_kept(why, crf, settings)
            return clip
        if crf is None:
            break
        crf = next_crf(settings, crf, clip.psnr_min)
    raise _floor_failed(video, target, clip)


def _why_kept(why: str, crf: int | None, settings: CompileSettings) -> str:
    """``why`` the span was encoded, and the CRF (or lossless encode) the floor took, where not the setting's."""
    if crf is None:
        return f"{why}; x265 lossless: no CRF kept every checked frame >= {settings.min_psnr:g} dB"
    if crf != settings.crf:
        return f"{why}; CRF {crf} (not {settings.crf}) to keep every checked frame >= {settings.min_psnr:g} dB"
    return why


def _floor_failed(video: SourceVideo, target: EncodeTarget, clip: Clip | None) -> RoboreelError:
    """Why even the lossless encode (``clip``, the last try) did not hold the floor."""
    where, episode, min_psnr = target.where, target.episode, target.settings.min_psnr
    if clip is None:  # cannot happen: the last try is lossless, never given up
        return RoboreelError(f"no encode of the span finished ({where}, episode {episode})")
    if target.size is None and (unheld := unheld_colour(video.ctx.format, clip.psnr_min, min_psnr)):
        return RoboreelError(f"{unheld} ({where}, episode {episode}); --min-psnr {math.floor(clip.psnr_min)} "
                             "accepts that loss")
    return RoboreelError(
        f"the x265 lossless encode reads back at {clip.psnr_min:.2f} dB PSNR, not equal to its input ({where}, "
        f"episode {episode})"
    )


def _encode_by_gop(
    video: SourceVideo, target: EncodeTarget, *, from_s: float, length: int, why: str,
    progress: Callable[[int], None],
) -> Clip:
    """The span encoded under the floor GOP by GOP (_segments.py); SegmentsUnavailable where it cannot be."""
    settings, episode, where, step = target.settings, target.episode, target.where, target.step
    kept, fps = kept_length(length, step), video.fps // step
    frames = read_ahead(islice(video.frames(from_s, length, episode=episode), 0, None, step))
    try:
        clip = encode_segmented(frames, target, length=kept, fps=fps, progress=progress, to_input=encoder_input,
                                mux_options=_MUX_OPTIONS)
    finally:
        frames.close()  # joins the decode thread before anyone touches `video` again
    check_clip_timing(clip.data, length=kept, fps=fps, where=where, episode=episode)  # decoded in flight already
    lowest = min(c for _, c in clip.segments)
    if lowest != settings.crf:  # from a GOP on, or from frame 0 when the first GOP was under the floor
        first = next(start for start, c in clip.segments if c != settings.crf)
        why = f"{why}; CRF {lowest} (not {settings.crf}) from frame {first} to keep every checked frame >= " \
            f"{settings.min_psnr:g} dB"
    return Clip(
        data=clip.data, codec="hevc", height=clip.height, width=clip.width, frames=kept, gop=settings.gop,
        bframes=settings.bframes, mode="encode", why=why, crf=lowest,
        psnr=[clip.scores[k] for k in sample_indices(kept, settings.psnr_frames)],
        psnr_min=min(clip.scores.values()), psnr_checked=len(clip.scores), stats_rgb=clip.stats_rgb,
        crf_segments=[list(s) for s in clip.segments] if len(clip.segments) > 1 else None,
    )


def transcode_span(
    video: SourceVideo, target: EncodeTarget, *, from_s: float, length: int,
    progress: Callable[[int], None] | None = None,
) -> Clip:
    """The clip of one episode x camera: stream copy when allowed (no resize, no step) and proven exact, else
    HEVC encode to ``target`` (its ``stats``: keep the frames LeRobot samples for image stats, ``Clip.stats_rgb``,
    either way). ``Clip.why`` says why a span was re-encoded.

    ``length`` source frames are decoded from ``from_s``; the target's ``step``, ``size`` / ``method``: see
    ``encode_with_floor``."""
    settings, episode, where, size, step = target.settings, target.episode, target.where, target.size, target.step
    fps = video.fps
    why = codec_refusal(video.codec, video.ctx.pix_fmt, settings)
    if why is None and (step != 1 or size is not None):
        why = "resized or resampled (--resize / --fps)"
    if why is None and not video.keep_packets:
        why = "source packets not kept"
    if why is None:
        packets = SpanPackets(packets=[])
        want = set(target.stats_frames(length))
        source_digests, rgb = [], []
        for k, f in enumerate(video.frames(from_s, length, episode=episode, packets=packets)):
            source_digests.append(frame_digest(f))
            if k in want:  # a copied camera of a transforming compile still gets its stats (tables/_stats.py)
                rgb.append(downsample(f.to_ndarray(format="rgb24").transpose(2, 0, 1)))
        if not packets.closed:
            why = "the span is not a closed run of packets starting on a keyframe"
        elif (why := gop_refusal(packets.packets, settings)
                      or grid_refusal(packets.packets, video.time_base, video.fps)) is None:
            data = remux_clip(video, packets)
            clip_digests = decode_clip(data, length=length, fps=fps, digest=frame_digest, where=where,
                                       episode=episode)
            if clip_digests == source_digests:
                n = len(sample_indices(length, settings.psnr_frames))
                return Clip(
                    data=data, codec=video.codec, height=video.stream.height, width=video.stream.width,
                    frames=length, gop=None, bframes=None, mode="remux", psnr=[math.inf] * n, lossless=True,
                    stats_rgb=np.stack(rgb) if rgb else None,
                )
            why = "the stream copy does not decode to the source's pixels"
    return encode_with_floor(video, target, from_s=from_s, length=length, why=why, progress=progress)
