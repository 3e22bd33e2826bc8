"""Transient faults of remote reads: which errors a second try can fix, and retrying them.

Remote storage (http(s)://, hf://, s3:// through fsspec) fails now and then in ways that a later attempt fixes: a
503 or 429 from a busy server, a connection reset, a stalled read, a body that ends early. The compiler (reading a
LeRobot source) and the reader (streaming shards) both retry those after an exponential backoff and, once a budget
of attempts is spent, raise an error naming the file. Everything else (a 404, a permission error, a corrupt file, a
bug) is raised at once: repeating it cannot help and would only delay the error.

This module holds what the two share, so neither imports the other: the classification (``is_transient``, from
transient_errors.py), the budget and its backoff (``Retry``), a retried call for small reads (``retrying``), a
per-read timeout for HTTP (``http_defaults``), and ``RetryingFile``, a seekable file that reopens at the byte it
had reached after a fault, so a decoder or a parquet reader pulling from it never sees the fault and never gets a
byte twice.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar

from roboreel.formats.errors import DataError, SourceReadError
from roboreel.formats.transient_errors import Truncated, describe, is_transient

if TYPE_CHECKING:
    import fsspec

__all__ = ["DEFAULT_BACKOFF_S", "DEFAULT_RETRIES", "Retry", "RetryingFile", "Truncated", "describe", "http_defaults",
           "is_local", "is_transient", "open_file", "retrying"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_RETRIES = 5
DEFAULT_BACKOFF_S = 0.2
MAX_DELAY_S = 10.0  # one wait never exceeds this, however many attempts came before
HTTP_CONNECT_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 60.0
_READ_ALL_CHUNK = 4 << 20


@dataclass(frozen=True)
class Retry:
    """How transient faults of remote reads are retried: at most ``retries`` more attempts after a failed one,
    waiting ``backoff_s`` seconds before the first retry and twice as long before each further one (at most
    ``MAX_DELAY_S``).

    The two numbers only mean something together, so they travel as this one value from where a user sets them
    (``StreamOptions``, ``compile_dataset``, ``validate``, the CLI) down to every read that spends the budget, and
    are checked once, here, where the value is made.
    """

    retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S

    def __post_init__(self) -> None:
        retries, backoff_s = self.retries, self.backoff_s
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, int | float) or not backoff_s >= 0:
            raise ValueError(f"backoff_s must be a number >= 0, got {backoff_s!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure: ``backoff_s`` doubled each time, capped."""
        return min(self.backoff_s * 2 ** (failures - 1), MAX_DELAY_S)


def http_defaults(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """Storage options with a read timeout for http(s) URLs unless the caller set one.

    aiohttp's default is a 5-minute total timeout per request, far too long to notice a stalled stream, and a
    total timeout would cut a healthy long download; a per-read timeout catches stalls only, which then surface
    as a TimeoutError that is retried.
    """
    opts = dict(storage_options or {})
    if url.split("://", 1)[0] in ("http", "https"):
        import aiohttp

        client = dict(opts.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=HTTP_CONNECT_TIMEOUT_S,
                                                           sock_read=HTTP_READ_TIMEOUT_S))
        opts["client_kwargs"] = client
    return opts


def retrying(fn: Callable[[], T], *, name: str, retry: Retry, error: type[DataError],
             episode: int | None = None) -> T:
    """``fn()``, called again after a backoff while it fails with a transient fault, at most ``retry.retries``
    more times; then ``error`` naming ``name`` (and ``episode``). For small whole reads (a manifest, a file's
    size); a permanent fault is raised as it is, at once."""
    for attempt in range(retry.retries + 1):
        try:
            return fn()
        except Exception as e:
            if not is_transient(e):
                raise
            if attempt == retry.retries:
                raise error(f"kept failing ({attempt + 1} attempts): {describe(e)}", file=name, episode=episode) from e
            delay = retry.delay(attempt + 1)
            logger.info("retrying %s in %.2fs after %s", name, delay, describe(e))
            time.sleep(delay)
    raise AssertionError("unreachable")


class RetryingFile(io.RawIOBase):
    """A read-only, seekable file that outlives transient faults of the one it wraps.

    ``opener`` opens the underlying file (an fsspec file: opening costs at most a HEAD, reading is ranged GETs).
    On a transient fault the underlying file is closed, and after a backoff opened again and read on from the
    byte this file had reached, so whoever reads it (FFmpeg demuxing an mp4, Arrow reading a parquet footer and
    row groups) never sees the fault and never gets a byte twice. ``retry.retries`` counts consecutive attempts
    without progress; once they are spent, ``error`` is raised naming ``rel`` and ``episode`` (the episode being
    read: a caller decoding several episodes of one file updates it). A permanent fault is raised as it is.

    Any error raised is also kept in ``failed`` and raised again by every later read: a demuxer may swallow a
    read error and report a short or corrupt stream instead, and its owner can then report ``failed``, the real
    cause. ``read(n)`` returns ``n`` bytes unless the file ends first (Arrow takes a short read as corruption).
    The file is opened by the constructor, so a missing file raises there.
    """

    def __init__(self, opener: Callable[[], IO[bytes]], *, rel: str, retry: Retry, error: type[DataError],
                 episode: int | None = None) -> None:
        super().__init__()
        self.opener, self.rel, self.retry, self.error = opener, rel, retry, error
        self.episode = episode
        self.pos = 0
        self.size: int | None = None
        self.failed: BaseException | None = None
        self._f: IO[bytes] | None = None
        self._attempt(self._open, "opening")

    # -- io.RawIOBase ----------------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self.pos + offset
        elif whence == io.SEEK_END and self.size is not None:
            pos = self.size + offset
        elif whence == io.SEEK_END:
            pos = self._attempt(lambda: self._open().seek(offset, io.SEEK_END), "seeking to the end")
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"seek to byte {pos} of {self.rel}, before its start")
        self.pos = pos
        return pos

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        data = self._read_once(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        out = bytearray()
        while len(out) < size:
            chunk = self._read_once(size - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def readall(self) -> bytes:
        out = bytearray()
        while chunk := self._read_once(_READ_ALL_CHUNK):
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self._drop()
        super().close()

    # -- internals -------------------------------------------------------------------------------------
    def _open(self) -> IO[bytes]:
        if self._f is None:
            self._f = self.opener()
            size = getattr(self._f, "size", None)
            self.size = size if isinstance(size, int) else self.size
        return self._f

    def _drop(self) -> None:
        if self._f is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is gone either way
                self._f.close()
            self._f = None

    def _read_once(self, n: int) -> bytes:
        """Up to ``n`` bytes at ``pos`` from one underlying read, retried; b"" only at the end of the file."""
        if self.closed:
            raise ValueError(f"read of {self.rel} after close")
        if self.size is not None:
            n = min(n, self.size - self.pos)
        if n <= 0:
            return b""

        def attempt() -> bytes:
            f = self._open()
            if f.tell() != self.pos:
                f.seek(self.pos)
            data = f.read(n)
            if not data and self.size is not None:
                raise Truncated(errno.EIO, f"stream ended at byte {self.pos}, before byte {self.size}")
            return data

        data = self._attempt(attempt, f"reading at byte {self.pos}")
        self.pos += len(data)
        return data

    def _attempt(self, fn: Callable[[], T], what: str) -> T:
        if self.failed is not None:
            raise self.failed
        failures = 0
        while True:
            try:
                return fn()
            except Exception as e:
                self._drop()
                failures += 1
                if not is_transient(e):
                    self.failed = e
                    raise
                if failures > self.retry.retries:
                    self.failed = self.error(f"{what} kept failing ({failures} attempts): {describe(e)}",
                                             file=self.rel, episode=self.episode)
                    raise self.failed from e
                delay = self.retry.delay(failures)
                logger.info("retrying %s: %s in %.2fs after %s", self.rel, what, delay, describe(e))
                time.sleep(delay)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is the local filesystem (its reads have no transient faults worth retrying)."""
    protocol = fs.protocol
    return bool({"file", "local"} & set((protocol,) if isinstance(protocol, str) else protocol))


def open_file(fs: fsspec.AbstractFileSystem, path: str, rel: str, mode: str = "rb", *, retry: Retry | None = None,
              episode: int | None = None, **kwargs: Any) -> IO[bytes]:
    """Open ``path`` (``rel`` in the dataset) for reading. With ``retry``, a remote file comes as a RetryingFile:
    transient faults are retried, reading on at the byte reached, then raise SourceReadError naming ``rel`` and
    ``episode``. A missing file raises FileNotFoundError either way."""
    if retry is None or is_local(fs):
        return fs.open(path, mode, **kwargs)
    return RetryingFile(lambda: fs.open(path, mode, **kwargs), rel=rel, retry=retry, error=SourceReadError,
                        episode=episode)
