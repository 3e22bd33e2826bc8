"""Never finalise the parent's garbage inside a forked DataLoader worker.

A forked child inherits the parent's heap, including objects that are garbage but not yet collected. When the
child's cyclic GC finalises one that wraps native threads (a PyAV/x265 encoder, seen in this project's test
suite), the finaliser waits on a condition variable whose threads do not exist in the child and hangs forever
(``x265_encoder_close`` -> ``pthread_cond_destroy``). Freezing the inherited heap once, first thing in the worker,
moves it to the GC's permanent generation: the child then only ever collects what it allocated itself (a side
benefit: fewer copy-on-write page faults, the reason ``gc.freeze`` exists).
"""

from __future__ import annotations

import gc
import os

from torch.utils.data import get_worker_info

_frozen_in: int | None = None


def isolate_inherited_heap() -> None:
    """In a DataLoader worker process, ``gc.freeze()`` what was inherited (once per process); else nothing."""
    global _frozen_in
    pid = os.getpid()
    if _frozen_in == pid:
        return
    _frozen_in = pid
    if get_worker_info() is not None:
        gc.freeze()
