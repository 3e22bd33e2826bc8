"""Pack one shard: its episodes' clips (made by clip jobs, _clips.py, or here when missing) and rows -> tar, data
parquet, then a sidecar json marking it done.

Runs in a worker process (or inline). Files appear under their final names only when complete, in the order
data file, tar, sidecar; a shard counts as done when its sidecar exists and the sizes it records match the
files, so a kill at any point leaves at most temp files, which the next run of this shard removes. The shard's
clip files are deleted after its sidecar is written.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from roboreel.compile.jobs._clips import ClipJob, make_clip, worker_source
from roboreel.compile.out import (
    ShardWriter,
    atomic_write,
    clip_done,
    read_clip,
    read_reused,
    remove_clips,
    sweep_temps,
)
from roboreel.compile.out.paths import shard_files
from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import frame_step, resample_episodes, resample_rows
from roboreel.compile.tables import rows_stats, stats_to_json, write_episode_rows
from roboreel.compile.video import clip_keys
from roboreel.formats.lerobot_v3 import EpisodeMeta, LeRobotSource
from roboreel.formats.manifest import EpisodeEntry
from roboreel.formats.shard import EpisodeRecord, rows_digest
from roboreel.formats.table_features import check_image_columns, image_keys
from roboreel.formats.transient import Retry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardJob:
    """Everything a worker needs to pack one shard (picklable)."""

    src: str
    storage_options: dict[str, Any] | None
    out: str
    shard: int
    episodes: tuple[int, ...]
    settings: CompileSettings
    chunks_size: int
    files: dict[str, dict[str, Any]]  # the record's {"size", "hash"} of the shard's source video files
    decode_threads: int = 1
    retry: Retry | None = None  # transient faults of remote source reads retried (LeRobotSource)
    generation: int = 1  # OUT's compile generation (out/_update.py): names the tar, marks the sidecar
    fingerprints: dict[int, dict[str, Any]] = field(default_factory=dict)  # episode -> source/_fingerprint.py's
    reuse: dict[str, dict[str, Any]] = field(default_factory=dict)  # clip fingerprint -> its bytes in an old tar

    def clip_job(self, source: LeRobotSource, episode: int, camera: str) -> ClipJob:
        ep = source.episode(episode)
        rel = ep.videos[camera].path if camera in ep.videos else ep.data_path  # an image feature's: its rows
        return ClipJob(src=self.src, storage_options=self.storage_options, out=self.out, shard=self.shard,
                       episode=episode, camera=camera, settings=self.settings, source_file=self.files.get(rel, {}),
                       decode_threads=self.decode_threads, retry=self.retry)


def run_shard(job: ShardJob, on_frames: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Pack one shard (making any clip not made yet); returns its sidecar dict. ``on_frames(n)``: progress of
    the clips made here, n more camera frames."""
    t0 = time.perf_counter()
    source = worker_source(job.src, job.storage_options, retry=job.retry)
    tar_rel, data_rel, side_rel = shard_files(job.shard, job.chunks_size, job.generation)
    sweep_temps(job.out, job.shard, job.chunks_size, job.generation)
    reused: list[int] = []
    entries, clips_info, tables, stats = [], {}, [], {}
    step = frame_step(source.fps, job.settings.fps)
    grid = {e.index: e for e in resample_episodes(source.episodes, step)}  # lengths and indices on the new grid
    cams = clip_keys(source.info.features, job.settings)  # video features, and image features made clips
    with ShardWriter(os.path.join(job.out, tar_rel)) as writer:
        for ep_index in job.episodes:
            src_ep, ep = source.episode(ep_index), grid[ep_index]
            rows = resample_rows(source.episode_rows(src_ep), step=step, from_index=ep.from_index,
                                 fps=source.fps // step)
            check_image_columns(rows, image_keys(source.info.features), file=src_ep.data_path, episode=src_ep.index)
            rows = rows.drop_columns([c for c in cams if c in rows.column_names])  # image features made clips
            record, clips_info[str(ep.index)], all_reused = _episode_record(source, ep, rows, job, cams, on_frames)
            if all_reused:
                reused.append(ep.index)
            if job.settings.transforms:  # stats of what was kept (tables/_stats.py): rows here, cameras from the clips
                stats[str(ep.index)] = {**stats_to_json(rows_stats(rows, source.info.features, source.fps // step)),
                                        **{cam: c.pop("stats") for cam, c in clips_info[str(ep.index)].items()}}
            members = writer.add(record)
            entries.append(EpisodeEntry(
                index=ep.index, length=ep.length, from_index=ep.from_index, to_index=ep.to_index,
                shard=job.shard, tasks=list(ep.tasks), members=members, rows_sha256=rows_digest(rows),
            ))
            tables.append((ep.index, ep.data_path, rows))
        data_size, data_sha = write_episode_rows(os.path.join(job.out, data_rel), tables)
        writer.commit()
    side = {
        "shard": job.shard,
        "generation": job.generation,
        "episodes": list(job.episodes),
        "frames": sum(e.length for e in entries),
        "tar": {"path": tar_rel, "size": writer.size, "sha256": writer.sha256},
        "data": {"path": data_rel, "size": data_size, "sha256": data_sha},
        "entries": [asdict(e) for e in entries],
        "clips": clips_info,
        **({"stats": stats} if job.settings.transforms else {}),
        "fingerprints": {str(e): job.fingerprints[e] for e in job.episodes if e in job.fingerprints},
        "reused": reused,  # episodes whose clips all came from OUT's previous generation (out/_update.py)
    }
    atomic_write(os.path.join(job.out, side_rel), (json.dumps(side, indent=1) + "\n").encode())
    remove_clips(job.out, job.shard)
    log.info("shard %d: %d episodes in %.2fs", job.shard, len(entries), time.perf_counter() - t0)
    return side


def _clip(source: LeRobotSource, job: ShardJob, episode: int, camera: str,
          on_frames: Callable[[int], None] | None) -> tuple[bytes, dict[str, Any], bool]:
    """A clip's bytes, json and whether it was reused: the same clip of OUT's previous generation (out/_update.py),
    else the finished clip file when there is a sound one, else made now."""
    fp = (job.fingerprints.get(episode) or {}).get("clips", {}).get(camera)
    where = job.reuse.get(fp) if fp else None
    if where is not None:
        data = read_reused(job.out, where)
        if data is not None:
            return data, {"info": where["info"], **({"stats": where["stats"]} if "stats" in where else {})}, True
        log.warning("shard %d: episode %d camera %s of the previous compile is not intact in %s; making it again",
                    job.shard, episode, camera, where["tar"])
    cj = job.clip_job(source, episode, camera)
    doc = clip_done(job.out, job.shard, episode, camera, cj.source_file)
    data = read_clip(job.out, job.shard, episode, camera, doc) if doc is not None else None
    if data is None or doc is None:
        data, doc = make_clip(cj, on_frames)
    return data, doc, False


def _episode_record(
    source: LeRobotSource, ep: EpisodeMeta, rows: Any, job: ShardJob, cams: list[str],
    on_frames: Callable[[int], None] | None,
) -> tuple[EpisodeRecord, dict[str, Any], bool]:
    """One episode's record (clips of every camera in ``cams`` + rows + meta), per-clip info for the sidecar,
    and whether every clip was reused from OUT's previous generation."""
    clips, info, reused = {}, {}, True
    for cam in cams:
        clips[cam], doc, again = _clip(source, job, ep.index, cam, on_frames)
        reused = reused and again
        info[cam] = {**{k: v for k, v in doc["info"].items() if k != "reused"}, **({"reused": True} if again else {}),
                     **({"stats": doc["stats"]} if "stats" in doc else {})}
    meta = {
        "episode_index": ep.index, "length": ep.length, "dataset_from_index": ep.from_index,
        "dataset_to_index": ep.to_index, "tasks": list(ep.tasks),
        "fps": source.fps // frame_step(source.fps, job.settings.fps),
        "cameras": {cam: _spec(info[cam]) for cam in cams},
    }
    return EpisodeRecord(index=ep.index, meta=meta, rows=rows, clips=clips), info, reused and bool(cams)


def _spec(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items()
            if k not in ("mode", "psnr", "why", "crf", "psnr_min", "psnr_checked", "crf_segments", "stats", "reused")}


