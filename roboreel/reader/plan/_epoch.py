"""Who reads what in an epoch: shard order, the rank/worker split, and each consumer's episode stream.

Pure functions of the manifest and (seed, epoch, world size, workers): no I/O, so every rank and worker computes
the same plan independently, tests can check invariants directly, and a resumed run recomputes it exactly.

A *consumer* is one (rank, DataLoader worker) pair. The epoch's frames, in (shuffled) shard order, are cut into
contiguous runs by count, first across ranks, then each rank's run across its workers: a consumer reads one
contiguous run of shards (partial shards at its two ends: the reader range-requests them) and emits exactly its
quota of frames. An episode cut at a run boundary is read by both consumers, each emitting only its own frames
(windows still see the whole episode). Quotas:

- ranks: with ``equal_steps`` (the default when world_size > 1) every rank gets ``N // world_size`` samples and
  the last ``N mod world_size`` frames of the epoch's order are dropped (torch's DistributedSampler(drop_last)
  semantics: fewer than world_size samples, different ones each epoch when shuffled), so no rank ever waits for
  another in an all-reduce; otherwise the first ``N mod world_size`` ranks get one more.
- workers: with ``batch_size`` every worker but one gets whole batches, so ``len(DataLoader)`` (which assumes
  one partial batch at most) equals the batches that come out; otherwise counts differ by at most one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roboreel.formats.manifest import Manifest

# Domain tags keep the random streams of different decisions independent (SeedSequence entropy, never sums).
TAG_SHARDS = 0x5A4D
TAG_POOL = 0x9001
TAG_FRAMES = 0xF4A3


@dataclass(frozen=True, eq=False)
class Slice:
    """A contiguous run of one shard to read: its episodes, in file order, and per episode the frames [a, b)
    this consumer emits (``ranges``; None: every frame of every episode). ``sizes`` carries the episodes'
    lengths when the plan read them from the index in bulk (None: look them up).

    A whole shard's ``episodes`` and ``sizes`` are int64 views into the index's core arrays (no copy: a consumer
    of half a million episodes holds no Python int per episode); cut ones are tuples."""

    shard: int  # position in the index's shard table
    episodes: Sequence[int]
    ranges: tuple[tuple[int, int], ...] | None = None
    sizes: Sequence[int] | None = None

    def episode_lengths(self, lengths: Mapping[int, int]) -> Sequence[int]:
        return self.sizes if self.sizes is not None else tuple(lengths[e] for e in self.episodes)

    def frame_ranges(self, lengths: Mapping[int, int]) -> tuple[tuple[int, int], ...]:
        return self.ranges if self.ranges is not None else tuple((0, int(n)) for n in self.episode_lengths(lengths))


@dataclass(frozen=True)
class World:
    """Where this consumer sits: ``rank`` of ``world_size`` processes, ``worker`` of ``num_workers`` loaders."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={self.rank}, world_size={self.world_size}")
        if self.num_workers < 1 or not 0 <= self.worker < self.num_workers:
            raise ValueError(f"need 0 <= worker < num_workers, got worker={self.worker}, num_workers={self.num_workers}")

    @property
    def consumers(self) -> int:
        return self.world_size * self.num_workers

    @property
    def consumer(self) -> int:
        return self.rank * self.num_workers + self.worker


def detect_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): the arguments, else torch.distributed when initialised, else RANK/WORLD_SIZE, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError(f"give both rank and world_size or neither, got rank={rank}, world_size={world_size}")
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover - torch is a dependency, but plan/ itself does not need it
        pass
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return 0, 1


def detect_worker() -> tuple[int, int]:
    """(worker id, num_workers) of the current DataLoader worker, (0, 1) outside workers."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def shard_order(num_shards: int, *, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """The epoch's shard order: a seeded permutation (the same on every rank), or file order."""
    if not shuffle:
        return list(range(num_shards))
    rng = np.random.default_rng(np.random.SeedSequence([TAG_SHARDS, seed, epoch]))
    return [int(i) for i in rng.permutation(num_shards)]


@dataclass(frozen=True)
class Selection:
    """What an epoch reads, in manifest order: the shards holding a selected episode and their selected frames.
    Shard-level arrays only (O(shards)), so planning an epoch never walks every episode in Python."""

    shards: np.ndarray  # shard positions
    frames: np.ndarray  # selected frames per shard
    episodes: np.ndarray | None  # the selected episode indices (sorted), None: all

    @property
    def total(self) -> int:
        return int(self.frames.sum())


def selection(manifest: Manifest, episodes: Iterable[int] | None = None) -> Selection:
    """The shards and frames an ``episodes`` filter selects (None: every episode)."""
    ix = manifest.index
    counts = ix.shards["episodes"]
    if episodes is None:
        keep = np.nonzero(counts > 0)[0]
        return Selection(keep, ix.shard_frames()[keep], None)
    chosen = np.unique(np.fromiter((int(e) for e in episodes), dtype=np.int64))
    ids = ix.lengths.ids
    rows = np.searchsorted(ids, chosen)
    known = (rows < len(ids)) & (ids[np.minimum(rows, max(len(ids) - 1, 0))] == chosen) if len(ids) else rows < 0
    if not known.all():
        raise KeyError(f"episodes {chosen[~known][:10].tolist()} are not in the dataset")
    shard_of = np.searchsorted(ix.shards["first"], rows, side="right") - 1
    frames = np.bincount(shard_of, weights=ix.lengths.array[rows], minlength=ix.num_shards).astype(np.int64)
    keep = np.unique(shard_of)
    return Selection(keep, frames[keep], chosen)


def shard_slice(manifest: Manifest, sel: Selection, pos: int) -> Slice:
    """Shard ``pos`` whole, or its selected episodes, with their lengths (read in bulk from the index)."""
    ix = manifest.index
    first, n = int(ix.shards["first"][pos]), int(ix.shards["episodes"][pos])
    eps, sizes = ix.lengths.ids[first:first + n], ix.lengths.array[first:first + n]
    if sel.episodes is not None:
        keep = np.isin(eps, sel.episodes)
        eps, sizes = eps[keep], sizes[keep]
    return Slice(pos, eps, sizes=sizes)


def take(manifest: Manifest, sel: Selection, order: Sequence[int], lo: int, hi: int) -> list[Slice]:
    """Frames ``[lo, hi)`` of the epoch whose shards come in ``order`` (positions into ``sel``), as slices.
    Shard-level arithmetic finds the shards that overlap; only those are expanded into episodes, and only the
    (at most two) cut ones into frame ranges."""
    if hi <= lo or not len(order):
        return []
    frames = sel.frames[np.asarray(order, dtype=np.int64)]
    ends = np.cumsum(frames)
    out: list[Slice] = []
    i = int(np.searchsorted(ends, lo, side="right"))
    while i < len(order) and ends[i] - frames[i] < hi:
        start = int(ends[i] - frames[i])
        whole = shard_slice(manifest, sel, int(sel.shards[order[i]]))
        if start >= lo and ends[i] <= hi:
            out.append(whole)
        else:
            eps, ranges, sizes, pos = [], [], [], start
            for e, n in zip(whole.episodes.tolist(), whole.sizes.tolist(), strict=True):
                a, b = max(0, lo - pos), min(n, hi - pos)
                if a < b:
                    eps.append(e)
                    ranges.append((a, b))
                    sizes.append(n)
                pos += n
            out.append(Slice(whole.shard, tuple(eps), tuple(ranges), tuple(sizes)))
        i += 1
    return out


def rank_quotas(total: int, world_size: int, *, equal_steps: bool) -> list[int]:
    """Samples per rank: ``total // world_size`` each with ``equal_steps`` (the rest dropped), else the first
    ``total % world_size`` ranks get one more."""
    q, r = divmod(total, world_size)
    return [q + (0 if equal_steps else int(i < r)) for i in range(world_size)]


def worker_quotas(total: int, num_workers: int, *, batch_size: int | None = None) -> list[int]:
    """Samples per DataLoader worker. With ``batch_size``: whole batches dealt round-robin (as the DataLoader
    collects them), the one partial batch to the worker that yields the last batch, so the DataLoader's
    ``ceil(total / batch_size)`` batches is exactly what comes out."""
    if not batch_size:
        q, r = divmod(total, num_workers)
        return [q + int(i < r) for i in range(num_workers)]
    batches = -(-total // batch_size)
    per = [(batches // num_workers + int(i < batches % num_workers)) * batch_size for i in range(num_workers)]
    if batches:
        per[(batches - 1) % num_workers] -= batches * batch_size - total
    return per


@dataclass(frozen=True)
class SplitOptions:
    """How an epoch is split: equal samples per rank (None: when world_size > 1), and the batch size that
    worker quotas are whole multiples of (None: counts differ by at most one)."""

    equal_steps: bool | None = None
    batch_size: int | None = None

    def equal(self, world_size: int) -> bool:
        return world_size > 1 if self.equal_steps is None else bool(self.equal_steps)


def epoch_order(sel: Selection, *, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """The epoch's order of the selected shards (positions into ``sel``)."""
    return shard_order(len(sel.shards), seed=seed, epoch=epoch, shuffle=shuffle)


def rank_samples(total: int, world_size: int, split_options: SplitOptions = SplitOptions()) -> list[int]:
    """Samples every rank emits per epoch out of ``total``."""
    return rank_quotas(total, world_size, equal_steps=split_options.equal(world_size))


def consumer_range(total: int, world: World, split_options: SplitOptions = SplitOptions(),
                   *, whole_rank: bool = False) -> tuple[int, int]:
    """Frames ``[lo, hi)`` of the epoch's order that consumer ``world`` (or its whole rank) emits."""
    ranks = rank_samples(total, world.world_size, split_options)
    lo = sum(ranks[:world.rank])
    if whole_rank:
        return lo, lo + ranks[world.rank]
    workers = worker_quotas(ranks[world.rank], world.num_workers, batch_size=split_options.batch_size)
    lo += sum(workers[:world.worker])
    return lo, lo + workers[world.worker]


def consumer_slices(
    manifest: Manifest,
    world: World,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    episodes: Iterable[int] | None = None,
    split_options: SplitOptions = SplitOptions(),
    sel: Selection | None = None,
) -> list[Slice]:
    """What consumer ``world.consumer`` reads this epoch, in reading order. Pass ``sel`` (``selection(...)``
    for the same ``episodes``) to reuse it."""
    sel = selection(manifest, episodes) if sel is None else sel
    lo, hi = consumer_range(sel.total, world, split_options)
    return take(manifest, sel, epoch_order(sel, seed=seed, epoch=epoch, shuffle=shuffle), lo, hi)


def dropped_samples(manifest: Manifest, world_size: int, *, episodes: Iterable[int] | None = None,
                    split_options: SplitOptions = SplitOptions()) -> int:
    """Samples no rank emits per epoch (``N mod world_size`` with equal steps, else 0)."""
    total = selection(manifest, episodes).total
    return total - sum(rank_samples(total, world_size, split_options))


def uneven_split_message(num_slices: int, world: World) -> str | None:
    """The warning for a shard count that does not divide the consumers (None when it does)."""
    rest = num_slices % world.consumers
    if not rest:
        return None
    return (
        f"{num_slices} shards do not divide world_size x num_workers = {world.world_size} x {world.num_workers}: "
        f"the last {rest} shards of each epoch are split by episode (several consumers read parts of them); "
        f"compile with a shard count that is a multiple of {world.consumers} to read whole shards only"
    )


def stream_arrays(slices: list[Slice], lengths: Mapping[int, int]) -> tuple[np.ndarray, ...]:
    """The consumer's stream as int64 arrays: episodes, their lengths, and the frames [start, stop) it emits."""
    if not slices:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    order = np.concatenate([np.asarray(s.episodes, dtype=np.int64) for s in slices])
    sizes = np.concatenate([np.asarray(s.episode_lengths(lengths), dtype=np.int64) for s in slices])
    starts, stops = np.zeros_like(sizes), sizes.copy()
    at = 0
    for s in slices:
        if s.ranges is not None:
            r = np.asarray(s.ranges, dtype=np.int64).reshape(-1, 2)
            starts[at:at + len(r)], stops[at:at + len(r)] = r[:, 0], r[:, 1]
        at += len(s.episodes)
    return order, sizes, starts, stops
