"""Keep the C heap flat over hundreds of epochs: a fixed mmap threshold for glibc malloc.

Each pooled episode brings clip bytes, parquet buffers and decoded frames: allocations of hundreds of KB to
several MB, made and freed all epoch long. glibc serves a request above ``M_MMAP_THRESHOLD`` (128 KiB at start)
with its own mmap and returns it to the system on free, but it *raises* the threshold to the size of every such
block freed (up to 32 MiB), so soon those buffers come from the heap arenas instead, where blocks of ever-changing
sizes fragment them and RSS creeps up epoch after epoch. Measured with ``roboreel bench soak``: each DataLoader
worker grew ~13 MB per epoch (491 -> 713 MB over 16 epochs); with the threshold pinned it stays flat
(docs/reliability.md). Setting the threshold with ``mallopt`` turns that dynamic adjustment off, as
``MALLOC_MMAP_THRESHOLD_`` would (glibc's mallopt(3)).

What the threshold cannot fix: a library that leaks a few small blocks on every call. torch 2.13's stable ABI
(which torchcodec 0.13 is built on) leaks a ``std::string`` per ``str`` argument and per ``str`` result of a custom
op (pytorch/pytorch#191340 for arguments), about 0.84 KB per ``VideoDecoder`` opened (heaptrack), and the reader
opens one per pooled clip and lane. Scattered through the main arena, between the blocks freed all epoch, each
leaked block splits a free region and pins its page: RSS grew ~12 KB per decoder opened, not 0.84.
``in_side_arena`` runs the opens on one thread kept for the purpose, so glibc serves them from an arena of their
own. Opening one decoder at a time (benchmarks/decoder_open_close_memory.py, 120 clips opened and decoded 30 times) the leaked
blocks then pack densely: from open 1,920 to 3,360, RSS +21 MB opened on the main thread, +0.1 MB on the side
thread. In the reader, where several decoders of different lifetimes are open at once, the side arena still
fragments, but a worker's growth fell from ~0.35-0.5 to ~0.25 MB per epoch (docs/reliability.md). A worker that
opens no decoder does not grow: idle decoders are kept across epochs (_decoder_cache.py), flat for a small
dataset at ~1.5 MB of RSS per clip kept (224x224): by default only where that buys a flat RSS (_idle_policy.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

M_MMAP_THRESHOLD = -3  # glibc malloc.h
M_TRIM_THRESHOLD = -1
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial default: large buffers go straight to mmap and back
# The process running roboreel.loader's decode pool: torchcodec returns every decoded run of frames in a new
# tensor (a 480x640 frame is 900 KB), and a fresh mmap costs its page faults on first touch. At 4 MiB, runs of
# up to four 480x640 frames reuse heap memory: +15% samples/s on 480x640 ALOHA footage, main-process RSS flat
# over 30 epochs (439-471 MB); 16 MiB was faster (+35%) but its RSS climbed 573 -> 817 MB (docs/reliability.md).
DECODE_MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
# What one decode call of that process may return (decode.ClipDecoders.max_call_bytes): under the threshold, so
# decoded frames land in reused heap memory, not a fresh mapping whose every page faults (four 480x640 frames).
DECODE_CALL_BYTES = DECODE_MMAP_THRESHOLD_BYTES - (256 << 10)
# ... and keeps this much free memory at the top of each malloc arena (one per decode thread) instead of returning
# it after every batch: perf on 480x640 footage showed the refaults (swscale writing into just-trimmed pages) at
# ~5% of the process's CPU. Bounded: at most this much idle per arena.
DECODE_TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024

_done_in: tuple[int, int] | None = None  # (pid, threshold) last set
_side: tuple[int, ThreadPoolExecutor] | None = None  # (pid, its one thread): a forked child makes its own


@functools.cache
def _libc() -> Any:
    """glibc, loaded once per process. ``ctypes.util.find_library`` runs ``ldconfig -p`` in a subprocess and parses
    its output with a regex, ~2 ms of CPU: paid at every epoch end when it ran per call (``trim_heap``).
    Raises OSError where there is no C library to load."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def pin_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES, trim_bytes: int | None = None) -> bool:
    """Pin glibc's mmap threshold in this process at ``nbytes`` (a forked worker does it again, since fork copies
    the parent's flag but the call is cheap), and with ``trim_bytes`` its trim threshold: free memory at the top of
    an arena is kept up to that much instead of being handed back to the kernel, and faulted in again, after every
    batch. False where there is no glibc (macOS, musl), or where the user set ``MALLOC_MMAP_THRESHOLD_``
    (respected)."""
    global _done_in
    if _done_in == (os.getpid(), int(nbytes)):
        return True
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):  # the user chose one: respect it
        return False
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, int(nbytes)))
    if ok and trim_bytes is not None and not os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        mallopt(M_TRIM_THRESHOLD, int(trim_bytes))
    if ok:
        _done_in = (os.getpid(), int(nbytes))
    return ok


def release_free_memory(*, trim: bool = True) -> None:
    """At the end of a consumer's epoch: collect cycles (in a DataLoader worker), give pyarrow's pool and glibc's
    free pages back to the system (``malloc_trim(0)`` also releases whole free pages inside the arenas, not only
    the top; ``trim=False`` leaves that to a caller that trims later anyway). A few ms once per epoch per worker; what is left of a long run's slow creep after the pinned
    threshold. Not ``gc.collect()`` in the training process itself (``num_workers=0``): with torch and a model
    loaded a full collection there took ~140 ms per epoch, and skipping it changed nothing in RSS over 50-60 epochs
    (with and without idle decoders: 0.00 vs -0.01 and 0.45 vs 0.43 MB per epoch, docs/reliability.md).

    Nothing while the interpreter finalizes: a consumer left mid-epoch by a script that ended is closed then, when
    the process's memory is about to go anyway and imports fail ("import of gc halted")."""
    if sys.is_finalizing():
        return
    import gc

    import pyarrow as pa
    from torch.utils.data import get_worker_info

    if get_worker_info() is not None:  # a worker froze its inherited heap (_forksafe.py): a collection is cheap
        gc.collect()
    pa.default_memory_pool().release_unused()
    if trim:
        trim_heap()


def trim_heap() -> bool:
    """``malloc_trim(0)``: give glibc's free pages back to the system, also those inside the arenas (not only each
    arena's top). False where there is no glibc.

    The decode stage of ``roboreel.loader`` calls it when an iteration ends: between epochs its arenas keep the
    free memory of decoded runs and decoder buffers (up to ``DECODE_TRIM_THRESHOLD_BYTES`` at each top, more in
    holes), and the training process crept ~0.7 MB per epoch without it (823 -> 873 MB over 100 epochs), flat with
    it (docs/reliability.md). Milliseconds per epoch, and the pages it returns refault once in the next epoch:
    ~2-5% of an epoch that lasts half a second (ALOHA, 1,200 samples), nothing measurable on epochs of seconds.
    Trimming at most every few seconds instead left a sawtooth of +-100 MB on the soak's 1.3 s epochs."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def in_side_arena(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` on this process's side thread, whose allocations glibc serves from an arena of
    its own (a thread gets its own arena while fewer than ``M_ARENA_MAX`` exist: 8 per core by default, so not
    under ``MALLOC_ARENA_MAX=1``). For calls whose small leaked blocks would otherwise fragment the main arena;
    what they return may be used and freed on any thread. Exceptions are re-raised here. ``fn`` must not call
    ``in_side_arena`` itself (one thread: it would wait on itself)."""
    global _side
    if _side is None or _side[0] != os.getpid():  # first call, or a forked child: the parent's thread is gone
        _side = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="roboreel-side-arena"))
    return _side[1].submit(fn, *args, **kwargs).result()
