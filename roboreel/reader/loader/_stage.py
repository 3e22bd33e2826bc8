"""The decode stage of ``roboreel.loader`` (_loader.py): what runs on its background thread.

It takes the DataLoader's collated *pending* batches (compressed clips and frame requests, ``_deferred.py``), feeds
them to the pool of decode threads (decode/_stage.py), and finishes each decoded batch into what the training loop
receives (``finish_batch``): on the device, uint8 or float32, transformed, in the DataLoader's order. _loader.py
keeps the public side (arguments, iteration, epochs, resume state, stats); this module only the data path, so the
two read apart.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from roboreel.reader.decode import (
    DECODE_CALL_BYTES,
    NO_IMAGE_CLIPS,
    BatchJob,
    BatchLayout,
    BufferPool,
    DecodePool,
    DeviceDecoders,
    ImageClips,
    PendingBatch,
    Router,
    RunBudget,
    auto_run_cache_bytes,
    finish_images,
    grouped,
    trim_heap,
    unit_float,
)
from roboreel.reader.order import OrderMeter, order_keys
from roboreel.reader.stats import Flusher


class StageOwner(Protocol):
    """What the stage reads from, and reports to, the ``DeviceLoader`` that runs it (_loader.py): typed here so this
    module never imports _loader.py back."""

    dataset: Any  # a CompiledDataset or MixtureDataset
    decode_threads: int
    inflight_batches: int
    max_gpu_decoders: int
    channels_last: bool
    _buffers: BufferPool
    _totals: dict[str, Any]
    _routes: dict[str, Any]
    _order: OrderMeter
    mix: int  # consecutive DataLoader batches merged into one (decode/_mixing.py); 1: none
    dataloader: Any  # the DataLoader of pending batches (its num_workers: the consumers)


class DecodeStage:
    """The decode stage: runs on the Prefetcher's thread, feeding the decode pool (decode/_stage.py) and finishing batches.

    Up to ``inflight`` batches are decoded at once (a clip's tasks stay in order, different clips run in
    parallel, also across batches); batches leave in the DataLoader's order. Finishing a batch moves its uint8
    tensors to the device (pinned -> asynchronous copy) and, unless ``return_uint8``, divides by 255 there.
    """

    def __init__(self, owner: StageOwner, source: Iterator[PendingBatch], device: torch.device,
                 decode: torch.device, capability: tuple[int, int] | None) -> None:
        self.owner, self.source, self.device, self.capability = owner, source, device, capability
        self.decode = decode  # where frames decode (the router's device); ``device``: where batches land
        self.done = threading.Event()  # set once the stage let go of the DataLoader iterator

    def run(self) -> Iterator[tuple[dict[str, Any], float]]:
        try:
            yield from self._run()
        finally:
            self.source = iter(())  # drop the DataLoader iterator: shuts its (non-persistent) workers down
            self.done.set()

    def _run(self) -> Iterator[tuple[dict[str, Any], float]]:
        ds, owner = self.owner.dataset, self.owner
        cameras = {c.key: c for c in ds.manifest.cameras}
        router = Router(str(self.decode), cameras=cameras, capability=self.capability)
        stream = None
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            stream = torch.cuda.Stream(self.device)
        dec = ds._decoding()  # the dataset's DecodeOptions and what it derived (consumer.Decoding)
        opts, depth = dec.options, dict(dec.depth)
        staging = {cam: torch.device("cpu" if cam in depth else router.camera_device(cam)) for cam in cameras}

        # the run cache: decoded GOP runs of all clips together (_runs.py)
        budget = RunBudget(run_cache_bound(opts.run_cache_bytes, ds, owner.dataloader.num_workers))
        gpu_budget = RunBudget(opts.gpu_run_cache_bytes) if self.decode.type == "cuda" else None  # in GPU memory
        idle = dec.idle_policy.begin()  # this process's decoders kept across epochs, or None (_idle_policy.py)

        def make() -> DeviceDecoders:  # one per live clip: its decoders (GPU, CPU fallback) and their state
            return DeviceDecoders(router, keep=dict(dec.keep_frames), max_gpu_decoders=owner.max_gpu_decoders,
                                  max_call_bytes=DECODE_CALL_BYTES, run_budget=budget, gpu_run_budget=gpu_budget,
                                  idle=idle, depth=depth)
        layout = BatchLayout(cameras, staging, pin=stream is not None,
                             # the decoder's own memory order: the GPU transposes (decode/_stage.py, "Layout"), or no one does
                             channels_last=stream is not None or owner.channels_last,
                             dtype=torch.float32 if stream is None and not dec.return_uint8 else torch.uint8,
                             depth=frozenset(depth))
        pool = DecodePool(threads=owner.decode_threads, make_decoders=make, layout=layout,
                          tolerance_s=opts.tolerance_s, stream=stream,
                          max_open_clips=owner.max_gpu_decoders if self.decode.type == "cuda" else 4096,
                          buffers=owner._buffers)
        flusher = Flusher(ds._counters, 0)  # row 0: the main process (the dataset's shared counters)

        def flush() -> None:
            """Publish the pool's counters to ``stats()``: when ``flusher.due()`` while batches flow, always at the
            end."""
            d = pool.stats
            flusher.flush({"decode_seconds": d.decode_seconds, "decoder_opens": d.decoder_opens,
                           "decoder_reuses": d.decoder_reuses, "decode_calls": d.decode_calls,
                           "frames_decoded": d.frames_decoded, "fallback_clips": router.fallback_clips,
                           "decode_cpu_seconds": pool.cpu_seconds})
            owner._routes = {"clips_by_device": dict(router.clips), "fallbacks": dict(router.fallbacks),
                             "decode_parallelism": pool.parallelism_summary()}

        inflight: deque[BatchJob] = deque()

        def finish() -> tuple[dict[str, Any], float]:
            job = inflight.popleft()
            t0 = time.perf_counter()
            job.wait()
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                batch = finish_batch(job, device=self.device, return_uint8=dec.return_uint8,
                                     image_transforms=dec.image_transforms, channels_last=owner.channels_last,
                                     depth=frozenset(depth), image_clips=dec.image_clips)
            if stream is not None:
                stream.synchronize()  # blocks this thread only; the batch is complete when handed over
            owner._order.add(*order_keys(job.pending.values))
            now = time.perf_counter()
            owner._totals["stage_seconds"] += now - t0
            if flusher.due():
                flush()
            return batch, job.pending.produce_seconds + (now - job.submitted_at)

        try:
            for pending in grouped(self.source, owner.mix):
                while inflight and inflight[0].done():  # hand over what is ready before waiting on workers
                    yield finish()
                t0 = time.perf_counter()
                inflight.append(pool.submit(pending))
                owner._totals["stage_seconds"] += time.perf_counter() - t0
                while len(inflight) > owner.inflight_batches:
                    yield finish()
            while inflight:
                yield finish()
        finally:
            pool.close()
            flush()
            trim_heap()  # iteration over: the arenas' free pages back to the system (_heap.py), flat over epochs


def finish_batch(job: BatchJob, *, device: torch.device, return_uint8: bool,
                 image_transforms: Callable[[torch.Tensor], torch.Tensor] | None,
                 channels_last: bool = False, depth: frozenset[str] = frozenset(),
                 image_clips: ImageClips = NO_IMAGE_CLIPS) -> dict[str, Any]:
    """The collated batch of a decoded job, on ``device``: the CPU path's keys, order, shapes, dtypes and values.

    uint8 is the wire format: the pixels cross to the device as uint8 and become float32 there, in one
    ``x / 255`` (the CPU path's correctly rounded arithmetic on every device: decode/_unit.py), which also makes channels-last
    staged frames contiguous [.., C, H, W] (``channels_last``: the division keeps their memory order instead).
    ``depth`` cameras arrive as float32 maps in their unit (decode/_depth.py): moved, never divided or transformed.
    ``image_clips``: image features compiled as clips, as LeRobot returns them (float32, in their place)."""
    pending = job.pending
    out: dict[str, Any] = {}
    for cam, plan in pending.cameras.items():
        x = job.frames[cam].to(device, non_blocking=True)
        if job.channels_last:
            x = x.permute(0, 3, 1, 2)  # a view; made contiguous by the division or the copy below
        if (not return_uint8 or cam in image_clips) and x.dtype == torch.uint8:
            y = (torch.empty_like(x, dtype=torch.float32) if channels_last  # same strides: channels last
                 else torch.empty(x.shape, dtype=torch.float32, device=x.device))
            x = unit_float(x, out=y)  # uint8 -> float32 / 255, one pass, where the batch lands (decode/_unit.py)
        elif job.channels_last and not channels_last:
            x = x.contiguous()
        if plan.stacked:
            x = x.view(pending.size, plan.window, *x.shape[1:])
        if image_transforms is not None and cam not in depth:  # LeRobot transforms no depth map
            x = torch.stack([image_transforms(s) for s in x])
        out[cam] = x
    for key, v in pending.values.items():
        out[key] = v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
    finish_images(out, pending.images, image_transforms, batched=True)
    return image_clips.apply(out)


def run_cache_bound(given: int | None, ds: Any, workers: int) -> int:
    """``DecodeOptions.cache_mb`` in bytes, or its automatic bound: one call of each run the order keeps open in
    every consumer (the default order: 2 x ``spread``; the others: one per pooled episode) for every camera."""
    if given is not None:
        return given
    members = getattr(ds, "members", [ds])  # a mixture: its members' pools, spreads and GOPs
    per = sum(2 * ds.spread if m.frame_order == "shuffled" else m.episode_pool_size for m in members)
    frames = [3 * c.height * c.width for c in ds.manifest.cameras]
    gop = min(m.gop for m in members)
    return auto_run_cache_bytes(frames, open_runs=max(1, workers) * per, gop=gop, call_bytes=DECODE_CALL_BYTES)
