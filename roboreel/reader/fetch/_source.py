"""Streaming shard records from a compiled dataset, local or remote, with retries below the tar layer.

Each shard slice is read front to back as one stream: one GET per shard over HTTP(S) (fsspec's streaming file),
a plain file locally, large read-ahead blocks on other fsspec filesystems. ``RetryingReader`` sits under the tar
parser and hides transient faults: on a timeout, reset, 5xx or a body that ends early it reopens the shard at the
exact byte already delivered (an HTTP Range request) after a backoff, so tar parsing never sees the fault. A
shard that keeps failing without progress raises ShardReadError naming it. Nothing is written to disk.

A slice that starts mid-shard (episode-level splits, resume) opens at the record's byte offset, computed from the
manifest's member sizes (USTAR: a 512-byte header plus data padded to 512) and verified against the first header
read; if it does not match, the slice falls back to reading from the shard's start.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import posixpath
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import fsspec

from roboreel.formats.errors import CompiledFormatError, ShardReadError
from roboreel.formats.manifest import EpisodeEntry, Manifest, MemberInfo
from roboreel.formats.published import replaced
from roboreel.formats.shard import EpisodeRecord, split_member
from roboreel.formats.transient import Retry, Truncated, describe, http_defaults, is_transient
from roboreel.reader.plan import Slice

logger = logging.getLogger(__name__)

BLOCK = 512
_STREAM_BUFFER = 1 << 20
_READAHEAD_BLOCK = 32 << 20


@dataclass
class FetchStats:
    """Counters of one consumer's reading (the prefetch thread writes them, the consumer reads them)."""

    bytes_read: int = 0
    fetch_seconds: float = 0.0
    requests: int = 0
    retries: int = 0
    records: int = 0


class Store:
    """A compiled dataset root on some filesystem; opens shard streams at byte offsets.

    Picklable: the fsspec filesystem is built lazily in each process (DataLoader workers must not share
    the parent's event loop or sockets).
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = str(url)
        self.storage_options = http_defaults(self.url, storage_options)
        self._fs: tuple[int, fsspec.AbstractFileSystem, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "_fs": None}

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return self._resolve()[0]

    def _resolve(self) -> tuple[fsspec.AbstractFileSystem, str]:
        if self._fs is None or self._fs[0] != os.getpid():
            fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
            self._fs = (os.getpid(), fs, root.rstrip("/"))
        return self._fs[1], self._fs[2]

    @property
    def kind(self) -> str:
        protocol = self.fs.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        if "file" in protocols or "local" in protocols:
            return "local"
        if "http" in protocols or "https" in protocols:
            return "http"
        return "other"

    def path(self, rel: str) -> str:
        root = self._resolve()[1]
        return posixpath.join(root, rel) if root else rel

    def open_at(self, rel: str, offset: int, end: int, size: int) -> IO[bytes]:
        """A raw binary stream of bytes ``[offset, end)`` of ``rel`` (a file of ``size`` bytes).

        Over HTTP the request asks for exactly that range, so a consumer reading part of a shard never pulls the
        rest through the network (an open-ended range would stream until the connection closes)."""
        fs, path, kind = self.fs, self.path(rel), self.kind
        if kind == "local":
            f = open(path, "rb")  # noqa: SIM115 - the caller owns and closes it
            f.seek(offset)
            return f
        if kind == "http":
            headers = {"Range": f"bytes={offset}-{end - 1}"} if offset or end < size else {}
            f = fs.open(path, "rb", block_size=0, size=size, headers=headers)
            status = getattr(getattr(f, "r", None), "status", 206)
            if offset and status != 206:  # server ignored the Range header: skip to the offset ourselves
                _discard(f, offset)
            return f
        f = fs.open(path, "rb", block_size=_READAHEAD_BLOCK, cache_type="readahead")
        f.seek(offset)
        return f


def _discard(f: IO[bytes], n: int) -> None:
    while n > 0:
        chunk = f.read(min(n, _STREAM_BUFFER))
        if not chunk:
            raise Truncated(errno.EIO, "stream ended while skipping to the requested offset")
        n -= len(chunk)


class RetryingReader(io.RawIOBase):
    """A read-only stream over one shard that reopens at the current byte after transient faults."""

    def __init__(
        self,
        store: Store,
        rel: str,
        *,
        start: int,
        end: int,
        size: int,
        retry: Retry,
        stats: FetchStats,
        episode: Callable[[int], int | None] | None = None,
    ) -> None:
        super().__init__()
        self.store, self.rel, self.size, self.end = store, rel, size, end
        self.episode = episode  # byte offset -> the episode a failure there loses (named in ShardReadError)
        self.pos = start
        self.retry, self.stats = retry, stats
        self._f: IO[bytes] | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        if self.pos >= self.end:
            return 0
        failures = 0
        while True:
            t0 = time.perf_counter()
            try:
                if self._f is None:
                    self.stats.requests += 1
                    self._f = self.store.open_at(self.rel, self.pos, self.end, self.size)
                data = self._f.read(min(len(view), self.end - self.pos))
                if not data:
                    raise Truncated(errno.EIO, f"stream ended at byte {self.pos}, before byte {self.end}")
            except Exception as e:
                self.stats.fetch_seconds += time.perf_counter() - t0
                self._drop()
                failures += 1
                if not is_transient(e) or failures > self.retry.retries:
                    what = "failed" if not is_transient(e) else f"kept failing ({failures} attempts)"
                    raise ShardReadError(f"reading at byte {self.pos} {what}: {describe(e)}", file=self.rel,
                                         episode=self.episode(self.pos) if self.episode is not None else None) from e
                self.stats.retries += 1
                delay = self.retry.delay(failures)
                logger.info("retrying %s at byte %d in %.2fs after %s", self.rel, self.pos, delay, describe(e))
                time.sleep(delay)
                continue
            self.stats.fetch_seconds += time.perf_counter() - t0
            n = len(data)
            view[:n] = data
            self.pos += n
            self.stats.bytes_read += n
            return n

    def _drop(self) -> None:
        if self._f is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is gone either way
                self._f.close()
            self._f = None

    def close(self) -> None:
        self._drop()
        super().close()


def record_spans(entries: Sequence[EpisodeEntry]) -> dict[int, tuple[int, int]]:
    """``[start, end)`` bytes of each episode record in a USTAR shard (``entries``: the shard's episodes in file
    order), from the index's member sizes."""
    out, pos = {}, 0
    for e in entries:
        start = pos
        for m in e.members:
            pos += BLOCK + -(-m.size // BLOCK) * BLOCK
        out[e.index] = (start, pos)
    return out


def _episode_at(pos: int, episodes: Sequence[int], wanted: set[int], spans: dict[int, tuple[int, int]]) -> int | None:
    """The episode a read failing at byte ``pos`` loses: the unfinished one whose record holds that byte (reads run
    ahead of the tar parser, so a failure can come while an earlier record is still being parsed), else the first
    unfinished one."""
    left = [e for e in episodes if e in wanted]
    return next((e for e in left if spans.get(e, (0, -1))[0] <= pos < spans[e][1]), left[0] if left else None)


@dataclass
class SliceReader:
    """Reads the records of slices in order, yielding each wanted episode's EpisodeRecord."""

    store: Store
    manifest: Manifest
    verify: bool = True
    retry: Retry = Retry()
    stats: FetchStats = field(default_factory=FetchStats)

    def records(self, slices: Sequence[Slice]) -> Iterator[tuple[int, EpisodeRecord]]:
        """``(shard position, record)`` for every episode of ``slices``, in order."""
        for s in slices:
            for rec in self._slice(s):
                yield s.shard, rec

    def _slice(self, s: Slice) -> Iterator[EpisodeRecord]:
        s = Slice(s.shard, tuple(int(e) for e in s.episodes))  # plain ints (whole shards come as numpy views)
        shards = self.manifest.index.shards
        path, size = shards["path"][s.shard], int(shards["size"][s.shard])
        entries = self.manifest.index.shard_entries(s.shard)
        spans = record_spans(entries)
        wanted = set(s.episodes)
        members = {e.index: {m.name: m for m in e.members} for e in entries if e.index in wanted}
        start, end = spans[s.episodes[0]][0], spans[s.episodes[-1]][1]
        if end > size:  # not a plain USTAR layout: read the shard whole
            start, end = 0, size
        done: set[int] = set()
        try:
            for rec in self._read(path, size, s, start, end, members, spans):
                done.add(rec.index)
                yield rec
        except ShardReadError as e:  # a shard gone because an update was published since: say so
            why = replaced(self.store.url, self.store.storage_options, self.manifest.index_files) if isinstance(
                e.__cause__, FileNotFoundError) else None
            if why is None:
                raise
            raise CompiledFormatError(why, file=path, episode=e.episode) from e
        except _MisplacedOffset as e:
            logger.info("%s: %s; reading the shard from its start", path, e)
            rest = Slice(s.shard, tuple(ep for ep in s.episodes if ep not in done))
            yield from self._read(path, size, rest, 0, size, members, spans)

    def _read(self, rel: str, size: int, s: Slice, offset: int, end: int,
              expected: dict[int, dict[str, MemberInfo]],
              spans: dict[int, tuple[int, int]]) -> Iterator[EpisodeRecord]:
        """Records of ``s`` from bytes ``[offset, end)``. A part that does not hold them where the index's
        sizes say raises _MisplacedOffset (the caller re-reads the whole shard); a whole shard that does not
        hold them is a format error."""
        partial = offset > 0 or end < size
        wanted = set(s.episodes)
        pending: dict[int, dict[str, bytes]] = {}
        raw = RetryingReader(self.store, rel, start=offset, end=end, size=size, retry=self.retry, stats=self.stats,
                             episode=lambda pos: _episode_at(pos, s.episodes, wanted, spans))
        stream = io.BufferedReader(raw, _STREAM_BUFFER)
        try:
            tar = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 - closed with the stream
            first = True
            for info in tar:
                name = info.name.rsplit("/", 1)[-1]
                key, _ = split_member(name)
                if first and partial and name not in expected[s.episodes[0]]:
                    raise _MisplacedOffset(f"byte {offset} holds {name!r}, not episode {s.episodes[0]}")
                if first and partial and info.offset_data - info.offset != BLOCK:
                    raise _MisplacedOffset("members carry extended (PAX/GNU) headers, so manifest sizes do not "
                                           "give record offsets")
                first = False
                try:
                    ep = int(key)
                except ValueError:
                    continue
                if ep not in wanted or not info.isfile():
                    continue
                meta = expected[ep].get(name)
                if meta is None:
                    raise CompiledFormatError(f"unexpected member {name!r} (not in the manifest)", file=rel, episode=ep)
                f = tar.extractfile(info)
                data = f.read() if f is not None else b""
                if len(data) != meta.size:
                    raise CompiledFormatError(f"member {name} has {len(data)} bytes, manifest says {meta.size}",
                                              file=rel, episode=ep)
                if self.verify and hashlib.sha256(data).hexdigest() != meta.sha256:
                    raise CompiledFormatError(f"member {name} fails its sha256 check", file=rel, episode=ep)
                members = pending.setdefault(ep, {})
                members[name] = data
                if len(members) == len(expected[ep]):
                    del pending[ep]
                    wanted.discard(ep)
                    self.stats.records += 1
                    yield EpisodeRecord.from_members(members, shard=rel)
                    if not wanted:
                        return
        except tarfile.TarError as e:
            if partial:
                raise _MisplacedOffset(f"bytes {offset}..{end} are not whole tar records ({e})") from e
            raise CompiledFormatError(f"corrupt tar stream: {e}", file=rel) from e
        finally:
            stream.close()
        missing = sorted(wanted)
        if missing and partial:
            raise _MisplacedOffset(f"bytes {offset}..{end} lack episodes {missing}")
        if missing:
            raise CompiledFormatError(f"shard ended without episodes {missing} (or their members)", file=rel,
                                      episode=missing[0])


class _MisplacedOffset(Exception):
    """A computed record offset did not land on the record's header (a shard written another way)."""
