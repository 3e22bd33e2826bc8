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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from roboreel.formats.manifest import Manifest

# Domain tags keep the random streams of different decisions independent (SeedSequence entropy, never sums).
TAG_SHARDS = 0x5A4D
TAG_POOL = 0x9001
TAG_FRAMES = 0xF4A3


@dataclass(frozen=True)
class Slice:
    """A contiguous run of one shard to read: its episodes, in file order, and per episode the frames [a, b)
    this consumer emits (``ranges``; None: every frame of every episode)."""

    shard: int  # position in Manifest.shards
    episodes: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...] | None = None

    def frame_ranges(self, lengths: dict[int, int]) -> tuple[tuple[int, int], ...]:
        return self.ranges if self.ranges is not None else tuple((0, lengths[e]) for e in self.episodes)


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
    except ImportError:  # pragma: no cover - torch is a dependency, but plan.py itself does not need it
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


def selected_shards(manifest: Manifest, episodes: Iterable[int] | None) -> list[Slice]:
    """Every shard holding a selected episode, with only those episodes, in manifest order."""
    chosen = None if episodes is None else set(episodes)
    out = []
    for i, shard in enumerate(manifest.shards):
        eps = tuple(e for e in shard.episodes if chosen is None or e in chosen)
        if eps:
            out.append(Slice(i, eps))
    return out


def split(slices: Sequence[Slice], lengths: dict[int, int], quotas: Sequence[int]) -> list[list[Slice]]:
    """Cut ``slices`` (in epoch order) into contiguous runs of ``quotas[i]`` frames, one per consumer; frames
    past ``sum(quotas)`` are dropped. An episode may be cut between two consumers (each gets its frame range)."""
    out: list[list[Slice]] = [[] for _ in quotas]
    part, room = 0, quotas[0] if quotas else 0
    for s in slices:
        for e, (a, n) in zip(s.episodes, s.frame_ranges(lengths), strict=True):
            while a < n:
                while room == 0:
                    part += 1
                    if part >= len(quotas):
                        return out
                    room = quotas[part]
                b = min(n, a + room)
                runs = out[part]
                if runs and runs[-1].shard == s.shard:
                    prev = runs[-1]
                    runs[-1] = Slice(s.shard, prev.episodes + (e,), prev.frame_ranges(lengths) + ((a, b),))
                else:
                    runs.append(Slice(s.shard, (e,), ((a, b),)))
                room -= b - a
                a = b
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


def epoch_slices(manifest: Manifest, *, seed: int, epoch: int, shuffle: bool,
                 episodes: Iterable[int] | None = None) -> list[Slice]:
    """Every selected shard's slice in the epoch's order."""
    slices = selected_shards(manifest, episodes)
    return [slices[i] for i in shard_order(len(slices), seed=seed, epoch=epoch, shuffle=shuffle)]


def rank_slices(manifest: Manifest, world: World, *, seed: int, epoch: int, shuffle: bool,
                episodes: Iterable[int] | None = None, split_options: SplitOptions = SplitOptions()) -> list[Slice]:
    """What rank ``world.rank`` reads this epoch (all its workers together)."""
    ordered = epoch_slices(manifest, seed=seed, epoch=epoch, shuffle=shuffle, episodes=episodes)
    lengths = manifest.lengths
    total = slice_frames(ordered, lengths)
    quotas = rank_quotas(total, world.world_size, equal_steps=split_options.equal(world.world_size))
    return split(ordered, lengths, quotas)[world.rank]


def consumer_slices(
    manifest: Manifest,
    world: World,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    episodes: Iterable[int] | None = None,
    split_options: SplitOptions = SplitOptions(),
) -> list[Slice]:
    """What consumer ``world.consumer`` reads this epoch, in reading order."""
    mine = rank_slices(manifest, world, seed=seed, epoch=epoch, shuffle=shuffle, episodes=episodes,
                       split_options=split_options)
    lengths = manifest.lengths
    quotas = worker_quotas(slice_frames(mine, lengths), world.num_workers, batch_size=split_options.batch_size)
    return split(mine, lengths, quotas)[world.worker]


def dropped_samples(manifest: Manifest, world_size: int, *, episodes: Iterable[int] | None = None,
                    split_options: SplitOptions = SplitOptions()) -> int:
    """Samples no rank emits per epoch (``N mod world_size`` with equal steps, else 0)."""
    total = slice_frames(selected_shards(manifest, episodes), manifest.lengths)
    return total - sum(rank_quotas(total, world_size, equal_steps=split_options.equal(world_size)))


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


def slice_frames(slices: Sequence[Slice], lengths: dict[int, int]) -> int:
    """How many frames (samples) a list of slices holds."""
    return sum(b - a for s in slices for a, b in s.frame_ranges(lengths))
