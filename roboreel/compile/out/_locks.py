"""Exclusive sections of a compile that several ``--part`` jobs (a SLURM array) may reach at once.

Two places need one writer at a time: an update's transition (_update.py) and finalize. Both part jobs of an
array that finish together find every shard done, and both finalize; finalize removes temp files under the
index left by a killed finalize, so without a lock one job removed the temp the other was about to rename.

A POSIX record lock (``fcntl.lockf``) on a file under ``.roboreel-parts/``: the kernel releases it when a job
dies, and NFS honours it. Where a file system has no locks, the jobs go on unserialized, with a warning.

A third lock keeps two runs off the same shards (``run_lock``): not a wait, a refusal, since the second run of a
shard has nothing to add to the first.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator, Sequence

from roboreel.compile.out.paths import RUN_LOCK
from roboreel.formats.errors import RoboreelError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def out_lock(out: str, rel: str, what: str) -> Iterator[bool]:
    """Hold the exclusive lock ``OUT/rel`` (waiting for whoever holds it); yields whether it is held. ``what``
    names the section in the warning given where the file system has no locks."""
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX)
        except OSError as e:
            log.warning("%s: no file lock (%s): %s of --part jobs are not serialized", path, e, what)
            yield False
            return
        try:
            yield True
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


_BUSY = (errno.EACCES, errno.EAGAIN)  # lockf's answers when another process holds the range


def _ranges(shards: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, length)`` runs of consecutive shard numbers: byte ``i`` of RUN_LOCK stands for shard ``i``."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(shards)):
        if out and out[-1][0] + out[-1][1] == i:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


@contextlib.contextmanager
def run_lock(out: str, shards: Sequence[int], what: str) -> Iterator[None]:
    """Held while a run writes ``shards`` of OUT: an exclusive record lock on byte ``i`` of RUN_LOCK for each
    shard ``i``, taken without waiting.

    Two runs writing the same shards (a compile started twice, a ``--part`` job resubmitted while the first still
    runs) removed each other's temp files at start-up, both failed, and the one that found OUT new emptied it: the
    second now stops at once, before it touches OUT, naming what to do (RoboreelError). Disjoint ``--part`` jobs
    of one array hold disjoint bytes and run together. The kernel drops the locks of a killed run."""
    path = os.path.join(out, RUN_LOCK)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+b") as f:  # closing it releases every range
        for start, length in _ranges(shards):
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start, os.SEEK_SET)
            except OSError as e:
                if e.errno not in _BUSY:
                    log.warning("%s: no file lock (%s): runs over the same shards are not kept apart", path, e)
                    break
                raise RoboreelError(f"another compile is writing {what} of {out} now: wait for it to end (or stop "
                                    "it), then rerun; nothing was changed") from None
        yield


def ensure_idle(out: str) -> None:
    """Raise RoboreelError if a run holds any shard of OUT (``run_lock``): ``--overwrite`` must not delete the
    files a running compile writes."""
    path = os.path.join(out, RUN_LOCK)
    if not os.path.exists(path):
        return
    with open(path, "a+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0, os.SEEK_SET)  # the whole file and beyond
        except OSError as e:
            if e.errno in _BUSY:
                raise RoboreelError(f"a compile is writing {out} now: --overwrite would delete its files; wait for "
                                    "it to end (or stop it), then rerun") from None
