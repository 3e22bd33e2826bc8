"""One consumer's stream, run: what a rank's DataLoader worker (or the main process) executes for one epoch.

``SliceReader`` on a prefetch thread (tar records -> ``LoadedEpisode``) -> ``PoolSchedule`` + ``pending_samples``
(``MemberStream``; a mixture runs one per member and interleaves them) -> ``materialize`` in groups of
``decode_batch`` (or, deferred, the compressed pending samples for
``roboreel.loader``) -> samples, with the counters flushed as it goes and every thread, decoder and freed page
handed back when the iterator ends or is closed.

Separate from dataset.py because that module decides *what* a consumer reads (options, plan, resume position,
state) and this one only runs it: a generator over a schedule the dataset built. What it reads comes as two frozen
values the dataset (or mixture) hands over: ``Records`` (where episodes come from, under the dataset's
``StreamOptions``, and what they are made into) and ``Decoding`` (its ``DecodeOptions``, the device they resolved
to and what the dataset derived: kept frames, depth quantisers, output form). It changes nothing of the dataset's
but ``Position``, the live place for ``state_dict``, and never imports dataset.py, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from roboreel.formats.depth import DepthQuant
from roboreel.formats.errors import CompiledFormatError
from roboreel.formats.manifest import Manifest
from roboreel.reader.decode import (
    DEFAULT_RUN_CACHE_BYTES,
    ClipDecoders,
    IdlePolicy,
    ImageClips,
    materialize,
    release_free_memory,
    ship_once,
)
from roboreel.reader.fetch import Prefetcher, SliceReader, Store
from roboreel.reader.options import DecodeOptions, StreamOptions
from roboreel.reader.plan import (
    EpisodeCache,
    EpisodeSpec,
    LoadedEpisode,
    PendingSample,
    PoolSchedule,
    Slice,
    World,
    pending_samples,
    still_needed,
)
from roboreel.reader.stats import Flusher, SharedCounters


@dataclass(frozen=True, eq=False)
class Records:
    """Where one dataset's episode records come from and what they are made into (``MemberStream``): its store
    and manifest, read under its ``StreamOptions``; its features split into tabular ``tabular_keys`` and clipped
    ``camera_keys``; the image features decoded from its rows (``image_keys``: key -> stored in metres,
    decode/_images.py) and those ``image_transforms`` apply to; its windows (key -> int64 frame offsets); the
    episodes kept across epochs (``cache``, plan/_episode_cache.py), or None."""

    store: Store
    manifest: Manifest
    options: StreamOptions
    tabular_keys: tuple[str, ...]
    camera_keys: tuple[str, ...]
    image_keys: Mapping[str, bool]
    transformed_images: tuple[str, ...]
    windows: Mapping[str, np.ndarray]
    cache: EpisodeCache | None = None


@dataclass(frozen=True, eq=False)
class Decoding:
    """How a consumer's frames decode and what a sample looks like: the dataset's ``DecodeOptions``, the decode
    device they resolved to (``device``: where frames decode, not where batches land), the frames kept per clip of
    a windowed camera, the depth cameras' quantisers (decode/_depth.py), image features compiled as clips (float32
    always, in LeRobot's key order), ``return_uint8`` and ``image_transforms``, and the idle decoders' policy."""

    options: DecodeOptions
    device: str
    keep_frames: Mapping[str, int]
    depth: Mapping[str, DepthQuant]
    image_clips: ImageClips
    return_uint8: bool
    image_transforms: Callable[..., Any] | None
    idle_policy: IdlePolicy


class Position:
    """Where this process's live iterator is (for the in-process ``state_dict``)."""

    def __init__(self, epoch: int, world: World, start: int) -> None:
        self.epoch, self.world, self.yielded = epoch, world, start


class MemberStream:
    """One dataset's part of a consumer's epoch: its slices read on a prefetch thread, turned into the pending
    samples of its episode pool (``schedule``). A mixture (reader/mixture/_dataset.py) runs one per member dataset.

    Clip identities (``EpisodeClip.key``) must be unique among a process's live clips: ``shard_prefix`` tells
    members apart (two datasets may both hold ``shards/000000.tar`` episode 0), and an episode read again in the
    same stream (a mixture's member repeating: its next pass) gets ``stream + repeat * stride``. Lazy: nothing is
    opened before the first ``next()``."""

    def __init__(self, records: Records, schedule: PoolSchedule, slices: list[Slice], *, stream: int,
                 stride: int = 1, shard_prefix: str = "") -> None:
        todo = still_needed(slices, schedule)
        # (an episode cut between two consumers is read whole by both: windows need its neighbours)
        manifest, opts, windows = records.manifest, records.options, records.windows
        self.reader = reader = SliceReader(records.store, manifest, verify=opts.verify_checksums, retry=opts.retry)
        shard_paths = manifest.index.shards["path"]
        tabular, cameras = list(records.tabular_keys), list(records.camera_keys)
        images = {k: v for k, v in records.image_keys.items() if k in tabular}  # a mixture keeps the shared ones
        transformed = [k for k in records.transformed_images if k in images]
        spec = EpisodeSpec(tabular, cameras, windows, manifest.tasks, images, transformed)

        cache = records.cache
        if cache is not None and not cache.budget:
            cache = None
        # what an episode is made from, besides its record: part of its key in the cache (_episode_cache.py)
        made_as = (shard_prefix, tuple(tabular), tuple(cameras), tuple(images.items()), tuple(transformed),
                   tuple((k, tuple(v.tolist())) for k, v in windows.items()))
        self.kept = 0  # episodes taken from the cache instead of read

        def loaded() -> Iterator[LoadedEpisode]:
            seen: dict[tuple[int, int], int] = {}
            for s in todo:
                keys = []
                for e in s.episodes:  # an episode read again in this stream (a mixture's next pass): a new clip stream
                    repeat = seen[s.shard, int(e)] = seen.get((s.shard, int(e)), -1) + 1
                    keys.append((made_as, s.shard, int(e), stream + repeat * stride))
                kept = [cache.get(k) for k in keys] if cache is not None else [None]
                if all(ep is not None for ep in kept):
                    self.kept += len(kept)
                    yield from kept  # type: ignore[misc]
                    continue
                planned = s.episode_lengths(manifest.index.lengths)
                for key, (shard, rec), length in zip(keys, reader.records([s]), planned, strict=True):
                    check_record(rec, int(length), manifest.fps, shard_prefix + shard_paths[shard])
                    ep = LoadedEpisode(rec, shard=shard_prefix + shard_paths[shard], spec=spec, stream=key[3])
                    if cache is not None and rec.index == key[2]:  # (pending_samples names a stream out of order)
                        cache.put(key, ep)
                    yield ep

        self.prefetch = Prefetcher(loaded, opts.readahead) if todo else iter(())
        self.pending = pending_samples(schedule, self.prefetch)

    def close(self) -> None:
        self.pending.close()
        if isinstance(self.prefetch, Prefetcher):
            self.prefetch.close()


def check_record(rec: Any, length: int, fps: int, shard: str) -> None:
    """The record against what the epoch was planned from: the index's length (the plan emits that many frames:
    a shorter one silently cut the episode) and the manifest's fps (windows are offsets in seconds)."""
    if rec.length != length:
        raise CompiledFormatError(f"the episode's record says length {rec.length}, the index {length}: the index "
                                  "does not describe this shard (run roboreel validate)", file=shard, episode=rec.index)
    fps_rec = rec.meta.get("fps")
    if fps_rec is not None and int(fps_rec) != fps:
        raise CompiledFormatError(f"the episode's record says fps {fps_rec}, roboreel.json {fps} (run roboreel "
                                  "validate)", file=shard, episode=rec.index)


def run_consumer(records: Records, decoding: Decoding, schedule: PoolSchedule, slices: list[Slice],
                 position: Position, row: int, counters: SharedCounters, *, deferred: bool = False) -> Iterator[Any]:
    """Samples (or, ``deferred``, pending samples) of ``schedule``, read from ``slices`` of ``records``; ``row`` is
    this process's row of ``counters`` (stats.py). Lazy: nothing is opened before the first ``next()``."""
    member = MemberStream(records, schedule, slices, stream=position.world.consumer)
    return run_members(decoding, [member], member.pending, position, row, counters, deferred=deferred)


def run_members(decoding: Decoding, members: list[MemberStream], pending: Iterator[PendingSample],
                position: Position, row: int, counters: SharedCounters, *, deferred: bool = False) -> Iterator[Any]:
    """Decode ``pending`` (drawn from ``members``' streams) in groups of ``DecodeOptions.batch`` and yield the
    samples (or, ``deferred``, the pending samples), flushing counters as it goes; every member is closed at the
    end."""
    opts = decoding.options
    decoders = ClipDecoders(device=decoding.device, keep=dict(decoding.keep_frames), depth=dict(decoding.depth),
                            run_cache_bytes=_or_default(opts.run_cache_bytes),
                            idle=decoding.idle_policy.begin() if not deferred else None)
    flusher = Flusher(counters, row)
    yielded = 0

    def snapshot() -> dict[str, float]:
        d, fs = decoders.stats, [m.reader.stats for m in members]
        return {"samples": yielded, "decode_seconds": d.decode_seconds,
                "fetch_seconds": sum(f.fetch_seconds for f in fs),
                "fetch_wait_seconds": sum(getattr(m.prefetch, "wait_seconds", 0.0) for m in members),
                "bytes_read": sum(f.bytes_read for f in fs), "requests": sum(f.requests for f in fs),
                "retries": sum(f.retries for f in fs), "episodes_read": sum(f.records for f in fs),
                "episodes_kept": sum(m.kept for m in members),
                "decoder_opens": d.decoder_opens, "decoder_reuses": d.decoder_reuses,
                "decode_calls": d.decode_calls, "frames_decoded": d.frames_decoded}

    if deferred:
        pending = ship_once(pending)
    try:
        while True:
            chunk = list(islice(pending, opts.batch))
            if not chunk:
                break
            samples = chunk if deferred else materialize(
                chunk, decoders, tolerance_s=opts.tolerance_s, return_uint8=decoding.return_uint8,
                image_transforms=decoding.image_transforms, image_clips=decoding.image_clips)
            for sample in samples:
                position.yielded += 1
                yielded += 1
                yield sample
            if flusher.due():  # stats.FLUSH_EVERY_S; always at the end (below)
                flusher.flush(snapshot())
    finally:
        close = getattr(pending, "close", None)
        if close is not None:
            close()
        for m in members:
            m.close()
        decoders.close()
        flusher.flush(snapshot())
        # epoch over: hand freed pages back (_heap.py). Pending samples made in the training process feed
        # roboreel.loader's decode stage, which trims once its own decoders are closed: one trim, not two
        release_free_memory(trim=not (deferred and get_worker_info() is None))


def _or_default(run_cache_bytes: int | None) -> int:
    """A consumer's run cache bound: ``DecodeOptions.cache_mb``, or 96 MiB where automatic (the decode stage's
    automatic bound counts the runs of every worker, which one consumer does not see)."""
    return DEFAULT_RUN_CACHE_BYTES if run_cache_bytes is None else run_cache_bytes
