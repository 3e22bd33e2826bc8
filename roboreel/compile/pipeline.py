"""``compile_dataset``: plan -> prepare OUT -> run the jobs -> finalize -> report, each phase its own function.

Each phase is crash-safe:
1. plan: check the source's metadata and data schemas and plan the shards (nothing written yet: bad metadata
   leaves OUT untouched);
2. prepare OUT: hold this run's shards (out/_locks.py), make an update's transition when OUT holds an earlier
   state of the source (out/_update.py), write OUT's record (source fingerprint, settings, plan) or verify it
   matches (resume);
3. run the jobs: for every shard of this part that has no complete sidecar yet, make each (episode, camera)
   clip not made by an earlier run, ``workers`` at a time (jobs/; spawned processes: no fork of a parent
   holding fsspec/FFmpeg threads), and pack the shard once its clips exist;
4. finalize (meta/ + roboreel.json) when every shard of the dataset exists;
5. report what this run did, from the part's sidecars.

A data fault (SourceError) stops the run. When this run created OUT and compiles the whole dataset, OUT is
removed again; otherwise finished shards and clips stay (they are complete and valid) and temp files are
removed. Transient faults of remote source reads (timeouts, resets, 5xx, 429, short bodies) are retried
(``retry``: formats/transient.py's Retry); a read that keeps failing (SourceReadError) says nothing
against the source, so finished shards and clips stay even in a new OUT, and its message ends with what became
of OUT and "rerun the same command" (when the plan fails that way, nothing was written yet).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
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
    make_record,
    plan_update,
    prepare_out,
    read_record,
    read_state,
    record_mismatch,
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
    check_apart,
    check_encodable,
    check_part,
    check_source,
    drop_unasked,
    estimate_episode_bytes,
    part_shards,
    plan_shards,
)
from roboreel.compile.report import CompileReport, RunFacts, make_report
from roboreel.compile.settings import CompileSettings
from roboreel.compile.source import (
    episode_files,
    episode_fingerprints,
    frame_step,
    kept_length,
    source_files,
)
from roboreel.compile.video import clip_keys, kept_images
from roboreel.formats.errors import RoboreelError, SourceReadError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.transient import Retry, http_defaults

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


@dataclass(frozen=True)
class _Plan:
    """What the plan phase found, before OUT is touched: the source, the settings it asks for, the shard plan and
    this run's part of it, OUT's record, the episodes' fingerprints."""

    source: LeRobotSource
    settings: CompileSettings
    storage_options: dict[str, Any]
    retry: Retry
    shards: list[list[int]]
    mine: list[int]  # the shards of this part
    lengths: dict[int, int]  # episode -> source frames
    in_bytes: dict[int, float]  # episode -> estimated source bytes
    chunks_size: int
    record: dict[str, Any]  # OUT's compile record for this run (out/_record.py)
    cams: list[str]  # video features, and image features made clips
    prints: dict[int, dict[str, Any]]  # episode -> fingerprints (source/_fingerprint.py)
    shard_files: list[set[str]]  # per shard, the source files it reads


@dataclass(frozen=True)
class _Prepared:
    """OUT made ready: whether it existed and started empty, its compile generation, an update's reuse state."""

    existed: bool
    fresh: bool
    generation: int
    state: dict[str, Any] | None


@dataclass(frozen=True)
class _Ran:
    """What the jobs phase did: the shards it packed, and the clips an earlier run had finished."""

    todo: list[int]
    jobs: list[ShardJob]
    clips_reused: int
    work_frames: int  # episode frames of the shards packed


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
    retry: Retry | None = None,
) -> CompileReport:
    """Compile the LeRobot v3 dataset at ``src`` (path or fsspec URL) into ``out`` (a local directory).

    ``part=(K, N)`` compiles the K-th of N contiguous blocks of shards (0 <= K < N); the manifest is written by
    whichever run finds every shard complete (or by ``finalize(out)``). ``finalize=False`` never writes it.
    Rerunning into the same OUT resumes: complete shards are kept, finished clips of the others reused (unless
    their source file changed), the rest compiled. ``workers``: parallel (episode, camera) encodes.
    ``retry`` (formats.transient.Retry; default: its defaults): transient faults of each remote source read retried
    ``retry.retries`` times after a backoff doubling from ``retry.backoff_s`` seconds; then SourceReadError naming
    the file (and episode), with finished work kept for a rerun.

    The phases (module doc): plan -> prepare OUT -> run the jobs -> finalize -> report.
    """
    t0 = time.perf_counter()
    if part is not None:
        check_part(part)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    retry = retry if retry is not None else Retry()
    out = _local_out(out)
    forget_sources()  # inline jobs must read this source as it is now, not as an earlier compile saw it
    plan = _plan(src, out, settings or CompileSettings(), part, storage_options, retry, workers)
    with contextlib.ExitStack() as held:
        prepared = _prepare_out(out, plan, part, overwrite, held)
        try:
            ran = _run_jobs(out, plan, prepared, workers, progress)
        except Exception as e:  # an interrupt (KeyboardInterrupt) leaves OUT as it is: a rerun resumes
            stop = _stopped(e, out, prepared, part)
            if stop is e:
                raise
            raise stop from e
        done_all = _finalize(out, plan, prepared.generation, finalize, part)
        report = _report(out, plan, prepared, ran, part, done_all, time.perf_counter() - t0)
        log.info("%s", report.summary())
        return report


def _plan(src: str, out: str, settings: CompileSettings, part: tuple[int, int] | None,
          storage_options: dict | None, retry: Retry, workers: int) -> _Plan:
    """Phase 1: read meta/, the data schemas, file sizes and checksums, and plan the shards; OUT is not touched."""
    storage_options = http_defaults(str(src), storage_options)  # a per-read timeout: a stall becomes a retry
    source = LeRobotSource(str(src), storage_options=storage_options, retry=retry)
    check_apart(source, out)
    try:
        episodes = check_source(source)
        settings = drop_unasked(settings, source.fps, source.info.features)
        check_encodable(source, settings)
        est = estimate_episode_bytes(source, episodes, settings)
        shards = plan_shards(episodes, est, settings)
        in_bytes = est if not settings.transforms else estimate_episode_bytes(
            source, episodes, settings.replace(resize=None, resize_cameras=(), fps=None))
        chunks_size = int(source.info.raw.get("chunks_size") or 1000)
        record = make_record(url=source.url, fingerprint=source.fingerprint(), settings=settings,
                           chunks_size=chunks_size, shards=shards, files=source_files(source, threads=max(2, workers)))
        cams = clip_keys(source.info.features, settings)
        prints = episode_fingerprints(source, settings, cams, record["source"]["files"])
    except SourceReadError as e:  # the network, not the source: the same command is the fix, as below
        raise _rerun_hint(e, f"nothing was written to {out}: rerun the same command to try again") from e
    return _Plan(source=source, settings=settings, storage_options=storage_options, retry=retry, shards=shards,
                 mine=part_shards(len(shards), part), lengths={e.index: e.length for e in episodes},
                 in_bytes=in_bytes, chunks_size=chunks_size, record=record, cams=cams, prints=prints,
                 shard_files=[episode_files(source, shard) for shard in shards])


def _prepare_out(out: str, plan: _Plan, part: tuple[int, int] | None, overwrite: bool,
                 held: contextlib.ExitStack) -> _Prepared:
    """Phase 2: hold this run's shards (``held`` keeps the run lock until the run ends), make an update's
    transition when OUT holds an earlier state of the source, write OUT's record (or check it matches)."""
    existed = os.path.isdir(out)

    def earlier_state() -> dict | None:
        """OUT's record when it holds an earlier state of this source (grown, shrunk, or a file a finished shard
        read changed): out/_update.py; None for a fresh OUT, a resume or --overwrite."""
        old = read_record(out) if existed and not overwrite else None
        changed = old is not None and (record_mismatch(old, plan.record)
                                       or finished_changed(out, old, plan.record, plan.shard_files))
        return old if changed else None

    # two runs over the same shards remove each other's temps: the second stops here (out/_locks.run_lock), before
    # an update's transition or any cleanup touches OUT
    what = "its shards" if part is None else f"the shards of part {part[0]}/{part[1]}"
    locked = existed and is_compile_dir(out) and not overwrite
    if locked:
        held.enter_context(run_lock(out, plan.mine, what))
    if earlier_state() is not None:
        with transition_lock(out):  # one --part job makes the transition; the others then find it made
            if (old := earlier_state()) is not None and (
                    state := plan_update(out, old, plan.record, plan.prints)) is not None:
                begin_update(out, old, plan.record, state, plan.prints)
    fresh = prepare_out(out, plan.record, overwrite=overwrite)
    if not locked:  # OUT was new (or --overwrite emptied it): the run lock's file is made in it now
        held.enter_context(run_lock(out, plan.mine, what))
    if not fresh:
        check_source_files(out, plan.record, plan.shard_files)
    gen = generation(read_record(out))
    return _Prepared(existed=existed, fresh=fresh, generation=gen, state=read_state(out, gen) if gen > 1 else None)


def _run_jobs(out: str, plan: _Plan, prepared: _Prepared, workers: int, progress: bool) -> _Ran:
    """Phase 3: make the missing clips and pack the shards of this part that are not done yet."""
    from tqdm import tqdm

    write_snapshot(out, plan.source)
    todo = []
    for i in plan.mine:
        sweep_temps(out, i, plan.chunks_size, prepared.generation)
        if shard_done(out, i, prepared.generation) is None:
            sweep_clip_temps(out, i)
            todo.append(i)
        else:
            remove_clips(out, i)  # a kill between a shard's sidecar and the removal of its clips
    jobs = [_shard_job(out, plan, prepared, i) for i in todo]
    clips = {job.shard: [job.clip_job(plan.source, ep, cam) for ep in job.episodes for cam in plan.cams
                         if plan.prints[ep]["clips"].get(cam) not in job.reuse]  # reused: copied when packing
             for job in jobs}
    planned_clips = sum(map(len, clips.values()))
    clips = {shard: [c for c in cs if clip_done(out, c.shard, c.episode, c.camera, c.source_file) is None]
             for shard, cs in clips.items()}
    reused = planned_clips - sum(map(len, clips.values()))  # finished by an interrupted or failed run
    lengths = plan.lengths
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
    return _Ran(todo=todo, jobs=jobs, clips_reused=reused,
                work_frames=sum(lengths[e] for j in jobs for e in j.episodes))


def _shard_job(out: str, plan: _Plan, prepared: _Prepared, shard: int) -> ShardJob:
    files, episodes = plan.record["source"]["files"], plan.shards[shard]
    return ShardJob(src=plan.source.url, storage_options=plan.storage_options, out=out, shard=shard,
                    episodes=tuple(episodes), settings=plan.settings, chunks_size=plan.chunks_size,
                    decode_threads=DECODE_THREADS,
                    files={rel: files[rel] for rel in sorted(episode_files(plan.source, episodes)) if rel in files},
                    retry=plan.retry, generation=prepared.generation,
                    fingerprints={e: plan.prints[e] for e in episodes},
                    reuse=reuse_for(prepared.state, plan.prints, episodes))


def _stopped(e: Exception, out: str, prepared: _Prepared, part: tuple[int, int] | None) -> Exception:
    """What a failed jobs phase raises (``e`` itself for a RoboreelError), after removing a first compile's OUT."""
    if isinstance(e, SourceReadError):  # the network, not the source: keep what is finished, for the rerun
        return _rerun_hint(e, f"finished shards and clips stay in {out}: rerun the same command to resume")
    # a first compile that failed is removed, unless the filesystem refused a write (full, read-only, a size
    # limit): its finished shards are whole, and once that is fixed a rerun resumes from them
    cleaned = prepared.fresh and part is None and not (isinstance(e, OSError) and e.errno in WRITE_ERRNOS)
    if cleaned:
        _empty(out, remove_dir=not prepared.existed)  # nothing of a failed first compile stays in OUT
    if isinstance(e, RoboreelError):
        return e
    # Anything else (a full disk, a file-size limit, a bug) still gets one line saying what happened to OUT.
    kept = f"removed what it had written to {out}" if cleaned else f"finished shards and clips stay in {out}; a rerun resumes"
    return RoboreelError(f"compile stopped by {type(e).__name__}: {e} ({kept})")


def _finalize(out: str, plan: _Plan, gen: int, finalize: bool, part: tuple[int, int] | None) -> bool:
    """Phase 4: meta/ and roboreel.json, when asked and every shard of the dataset is done; returns whether."""
    done_all = finalize and all(shard_done(out, i, gen) is not None for i in range(len(plan.shards)))
    if finalize and part is None and not done_all:
        raise RoboreelError(f"compile of {out} finished but shards are missing (another writer in OUT?)")
    if done_all:
        remove_clips_dir(out)
        finalize_out(out)
    return done_all


def _report(out: str, plan: _Plan, prepared: _Prepared, ran: _Ran, part: tuple[int, int] | None, done_all: bool,
            seconds: float) -> CompileReport:
    """Phase 5: what this run did, from the part's sidecars."""
    settings, source, mine, lengths = plan.settings, plan.source, plan.mine, plan.lengths
    run = RunFacts(part=part, compiled=len(ran.todo), worked={e for j in ran.jobs for e in j.episodes},
                   work_frames=ran.work_frames, seconds=seconds, finalized=done_all)
    report = make_report(out, plan.shards, mine, prepared.generation, lengths, run)
    report.cameras = len(clip_keys(source.info.features, settings))
    report.images_kept = kept_images(source.info.features, settings)
    report.input_bytes = round(sum(plan.in_bytes[e] for i in mine for e in plan.shards[i]))
    report.clips_reused = ran.clips_reused
    step = frame_step(source.fps, settings.fps)
    if step > 1:
        report.frames_out = sum(kept_length(lengths[e], step) for i in mine for e in plan.shards[i])
        report.fps_out = source.fps // step
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
