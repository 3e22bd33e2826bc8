"""Resume arithmetic: from "the trainer has received b batches" to "worker w has emitted n samples".

A ``torch.utils.data.DataLoader`` over an IterableDataset with ``num_workers = K > 0`` (and the default
``in_order=True``) hands out batches round-robin: batch ``j`` of every still-active worker, in worker order,
then batch ``j + 1``, and so on; a worker whose data ran out is skipped from then on. Each worker batches its own
samples (``batch_size``; its last batch is partial unless ``drop_last``). So the sequence the trainer sees is a
pure function of the per-worker sample counts, and the first ``b`` batches pin down exactly how many samples each
worker produced: no sample counting has to cross process boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def worker_batches(samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches one worker yields from ``samples`` samples."""
    return samples // batch_size if drop_last else -(-samples // batch_size)


def consumed_per_worker(
    batches: int, samples_per_worker: Sequence[int], *, batch_size: int, drop_last: bool = False
) -> list[int]:
    """Samples each worker had emitted once the trainer received ``batches`` batches (round-robin delivery)."""
    if batches < 0 or batch_size < 1:
        raise ValueError(f"need batches >= 0 and batch_size >= 1, got batches={batches}, batch_size={batch_size}")
    have = [worker_batches(n, batch_size, drop_last) for n in samples_per_worker]
    if batches > sum(have):
        raise ValueError(f"batches={batches} is more than this rank's epoch holds ({sum(have)} batches of {batch_size})")
    taken = [0] * len(have)
    left = batches
    while left:
        active = [w for w, n in enumerate(have) if taken[w] < n]
        rounds = min(min(have[w] - taken[w] for w in active), left // len(active))
        if rounds == 0:  # a partial round: the first `left` active workers, in order
            for w in active[:left]:
                taken[w] += 1
            break
        for w in active:
            taken[w] += rounds
        left -= rounds * len(active)
    return [min(t * batch_size, n) for t, n in zip(taken, samples_per_worker, strict=True)]


@dataclass(frozen=True)
class LoaderPosition:
    """Where each worker's stream stands after ``batches`` batches, and which stream each new worker serves.

    A new DataLoader restarts its round-robin at worker 0, while the interrupted one would have asked worker
    ``first`` next. Serving stream ``(first + i) % K`` from new worker ``i`` makes the resumed delivery order the
    interrupted one's: both are round-robins over the streams with batches left, starting at ``first``.
    """

    consumed: tuple[int, ...]  # samples already emitted, per original worker stream
    first: int  # the stream the next batch comes from

    def stream_of(self, worker: int) -> int:
        return (self.first + worker) % len(self.consumed)


def loader_position(
    batches: int, samples_per_worker: Sequence[int], *, batch_size: int, drop_last: bool = False
) -> LoaderPosition:
    """``consumed_per_worker`` plus the stream that delivers the next batch."""
    consumed = consumed_per_worker(batches, samples_per_worker, batch_size=batch_size, drop_last=drop_last)
    have = [worker_batches(n, batch_size, drop_last) for n in samples_per_worker]
    taken = [-(-c // batch_size) for c in consumed]
    active = [(taken[w], w) for w in range(len(have)) if taken[w] < have[w]]
    return LoaderPosition(tuple(consumed), min(active)[1] if active else 0)
