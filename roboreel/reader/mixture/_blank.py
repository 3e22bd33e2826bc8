"""The frames of a camera a mixture member lacks: one black frame, encoded losslessly, decoded like any clip.

Why a clip and not a zero tensor made on the spot: a sample's cameras travel as frame requests (plan/_requests.py)
and are decoded where the batch is decoded, a DataLoader worker or ``roboreel.loader``'s decode stage in the
training process. A missing camera that is a request like the others goes through both unchanged: same dtype
(uint8 or float32), same shape, window stacking, ``image_transforms``, batch tensors and GPU staging, with no
second code path to keep equal. Black RGB is YUV (16, 128, 128) in limited range, which x265's lossless mode keeps
and every decoder turns back into exactly 0 (tests compare the zeros exactly). ~3 KB at 224x224, decoded once per
batch (or kept, for a windowed camera).
"""

from __future__ import annotations

import io
from fractions import Fraction
from functools import lru_cache

import numpy as np

from roboreel.reader.plan import EpisodeClip, FrameRequest

BLANK_SHARD = "<missing camera>"


@lru_cache(maxsize=8)
def blank_mp4(height: int, width: int) -> bytes:
    """An mp4 of one black ``height`` x ``width`` frame at pts 0 (HEVC, lossless)."""
    import av

    buf = io.BytesIO()
    tb = Fraction(1, 10)
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx265", rate=10)
        stream.width, stream.height, stream.pix_fmt, stream.time_base = width, height, "yuv420p", tb
        stream.options = {"x265-params": "lossless=1:log-level=none"}
        frame = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), np.uint8), format="rgb24")
        frame = frame.reformat(format="yuv420p")
        frame.pts, frame.time_base = 0, tb
        for packet in [*stream.encode(frame), *stream.encode()]:
            packet.dts = packet.pts  # one intra frame; some x265 builds leave its dts unset (garbage)
            out.mux(packet)
    return buf.getvalue()


def blank_clip(camera: str, height: int, width: int) -> EpisodeClip:
    """The clip a missing ``camera`` reads (one per camera, never released: it is needed all epoch)."""
    return EpisodeClip(BLANK_SHARD, 0, camera, blank_mp4(height, width))


def blank_request(clip: EpisodeClip, window: int | None) -> FrameRequest:
    """Frame 0 of ``clip`` once, or ``window`` times (stacked ``[T, C, H, W]`` when ``window > 1``)."""
    n = window or 1
    return FrameRequest(clip, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float64), n > 1)
