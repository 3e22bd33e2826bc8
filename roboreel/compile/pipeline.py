"""``compile_dataset``: check the source, plan shards, make the missing clips and shards, finalize.

Order of events, each step crash-safe:
1. check the source's metadata and data schemas (nothing written yet: bad metadata leaves OUT untouched);
2. write OUT's lock (source fingerprint, settings, plan) and a meta snapshot, or verify they match (resume);
3. for every shard of this part that has no complete sidecar yet, make each (episode, camera) clip not made by
   an earlier run, ``workers`` at a time (jobs/_schedule.py; spawned processes: no fork of a parent holding
   fsspec/FFmpeg threads), and pack the shard once its clips exist;
4. finalize (meta/ + roboreel.json) when every shard of the dataset exists.

A data fault (SourceError) stops the run. When this run created OUT and compiles the whole dataset, OUT is
removed again; otherwise finished shards and clips stay (they are complete and valid) and temp files are
removed. Transient faults of remote source reads (timeouts, resets, 5xx, 429, short bodies) are retried
(``retries``, ``backoff_s``; formats/transient.py); a read that keeps failing (SourceReadError) says nothing
against the source, so finished shards and clips stay even in a new OUT, and its message ends with what became
of OUT and "rerun the same command" (when step 1 fails that way, nothing was written yet).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from typing import Any

from roboreel.compile.finalize import WRITE_ERRNOS
from roboreel.compile.finalize import finalize as finalize_out
from roboreel.compile.jobs import ShardJob, forget_sources, run_inline, run_pool
from roboreel.compile.out import (
    begin_update,
    check_source_files,
    clip_done,
    finished_changed,
    generation,
    is_compile_dir,
    lock_mismatch,
    make_lock,
    plan_update,
    prepare_out,
    read_lock,
    read_state,
    remove_clips,
    remove_clips_dir,
    reuse_for,
    run_lock,
    shard_done,
    sweep_clip_temps,
    sweep_temps,
    transition_lock,
    write_snapshot,
)
from roboreel.compile.plan import (
    check_encodable,
    check_part,
    check_source,
    estimate_episode_bytes,
    part_shards,
    plan_shards,
)
from roboreel.compile.report import CompileReport, make_report
from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import (
    camera_hw,
    episode_files,
    episode_fingerprints,
    frame_step,
    kept_length,
    source_files,
)
from roboreel.compile.video import clip_keys, kept_images
from roboreel.formats.errors import RoboreelError, SourceReadError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.transient import DEFAULT_BACKOFF_S, DEFAULT_RETRIES, Retry, http_defaults, is_local

log = logging.getLogger(__name__)

# AV1 decoder threads per clip job. Measured (docs/format.md, "Work unit and parallelism"): libdav1d costs the
# least CPU per frame with 1 thread (640x480: 1.47 ms vs 1.53-1.62 with 2 and 1.54-1.66 auto), against ~31 ms
# per frame for single-threaded x265 veryfast: decode is ~5% of a clip's work and already runs beside the
# encoder (source/_overlap.py); more decoder threads only take CPU from the other workers' encoders.
DECODE_THREADS = 1


def _local_out(out: str) -> str:
    out = os.fspath(out)
    if out.startswith("file://"):
        out = out[len("file://"):]
    if "://" in out:
        raise ValueError(f"OUT must be a local directory (compile writes with temp names and renames), got {out!r}")
    return os.path.abspath(out)


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
    clips re-encoded, and the OUT lock differed from a run that left them out. A dataset with image features keeps
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


def compile_dataset(
    src: str,
    out: str,
    *,
    settings: CompileSettings | None = None,
    workers: int = 1,
    part: tuple[int, int] | None = None,
    finalize: bool = True,
    progress: bool = False,
    storage_options: dict | None = None,
    overwrite: bool = False,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S,
) -> CompileReport:
    """Compile the LeRobot v3 dataset at ``src`` (path or fsspec URL) into ``out`` (a local directory).

    ``part=(K, N)`` compiles the K-th of N contiguous blocks of shards (0 <= K < N); the manifest is written by
    whichever run finds every shard complete (or by ``finalize(out)``). ``finalize=False`` never writes it.
    Rerunning into the same OUT resumes: complete shards are kept, finished clips of the others reused (unless
    their source file changed), the rest compiled. ``workers``: parallel (episode, camera) encodes.
    ``retries``: transient faults of each remote source read retried after a backoff doubling from ``backoff_s``
    seconds; then SourceReadError naming the file (and episode), with finished work kept for a rerun.
    """
    from tqdm import tqdm

    t0 = time.perf_counter()
    settings = settings or CompileSettings()
    if part is not None:
        check_part(part)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    retry = Retry(retries, backoff_s)
    out = _local_out(out)
    forget_sources()  # inline jobs must read this source as it is now, not as an earlier compile saw it
    storage_options = http_defaults(str(src), storage_options)  # a per-read timeout: a stall becomes a retry
    source = LeRobotSource(str(src), storage_options=storage_options, retry=retry)
    check_apart(source, out)
    try:  # reads meta/, the data schemas, file sizes and checksums; OUT is not touched yet
        episodes = check_source(source)
        settings = drop_unasked(settings, source.fps, source.info.features)
        check_encodable(source, settings)
        est = estimate_episode_bytes(source, episodes, settings)
        plan = plan_shards(episodes, est, settings)
        in_bytes = est if not settings.transforms else estimate_episode_bytes(
            source, episodes, settings.replace(resize=None, resize_cameras=(), fps=None))
        chunks_size = int(source.info.raw.get("chunks_size") or 1000)
        lock = make_lock(url=source.url, fingerprint=source.fingerprint(), settings=settings,
                         chunks_size=chunks_size, shards=plan, files=source_files(source, threads=max(2, workers)))
        cams = clip_keys(source.info.features, settings)
        prints = episode_fingerprints(source, settings, cams, lock["source"]["files"])
    except SourceReadError as e:  # the network, not the source: the same command is the fix, as below
        raise _rerun_hint(e, f"nothing was written to {out}: rerun the same command to try again") from e
    mine = part_shards(len(plan), part)
    existed = os.path.isdir(out)
    shard_files = [episode_files(source, shard) for shard in plan]

    def earlier_state() -> dict | None:
        """OUT's lock when it holds an earlier state of this source (grown, shrunk, or a file a finished shard
        read changed): out/_update.py; None for a fresh OUT, a resume or --overwrite."""
        old = read_lock(out) if existed and not overwrite else None
        changed = old is not None and (lock_mismatch(old, lock) or finished_changed(out, old, lock, shard_files))
        return old if changed else None

    with contextlib.ExitStack() as held:
        # two runs over the same shards remove each other's temps: the second stops here (outlock.run_lock), before
        # an update's transition or any cleanup touches OUT
        what = "its shards" if part is None else f"the shards of part {part[0]}/{part[1]}"
        if existed and is_compile_dir(out) and not overwrite:
            held.enter_context(run_lock(out, mine, what))
            locked = True
        else:
            locked = False
        if earlier_state() is not None:
            with transition_lock(out):  # one --part job makes the transition; the others then find it made
                if (old := earlier_state()) is not None and (state := plan_update(out, old, lock, prints)) is not None:
                    begin_update(out, old, lock, state, prints)
        fresh = prepare_out(out, lock, overwrite=overwrite)
        if not locked:  # OUT was new (or --overwrite emptied it): the lock file is made in it now
            held.enter_context(run_lock(out, mine, what))
        if not fresh:
            check_source_files(out, lock, shard_files)
        gen = generation(read_lock(out))
        state = read_state(out, gen) if gen > 1 else None
        try:
            write_snapshot(out, source)
            todo = []
            for i in mine:
                sweep_temps(out, i, chunks_size, gen)
                if shard_done(out, i, gen) is None:
                    sweep_clip_temps(out, i)
                    todo.append(i)
                else:
                    remove_clips(out, i)  # a kill between a shard's sidecar and the removal of its clips
            lengths = {e.index: e.length for e in episodes}
            files = lock["source"]["files"]
            jobs = [
                ShardJob(src=source.url, storage_options=storage_options, out=out, shard=i, episodes=tuple(plan[i]),
                         settings=settings, chunks_size=chunks_size, decode_threads=DECODE_THREADS,
                         files={rel: files[rel] for rel in sorted(episode_files(source, plan[i])) if rel in files},
                         retry=retry, generation=gen, fingerprints={e: prints[e] for e in plan[i]},
                         reuse=reuse_for(state, prints, plan[i]))
                for i in todo
            ]
            clips = {job.shard: [job.clip_job(source, ep, cam) for ep in job.episodes for cam in cams
                                 if prints[ep]["clips"].get(cam) not in job.reuse]  # reused: copied when packing
                     for job in jobs}
            planned_clips = sum(map(len, clips.values()))
            clips = {shard: [c for c in cs if clip_done(out, c.shard, c.episode, c.camera, c.source_file) is None]
                     for shard, cs in clips.items()}
            reused = planned_clips - sum(map(len, clips.values()))  # finished by an interrupted or failed run
            work_frames = sum(lengths[e] for j in jobs for e in j.episodes)
            clip_frames = sum(lengths[c.episode] for cs in clips.values() for c in cs)
            with tqdm(total=clip_frames, unit="frame", desc="compile", disable=not progress, smoothing=0.05,
                      bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} camera frames [{elapsed}<{remaining}, "
                                 "{rate_fmt}]") as bar:
                try:
                    if workers == 1 or sum(map(len, clips.values())) <= 1:
                        run_inline(jobs, bar.update)
                    else:
                        run_pool(jobs, clips, workers, bar.update, lengths)
                finally:
                    forget_sources()  # close the decoders this process opened
        except Exception as e:  # an interrupt (KeyboardInterrupt) leaves OUT as it is: a rerun resumes
            if isinstance(e, SourceReadError):  # the network, not the source: keep what is finished, for the rerun
                raise _rerun_hint(e, f"finished shards and clips stay in {out}: rerun the same command to resume") from e
            # a first compile that failed is removed, unless the filesystem refused a write (full, read-only, a
            # size limit): its finished shards are whole, and once that is fixed a rerun resumes from them
            cleaned = fresh and part is None and not (isinstance(e, OSError) and e.errno in WRITE_ERRNOS)
            if cleaned:
                _empty(out, remove_dir=not existed)  # nothing of a failed first compile stays in OUT
            if isinstance(e, RoboreelError):
                raise
            # Anything else (a full disk, a file-size limit, a bug) still gets one line saying what happened to OUT.
            kept = f"removed what it had written to {out}" if cleaned else f"finished shards and clips stay in {out}; a rerun resumes"
            raise RoboreelError(f"compile stopped by {type(e).__name__}: {e} ({kept})") from e
        done_all = finalize and all(shard_done(out, i, gen) is not None for i in range(len(plan)))
        if finalize and part is None and not done_all:
            raise RoboreelError(f"compile of {out} finished but shards are missing (another writer in OUT?)")
        if done_all:
            remove_clips_dir(out)
            finalize_out(out)
        report = make_report(out, plan, mine, len(todo), part, done_all, lengths, work_frames, time.perf_counter() - t0,
                         gen, {e for j in jobs for e in j.episodes})
        report.cameras = len(clip_keys(source.info.features, settings))
        report.images_kept = kept_images(source.info.features, settings)
        report.input_bytes = round(sum(in_bytes[e] for i in mine for e in plan[i]))
        report.clips_reused = reused
        step = frame_step(source.fps, settings.fps)
        if step > 1:
            report.frames_out = sum(kept_length(lengths[e], step) for i in mine for e in plan[i])
            report.fps_out = source.fps // step
        log.info("%s", report.summary())
        return report


def _rerun_hint(e: SourceReadError, hint: str) -> SourceReadError:
    """``e`` (its file and episode too), telling the user what became of OUT and that rerunning is the fix: a
    read that kept failing says nothing against the source."""
    err = SourceReadError(f"{e}; {hint}")
    err.file, err.episode = e.file, e.episode
    return err


def _empty(out: str, *, remove_dir: bool) -> None:
    if remove_dir:
        shutil.rmtree(out, ignore_errors=True)
        return
    for name in os.listdir(out):
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
