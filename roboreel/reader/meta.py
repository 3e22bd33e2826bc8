"""``DatasetMeta``: a compiled dataset's metadata in LeRobot's shape (``LeRobotDatasetMetadata``), without LeRobot.

A compiled dataset's meta/ folder *is* a LeRobot v3 meta/ folder (compile/finalize.py rewrites info.json for the
compiled clips and copies stats.json and tasks.parquet byte for byte), so this reads it the way LeRobot does and
hands out the same values: ``features`` (shapes as tuples), ``stats`` (numpy arrays, ``np.atleast_1d`` like
LeRobot's ``cast_stats_to_numpy``), ``tasks`` (a pandas DataFrame indexed by task), ``episodes`` (rows and
columns of meta/episodes without the ``stats/`` columns). That is what ``make_policy(cfg, ds_meta=...)``,
``make_pre_post_processors(dataset_stats=...)`` and ``lerobot-train`` read.

Everything is read on first use (training code that never asks for episodes never reads them), through fsspec
with the dataset's storage options (local or remote). ``stats`` is a plain mutable dict on purpose: lerobot-train
writes ImageNet statistics into it. Pickling (to DataLoader workers) keeps info and stats, which are small and may
have been edited, and drops the episode and task tables, which grow with the dataset and are read again on use.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from roboreel.formats.depth import depth_keys, stats_factor
from roboreel.formats.errors import CompiledFormatError, ShardReadError, SourceError
from roboreel.formats.lerobot_v3 import (
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    LeRobotSource,
    SourceInfo,
    read_parquet,
)
from roboreel.formats.table_features import (
    LANGUAGE_COLUMNS,  # their presence: lerobot-train's language collate
)
from roboreel.formats.transient import Retry, http_defaults, is_transient, retrying

_CAMERA_DTYPES = ("video", "image")


def stats_to_numpy(stats: Any) -> Any:
    """stats.json values -> numpy arrays, as LeRobot's ``cast_stats_to_numpy`` (``np.atleast_1d(np.array(v))``
    on every leaf; nested dicts kept)."""
    if isinstance(stats, dict):
        return {k: stats_to_numpy(v) for k, v in stats.items()}
    return np.atleast_1d(np.array(stats))


def rescale_depth_stats(stats: dict[str, Any], features: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Depth stats from their recorded unit to the one the reader returns (mm), as LeRobotDataset does on load
    (``rescale_depth_stats``: every entry but ``count`` times the factor)."""
    for key in depth_keys(features):
        factor = stats_factor(features[key])
        if factor != 1.0 and key in stats:
            stats[key] = {k: v if k == "count" else v * factor for k, v in stats[key].items()}
    return stats


class EpisodeTable:
    """meta/episodes as LeRobot's training code reads it (a ``datasets.Dataset`` there): ``table["column"]`` is
    the column as a list, ``table[i]`` the i-th row as a dict, ``len(table)`` the number of episodes.

    Rows are sorted by episode_index (compile writes them so). The ``stats/...`` columns are left out, as LeRobot's
    ``load_episodes`` does."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table.select([c for c in table.column_names if not c.startswith("stats/")])
        self._columns: dict[str, list[Any]] = {}

    @property
    def column_names(self) -> list[str]:
        return list(self.table.column_names)

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            if key not in self._columns:
                if key not in self.table.column_names:
                    raise KeyError(f"meta/episodes has no column {key!r} (columns: {self.column_names})")
                self._columns[key] = self.table.column(key).to_pylist()
            return self._columns[key]
        i = int(key)
        if not -len(self) <= i < len(self):
            raise IndexError(f"episode row {i} out of range ({len(self)} episodes)")
        return self.table.slice(i % len(self), 1).to_pylist()[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.table.to_pylist()

    def to_pandas(self) -> Any:
        return self.table.to_pandas()


class FeatureKeys:
    """What LeRobot's ``LeRobotDatasetMetadata`` derives from ``info`` (features, fps, totals, the key lists), and
    its ``stats`` slot, for one dataset's meta and a mixture's merged one alike (each gives ``info`` and
    ``_read_stats``)."""

    info: dict[str, Any]
    _stats: dict[str, dict[str, np.ndarray]] | None = None
    _stats_read = False

    def _read_stats(self) -> dict[str, dict[str, np.ndarray]] | None:
        raise NotImplementedError

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]] | None:
        """The stats, read on first use (``_read_stats``); mutable, as in LeRobot: lerobot-train writes ImageNet
        stats into it, and edits stay on this object."""
        if not self._stats_read:
            self._stats, self._stats_read = self._read_stats(), True
        return self._stats

    @stats.setter
    def stats(self, value: dict[str, dict[str, Any]] | None) -> None:
        self._stats, self._stats_read = value, True

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def fps(self) -> int:
        return int(self.info["fps"])

    @property
    def total_episodes(self) -> int:
        return int(self.info["total_episodes"])

    @property
    def total_frames(self) -> int:
        return int(self.info["total_frames"])

    @property
    def camera_keys(self) -> list[str]:
        """Visual features, video or image (LeRobot's order: info.json's)."""
        return [k for k, f in self.features.items() if f["dtype"] in _CAMERA_DTYPES]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] == "image"]

    @property
    def depth_keys(self) -> list[str]:
        return depth_keys(self.features)

    @property
    def names(self) -> dict[str, Any]:
        return {k: f["names"] for k, f in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(f["shape"]) for k, f in self.features.items()}

    @property
    def has_language_columns(self) -> bool:
        return any(c in self.features for c in LANGUAGE_COLUMNS)


class DatasetMeta(FeatureKeys):
    """LeRobot-shaped metadata of a compiled dataset at ``url`` (see the module doc).

    Args:
        url: the compiled dataset root (local path or fsspec URL).
        storage_options: fsspec options (the dataset's; http(s) gets the reader's per-read timeout unless set).
        repo_id: the name LeRobot shows for the dataset (model cards, logs); default: the root's last path part.
        retry: transient read faults retried per file, as the reader's (``StreamOptions.retry``); default
            ``Retry()``.
        checksums: meta/ path -> sha256 that roboreel.json recorded at compile time (``Manifest.meta_files``):
            info.json and stats.json are checked when read, so an edited or damaged stats.json fails here instead
            of normalizing a policy with other numbers (validate checks every meta/ file).
    """

    def __init__(self, url: str, *, storage_options: dict[str, Any] | None = None, repo_id: str | None = None,
                 retry: Retry | None = None, checksums: dict[str, str] | None = None) -> None:
        self.url = str(url)
        self.checksums = dict(checksums or {})
        self.storage_options = http_defaults(self.url, storage_options)  # a per-read timeout over http(s)
        self.repo_id = repo_id or (self.url.rstrip("/").rsplit("/", 1)[-1] or self.url)
        self.retry = Retry() if retry is None else retry
        # No retries of its own: ``_read`` retries each whole read with this budget (nested ones would multiply)
        self._source = LeRobotSource(self.url, storage_options=self.storage_options)
        self._info: dict[str, Any] | None = None
        self._tasks: Any = None
        self._episodes: EpisodeTable | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tasks"], state["_episodes"] = None, None  # O(episodes): read again where needed
        return state

    def _read(self, fn: Any, rel: str) -> Any:
        return retrying(fn, name=f"{self.url.rstrip('/')}/{rel}", retry=self.retry, error=ShardReadError)

    def _json(self, rel: str, *, missing_ok: bool = False) -> Any:
        """A JSON file of meta/. Opened directly, not after an ``exists`` check: over HTTP a transient 503 makes
        ``exists`` False, which would turn a retryable fault into "no such file" (or silently into no stats)."""
        try:
            with self._source.open(rel) as f:
                text = f.read()
        except SourceError as e:
            # Only a file the store says is not there means "none": fsspec's HTTP info() answers a HEAD and GET
            # that both failed with a FileNotFoundError, which is a busy server when the GET got a 503; raised,
            # it is retried by ``_read`` with the dataset's budget like any other fault of a meta/ read.
            if missing_ok and isinstance(e.__cause__, FileNotFoundError) and not is_transient(e):
                if rel in self.checksums:
                    raise CompiledFormatError("roboreel.json records this file, but it is not there (run roboreel "
                                              "validate)", file=rel) from e
                return None
            raise
        want = self.checksums.get(rel)
        if want is not None and hashlib.sha256(text).hexdigest() != want:
            raise CompiledFormatError("sha256 differs from the one roboreel.json recorded at compile time: the file "
                                      "was edited or damaged since (run roboreel validate; recompile, or restore it)",
                                      file=rel)
        try:
            return json.loads(text)
        except ValueError as e:
            raise SourceError(f"not valid JSON: {e}", file=rel) from e

    def __repr__(self) -> str:
        return f"DatasetMeta({self.url!r}, repo_id={self.repo_id!r})"

    # -- info.json ----------------------------------------------------------------------------------------
    @property
    def info(self) -> dict[str, Any]:
        """meta/info.json as a dict (feature shapes as tuples, like LeRobot's ``DatasetInfo``)."""
        if self._info is None:
            raw = copy.deepcopy(self._read(lambda: SourceInfo.from_dict(self._json(INFO_PATH), file=INFO_PATH),
                                           INFO_PATH).raw)
            for feature in raw["features"].values():
                if isinstance(feature.get("shape"), list):
                    feature["shape"] = tuple(feature["shape"])
            self._info = raw
        return self._info

    @property
    def root(self) -> Path | str:
        """A local root as a Path (as LeRobot's), a remote one as its URL."""
        if "://" not in self.url:
            return Path(self.url)
        if self.url.startswith("file://"):
            return Path(self.url[len("file://"):])
        return self.url

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def total_tasks(self) -> int:
        return int(self.info["total_tasks"])

    @property
    def chunks_size(self) -> int:
        return int(self.info["chunks_size"])

    @property
    def data_path(self) -> str:
        return self.info["data_path"]

    @property
    def video_path(self) -> str | None:
        return self.info.get("video_path")

    # -- stats.json, tasks, episodes ----------------------------------------------------------------------
    def _read_stats(self) -> dict[str, dict[str, np.ndarray]] | None:
        """meta/stats.json as numpy arrays (None when the dataset has none)."""
        raw = self._read(lambda: self._json(STATS_PATH, missing_ok=True), STATS_PATH)
        return None if raw is None else rescale_depth_stats(stats_to_numpy(raw), self.features)

    @property
    def tasks(self) -> Any:
        """meta/tasks.parquet as LeRobot loads it: a pandas DataFrame indexed by the task string (index name
        "task") with a ``task_index`` column. Needs pandas (LeRobot depends on it; roboreel does not)."""
        if self._tasks is None:
            try:
                import pandas as pd
            except ImportError as e:
                raise ImportError("DatasetMeta.tasks is a pandas DataFrame, as in LeRobot: pip install pandas "
                                  "(task strings without pandas: DatasetMeta.task_names)") from e
            by_index = sorted(self._tasks_by_index().items())
            self._tasks = pd.DataFrame({"task_index": np.array([i for i, _ in by_index], dtype=np.int64)},
                                       index=pd.Index([t for _, t in by_index], name="task"))
        return self._tasks

    @property
    def task_names(self) -> list[str]:
        """Task strings in task_index order (no pandas needed)."""
        by_index = self._tasks_by_index()
        return [by_index[i] for i in sorted(by_index)]

    def _tasks_by_index(self) -> dict[int, str]:
        return self._read(lambda: self._source.tasks, TASKS_PATH)

    @property
    def episodes(self) -> EpisodeTable:
        """meta/episodes (rows by episode_index), without the ``stats/`` columns. A compiled dataset has exactly
        one episodes file (compile/finalize.py writes chunk 0, file 0), so nothing is listed: listings are not
        available over plain HTTP, and probing for files would mistake a transient fault for the end."""
        if self._episodes is None:
            src, rel = self._source, EPISODES_PATH.format(chunk_index=0, file_index=0)
            table = self._read(lambda: read_parquet(src.fs, src.path(rel), rel), rel).sort_by("episode_index")
            self._episodes = EpisodeTable(table)
        return self._episodes

    def get_task_index(self, task: str) -> int | None:
        found = [i for i, t in self._tasks_by_index().items() if t == task]
        return found[0] if found else None
