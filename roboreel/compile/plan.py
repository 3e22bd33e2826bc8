"""Check a source before anything is written, and plan episodes -> shards deterministically.

The plan is a pure function of the source's metadata (episode lengths, file names and sizes) and the settings,
so every ``--part K/N`` job and every resumed run computes the same shards without talking to each other.
Shards hold consecutive episodes (good locality: they share source mp4s, decoded with one decoder per job).
"""

from __future__ import annotations

import bisect
import math
import os
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from roboreel.compile.out.paths import MANIFEST
from roboreel.compile.settings import CompileSettings, x265_size_params
from roboreel.compile.source import camera_hw, check_transform, frame_step
from roboreel.formats import lerobot_v3 as v3
from roboreel.formats.columns import declared_type_problem, undeclared_columns
from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import EpisodeMeta, LeRobotSource
from roboreel.formats.table_features import image_keys, image_problem
from roboreel.formats.transient import is_local


def check_source(source: LeRobotSource) -> list[EpisodeMeta]:
    """Every metadata check that needs no video decode; raises SourceError naming file and episode.

    Run before OUT is touched, so bad metadata never leaves anything behind.
    """
    info = source.info  # codebase_version, fps, features
    if source.exists(MANIFEST):  # its meta/ reads as v3, but its frames live in shards, not videos/
        raise SourceError("is a roboreel compiled output, not a LeRobot v3 source: it is compiled already (read it "
                          "with roboreel.CompiledDataset; for other settings, compile the source it came from)",
                          file=MANIFEST)
    tasks = set(source.tasks.values())
    eps = source.episodes  # per-row consistency, duplicates
    if not eps:
        raise SourceError("dataset has no episodes", file=v3.EPISODES_DIR)
    total = info.raw.get("total_episodes")
    if total is not None and total != len(eps):
        raise SourceError(f"total_episodes={total} but meta/episodes lists {len(eps)}", file=v3.INFO_PATH)
    frames = info.raw.get("total_frames")
    if frames is not None and frames != sum(e.length for e in eps):
        raise SourceError(f"total_frames={frames} but episode lengths sum to {sum(e.length for e in eps)}",
                          file=v3.INFO_PATH)
    prev = None
    for e in eps:
        if prev is not None and e.from_index != prev.to_index:
            raise SourceError(
                f"episodes metadata is inconsistent: dataset_from_index={e.from_index} but episode {prev.index} "
                f"ends at {prev.to_index}", file=v3.EPISODES_DIR, episode=e.index,
            )
        prev = e
        missing = [t for t in e.tasks if t not in tasks]
        if missing:
            raise SourceError(f"episode tasks {missing} are not in meta/tasks.parquet", file=v3.EPISODES_DIR,
                              episode=e.index)
        for cam, span in e.videos.items():
            n = (span.to_timestamp - span.from_timestamp) * info.fps
            if span.from_timestamp < 0 or abs(n - e.length) >= 0.5:
                raise SourceError(
                    f"episodes metadata is inconsistent: videos/{cam} span {span.from_timestamp:.6f}s.."
                    f"{span.to_timestamp:.6f}s holds {n:.2f} frames at {info.fps} fps, length is {e.length}",
                    file=span.path, episode=e.index,
                )
    need = list(dict.fromkeys([*info.tabular_keys, *v3.DEFAULT_KEYS]))
    first_ep: dict[str, int] = {}
    for e in eps:
        first_ep.setdefault(e.data_path, e.index)
    for rel, ep in first_ep.items():
        try:
            with source.open(rel, episode=ep) as f:  # a missing file: SourceError naming it and the episode
                schema = pq.read_schema(f)
        except (OSError, ValueError) as err:
            raise SourceError(f"unreadable parquet: {err}", file=rel, episode=ep) from err
        missing = [c for c in need if c not in schema.names]
        if missing:
            raise SourceError(f"data parquet lacks columns {missing}", file=rel, episode=ep)
        extra = undeclared_columns(schema.names, info.features)
        if extra:
            raise SourceError(f"data parquet has columns {extra} that info.json does not declare as features "
                              "(LeRobot cannot load it)", file=rel, episode=ep)
        for key in info.tabular_keys:
            problem = declared_type_problem(info.features[key], schema.field(key).type)
            if problem:
                raise SourceError(f"column {key!r} {problem}", file=rel, episode=ep)
        for key in image_keys(info.features):  # rows without bytes are found when packing (jobs/_shardjob.py)
            problem = image_problem(pa.array([], type=schema.field(key).type))
            if problem:
                raise SourceError(f"image feature {key!r} {problem}", file=rel, episode=ep)
    return eps


def check_encodable(source: LeRobotSource, settings: CompileSettings) -> None:
    """Refuse, before writing anything, camera sizes x265 cannot encode reliably (ValueError naming the camera).

    Cameras whose info says HEVC/H.264 may be stream-copied instead, so only the others (or all, when
    re-encoding or resizing) are checked here; a copy that falls back to encoding is checked when it happens.
    """
    unknown = sorted({key for key, _, _ in settings.resize_cameras} - set(source.camera_keys))
    if unknown:
        raise ValueError(f"--resize names cameras {unknown} the source does not have; its cameras: "
                         f"{source.camera_keys}")
    check_transform(source.info.features, source.fps, settings)  # --fps divides the source's; no parquet images
    for cam in source.camera_keys:
        feature = source.info.features[cam]
        codec = str((feature.get("info") or {}).get("video.codec", "")).lower()
        if (codec in ("hevc", "h265", "h264", "avc") and not settings.reencode and not settings.resizes(cam)
                and frame_step(source.fps, settings.fps) == 1):
            continue
        h, w = settings.camera_size(cam, camera_hw(source.info.features[cam]))
        try:
            x265_size_params(height=h, width=w)
        except ValueError as e:
            raise ValueError(f"camera {cam!r}: {e}") from e
        if h % 2 or w % 2:
            raise ValueError(f"camera {cam!r}: {w}x{h} has odd sides, which yuv420p cannot hold; pass --resize HxW")


def estimate_episode_bytes(
    source: LeRobotSource, episodes: list[EpisodeMeta], settings: CompileSettings
) -> dict[int, float]:
    """Each episode's share of its source files' bytes (video by frames, rows by rows), video scaled by any
    resize and frame rate.

    Only a planning estimate: compiled clips differ from the source's size, but proportionally to it.
    """
    frames_in: dict[str, int] = defaultdict(int)
    for e in episodes:
        frames_in[e.data_path] += e.length
        for span in e.videos.values():
            frames_in[span.path] += e.length
    sizes = {}
    for rel in sorted(frames_in):
        try:
            sizes[rel] = source.size(rel)
        except FileNotFoundError as err:
            owner = next(e.index for e in episodes if rel == e.data_path or rel in
                         {s.path for s in e.videos.values()})
            raise SourceError("missing file", file=rel, episode=owner) from err
    scale = {}
    step = frame_step(source.fps, settings.fps)
    for cam in source.camera_keys:
        h, w = camera_hw(source.info.features[cam])
        th, tw = settings.camera_size(cam, (h, w))
        scale[cam] = th * tw / (h * w) / step
    out = {}
    for e in episodes:
        est = e.length * sizes[e.data_path] / frames_in[e.data_path]
        for cam, span in e.videos.items():
            est += e.length * sizes[span.path] / frames_in[span.path] * scale[cam]
        out[e.index] = est
    return out


def check_apart(source: LeRobotSource, out: str) -> None:
    """Refuse an OUT that is the (local) source or holds it: --overwrite, or the cleanup of a failed first compile,
    removes OUT's contents, and with them the source."""
    if not is_local(source.fs):
        return
    src, dest = os.path.realpath(source.root), os.path.realpath(out)
    if os.path.commonpath([src, dest]) == dest:
        raise ValueError(f"OUT {out} is SRC or a directory holding it ({src}): compile into a directory outside "
                         "the source")


def drop_unasked(settings: CompileSettings, fps: int, features: dict[str, dict[str, Any]]) -> CompileSettings:
    """``settings`` without a ``--fps`` equal to the source's, and without ``--resize`` when every camera it names
    is already that size: they ask for nothing, so the compile is the plain one, byte for byte. Kept, they counted
    as transforms: the camera stats were recomputed from the decoded (lossy) frames in place of the recorder's, the
    clips re-encoded, and the compile record differed from a run that left them out. A dataset with image features keeps
    its ``--resize`` (refused as before: a size for images is not supported)."""
    if settings.fps is not None and settings.fps == fps:
        settings = settings.replace(fps=None)
    if settings.resize is not None or settings.resize_cameras:
        videos = {k: camera_hw(f) for k, f in features.items() if f.get("dtype") == "video"}
        images = any(f.get("dtype") == "image" for f in features.values())
        named = all(key in videos for key, _, _ in settings.resize_cameras)
        if videos and named and not images and all(settings.camera_size(k, hw) == hw for k, hw in videos.items()):
            settings = settings.replace(resize=None, resize_cameras=())
    return settings


SHARD_COUNT_STEPS = (24, 8, 4, 2, 1)  # preferred shard-count multiples, most divisible first (see plan_shards)


def plan_shards(
    episodes: list[EpisodeMeta], est_bytes: dict[int, float], settings: CompileSettings
) -> list[list[int]]:
    """Consecutive episodes per shard: ``episodes_per_shard`` each, or the size-bounded, evenly dividing split.

    Without ``episodes_per_shard``, the shard count is the smallest multiple of 24 (else of 8, 4, 2, 1: the
    largest of these steps the episode count allows) that keeps every shard under ``shard_size_mb`` and is at
    least that step. A multiple of 24 divides every world_size x num_workers of 1, 2, 3, 4, 6, 8, 12 and 24
    consumers, so readers read whole shards (no "shards do not divide" split) on the usual set-ups even for a
    small dataset, and a small dataset still gets several shards per reader core. Episodes are then cut into that
    many consecutive runs of about equal estimated bytes. A shard larger than ``shard_size_mb`` happens only
    when a single episode is (a shard holds whole episodes).
    """
    order = [e.index for e in episodes]
    if settings.episodes_per_shard is not None:
        n = settings.episodes_per_shard
        return [order[i : i + n] for i in range(0, len(order), n)]
    limit = settings.shard_size_mb * 1e6
    sizes = [est_bytes[ep] for ep in order]
    at_least = max(1, math.ceil(sum(sizes) / limit))
    step = next(s for s in SHARD_COUNT_STEPS if s <= len(order))
    count = step * math.ceil(max(at_least, step) / step)
    while True:
        if count >= len(order):
            return [[ep] for ep in order]
        shards = _balanced(order, sizes, count)
        if all(len(s) == 1 or sum(est_bytes[ep] for ep in s) <= limit for s in shards):
            return shards
        count += step  # an episode boundary pushed a shard over the limit: more, smaller shards


def _balanced(order: list[int], sizes: list[float], count: int) -> list[list[int]]:
    """``order`` cut into ``count`` non-empty consecutive runs of about equal bytes: an episode goes to the run
    holding its middle byte, then each cut is moved the least needed to leave no run empty."""
    total = sum(sizes) or 1.0
    mids, run = [], 0.0
    for size in sizes:
        mids.append(run + size / 2)
        run += size
    bounds = [0]
    for k in range(1, count):
        ideal = bisect.bisect_left(mids, k * total / count)
        bounds.append(min(max(ideal, bounds[-1] + 1), len(order) - (count - k)))
    bounds.append(len(order))
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def parse_part(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N (SLURM array ids 0..N-1)."""
    try:
        k, n = (int(x) for x in str(text).split("/"))
    except ValueError as e:
        raise ValueError(f"--part must be K/N with integers 0 <= K < N, got {text!r}") from e
    check_part((k, n))
    return k, n


def check_part(part: tuple[int, int]) -> None:
    k, n = part
    if not (n >= 1 and 0 <= k < n):
        raise ValueError(f"part must be (K, N) with 0 <= K < N, got {part!r}")


def part_shards(n_shards: int, part: tuple[int, int] | None) -> list[int]:
    """The shards job K of N compiles: a contiguous block (neighbouring shards share source files)."""
    if part is None:
        return list(range(n_shards))
    check_part(part)
    k, n = part
    return list(range(math.floor(k * n_shards / n), math.floor((k + 1) * n_shards / n)))
