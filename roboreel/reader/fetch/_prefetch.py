"""Run an iterator in a background thread, a bounded number of items ahead, so fetching overlaps decoding.

Used for shard records: network reads and parquet parsing happen while the consumer decodes (torchcodec and
aiohttp release the GIL), and for ``roboreel.loader``'s decode stage. Errors cross to the consumer; closing stops
the thread promptly when the consumer stops early (end of a resumed run, an exception, a DataLoader shutting its
workers down), and at interpreter exit every thread still running is stopped first (``_close_live``).
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from queue import Empty, Full, Queue
from typing import Any

_LIVE: weakref.WeakSet[Prefetcher] = weakref.WeakSet()


def _close_live() -> None:
    """Stop every prefetch thread still running, at interpreter exit, while threads still run normally.

    Why: a training loop that breaks out of an epoch and lets the script end leaves these daemon threads mid-work.
    Once the interpreter finalizes, a daemon thread that asks for the GIL is made to exit (``pthread_exit``, Python
    < 3.14); inside torch's C++ frames (a tensor freed as the thread's generator unwinds) that forced unwind ends
    in ``std::terminate``: ``terminate called without an active exception`` and exit 134 after the script's work
    is done, in most runs. atexit handlers run before that point, so a thread closed here finishes in Python.
    """
    for prefetcher in list(_LIVE):
        prefetcher.close()


atexit.register(_close_live)


class Prefetcher:
    """Runs an iterator in a background thread, ``depth`` items ahead, so fetching overlaps decoding.

    Errors are re-raised in the consumer; ``close()`` stops the thread promptly (the consumer may stop early).
    """

    _END = object()

    def __init__(self, make: Callable[[], Iterator[Any]], depth: int, *, name: str = "roboreel-prefetch") -> None:
        self._queue: Queue = Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._make = make
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        _LIVE.add(self)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def _run(self) -> None:
        it = None
        try:
            it = self._make()
            for item in it:
                if not self._put(item):
                    return
            self._put(self._END)
        except BaseException as e:  # noqa: BLE001 - forwarded to the consumer, which re-raises it
            self._put(_Failure(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        while True:
            try:
                item = self._queue.get(timeout=0.5)
                break
            except Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("prefetch thread died without a result") from None
        self.wait_seconds += time.perf_counter() - t0
        if item is self._END:
            self._stop.set()
            raise StopIteration
        if isinstance(item, _Failure):
            self._stop.set()
            raise item.error
        return item

    def close(self) -> None:
        _LIVE.discard(self)
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except Empty:
                break
        self._thread.join(timeout=5)


@dataclass
class _Failure:
    error: BaseException
