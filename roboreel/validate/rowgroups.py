"""Data parquet checks, one row group at a time: every row group holds exactly one episode, no episode spans
row groups, and each episode's rows are exactly its frames.

Why row groups matter: roboreel (and LeRobot since its PR #3807) reads one episode's rows as one row group.
Only three int64 columns are read, one row group at a time, and each episode keeps a few integers per row group
it appears in, so memory stays flat however large the dataset.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from roboreel.formats import lerobot_v3_layout as v3
from roboreel.formats.columns import declared_type_problem, is_numeric_feature, null_rows, undeclared_columns
from roboreel.validate._io import Root, progress_bar
from roboreel.validate.images import check_image_rowgroup
from roboreel.validate.report import Report

_KEYS = ["episode_index", "index", "frame_index"]
TIMESTAMP_TOLERANCE_S = v3.TIMESTAMP_TOLERANCE_S
# Not LeRobot's layout since its PR #3807, but what 0.6.1's own delete_episodes (dataset_tools) still writes
_MULTI_HINT = ("compile accepts it; one row group per episode: lerobot.datasets.io_utils."
               "write_table_one_row_group_per_episode")


@dataclass(frozen=True)
class Segment:
    """The rows of one episode inside one row group."""

    file: str
    row_group: int
    rows: int
    first_index: int
    last_index: int
    first_frame: int
    contiguous: bool  # index and frame_index both step by exactly 1 inside the segment
    worst_timestamp: tuple[float, int] | None = None  # (|timestamp - frame_index / fps|, frame_index), largest

    @property
    def place(self) -> str:
        return f"{self.file} row group {self.row_group}"


def expected_timestamps(frame_index: np.ndarray, fps: int) -> np.ndarray:
    """frame_index / fps as LeRobot's writer stores it (float32), in float64 for comparisons."""
    return (frame_index / fps).astype(np.float32).astype(np.float64)


def _segments(rel: str, rg: int, table: pa.Table, fps: int) -> dict[int, Segment]:
    eps = table.column("episode_index").to_numpy()
    index = table.column("index").to_numpy()
    frame = table.column("frame_index").to_numpy()
    # A row's video frame is found at from_timestamp + timestamp, so timestamp must be frame_index / fps.
    ts_err = (np.nan_to_num(np.abs(table.column("timestamp").to_numpy().astype(np.float64)
                                   - expected_timestamps(frame, fps)), nan=np.inf)  # NaN: off by any tolerance
              if "timestamp" in table.column_names else None)
    # Group rows by episode with one stable sort (old datasets hold thousands of episodes per row group, where a
    # mask per episode would be quadratic); rows keep their file order inside each group.
    order = np.argsort(eps, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(eps[order]) != 0])
    ends = np.r_[starts[1:], len(order)]
    out = {}
    for a, b in sorted(zip(starts.tolist(), ends.tolist(), strict=True), key=lambda ab: order[ab[0]]):
        rows = order[a:b]  # in order of first appearance in the row group
        idx, fr = index[rows], frame[rows]
        contiguous = bool((np.diff(idx) == 1).all() and (np.diff(fr) == 1).all())
        worst = None
        if ts_err is not None:
            k = int(np.argmax(ts_err[rows]))
            worst = (float(ts_err[rows][k]), int(fr[k]))
        out[int(eps[rows[0]])] = Segment(rel, rg, b - a, int(idx[0]), int(idx[-1]), int(fr[0]), contiguous, worst)
    return out


def _scan_file(root: Root, rel: str, info: v3.SourceInfo, report: Report,
               segments: dict[int, list[Segment]], episodes: list[int], tasks: set[int] | None = None) -> bool:
    """Record the segments of every row group of one file; False if the file could not be read."""
    try:
        with root.open(rel) as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            missing = [k for k in info.tabular_keys if k not in names]
            if missing:
                report.error("data-columns-missing", f"lacks feature columns {missing}", file=rel,
                             episodes=episodes or None)
            extra = undeclared_columns(names, info.features)
            if extra:
                report.error("data-columns-undeclared", f"has columns {extra} that info.json does not declare as "
                             "features (LeRobot cannot load the file)", file=rel, episodes=episodes or None)
            for key in info.tabular_keys:
                problem = declared_type_problem(info.features[key], pf.schema_arrow.field(key).type) \
                    if key in names else None
                if problem:
                    report.error("data-column-type", f"column {key!r} {problem}", file=rel,
                                 episodes=episodes or None)
            if any(k not in names for k in _KEYS):
                report.error("data-file-unreadable", f"needs columns {_KEYS} to locate episodes, has {names}", file=rel)
                return False
            numeric = [k for k in info.tabular_keys if k in names and is_numeric_feature(info.features[k])]
            for rg in range(pf.num_row_groups):
                report.checked["row_groups"] += 1
                extra = [c for c in ("timestamp", "task_index") if c in names]
                table = pf.read_row_group(rg, columns=_KEYS + extra, use_threads=False)
                if table.num_rows == 0:
                    continue
                found = _segments(rel, rg, table, info.fps)
                if tasks is not None and "task_index" in names:
                    unknown = set(pc.unique(table.column("task_index")).to_pylist()) - tasks
                    if unknown:  # LeRobot looks each row's task up in meta/tasks.parquet
                        report.error("task-index-unknown", f"task_index {sorted(unknown, key=str)} not in "
                                     "meta/tasks.parquet", file=rel, row_group=rg, episodes=sorted(found))
                check_image_rowgroup(pf, rg, info, report, file=rel, episodes=sorted(found))
                for key in _null_suspects(pf.metadata.row_group(rg), numeric):
                    bad = null_rows(pf.read_row_group(rg, columns=[key], use_threads=False).column(key))
                    if bad:
                        report.error("data-null", f"column {key!r} is null or holds a null in {len(bad)} rows "
                                     f"(row {bad[0]} of the row group first): LeRobot returns None there instead "
                                     "of a tensor", file=rel, row_group=rg, episodes=sorted(found))
                if len(found) > 1:
                    report.warning("rowgroup-multi-episode", f"row group holds {len(found)} episodes ({_MULTI_HINT})",
                                 file=rel, row_group=rg, episodes=list(found))
                for ep, seg in found.items():
                    segments[ep].append(seg)
    except FileNotFoundError:
        return False
    except (pa.ArrowException, OSError, ValueError) as e:
        report.error("data-file-unreadable", f"unreadable parquet: {e}", file=rel)
        return False
    return True


def _null_suspects(rg: pq.RowGroupMetaData, keys: list[str]) -> list[str]:
    """The ``keys`` whose column chunks in row group ``rg`` may hold a null: a null count above 0 in their
    statistics, or no count written (then the column is read to know). A prefix match may name a feature whose
    name extends another's; the read settles it."""
    out = []
    for key in keys:
        for j in range(rg.num_columns):
            c = rg.column(j)
            if c.path_in_schema == key or c.path_in_schema.startswith(key + "."):
                st = c.statistics
                if st is None or not st.has_null_count or st.null_count:
                    out.append(key)
                    break
    return out


def _check_episode(meta: v3.EpisodeMeta, segs: list[Segment], report: Report, *, videos: bool) -> None:
    ep = meta.index
    worst = max(((s.worst_timestamp, s) for s in segs if s.worst_timestamp is not None), default=None,
                key=lambda ws: ws[0])  # equal ones (the same rows in two files) are not ordered further
    if worst is not None and worst[0][0] > TIMESTAMP_TOLERANCE_S:
        (err, frame), seg = worst
        # Without videos nothing looks frames up by timestamp: worth knowing, not a violation.
        report.add("error" if videos else "warning", "timestamp-mismatch",
                   f"frame_index {frame} has a timestamp {err:.6f}s from frame_index / fps (tolerance "
                   f"{TIMESTAMP_TOLERANCE_S}s)", file=seg.file, row_group=seg.row_group, episode=ep)
    files = {s.file for s in segs}
    if files != {meta.data_path}:
        report.error("episode-wrong-file", f"rows are in {sorted(files)}, meta/episodes says {meta.data_path}",
                     file=segs[0].file, episode=ep)
    rows = sum(s.rows for s in segs)
    if rows != meta.length:
        report.error("episode-length-mismatch", f"data holds {rows} rows, meta/episodes length is {meta.length}",
                     file=segs[0].file, episode=ep)
    ordered = sorted(segs, key=lambda s: s.first_index)
    ok = ordered[0].first_index == meta.from_index and ordered[-1].last_index == meta.to_index - 1
    for prev, cur in zip(ordered, ordered[1:], strict=False):
        ok = ok and cur.first_index == prev.last_index + 1
    ok = ok and all(s.contiguous and s.first_frame == s.first_index - meta.from_index for s in ordered)
    if not ok:
        runs = ", ".join(f"{s.first_index}..{s.last_index}" for s in ordered)
        report.error("episode-index-mismatch", f"rows have index {runs} (frame_index from "
                     f"{ordered[0].first_frame}{'' if all(s.contiguous for s in ordered) else ', with jumps'}); "
                     f"meta/episodes says {meta.from_index}..{meta.to_index - 1}", file=segs[0].file, episode=ep)


def scan_data(root: Root, info: v3.SourceInfo, episodes: list[v3.EpisodeMeta] | None, report: Report, *,
              progress: bool = False, tasks: set[int] | None = None) -> None:
    """Check every data parquet named by meta/episodes or found under data/, then each episode's rows (and,
    given ``tasks``, meta/tasks.parquet's task indices, that every row's task_index is one)."""
    named: dict[str, list[int]] = defaultdict(list)
    for e in episodes or ():
        named[e.data_path].append(e.index)
    files = sorted(set(named) | set(root.find("data", ".parquet")))
    segments: dict[int, list[Segment]] = defaultdict(list)
    failed: set[str] = set()
    for rel in progress_bar(files, enabled=progress, desc="data", unit="file"):
        report.checked["data_files"] += 1
        if not root.exists(rel):
            report.error("data-file-missing", "data parquet does not exist", file=rel, episodes=named[rel])
            failed.add(rel)
        elif not _scan_file(root, rel, info, report, segments, named.get(rel, []), tasks):
            failed.add(rel)
    by_index = {e.index: e for e in episodes or ()}
    for ep, segs in sorted(segments.items()):
        if len(segs) > 1:
            one_file = len({s.file for s in segs}) == 1
            places = ", ".join(str(s.row_group) if one_file else s.place for s in segs)
            report.warning("episode-split-rowgroups", f"rows spread over {len(segs)} row groups: {places}",
                         file=segs[0].file, episode=ep)
        if episodes is not None and ep not in by_index:
            report.error("episode-not-in-meta", f"{sum(s.rows for s in segs)} rows of an episode meta/episodes "
                         "does not list", file=segs[0].file, episode=ep)
        elif ep in by_index:
            _check_episode(by_index[ep], segs, report, videos=bool(info.camera_keys))
    for e in episodes or ():
        if e.index not in segments and e.data_path not in failed:
            report.error("episode-rows-missing", f"no rows in the data (meta/episodes says {e.data_path})",
                         file=e.data_path, episode=e.index)
