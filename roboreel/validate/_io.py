"""A dataset root on any fsspec filesystem, addressed by dataset-relative paths (what findings name)."""

from __future__ import annotations

import posixpath
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import fsspec

T = TypeVar("T")


@dataclass(frozen=True)
class Root:
    fs: fsspec.AbstractFileSystem
    root: str
    url: str
    storage_options: dict[str, Any] | None = None

    @classmethod
    def open_url(cls, url: str, *, storage_options: dict[str, Any] | None = None) -> Root:
        fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
        return cls(fs=fs, root=root.rstrip("/") or root, url=str(url), storage_options=storage_options)

    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def exists(self, rel: str = "") -> bool:
        return self.fs.exists(self.path(rel))

    def isdir(self, rel: str = "") -> bool:
        return self.fs.isdir(self.path(rel))

    def size(self, rel: str) -> int:
        return int(self.fs.size(self.path(rel)))

    def open(self, rel: str) -> IO[bytes]:
        return self.fs.open(self.path(rel), "rb")

    def find(self, rel_dir: str, suffix: str) -> dict[str, int]:
        """Dataset-relative path -> size of every file under ``rel_dir`` ending in ``suffix`` (sorted)."""
        base = self.path(rel_dir)
        if not self.fs.isdir(base):
            return {}
        found = self.fs.find(base, detail=True)
        prefix = self.root + "/"
        out = {}
        for p, d in found.items():
            if p.endswith(suffix) and d.get("type", "file") == "file":
                out[p[len(prefix):] if p.startswith(prefix) else p] = int(d.get("size") or 0)
        return dict(sorted(out.items()))


def progress_bar(iterable: Iterable[T], *, enabled: bool, desc: str, unit: str, total: int | None = None) -> Iterable[T]:
    """A tqdm bar on stderr when ``enabled`` (the CLI enables it when stderr is a terminal), else the iterable."""
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr, leave=False)
