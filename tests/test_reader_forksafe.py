"""A forked DataLoader worker never finalises the parent's garbage (reader/decode/_forksafe.py).

The scenario that hung CI once: an x265 encoder, used and then dropped in a reference cycle in the parent, is
inherited by a forked worker whose GC finalises it; x265's close then waits forever for threads that do not
exist in the child. The DataLoader timeout turns a regression into a failure instead of a hang.
"""

from __future__ import annotations

import gc
import io
from fractions import Fraction

import av
import numpy as np
from torch.utils.data import DataLoader, IterableDataset

from roboreel import CompiledDataset


def _encoder_in_a_cycle() -> None:
    out = av.open(io.BytesIO(), "w", format="mp4")
    stream = out.add_stream("libx265", rate=20)
    stream.width = stream.height = 64
    stream.pix_fmt = "yuv420p"
    stream.options = {"x265-params": "log-level=error"}  # x265's own thread pool: threads that fork drops
    for i in range(3):
        frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
        frame.pts, frame.time_base = i, Fraction(1, 20)
        stream.encode(frame)
    holder: dict = {"stream": stream, "container": out}
    holder["self"] = holder  # garbage only the cyclic GC can free


class _CollectInWorker(IterableDataset):
    """Yields the inner dataset's first samples, forcing a full GC in the worker after the first one."""

    def __init__(self, inner: CompiledDataset) -> None:
        self.inner = inner

    def __iter__(self):
        for i, sample in enumerate(self.inner):
            if i == 0:
                gc.collect()
            yield sample
            if i == 3:
                return


def test_worker_gc_does_not_finalise_an_inherited_encoder(small_compiled):
    gc.disable()  # keep the cycle alive until the fork
    try:
        _encoder_in_a_cycle()
        loader = DataLoader(_CollectInWorker(CompiledDataset(str(small_compiled), seed=0)), batch_size=None,
                            num_workers=1, timeout=60)
        got = [int(s["index"]) for s in loader]
    finally:
        gc.enable()
    assert len(got) == 4
