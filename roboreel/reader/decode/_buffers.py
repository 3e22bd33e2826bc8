"""Batch buffers the decode stage reuses once the training loop has let go of them.

Why: a 480x640 uint8 batch of 16 frames is 14.7 MB. Allocated fresh for every batch it comes from its own mmap
(glibc serves anything above the mmap threshold that way), so every one of its pages faults and is zeroed by the
kernel on first write, and is unmapped again when the batch dies: measured with ``perf`` on 480x640 footage, those
faults were ~13% of the training process's CPU, as much as a third of the decode itself. A pool of arrays reused
across batches touches the same pages every time, and allocates nothing in steady state, so it cannot fragment the
heap either.

How reuse is known to be safe: a tensor made with ``torch.from_numpy`` keeps its array alive through its storage
(also through every view or slice of it), so while any batch tensor of an array is alive, the array's reference
count is above what the pool itself holds. The pool hands out an array again only when nothing else refers to it,
so a training loop that keeps a batch (say, in a list) simply gets new arrays. Only the stage thread calls
``take``; the check runs under the GIL.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np
import torch

_NUMPY = {torch.uint8: np.dtype(np.uint8), torch.float32: np.dtype(np.float32)}
_FREE = 2  # references to an idle array: the pool's list, and getrefcount's own argument


class BufferPool:
    """Reusable CPU batch arrays, by shape and dtype; at most ``keep`` arrays kept per shape.

    ``keep`` bounds what the pool pins in memory: the batches in flight (being decoded, queued for the loop, held
    by the loop) are what gets reused, so a handful per shape suffices; arrays beyond it are simply not kept.
    """

    def __init__(self, keep: int = 8) -> None:
        if not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an integer >= 0, got {keep!r}")
        self.keep = keep
        self._arrays: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = defaultdict(list)
        self.reused = 0  # batches served from an array already in the pool

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A CPU tensor of ``shape`` and ``dtype`` (uninitialised) that no one else refers to."""
        np_dtype = _NUMPY[dtype]
        arrays = self._arrays[(tuple(shape), np_dtype)]
        for a in arrays:
            if sys.getrefcount(a) == _FREE + 1:  # + the loop variable
                self.reused += 1
                return torch.from_numpy(a)
        a = np.empty(shape, dtype=np_dtype)
        arrays.append(a)
        if len(arrays) > self.keep:  # full of arrays still in use: keep the newest instead of the oldest still out
            arrays.pop(0)
        return torch.from_numpy(a)
