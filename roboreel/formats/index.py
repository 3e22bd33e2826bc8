"""The compiled dataset's columnar index: per-shard and per-episode tables, read lazily.

A dataset of a million episodes must not cost a million Python objects in every process (ranks x DataLoader
workers on a node), nor a 100 MB JSON parse at start-up. So the per-episode facts live in parquet, chunked like
LeRobot's ``meta/episodes`` and read in three tiers, each only when something needs it:

- ``index/shards.parquet`` (one row per shard: path, size, sha256, first episode row, episode count, frames):
  enough to plan an epoch (shard order, frame quotas per rank and worker) and to compute ``len()``.
- the *core* columns of ``index/episodes/chunk-CCC/file-FFF.parquet`` (episode index and length, two int64
  arrays: 16 bytes an episode): what a consumer needs to cut its shards into episodes and frames.
- the *detail* of an episode (members with sizes and sha256, rows digest, tasks, global frame range): one row
  group (``ROW_GROUP_ROWS`` episodes) read on demand, cached a few at a time, when its shard is streamed.

Rows are in shard order, which is episode order (shards hold consecutive episodes). ``Index.__getstate__``
drops everything loaded, so pickling a dataset into a DataLoader worker carries no per-episode data; the worker
loads what it reads. ``MemoryIndex`` holds the same tables in memory (for writers and tests).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.lengths import Lengths
from roboreel.formats.parquetio import read_parquet_table

INDEX_DIR = "index"
SHARDS_PATH = "index/shards.parquet"
EPISODES_PATH = "index/episodes/chunk-{chunk:03d}/file-{file:03d}.parquet"
ROW_GROUP_ROWS = 1024  # episodes per row group: the unit of a detail read
# episodes per index file (LeRobot-like chunking: no file grows without bound); a whole number of row groups, so
# row group g of the episode rows is always rows [g * ROW_GROUP_ROWS, ...) whichever file holds it
ROWS_PER_FILE = 100 * ROW_GROUP_ROWS
FILES_PER_CHUNK = 1000
DETAIL_CACHE_GROUPS = 8

_MEMBER = pa.struct([("name", pa.string()), ("size", pa.int64()), ("sha256", pa.string())])
SHARDS_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("sha256", pa.string()),
                           ("first", pa.int64()), ("episodes", pa.int64()), ("frames", pa.int64())])
EPISODES_SCHEMA = pa.schema([("index", pa.int64()), ("length", pa.int64()), ("from_index", pa.int64()),
                             ("to_index", pa.int64()), ("shard", pa.int64()), ("tasks", pa.list_(pa.string())),
                             ("rows_sha256", pa.string()), ("members", pa.list_(_MEMBER))])
CORE_COLUMNS = ["index", "length"]


@dataclass(frozen=True)
class MemberInfo:
    """One tar member: its name inside the shard, byte size and sha256 (hex)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class EpisodeEntry:
    """One episode: its global frame range, the shard holding it, and every member of its record."""

    index: int
    length: int
    from_index: int
    to_index: int
    shard: int  # position in the shard table
    tasks: list[str]
    members: list[MemberInfo]
    rows_sha256: str | None = None  # hash of the episode's tabular values (integrity end to end)

    def member(self, name: str) -> MemberInfo:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(name)


@dataclass(frozen=True)
class ShardEntry:
    """One tar shard: path relative to the dataset root, size, sha256, and its episodes in file order."""

    path: str
    size: int
    sha256: str
    episodes: list[int]


def episodes_file(n: int) -> str:
    return EPISODES_PATH.format(chunk=n // FILES_PER_CHUNK, file=n % FILES_PER_CHUNK)


def entries_table(entries: Sequence[EpisodeEntry]) -> pa.Table:
    cols: dict[str, list[Any]] = {name: [] for name in EPISODES_SCHEMA.names}
    for e in entries:
        for name in ("index", "length", "from_index", "to_index", "shard", "tasks", "rows_sha256"):
            cols[name].append(getattr(e, name))
        cols["members"].append([{"name": m.name, "size": m.size, "sha256": m.sha256} for m in e.members])
    return pa.Table.from_pydict(cols, schema=EPISODES_SCHEMA)


def _entries_from(table: pa.Table) -> list[EpisodeEntry]:
    """Entries of a table's rows, built column-wise (to_pydict of the struct column costs a dict per member)."""
    cols = {n: table.column(n).combine_chunks() for n in ("index", "length", "from_index", "to_index", "shard",
                                                           "tasks", "rows_sha256", "members")}
    members = cols["members"]
    offsets = members.offsets.to_numpy().tolist()
    flat = members.values
    start = offsets[0]
    infos = [MemberInfo(n, z, h) for n, z, h in zip(flat.field("name").to_pylist(), flat.field("size").to_pylist(),
                                                    flat.field("sha256").to_pylist(), strict=True)]
    out = []
    for i, (ep, n, a, b, sh, t, r) in enumerate(zip(*(cols[c].to_pylist() for c in (
            "index", "length", "from_index", "to_index", "shard", "tasks", "rows_sha256")), strict=True)):
        out.append(EpisodeEntry(ep, n, a, b, sh, t or [], infos[offsets[i] - start:offsets[i + 1] - start], r))
    return out


# -- reading -----------------------------------------------------------------------------------------------
class Index:
    """Read side of the index (see module doc). Subclasses say where the tables come from."""

    def __init__(self, group_rows: int = ROW_GROUP_ROWS) -> None:
        self.group_rows = group_rows  # episodes per row group of the episode files (the unit of a detail read)
        self._shard_arrays: dict[str, Any] | None = None
        self._core: Lengths | None = None
        self._groups: OrderedDict[int, list[EpisodeEntry]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.update(_shard_arrays=None, _core=None, _groups=OrderedDict())
        return d

    # what subclasses provide
    def _read_shards(self) -> pa.Table:
        raise NotImplementedError

    def _read_core(self) -> pa.Table:
        raise NotImplementedError

    def _read_group(self, group: int) -> pa.Table:
        raise NotImplementedError

    def where(self, what: str) -> str:
        return what

    # shards
    @property
    def shards(self) -> dict[str, Any]:
        """Shard columns: ``path`` (list of str), ``sha256`` (list), ``size``/``first``/``episodes``/``frames``
        (int64 arrays)."""
        if self._shard_arrays is None:
            t = self._read_shards()
            _check_schema(t, SHARDS_SCHEMA, self.where(SHARDS_PATH))
            arrays: dict[str, Any] = {n: t.column(n).to_numpy() for n in ("size", "first", "episodes", "frames")}
            arrays["path"], arrays["sha256"] = t.column("path").to_pylist(), t.column("sha256").to_pylist()
            ends = arrays["first"] + arrays["episodes"]
            if len(ends) and (arrays["first"][0] != 0 or np.any(arrays["first"][1:] != ends[:-1])
                              or np.any(arrays["episodes"] < 0)):
                raise CompiledFormatError("shard rows do not cover the episode rows in order", file=self.where(SHARDS_PATH))
            self._shard_arrays = arrays
        return self._shard_arrays

    @property
    def num_shards(self) -> int:
        return len(self.shards["path"])

    def shard_frames(self) -> np.ndarray:
        return self.shards["frames"]

    # episodes: core
    @property
    def lengths(self) -> Lengths:
        if self._core is None:
            t = self._read_core()
            ids = t.column("index").to_numpy().astype(np.int64, copy=False)
            lengths = t.column("length").to_numpy().astype(np.int64, copy=False)
            if len(ids) > 1 and np.any(ids[1:] <= ids[:-1]):
                raise CompiledFormatError("episode rows are not in increasing episode order",
                                          file=self.where(INDEX_DIR))
            self._core = Lengths(ids, lengths)
            del t
            pa.default_memory_pool().release_unused()  # parquet decode buffers: ~20 MB at 10^6 episodes
        return self._core

    @property
    def num_episodes(self) -> int:
        return int(self.shards["episodes"].sum())

    def shard_episodes(self, pos: int) -> np.ndarray:
        """Episode indices of shard ``pos``, in file order."""
        first, n = int(self.shards["first"][pos]), int(self.shards["episodes"][pos])
        return self.lengths.ids[first:first + n]

    # episodes: detail
    def rows(self, lo: int, hi: int) -> list[EpisodeEntry]:
        """Detail of episode rows ``[lo, hi)``."""
        out: list[EpisodeEntry] = []
        for g in range(lo // self.group_rows, -(-hi // self.group_rows)):
            entries = self._group(g)
            base = g * self.group_rows
            out.extend(entries[max(lo, base) - base:min(hi, base + len(entries)) - base])
        return out

    def _group(self, g: int) -> list[EpisodeEntry]:
        if g in self._groups:
            self._groups.move_to_end(g)
            return self._groups[g]
        t = self._read_group(g)
        _check_schema(t, EPISODES_SCHEMA, self.where(INDEX_DIR))
        entries = _entries_from(t)
        self._groups[g] = entries
        while len(self._groups) > DETAIL_CACHE_GROUPS:
            self._groups.popitem(last=False)
        return entries

    def group_tables(self) -> Iterator[tuple[int, pa.Table]]:
        """``(first row, table)`` of every row group of the episode files, in order (bounded memory; for
        column-wise checks that need no entry objects)."""
        n = len(self.lengths)
        for g in range(-(-n // self.group_rows)):
            t = self._read_group(g)
            _check_schema(t, EPISODES_SCHEMA, self.where(INDEX_DIR))
            yield g * self.group_rows, t

    def shard_entries(self, pos: int) -> list[EpisodeEntry]:
        first, n = int(self.shards["first"][pos]), int(self.shards["episodes"][pos])
        return self.rows(first, first + n)

    def entry(self, episode: int) -> EpisodeEntry:
        """Detail of one episode (KeyError if absent)."""
        row = self.lengths.row(episode)
        return self.rows(row, row + 1)[0]

    def iter_entries(self) -> Iterator[EpisodeEntry]:
        """Every episode's detail, a row group at a time (bounded memory)."""
        n = len(self.lengths)
        for lo in range(0, n, self.group_rows):
            yield from self.rows(lo, min(n, lo + self.group_rows))


class MemoryIndex(Index):
    """The index of lists held in memory (writers, tests)."""

    def __init__(self, shards: Sequence[ShardEntry], episodes: Sequence[EpisodeEntry]) -> None:
        super().__init__(ROW_GROUP_ROWS)
        by_index = {e.index: e for e in episodes}
        ordered, cols = [], {name: [] for name in SHARDS_SCHEMA.names}
        for s in shards:
            eps = [by_index[e] for e in s.episodes if e in by_index]
            for name, v in zip(SHARDS_SCHEMA.names, (s.path, s.size, s.sha256, len(ordered), len(eps),
                                                     sum(e.length for e in eps)), strict=True):
                cols[name].append(v)
            ordered.extend(eps)
        self._table = entries_table(ordered)
        self._shard_table = pa.Table.from_pydict(cols, schema=SHARDS_SCHEMA)

    def _read_shards(self) -> pa.Table:
        return self._shard_table

    def _read_core(self) -> pa.Table:
        return self._table.select(CORE_COLUMNS)

    def _read_group(self, group: int) -> pa.Table:
        return self._table.slice(group * self.group_rows, self.group_rows)


class FileIndex(Index):
    """The index files of a compiled root (local path or fsspec URL), opened per process."""

    def __init__(self, url: str, descriptor: dict[str, Any], storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(int(descriptor["row_group_rows"]))
        for ref in descriptor["episodes"][:-1]:
            if ref["rows"] % self.group_rows:
                raise CompiledFormatError(f"index file of {ref['rows']} rows is not whole row groups of "
                                          f"{self.group_rows}", file=str(url).rstrip("/") + "/" + ref["path"])
        self.url, self.descriptor, self.storage_options = str(url), descriptor, dict(storage_options or {})
        # how a read is retried on transient faults (the reader sets a picklable policy; None: no retry)
        self.retry: Callable[[Callable[[], Any]], Any] | None = None
        self._fs: tuple[int, fsspec.AbstractFileSystem, str] | None = None
        self._files: dict[int, pq.ParquetFile] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_fs": None, "_files": {}}

    def _resolve(self) -> tuple[fsspec.AbstractFileSystem, str]:
        if self._fs is None or self._fs[0] != os.getpid():
            fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
            self._fs, self._files = (os.getpid(), fs, root.rstrip("/")), {}
        return self._fs[1], self._fs[2]

    def where(self, what: str) -> str:
        return self.url.rstrip("/") + "/" + what

    def _retried(self, fn: Callable[[], Any]) -> Any:
        return fn() if self.retry is None else self.retry(fn)

    def _read(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        def read() -> pa.Table:
            fs, root = self._resolve()
            try:
                with fs.open(root + "/" + rel, "rb") as f:
                    return read_parquet_table(f, columns=columns)
            except FileNotFoundError as e:
                raise CompiledFormatError(self._missing(), file=self.where(rel)) from e
            except (pa.ArrowException, OSError) as e:
                raise CompiledFormatError(f"index file unreadable: {e}", file=self.where(rel)) from e

        return self._retried(read)

    def _missing(self) -> str:
        """Why an index file is missing: an update published since this index was opened, if so."""
        from roboreel.formats.published import replaced

        return replaced(self.url, self.storage_options, self.descriptor) or "index file missing"

    def _read_shards(self) -> pa.Table:
        return self._read(self.descriptor["shards"]["path"])

    def _read_core(self) -> pa.Table:
        tables = [self._read(ref["path"], CORE_COLUMNS) for ref in self.descriptor["episodes"]]
        return pa.concat_tables(tables) if tables else EPISODES_SCHEMA.empty_table().select(CORE_COLUMNS)

    def _read_group(self, group: int) -> pa.Table:
        row, n = group * self.group_rows, 0
        for i, ref in enumerate(self.descriptor["episodes"]):
            if row < n + ref["rows"]:
                return self._retried(lambda i=i, rel=ref["path"], local=(row - n) // self.group_rows:
                                     self._read_row_group(i, rel, local))
            n += ref["rows"]
        raise CompiledFormatError(f"no index row group {group}", file=self.where(INDEX_DIR))

    def _read_row_group(self, i: int, rel: str, local: int) -> pa.Table:
        try:
            if i not in self._files:
                fs, root = self._resolve()
                self._files[i] = pq.ParquetFile(fs.open(root + "/" + rel, "rb"))
            return self._files[i].read_row_group(local, use_threads=False)
        except FileNotFoundError as e:
            raise CompiledFormatError(self._missing(), file=self.where(rel)) from e
        except (pa.ArrowException, OSError) as e:
            self._files.pop(i, None)  # a broken connection: reopen on the next try
            raise CompiledFormatError(f"index file unreadable: {e}", file=self.where(rel)) from e


def _kind(t: pa.DataType) -> str:
    """A type's kind, blind to what parquet round trips change (list child names, int widths, large types)."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list<" + _kind(t.value_type) + ">"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{_kind(f.type)}" for f in t) + ">"
    return str(t)


def _check_schema(table: pa.Table, schema: pa.Schema, where: str) -> None:
    for f in schema:
        if f.name not in table.column_names:
            raise CompiledFormatError(f"index table lacks column {f.name!r}", file=where)
        got = table.schema.field(f.name).type
        if _kind(got) != _kind(f.type):
            raise CompiledFormatError(f"index column {f.name!r} is {got}, expected {f.type}", file=where)
