"""Exclusive sections of a compile that several ``--part`` jobs (a SLURM array) may reach at once.

Two places need one writer at a time: an update's transition (update.py) and finalize. Both part jobs of an
array that finish together find every shard done, and both finalize; finalize removes temp files under the
index left by a killed finalize, so without a lock one job removed the temp the other was about to rename.

A POSIX record lock (``fcntl.lockf``) on a file under ``.roboreel-parts/``: the kernel releases it when a job
dies, and NFS honours it. Where a file system has no locks, the jobs go on unserialized, with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator

from roboreel.compile.clips import PARTS_DIR

log = logging.getLogger(__name__)

TRANSITION_LOCK = f"{PARTS_DIR}/update.lock"
FINALIZE_LOCK = f"{PARTS_DIR}/finalize.lock"


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
