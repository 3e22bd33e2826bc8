"""One (episode, camera) clip: the unit of parallel compile work, kept as a file until its shard is packed.

A clip is written under ``OUT/.roboreel-parts/clips/shard-<S>/`` as ``<episode>.<camera>.mp4`` and then a
``<episode>.<camera>.json`` naming its size, sha256, what the episode record and sidecar say about it, and the
source video file it was made from (size and content hash from the compile record). The json is the commit mark: a clip
is reused by a rerun only when its json exists, the mp4 matches it, and the source file is still the one the
record names. Clips of a shard are deleted once the shard's tar is packed (_shardjob.py), so a finished compile
holds no copies.

Clip bytes do not depend on which process encodes them or in which order (single-threaded x265, frame-exact
decode), so the packed shards are byte-identical for any worker count.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roboreel.compile.out import atomic_write, clip_done
from roboreel.compile.out.paths import clip_paths
from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import SourceVideo, camera_hw, frame_step
from roboreel.compile.tables import image_stats
from roboreel.compile.video import (
    FILTER,
    REMUX_CODECS,
    Clip,
    EncodeTarget,
    encode_image_clip,
    transcode_depth,
    transcode_span,
)
from roboreel.formats.depth import is_depth
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.shard import sha256_hex
from roboreel.formats.table_features import IMAGE_DTYPE, check_image_columns, image_bytes
from roboreel.formats.transient import Retry

_MAX_OPEN_VIDEOS = 4  # per process: enough to continue each camera's file of the current episodes


@dataclass(frozen=True)
class ClipJob:
    """Everything a worker needs to make one clip (picklable)."""

    src: str
    storage_options: dict[str, Any] | None
    out: str
    shard: int
    episode: int
    camera: str
    settings: CompileSettings
    source_file: dict[str, Any]  # the record's {"size", "hash"} of the camera's source mp4
    decode_threads: int = 1
    retry: Retry | None = None  # transient faults of remote source reads retried (LeRobotSource)


# -- per-process caches ------------------------------------------------------------------------------------
_SOURCES: dict[str, LeRobotSource] = {}
_VIDEOS: OrderedDict[tuple[str, str], SourceVideo] = OrderedDict()


def worker_source(src: str, storage_options: dict[str, Any] | None, *, retry: Retry | None = None) -> LeRobotSource:
    """One LeRobotSource per process and URL (meta/ is read once, data files cached), retrying remote reads as
    the job says."""
    s = _SOURCES.get(src)
    if s is None:
        s = _SOURCES[src] = LeRobotSource(src, storage_options=storage_options, retry=retry)
    s.retry = retry
    return s


def forget_sources() -> None:
    """Drop cached sources and decoders. A compile calls it first: jobs run inline (workers=1) live in the
    caller's process, where a source opened by an earlier compile may have changed since (fixed,
    regenerated) and its cached metadata, rows and decoders would otherwise be compiled instead of the new
    bytes."""
    _SOURCES.clear()
    while _VIDEOS:
        _VIDEOS.popitem()[1].close()


def _video(source: LeRobotSource, rel: str, *, episode: int, threads: int, settings: CompileSettings) -> SourceVideo:
    """A cached decoder for ``rel``: the next episode of the same file continues decoding without a seek."""
    key = (source.url, rel)
    video = _VIDEOS.pop(key, None)
    if video is None:
        video = SourceVideo(source, rel, fps=source.fps, threads=threads, episode=episode)
        video.keep_packets = video.codec in REMUX_CODECS and not settings.reencode
    _VIDEOS[key] = video
    while len(_VIDEOS) > _MAX_OPEN_VIDEOS:
        _VIDEOS.popitem(last=False)[1].close()
    return video


def _drop_video(source: LeRobotSource, rel: str) -> None:
    video = _VIDEOS.pop((source.url, rel), None)
    if video is not None:
        video.close()


# -- clip files ----------------------------------------------------------------------------------------------
class _Ticker:
    """Frame progress in batches (a pool worker sends it through a pipe): ``add(1)`` per frame, ``finish``
    reports what is left of the clip (a stream copy has no per-frame step)."""

    def __init__(self, sink: Callable[[int], None] | None, every: int = 8) -> None:
        self.sink, self.every, self.sent, self.pending = sink, every, 0, 0

    def add(self, n: int) -> None:
        self.pending += n
        if self.pending >= self.every:
            self._flush()

    def _flush(self) -> None:
        if self.sink is not None and self.pending:
            self.sink(self.pending)
        self.sent += self.pending
        self.pending = 0

    def finish(self, total: int) -> None:
        self.pending = max(0, total - self.sent)
        self._flush()


def make_clip(job: ClipJob, on_frames: Callable[[int], None] | None = None) -> tuple[bytes, dict[str, Any]]:
    """Decode the episode's span of the camera's source mp4 and encode (or stream-copy) it; write the clip
    files; returns (clip bytes, its json). ``on_frames(n)``: progress, n more frames encoded."""
    source = worker_source(job.src, job.storage_options, retry=job.retry)
    ep = source.episode(job.episode)
    if source.info.features[job.camera].get("dtype") == IMAGE_DTYPE:  # --images clips (video/_imageclips.py)
        rows = source.episode_rows(ep)
        check_image_columns(rows, [job.camera], file=ep.data_path, episode=ep.index)
        ticks = _Ticker(on_frames)
        clip = encode_image_clip(image_bytes(rows.column(job.camera)), key=job.camera, fps=source.fps,
                                 settings=job.settings, where=ep.data_path, episode=ep.index, progress=ticks.add)
        ticks.finish(ep.length)
        return _write_clip(job, clip, ep.index)
    span = ep.videos[job.camera]
    video = _video(source, span.path, episode=ep.index, threads=job.decode_threads, settings=job.settings)
    ticks = _Ticker(on_frames)
    settings, feature = job.settings, source.info.features[job.camera]
    step = frame_step(source.fps, settings.fps)
    depth = is_depth(feature)
    size = settings.camera_size(job.camera, camera_hw(feature)) if settings.resizes(job.camera) else None
    try:
        target = EncodeTarget(settings, span.path, ep.index, size=size, method=FILTER, step=step,
                              stats=settings.transforms)
        if depth:  # depth never takes the RGB path: its codes are carried exactly (video/_depth.py)
            clip = transcode_depth(video, target, from_s=span.from_timestamp, length=ep.length, progress=ticks.add,
                                   feature=feature if settings.transforms else None)
        else:
            clip = transcode_span(video, target, from_s=span.from_timestamp, length=ep.length, progress=ticks.add)
    except BaseException:
        _drop_video(source, span.path)  # its position is no longer trusted
        raise
    ticks.finish(ep.length)
    return _write_clip(job, clip, ep.index, depth=depth)


def _write_clip(job: ClipJob, clip: Clip, episode: int, *, depth: bool = False) -> tuple[bytes, dict[str, Any]]:
    """Write a made clip and its json (the commit mark); returns (clip bytes, its json)."""
    doc = {
        "episode": episode, "camera": job.camera, "size": len(clip.data), "sha256": sha256_hex(clip.data),
        "source_file": job.source_file,
        "info": {**clip.spec(), "mode": clip.mode, "why": clip.why, "crf": clip.crf,
                 "psnr": [None if p == float("inf") else round(p, 4) for p in clip.psnr],
                 "psnr_min": None if clip.psnr_min == float("inf") else round(clip.psnr_min, 4),
                 "psnr_checked": clip.psnr_checked},
    }
    if clip.crf_segments:  # the floor lowered the CRF from a GOP on (compile/video/_segments.py)
        doc["info"]["crf_segments"] = clip.crf_segments
    if clip.stats_rgb is not None:  # a transforming compile: the camera's episode stats (tables/_stats.py)
        doc["stats"] = {k: v.tolist() for k, v in image_stats(clip.stats_rgb, depth=depth).items()}
    mp4, meta = clip_paths(job.shard, job.episode, job.camera)
    atomic_write(os.path.join(job.out, mp4), clip.data)
    atomic_write(os.path.join(job.out, meta), (json.dumps(doc, indent=1) + "\n").encode())
    return clip.data, doc


def run_clip(job: ClipJob, on_frames: Callable[[int], None] | None = None) -> None:
    """A pool task: make the clip unless a finished one exists."""
    if clip_done(job.out, job.shard, job.episode, job.camera, job.source_file) is None:
        make_clip(job, on_frames)


