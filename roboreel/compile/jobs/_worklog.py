"""Log records of compile's spawned worker processes, shown by the parent as if it had logged them.

A spawned process starts with logging unconfigured, so what a worker logs goes nowhere (INFO, such as a retried
read of a remote source file, formats/transient.py) or to a bare stderr line (warnings), whatever ``-v`` or the
caller's logging setup says. Instead each worker gets the parent's logger levels, so it keeps exactly the records
the parent would, and sends them over a queue; a thread of the parent hands each to the parent's logger of the
same name, whose handlers (the CLI's stderr format, a test's caplog, an application's setup) then treat it like
one of the parent's own. The record keeps the worker's ``process`` and ``processName``.

A thread, not the pool's polling loop, empties the queue: a worker blocked on a full pipe would never finish its
task, and the pool's shutdown waits for running tasks without polling.
"""

from __future__ import annotations

import logging
import logging.handlers
import threading
from typing import Any

_STOP_POLL_S = 0.05
_JOIN_TIMEOUT_S = 5.0


def parent_levels() -> dict[str, int]:
    """The levels set on this process's loggers (``""``: the root), for a worker to filter as the parent does."""
    levels = {"": logging.getLogger().level}
    for name, logger in logging.root.manager.loggerDict.items():
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            levels[name] = logger.level
    return levels


class _Sender(logging.handlers.QueueHandler):
    """QueueHandler for a multiprocessing SimpleQueue (which has ``put`` but no ``put_nowait``)."""

    def enqueue(self, record: logging.LogRecord) -> None:
        self.queue.put(record)


def send_to_parent(queue: Any, levels: dict[str, int]) -> None:
    """In a worker: set the parent's logger levels and send every record they let through to ``queue``.

    QueueHandler.prepare formats the message and drops args and exc_info before sending, so any record
    pickles."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_Sender(queue))
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)


class Relay:
    """In the parent: a queue for workers' records (pass ``queue`` to ``send_to_parent``) and the thread that
    hands them to this process's loggers, from ``__enter__`` until ``__exit__`` has emptied it.

    Exit after the workers have ended (their pool's shutdown), so nothing they logged is left behind."""

    def __init__(self, ctx: Any) -> None:
        self.queue = ctx.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="roboreel-worker-logs", daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # A worker killed mid-write would leave a partial record the thread waits for forever: give up then.
        self._thread.join(_JOIN_TIMEOUT_S)

    def _run(self) -> None:
        while True:
            if not self.queue.empty():
                emit(self.queue.get())
            elif self._stop.is_set():
                return
            else:
                self._stop.wait(_STOP_POLL_S)


def emit(record: logging.LogRecord) -> None:
    """Hand a worker's record to this process's logger of the same name, if that logger is enabled for it."""
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)
