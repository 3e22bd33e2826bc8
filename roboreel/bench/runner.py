"""One benchmark run: build a reader, drive a DataLoader through warm-up and a steady window, measure.

samples/s is wall clock over the steady window (samples consumed / seconds between the first and last steady
batch), never a sum of per-batch gaps; a run that yields no steady samples raises.

Per-sample latency is worker time per sample: the time a worker spent producing a batch (inside ``next()`` or
``__getitems__``, never blocked on a full prefetch queue) divided by its size. Readers that decode several
samples in one call (both do) would otherwise show a 0 ms median and rare spikes; amortising per batch makes the
readers comparable. Percentiles are over the steady window's batches.

CPU time per sample: user + system seconds of the whole process tree (DataLoader workers included) over the
steady window, per sample: what the data path costs the machine, whatever its parallelism.

The ``loader`` reader, and the compiled reader with ``decode_device="cuda"`` (or ``device_loader=True``), are read
through ``roboreel.loader``:
workers yield compressed batches and the main process decodes them (on the GPU). Its per-sample latency is then
the worker time producing the batch plus the decode stage's time for it (``DeviceLoader.last_batch_seconds``),
over the batch size; on CUDA the run also reports peak GPU memory (``torch.cuda.max_memory_allocated`` and
``max_memory_reserved``, reset before the run). Other readers decode on the CPU and the consumer copies batches
to the GPU.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

from roboreel.bench.config import RunConfig
from roboreel.bench.procmem import PeakRSS, tree_cpu_seconds
from roboreel.bench.readers import (
    LATENCY_KEY,
    README_READERS,
    SOURCE_READERS,
    Built,
    build,
    mixture_members,
    to_device,
)
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.reader import CompiledDataset, StreamOptions
from roboreel.reader.order import OrderMeter, order_keys

ORDER_KEYS = ("episode_index", "timestamp", "dataset_index")


class BenchError(RuntimeError):
    """A benchmark run that measured nothing (zero samples) or could not run."""


def run_one(reader: str, mode: str, *, compiled: str, source: str, cfg: RunConfig, where: str = "local",
            repeat: int = 0, storage_options: dict | None = None) -> dict[str, Any]:
    """Run ``reader`` in ``mode`` once and return its metrics (one JSON-able dict).

    With ``cfg.warmup_epochs``, the reader first reads that many whole epochs, untimed, through the same loader
    (first batch and peak RSS still count them), and the steady window starts in the next epoch. With
    ``cfg.span_epochs`` (the default) a window longer than the rest of that epoch runs on into the next ones,
    ``set_epoch`` each, as a training loop does: on a small dataset epoch starts are part of what training sees
    (workers forked again every epoch cost 40% there), so the window counts them. A training run
    spends nearly all its time past its first seconds, where every reader has its decoders opened, its heap
    faulted in and its buffers allocated; a small benchmark dataset's first epoch is mostly those seconds. Every
    reader gets the same treatment, LeRobotDataset included."""
    job = _Job(reader, mode, compiled=compiled, source=source, where=where, repeat=repeat,
               storage_options=storage_options)
    reading = _open_reading(job, cfg)
    if reading.gpu:
        torch.cuda.synchronize(reading.device)
        torch.cuda.reset_peak_memory_stats(reading.device)
    with PeakRSS() as mem:
        tally = _Tally(t0=time.perf_counter())
        _read_warmup_epochs(reading, tally)
        stats_before = reading.built.stats() if reading.built.stats else None
        _read_steady_window(reading, tally)
        _close_reading(reading, tally)
    _check_steady_window(job, cfg, tally)
    stats = _stats_since(reading.built, stats_before)
    gpu_mem = _gpu_memory(reading)
    return {
        "reader": reader, "mode": mode, "where": where, "repeat": repeat, **asdict(cfg),
        **_throughput(tally),
        "peak_rss_mb": mem.peak / 2**20,
        **_order_figures(tally.order, reader, compiled=compiled, source=source, storage_options=storage_options),
        **_costs(reading, tally, stats),
        **gpu_mem,
    }


@dataclass(frozen=True)
class _Job:
    """What one run reads, and where: ``run_one``'s arguments besides its RunConfig, as one value for its steps."""

    reader: str
    mode: str
    compiled: str
    source: str
    where: str
    repeat: int
    storage_options: dict | None


@dataclass(frozen=True)
class _Reading:
    """A built reader and the loader driving it: what every step of the run's loop reads from."""

    built: Built
    loader: Any  # a DataLoader, or roboreel's DeviceLoader when ``staged``
    staged: bool  # decoded in the main process (roboreel.loader): latency and stage wait come from the loader
    device: torch.device
    cfg: RunConfig

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"


@dataclass
class _Tally:
    """What the run's loop counts as batches arrive (warm-up and steady window alike), read once it is over."""

    t0: float  # when the loop began: first_batch_s is measured from here
    latencies: list[float] = field(default_factory=list)  # worker (+ decode stage) seconds per sample, per batch
    order: OrderMeter = field(default_factory=OrderMeter)  # distinct episodes, near-duplicate pairs (reader/order.py)
    steady_samples: int = 0
    first_batch_s: float | None = None
    frame_dtype: str | None = None  # what the camera tensors really were (the run's return_uint8 setting, checked)
    t_steady: float | None = None
    t_end: float | None = None
    cpu_steady: float | None = None
    cpu_end: float | None = None
    n_batches: int = 0
    warmup_samples: int = 0  # read in the warm-up epochs
    steady_epochs: int = 0  # epochs the steady window touched (several when the dataset is smaller than the window)
    epoch_starts: list[float] = field(default_factory=list)  # iter() to first batch, each epoch from the steady one


def _open_reading(job: _Job, cfg: RunConfig) -> _Reading:
    """Build the reader and the loader it is read through, as its users would (see ``_loader``)."""
    built = build(job.reader, job.mode, compiled=job.compiled, source=job.source, cfg=cfg,
                  seed=cfg.seed + job.repeat, storage_options=job.storage_options)
    staged = built.compiled is not None and (built.staged or cfg.device_loader or job.reader in README_READERS)
    loader = _loader(job, built, cfg, staged=staged)
    return _Reading(built, loader, staged=staged, device=torch.device(cfg.decode_device), cfg=cfg)


def _loader_kwargs(job: _Job, built: Built, cfg: RunConfig) -> dict[str, Any]:
    """DataLoader's keywords for this run: one the DeviceLoader takes too, so both readers see the same knobs."""
    workers = 0 if job.reader == "loader_inproc" else cfg.num_workers
    kwargs: dict[str, Any] = {"batch_size": cfg.batch_size, "num_workers": workers}
    if workers > 0:
        # Persistent, as lerobot-train runs them: with a warm-up epoch, workers forked again each epoch would
        # inherit (and the tree's RSS count again) whatever the training process has grown since.
        kwargs.update(prefetch_factor=cfg.prefetch_factor, persistent_workers=cfg.persistent_workers)
    if built.map_style:
        gen = torch.Generator().manual_seed(cfg.seed + job.repeat)
        kwargs["sampler"] = RandomSampler(built.dataset, generator=gen)
    return kwargs


def _loader(job: _Job, built: Built, cfg: RunConfig, *, staged: bool) -> Any:
    """The README readers through ``roboreel.loader`` as written there, other staged readers through a tuned
    DeviceLoader, the rest through a plain DataLoader (decoding in its workers)."""
    kwargs = _loader_kwargs(job, built, cfg)
    if job.reader in README_READERS:
        import roboreel

        # The README's call as written: every other knob at its default (the refork variant: the old default)
        extra: dict[str, Any] = ({"persistent_workers": False}
                                 if job.reader == "loader_refork" and cfg.num_workers > 0 else {})
        if job.reader == "loader_unmixed":
            extra["mix_workers"] = False
        return roboreel.loader(built.compiled, batch_size=cfg.batch_size, num_workers=cfg.num_workers, **extra)
    if staged:
        from roboreel.reader.loader import DeviceLoader

        return DeviceLoader(built.compiled, prefetch_batches=cfg.prefetch_batches, decode_threads=cfg.decode_threads,
                            channels_last=job.reader == "loader_cl", **kwargs)
    return DataLoader(built.dataset, **kwargs)


def _note_first_batch(tally: _Tally, batch: dict[str, Any], built: Built, now: float) -> None:
    """Time to the run's first batch (warm-up epochs included: a user waits for it all the same), and its dtype."""
    if tally.first_batch_s is None:
        tally.first_batch_s = now - tally.t0
        tally.frame_dtype = _frame_dtype(batch, built.camera_keys)


def _read_warmup_epochs(reading: _Reading, tally: _Tally) -> None:
    """The untimed whole epochs before the steady one: decoders opened, heap faulted in, as training's are."""
    for epoch in range(reading.cfg.warmup_epochs):
        _set_epoch(reading.loader, reading.built.dataset, epoch)
        for batch in reading.loader:
            batch.pop(LATENCY_KEY, None)
            tally.warmup_samples += to_device(batch, reading.device)
            _note_first_batch(tally, batch, reading.built, time.perf_counter())


def _read_steady_window(reading: _Reading, tally: _Tally) -> None:
    """Epochs from the first after the warm-up ones, until the window is full; past an epoch's end only with
    ``span_epochs``, as a training loop goes on. Warm-up batches come from the steady epoch alone: a window that
    has not begun by its end never will."""
    epoch = reading.cfg.warmup_epochs
    while True:
        read = _read_steady_epoch(reading, tally, epoch)
        if tally.cpu_end is not None or not reading.cfg.span_epochs or read == 0 or tally.t_steady is None:
            break
        epoch += 1


def _read_steady_epoch(reading: _Reading, tally: _Tally, epoch: int) -> int:
    """One epoch of the steady window, timing what its start costs the loop (iter() to its first batch);
    returns the batches it read."""
    _set_epoch(reading.loader, reading.built.dataset, epoch)
    before, t_iter = tally.n_batches, time.perf_counter()
    it = iter(reading.loader)
    for batch in it:
        if tally.n_batches == before:
            tally.epoch_starts.append(time.perf_counter() - t_iter)
        if _take_batch(reading, tally, batch):
            break
    del it
    tally.steady_epochs += tally.t_steady is not None
    return tally.n_batches - before


def _take_batch(reading: _Reading, tally: _Tally, batch: dict[str, Any]) -> bool:
    """Count one batch: the steady window starts when the first post-warm-up batch arrives; True once it is full
    (CPU time read before the workers exit: theirs leaves with them)."""
    cfg = reading.cfg
    lat_s = reading.loader.last_batch_seconds if reading.staged else float(batch.pop(LATENCY_KEY).sum())
    n = to_device(batch, reading.device)
    now = time.perf_counter()
    tally.n_batches += 1
    _note_first_batch(tally, batch, reading.built, now)
    if tally.n_batches == cfg.warmup_batches + 1 and tally.t_steady is None:
        tally.t_steady = now
        tally.cpu_steady = tree_cpu_seconds()
    elif tally.t_steady is not None:
        tally.steady_samples += n
        tally.latencies.append(lat_s / max(1, n))
        tally.order.add(*order_keys({k: batch[k].cpu() for k in ORDER_KEYS if k in batch}))
        tally.t_end = now
    if tally.t_steady is not None and _window_full(cfg, tally, now):
        tally.cpu_end = tree_cpu_seconds()
        return True
    return False


def _window_full(cfg: RunConfig, tally: _Tally, now: float) -> bool:
    """``cfg.seconds`` of steady window when set, else ``cfg.batches`` steady batches."""
    if cfg.seconds is not None:
        return now - tally.t_steady >= cfg.seconds
    return tally.n_batches >= cfg.warmup_batches + 1 + cfg.batches


def _close_reading(reading: _Reading, tally: _Tally) -> None:
    """End the window's CPU count if the data ran out first, then release the loader (its workers) and garbage,
    still inside the peak-RSS watch."""
    if tally.cpu_end is None and tally.cpu_steady is not None:
        tally.cpu_end = tree_cpu_seconds()
    if hasattr(reading.loader, "close"):
        reading.loader.close()
    gc.collect()


def _check_steady_window(job: _Job, cfg: RunConfig, tally: _Tally) -> None:
    """A run whose steady window holds no samples measured nothing: say so, and what to change."""
    if tally.steady_samples == 0 or tally.t_end is None or tally.t_steady is None or tally.t_end <= tally.t_steady:
        raise BenchError(
            f"{job.reader}/{job.mode}: no samples in the steady window ({tally.n_batches} batches in all, warm-up "
            f"{cfg.warmup_batches}); use a larger dataset or fewer warm-up batches"
        )


def _stats_since(built: Built, before: dict[str, Any] | None) -> dict[str, Any] | None:
    """The reader's counters over the steady window alone (warm-up epochs subtracted); None without counters."""
    if not built.stats:
        return None
    after = built.stats()
    return {k: after[k] - (before or {}).get(k, 0) for k in after}


def _gpu_memory(reading: _Reading) -> dict[str, float | None]:
    """Peak GPU memory since the run's start (reset before it), in MB; None off the GPU."""
    if not reading.gpu:
        return {"gpu_max_allocated_mb": None, "gpu_max_reserved_mb": None}
    torch.cuda.synchronize(reading.device)
    return {"gpu_max_allocated_mb": torch.cuda.max_memory_allocated(reading.device) / 2**20,
            "gpu_max_reserved_mb": torch.cuda.max_memory_reserved(reading.device) / 2**20}


def _throughput(tally: _Tally) -> dict[str, Any]:
    """samples/s as wall clock over the steady window, first batch and latency percentiles (per sample, over the
    steady batches). The ceiling's keys stay empty here: the suite measures it around each run (set_ceiling)."""
    steady_s = tally.t_end - tally.t_steady
    sps = tally.steady_samples / steady_s
    lat_ms = np.array(tally.latencies) * 1e3
    return {
        "samples": tally.steady_samples, "warmup_samples": tally.warmup_samples, "steady_s": steady_s,
        "samples_per_s": sps, "steady_epochs": tally.steady_epochs,
        "epoch_start_s": float(np.median(tally.epoch_starts)) if tally.epoch_starts else None,
        "ceiling_samples_per_s": None, "ceiling_fraction": None,
        "first_batch_s": tally.first_batch_s,
        "latency_p50_ms": float(np.percentile(lat_ms, 50)), "latency_p95_ms": float(np.percentile(lat_ms, 95)),
        "latency_p99_ms": float(np.percentile(lat_ms, 99)),
    }


def _costs(reading: _Reading, tally: _Tally, stats: dict[str, Any] | None) -> dict[str, Any]:
    """What the steady window cost: CPU time per sample, the reader's own counters, where decoding ran."""
    cpu_ms = ((tally.cpu_end - tally.cpu_steady) * 1e3 / tally.steady_samples
              if tally.cpu_end is not None and tally.cpu_steady is not None else None)
    return {
        "cpu_ms_per_sample": cpu_ms,
        "decode_s": stats.get("decode_seconds") if stats else None,
        "fetch_s": stats.get("fetch_seconds") if stats else None,
        "decoder_opens": stats.get("decoder_opens") if stats else None,
        "decoder_reuses": stats.get("decoder_reuses") if stats else None,
        "reader_stats": stats,
        "cameras": reading.built.cameras,
        "frame_dtype": tally.frame_dtype,
        "decode_stage": "main-process" if reading.staged else "dataloader-workers",
        "fallback_clips": stats.get("fallback_clips") if stats else None,
        "stage_wait_s": reading.loader.stats()["wait_seconds"] if reading.staged else None,
    }


def _order_figures(order: OrderMeter, reader: str, *, compiled: str, source: str,
                   storage_options: dict | None) -> dict[str, float | None]:
    """The steady batches' order figures beside uniform sampling's over what ``reader`` reads (its episode
    lengths and fps: the source's for the source readers); no uniform figures for a mixture (weighted draws)."""
    lengths, fps = None, None
    if reader in SOURCE_READERS:
        src = LeRobotSource(source, storage_options=storage_options)
        lengths, fps = np.array([e.length for e in src.episodes], dtype=np.int64), src.fps
    elif len(mixture_members(compiled)) == 1:
        ds = CompiledDataset(compiled, stream=StreamOptions(storage_options=storage_options))
        lengths, fps = ds.episode_lengths(), ds.fps
    figures = order.summary(lengths, fps=fps)
    figures.pop("batches")  # the run's own "batches" is its configured window
    return figures


def _frame_dtype(batch: dict[str, Any], camera_keys: Any) -> str | None:
    return next((str(v.dtype) for k, v in batch.items() if k in camera_keys and isinstance(v, torch.Tensor)), None)


def _set_epoch(loader: Any, dataset: Any, epoch: int) -> None:
    """Select ``epoch`` where the reader has epochs (roboreel's readers); a map-style dataset's RandomSampler
    reshuffles on every pass by itself."""
    target = loader if hasattr(loader, "set_epoch") else dataset
    if hasattr(target, "set_epoch"):
        target.set_epoch(epoch)
