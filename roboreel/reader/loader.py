"""``roboreel.loader``: a DataLoader whose batches arrive decoded on the dataset's ``decode_device``.

CUDA cannot be initialised in forked DataLoader workers, and a GPU has a handful of NVDEC engines, so GPU decode
cannot happen where CPU decode does (in every worker). Here the workers do everything but decode: read shards,
pool episodes, pick frames, window, collate tabular values (``CompiledDataset.iter_pending`` +
``deferred.collate_pending``); the main process runs one decode stage on a background thread that turns each
collated ``PendingBatch`` into the final batch with torchcodec decoders on the device (``deferred.assemble``).

The thread decodes on its own CUDA stream, waits for it, and puts the batch on a queue of ``prefetch_batches``;
the training loop takes batches from the queue, so decoding the next batches overlaps the current step. The
consumer marks each tensor as used on its current stream (``record_stream``), so the caching allocator cannot
hand the memory back to the decode stream while the step still reads it. Decoded batches on the device are
bounded: ``prefetch_batches`` queued, one being built, one held by the loop.

With ``decode_device="cpu"`` the same stage decodes on the CPU (useful to test, or to keep decoding out of the
workers); the batches equal ``DataLoader(CompiledDataset(...))``'s exactly.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from roboreel.reader.dataset import CompiledDataset
from roboreel.reader.deferred import ClipStore, PendingBatch, assemble, collate_pending
from roboreel.reader.gpu import DEFAULT_MAX_GPU_DECODERS, DeviceDecoders
from roboreel.reader.heap import pin_mmap_threshold
from roboreel.reader.prefetch import Prefetcher
from roboreel.reader.resume import worker_batches
from roboreel.reader.routing import Router
from roboreel.reader.stats import Flusher

logger = logging.getLogger(__name__)

_REFUSED = ("collate_fn", "sampler", "batch_sampler", "shuffle")
_CLOSE_WAIT_S = 120.0


class _PendingStream(IterableDataset):
    """The dataset as DataLoader workers see it: (pending sample, seconds spent producing it)."""

    def __init__(self, dataset: CompiledDataset) -> None:
        self.dataset = dataset

    def __iter__(self) -> Iterator[tuple[Any, float]]:
        it = self.dataset.iter_pending()
        try:
            while True:
                t = time.perf_counter()
                try:
                    p = next(it)
                except StopIteration:
                    return
                yield p, time.perf_counter() - t
        finally:
            it.close()


class DeviceLoader:
    """Batches of ``dataset`` decoded on ``dataset.decode_device`` in the main process (see the module doc).

    Args:
        dataset: a ``CompiledDataset``; its ``decode_device`` ("cpu", "cuda", "cuda:N") is where batches land.
        batch_size, num_workers: as ``torch.utils.data.DataLoader``.
        prefetch_batches: decoded batches kept ready ahead of the training loop (GPU memory scales with it).
        max_gpu_decoders: open GPU decoders (NVDEC sessions) at most; least recently used closed beyond it.
        **dataloader_kwargs: passed to the DataLoader (``prefetch_factor``, ``persistent_workers``,
            ``pin_memory``, ``drop_last``, ``multiprocessing_context``, ...); not ``collate_fn``/samplers.

    Iterate it like a DataLoader. ``set_epoch``, ``state_dict``/``load_state_dict`` (what a trainer saves),
    ``stats()`` and ``last_batch_seconds`` (worker + decode time of the batch just returned) complete it.
    """

    def __init__(
        self,
        dataset: CompiledDataset,
        *,
        batch_size: int,
        num_workers: int = 0,
        prefetch_batches: int = 2,
        max_gpu_decoders: int = DEFAULT_MAX_GPU_DECODERS,
        **dataloader_kwargs: Any,
    ) -> None:
        if not isinstance(dataset, CompiledDataset):
            raise ValueError(f"dataset must be a roboreel CompiledDataset, got {type(dataset).__name__}")
        for name, value, low in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0),
                                 ("prefetch_batches", prefetch_batches, 1), ("max_gpu_decoders", max_gpu_decoders, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        refused = sorted(k for k in dataloader_kwargs if k in _REFUSED)
        if refused:
            raise ValueError(f"roboreel.loader does not take {refused}: it collates compressed batches itself and "
                             f"the dataset orders samples (seed, shuffle). Not accepted: {list(_REFUSED)}")
        if dataloader_kwargs.get("in_order", True) is not True:
            raise ValueError("in_order must be True: clip bytes are shipped once per worker and need its batches "
                             "in order")
        self.dataset = dataset
        self.prefetch_batches, self.max_gpu_decoders = prefetch_batches, max_gpu_decoders
        self.dataloader = DataLoader(_PendingStream(dataset), batch_size=batch_size, num_workers=num_workers,
                                     collate_fn=collate_pending, **dataloader_kwargs)
        self.last_batch_seconds: float | None = None
        self._batches = 0
        self._resume: tuple[int, int] | None = None
        self._live: weakref.ref | None = None  # weak: dropping the iterator (break, del) must stop it
        self._stage: _Stage | None = None
        self._totals = {"batches": 0, "stage_seconds": 0.0, "wait_seconds": 0.0}
        self._routes: dict[str, Any] = {}

    # -- iteration -------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.close()  # one live iteration at a time (they share the dataset's position)
        pin_mmap_threshold()  # this process decodes: keep its heap flat over epochs (heap.py)
        epoch = self.dataset.epoch
        resume, self._resume = self._resume, None
        self._batches = resume[1] if resume is not None and resume[0] == epoch else 0
        device, capability = _device_info(self.dataset.decode_device)
        source = iter(self.dataloader)  # workers start here, in the caller's thread
        stage = _Stage(self, source, device, capability)
        live = _LoaderIter(self, Prefetcher(stage.run, self.prefetch_batches, name="roboreel-decode"), device)
        self._live, self._stage = weakref.ref(live), stage
        return live

    def close(self) -> None:
        """Stop the live iteration, if any: its decode thread, decoders and DataLoader workers."""
        live = self._live() if self._live is not None else None
        if live is not None:
            live.close()
        stage, self._live, self._stage = self._stage, None, None
        # Wait until the thread let go of the DataLoader iterator: with persistent workers the next epoch reuses
        # that iterator, and a thread still blocked in it would take the new epoch's first batch.
        if stage is not None and not stage.done.wait(_CLOSE_WAIT_S):
            logger.warning("the decode thread did not stop within %.0f s (still waiting for a DataLoader batch)",
                           _CLOSE_WAIT_S)

    def __len__(self) -> int:
        """Batches in the current epoch (all workers; each batches its own samples, as a DataLoader does)."""
        dl = self.dataloader
        per_worker = self.dataset.worker_samples(max(1, dl.num_workers))
        return sum(worker_batches(n, dl.batch_size, dl.drop_last) for n in per_worker)

    def set_epoch(self, epoch: int) -> None:
        """``dataset.set_epoch``: call it at the start of every epoch, before iterating."""
        self.dataset.set_epoch(epoch)

    # -- resume ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a trainer saves: the dataset's position after the batches this loader has *returned* this epoch
        (batches decoded ahead but not yet returned are not counted, so none is skipped on resume)."""
        return self.dataset.state_dict(batches=self._batches, loader=self.dataloader)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration of the saved epoch continues at the next batch."""
        if "batches" not in state:
            raise ValueError("this state has no 'batches': save DeviceLoader.state_dict() (or the dataset's "
                             "state_dict(batches=..., loader=...)), not the in-process dataset.state_dict()")
        self.dataset.load_state_dict(state)
        self._resume = (int(state["epoch"]), int(state["batches"]))

    # -- observability ---------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The dataset's counters (workers + decode stage) plus the stage's: batches, ``stage_seconds`` (decode
        + assembly + waiting for the GPU), ``wait_seconds`` (the loop waiting for a decoded batch: > 0 means
        decode is the bottleneck), clips per device and fallbacks by reason."""
        return {**self.dataset.stats(), **self._totals, **self._routes}


def loader(dataset: CompiledDataset, *, batch_size: int, num_workers: int = 0, prefetch_batches: int = 2,
           **dataloader_kwargs: Any) -> DeviceLoader:
    """Batches of ``dataset`` decoded on its ``decode_device`` in the main process: ``DeviceLoader(...)``."""
    return DeviceLoader(dataset, batch_size=batch_size, num_workers=num_workers, prefetch_batches=prefetch_batches,
                        **dataloader_kwargs)


def _device_info(decode_device: str) -> tuple[torch.device, tuple[int, int] | None]:
    """The exact device ("cuda" -> "cuda:<current>") and its compute capability (None on the CPU)."""
    if decode_device == "cpu":
        return torch.device("cpu"), None
    device = torch.device(decode_device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device, tuple(torch.cuda.get_device_capability(device.index))


class _Stage:
    """The decode stage: runs on the Prefetcher's thread, one PendingBatch in, one device batch out."""

    def __init__(self, owner: DeviceLoader, source: Iterator[PendingBatch], device: torch.device,
                 capability: tuple[int, int] | None) -> None:
        self.owner, self.source, self.device, self.capability = owner, source, device, capability
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
        router = Router(str(self.device), cameras=cameras, capability=self.capability)
        decoders = DeviceDecoders(router, keep=ds.keep_frames, max_gpu_decoders=owner.max_gpu_decoders)
        store = ClipStore()
        flusher = Flusher(ds._counters, 0)  # row 0: the main process (the dataset's shared counters)
        stream = None
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            stream = torch.cuda.Stream(self.device)

        def flush() -> None:
            d = decoders.stats
            flusher.flush({"decode_seconds": d.decode_seconds, "decoder_opens": d.decoder_opens,
                           "decoder_reuses": d.decoder_reuses, "decode_calls": d.decode_calls,
                           "frames_decoded": d.frames_decoded, "fallback_clips": router.fallback_clips})
            owner._routes = {"clips_by_device": dict(router.clips), "fallbacks": dict(router.fallbacks)}

        try:
            for pending in self.source:
                t0 = time.perf_counter()
                with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                    batch = assemble(pending, decoders, store, device=self.device, tolerance_s=ds.tolerance_s,
                                     return_uint8=ds.return_uint8, image_transforms=ds.image_transforms)
                if stream is not None:
                    stream.synchronize()  # blocks this thread only; the batch is complete when handed over
                dt = time.perf_counter() - t0
                owner._totals["stage_seconds"] += dt
                flush()
                yield batch, pending.produce_seconds + dt
        finally:
            decoders.close()
            store.clear()
            flush()


class _LoaderIter:
    """What ``iter(DeviceLoader)`` returns: takes decoded batches off the stage's queue."""

    def __init__(self, owner: DeviceLoader, prefetch: Prefetcher, device: torch.device) -> None:
        self.owner, self.prefetch, self.device = owner, prefetch, device

    def __iter__(self) -> _LoaderIter:
        return self

    def __next__(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            batch, seconds = next(self.prefetch)
        except BaseException:
            self.close()
            raise
        self.owner._totals["wait_seconds"] += time.perf_counter() - t0
        if self.device.type == "cuda":
            current = torch.cuda.current_stream(self.device)
            for v in batch.values():
                if isinstance(v, torch.Tensor) and v.is_cuda:
                    v.record_stream(current)  # made on the decode stream, used (and freed) on this one
        self.owner._batches += 1
        self.owner._totals["batches"] += 1
        self.owner.last_batch_seconds = seconds
        return batch

    def close(self) -> None:
        self.prefetch.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
