"""Pooled episodes kept across epochs in one process, for a dataset small enough to hold whole: ``EpisodeCache``.

Why: before an epoch's first sample can leave the pool, its consumer reads the records of the first
``episode_pool_size`` episodes (the shard's tar members, their checksums, the rows' parquet, the numpy columns),
~2 ms of one core each, while the decode threads wait for the first batch. On a dataset whose epoch lasts a
fraction of a second that is a tenth of the wall time, every epoch (docs/benchmarks.md, "Small frames"). Kept
here, the episodes of a small dataset are read once per process; later epochs take them from memory.

What is kept is a ``LoadedEpisode`` itself (its columns and compressed clips; no decoded pixels), read-only once
made, so two epochs, or two iterations, may share it. Its key holds everything the episode was made from (the
consumer's feature keys, windows and images, the shard, the episode and its clip stream), so a dataset that reads
with other settings (a mixture's member, a world with other workers) never gets an episode made for another.

The bound is per process, like the idle decoders' (decode/_idle_policy.py): a DataLoader worker keeps what it
reads, and with shards dealt afresh each epoch every worker ends up holding the whole dataset. Episodes past the
budget are read every epoch, as without the cache. A dataset updated on disk after a process kept its episodes is
read as it was opened: the files of a published version are never rewritten (docs/incremental.md), so a kept
episode and a shard read later are of one version, or the read fails naming the update.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from roboreel.reader.plan._pool import LoadedEpisode

AUTO_KEEP_BYTES = 64 << 20  # automatic: kept when every selected shard together is at most this


def auto_budget(shard_bytes: int) -> int:
    """The automatic bound for a selection of ``shard_bytes``: room for all of it (twice its bytes at most: the
    rows are kept as numpy columns, larger than their compressed parquet) when it is at most AUTO_KEEP_BYTES,
    else 0."""
    return 2 * AUTO_KEEP_BYTES if shard_bytes <= AUTO_KEEP_BYTES else 0


class EpisodeCache:
    """Loaded episodes by key, at most ``budget`` bytes (``LoadedEpisode.nbytes``) in all; 0 keeps none."""

    def __init__(self, budget: int) -> None:
        self.budget = max(0, int(budget))
        self._episodes: dict[Hashable, LoadedEpisode] = {}
        self.nbytes = 0
        self._lock = threading.Lock()  # prefetch threads of two live iterations may put at once

    def __reduce__(self) -> tuple[type[EpisodeCache], tuple[int]]:
        """Pickled empty, with its budget: a spawned DataLoader worker reads and keeps its own."""
        return EpisodeCache, (self.budget,)

    def get(self, key: Hashable) -> LoadedEpisode | None:
        return self._episodes.get(key)

    def put(self, key: Hashable, episode: LoadedEpisode) -> None:
        """Keep ``episode`` if it fits what is left of the budget (first come, first kept: nothing is evicted, so
        a dataset larger than the budget keeps a fixed part of itself instead of churning)."""
        with self._lock:
            if key in self._episodes or self.nbytes + episode.nbytes > self.budget:
                return
            self._episodes[key] = episode
            self.nbytes += episode.nbytes

    def clear(self) -> None:
        with self._lock:
            self._episodes.clear()
            self.nbytes = 0

    def __len__(self) -> int:
        return len(self._episodes)
