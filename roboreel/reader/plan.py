"""Who reads what in an epoch: shard order, the rank/worker split, and each consumer's episode stream.

Pure functions of the manifest and (seed, epoch, world size, workers): no I/O, so every rank and worker computes
the same plan independently, tests can check invariants directly, and a resumed run recomputes it exactly.

A *consumer* is one (rank, DataLoader worker) pair. The (shuffled) shard list is split across ranks, then each
rank's part across its workers, with the same rule at both levels: the largest prefix whose length divides the
number of parts is dealt out as whole shards, round-robin; only the remaining few are split by episode, in
contiguous runs balanced by frame count. So when the shard count divides world_size x num_workers every consumer
reads whole shards; otherwise a consumer reads just its run of a few shards (the reader seeks or range-requests
to it), and the extra traffic is bounded by those shards instead of multiplying the dataset. A rank's samples do
not depend on its number of workers.
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
    """A contiguous run of one shard to read: its episodes, in file order."""

    shard: int  # position in Manifest.shards
    episodes: tuple[int, ...]


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


def split(slices: Sequence[Slice], lengths: dict[int, int], consumers: int) -> list[list[Slice]]:
    """Deal ``slices`` (already in epoch order) to ``consumers``: whole shards round-robin for the divisible
    prefix, the remainder's episodes in contiguous runs balanced by frames. Returns one list per consumer."""
    out: list[list[Slice]] = [[] for _ in range(consumers)]
    whole = len(slices) - len(slices) % consumers
    for i, s in enumerate(slices[:whole]):
        out[i % consumers].append(s)
    rest = [(s.shard, e) for s in slices[whole:] for e in s.episodes]
    if not rest:
        return out
    total = sum(lengths[e] for _, e in rest)
    done = 0
    for shard, e in rest:
        # The episode goes to the consumer whose share of the frames holds its midpoint: monotone, hence
        # contiguous runs, and every consumer's share is within one episode of total / consumers.
        g = min(consumers - 1, int(consumers * (done + lengths[e] / 2) / total))
        done += lengths[e]
        runs = out[g]
        if runs and runs[-1].shard == shard:
            runs[-1] = Slice(shard, runs[-1].episodes + (e,))
        else:
            runs.append(Slice(shard, (e,)))
    return out


def consumer_slices(
    manifest: Manifest,
    world: World,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    episodes: Iterable[int] | None = None,
) -> list[Slice]:
    """What consumer ``world.consumer`` reads this epoch, in reading order."""
    slices = selected_shards(manifest, episodes)
    ordered = [slices[i] for i in shard_order(len(slices), seed=seed, epoch=epoch, shuffle=shuffle)]
    lengths = {e.index: e.length for e in manifest.episodes}
    mine = split(ordered, lengths, world.world_size)[world.rank]
    return split(mine, lengths, world.num_workers)[world.worker]


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
    return sum(lengths[e] for s in slices for e in s.episodes)
