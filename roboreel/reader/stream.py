"""The stream core ``CompiledDataset`` and ``MixtureDataset`` share: sizes per rank and worker, iteration, resume
and counters. A dataset differs from a mixture only in the samples an epoch holds (``_epoch_samples``) and in how
one consumer's pending samples are made (``_consume``: one schedule, or a schedule per member and the draws).

Why one place: ``len()``, the rank/worker split, the resume point and the counters must agree between the two
(lerobot-train and DDP rely on ``len`` being exact), and a change made to one and not the other is a silent bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from roboreel.reader.consumer import Decoding, Position
from roboreel.reader.decode import isolate_inherited_heap, pin_mmap_threshold
from roboreel.reader.epochs import EpochState
from roboreel.reader.plan import PendingSample, World, detect_rank, detect_worker, rank_samples, worker_quotas


class StreamCore(EpochState, IterableDataset):
    """Base of the two iterable datasets. Subclasses set ``rank``, ``world_size``, ``split_options``, ``_counters``
    and what ``_decoding`` gathers (``decode_options`` and the decode device it resolved to, ``keep_frames``,
    ``depth``, ``image_clips``, ``return_uint8``, ``image_transforms``, ``idle_policy``), and give
    ``_epoch_samples`` and ``_consume``."""

    spread: int
    spread_is_default: bool = False  # neither ``spread`` nor ``batch_size`` was given: a loader may choose it

    def use_batch_share(self, share: int) -> None:
        """Called by ``roboreel.loader``: each consumer gives a batch ``share`` samples, so that is the ``spread``
        the default order needs for no near-duplicate within a batch (plan/_shuffled.py); a smaller spread keeps
        fewer GOP runs open, so fewer decoders and decoded runs wait. A ``spread`` or ``batch_size`` given to the
        dataset is kept."""
        if self.spread_is_default and share >= 1:
            self.spread = int(share)

    def _decoding(self) -> Decoding:
        """How this dataset's frames decode now (consumer.Decoding): read once per iteration, so a
        ``set_image_transforms`` reaches the next one."""
        return Decoding(self.decode_options, self.decode_device, self.keep_frames, self.depth, self.image_clips,
                        self.return_uint8, self.image_transforms, self.idle_policy)

    def _epoch_samples(self) -> int:
        """Samples of one epoch, all ranks together."""
        raise NotImplementedError

    def _consume(self, epoch: int, world: World, skip: int, row: int, *, deferred: bool) -> Iterator[Any]:
        """Consumer ``world``'s samples of ``epoch`` after its first ``skip`` (pending when ``deferred``), its
        counters in ``row``; sets ``self._position``."""
        raise NotImplementedError

    def _world(self, worker: int = 0, num_workers: int = 1) -> World:
        rank, world_size = detect_rank(self.rank, self.world_size)
        return World(rank, world_size, worker, num_workers)

    # -- sizes ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Samples this rank emits per epoch (all its workers together): exactly what iterating yields. With
        ``batch_size`` given, ``len(DataLoader(ds, batch_size=...))`` is exact for any number of workers."""
        return self.rank_samples()[self._world().rank]

    def rank_samples(self) -> list[int]:
        """Samples every rank emits per epoch (the same every epoch: quotas depend on the total only). Equal with
        ``equal_steps`` (the default when world_size > 1), so DDP ranks take the same number of steps and none
        waits forever."""
        return rank_samples(self._epoch_samples(), self._world().world_size, self.split_options)

    def dropped_samples(self) -> int:
        """Samples of the epoch that no rank emits: ``N mod world_size`` with equal steps, else 0 (docs/reader.md)."""
        return self._epoch_samples() - sum(self.rank_samples())

    def worker_samples(self, num_workers: int) -> list[int]:
        """Samples each of this rank's ``num_workers`` DataLoader workers emits per epoch."""
        return worker_quotas(len(self), max(1, num_workers), batch_size=self.split_options.batch_size)

    # -- iteration --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.decode_device != "cpu":
            raise RuntimeError(
                f"{type(self).__name__}(decode=DecodeOptions(device={self.decode_device!r})) decodes batches on the "
                "GPU in the main process: read it with roboreel.loader(dataset, batch_size=..., num_workers=...) "
                "(docs/gpu.md). Iterating it directly or through a torch DataLoader would decode in DataLoader "
                "workers, where CUDA cannot be used")
        return self._iterate(deferred=False)

    def iter_pending(self) -> Iterator[PendingSample]:
        """The same stream as ``iter()``, undecoded: compressed pending samples (a clip's bytes ride with its first
        reference only, deferred.ship_once), for ``roboreel.loader``'s decode stage. Any decode_device."""
        return self._iterate(deferred=True)

    def _iterate(self, *, deferred: bool) -> Iterator[Any]:
        isolate_inherited_heap()  # first thing in a forked worker: see _forksafe.py
        if not deferred:  # this process decodes (roboreel.loader's process sets its own threshold)
            pin_mmap_threshold()  # a flat C heap over many epochs: see _heap.py
        epoch = self._next_epoch()
        worker, num_workers = detect_worker()
        world = self._world(worker, num_workers)
        skip, stream = self._take_resume(world, epoch)
        row = 1 + world.worker if get_worker_info() is not None else 0  # this process's row of the counters
        world = World(world.rank, world.world_size, stream, world.num_workers)  # the stream this worker serves
        return self._consume(epoch, world, skip, row, deferred=deferred)

    def _start(self, epoch: int, world: World, skip: int, total: int) -> Position:
        """Check ``skip`` against the consumer's ``total`` samples and record the live iterator's place."""
        if skip > total:
            raise ValueError(f"resume position {skip} is past this worker's {total} samples")
        self._position = position = Position(epoch, world, skip)
        return position

    # -- observability ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, float | int]:
        """Counters summed over this process and every DataLoader worker so far (decode/fetch seconds, bytes,
        decoder opens/reuses, ...). ``reset_stats()`` zeroes them."""
        return {**self._counters.totals(), "dropped_samples": self.dropped_samples()}

    def reset_stats(self) -> None:
        self._counters.reset()

