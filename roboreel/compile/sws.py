"""Pixel conversions through swscale contexts kept per thread and per use, on the calling thread only.

Why: ``frame.reformat(...)`` and ``frame.to_ndarray(format=...)`` build a new swscale context for every call,
and PyAV 18 converts on as many threads as there are CPUs unless told otherwise. Measured on PyAV 18.1,
2026-11-28, 2-core x86_64 host, no GPU, ALOHA 480x640 frames, the same bytes either way (tests/test_compile_sws.py):
480x640 -> 224x224 bilinear yuv420p 0.25 ms of CPU a frame through a reused context against 1.35 ms built anew
(``--resize`` compiles 12-20% faster); the floor check's yuv420p -> rgb24 0.31-0.36 ms of the converting thread
inside a compile against 1.4 ms through one context shared by the references and the decoded frames (rebuilt at
every switch) on swscale's threads, though most of that was waiting while other cores converted, so the compile's
CPU fell only 2-4%. One context serves one kind of conversion (``use``).
"""

from __future__ import annotations

import threading
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
    """``frame.to_ndarray(format="rgb24")`` through this thread's context for ``use``."""
    return reformat(frame, use, format="rgb24").to_ndarray()
