"""Which epoch (and resume point) a dataset's next iteration reads, in this process and in persistent DataLoader
workers, and the resume state that says so: ``EpochState``, shared by ``CompiledDataset`` and ``MixtureDataset``
(their ``StreamCore``, stream.py, gives ``_world`` and ``worker_samples``; each dataset its ``_stream_id``).

Why one place: the rules are subtle and must be the same for both. ``set_epoch`` / ``load_state_dict`` in the
main process post the epoch and resume point on an ``EpochBoard`` (board.py) that persistent workers read
when an iteration starts; ``roboreel.loader`` tells the dataset when workers began an epoch
(``_begun_in_workers``); an ``iter()`` without ``set_epoch`` reads the next epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.utils.data import get_worker_info

from roboreel.reader.board import EpochBoard
from roboreel.reader.plan import STATE_FORMAT, STATE_VERSION, World, checked_state, loader_state, resume_point


class EpochState:
    """Mixin: ``_epoch`` + ``_iters`` (the next iteration's epoch), ``_resume`` (a loaded state not yet used) and
    ``_position`` (the live iterator's place), with the board that carries them to persistent workers."""

    _resume: dict[str, Any] | None
    _position: Any

    def _init_epochs(self) -> None:
        self._epoch, self._iters = 0, 0
        self._resume, self._position = None, None
        self._board, self._seen = EpochBoard(), 0  # persistent workers' epoch (board.py)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration reads (reshuffles). Call it every epoch, before iterating."""
        self._epoch, self._iters = int(epoch), 0
        if self._resume is not None and self._resume["epoch"] != self._epoch:
            self._resume = None
        # The last iterator's place belongs to the epoch it read: a state saved now must name the epoch set here,
        # at its start (or at the loaded resume point), not the finished one's position.
        self._position = None
        self._post()

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter()`` in this process reads."""
        return self._epoch + self._iters

    def _restore(self, resume: dict[str, Any]) -> None:
        """A checked saved state: the next iteration continues its epoch at its next sample."""
        self._resume = resume
        self._epoch, self._iters, self._position = int(resume["epoch"]), 0, None
        self._post()

    def _next_epoch(self) -> int:
        """The epoch an iteration starting now reads (taking the board's newer post in a worker)."""
        if get_worker_info() is not None:
            self._follow_board()  # persistent workers: the epoch set in the main process since this copy was made
        epoch = self._epoch + self._iters
        self._iters += 1
        return epoch

    def _post(self) -> None:
        """Post this epoch and resume point for persistent DataLoader workers (board.py); main process only."""
        if get_worker_info() is None:
            self._seen = self._board.post(self.epoch, self._resume)

    def _begun_in_workers(self, epoch: int) -> None:
        """DataLoader workers began reading ``epoch`` for this process: ``state_dict`` now speaks of it, the next
        ``iter()`` without ``set_epoch`` reads the next one (as iterating here, or persistent workers' own copies,
        would) and the resume point is spent."""
        self._epoch, self._iters, self._resume, self._position = epoch, 1, None, None

    def _follow_board(self) -> None:
        """In a DataLoader worker: take the main process's newer post, if any (board.py)."""
        number, epoch, resume = self._board.read()
        if number != self._seen:
            self._seen, self._epoch, self._iters, self._resume, self._position = number, epoch, 0, resume, None

    def state_dict(self, *, batches: int | None = None, loader: Any = None) -> dict[str, Any]:
        """Where the stream is, as scalars; ``load_state_dict`` on a fresh dataset continues at the next sample.

        - Iterating the dataset directly, or a DataLoader with ``num_workers=0``, or inside a worker (torchdata's
          StatefulDataLoader calls it there): ``state_dict()`` counts what this process's iterator yielded.
        - A DataLoader with ``num_workers > 0``: ``state_dict(batches=b, loader=loader)``, ``b`` = batches the
          trainer has received this epoch; the per-worker positions follow from the round-robin order.
        """
        base = {"format": STATE_FORMAT, "version": STATE_VERSION, "stream": self._stream_id}
        if batches is not None or loader is not None:
            epoch = self._position.epoch if self._position is not None else self._epoch
            return loader_state(base, epoch=epoch, world_size=self._world().world_size, batches=batches,
                                loader=loader)
        p = self._position
        if p is None:
            if self._resume is not None:
                return dict(self._resume)
            w = self._world()
            return {**base, "epoch": self._epoch, "world_size": w.world_size, "rank": w.rank, "num_workers": 1,
                    "consumed": {0: 0}}
        return {**base, "epoch": p.epoch, "world_size": p.world.world_size, "rank": p.world.rank,
                "num_workers": p.world.num_workers, "consumed": {p.world.worker: p.yielded}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration continues the saved epoch at the next sample."""
        self._restore(checked_state(state, self._stream_id))

    def _take_resume(self, world: World, epoch: int) -> tuple[int, int]:
        """(samples to skip, worker stream to serve) for this process's worker in ``epoch``."""
        state, self._resume = self._resume, None
        return resume_point(state, world, epoch, self.worker_samples)
