"""Writing the columnar index (index.py says what it is): shard by shard, in bounded memory, every file under a
temp name until ``close()`` renames it and returns the descriptor ``roboreel.json`` records."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats import index as ix
from roboreel.formats.atomic import atomic_open
from roboreel.formats.index import EPISODES_SCHEMA, SHARDS_PATH, SHARDS_SCHEMA, EpisodeEntry, ShardEntry


class IndexWriter:
    """Writes the index of a local compiled root, shard by shard, in bounded memory (one row group buffered).

    Every file goes to a temp name and is renamed by ``close()``, which returns the descriptor the manifest
    records (paths, sizes, sha256 and row counts of the index files)."""

    def __init__(self, root: str | os.PathLike[str], directory: str = ix.INDEX_DIR) -> None:
        """``directory``: where under ``root`` the files go (``index``; a compile update writes the new
        generation's index beside the published one, e.g. ``index/g000002``, so a reader of the old one is
        never handed the new files)."""
        self.root = os.fspath(root)
        self.directory = directory.rstrip("/")
        self._shards: dict[str, list[Any]] = {name: [] for name in SHARDS_SCHEMA.names}
        self._buffer: list[EpisodeEntry] = []
        self.group_rows, self.file_rows = ix.ROW_GROUP_ROWS, ix.ROWS_PER_FILE
        self._rows = 0  # episode rows written or buffered
        self._file_rows = 0
        self._files: list[dict[str, Any]] = []
        self._writer: pq.ParquetWriter | None = None
        self._open: Any = None
        self._frames = 0
        self._last_episode: int | None = None

    def add_shard(self, path: str, size: int, sha256: str, entries: Sequence[EpisodeEntry]) -> None:
        """Append one shard and its episodes (in file order, each ``shard`` field equal to this shard's position)."""
        pos = len(self._shards["path"])
        for e in entries:
            if e.shard != pos:
                raise ValueError(f"episode {e.index} says shard {e.shard}, it is added to shard {pos}")
            if self._last_episode is not None and e.index <= self._last_episode:
                raise ValueError(f"episode {e.index} after {self._last_episode}: the index is in episode order")
            self._last_episode = e.index
        frames = sum(e.length for e in entries)
        for name, value in zip(SHARDS_SCHEMA.names, (path, size, sha256, self._rows, len(entries), frames),
                               strict=True):
            self._shards[name].append(value)
        self._frames += frames
        for e in entries:
            self._buffer.append(e)
            self._rows += 1
            if len(self._buffer) == self.group_rows:
                self._flush()

    def _rel(self, rel: str) -> str:
        """``rel`` (under ``index/``) moved under this writer's directory."""
        return self.directory + rel[len(ix.INDEX_DIR):]

    def _flush(self) -> None:
        while self._buffer:
            if self._writer is None:
                rel = self._rel(ix.episodes_file(len(self._files)))
                self._open = atomic_open(os.path.join(self.root, rel))
                f = self._open.__enter__()
                self._writer = pq.ParquetWriter(f, EPISODES_SCHEMA, compression="zstd", write_statistics=True)
                self._files.append({"path": rel, "rows": 0})
                self._file_rows = 0
            take = min(len(self._buffer), self.file_rows - self._file_rows)
            chunk, self._buffer = self._buffer[:take], self._buffer[take:]
            self._writer.write_table(ix.entries_table(chunk), row_group_size=self.group_rows)
            self._file_rows += take
            self._files[-1]["rows"] += take
            if self._file_rows == self.file_rows:
                self._close_file()

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._open.__exit__(None, None, None)
            self._writer = self._open = None

    def close(self) -> dict[str, Any]:
        """Finish every file; the descriptor for ``Manifest.index_files``."""
        self._flush()
        self._close_file()
        table = pa.Table.from_pydict(self._shards, schema=SHARDS_SCHEMA)
        shards_rel = self._rel(SHARDS_PATH)
        with atomic_open(os.path.join(self.root, shards_rel)) as f:
            pq.write_table(table, f, compression="zstd", write_statistics=True)
        files = [{**r, **file_digest(os.path.join(self.root, r["path"]))} for r in self._files]
        shards = {"path": shards_rel, "rows": table.num_rows, **file_digest(os.path.join(self.root, shards_rel))}
        return {"shards": shards, "episodes": files, "episodes_total": self._rows, "frames_total": self._frames,
                "row_group_rows": self.group_rows}

    def abort(self) -> None:
        """Drop a half-written file (its temp name is removed by atomic_open)."""
        if self._writer is not None:
            self._writer.close()
            self._open.__exit__(RuntimeError, RuntimeError("aborted"), None)
            self._writer = self._open = None


def file_digest(path: str) -> dict[str, Any]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"size": os.path.getsize(path), "sha256": h.hexdigest()}


def write_index(root: str | os.PathLike[str], shards: Sequence[ShardEntry],
                episodes: Iterable[EpisodeEntry]) -> dict[str, Any]:
    """Write the index of lists (small datasets, tests); ``IndexWriter`` streams."""
    by_index = {e.index: e for e in episodes}
    w = IndexWriter(root)
    try:
        for s in shards:
            w.add_shard(s.path, s.size, s.sha256, [by_index[e] for e in s.episodes])
        return w.close()
    except BaseException:
        w.abort()
        raise
