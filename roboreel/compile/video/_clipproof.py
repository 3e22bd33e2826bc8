"""Proving a written clip: it holds exactly the episode's frames, at pts k/fps, in order (decoded, or from the
container alone where every packet was decoded already), and, for a stream copy, the source's pixels
(``frame_digest`` of every frame on both sides). Every clip a compile writes passes one of these before it counts.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable

import av

from roboreel.compile.video._copypolicy import GRID_EPS_S
from roboreel.formats.errors import CompiledFormatError


def frame_digest(frame: av.VideoFrame) -> bytes:
    """A decoded frame's pixels in 16 bytes: what proves a stream-copied clip equal to its source, frame by frame."""
    return hashlib.blake2b(frame.to_ndarray().tobytes(), digest_size=16).digest()


def decode_clip(
    data: bytes, *, length: int, fps: int, digest: Callable[[av.VideoFrame], bytes] | None = None, where: str,
    episode: int,
) -> list[bytes]:
    """Decode a compiled clip and prove it holds frames 0..length-1 at pts k/fps, in order; returns ``digest`` of
    every frame (none without one)."""
    sums: list[bytes] = []
    try:
        with av.open(io.BytesIO(data), "r") as c:
            s = c.streams.video[0]
            k = -1
            for k, frame in enumerate(c.decode(s)):
                t = float(frame.pts * s.time_base) if frame.pts is not None else math.nan
                if not abs(t - k / fps) <= GRID_EPS_S:
                    raise CompiledFormatError(f"clip frame {k} has pts {frame.pts} ({t:.6f}s, not {k}/{fps}s)",
                                              file=where, episode=episode)
                if digest is not None:
                    sums.append(digest(frame))
    except av.error.FFmpegError as e:
        raise CompiledFormatError(f"compiled clip does not decode: {e}", file=where, episode=episode) from e
    if k + 1 != length:
        raise CompiledFormatError(f"compiled clip holds {k + 1} frames, the episode {length}", file=where,
                                  episode=episode)
    return sums


def check_clip_timing(data: bytes, *, length: int, fps: int, where: str, episode: int) -> None:
    """Prove, from the container alone (demuxed, not decoded), that a clip holds ``length`` frames at pts k/fps:
    for clips whose every packet was already decoded where they were made (``InFlightCheck``, image clips)."""
    try:
        with av.open(io.BytesIO(data), "r") as c:
            s = c.streams.video[0]
            tb = s.time_base  # read while the container is open
            pts = [p.pts for p in c.demux(s) if p.size]
    except av.error.FFmpegError as e:
        raise CompiledFormatError(f"compiled clip does not demux: {e}", file=where, episode=episode) from e
    if None in pts:
        raise CompiledFormatError("compiled clip has packets without pts", file=where, episode=episode)
    got = sorted(float(p * tb) for p in pts)
    if len(got) != length:
        raise CompiledFormatError(f"compiled clip holds {len(got)} frames, the episode {length}", file=where,
                                  episode=episode)
    off = [k for k, t in enumerate(got) if not abs(t - k / fps) <= GRID_EPS_S]
    if off:
        k = off[0]
        raise CompiledFormatError(f"clip frame {k} has pts {got[k]:.6f}s, not {k}/{fps}s", file=where,
                                  episode=episode)
