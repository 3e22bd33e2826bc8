"""Keep the C heap flat over hundreds of epochs: a fixed mmap threshold for glibc malloc.

Each pooled episode brings clip bytes, parquet buffers and decoded frames: allocations of hundreds of KB to
several MB, made and freed all epoch long. glibc serves a request above ``M_MMAP_THRESHOLD`` (128 KiB at start)
with its own mmap and returns it to the system on free, but it *raises* the threshold to the size of every such
block freed (up to 32 MiB), so soon those buffers come from the heap arenas instead, where blocks of ever-changing
sizes fragment them and RSS creeps up epoch after epoch. Measured with ``roboreel bench --soak``: each DataLoader
worker grew ~13 MB per epoch (491 -> 713 MB over 16 epochs); with the threshold pinned it stays flat
(docs/reliability.md). Setting the threshold with ``mallopt`` turns that dynamic adjustment off, as
``MALLOC_MMAP_THRESHOLD_`` would (glibc's mallopt(3)).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial default: large buffers go straight to mmap and back

_done_in: int | None = None


def pin_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold in this process (once per process; a forked worker does it again, since
    fork copies the parent's flag but the call is cheap). False where there is no glibc (macOS, musl)."""
    global _done_in
    if _done_in == os.getpid():
        return True
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):  # the user chose one: respect it
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, int(nbytes)))
    if ok:
        _done_in = os.getpid()
    return ok


def release_free_memory() -> None:
    """At the end of a consumer's epoch: collect cycles, give pyarrow's pool and glibc's free pages back to the
    system (``malloc_trim(0)`` also releases whole free pages inside the arenas, not only the top). A few ms
    once per epoch per worker; what is left of a long run's slow creep after the pinned threshold."""
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
