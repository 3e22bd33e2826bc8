"""One episode x camera -> one mp4 clip whose frame k is episode frame k, pts from 0.

Two paths:
- encode: decoded source frames go straight to libx265 (yuv420p, no RGB round trip; reformatted only to resize
  or convert pixel formats), closed GOPs of ``gop`` frames, ``hvc1`` tag, frame k gets pts k in 1/fps.
- remux: an HEVC/H.264 yuv420p source span that starts on a keyframe and is closed in decode order is
  stream-copied with timestamps rebased to 0, then proven pixel-identical to the source decode (else re-encoded).

Every clip is decoded once after writing: it must hold exactly ``length`` frames at pts k/fps, in order.
PSNR is measured on a few evenly spaced frames against the encoder's input (the source decode, resized when
resizing), over all three yuv420p planes, as ffmpeg's psnr filter reports "average".
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import islice
from typing import Literal

import av
import numpy as np

from roboreel.compile.decode import SourceVideo, SpanPackets
from roboreel.compile.overlap import read_ahead
from roboreel.compile.resample import kept_length
from roboreel.compile.resize import FILTER, resize_frame
from roboreel.compile.settings import CompileSettings
from roboreel.compile.stats import downsample
from roboreel.compile.stats import sample_indices as stats_sample_indices
from roboreel.formats.errors import CompiledFormatError, RoboreelError

REMUX_CODECS = ("hevc", "h264")
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
    stats_rgb: np.ndarray | None = None  # [N, 3, h, w] uint8: the stats frames (encode_clip), when asked for

    def spec(self) -> dict:
        """The per-camera entry of the episode record json."""
        return {
            "codec": self.codec, "frames": self.frames, "height": self.height, "width": self.width,
            "gop": self.gop, "bframes": self.bframes,
        }


def sample_indices(length: int, n: int) -> list[int]:
    """``n`` evenly spaced frame indices in [0, length), first and last included."""
    if n <= 0 or length <= 0:
        return []
    if n == 1 or length == 1:
        return [0]
    return sorted({round(i * (length - 1) / (n - 1)) for i in range(n)})


def psnr(ref: np.ndarray, test: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays (inf when identical)."""
    mse = float(np.mean((ref.astype(np.float32) - test.astype(np.float32)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def _frame_digest(frame: av.VideoFrame) -> bytes:
    return hashlib.blake2b(frame.to_ndarray().tobytes(), digest_size=16).digest()


def decode_clip(
    data: bytes, *, length: int, fps: int, keep: Iterable[int] = (), digests: bool = False, where: str, episode: int
) -> tuple[dict[int, np.ndarray], list[bytes]]:
    """Decode a compiled clip and prove it holds frames 0..length-1 at pts k/fps, in order.

    Returns the planes of the ``keep`` frames and, with ``digests``, a digest per frame.
    """
    keep = set(keep)
    kept: dict[int, np.ndarray] = {}
    sums: list[bytes] = []
    try:
        with av.open(io.BytesIO(data), "r") as c:
            s = c.streams.video[0]
            k = -1
            for k, frame in enumerate(c.decode(s)):
                got = round(float(frame.pts * s.time_base) * fps) if frame.pts is not None else None
                if got != k:
                    raise CompiledFormatError(f"clip frame {k} has pts {frame.pts} (frame {got})", file=where,
                                              episode=episode)
                if k in keep:
                    kept[k] = frame.to_ndarray()
                if digests:
                    sums.append(_frame_digest(frame))
    except av.error.FFmpegError as e:
        raise CompiledFormatError(f"compiled clip does not decode: {e}", file=where, episode=episode) from e
    if k + 1 != length:
        raise CompiledFormatError(f"compiled clip holds {k + 1} frames, the episode {length}", file=where,
                                  episode=episode)
    return kept, sums


def encode_clip(
    frames: Iterator[av.VideoFrame], *, length: int, fps: int, settings: CompileSettings, where: str, episode: int,
    progress: Callable[[int], None] | None = None, size: tuple[int, int] | None = None, method: str = FILTER,
    stats_frames: Iterable[int] = (),
) -> Clip:
    """Encode exactly ``length`` frames to an HEVC mp4 clip (see module doc); ``progress(1)`` after each frame.

    ``size``: (height, width) to resize to with ``method`` (compile/resize.py); ``stats_frames``: frames whose
    encoder input is kept as downsampled RGB for the camera's stats (compile/stats.py), in ``Clip.stats_rgb``.
    """
    buf = io.BytesIO()
    tb = Fraction(1, fps)
    want = set(sample_indices(length, settings.psnr_frames))
    refs: dict[int, np.ndarray] = {}
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
                    params = settings.x265_params(height=height, width=width)
                except ValueError as e:
                    raise RoboreelError(f"{e} ({where}, episode {episode})") from e
                stream = out.add_stream("libx265", rate=fps)
                stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
                stream.time_base = tb
                stream.codec_tag = "hvc1"
                stream.options = {
                    "crf": str(settings.crf), "preset": settings.preset,
                    "x265-params": params,
                }
            if (frame.height, frame.width) != (stream.height, stream.width):
                frame = resize_frame(frame, stream.height, stream.width, method)
            elif frame.format.name != "yuv420p":  # a pixel format conversion only (as before --resize filters)
                frame = frame.reformat(format="yuv420p", interpolation="AREA")
            if n in want:
                refs[n] = frame.to_ndarray()
            if n in for_stats:
                rgb.append(downsample(frame.to_ndarray(format="rgb24").transpose(2, 0, 1)))
            frame.pts, frame.time_base = n, tb
            frame.pict_type = av.video.frame.PictureType.NONE  # a source keyframe must not force one here
            for packet in stream.encode(frame):
                out.mux(packet)
            n += 1
            if progress is not None:
                progress(1)
        if stream is None or n != length:
            raise RoboreelError(f"encoder got {n} frames for an episode of {length} ({where}, episode {episode})")
        for packet in stream.encode(None):
            out.mux(packet)
    except av.error.FFmpegError as e:
        raise RoboreelError(f"HEVC encode failed: {e} ({where}, episode {episode})") from e
    finally:
        out.close()
    data = buf.getvalue()
    decoded, _ = decode_clip(data, length=length, fps=fps, keep=want, where=where, episode=episode)
    return Clip(
        data=data, codec="hevc", height=stream.height, width=stream.width, frames=length, gop=settings.gop,
        bframes=settings.bframes, mode="encode", psnr=[psnr(refs[k], decoded[k]) for k in sorted(want)],
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


def can_remux(video: SourceVideo, settings: CompileSettings) -> bool:
    """Stream copy is allowed for 8-bit 4:2:0 HEVC/H.264 sources unless re-encoding is asked (a resized or
    resampled clip is always encoded: ``transcode_span``)."""
    return not settings.reencode and video.codec in REMUX_CODECS and video.ctx.pix_fmt == "yuv420p"


def transcode_span(
    video: SourceVideo, *, from_s: float, length: int, settings: CompileSettings, episode: int, where: str,
    progress: Callable[[int], None] | None = None, size: tuple[int, int] | None = None, method: str = FILTER,
    step: int = 1, stats: bool = False,
) -> Clip:
    """The clip of one episode x camera: stream copy when allowed (no resize, no step) and proven exact, else
    HEVC encode.

    ``length`` source frames are decoded from ``from_s``; with ``step`` k only frames 0, k, 2k, ... are kept
    (compile/resample.py) and the clip runs at ``video.fps / k``. ``size`` / ``method``: resize (resize.py).
    ``stats``: keep the frames LeRobot samples for image stats (``Clip.stats_rgb``; stats.py).
    """
    fps = video.fps
    if step == 1 and size is None and video.keep_packets and can_remux(video, settings):
        packets = SpanPackets(packets=[])
        want = set(stats_sample_indices(length)) if stats else set()
        source_digests, rgb = [], []
        for k, f in enumerate(video.frames(from_s, length, episode=episode, packets=packets)):
            source_digests.append(_frame_digest(f))
            if k in want:  # a copied camera of a transforming compile still gets its stats (stats.py)
                rgb.append(downsample(f.to_ndarray(format="rgb24").transpose(2, 0, 1)))
        if packets.closed:
            data = remux_clip(video, packets)
            _, clip_digests = decode_clip(data, length=length, fps=fps, digests=True, where=where, episode=episode)
            if clip_digests == source_digests:
                n = len(sample_indices(length, settings.psnr_frames))
                return Clip(
                    data=data, codec=video.codec, height=video.stream.height, width=video.stream.width,
                    frames=length, gop=None, bframes=None, mode="remux", psnr=[math.inf] * n,
                    stats_rgb=np.stack(rgb) if rgb else None,
                )
    kept = kept_length(length, step)
    # decode on a thread, ahead of x265; with a step, every source frame is decoded and every k-th kept
    frames = read_ahead(islice(video.frames(from_s, length, episode=episode), 0, None, step))
    try:
        return encode_clip(frames, length=kept, fps=fps // step, settings=settings, where=where, episode=episode,
                           progress=progress, size=size, method=method,
                           stats_frames=stats_sample_indices(kept) if stats else ())
    finally:
        frames.close()  # joins the decode thread before anyone touches `video` again
