"""Read a LeRobot v3.0 source dataset, local or remote (any fsspec URL: file://, hf://, s3://, http(s)://).

Only metadata and tables are read here; video bytes are opened as files for whoever decodes them. What the files
are and what meta/ parses into (paths, columns, ``SourceInfo``, ``EpisodeMeta``, ``VideoSpan``) is pure and lives
in lerobot_v3_layout.py; this module is the I/O: ``LeRobotSource`` and the parquet/JSON reads under it. The layout
names are re-exported, so ``lerobot_v3.INFO_PATH`` and friends keep working.

A source built with a ``retry`` (the compiler's) retries transient faults of every remote read it makes (files,
sizes, listings; formats/transient.py) and then raises SourceReadError naming the file; without, errors propagate
as the filesystem raises them.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Callable
from functools import cached_property
from typing import IO, Any, TypeVar

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roboreel.formats.columns import is_numeric_feature, null_rows
from roboreel.formats.errors import SourceError, SourceReadError
from roboreel.formats.lerobot_v3_layout import (
    CODEBASE_VERSION,
    DEFAULT_DATA_PATH,
    DEFAULT_KEYS,
    DEFAULT_VIDEO_PATH,
    EPISODE_COLUMNS,
    EPISODES_DIR,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    TIMESTAMP_TOLERANCE_S,
    EpisodeMeta,
    SourceInfo,
    VideoSpan,
    numbered_episode_files,
)
from roboreel.formats.parquetio import read_parquet_table
from roboreel.formats.transient import Retry, open_file, retrying

__all__ = [  # the layout names are re-exported: callers use them as lerobot_v3.<name>
    "CODEBASE_VERSION", "DEFAULT_DATA_PATH", "DEFAULT_KEYS", "DEFAULT_VIDEO_PATH", "EPISODES_DIR", "EPISODES_PATH",
    "INFO_PATH", "STATS_PATH", "TASKS_PATH", "TIMESTAMP_TOLERANCE_S", "EpisodeMeta", "LeRobotSource",
    "SourceError", "SourceInfo", "VideoSpan", "read_parquet",
]

T = TypeVar("T")


def _read_json(fs: fsspec.AbstractFileSystem, path: str, rel: str, *, wrap_missing: bool = True,
               retry: Retry | None = None) -> Any:
    """A JSON file; a missing one raises SourceError naming it, or (``wrap_missing=False``) FileNotFoundError
    for the caller to decide."""
    try:
        with open_file(fs, path, rel, retry=retry) as f:
            text = f.read()
    except FileNotFoundError as e:
        if not wrap_missing:
            raise
        raise SourceError("missing file", file=rel) from e
    try:
        return json.loads(text)
    except ValueError as e:
        raise SourceError(f"not valid JSON: {e}", file=rel) from e


def read_parquet(fs: fsspec.AbstractFileSystem, path: str, rel: str, columns: list[str] | None = None, *,
                 episode: int | None = None, retry: Retry | None = None) -> pa.Table:
    """Read a parquet file through fsspec, turning I/O and format faults into SourceError naming the file (and
    ``episode``, the one the caller was reading it for); ``retry``: see ``open_file``."""
    try:
        with open_file(fs, path, rel, retry=retry, episode=episode) as f:
            return read_parquet_table(f, columns=columns)
    except FileNotFoundError as e:
        raise SourceError("missing file", file=rel, episode=episode) from e
    except (pa.ArrowInvalid, OSError) as e:
        raise SourceError(f"unreadable parquet: {e}", file=rel, episode=episode) from e


def tasks_of(table: pa.Table) -> dict[int, str]:
    """task_index -> task string of a meta/tasks.parquet table (pandas writes the task as the index)."""
    names = table.column_names
    text_col = "task" if "task" in names else "__index_level_0__" if "__index_level_0__" in names else None
    if text_col is None or "task_index" not in names:
        raise SourceError(f"tasks.parquet needs 'task_index' and 'task' columns, has {names}", file=TASKS_PATH)
    return dict(zip(table.column("task_index").to_pylist(), table.column(text_col).to_pylist(), strict=True))


class LeRobotSource:
    """A LeRobot v3.0 dataset at a local path or fsspec URL.

    Reads are lazy and cached: ``info``, ``episodes`` and ``tasks`` touch only meta/; ``episode_rows`` reads one
    data file (the last one is kept, since episodes are usually visited in file order).

    ``retry``: transient faults of remote reads are retried as this ``Retry`` says (formats/transient.py), then
    raise SourceReadError naming the file; None (the default): not retried, raised as the filesystem raises them.
    """

    def __init__(self, url: str, *, storage_options: dict[str, Any] | None = None,
                 retry: Retry | None = None) -> None:
        self.url = str(url)
        self.storage_options = dict(storage_options or {})
        self.retry = retry
        self._fs_pid = -1
        self._fs: fsspec.AbstractFileSystem | None = None
        self.root = fsspec.core.url_to_fs(self.url, **self.storage_options)[1].rstrip("/")
        self._table_cache: tuple[str, pa.Table] | None = None

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """This process's filesystem: rebuilt after a fork, since async ones (http) are not fork-safe."""
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs = fsspec.core.url_to_fs(self.url, **self.storage_options)[0]
            self._fs_pid = os.getpid()
        return self._fs

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"], state["_fs_pid"] = None, -1  # pickled to DataLoader workers: each builds its own
        return state

    # -- paths and files --------------------------------------------------------------------------------
    def path(self, rel: str) -> str:
        """Absolute filesystem path (for self.fs) of a dataset-relative path."""
        return posixpath.join(self.root, rel) if self.root else rel

    def open(self, rel: str, mode: str = "rb", *, episode: int | None = None, **kwargs: Any) -> IO[bytes]:
        """Open a dataset-relative file (missing files raise SourceError naming it, and ``episode``, the one it is
        read for; with ``retry``, a remote file is a RetryingFile: see ``open_file``)."""
        try:
            return open_file(self.fs, self.path(rel), rel, mode, retry=self.retry, episode=episode, **kwargs)
        except FileNotFoundError as e:
            raise SourceError("missing file", file=rel, episode=episode) from e

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel))

    def _call(self, fn: Callable[[], T], rel: str, *, episode: int | None = None) -> T:
        """``fn()``, a filesystem call about ``rel`` (its size, a listing), with this source's retries."""
        if self.retry is None:
            return fn()
        return retrying(fn, name=rel, retry=self.retry, error=SourceReadError, episode=episode)

    def size(self, rel: str) -> int:
        """A file's size in bytes (FileNotFoundError when it is missing)."""
        return self._call(lambda: self.fs.size(self.path(rel)), rel)

    def file_info(self, rel: str) -> dict[str, Any]:
        """fsspec's ``info`` of a file: size and whatever content hash the store keeps (FileNotFoundError when it
        is missing)."""
        return self._call(lambda: self.fs.info(self.path(rel)), rel)

    def _present(self, rel: str) -> bool:
        """Whether a file exists. With retries, asked with ``info``: over HTTP fsspec's ``exists`` is False for any
        failed request, so a 503 would end a walk of the episode files early."""
        if self.retry is None:
            return self.exists(rel)
        try:
            self.file_info(rel)
        except FileNotFoundError:
            return False
        return True

    # -- metadata ---------------------------------------------------------------------------------------
    # info and stats are opened directly, not after an ``exists`` check: over HTTP, fsspec's ``exists`` is False
    # for any failed request, so a transient 503 would read as "not a LeRobot dataset" or "no stats". Opening
    # tells a missing file (FileNotFoundError) from a fault, which then propagates as the I/O error it is.
    @cached_property
    def info(self) -> SourceInfo:
        try:
            raw = _read_json(self.fs, self.path(INFO_PATH), INFO_PATH, wrap_missing=False, retry=self.retry)
        except (FileNotFoundError, NotADirectoryError) as e:  # NotADirectoryError: the URL names a file
            raise SourceError(f"not a LeRobot v3 dataset: {self.url} has no {INFO_PATH}", file=INFO_PATH) from e
        return SourceInfo.from_dict(raw)

    @property
    def fps(self) -> int:
        return self.info.fps

    @property
    def camera_keys(self) -> list[str]:
        return self.info.camera_keys

    @cached_property
    def stats(self) -> dict[str, Any] | None:
        """meta/stats.json, or None when the dataset has none."""
        try:
            return _read_json(self.fs, self.path(STATS_PATH), STATS_PATH, wrap_missing=False, retry=self.retry)
        except FileNotFoundError:
            return None

    @cached_property
    def tasks(self) -> dict[int, str]:
        """task_index -> task string, from meta/tasks.parquet (pandas writes the task as the index)."""
        return tasks_of(read_parquet(self.fs, self.path(TASKS_PATH), TASKS_PATH, retry=self.retry))

    def episode_files(self) -> list[str]:
        """The meta/episodes parquet files, dataset-relative, sorted."""
        try:
            pattern = self.path(EPISODES_DIR) + "/chunk-*/file-*.parquet"
            found = self._call(lambda: self.fs.glob(pattern), EPISODES_DIR)
        except (OSError, NotImplementedError, ValueError):
            found = []  # e.g. a plain HTTP server without directory listings
        prefix = self.root + "/" if self.root else ""
        rels = sorted(p[len(prefix) :] if p.startswith(prefix) else p for p in found)
        if not rels:
            rels = self._probe_episode_files()
        if not rels:
            raise SourceError("no episode metadata files", file=EPISODES_DIR + "/chunk-*/file-*.parquet")
        return rels

    def _probe_episode_files(self) -> list[str]:
        """Where listing is impossible, walk LeRobot's file numbering (file_index wraps at chunks_size)."""
        return numbered_episode_files(int(self.info.raw.get("chunks_size") or 1000), self._present)

    @cached_property
    def episodes(self) -> list[EpisodeMeta]:
        """Every episode, sorted by episode_index, with consistency checks against info.json."""
        info = self.info
        cams = info.camera_keys
        out: list[EpisodeMeta] = []
        for rel in self.episode_files():
            table = read_parquet(self.fs, self.path(rel), rel, retry=self.retry)
            need = list(EPISODE_COLUMNS) + ["data/chunk_index", "data/file_index"]
            for cam in cams:
                need += [f"videos/{cam}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
            missing = [c for c in need if c not in table.column_names]
            if missing:
                raise SourceError(f"episodes metadata lacks columns {missing}", file=rel)
            cols = {c: table.column(c).to_pylist() for c in need}
            tasks = table.column("tasks").to_pylist() if "tasks" in table.column_names else [[]] * table.num_rows
            for i in range(table.num_rows):
                ep = int(cols["episode_index"][i])
                data_path = info.data_path.format(
                    chunk_index=int(cols["data/chunk_index"][i]), file_index=int(cols["data/file_index"][i])
                )
                videos = {}
                for cam in cams:
                    if info.video_path is None:
                        raise SourceError("info.json has video features but no video_path", file=INFO_PATH)
                    videos[cam] = VideoSpan(
                        key=cam,
                        path=info.video_path.format(
                            video_key=cam,
                            chunk_index=int(cols[f"videos/{cam}/chunk_index"][i]),
                            file_index=int(cols[f"videos/{cam}/file_index"][i]),
                        ),
                        from_timestamp=float(cols[f"videos/{cam}/from_timestamp"][i]),
                        to_timestamp=float(cols[f"videos/{cam}/to_timestamp"][i]),
                    )
                meta = EpisodeMeta(
                    index=ep,
                    length=int(cols["length"][i]),
                    tasks=tuple(tasks[i] or ()),
                    data_path=data_path,
                    from_index=int(cols["dataset_from_index"][i]),
                    to_index=int(cols["dataset_to_index"][i]),
                    videos=videos,
                )
                if meta.to_index - meta.from_index != meta.length or meta.length <= 0:
                    raise SourceError(
                        f"dataset_from_index={meta.from_index}, dataset_to_index={meta.to_index} disagree with "
                        f"length={meta.length}",
                        file=rel,
                        episode=ep,
                    )
                out.append(meta)
        out.sort(key=lambda e: e.index)
        seen = set()
        for e in out:
            if e.index in seen:
                raise SourceError("episode listed twice in episodes metadata", file=EPISODES_DIR, episode=e.index)
            seen.add(e.index)
        return out

    def episode(self, index: int) -> EpisodeMeta:
        for e in self.episodes:
            if e.index == index:
                return e
        raise KeyError(f"episode {index} not in {self.url}")

    # -- tables -----------------------------------------------------------------------------------------
    def data_table(self, rel: str, *, episode: int | None = None) -> pa.Table:
        """A whole data parquet file (cached: the last file read); ``episode`` is named in errors."""
        if self._table_cache is not None and self._table_cache[0] == rel:
            return self._table_cache[1]
        table = read_parquet(self.fs, self.path(rel), rel, episode=episode, retry=self.retry)
        self._table_cache = (rel, table)
        return table

    def episode_rows(self, ep: EpisodeMeta) -> pa.Table:
        """The episode's rows in frame order, all columns, checked against its metadata."""
        table = self.data_table(ep.data_path, episode=ep.index)
        missing = [k for k in self.info.tabular_keys if k not in table.column_names]
        if missing:
            raise SourceError(f"data parquet lacks feature columns {missing}", file=ep.data_path, episode=ep.index)
        eps = table.column("episode_index").to_numpy()
        rows = table.filter(pa.array(eps == ep.index))
        if rows.num_rows != ep.length:
            raise SourceError(
                f"data has {rows.num_rows} rows for the episode, metadata says length {ep.length}",
                file=ep.data_path,
                episode=ep.index,
            )
        index = rows.column("index").to_numpy()
        frame = rows.column("frame_index").to_numpy()
        if index[0] != ep.from_index or (index[1:] - index[:-1] != 1).any() or (frame != range(ep.length)).any():
            raise SourceError(
                f"rows are not frames {ep.from_index}..{ep.to_index - 1} in order "
                f"(index {index[0]}..{index[-1]})",
                file=ep.data_path,
                episode=ep.index,
            )
        if "task_index" in rows.column_names:  # LeRobot looks each row's task up in meta/tasks.parquet
            unknown = set(pc.unique(rows.column("task_index")).to_pylist()) - set(self.tasks)
            if unknown:
                raise SourceError(f"task_index {sorted(unknown, key=str)} not in meta/tasks.parquet", file=ep.data_path,
                                  episode=ep.index)
        for key in self.info.tabular_keys:  # LeRobot gives a null row None where the others are tensors
            bad = null_rows(rows.column(key)) if is_numeric_feature(self.info.features[key]) else []
            if bad:
                more = f" (and {len(bad) - 1} more rows)" if len(bad) > 1 else ""
                raise SourceError(f"column {key!r} is null or holds a null at frame_index {bad[0]}{more}: LeRobot "
                                  f"returns None there instead of a {self.info.features[key].get('dtype')} tensor",
                                  file=ep.data_path, episode=ep.index)
        if self.info.camera_keys and "timestamp" in rows.column_names:
            # Video frames are looked up at from_timestamp + timestamp (LeRobot, the readers), so a timestamp that
            # is not frame_index / fps would fetch another frame or fail the 1e-4 s check mid-training.
            ts = rows.column("timestamp").to_numpy().astype(np.float64)
            want = (frame / self.info.fps).astype(np.float32).astype(np.float64)  # what LeRobot's writer stores
            off = np.nan_to_num(np.abs(ts - want), nan=np.inf)  # a NaN timestamp is off by any tolerance
            k = int(np.argmax(off))
            if off[k] > TIMESTAMP_TOLERANCE_S:
                raise SourceError(
                    f"frame_index {k} has timestamp {ts[k]:.6f}s, not frame_index / fps = {want[k]:.6f}s "
                    f"(tolerance {TIMESTAMP_TOLERANCE_S}s): its video frame cannot be found",
                    file=ep.data_path,
                    episode=ep.index,
                )
        return rows

    # -- identity ---------------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A cheap identity of the source: meta/ contents plus the name and size of every data and video file."""
        h = hashlib.sha256()
        for rel in [INFO_PATH, TASKS_PATH, *self.episode_files()]:
            with self.open(rel) as f:
                h.update(rel.encode() + b"\0" + f.read())
        files = set()
        for e in self.episodes:
            files.add(e.data_path)
            files.update(v.path for v in e.videos.values())
        for rel in sorted(files):
            try:
                size = self.size(rel)
            except FileNotFoundError as e:
                raise SourceError("missing file", file=rel) from e
            h.update(f"{rel}\0{size}\n".encode())
        return "sha256:" + h.hexdigest()
