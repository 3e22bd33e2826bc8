"""The epoch's slices of every selected shard, in order: the tests' view of a whole epoch's plan (O(episodes),
which the reader itself never builds: it plans a consumer's range only)."""

from __future__ import annotations

from collections.abc import Iterable

from roboreel.formats.manifest import Manifest
from roboreel.reader.plan._epoch import Slice, epoch_order, selection, shard_slice


def epoch_slices(manifest: Manifest, *, seed: int, epoch: int, shuffle: bool,
                 episodes: Iterable[int] | None = None) -> list[Slice]:
    """Every selected shard's slice in the epoch's order."""
    sel = selection(manifest, episodes)
    return [shard_slice(manifest, sel, int(sel.shards[i]))
            for i in epoch_order(sel, seed=seed, epoch=epoch, shuffle=shuffle)]
