"""``roboreel.loader``: the way to train. Decoded pixels never cross a process boundary.

At real camera sizes (480x640) a DataLoader moving decoded uint8 frames from worker processes to the trainer
spends as much as decoding them, and CUDA cannot be used in forked workers at all. So the work is split:
- DataLoader workers (processes) do everything but decode: read shards, pool episodes, pick frames, window,
  collate tabular values (``CompiledDataset.iter_pending`` + ``deferred.collate_pending``). What crosses to this
  process is small: a clip's compressed bytes once, then frame requests.
- This process runs the decode stage (_stage.py) on a background thread: it feeds a pool of decode threads
  (decode/_stage.py; default one per available core; torchcodec releases the GIL) that write frames straight into
  one preallocated uint8 tensor per camera and batch (pinned when the batch goes to CUDA), and finishes batches in the
  DataLoader's order: moved to the device as uint8, divided by 255 there unless ``return_uint8``.

With ``DecodeOptions(device="cuda")`` the pool decodes on NVDEC on its own CUDA stream, and the thread waits for
that stream before handing a batch over; the consumer marks each tensor as used on its current stream
(``record_stream``), so the caching allocator cannot hand the memory back to the decode stream while the step
still reads it. Batches ready ahead are bounded: ``prefetch_batches`` queued, ``inflight_batches`` being
decoded, one held by the loop.

Batches equal ``DataLoader(CompiledDataset(...))``'s exactly on the CPU (same order, values, resume state).
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
from roboreel.reader.decode import (
    DECODE_MMAP_THRESHOLD_BYTES,
    DECODE_TRIM_THRESHOLD_BYTES,
    DEFAULT_MAX_GPU_DECODERS,
    BufferPool,
    collate_pending,
    default_decode_threads,
    default_inflight_batches,
    pin_mmap_threshold,
)
from roboreel.reader.fetch import Prefetcher
from roboreel.reader.loader._stage import DecodeStage
from roboreel.reader.mixture import MixtureDataset
from roboreel.reader.order import OrderMeter
from roboreel.reader.plan import worker_batches

logger = logging.getLogger(__name__)

_REFUSED = ("collate_fn", "sampler", "batch_sampler", "shuffle")
_CLOSE_WAIT_S = 120.0
_HELD_BATCHES = 4  # outside the queues: one submitted, one being finished, two held by the loop (old and new)


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
        dataset: a ``CompiledDataset``; its ``decode_device`` ("cpu", "cuda", "cuda:N") is where frames decode.
        device: where batches land (default: the decode device). A dataset with ``DecodeOptions(device="cpu")``
            and ``device="cuda"`` decodes on the CPU and sends uint8 frames to the GPU (pinned, 4x fewer bytes than
            float32), where they become float32: for GPUs without NVDEC for the codec (AV1 on A100/H100), or to keep
            NVDEC free.
        batch_size, num_workers: as ``torch.utils.data.DataLoader``.
        prefetch_batches: decoded batches kept ready ahead of the training loop (GPU memory scales with it).
        decode_threads: decode threads in this process (default: the cores it may use, ``os.sched_getaffinity``).
        inflight_batches: batches decoded at once (threads move on to the next batch while one clip finishes);
            default ``decode_threads // 2``, 2 to 8 (``default_inflight_batches``: why, and its memory).
        max_gpu_decoders: open GPU decoders (NVDEC sessions) at most; least recently used closed beyond it.
        channels_last: camera tensors keep the decoder's memory order: the same shape [B, (T,) C, H, W] and values,
            channels-last strides (``torch.channels_last`` for 4-D), as convolutions on a GPU prefer. On the CPU this
            skips the deinterleave into [C, H, W] memory (~0.04 ms of a 480x640 frame with OpenCV, ~0.25 ms
            without it). Off by default: code that calls ``.view()`` on a frame needs contiguous memory.
        mix_workers: every batch takes ``batch_size / num_workers`` samples from each worker's pool, so it mixes
            the episodes of all workers, not of one (decode/_mixing.py): the DataLoader batches that many and
            ``num_workers`` consecutive batches are merged before decoding. None (default): wherever it can
            (``num_workers > 1``, ``batch_size`` divisible by it, no ``drop_last``); True: required (ValueError
            where it cannot); False: batches as ``DataLoader(dataset, batch_size=...)`` makes them, one worker's
            each. A state saved with mixing resumes only with mixing.
        **dataloader_kwargs: passed to the DataLoader (``prefetch_factor``, ``persistent_workers``,
            ``pin_memory``, ``drop_last``, ``multiprocessing_context``, ...); not ``collate_fn``/samplers.
            ``persistent_workers`` defaults to True when ``num_workers > 0``: workers live across epochs, and
            ``set_epoch`` / ``load_state_dict`` reach them through the dataset's epoch board (board.py).

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
        decode_threads: int | None = None,
        inflight_batches: int | None = None,
        max_gpu_decoders: int = DEFAULT_MAX_GPU_DECODERS,
        device: str | torch.device | None = None,
        channels_last: bool = False,
        mix_workers: bool | None = None,
        **dataloader_kwargs: Any,
    ) -> None:
        if not isinstance(dataset, CompiledDataset | MixtureDataset):
            raise ValueError(f"dataset must be a roboreel CompiledDataset (one or a mixture), got {type(dataset).__name__}")
        if decode_threads is None:
            decode_threads = default_decode_threads()
        if inflight_batches is None and isinstance(decode_threads, int) and decode_threads >= 1:
            inflight_batches = default_inflight_batches(decode_threads)
        for name, value, low in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0),
                                 ("prefetch_batches", prefetch_batches, 1), ("max_gpu_decoders", max_gpu_decoders, 1),
                                 ("decode_threads", decode_threads, 1), ("inflight_batches", inflight_batches, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        refused = sorted(k for k in dataloader_kwargs if k in _REFUSED)
        if refused:
            raise ValueError(f"roboreel.loader does not take {refused}: it collates compressed batches itself and "
                             f"the dataset orders samples (seed, shuffle). Not accepted: {list(_REFUSED)}")
        if dataloader_kwargs.get("in_order", True) is not True:
            raise ValueError("in_order must be True: clip bytes are shipped once per worker and need its batches "
                             "in order")
        if not isinstance(channels_last, bool):
            raise ValueError(f"channels_last must be True or False, got {channels_last!r}")
        self.mix = _mix(mix_workers, batch_size, num_workers, bool(dataloader_kwargs.get("drop_last", False)))
        self.dataset, self.channels_last = dataset, channels_last
        if self.mix > 1:  # each worker gives a batch B / W samples: the default order's spread (unmixed batches
            dataset.use_batch_share(batch_size // self.mix)  # stay those of DataLoader(dataset), spread and all)
        self.prefetch_batches, self.max_gpu_decoders = prefetch_batches, max_gpu_decoders
        self.decode_threads, self.inflight_batches = decode_threads, inflight_batches
        if num_workers > 0:
            # Workers kept across epochs (docs/reader.md, "Epochs"): re-forking them every epoch cost ~40% of the
            # samples/s on a small dataset and inflated the tree's RSS; set_epoch still reaches them (board.py)
            dataloader_kwargs.setdefault("persistent_workers", True)
        self.device = None if device is None else torch.device(device)
        if self.device is not None and dataset.decode_device != "cpu" and self.device.type != "cuda":
            raise ValueError(f"device={str(self.device)!r}: a dataset decoding on {dataset.decode_device} delivers "
                             "batches on that GPU (leave device unset)")
        self.batch_size = batch_size  # what a batch holds; the DataLoader's hold batch_size / mix
        self.dataloader = DataLoader(_PendingStream(dataset), batch_size=batch_size // self.mix,
                                     num_workers=num_workers, collate_fn=collate_pending, **dataloader_kwargs)
        self.last_batch_seconds: float | None = None
        self._batches = 0
        self._resume: tuple[int, int] | None = None
        self._live: weakref.ref | None = None  # weak: dropping the iterator (break, del) must stop it
        # Only the stage's done flag, not the stage: the stage refers back to this loader, and a reference cycle
        # through the DataLoader's persistent-worker iterator would leave its shutdown to the garbage collector,
        # which runs multiprocessing's queue finalizers first: the workers never get their stop signal and torch
        # waits 5 s for each before killing it.
        self._stage_done: threading.Event | None = None
        self._totals = {"batches": 0, "stage_seconds": 0.0, "wait_seconds": 0.0}
        self._order = OrderMeter()  # the batches' sample order (order.py), in stats()["order"]
        self._routes: dict[str, Any] = {}
        # batch arrays reused across batches and epochs (_buffers.py). Every camera of a size shares one list, so
        # the pool must hold what all cameras have in flight at once: batches queued, being decoded, being finished
        # and the one or two the loop holds. Sized for one camera (8), a 3-camera 224x224 loader never got an array
        # back and faulted in 3 fresh mmaps per batch: ~7% of its CPU in the kernel (perf, docs/benchmarks.md).
        self._buffers = BufferPool(keep=(prefetch_batches + inflight_batches + _HELD_BATCHES)
                                   * max(1, len(dataset.manifest.cameras)))

    # -- iteration -------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._stop()  # one live iteration at a time (they share the dataset's position)
        # this process decodes: fast and flat (_heap.py)
        pin_mmap_threshold(DECODE_MMAP_THRESHOLD_BYTES, DECODE_TRIM_THRESHOLD_BYTES)
        epoch = self.dataset.epoch
        resume, self._resume = self._resume, None
        self._batches = resume[1] if resume is not None and resume[0] == epoch else 0
        decode, capability = _device_info(self.dataset.decode_device)
        device = decode if self.device is None else _device_info(str(self.device))[0]
        if decode.type == "cuda" and device != decode:
            raise ValueError(f"device={str(device)!r} but the dataset decodes on {decode}: batches land where they "
                             "decode on a GPU (leave device unset)")
        source = iter(self.dataloader)  # workers start (or, persistent, restart their iterators) here
        if self.dataloader.num_workers > 0:
            self.dataset._begun_in_workers(epoch)
        stage = DecodeStage(self, source, device, decode, capability)
        live = _LoaderIter(self, Prefetcher(stage.run, self.prefetch_batches, name="roboreel-decode"), device)
        self._live, self._stage_done = weakref.ref(live), stage.done
        return live

    def close(self) -> None:
        """Stop the live iteration, if any (its decode thread and decoders), and the DataLoader workers, persistent
        ones included; a later ``iter()`` starts new workers at the dataset's current epoch."""
        self._stop()
        it, self.dataloader._iterator = self.dataloader._iterator, None  # torch keeps persistent workers there
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    def _stop(self) -> None:
        """Stop the live iteration, if any: its decode thread, decoders and (non-persistent) DataLoader workers."""
        live = self._live() if self._live is not None else None
        if live is not None:
            live.close()
        done, self._live, self._stage_done = self._stage_done, None, None
        # Wait until the thread let go of the DataLoader iterator: with persistent workers the next epoch reuses
        # that iterator, and a thread still blocked in it would take the new epoch's first batch.
        if done is not None and not done.wait(_CLOSE_WAIT_S):
            logger.warning("the decode thread did not stop within %.0f s (still waiting for a DataLoader batch)",
                           _CLOSE_WAIT_S)

    def __len__(self) -> int:
        """Batches in the current epoch (all workers; each batches its own samples, as a DataLoader does; with
        ``mix_workers``, ``num_workers`` of those to a batch)."""
        return -(-self._dataloader_batches() // self.mix)

    def _dataloader_batches(self) -> int:
        """The DataLoader's batches in the current epoch."""
        dl = self.dataloader
        per_worker = self.dataset.worker_samples(max(1, dl.num_workers))
        return sum(worker_batches(n, dl.batch_size, dl.drop_last) for n in per_worker)

    def set_epoch(self, epoch: int) -> None:
        """``dataset.set_epoch``: call it at the start of every epoch, before iterating."""
        self.dataset.set_epoch(epoch)
        # Nothing of the new epoch is returned yet, unless a loaded state resumes this very epoch: a state saved
        # before the first batch must say so, or a resume would skip the finished epoch's batch count in it.
        if self._resume is not None and self._resume[0] != int(epoch):
            self._resume = None
        self._batches = self._resume[1] if self._resume is not None else 0

    # -- resume ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a trainer saves: the dataset's position after the batches this loader has *returned* this epoch
        (batches decoded ahead but not yet returned are not counted, so none is skipped on resume)."""
        batches = self._batches if self.mix == 1 else min(self._batches * self.mix, self._dataloader_batches())
        return self.dataset.state_dict(batches=batches, loader=self.dataloader)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration of the saved epoch continues at the next batch."""
        if "batches" not in state:
            raise ValueError("this state has no 'batches': save DeviceLoader.state_dict() (or the dataset's "
                             "state_dict(batches=..., loader=...)), not the in-process dataset.state_dict()")
        saved = {"batch_size": state.get("batch_size"), "drop_last": state.get("drop_last")}
        now = {"batch_size": self.dataloader.batch_size, "drop_last": bool(self.dataloader.drop_last)}
        differ = [f"{k}={saved[k]} (this loader: {now[k]})" for k in now if saved[k] is not None and saved[k] != now[k]]
        if differ:
            # The state counts batches of the saved size: this loader would count its own on from there, and a
            # state saved later would put the stream at the wrong sample (samples skipped or read twice).
            # with mix_workers a state counts DataLoader batches of batch_size / num_workers
            raise ValueError(f"the state was saved by a loader with DataLoader batches of {', '.join(differ)}: "
                             "resume with the same batch_size, drop_last and mix_workers")
        self.dataset.load_state_dict(state)
        self._resume = (int(state["epoch"]), -(-int(state["batches"]) // self.mix))  # in this loader's batches
        self._batches = self._resume[1]  # saved again before iterating, the state is the loaded one, not batch 0

    # -- observability ---------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The dataset's counters (workers + decode stage) plus the stage's: batches, ``stage_seconds`` (decode
        + assembly + waiting for the GPU), ``wait_seconds`` (the loop waiting for a decoded batch: > 0 means
        decode is the bottleneck), clips per device and fallbacks by reason; ``order``: the decoded batches'
        distinct episodes and near-duplicate pairs per batch, beside uniform sampling's (order.py)."""
        lengths = getattr(self.dataset, "episode_lengths", None)
        order = self._order.summary(lengths() if lengths else None, fps=getattr(self.dataset, "fps", None))
        return {**self.dataset.stats(), **self._totals, **self._routes, "order": order}


def _mix(mix_workers: bool | None, batch_size: int, num_workers: int, drop_last: bool) -> int:
    """DataLoader batches merged into one (decode/_mixing.py): ``num_workers`` where ``mix_workers`` allows and the
    batch divides among the workers, else 1."""
    if mix_workers is not None and not isinstance(mix_workers, bool):
        raise ValueError(f"mix_workers must be None, True or False, got {mix_workers!r}")
    if mix_workers is False or num_workers <= 1:
        return 1
    if batch_size % num_workers or drop_last:
        if mix_workers is None:
            return 1
        raise ValueError(f"mix_workers=True takes batch_size / num_workers samples from each worker: it needs a "
                         f"batch_size divisible by num_workers (got {batch_size} and {num_workers}) and "
                         f"drop_last=False")
    return num_workers


def loader(dataset: CompiledDataset, *, batch_size: int, num_workers: int = 0, prefetch_batches: int = 2,
           decode_threads: int | None = None, inflight_batches: int | None = None,
           max_gpu_decoders: int = DEFAULT_MAX_GPU_DECODERS, device: str | torch.device | None = None,
           channels_last: bool = False, **dataloader_kwargs: Any) -> DeviceLoader:
    """Batches of ``dataset`` decoded by a pool of threads in this process: ``DeviceLoader(...)``. The way to
    train: decoded pixels never cross a process boundary (docs/reader.md).

    Args:
        dataset: a ``CompiledDataset`` (one or a mixture); frames decode on its ``decode_device``.
        batch_size, num_workers: as ``torch.utils.data.DataLoader``.
        prefetch_batches: decoded batches kept ready ahead of the training loop.
        decode_threads: decode threads in this process (default: the cores it may use).
        inflight_batches: batches decoded at once (default: ``default_inflight_batches(decode_threads)``).
        max_gpu_decoders: open GPU decoders (NVDEC sessions) at most.
        device: where batches land (default: the decode device).
        channels_last: camera tensors in the decoder's channels-last memory order.
        **dataloader_kwargs: ``DeviceLoader``'s ``mix_workers``, and the rest for the DataLoader
            (``prefetch_factor``, ``persistent_workers``, ``pin_memory``, ``drop_last``, ...).

    Each is ``DeviceLoader``'s argument of that name, which says more.
    """
    return DeviceLoader(dataset, batch_size=batch_size, num_workers=num_workers, prefetch_batches=prefetch_batches,
                        decode_threads=decode_threads, inflight_batches=inflight_batches,
                        max_gpu_decoders=max_gpu_decoders, device=device, channels_last=channels_last,
                        **dataloader_kwargs)


def _device_info(decode_device: str) -> tuple[torch.device, tuple[int, int] | None]:
    """The exact device ("cuda" -> "cuda:<current>") and its compute capability (None on the CPU)."""
    if torch.device(decode_device).type == "cpu":
        return torch.device("cpu"), None
    device = torch.device(decode_device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device, tuple(torch.cuda.get_device_capability(device.index))


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
