"""Batches across DataLoader workers: the pending batches of ``k`` consecutive workers merged into one.

A DataLoader batch comes from one worker, so it holds only the episodes of that worker's pool (a 1/W share of the
dataset), however the pool orders them. With ``roboreel.loader(..., mix_workers=True)`` the DataLoader batches
``batch_size / num_workers`` samples and the decode stage merges ``num_workers`` consecutive pending batches (the
DataLoader's in-order round robin: one from each worker) before decoding: each batch then mixes every worker's
episodes. Merging is a concatenation of compressed requests, so frames are still decoded straight into their
batch slot, and the stream stays a pure function of the DataLoader's batches: the same every run, and a resume at
a batch boundary is a resume at ``k`` times as many DataLoader batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from roboreel.reader.decode._deferred import CameraPlan, PendingBatch


def grouped(batches: Iterable[PendingBatch], k: int) -> Iterator[PendingBatch]:
    """``batches`` merged ``k`` at a time (the last group may hold fewer); ``k == 1`` passes them through."""
    if k == 1:
        yield from batches
        return
    group: list[PendingBatch] = []
    for b in batches:
        group.append(b)
        if len(group) == k:
            yield merge_pending(group)
            group = []
    if group:
        yield merge_pending(group)


def merge_pending(batches: Sequence[PendingBatch]) -> PendingBatch:
    """One pending batch holding ``batches``' samples in order: what collating all their samples at once gives
    (each clip belongs to one worker's pool, so their clips and frame tables are disjoint)."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    cameras: dict[str, CameraPlan] = {}
    for b in batches:
        for cam, plan in b.cameras.items():
            into = cameras.get(cam)
            if into is None:
                into = cameras[cam] = CameraPlan(plan.stacked, plan.window)
            elif (into.stacked, into.window) != (plan.stacked, plan.window):
                raise ValueError(f"camera {cam!r}: batches disagree on the window ({into.window} vs {plan.window})")
            into.refs += plan.refs
    clips, wanted, runs = {}, {}, {}
    for b in batches:
        for key, clip in b.clips.items():
            if clip.data or key not in clips:
                clips[key] = clip
        for key, (queried, lanes) in b.wanted.items():
            q, lane = wanted.setdefault(key, ({}, {}))
            q.update(queried)
            lane.update({f: min(v, lane.get(f, v)) for f, v in lanes.items()})
        for key, ends in b.runs.items():
            runs.setdefault(key, {}).update(ends)
    values = {key: _concat([b.values[key] for b in batches], key) for key in first.values}
    return PendingBatch(sum(b.size for b in batches), values, cameras, clips, wanted,
                        [key for b in batches for key in b.release], sum(b.produce_seconds for b in batches), runs,
                        first.images)


def _concat(parts: list[Any], key: str) -> Any:
    """One collated column of several batches: tensors and arrays joined on the batch axis, lists joined."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, list):
        return [v for p in parts for v in p]
    if isinstance(first, dict):
        return {k: _concat([p[k] for p in parts], f"{key}.{k}") for k in first}
    raise TypeError(f"cannot join the batches' {key!r} values of type {type(first).__name__}")
