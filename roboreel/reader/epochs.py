"""Which epoch (and resume point) a dataset's next iteration reads, in this process and in persistent DataLoader
workers: ``EpochState``, shared by ``CompiledDataset`` and ``MixtureDataset``.

Why one place: the rules are subtle and must be the same for both. ``set_epoch`` / ``load_state_dict`` in the
main process post the epoch and resume point on an ``EpochBoard`` (plan/board.py) that persistent workers read
when an iteration starts; ``roboreel.loader`` tells the dataset when workers began an epoch
(``_begun_in_workers``); an ``iter()`` without ``set_epoch`` reads the next epoch.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import get_worker_info

from roboreel.reader.plan.board import EpochBoard


class EpochState:
    """Mixin: ``_epoch`` + ``_iters`` (the next iteration's epoch), ``_resume`` (a loaded state not yet used) and
    ``_position`` (the live iterator's place), with the board that carries them to persistent workers."""

    _resume: dict[str, Any] | None
    _position: Any

    def _init_epochs(self) -> None:
        self._epoch, self._iters = 0, 0
        self._resume, self._position = None, None
        self._board, self._seen = EpochBoard(), 0  # persistent workers' epoch (plan/board.py)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration reads (reshuffles). Call it every epoch, before iterating."""
        self._epoch, self._iters = int(epoch), 0
        if self._resume is not None and self._resume["epoch"] != self._epoch:
            self._resume = None
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
        """Post this epoch and resume point for persistent DataLoader workers (plan/board.py); main process only."""
        if get_worker_info() is None:
            self._seen = self._board.post(self.epoch, self._resume)

    def _begun_in_workers(self, epoch: int) -> None:
        """DataLoader workers began reading ``epoch`` for this process: ``state_dict`` now speaks of it, the next
        ``iter()`` without ``set_epoch`` reads the next one (as iterating here, or persistent workers' own copies,
        would) and the resume point is spent."""
        self._epoch, self._iters, self._resume, self._position = epoch, 1, None, None

    def _follow_board(self) -> None:
        """In a DataLoader worker: take the main process's newer post, if any (plan/board.py)."""
        number, epoch, resume = self._board.read()
        if number != self._seen:
            self._seen, self._epoch, self._iters, self._resume, self._position = number, epoch, 0, resume, None
