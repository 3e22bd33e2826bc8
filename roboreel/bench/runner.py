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
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

from roboreel.bench.procmem import PeakRSS, tree_cpu_seconds
from roboreel.bench.readers import (
    LATENCY_KEY,
    README_READERS,
    SOURCE_READERS,
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


@dataclass(frozen=True)
class RunConfig:
    """Knobs of one run (shared by every reader in a comparison)."""

    batch_size: int = 32
    num_workers: int = 2
    prefetch_factor: int = 2  # DataLoader's: batches each worker has ready ahead
    prefetch_batches: int = 2  # roboreel.loader's: decoded batches kept ready ahead of the loop
    persistent_workers: bool = True  # as lerobot-train (its default): workers live across epochs
    episode_pool_size: int | None = None  # CompiledDataset's (None: its default)
    decode_device: str = "cpu"
    device_loader: bool = False  # read the compiled reader through roboreel.loader even on the CPU
    return_uint8: bool = False  # camera frames as uint8 (normalise on the GPU): the transport costs 4x less
    warmup_batches: int = 3
    warmup_epochs: int = 0  # whole epochs read (untimed) before the measured one: the steady state (see run_one)
    batches: int = 40
    seconds: float | None = None  # stop the steady window after this long instead of after ``batches``
    seed: int = 0
    decode_threads: int | None = None  # the loader reader's decode threads (None: the available cores)
    # (height, width): the source readers (reference, lerobot) resize camera frames with torchvision's
    # Resize(antialias=True) as an image transform, what users do today instead of compiling at that size
    resize: tuple[int, int] | None = None
    span_epochs: bool = True  # the steady window runs on into the next epochs (set_epoch each) until it is full
    weights: tuple[float, ...] | None = None  # a mixture's (compiled = "a,b,..."); None: every frame once
    remap_file: str | None = None  # a mixture's canonical keys (JSON/YAML, as roboreel inspect --remap reads it)
    pad: str | None = None  # a mixture's 1-D feature padding ("max")


def run_one(reader: str, mode: str, *, compiled: str, source: str, cfg: RunConfig, where: str = "local",
            repeat: int = 0, ceiling_frames_per_s: float | None = None,
            storage_options: dict | None = None) -> dict[str, Any]:
    """Run ``reader`` in ``mode`` once and return its metrics (one JSON-able dict).

    With ``cfg.warmup_epochs``, the reader first reads that many whole epochs, untimed, through the same loader
    (first batch and peak RSS still count them), and the steady window starts in the next epoch. With
    ``cfg.span_epochs`` (the default) a window longer than the rest of that epoch runs on into the next ones,
    ``set_epoch`` each, as a training loop does: on a small dataset epoch starts are part of what training sees
    (workers forked again every epoch cost 40% there), so the window counts them. A training run
    spends nearly all its time past its first seconds, where every reader has its decoders opened, its heap
    faulted in and its buffers allocated; a small benchmark dataset's first epoch is mostly those seconds. Every
    reader gets the same treatment, LeRobotDataset included."""
    built = build(reader, mode, compiled=compiled, source=source, episode_pool_size=cfg.episode_pool_size, seed=cfg.seed + repeat,
                  decode_device=cfg.decode_device, storage_options=storage_options, return_uint8=cfg.return_uint8,
                  resize=tuple(cfg.resize) if cfg.resize else None, weights=cfg.weights,
                  remap_file=cfg.remap_file, pad=cfg.pad)
    workers = 0 if reader == "loader_inproc" else cfg.num_workers
    loader_kwargs: dict[str, Any] = {"batch_size": cfg.batch_size, "num_workers": workers}
    if workers > 0:
        # Persistent, as lerobot-train runs them: with a warm-up epoch, workers forked again each epoch would
        # inherit (and the tree's RSS count again) whatever the training process has grown since.
        loader_kwargs.update(prefetch_factor=cfg.prefetch_factor, persistent_workers=cfg.persistent_workers)
    if built.map_style:
        gen = torch.Generator().manual_seed(cfg.seed + repeat)
        loader_kwargs["sampler"] = RandomSampler(built.dataset, generator=gen)
    staged = built.compiled is not None and (built.staged or cfg.device_loader or reader in README_READERS)
    if reader in README_READERS:
        import roboreel

        # The README's call as written: every other knob at its default (the refork variant: the old default)
        extra: dict[str, Any] = {"persistent_workers": False} if reader == "loader_refork" and cfg.num_workers > 0 else {}
        if reader == "loader_unmixed":
            extra["mix_workers"] = False
        loader: Any = roboreel.loader(built.compiled, batch_size=cfg.batch_size, num_workers=cfg.num_workers, **extra)
    elif staged:
        from roboreel.reader.loader import DeviceLoader

        loader = DeviceLoader(built.compiled, prefetch_batches=cfg.prefetch_batches, decode_threads=cfg.decode_threads,
                              channels_last=reader == "loader_cl", **loader_kwargs)
    else:
        loader = DataLoader(built.dataset, **loader_kwargs)
    device = torch.device(cfg.decode_device)
    gpu = device.type == "cuda"
    if gpu:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    latencies: list[float] = []
    order = OrderMeter()  # distinct episodes and near-duplicate pairs per steady batch (reader/order.py)
    steady_samples = 0
    first_batch_s = None
    frame_dtype = None  # what the camera tensors really were (the run's return_uint8 setting, checked)
    t_steady = t_end = None
    cpu_steady = cpu_end = None
    n_batches = 0
    warmup_samples = 0  # read in the warm-up epochs
    steady_epochs = 0  # epochs the steady window touched (several when the dataset is smaller than the window)
    epoch_starts: list[float] = []  # seconds from iter() to the first batch, each epoch from the steady one on
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        for epoch in range(cfg.warmup_epochs):
            _set_epoch(loader, built.dataset, epoch)
            for batch in loader:
                batch.pop(LATENCY_KEY, None)
                warmup_samples += to_device(batch, device)
                if first_batch_s is None:
                    first_batch_s = time.perf_counter() - t0
                    frame_dtype = _frame_dtype(batch, built.camera_keys)
        stats_before = built.stats() if built.stats else None
        epoch = cfg.warmup_epochs
        while True:  # the steady window; past the epoch's end only with span_epochs, as a training loop goes on
            _set_epoch(loader, built.dataset, epoch)
            before, t_iter = n_batches, time.perf_counter()
            it = iter(loader)
            for batch in it:
                if n_batches == before:  # what an epoch's start costs the loop: iter() to its first batch
                    epoch_starts.append(time.perf_counter() - t_iter)
                lat_s = loader.last_batch_seconds if staged else float(batch.pop(LATENCY_KEY).sum())
                n = to_device(batch, device)
                now = time.perf_counter()
                n_batches += 1
                if first_batch_s is None:
                    first_batch_s = now - t0
                    frame_dtype = _frame_dtype(batch, built.camera_keys)
                if n_batches == cfg.warmup_batches + 1 and t_steady is None:
                    t_steady = now  # the steady window starts when the first post-warm-up batch arrives
                    cpu_steady = tree_cpu_seconds()
                elif t_steady is not None:
                    steady_samples += n
                    latencies.append(lat_s / max(1, n))  # worker (+ decode stage) time per sample, per batch
                    order.add(*order_keys({k: batch[k].cpu() for k in ORDER_KEYS if k in batch}))
                    t_end = now
                if t_steady is not None and (
                    (cfg.seconds is not None and now - t_steady >= cfg.seconds)
                    or (cfg.seconds is None and n_batches >= cfg.warmup_batches + 1 + cfg.batches)
                ):
                    cpu_end = tree_cpu_seconds()  # before the workers exit (their CPU time leaves with them)
                    break
            del it
            steady_epochs += t_steady is not None
            # warm-up batches come from the steady epoch alone: a window that has not begun by its end never will
            if cpu_end is not None or not cfg.span_epochs or n_batches == before or t_steady is None:
                break
            epoch += 1
        if cpu_end is None and cpu_steady is not None:
            cpu_end = tree_cpu_seconds()
        if hasattr(loader, "close"):
            loader.close()
        gc.collect()
    if steady_samples == 0 or t_end is None or t_steady is None or t_end <= t_steady:
        raise BenchError(
            f"{reader}/{mode}: no samples in the steady window ({n_batches} batches in all, warm-up "
            f"{cfg.warmup_batches}); use a larger dataset or fewer warm-up batches"
        )
    sps = steady_samples / (t_end - t_steady)
    stats = None
    if built.stats:
        after = built.stats()
        stats = {k: after[k] - (stats_before or {}).get(k, 0) for k in after}
    gpu_mem = {"gpu_max_allocated_mb": None, "gpu_max_reserved_mb": None}
    if gpu:
        torch.cuda.synchronize(device)
        gpu_mem = {"gpu_max_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20,
                   "gpu_max_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20}
    lat_ms = np.array(latencies) * 1e3
    ceiling = ceiling_frames_per_s / built.cameras if ceiling_frames_per_s and built.cameras else None
    return {
        "reader": reader, "mode": mode, "where": where, "repeat": repeat, **asdict(cfg),
        "samples": steady_samples, "warmup_samples": warmup_samples, "steady_s": t_end - t_steady, "samples_per_s": sps,
        "steady_epochs": steady_epochs, "epoch_start_s": float(np.median(epoch_starts)) if epoch_starts else None,
        "ceiling_samples_per_s": ceiling, "ceiling_fraction": sps / ceiling if ceiling else None,
        "first_batch_s": first_batch_s,
        "latency_p50_ms": float(np.percentile(lat_ms, 50)), "latency_p95_ms": float(np.percentile(lat_ms, 95)),
        "latency_p99_ms": float(np.percentile(lat_ms, 99)),
        "peak_rss_mb": mem.peak / 2**20,
        **_order_figures(order, reader, compiled=compiled, source=source, storage_options=storage_options),
        "cpu_ms_per_sample": (cpu_end - cpu_steady) * 1e3 / steady_samples
        if cpu_end is not None and cpu_steady is not None else None,
        "decode_s": stats.get("decode_seconds") if stats else None,
        "fetch_s": stats.get("fetch_seconds") if stats else None,
        "decoder_opens": stats.get("decoder_opens") if stats else None,
        "decoder_reuses": stats.get("decoder_reuses") if stats else None,
        "reader_stats": stats,
        "cameras": built.cameras,
        "frame_dtype": frame_dtype,
        "decode_stage": "main-process" if staged else "dataloader-workers",
        "fallback_clips": stats.get("fallback_clips") if stats else None,
        "stage_wait_s": loader.stats()["wait_seconds"] if staged else None,
        **gpu_mem,
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
