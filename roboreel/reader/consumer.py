"""One consumer's stream, run: what a rank's DataLoader worker (or the main process) executes for one epoch.

``SliceReader`` on a prefetch thread (tar records -> ``LoadedEpisode``) -> ``PoolSchedule`` + ``pending_samples``
-> ``materialize`` in groups of ``decode_batch`` (or, deferred, the compressed pending samples for
``roboreel.loader``) -> samples, with the counters flushed as it goes and every thread, decoder and freed page
handed back when the iterator ends or is closed.

Separate from dataset.py because that module decides *what* a consumer reads (options, plan, resume position,
state) and this one only runs it: a generator over a schedule the dataset built, reading the dataset's settings
(``ConsumerSettings``, which ``CompiledDataset`` satisfies) and never changing them, except for ``Position``, its
live place for ``state_dict``. The settings are a Protocol so this module never imports dataset.py, which imports
it: the import graph of reader/ has no cycle, not even a type-only one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, Protocol

import numpy as np

from roboreel.formats.depth import DepthQuant
from roboreel.formats.manifest import Manifest
from roboreel.reader.decode.clips import ClipDecoders, materialize
from roboreel.reader.decode.deferred import ship_once
from roboreel.reader.decode.heap import release_free_memory
from roboreel.reader.decode.idle_policy import IdlePolicy
from roboreel.reader.fetch.prefetch import Prefetcher
from roboreel.reader.fetch.source import SliceReader, Store
from roboreel.reader.plan.epoch import Slice, World
from roboreel.reader.plan.pool import LoadedEpisode, PoolSchedule, pending_samples, still_needed
from roboreel.reader.stats import Flusher, SharedCounters


class ConsumerSettings(Protocol):
    """What a consumer reads of its dataset (``CompiledDataset`` has every one of these attributes)."""

    store: Store
    manifest: Manifest
    verify_checksums: bool
    retries: int
    backoff_s: float
    tabular_keys: list[str]
    image_keys: dict[str, bool]
    transformed_images: list[str]
    camera_keys: list[str]
    windows: dict[str, np.ndarray]
    readahead: int
    decode_device: str
    keep_frames: dict[str, int]
    depth: dict[str, DepthQuant]
    decode_cache_bytes: int
    idle_policy: IdlePolicy
    decode_batch: int
    tolerance_s: float
    return_uint8: bool
    image_transforms: Callable[..., Any] | None


class Position:
    """Where this process's live iterator is (for the in-process ``state_dict``)."""

    def __init__(self, epoch: int, world: World, start: int) -> None:
        self.epoch, self.world, self.yielded = epoch, world, start


def run_consumer(ds: ConsumerSettings, schedule: PoolSchedule, slices: list[Slice], position: Position, row: int,
                 counters: SharedCounters, *, deferred: bool = False) -> Iterator[Any]:
    """Samples (or, ``deferred``, pending samples) of ``schedule``, read from ``slices`` of ``ds``; ``row`` is this
    process's row of ``counters`` (stats.py). Lazy: nothing is opened before the first ``next()``."""
    todo = still_needed(slices, schedule)
    # (an episode cut between two consumers is read whole by both: windows need its neighbours)
    reader = SliceReader(ds.store, ds.manifest, verify=ds.verify_checksums, retries=ds.retries,
                         backoff_s=ds.backoff_s)
    shard_paths = ds.manifest.index.shards["path"]

    def loaded() -> Iterator[LoadedEpisode]:
        for shard, rec in reader.records(todo):
            yield LoadedEpisode(rec, shard=shard_paths[shard], tabular_keys=ds.tabular_keys,
                                camera_keys=ds.camera_keys, windows=ds.windows, tasks=ds.manifest.tasks,
                                stream=position.world.consumer, images=ds.image_keys,
                                transformed=ds.transformed_images)

    prefetch = Prefetcher(loaded, ds.readahead) if todo else iter(())
    decoders = ClipDecoders(device=ds.decode_device, keep=ds.keep_frames, depth=ds.depth,
                            run_cache_bytes=ds.decode_cache_bytes,
                            idle=ds.idle_policy.begin() if not deferred else None)
    flusher = Flusher(counters, row)
    yielded = 0

    def snapshot() -> dict[str, float]:
        d, f = decoders.stats, reader.stats
        return {"samples": yielded, "decode_seconds": d.decode_seconds, "fetch_seconds": f.fetch_seconds,
                "fetch_wait_seconds": getattr(prefetch, "wait_seconds", 0.0), "bytes_read": f.bytes_read,
                "requests": f.requests, "retries": f.retries, "episodes_read": f.records,
                "decoder_opens": d.decoder_opens, "decoder_reuses": d.decoder_reuses,
                "decode_calls": d.decode_calls, "frames_decoded": d.frames_decoded}

    pending = pending_samples(schedule, prefetch)
    if deferred:
        pending = ship_once(pending)
    try:
        while True:
            chunk = list(islice(pending, ds.decode_batch))
            if not chunk:
                break
            samples = chunk if deferred else materialize(
                chunk, decoders, tolerance_s=ds.tolerance_s, return_uint8=ds.return_uint8,
                image_transforms=ds.image_transforms)
            for sample in samples:
                position.yielded += 1
                yielded += 1
                yield sample
            flusher.flush(snapshot())
    finally:
        pending.close()
        if isinstance(prefetch, Prefetcher):
            prefetch.close()
        decoders.close()
        flusher.flush(snapshot())
        release_free_memory()  # epoch over: hand freed pages back (heap.py)
