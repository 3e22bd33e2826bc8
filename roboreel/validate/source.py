"""Checks for a LeRobot v3.0 dataset: info.json, meta/episodes, tasks, data row groups and the mp4s.

Unlike ``formats.lerobot_v3.LeRobotSource``, which stops at the first inconsistency (a reader must), these
checks keep going and report every violation with its file, row group and episode.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3_layout import version_message
from roboreel.validate._io import Root, progress_bar
from roboreel.validate.cameras import check_channels, check_size
from roboreel.validate.media import CountMode, VideoProbeError, probe_video
from roboreel.validate.report import Report, Severity
from roboreel.validate.rowgroups import scan_data

logger = logging.getLogger(__name__)

TOLERANCE_S = v3.TIMESTAMP_TOLERANCE_S  # LeRobot's default: a queried timestamp against a frame's pts
_FPS_RTOL = 1e-3  # relative difference between an mp4's frame spacing and 1/fps that counts as another rate


def _frame_step(pts_s: tuple[float, ...] | None) -> float | None:
    """The median spacing of an mp4's frames in seconds (None when there are fewer than two timestamps)."""
    if pts_s is None or len(pts_s) < 2:
        return None
    steps = sorted(b - a for a, b in zip(pts_s, pts_s[1:], strict=False))
    step = steps[len(steps) // 2]
    return step if step > 0 else None


@dataclass
class SourceMeta:
    """What the metadata says, as far as it could be read (episodes None when meta/episodes is unusable)."""

    info: v3.SourceInfo
    episodes: list[v3.EpisodeMeta] | None


def read_info(root: Root, report: Report, *, unreadable: Severity = "fatal") -> v3.SourceInfo | None:
    """meta/info.json, or None after reporting why it cannot be used."""
    try:
        with root.open(v3.INFO_PATH) as f:
            raw = json.loads(f.read())
    except FileNotFoundError:
        report.add(unreadable, "not-a-dataset", "no meta/info.json", file=v3.INFO_PATH)
        return None
    except (ValueError, OSError) as e:
        report.add(unreadable, "info-unreadable", f"not valid JSON: {e}", file=v3.INFO_PATH)
        return None
    if isinstance(raw, dict) and raw.get("codebase_version") != v3.CODEBASE_VERSION:
        report.add(unreadable, "version-unsupported", version_message(raw.get("codebase_version")),
                   file=v3.INFO_PATH)
        return None
    try:
        return v3.SourceInfo.from_dict(raw)
    except SourceError as e:
        report.add(unreadable, "info-unreadable", str(e), file=v3.INFO_PATH)
        return None


def _episode_rows(rel: str, table, info: v3.SourceInfo, videos: bool, report: Report) -> list[v3.EpisodeMeta]:
    need = ["episode_index", "length", "dataset_from_index", "dataset_to_index", "data/chunk_index", "data/file_index"]
    if videos:
        for cam in info.camera_keys:
            need += [f"videos/{cam}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    missing = [c for c in need if c not in table.column_names]
    if missing:
        report.error("episodes-meta-unreadable", f"lacks columns {missing}", file=rel)
        return []
    if videos and info.camera_keys and not info.video_path:
        report.error("episodes-meta-unreadable", "info.json has video features but no video_path", file=v3.INFO_PATH)
        videos = False
    cols = {c: table.column(c).to_pylist() for c in need}
    tasks = table.column("tasks").to_pylist() if "tasks" in table.column_names else [None] * table.num_rows
    out = []
    for i in range(table.num_rows):
        ep = int(cols["episode_index"][i])
        try:
            spans = {}
            for cam in info.camera_keys if videos else ():
                spans[cam] = v3.VideoSpan(
                    key=cam,
                    path=info.video_path.format(video_key=cam, chunk_index=int(cols[f"videos/{cam}/chunk_index"][i]),
                                                file_index=int(cols[f"videos/{cam}/file_index"][i])),
                    from_timestamp=float(cols[f"videos/{cam}/from_timestamp"][i]),
                    to_timestamp=float(cols[f"videos/{cam}/to_timestamp"][i]),
                )
            meta = v3.EpisodeMeta(
                index=ep, length=int(cols["length"][i]), tasks=tuple(tasks[i] or ()),
                data_path=info.data_path.format(chunk_index=int(cols["data/chunk_index"][i]),
                                                file_index=int(cols["data/file_index"][i])),
                from_index=int(cols["dataset_from_index"][i]), to_index=int(cols["dataset_to_index"][i]), videos=spans,
            )
        except (TypeError, ValueError, KeyError, IndexError) as e:
            report.error("episodes-meta-unreadable", f"row {i} cannot be read: {e!r}", file=rel, episode=ep)
            continue
        if meta.to_index - meta.from_index != meta.length or meta.length <= 0:
            report.error("episode-meta-range", f"dataset_from_index={meta.from_index}, dataset_to_index="
                         f"{meta.to_index} disagree with length={meta.length}", file=rel, episode=ep)
        out.append(meta)
    return out


def read_episodes(root: Root, info: v3.SourceInfo, report: Report, *, videos: bool = True) -> list[v3.EpisodeMeta] | None:
    """Every row of meta/episodes that can be read, sorted by index; None when there is no usable file."""
    files = list(root.find(v3.EPISODES_DIR, ".parquet"))
    if not files:
        report.error("episodes-meta-unreadable", "no meta/episodes/chunk-*/file-*.parquet", file=v3.EPISODES_DIR)
        return None
    episodes: dict[int, v3.EpisodeMeta] = {}
    for rel in files:
        try:
            table = v3.read_parquet(root.fs, root.path(rel), rel)
        except SourceError as e:
            report.error("episodes-meta-unreadable", str(e), file=rel)
            continue
        for meta in _episode_rows(rel, table, info, videos, report):
            if meta.index in episodes:
                report.error("episode-meta-duplicate", "listed twice in meta/episodes", file=rel, episode=meta.index)
                continue
            episodes[meta.index] = meta
    out = [episodes[k] for k in sorted(episodes)]
    for prev, cur in zip(out, out[1:], strict=False):
        if cur.from_index != prev.to_index:
            report.warning("episode-index-gap", f"dataset_from_index={cur.from_index}, but episode {prev.index} "
                           f"ends at dataset_to_index={prev.to_index}", file=v3.EPISODES_DIR, episode=cur.index)
    raw = info.raw
    if "total_episodes" in raw and raw["total_episodes"] != len(out):
        report.error("info-totals", f"total_episodes={raw['total_episodes']}, meta/episodes lists {len(out)}",
                     file=v3.INFO_PATH)
    frames = sum(e.length for e in out)
    if "total_frames" in raw and raw["total_frames"] != frames:
        report.error("info-totals", f"total_frames={raw['total_frames']}, meta/episodes lengths sum to {frames}",
                     file=v3.INFO_PATH)
    report.checked["episodes"] += len(out)
    return out


def check_tasks(root: Root, report: Report) -> set[int] | None:
    """The task indices meta/tasks.parquet lists, or None after reporting why it cannot be read."""
    try:
        table = v3.read_parquet(root.fs, root.path(v3.TASKS_PATH), v3.TASKS_PATH)
    except SourceError as e:
        report.error("tasks-unreadable", str(e), file=v3.TASKS_PATH)
        return None
    if "task_index" not in table.column_names:
        report.error("tasks-unreadable", f"no task_index column (has {table.column_names})", file=v3.TASKS_PATH)
        return None
    return set(table.column("task_index").to_pylist())


def check_videos(root: Root, info: v3.SourceInfo, episodes: list[v3.EpisodeMeta], report: Report, *,
                 count: CountMode = "packets", progress: bool = False) -> None:
    """Each camera's mp4s exist, open, and hold a frame for every timestamp of every episode span they host."""
    hosted: dict[tuple[str, str], list[v3.EpisodeMeta]] = defaultdict(list)
    for e in episodes:
        for cam, span in e.videos.items():
            hosted[(cam, span.path)].append(e)
    fps = info.fps
    for (cam, rel), eps in progress_bar(sorted(hosted.items()), enabled=progress, desc="videos", unit="mp4"):
        report.checked["videos"] += 1
        indices = [e.index for e in eps]
        if not root.exists(rel):
            report.error("video-missing", f"mp4 of camera {cam!r} does not exist", file=rel, episodes=indices)
            continue
        try:
            with root.open(rel) as f:
                probe = probe_video(f, mode=count)
        except (VideoProbeError, OSError) as e:
            report.error("video-unreadable", f"cannot read the mp4: {e}", file=rel, episodes=indices)
            continue
        if probe.video_streams > 1:
            report.error("video-streams", f"mp4 holds {probe.video_streams} video streams; a camera file holds one "
                         "(which one LeRobot reads is its FFmpeg's choice)", file=rel, episodes=indices)
        if probe.rotation:
            report.error("video-rotation", f"frames carry a display rotation of {probe.rotation} degrees: LeRobot "
                         "returns them rotated, which compile cannot carry", file=rel, episodes=indices)
        feature = info.features.get(cam, {})
        feat = feature.get("info") or {}
        want_codec = feat.get("video.codec")
        if want_codec and want_codec != probe.codec:
            report.warning("video-codec-mismatch", f"codec {probe.codec!r}, info.json says {want_codec!r}", file=rel)
        want = (feat.get("video.height"), feat.get("video.width"))
        if None not in want and want != (probe.height, probe.width):
            report.warning("video-codec-mismatch", f"size {probe.height}x{probe.width}, info.json says "
                           f"{want[0]}x{want[1]}", file=rel)
        check_size(probe, feature, report, source=True, file=rel)
        check_channels(probe, feature, report, source=True, file=rel, episodes=indices)
        step = _frame_step(probe.pts_s)
        fps_ok = step is None or abs(step * fps - 1) <= _FPS_RTOL
        if not fps_ok:
            # Every frame lookup (LeRobot's and compile's) assumes frame k at from_timestamp + k/fps.
            report.error("video-fps-mismatch", f"frames are {step:.6f}s apart ({1 / step:.3f} fps), info.json "
                         f"says fps {fps}", file=rel, episodes=indices)
        for e in eps:
            span = e.videos[cam]
            first = round(span.from_timestamp * fps)  # LeRobot's timestamp -> frame rule
            if round((span.to_timestamp - span.from_timestamp) * fps) != e.length:
                report.error("video-span-mismatch", f"span {span.from_timestamp:.4f}-{span.to_timestamp:.4f}s at "
                             f"{fps} fps is not {e.length} frames", file=rel, episode=e.index)
            if probe.frames < first + e.length:
                report.error("video-too-short", f"mp4 has {probe.frames} frames, the episode needs frames "
                             f"{first}..{first + e.length - 1} ({span.from_timestamp:.4f}-{span.to_timestamp:.4f}s)",
                             file=rel, episode=e.index)
            elif fps_ok and probe.pts_s is not None:
                _check_span_timestamps(probe.pts_s[first:first + e.length], span.from_timestamp, fps, report,
                                       file=rel, episode=e.index)


def _check_span_timestamps(pts_s: Sequence[float], from_s: float, fps: int, report: Report, **where: Any) -> None:
    """Every frame k of a span within LeRobot's tolerance of from_timestamp + k/fps: LeRobotDataset refuses
    a sample whose frame is further (and compile does too, naming it)."""
    off = [(k, t - (from_s + k / fps)) for k, t in enumerate(pts_s)]
    bad = [(k, d) for k, d in off if not abs(d) < TOLERANCE_S]
    if bad:
        k, d = max(bad, key=lambda kd: abs(kd[1]))
        report.error("video-timestamp", f"{len(bad)} of the episode's {len(pts_s)} frames are off their timestamp "
                     f"by more than LeRobot's tolerance_s={TOLERANCE_S:g}s (frame {k}: {pts_s[k]:.6f}s, "
                     f"{d * 1e3:+.3f} ms from from_timestamp + {k}/{fps}): LeRobotDataset cannot read those samples",
                     **where)


def check_stats(root: Root, report: Report) -> None:
    """meta/stats.json, when there is one, is a JSON object (LeRobot's load fails on anything else; compile
    carries it and refuses one it cannot parse)."""
    try:
        with root.open(v3.STATS_PATH) as f:
            raw = json.loads(f.read())
    except FileNotFoundError:
        return  # a dataset without stats: LeRobot's meta.stats is None
    except (ValueError, OSError) as e:
        report.error("stats-unreadable", f"not valid JSON: {e}", file=v3.STATS_PATH)
        return
    if not isinstance(raw, dict):
        report.error("stats-unreadable", "not a JSON object", file=v3.STATS_PATH)


def check_source(root: Root, report: Report, *, videos: bool = True, count: CountMode = "packets",
                 progress: bool = False, unreadable: Severity = "fatal",
                 clip_keys: Collection[str] = ()) -> SourceMeta | None:
    """Every v3 check on ``root``; returns the metadata read, or None when info.json is unusable.

    ``videos=False`` skips the mp4 checks (a compiled dataset's meta describes data/ only; clips are in shards).
    ``unreadable`` is the severity of an unusable info.json ("fatal" for a source; "error" inside a compiled
    dataset, whose manifest is still readable). ``clip_keys``: features a compiled dataset stores as clips,
    so not in data/ (image features compiled with ``--images clips``).
    """
    info = read_info(root, report, unreadable=unreadable)
    if info is None:
        return None
    tasks = check_tasks(root, report)
    check_stats(root, report)
    episodes = read_episodes(root, info, report, videos=videos)
    in_data = replace(info, features={k: f for k, f in info.features.items() if k not in clip_keys})
    scan_data(root, in_data, episodes, report, progress=progress, tasks=tasks)
    if videos and episodes and info.camera_keys and info.video_path:
        check_videos(root, info, episodes, report, count=count, progress=progress)
    return SourceMeta(info=info, episodes=episodes)
