"""Run a frame iterator on its own thread, a few items ahead of its consumer: AV1 decode overlaps HEVC encode.

PyAV releases the GIL inside FFmpeg's codec calls (measured: a pure-Python counter thread runs at full speed
while libx265 encodes or libdav1d decodes), so a decoder thread feeding the encoder uses a second core for the
decode instead of serialising it with the encode. The queue is short: frames are large (460 KB at 640x480
yuv420p) and the decoder is 20-25x faster than single-threaded x265 at ``veryfast``, so a few frames of lead are
enough to keep the encoder from ever waiting.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_POLL_S = 0.05


class _End:
    """The producer is done: ``error`` is what it raised, or None at a clean end."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def read_ahead(items: Iterator[T], *, depth: int = 4) -> Iterator[T]:
    """Yield ``items`` in order while a thread computes up to ``depth`` more.

    An exception raised by ``items`` is raised here, at the point the consumer reaches it (same object, so a
    SourceError keeps its file and episode). When the consumer stops early (closes this generator or raises),
    the producer stops within one item and is joined before this generator finishes: ``items`` (e.g. a
    SourceVideo's span generator, which is not thread-safe) is never touched by two threads at once.
    """
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(obj: object) -> bool:
        while not stop.is_set():
            try:
                q.put(obj, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    break
            else:
                put(_End(None))
                return
        except BaseException as e:  # handed to the consumer, raised there
            put(_End(e))
            return
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="roboreel-decode", daemon=True)
    thread.start()
    try:
        while True:
            obj = q.get()
            if isinstance(obj, _End):
                if obj.error is not None:
                    raise obj.error
                return
            yield obj  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
