"""A dataset root on any fsspec filesystem, addressed by dataset-relative paths (what findings name).

A remote root (http(s)://, hf://, s3://) reads like compile and the reader do (formats/transient.py): a
transient fault (a 5xx, 429, 408, a reset, a timeout, a short body) is retried after a backoff as ``Root.retry``
says, and then raises ``ReadFailed`` naming the file, which ``validate`` reports as unreadable (never as
missing). Only a file the store says is not there (a 404) is missing: fsspec's own ``exists`` is False for any
failed request.
"""

from __future__ import annotations

import json
import posixpath
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import fsspec

from roboreel.formats.errors import DataError
from roboreel.formats.lerobot_v3_layout import EPISODES_DIR, INFO_PATH, numbered_episode_files
from roboreel.formats.transient import (
    Retry,
    RetryingFile,
    describe,
    http_defaults,
    is_local,
    is_transient,
    retrying,
)
from roboreel.formats.transient_errors import causes

T = TypeVar("T")


class ReadFailed(DataError):
    """A remote file could not be read: transient faults beyond the retry budget, or an HTTP error other than
    not-found while reading (a server whose HEAD answers and whose GET refuses). Not known to be missing or bad,
    so validate reports it as unreadable (a fatal finding naming it, exit 2)."""


def _http_error(exc: BaseException) -> bool:
    """Whether an HTTP status is somewhere in ``exc``'s causes (aiohttp's ``status``, or a ``response``'s)."""
    return any(isinstance(getattr(e, "status", None), int)
               or isinstance(getattr(getattr(e, "response", None), "status_code", None), int) for e in causes(exc))


class _RemoteFile(RetryingFile):
    """A RetryingFile whose permanent HTTP errors (not a missing file: that stays FileNotFoundError) are
    ReadFailed naming the file, so validate reports them as unreadable rather than as a traceback."""

    def _attempt(self, fn: Callable[[], T], what: str) -> T:
        try:
            return super()._attempt(fn, what)
        except (ReadFailed, FileNotFoundError):
            raise
        except Exception as e:
            if not _http_error(e):
                raise
            self.failed = ReadFailed(f"{what}: {describe(e)}", file=self.rel)
            raise self.failed from e


class RetryingFS:
    """A remote fsspec filesystem whose ``open`` gives a RetryingFile (reads on at the byte reached after a
    transient fault, then ReadFailed): what the checks read through ``root.fs`` (parquet via ``read_parquet``)
    retries like Root's own reads. Everything else is the wrapped filesystem's."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, retry: Retry) -> None:
        self.wrapped, self.root, self.retry = fs, root, retry

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> IO[bytes]:
        prefix = self.root + "/"
        rel = path[len(prefix):] if path.startswith(prefix) else path
        return _RemoteFile(lambda: self.wrapped.open(path, mode, **kwargs), rel=rel, retry=self.retry,
                           error=ReadFailed)


@dataclass(frozen=True)
class Root:
    fs: Any  # fsspec.AbstractFileSystem, or a RetryingFS around a remote one
    root: str
    url: str
    storage_options: dict[str, Any] | None = None
    retry: Retry = Retry()

    @classmethod
    def open_url(cls, url: str, *, storage_options: dict[str, Any] | None = None, retry: Retry | None = None) -> Root:
        """The root at ``url``; a remote one reads through a RetryingFS spending ``retry`` (default ``Retry()``)."""
        retry = Retry() if retry is None else retry
        fs, root = fsspec.core.url_to_fs(str(url), **http_defaults(str(url), storage_options))
        root = root.rstrip("/") or root
        if not is_local(fs):
            fs = RetryingFS(fs, root, retry)
        return cls(fs=fs, root=root, url=str(url), storage_options=storage_options, retry=retry)

    @property
    def remote(self) -> bool:
        return isinstance(self.fs, RetryingFS)

    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def _call(self, fn: Callable[[], T], rel: str) -> T:
        """``fn()``, a filesystem call about ``rel``; remote: transient faults retried, then ReadFailed."""
        if not self.remote:
            return fn()
        return retrying(fn, name=rel or self.url, retry=self.retry, error=ReadFailed)

    def exists(self, rel: str = "") -> bool:
        """Whether the file (or directory) is there. Remote: asked with ``info`` and retried, so only a
        not-found answer (a 404) is False; a fault beyond the budget raises ReadFailed."""
        if not self.remote:
            return self.fs.exists(self.path(rel))
        try:
            self._call(lambda: self.fs.info(self.path(rel)), rel)
        except FileNotFoundError:  # only a permanent one gets here: a transient one was retried
            return False
        return True

    def isdir(self, rel: str = "") -> bool:
        return self._call(lambda: self.fs.isdir(self.path(rel)), rel)

    def size(self, rel: str) -> int:
        return int(self._call(lambda: self.fs.size(self.path(rel)), rel))

    def open(self, rel: str) -> IO[bytes]:
        return self.fs.open(self.path(rel), "rb")

    def find(self, rel_dir: str, suffix: str) -> dict[str, int]:
        """Dataset-relative path -> size of every file under ``rel_dir`` ending in ``suffix`` (sorted).

        Where a remote store cannot list (a plain HTTP server without directory listings), nothing is found,
        except meta/episodes, whose files are then found the way compile finds them (LeRobot's numbering)."""
        base = self.path(rel_dir)
        try:
            listable = self.isdir(rel_dir)
        except ReadFailed:
            raise
        except Exception as e:  # a store that refuses listings (e.g. a 403 or 405 on a directory)
            if not self.remote or is_transient(e):
                raise
            listable = False
        found = self._call(lambda: self.fs.find(base, detail=True), rel_dir) if listable else {}
        prefix = self.root + "/"
        out = {}
        for p, d in found.items():
            if p.endswith(suffix) and d.get("type", "file") == "file":
                out[p[len(prefix):] if p.startswith(prefix) else p] = int(d.get("size") or 0)
        if not out and self.remote and rel_dir == EPISODES_DIR and suffix == ".parquet":
            out = self._probe_episode_files()
        return dict(sorted(out.items()))

    def _probe_episode_files(self) -> dict[str, int]:
        """meta/episodes files by LeRobot's numbering (file_index wraps at info.json's chunks_size), as
        ``LeRobotSource`` walks them where it cannot list; stops at the first one the store does not have."""
        try:
            with self.open(INFO_PATH) as f:
                chunks_size = int(json.loads(f.read()).get("chunks_size") or 1000)
        except (FileNotFoundError, ValueError, TypeError, AttributeError):
            return {}  # the caller reports meta/info.json
        return {rel: self.size(rel) for rel in numbered_episode_files(chunks_size, self.exists)}


def progress_bar(iterable: Iterable[T], *, enabled: bool, desc: str, unit: str, total: int | None = None) -> Iterable[T]:
    """A tqdm bar on stderr when ``enabled`` (the CLI enables it when stderr is a terminal), else the iterable."""
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr, leave=False)
