"""The decode stage's thread pool: compressed ``PendingBatch`` in, one preallocated uint8 batch tensor per camera out.

Why threads in the training process: at real camera sizes (480x640) moving decoded pixels from DataLoader workers
to the trainer costs as much as decoding them, and torchcodec releases the GIL while it decodes, so decode
threads scale inside one process. Here the workers ship clip bytes once and frame requests (_deferred.py); this
pool decodes.

How a batch is decoded:
- one task per clip of the batch: its frames in one sorted ``get_frames_at`` call per decoder lane (the clip's
  ``ClipDecoders``: decoders reused while the clip is pooled, window lanes, kept window frames; the first frame of
  a GOP run decodes the whole run back to back, and the next batches take it from the run cache, bounded for all
  clips together by one ``RunBudget``: _runs.py), pts checked, and
  every frame copied into its slots of the camera's batch tensor ``[B * T, C, H, W]`` (allocated once per batch,
  pinned when the batch goes to CUDA, so the copy to the GPU is one asynchronous transfer of uint8);
- a clip's tasks run one at a time and in batch order (its decoder is stateful and moves forward): they wait in
  the clip's queue while one of them runs, and the thread that runs it goes on with the next, so no thread blocks
  and no ``Future`` is made per task (at 224x224 x 3 cameras a chained future and its callbacks were a good part of
  the training process's allocations, and so of its cyclic-GC time); tasks of different clips, also of the next
  batches, run in parallel;
- a released clip's decoders are closed by a task on the same chain, after its last decode.

Frames decoded on the CPU are copied with numpy (single-threaded, GIL released) rather than ``Tensor.copy_``,
whose intra-op OpenMP team would start per calling thread and oversubscribe the cores.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from roboreel.formats.errors import CompiledFormatError, FrameTimestampError
from roboreel.reader.decode._buffers import BufferPool
from roboreel.reader.decode._counters import DecodeStats
from roboreel.reader.decode._deferred import ClipKey, ClipStore, PendingBatch
from roboreel.reader.decode._layout import BatchLayout
from roboreel.reader.decode._pixels import copy_frame, unit_frame
from roboreel.reader.plan import EpisodeClip

_STAT_FIELDS = ("decode_seconds", "decoder_opens", "decoder_reuses", "decode_calls", "frames_decoded")


def default_decode_threads() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where it does not exist)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_inflight_batches(threads: int) -> int:
    """Batches decoded at once for ``threads`` decode threads: half as many, 2 to 8.

    The stage hands batches over in order, so it waits for the oldest batch's slowest clip (a decoder opening, a
    GOP run) before it submits the next; with 2 batches in flight the other threads ran out of clips meanwhile. On
    an H200 with 16 threads (8 workers, one clip per batch) 8 batches in flight gave 2.0x the samples/s of 2
    (docs/gpu.md, "Measured"). The price is memory: one batch of uint8 frames per batch in flight (29 MiB for 32
    frames at 480x640; float32 batches on the CPU, 4x that)."""
    return min(8, max(2, threads // 2))


@dataclass
class BatchJob:
    """One batch being decoded: its uint8 camera tensors (filled by the pool's tasks) and the tasks."""

    pending: PendingBatch
    frames: dict[str, torch.Tensor]  # camera -> uint8 [B * T, C, H, W] (or [B * T, H, W, C]), staging device
    channels_last: bool = False
    submitted_at: float = field(default_factory=time.perf_counter)
    left: int = 0  # tasks not finished yet
    error: BaseException | None = None  # the first task error
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def task_done(self, error: BaseException | None) -> None:
        """One task finished (pool threads), ``error`` if it failed."""
        with self._cond:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            if self.left <= 0:
                self._cond.notify_all()

    def done(self) -> bool:
        return self.left <= 0

    def wait(self) -> None:
        """Block until every task finished; re-raise the first error (a bad clip names its file and episode)."""
        with self._cond:
            while self.left > 0:
                self._cond.wait()
        if self.error is not None:
            raise self.error


class DecodePool:
    """Decode threads shared by every batch of one iteration (see the module doc).

    Args:
        threads: decode threads (``default_decode_threads()``: the available cores).
        make_decoders: a clip's decoders (``ClipDecoders`` or ``DeviceDecoders``); one per live clip, so no two
            threads ever share a decoder or its bookkeeping.
        layout: the batch tensors frames are written into (``BatchLayout``).
        tolerance_s: max distance between a frame's pts and the timestamp it must show.
        max_open_clips: live clips with open decoders at most; the least recently used idle one is closed beyond
            (its decoder reopens on next use, at the cost of a seek).
        buffers: where CPU batch tensors come from (_buffers.py); a loader passes its own, kept across iterations.

    Layout: torchcodec returns frames as channels-last memory seen through a [C, H, W] view. Copying one into a
    contiguous [C, H, W] slot is a transposing copy, ~0.25 ms per 480x640 frame with numpy (~0.7 ms with
    ``Tensor.copy_``), a quarter of what decoding it costs; copying it into a [H, W, C] slot is a plain memcpy
    (~0.02 ms when hot). When the batch goes to a GPU the transposition is left to the GPU (free there, fused with
    the division by 255); on the CPU it is done here, in parallel threads, because the batch must be contiguous
    [.., C, H, W] like ``DataLoader(CompiledDataset)``'s, unless the loader was asked for ``channels_last``.
    """

    def __init__(self, *, threads: int, make_decoders: Callable[[], Any], layout: BatchLayout, tolerance_s: float,
                 max_open_clips: int = 4096, stream: Any = None, buffers: BufferPool | None = None) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"decode_threads must be an integer >= 1, got {threads!r}")
        self.threads, self.make_decoders, self.layout = threads, make_decoders, layout
        self.tolerance_s, self.max_open_clips, self.stream = tolerance_s, max_open_clips, stream
        self.store = ClipStore()
        self.buffers = BufferPool() if buffers is None else buffers  # the loader's: kept across epochs
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="roboreel-decode-pool")
        self._slots: OrderedDict[ClipKey, Any] = OrderedDict()  # live clip -> its decoders (LRU order)
        # clip -> its tasks not finished, in order; the first is running (or about to): a clip is here while a pool
        # thread works through its queue (``_drain``), and only then
        self._queues: dict[ClipKey, deque[tuple[Callable[..., Any], tuple[Any, ...], BatchJob | None]]] = {}
        self._closed_stats = DecodeStats()  # counters of decoders already closed
        self.parallelism = Parallelism()
        # CPU time of the tasks (decode, copy, close), from each thread's own clock: no /proc sampling (reading a
        # live process's /proc/PID/task entries while its threads exit livelocked a 6.18 kernel)
        self.cpu_seconds = 0.0
        self._lock = threading.Lock()
        self._closing = False

    # -- submitting --------------------------------------------------------------------------------------
    def submit(self, pending: PendingBatch) -> BatchJob:
        """Start decoding ``pending``; the job's tensors are complete once ``job.wait()`` returns."""
        self.store.admit(pending.clips)
        frames = {cam: self.layout.allocate(cam, pending.size * plan.window, self.buffers)
                  for cam, plan in pending.cameras.items()}
        targets: dict[ClipKey, _Targets] = {}
        for cam, plan in pending.cameras.items():
            out = frames[cam]
            array = out.numpy() if out.device.type == "cpu" else None  # once per batch, not once per frame
            for slot, (key, f) in enumerate(plan.refs):
                t = targets.get(key)
                if t is None:
                    t = targets[key] = _Targets(out, array)
                t.slots.append(slot)
                t.frames.append(f)
        job = BatchJob(pending, frames, channels_last=self.layout.channels_last, left=len(pending.wanted))
        for key, (queried, lanes) in pending.wanted.items():
            clip = self.store.get(key)
            decoders = self._slot(key)
            self._enqueue(key, self._decode_task, (decoders, clip, lanes, queried, targets[key], pending.runs.get(key)),
                          job)
        for key in pending.release:
            clip = self.store.release(key) or EpisodeClip.stub(key)
            decoders = self._slots.pop(key, None)
            if decoders is not None:
                self._enqueue(key, self._release_task, (decoders, clip))
        self._bound_open_clips()
        with self._lock:
            self.parallelism.add(len(pending.wanted), len(self._queues))
        return job

    def _slot(self, key: ClipKey) -> Any:
        decoders = self._slots.get(key)
        if decoders is None:
            decoders = self._slots[key] = self.make_decoders()
        else:
            self._slots.move_to_end(key)
        return decoders

    def _enqueue(self, key: ClipKey, fn: Callable[..., Any], args: tuple[Any, ...], job: BatchJob | None = None) -> None:
        """Run ``fn(*args)`` on the pool after the clip's earlier tasks (without holding a thread to wait); ``job``
        (if any) is told when it finished."""
        item = (fn, args, job)
        with self._lock:
            queue = self._queues.get(key)
            if queue is not None:  # a thread works through this clip's queue: it takes this one too, in order
                queue.append(item)
                return
            self._queues[key] = deque((item,))
        try:
            self._executor.submit(self._drain, key)
        except RuntimeError:  # the pool shut down in between: nothing more runs
            with self._lock:
                dropped = self._queues.pop(key, ())
            for _, _, j in dropped:
                if j is not None:
                    j.task_done(CancelledError())

    def _drain(self, key: ClipKey) -> None:
        """Run the clip's queued tasks in order, until its queue is empty (a pool thread)."""
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    return
                fn, args, job = queue[0]  # left in the queue while it runs: later tasks of the clip queue behind it
            error: BaseException | None = None
            cpu = time.thread_time()
            if not self._closing:  # the iteration was closed while the task waited: nothing more to decode
                try:
                    fn(*args)
                except BaseException as e:  # noqa: BLE001 - handed to the batch waiting for it, which re-raises it
                    error = e
            cpu = time.thread_time() - cpu
            with self._lock:
                self.cpu_seconds += cpu
                queue.popleft()
            if job is not None:
                job.task_done(error)

    def _bound_open_clips(self) -> None:
        excess = len(self._slots) - self.max_open_clips
        for key in list(self._slots)[:max(0, excess)]:  # least recently used first; idle ones only
            if key not in self._queues:  # nothing queued or running for it
                decoders = self._slots.pop(key)
                self._enqueue(key, self._release_task, (decoders, EpisodeClip.stub(key)))

    # -- tasks (pool threads) ----------------------------------------------------------------------------
    def _decode_task(self, decoders: Any, clip: EpisodeClip, lanes: dict[int, int], queried: dict[int, float],
                     targets: _Targets, runs: dict[int, int] | None) -> None:
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                self._decode(decoders, clip, lanes, queried, targets, runs)
        else:
            self._decode(decoders, clip, lanes, queried, targets, runs)

    def _decode(self, decoders: Any, clip: EpisodeClip, lanes: dict[int, int], queried: dict[int, float],
                targets: _Targets, runs: dict[int, int] | None) -> None:
        """Decode the clip's frames of one batch and copy each into its slots. Every check and conversion is made
        once per decoded frame (or once per task), not once per slot: at 224x224 and smaller the per-slot Python
        work cost as much CPU as the copy itself."""
        got = decoders.frames(clip, lanes, runs)  # a run's first frame decodes the rest of it (_runs.py)
        out, dst = targets.out, targets.array
        shape = out.shape[1:]
        cpu = dst is not None
        frames: dict[int, torch.Tensor] = {}  # checked once per decoded frame
        for f, (frame, pts) in got.items():
            if not abs(pts - queried[f]) < self.tolerance_s:
                raise FrameTimestampError(video=clip.name, episode=clip.episode, queried_s=queried[f], loaded_s=pts,
                                          tolerance_s=self.tolerance_s)
            if self.layout.channels_last:
                frame = frame.permute(1, 2, 0)  # [H, W, C]: the decoder's own memory order (see the class doc)
            if frame.shape != shape:
                raise CompiledFormatError(f"{clip.name}: decoded frames are {tuple(frame.shape)}, the manifest says "
                                          f"{tuple(shape)} for camera {clip.camera!r}", file=clip.shard,
                                          episode=clip.episode)
            if frame.device.type != "cpu":
                cpu = False
            frames[f] = frame
        pairs = zip(targets.slots, targets.frames, strict=True)
        if not cpu:
            for slot, f in pairs:
                out[slot].copy_(frames[f], non_blocking=True)
            return
        arrays = {f: frame.numpy() for f, frame in frames.items()}
        if any(a.dtype == np.float32 for a in arrays.values()):  # a depth map, in its unit already: as it is
            for slot, f in pairs:
                dst[slot] = arrays[f]
        elif out.dtype != torch.uint8:  # float32, as torch's uint8 / 255.0 (_pixels.py)
            for slot, f in pairs:
                unit_frame(arrays[f], dst[slot])
        else:
            for slot, f in pairs:
                copy_frame(arrays[f], dst[slot])  # one thread, GIL released (see the module doc)

    def _release_task(self, decoders: Any, clip: EpisodeClip) -> None:
        decoders.release(clip)
        self._retire(decoders)

    def _retire(self, decoders: Any) -> None:
        """Close a clip's decoders, keeping their counters."""
        stats = decoders.stats
        decoders.close()
        with self._lock:
            for name in _STAT_FIELDS:
                setattr(self._closed_stats, name, getattr(self._closed_stats, name) + getattr(stats, name))

    # -- observability and shutdown ----------------------------------------------------------------------
    @property
    def stats(self) -> DecodeStats:
        """Counters of every decoder so far (live ones read while they may be decoding: approximate)."""
        with self._lock:
            out = DecodeStats(**{n: getattr(self._closed_stats, n) for n in _STAT_FIELDS})
        for decoders in list(self._slots.values()):
            s = decoders.stats
            for n in _STAT_FIELDS:
                setattr(out, n, getattr(out, n) + getattr(s, n))
        return out

    def parallelism_summary(self) -> dict[str, float]:
        """``Parallelism.summary()`` so far (read while batches are submitted)."""
        with self._lock:
            return self.parallelism.summary()

    def close(self) -> None:
        """Wait for running tasks (they hold decoders), skip queued ones, close every decoder.

        Queued tasks are skipped by the threads working through their clips' queues (``_drain``), which then end:
        ``shutdown`` waits only for them. Not ``shutdown(cancel_futures=True)``: a cancelled drain would leave its
        clip's queue, and the batches waiting on it, behind."""
        self._closing = True
        self._executor.shutdown(wait=True)
        for decoders in self._slots.values():
            self._retire(decoders)
        self._slots.clear()
        self._queues.clear()
        self.store.clear()


@dataclass
class Parallelism:
    """How much work the pool's threads could take at once, sampled as each batch is submitted.

    A clip's frames decode in order on one thread, so the threads that can be busy are at most the clips with
    work queued (``clips_in_flight``), which is bounded by the distinct clips each batch asks for
    (``clips_per_batch``: about the episode pool of the worker that made it, or fewer where a worker's share of
    the dataset is smaller) times the batches decoded at once. Fewer clips in flight than decode threads means
    more threads cannot help: more episodes per worker (fewer workers, a bigger ``episode_pool_size``) or more
    ``inflight_batches`` can."""

    batches: int = 0
    clips: int = 0
    busy: int = 0

    def add(self, clips: int, busy: int) -> None:
        self.batches += 1
        self.clips += clips
        self.busy += busy

    def summary(self) -> dict[str, float]:
        n = max(self.batches, 1)
        return {"clips_per_batch": round(self.clips / n, 2), "clips_in_flight": round(self.busy / n, 2)}


@dataclass
class _Targets:
    """Where one clip's frames of a batch go: its camera's batch tensor (``array``: its numpy view, made once per
    batch; None off the CPU) and, per slot of that tensor, the clip frame it holds."""

    out: torch.Tensor
    array: np.ndarray | None
    slots: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
