"""Pixel conversions through swscale contexts kept per thread and per use, on the calling thread only.

Why: ``frame.reformat(...)`` and ``frame.to_ndarray(format=...)`` build a new swscale context for every call,
and PyAV 18 converts on as many threads as there are CPUs unless told otherwise. In a compile every core is
already busy with x265, so a 480x640 conversion cost 1.0-1.4 ms of wall time inside a 2-worker compile; through a
reused context on one thread it costs 0.2-0.35 ms, with the same bytes (tested: tests/test_compile_sws.py).
Measured on PyAV 18.1, 2026-11-28, 2-core x86_64 host, no GPU, ALOHA 480x640 frames: yuv420p -> rgb24 0.2 ms
against 1.0 ms alternating one context between two streams of frames; 480x640 -> 224x224 bilinear yuv420p 0.25
ms against 1.35 ms of CPU per frame. One context serves one kind of conversion (``use``): a context shared by
two differing conversions would be rebuilt at every switch.
"""

from __future__ import annotations

import threading
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

_local = threading.local()


def reformat(frame: av.VideoFrame, use: str, **options: Any) -> av.VideoFrame:
    """``frame.reformat(**options)`` (the same pixels) through this thread's context for ``use``."""
    contexts: dict[str, VideoReformatter] | None = getattr(_local, "contexts", None)
    if contexts is None:
        contexts = _local.contexts = {}
    reformatter = contexts.get(use)
    if reformatter is None:
        reformatter = contexts[use] = VideoReformatter()
    return reformatter.reformat(frame, threads=1, **options)


def to_rgb24(frame: av.VideoFrame, use: str) -> np.ndarray:
    """``frame.to_ndarray(format="rgb24")`` through this thread's context for ``use``."""
    return reformat(frame, use, format="rgb24").to_ndarray()
