"""The GPU and loader tests' dataset makers: one windowed dataset and its plain-DataLoader batches."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from roboreel.reader import CompiledDataset, DecodeOptions
from roboreel.reader.plan._epoch import World

CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.05, 0.0, 0.1]}


def make_dataset(path, *, epoch=0, device="cpu", **kw):
    """A maker of one windowed, seeded dataset at ``epoch``: each call a fresh one, so two readers start equal."""
    def make():
        ds = CompiledDataset(str(path), delta_timestamps=WINDOWS, episode_pool_size=3, seed=5,
                             decode=DecodeOptions(device=device), **kw)
        ds.set_epoch(epoch)
        return ds

    return make


def plain(make, **kw):
    """The plain DataLoader's batches: what the loader must give bit for bit."""
    return list(DataLoader(make(), **kw))


def routed_clips(ds, num_workers, epoch):
    """Clips the loader routes in one epoch: a clip whose episode the worker split cut in two is routed (and
    decoded) once in each worker that reads part of it."""
    k = max(1, num_workers)
    return sum(len(s.episodes) for w in range(k) for s in ds._slices(World(0, 1, w, k), epoch)) * len(CAMERAS)


def on_cpu(batch):
    """A batch with its tensors moved to the CPU, for comparing a GPU batch with a CPU one."""
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
