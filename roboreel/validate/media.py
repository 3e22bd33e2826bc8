"""How many frames an mp4 holds, without trusting more than needed.

Three ways, cheapest first: ``header`` reads the container's frame count (moov/stts: no media bytes read, but a
file cut after its header still claims every frame); ``packets`` demuxes every packet (reads the whole file,
decodes nothing: exact, catches truncation); ``decode`` also decodes every frame (catches corrupt bitstreams).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Literal

import av

CountMode = Literal["header", "packets", "decode"]
COUNT_MODES: tuple[str, ...] = ("header", "packets", "decode")


class VideoProbeError(Exception):
    """The bytes are not a readable video (not a container, no video stream, broken mid-file)."""


@dataclass(frozen=True)
class VideoProbe:
    """What one mp4 holds. ``pts_s`` (presentation times in seconds, sorted) is None in ``header`` mode."""

    codec: str  # canonical codec name: "av1", "hevc", "h264"
    width: int
    height: int
    frames: int
    pts_s: tuple[float, ...] | None = None
    pix_fmt: str | None = None  # the stream's pixel format ("yuv420p", "gray12le", ...), None if unknown
    video_streams: int = 1
    rotation: int | None = None  # the first frame's display rotation (degrees); None in ``header`` mode


def probe_video(source: IO[bytes], *, mode: CountMode = "packets") -> VideoProbe:
    """Count the frames of the first video stream in ``source`` (a binary file object, e.g. BytesIO)."""
    if mode not in COUNT_MODES:
        raise ValueError(f"mode must be one of {COUNT_MODES}, got {mode!r}")
    try:
        with av.open(source, "r") as container:
            if not container.streams.video:
                raise VideoProbeError("no video stream")
            stream = container.streams.video[0]
            ctx = stream.codec_context
            codec, width, height = ctx.codec.canonical_name, ctx.width, ctx.height  # "av1", not "libdav1d"
            pix_fmt = ctx.pix_fmt
            streams = len(container.streams.video)
            if mode == "header" and stream.frames > 0:
                return VideoProbe(codec=codec, width=width, height=height, frames=int(stream.frames),
                                  pix_fmt=pix_fmt, video_streams=streams)
            pts: list[float] = []
            tb = float(stream.time_base) if stream.time_base is not None else 0.0
            rotation: int | None = None
            if mode == "decode":
                stream.thread_type = "AUTO"
                for frame in container.decode(stream):
                    rotation = frame.rotation if rotation is None else rotation
                    pts.append(float(frame.pts) * tb if frame.pts is not None else float("nan"))
            else:
                for packet in container.demux(stream):
                    if packet.size == 0 and packet.pts is None:
                        continue  # the demuxer's end-of-stream flush packet, not a frame
                    pts.append(float(packet.pts) * tb if packet.pts is not None else float("nan"))
                    if rotation is None:  # decode until the first frame: the display rotation is frame side data
                        rotation = _first_rotation(ctx, packet)
                if rotation is None and pts:
                    rotation = _first_rotation(ctx, None)
    except av.FFmpegError as e:
        raise VideoProbeError(str(e)) from e
    pts.sort()
    return VideoProbe(codec=codec, width=width, height=height, frames=len(pts), pts_s=tuple(pts), pix_fmt=pix_fmt,
                      video_streams=streams, rotation=rotation)


def _first_rotation(ctx: av.codec.context.CodecContext, packet: av.Packet | None) -> int | None:
    """The rotation of the first frame ``packet`` completes; 0 once the decoder fails (counting packets does not
    judge the bitstream: ``decode`` mode does)."""
    try:
        return next((f.rotation for f in ctx.decode(packet)), None)
    except av.FFmpegError:
        return 0
