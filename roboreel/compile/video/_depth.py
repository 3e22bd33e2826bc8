"""A depth camera's clip: the source's 12-bit codes carried without loss, never through 8-bit RGB.

What a depth frame is, is what LeRobot decodes from it: ``to_ndarray(format="gray12le")`` (formats/depth.py).
Two paths, both proven on every frame against exactly that:
- stream copy: an HEVC source span (LeRobot writes lossless HEVC ``gray12le``, g=2) that is closed, starts on a
  keyframe and has no keyframe interval over ``remux_max_gop``; the reader decodes depth with PyAV on the CPU
  (reader/decode/_depth.py), which decodes anything FFmpeg does, so the codec rule is only what the compiled
  format promises (HEVC);
- lossless re-encode: every other source (AV1, H.264, long GOPs, other gray formats) is converted to
  ``gray12le`` as LeRobot's reader converts it, and encoded by x265 with ``lossless=1`` (HEVC Main 12 4:0:0).

A resampled (``--fps``: frames 0, k, 2k, ...) or resized (``--resize``) depth camera is always re-encoded
losslessly; resizing picks source pixels by nearest neighbour (swscale ``POINT`` on ``gray12le``, checked to
copy codes, never average them), so every code in the clip is one the source holds at that place.

A clip whose frames do not decode to the source's codes is refused with an error naming the file and episode:
depth is never stored approximately.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from fractions import Fraction
from itertools import islice

import av
import numpy as np

from roboreel.compile.source import SourceVideo, SpanPackets, kept_length, read_ahead
from roboreel.compile.tables import downsample, stats_sample_indices
from roboreel.compile.video._clipproof import decode_clip
from roboreel.compile.video._copypolicy import gop_refusal, grid_refusal
from roboreel.compile.video._target import EncodeTarget
from roboreel.compile.video._transcode import _MUX_OPTIONS, Clip, remux_clip
from roboreel.formats.depth import DEPTH_PIX_FMT, recorded_values
from roboreel.formats.errors import RoboreelError

DEPTH_REMUX_CODECS = ("hevc",)


def _codes_digest(frame: av.VideoFrame) -> bytes:
    """Digest of the 12-bit codes LeRobot's reader takes from a frame."""
    return hashlib.blake2b(frame.to_ndarray(format=DEPTH_PIX_FMT).tobytes(), digest_size=16).digest()


def _clip_digests(data: bytes, *, length: int, fps: int, where: str, episode: int) -> list[bytes]:
    """Digest of every frame's codes, in one decode that also proves the frame count and pts k/fps."""
    return decode_clip(data, length=length, fps=fps, digest=_codes_digest, where=where, episode=episode)


def encode_depth(frames: Iterator[av.VideoFrame], target: EncodeTarget, *, length: int, fps: int,
                 progress: Callable[[int], None] | None = None,
                 stats_frames: set[int] = frozenset()) -> tuple[bytes, list[bytes], int, int, list[np.ndarray]]:
    """x265 lossless gray12le, closed GOPs of the target's ``gop``; returns (bytes, digests of the encoder's input
    codes, height, width, the codes of ``stats_frames`` downsampled as LeRobot's stats do). The target's ``size``:
    (height, width) to resize to, nearest neighbour."""
    settings, where, episode, size = target.settings, target.where, target.episode, target.size
    kept: list[np.ndarray] = []
    buf = io.BytesIO()
    tb = Fraction(1, fps)
    digests: list[bytes] = []
    out = av.open(buf, "w", format="mp4", container_options=_MUX_OPTIONS)
    stream = None
    try:
        for frame in frames:
            if stream is None:
                stream = out.add_stream("libx265", rate=fps)
                height, width = size or (frame.height, frame.width)
                stream.width, stream.height, stream.pix_fmt = width, height, DEPTH_PIX_FMT
                stream.time_base, stream.codec_tag = tb, "hvc1"
                stream.options = {"preset": settings.preset, "x265-params": ":".join([
                    "lossless=1", f"keyint={settings.gop}", f"min-keyint={settings.gop}", "scenecut=0",
                    "open-gop=0", "bframes=0", "pools=none", "frame-threads=1", "log-level=error"])}
            if frame.format.name != DEPTH_PIX_FMT:
                frame = frame.reformat(format=DEPTH_PIX_FMT)  # the conversion LeRobot's to_ndarray makes
            if (frame.height, frame.width) != (stream.height, stream.width):
                frame = nearest(frame, stream.height, stream.width)
            digests.append(_codes_digest(frame))
            if len(digests) - 1 in stats_frames:
                kept.append(downsample(frame.to_ndarray(format=DEPTH_PIX_FMT)[None]))
            frame.pts, frame.time_base = len(digests) - 1, tb
            frame.pict_type = av.video.frame.PictureType.NONE
            for packet in stream.encode(frame):
                out.mux(packet)
            if progress is not None:
                progress(1)
        if stream is None or len(digests) != length:
            raise RoboreelError(f"encoder got {len(digests)} frames for an episode of {length} ({where}, "
                                f"episode {episode})")
        for packet in stream.encode(None):
            out.mux(packet)
    except av.error.FFmpegError as e:
        raise RoboreelError(f"lossless depth encode failed: {e} ({where}, episode {episode})") from e
    finally:
        out.close()
    return buf.getvalue(), digests, stream.height, stream.width, kept


def _stats(sampled: list[np.ndarray], feature: dict | None) -> np.ndarray | None:
    """The sampled codes as depths in the recorded unit, [N, 1, h, w] float32, for the camera's stats."""
    return np.stack([recorded_values(c, feature) for c in sampled]) if sampled and feature is not None else None


def nearest(frame: av.VideoFrame, height: int, width: int) -> av.VideoFrame:
    """A ``gray12le`` frame resized by nearest neighbour: swscale's point sampler, then checked to hold only codes
    the source frame holds (a filter that averaged would invent depths that were never measured)."""
    out = frame.reformat(width=width, height=height, format=DEPTH_PIX_FMT, interpolation="POINT")
    src, got = frame.to_ndarray(format=DEPTH_PIX_FMT), out.to_ndarray(format=DEPTH_PIX_FMT)
    if not np.isin(got, src).all():
        raise RoboreelError("nearest-neighbour depth resize produced codes the source frame does not hold")
    return out


def transcode_depth(
    video: SourceVideo, target: EncodeTarget, *, from_s: float, length: int,
    progress: Callable[[int], None] | None = None, feature: dict | None = None,
) -> Clip:
    """The depth clip of one episode: stream copy when allowed, else lossless encode; both proven exact (against
    the kept, resized source codes when ``step`` / ``size`` transform it). ``feature``: the camera's feature, given
    when the compile recomputes stats (a transforming compile): ``Clip.stats_rgb`` then holds the sampled frames'
    depths in the recorded unit (what LeRobot's stats are computed on), [N, 1, h, w] float32. The target's
    ``step`` and ``size`` (nearest neighbour) transform it; its method is never used: depth is never filtered."""
    settings, episode, where, size, step = target.settings, target.episode, target.where, target.size, target.step
    fps = video.fps
    why = ""
    if step != 1 or size is not None:
        why = "resized or resampled (--resize / --fps)"
    elif video.codec not in DEPTH_REMUX_CODECS:
        why = f"depth source codec {video.codec} is not HEVC"
    elif not video.keep_packets:
        why = "re-encode asked (--reencode)"
    else:
        packets = SpanPackets(packets=[])
        want = set(stats_sample_indices(length)) if feature is not None else set()
        source, sampled = [], []
        for k, f in enumerate(video.frames(from_s, length, episode=episode, packets=packets)):
            source.append(_codes_digest(f))
            if k in want:  # a copied depth camera of a transforming compile still gets its stats
                sampled.append(downsample(f.to_ndarray(format=DEPTH_PIX_FMT)[None]))
        if not packets.closed:
            why = "the span is not a closed run of packets starting on a keyframe"
        elif (why := gop_refusal(packets.packets, settings)
                      or grid_refusal(packets.packets, video.time_base, video.fps) or "") == "":
            data = remux_clip(video, packets)
            if _clip_digests(data, length=length, fps=fps, where=where, episode=episode) == source:
                return Clip(data=data, codec=video.codec, height=video.stream.height, width=video.stream.width,
                            frames=length, gop=None, bframes=None, mode="remux", pix_fmt=DEPTH_PIX_FMT,
                            lossless=True, stats_rgb=_stats(sampled, feature))
            why = "the stream copy does not decode to the source's depth codes"
    kept, fps = kept_length(length, step), fps // step
    frames = read_ahead(islice(video.frames(from_s, length, episode=episode), 0, None, step))
    try:
        want = set(stats_sample_indices(kept)) if feature is not None else set()
        data, source, height, width, sampled = encode_depth(frames, target, length=kept, fps=fps, progress=progress,
                                                            stats_frames=want)
    finally:
        frames.close()
    if _clip_digests(data, length=kept, fps=fps, where=where, episode=episode) != source:
        raise RoboreelError(f"the lossless depth encode does not decode to the source's depth codes ({where}, "
                            f"episode {episode}); depth is never stored approximately")
    return Clip(data=data, codec="hevc", height=height, width=width, frames=kept, gop=settings.gop, bframes=0,
                mode="encode", pix_fmt=DEPTH_PIX_FMT, lossless=True, why=why, stats_rgb=_stats(sampled, feature))
