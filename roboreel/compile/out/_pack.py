"""Write compiled files crash-safely and deterministically: temp name in the same directory, fsync, rename.

A reader (or a resumed compile) therefore sees either nothing or a complete file under a final name. Shards are
plain USTAR tars written exactly as webdataset's TarWriter writes them (members of a record in sorted order,
named ``<key>.<ext>``), with fixed mtime/owner/mode so the same records give the same bytes. tarfile is used
directly because importing webdataset imports torch, over a second per spawned worker.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import BinaryIO

from roboreel.formats.atomic import TMP_SUFFIX, atomic_open, replace_durably, temp_name
from roboreel.formats.manifest import MemberInfo
from roboreel.formats.shard import EpisodeRecord, sha256_hex

TAR_USER = "roboreel"
TAR_MODE = 0o444
TAR_MTIME = 0.0


def stale_temps(path: str) -> list[str]:
    """Temp files left behind by a killed writer of ``path``."""
    d, base = os.path.split(path)
    return glob.glob(os.path.join(glob.escape(d), f".{glob.escape(base)}.*{TMP_SUFFIX}"))


def remove_stale_temps(path: str) -> int:
    found = stale_temps(path)
    for p in found:
        with suppress(FileNotFoundError):
            os.unlink(p)
    return len(found)


class _HashingWriter:
    """A write-only file wrapper that hashes and counts what passes through (one pass over the bytes)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f: BinaryIO | None = f
        self.size, self.h = 0, hashlib.sha256()

    def write(self, data: bytes) -> int:
        if self.f is None:  # aborted: a half-built tar's finaliser may still write; drop it
            return len(data)
        self.h.update(data)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        if self.f is not None:
            self.f.flush()


@contextmanager
def atomic_file(path: str) -> Iterator[_HashingWriter]:
    """Open ``path`` for writing under a temp name (formats.atomic), hashing what is written."""
    with atomic_open(path) as f:
        yield _HashingWriter(f)


def atomic_write(path: str, data: bytes) -> tuple[int, str]:
    """Write ``data`` to ``path`` atomically; returns (size, sha256 hex)."""
    with atomic_file(path) as w:
        w.write(data)
    return w.size, w.h.hexdigest()


class ShardWriter:
    """Records -> one tar shard under a temp name; ``commit`` fsyncs and renames it into place.

    Use as a context manager: leaving the block without ``commit`` (an error, a kill signal) removes the temp.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = temp_name(path)
        self.size = 0
        self.sha256 = ""
        self._f: BinaryIO | None = None
        self._w: _HashingWriter | None = None
        self._tar: tarfile.TarFile | None = None

    def __enter__(self) -> ShardWriter:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._f = open(self.tmp, "wb")  # noqa: SIM115 (closed in commit / __exit__)
        self._w = _HashingWriter(self._f)
        self._tar = tarfile.open(fileobj=self._w, mode="w|", format=tarfile.USTAR_FORMAT)
        return self

    def add(self, record: EpisodeRecord) -> list[MemberInfo]:
        """Append one episode record; returns its members (name, size, sha256) in tar order."""
        if self._tar is None:
            raise RuntimeError("ShardWriter.add outside its with-block or after commit")
        members = record.to_members()  # sorted by name, as TarWriter sorts a sample's keys
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), TAR_MTIME, TAR_MODE
            info.uname = info.gname = TAR_USER
            self._tar.addfile(info, io.BytesIO(data))
        return [MemberInfo(name=n, size=len(b), sha256=sha256_hex(b)) for n, b in members.items()]

    def commit(self) -> None:
        """Finish the tar and move it to its final name."""
        if self._tar is None or self._f is None or self._w is None:
            raise RuntimeError("ShardWriter.commit outside its with-block or twice")
        self._tar.close()
        self._tar = None
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self._f = None
        self.size, self.sha256 = self._w.size, self._w.h.hexdigest()
        replace_durably(self.tmp, self.path)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._f is None:
            return  # committed
        if self._w is not None:
            self._w.f = None
        self._tar = None
        with suppress(OSError):  # a full disk fails the buffer's flush again: the temp goes anyway
            self._f.close()
        self._f = None
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)
        if exc_type is None:
            raise RuntimeError(f"ShardWriter for {self.path} left without commit()")
