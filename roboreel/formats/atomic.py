"""Crash-safe local writes: a temp name in the same directory, fsync, then rename over the final name.

A reader (or a resumed compile) therefore sees either nothing or a complete file under a final name; temp files
are hidden and recognisable (``.<name>.<unique>.tmp``) so a rerun can remove what a killed writer left.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


def temp_name(path: str) -> str:
    """``dir/.name.<unique>.tmp``: hidden, unique per writer."""
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")


def fsync_dir(path: str) -> None:
    """fsync the directory holding ``path``, so a rename into it survives a power cut (POSIX keeps the new
    name in the directory's own blocks; the file's fsync alone does not persist it)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp: str, path: str) -> None:
    """``os.replace(tmp, path)``, then fsync of the directory."""
    os.replace(tmp, path)
    fsync_dir(path)


@contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open ``path`` for writing under a temp name; on success fsync + rename, on any error remove the temp."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        replace_durably(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path) as f:
        f.write(data)
