"""The epoch (and resume point) every DataLoader worker reads at each epoch's start: ``EpochBoard``.

Why a board: a DataLoader worker reads its own copy of the dataset, made when the worker starts. Without
``persistent_workers`` that is every epoch, after the trainer's ``set_epoch``, so the copy is current. With
persistent workers torch builds the workers once and, for every later epoch, only calls ``iter()`` on each worker's
old copy (``_MultiProcessingDataLoaderIter._reset`` sends ``_ResumeIteration``; the worker loop then re-creates
its fetcher, which calls ``iter(dataset)``): a ``set_epoch(7)`` or a ``load_state_dict`` made in the main process
after the first epoch never reaches those copies. So the main process posts what the next iteration reads here, in
shared memory created with the dataset (it travels to workers under fork and spawn alike, as stats.SharedCounters
does), and a worker checks the board when an iteration starts: a newer post than the one its copy was made
with replaces its epoch and resume point; otherwise its copy is current (a fresh worker, or the main process).
The same trap, and the same torch shared-memory remedy, in Hugging Face datasets: huggingface/datasets#6673
(``IterableDataset.set_epoch`` ignored with ``persistent_workers=True``), fixed by #6710.

Posts come from the main process only, before it iterates; a worker never posts (torchdata's StatefulDataLoader
restores each worker's own state inside that worker, and one worker's post must not move the others).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

CAPACITY = 1 << 16  # bytes of the posted resume state (JSON): a state is a few hundred bytes per 100 workers


class EpochBoard:
    """``head`` = [post number, epoch, payload bytes] and ``payload`` (the resume state as JSON), shared memory."""

    def __init__(self) -> None:
        self.head = torch.zeros(3, dtype=torch.int64).share_memory_()
        self.payload = torch.zeros(CAPACITY, dtype=torch.uint8).share_memory_()

    def post(self, epoch: int, resume: Mapping[str, Any] | None) -> int:
        """Post what the next iteration reads; returns the post's number (the poster's copy is current with it)."""
        data = b"" if resume is None else json.dumps(resume).encode()
        if len(data) > CAPACITY:
            raise ValueError(f"a resume state of {len(data)} bytes does not fit the epoch board ({CAPACITY} bytes)")
        if data:
            self.payload[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        number = int(self.head[0]) + 1
        self.head[1], self.head[2] = int(epoch), len(data)
        self.head[0] = number  # last: a reader that sees the new number sees its epoch and payload
        return number

    def read(self) -> tuple[int, int, dict[str, Any] | None]:
        """(post number, epoch, resume state or None) as last posted (number 0: nothing posted yet)."""
        number, epoch, size = (int(v) for v in self.head.tolist())
        resume = json.loads(self.payload[:size].numpy().tobytes()) if size else None
        return number, epoch, resume
