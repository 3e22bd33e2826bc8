"""The loader ``lerobot-train``'s loop iterates: ``roboreel.loader`` (the decode stage) or the plain DataLoader.

lerobot-train builds ``DataLoader(dataset, batch_size, num_workers, ...)`` and hands it to ``accelerator.prepare``.
For a ``CompiledDataset`` launch.py's ``prepare`` returns one of two loaders, chosen by ``--roboreel.loader``:

- ``stage`` (default): ``StageLoader`` around ``roboreel.loader(dataset, batch_size, num_workers, device)``. The
  DataLoader's workers then only read shards and ship compressed clips and frame requests; a pool of decode
  threads in the training process decodes into preallocated uint8 batches (reader/loader/_loader.py). Decoded pixels
  never cross a process boundary, which is what made it 1.2-3x faster than the DataLoader in roboreel's benches.
- ``dataloader``: the DataLoader as lerobot-train built it, prepared by accelerate as a one-process loader
  (workers decode, batches are pickled back).

Both deliver the same batches (keys, order, values; uint8 cameras, which lerobot-train divides by 255 itself),
start each pass with ``set_epoch(n)`` as accelerate's DataLoaderShard does, and resume at the same sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from roboreel.reader.dataset import CompiledDataset
from roboreel.reader.loader import DeviceLoader, loader
from roboreel.reader.mixture import MixtureDataset


def stage_unsupported(data_loader: torch.utils.data.DataLoader) -> str | None:
    """Why ``data_loader`` cannot be replaced by the decode stage, or None. The stage collates itself, so a
    custom ``collate_fn`` (lerobot-train's language collate, for datasets with language columns) keeps the
    DataLoader."""
    if data_loader.collate_fn is not torch.utils.data.default_collate:
        return f"a custom collate_fn ({getattr(data_loader.collate_fn, '__name__', data_loader.collate_fn)!r})"
    if data_loader.batch_size is None:
        return "batch_size=None"
    return None


class StageLoader:
    """What ``accelerator.prepare`` returns on the stage path: ``roboreel.loader`` with DataLoaderShard's epoch
    counting (``iteration``; every pass starts with ``set_epoch(iteration)`` and a finished pass counts one up),
    so ``cycle(loader)`` in lerobot-train reads epoch after epoch, continuing from the dataset's epoch on resume.

    Not a DataLoader subclass: accelerate's ``prepare`` returns it as it is, and ``len()``, ``dataset``,
    ``batch_size``, ``set_epoch``, ``state_dict``/``load_state_dict`` are what a training loop uses."""

    def __init__(self, inner: DeviceLoader, *, iteration: int) -> None:
        self.loader = inner
        self.iteration = iteration

    @classmethod
    def replacing(cls, data_loader: torch.utils.data.DataLoader, *, device: torch.device | None,
                  decode_threads: int | None = None, mix_workers: bool = False) -> StageLoader:
        """The stage loader for lerobot-train's ``DataLoader(CompiledDataset, ...)``: its batch size, workers and
        worker options, batches on ``device`` (None: where they decode, the CPU). A resume position the dataset
        holds (datasets.resume) is handed to the loader, so its ``state_dict()`` counts on from there."""
        dataset = data_loader.dataset
        if not isinstance(dataset, CompiledDataset | MixtureDataset):
            raise ValueError(f"the stage loader reads a roboreel CompiledDataset, got {type(dataset).__name__}")
        kwargs: dict[str, Any] = {"drop_last": data_loader.drop_last, "timeout": data_loader.timeout,
                                  "worker_init_fn": data_loader.worker_init_fn}
        if data_loader.num_workers > 0:
            kwargs.update(prefetch_factor=data_loader.prefetch_factor,
                          persistent_workers=data_loader.persistent_workers,
                          multiprocessing_context=data_loader.multiprocessing_context)
        # mix_workers False (default): the batches of the DataLoader lerobot-train made (--roboreel.loader=dataloader
        # gives the same ones, and a checkpoint of either resumes the other); True: every worker's share in each
        inner = loader(dataset, batch_size=data_loader.batch_size, num_workers=data_loader.num_workers,
                       decode_threads=decode_threads, device=device, mix_workers=mix_workers, **kwargs)
        pending = dataset.state_dict()  # before any iteration: the resume state loaded into it, if any
        if "batches" in pending:
            inner.load_state_dict(pending)
        return cls(inner, iteration=dataset.epoch)

    @property
    def dataset(self) -> CompiledDataset:
        return self.loader.dataset

    @property
    def batch_size(self) -> int:
        return self.loader.batch_size  # the batches it returns (its DataLoader's are smaller when it mixes workers)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.iteration = epoch
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.set_epoch(self.iteration)
        it = iter(self.loader)
        try:
            yield from it
        finally:
            it.close()  # also when the loop stops early: the decode thread and workers end with the pass
        self.iteration += 1

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self.iteration = int(state["epoch"])

    def close(self) -> None:
        self.loader.close()
