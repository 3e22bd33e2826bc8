"""The transport bound: samples/s a DataLoader reaches moving tensors of the benchmark's shapes with no decode.

On a small machine this, not decode, can be the ceiling: a sample of 3 float32 224x224 frames is 1.8 MB that
a worker converts, collates into shared memory and hands to the main process. Measuring it with the same batch
size and worker count as the runs tells how much of the gap to the decode ceiling any reader could close.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset


class _Synthetic(IterableDataset):
    """Endless samples shaped like the real ones: each camera frame made the way a reader makes it."""

    def __init__(self, shapes: list[tuple[int, ...]], return_uint8: bool) -> None:
        self.shapes, self.return_uint8 = shapes, return_uint8

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        frames = [torch.randint(0, 256, s, dtype=torch.uint8) for s in self.shapes]
        index = 0
        while True:
            sample: dict[str, torch.Tensor] = {}
            for i, f in enumerate(frames):
                sample[f"camera{i}"] = f.clone() if self.return_uint8 else f / 255.0  # a fresh tensor, as a decode makes
            sample["index"] = torch.tensor(index)
            index += 1
            yield sample


def transport_bound(shapes: list[tuple[int, ...]], *, return_uint8: bool, batch_size: int, num_workers: int,
                    prefetch_factor: int = 2, batches: int = 40, warmup: int = 3) -> float:
    """Samples/s of a DataLoader over synthetic samples with camera tensors of ``shapes`` ([C, H, W] each)."""
    kwargs = {"prefetch_factor": prefetch_factor} if num_workers else {}
    loader = DataLoader(_Synthetic(shapes, return_uint8), batch_size=batch_size, num_workers=num_workers, **kwargs)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t = time.perf_counter()
    n = 0
    for _ in range(batches):
        n += len(next(it)["index"])
    rate = n / (time.perf_counter() - t)
    del it
    return rate
