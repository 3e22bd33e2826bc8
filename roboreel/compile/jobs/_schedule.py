"""Run a compile's clip and pack jobs: inline, or ``workers`` at a time (one on a thread of this process, the
others in spawned processes), one (episode, camera) encode per task.

Clip jobs are submitted in plan order (shard, episode, camera); a shard's pack job is submitted as soon as its
last clip is done, ahead of further clips, so finished shards appear (and resume) steadily instead of all at the
end. At most ``workers + 1`` tasks are in flight, which keeps every worker busy without queueing work that a
failure would have to cancel. The bytes do not depend on any of this: each clip is a pure function of its
source span and the settings, and a shard is packed in episode order from its clips.

Within a shard, clips are submitted longest first (the shortest ones fill the tail). On a failure, only jobs
that come before the failed one in plan order (shard, episode, camera) are still started, the tasks in flight
finish, and the error of the earliest failed job in plan order is raised: every job before it ran, so with
corrupt episodes the same (first) one is named whatever the worker count and timing.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from roboreel.compile.jobs._clips import ClipJob, run_clip
from roboreel.compile.jobs._shardjob import ShardJob, run_shard
from roboreel.compile.jobs._worklog import Relay, parent_levels, send_to_parent

_PACK = 1 << 30  # order key of a shard's pack job: after its clips


class _Cancelled(Exception):
    """Raised inside the in-process worker thread to stop its clip when the compile is interrupted."""


# -- worker side ------------------------------------------------------------------------------------------
_PROGRESS: Any = None  # a SimpleQueue to the parent: frames encoded, in batches


def _init_worker(progress: Any, logs: Any, levels: dict[str, int]) -> None:
    global _PROGRESS
    _PROGRESS = progress
    send_to_parent(logs, levels)  # e.g. a retried source read is logged as the parent's own (_worklog.py)
    os.environ.setdefault("SVT_LOG", "1")


def _clip_task(job: ClipJob) -> None:
    run_clip(job, on_frames=_PROGRESS.put)


def _pack_task(job: ShardJob) -> None:
    run_shard(job, on_frames=_PROGRESS.put)


# -- parent side ------------------------------------------------------------------------------------------


def run_inline(shards: list[ShardJob], on_frames: Callable[[int], None]) -> None:
    """Shard by shard in this process (``--workers 1``): clips, then the pack (decode still overlaps encode on
    a thread inside each clip)."""
    for job in shards:
        run_shard(job, on_frames=on_frames)


def _longest_first(shard_pos: int, clips: list[ClipJob], lengths: dict[int, int]
                   ) -> list[tuple[tuple[int, int], ClipJob]]:
    """A shard's clips keyed by plan position, submitted longest first: the shard's last clip to finish (which
    holds up its pack, and for the last shard the whole compile) is then a short one."""
    keyed = [((shard_pos, k), cj) for k, cj in enumerate(clips)]
    return sorted(keyed, key=lambda item: (-lengths[item[1].episode], item[0]))


def _local_clip(job: ClipJob, sink: Callable[[int], None]) -> None:
    run_clip(job, on_frames=sink)


def _local_pack(job: ShardJob, sink: Callable[[int], None]) -> None:
    run_shard(job, on_frames=sink)


def run_pool(shards: list[ShardJob], clips: dict[int, list[ClipJob]], workers: int,
             on_frames: Callable[[int], None], lengths: dict[int, int]) -> None:
    """Every clip job in ``clips`` (by shard), then each shard's pack, ``workers`` at a time: one on a thread of
    this process, the others in ``workers - 1`` spawned processes. ``lengths``: episode -> frames.

    The thread starts encoding at once, while the processes are still importing (about a second each on a busy
    2-core machine): on a compile of a few dozen seconds that start-up is what separates the 2-worker time from
    half the 1-worker time. Codec calls release the GIL, so the thread encodes as fast as a process would.

    It stays one function: the queues, the running tasks and the first error are one state that ``submit``, the
    wait loop and the interrupt all change, and split up they would be a class's attributes changed from afar.
    """
    order = {job.shard: i for i, job in enumerate(shards)}
    by_shard = {job.shard: job for job in shards}
    queued: deque[tuple[tuple[int, int], ClipJob]] = deque(
        item for job in shards for item in _longest_first(order[job.shard], clips.get(job.shard, []), lengths))
    left = {job.shard: len(clips.get(job.shard, [])) for job in shards}
    packs: deque[ShardJob] = deque(job for job in shards if left[job.shard] == 0)
    n_procs = max(1, min(workers - 1, len(queued) + len(shards) - 1))
    ctx = mp.get_context("spawn")  # no fork of a parent holding fsspec/FFmpeg threads
    errors: list[tuple[tuple[int, int], BaseException]] = []
    running: dict[cf.Future[Any], tuple[tuple[int, int], ShardJob | ClipJob, bool]] = {}  # (key, job, local)
    progress = ctx.SimpleQueue()  # from the processes
    local_progress: queue.SimpleQueue[int] = queue.SimpleQueue()  # from the thread
    cancel = threading.Event()

    def local_sink(n: int) -> None:
        """The thread's progress; also where it stops mid-clip on an interrupt (else Ctrl-C would wait for the
        clip to finish)."""
        if cancel.is_set():
            raise _Cancelled("compile interrupted")
        local_progress.put(n)

    def drain() -> None:
        for q in (progress, local_progress):
            while not q.empty():
                on_frames(q.get())

    def submit(pool: cf.Executor, local: bool) -> None:
        if packs:
            job: ShardJob | ClipJob = packs.popleft()
            key = (order[job.shard], _PACK)
            f = pool.submit(_local_pack, job, local_sink) if local else pool.submit(_pack_task, job)
        else:
            key, job = queued.popleft()
            f = pool.submit(_local_clip, job, local_sink) if local else pool.submit(_clip_task, job)
        running[f] = (key, job, local)

    with Relay(ctx) as logs, cf.ThreadPoolExecutor(1, thread_name_prefix="roboreel-clip") as thread, \
            cf.ProcessPoolExecutor(max_workers=n_procs, mp_context=ctx, initializer=_init_worker,
                                   initargs=(progress, logs.queue, parent_levels())) as procs:
        try:
            while True:
                if errors:  # only what could fail earlier in plan order still runs (see module doc)
                    first = min(key for key, _ in errors)
                    packs = deque(j for j in packs if (order[j.shard], _PACK) < first)
                    queued = deque(item for item in queued if item[0] < first)
                if (packs or queued) and not any(local for _, _, local in running.values()):
                    submit(thread, local=True)
                while (packs or queued) and sum(not local for _, _, local in running.values()) <= n_procs:
                    submit(procs, local=False)  # one queued beyond the processes: none waits for the parent
                if not running:
                    break
                done, _ = cf.wait(running, timeout=0.25, return_when=cf.FIRST_COMPLETED)
                drain()
                for f in done:
                    key, job, _ = running.pop(f)
                    err = f.exception()
                    if err is not None:
                        errors.append((key, err))
                    elif isinstance(job, ClipJob):
                        left[job.shard] -= 1
                        if left[job.shard] == 0:
                            packs.append(by_shard[job.shard])
        except BaseException:  # an interrupt: start nothing more; the executors' exit waits for running tasks
            cancel.set()
            for f in running:
                f.cancel()
            raise
        finally:
            drain()
    if errors:
        raise min(errors, key=lambda e: e[0])[1]
