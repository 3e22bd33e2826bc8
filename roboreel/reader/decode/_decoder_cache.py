"""Keep the decoders of released clips open across epochs, within a byte bound, per process.

Why: torch 2.13's stable ABI leaks ~0.84 KB per torchcodec ``VideoDecoder`` opened (_heap.py), and the reader opens
one per pooled clip and lane every epoch, so a small dataset trained for hundreds of epochs creeps. A decoder
parked here when its clip leaves the pool is taken back, instead of opening a new one, when the same clip (shard,
episode, camera, lane) is pooled again in a later epoch with the same bytes (compared: two datasets may name their
shards alike); a small dataset that fits the bound then opens no decoder once every clip has been seen. A reused
decoder seeks back on its own: the frames are those of a fresh one.

The price is memory: an idle decoder keeps FFmpeg's demuxer and codec state, ~1 MB opened, up to ~1.5 MB at
224x224 and ~4 MB at 480x640 after decoding (``DECODER_BASE_BYTES`` + ``DECODER_FRAME_BYTES`` frames: measured,
docs/reliability.md). Parked decoders are dropped least recently used first beyond ``max_bytes``; one that does
not fit alone is closed, as without the cache. The cache is per process (a DataLoader worker has its own, since
decoders cannot cross processes); a forked child starts empty and never finalises the parent's decoders
(_forksafe.py). A decoder is either in use by one ``ClipDecoders`` or parked here, never both. Which processes
use it, and with what bound, is _idle_policy.py's decision.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

# An idle decoder's RSS, measured with torchcodec 0.13 on HEVC clips (glibc, threshold pinned): 0.8-1.0 MB opened,
# 1.46 MB at 224x224 and 4.0 MB at 640x480 after decoding every frame: ~1 MiB + ~7 frames of yuv420.
DECODER_BASE_BYTES = 1 << 20
DECODER_FRAME_BYTES = 7

IdleKey = tuple[Any, ...]  # (shard, episode, camera, lane, seek_mode): one clip's lane, stream not included


def decoder_bytes(width: int | None, height: int | None) -> int:
    """Estimated RSS of an open decoder of ``width`` x ``height`` frames (see the module doc)."""
    return DECODER_BASE_BYTES + DECODER_FRAME_BYTES * (3 * (width or 0) * (height or 0) // 2)


class IdleDecoders:
    """Decoders of released clips, least recently parked first out beyond ``max_bytes`` (estimated). Thread-safe
    (roboreel.loader's decode threads each park and take their own clips' decoders)."""

    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._idle: OrderedDict[IdleKey, tuple[Any, bytes, int]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: IdleKey, data: bytes) -> Any | None:
        """The decoder parked under ``key`` if it decodes exactly ``data``, now the caller's (None: open one)."""
        with self._lock:
            hit = self._idle.pop(key, None)
            if hit is None:
                return None
            self.nbytes -= hit[2]
        return hit[0] if hit[1] == data else None

    def put(self, key: IdleKey, decoder: Any, data: bytes) -> None:
        """Park ``decoder`` of the clip ``data`` (the caller no longer uses it); drop the oldest beyond the bound."""
        md = decoder.metadata
        nbytes = decoder_bytes(md.width, md.height) + len(data)
        with self._lock:
            old = self._idle.pop(key, None)  # a second copy of one lane (two streams of a clip in one process)
            if old is not None:
                self.nbytes -= old[2]
            if nbytes <= self.max_bytes:
                self._idle[key] = (decoder, data, nbytes)
                self.nbytes += nbytes
                self._shrink()

    def resize(self, max_bytes: int) -> None:
        """Bound the cache at ``max_bytes``, dropping the least recently parked decoders beyond it."""
        with self._lock:
            self.max_bytes = max_bytes
            self._shrink()

    def _shrink(self) -> None:
        while self.nbytes > self.max_bytes:
            _, (_, _, n) = self._idle.popitem(last=False)
            self.nbytes -= n

    def __len__(self) -> int:
        return len(self._idle)


_process: tuple[int, IdleDecoders] | None = None
_inherited: list[IdleDecoders] = []  # a forked child's copy of its parent's cache: kept, never finalised


def process_cache(max_bytes: int) -> IdleDecoders | None:
    """This process's cache, bounded at ``max_bytes``: one per process, shared by its datasets (the latest non-zero
    bound asked applies; keys and bytes keep their clips apart). None for 0: a dataset without the cache leaves
    another's alone."""
    global _process
    if not max_bytes:
        return None
    pid = os.getpid()
    if _process is not None and _process[0] != pid:
        _inherited.append(_process[1])
        _process = None
    if _process is None:
        _process = (pid, IdleDecoders(max_bytes))
    _process[1].resize(max_bytes)
    return _process[1]
